"""The import graph of a package's modules, read from their source (every `import` and `from ... import`,
at any depth, so a deferred import counts): rooms (modules), arrows (one module importing another, once
however many names), floors (the longest chain of arrows, plus one). docs/architecture.md gives these
figures; `python tests/import_graph.py train` prints them."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def modules(package: str, leave_out: tuple[str, ...] = ()) -> dict[str, Path]:
    """{dotted name: file} of every module of `package` (a package is its __init__), but those under
    `leave_out` (dotted names of subpackages)."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not any(name == out or name.startswith(out + ".") for out in leave_out):
            found[name] = path
    return found


def is_module(name: str) -> bool:
    """A module of the repository's, Python or native (its .pyi stub): `from train import _jpegcrop`
    imports a module that is no room, not the package."""
    path = REPO.joinpath(*name.split("."))
    return any(path.with_suffix(suffix).is_file() for suffix in (".py", ".pyi")) or path.is_dir()


def arrows(rooms: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the modules among `rooms` it imports}; `from a import b` is an arrow to a.b where a.b is
    a module (a submodule, kept if it is a room), else to a."""
    graph = {}
    for name, path in rooms.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{alias.name}" if is_module(f"{node.module}.{alias.name}") else node.module
                            for alias in node.names}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {target for target in targets if target in rooms and target != name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One chain of arrows that comes back to where it started, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target] if target in path else [node, target]
            if target not in state and (found := visit(target, path + [target])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def floors(graph: dict[str, set[str]]) -> int:
    """The longest chain of arrows, in rooms."""
    if found := circle(graph):
        raise ValueError(f"no floors where imports go round: {' -> '.join(found)}")
    @functools.cache
    def height(node: str) -> int:
        return 1 + max((height(target) for target in graph[node]), default=0)

    return max(map(height, graph), default=0)


def figures(package: str, leave_out: tuple[str, ...] = ()) -> tuple[int, int, int]:
    graph = arrows(modules(package, leave_out))
    return len(graph), floors(graph), sum(map(len, graph.values()))


if __name__ == "__main__":
    for package in sys.argv[1:] or ["train"]:
        rooms, height, count = figures(package, leave_out=(f"{package}.bench",))
        print(f"{package} (without {package}.bench): {rooms} rooms, {height} floors, {count} arrows")
