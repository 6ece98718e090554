"""The rooms a `--source` walks through before its first image: every module of the repository whose
functions run between `python -m prepare`'s `main` and the first image a layout reads (its first `Item`),
in the order they are first entered, each with the first function of it that ran. Imports and class bodies
are left out (and what runs while a module is imported): a module that is only imported is not walked
through. One node, one worker, so that the parts are read in this process.

`carrying=True` keeps the modules that carry the source: those where a function is called with the
source's path, or with something made from it that reads it or names it (a string or path under it, the
`Detected`, the `Source`, a part, an item, a listing: any object or sequence holding one). The run's
settings (`PrepareConfig`, which holds --source as it holds --dest) and records (a dict: the source's
identity, as the manifest keeps it) are not counted: they name the source to compare, never to read it.

docs/architecture.md gives both walks of the Parquet download and of winter21_whole.tar.gz;
`python tests/source_walk.py [--carrying] SOURCE` prints one."""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class FirstImage(Exception):
    """Raised where the first Item is made: the walk ends there."""


def walk(source: Path, dest: Path, carrying: bool = False) -> list[tuple[str, str]]:
    """(module path, first function) of each module of the repository entered before the first image
    (`carrying`: of each that carries the source)."""
    from prepare.cli import main
    from prepare.sources import base

    entered: dict[str, str] = {}
    root = str(Path(source).resolve())
    here = inspect.currentframe()

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(str(REPO)) or "/.venv/" in code.co_filename \
                or code.co_filename.startswith(str(REPO / "tests")):
            return
        if not code.co_flags & inspect.CO_NEWLOCALS or during_import(frame, here):  # an import, not a walk
            return
        module = os.path.relpath(code.co_filename, REPO)
        if module in entered or carrying and not any(carries(value, root) for value in arguments(frame)):
            return
        entered[module] = code.co_qualname

    def first_image(self, *args, **kwargs):
        raise FirstImage

    made = base.Item.__init__
    base.Item.__init__ = first_image
    sys.setprofile(profile)
    try:
        main(["--source", str(source), "--dest", str(dest), "--workers", "1"])
    except FirstImage:
        pass
    finally:
        sys.setprofile(None)
        base.Item.__init__ = made
    return list(entered.items())


def during_import(frame, walking) -> bool:
    """Whether `frame` runs inside a module's body (an import) between the walk and itself."""
    frame = frame.f_back
    while frame is not None and frame is not walking:
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def arguments(frame) -> list:
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return [frame.f_locals.get(name) for name in code.co_varnames[:count]]


def carries(value, root: str, depth: int = 0, seen: set | None = None) -> bool:
    """Whether `value` is the source's path or holds it (a string or path under `root`; a sequence or
    an object whose attributes do, three levels deep), but for the settings and records (the module's
    docstring)."""
    seen = set() if seen is None else seen
    if depth > 3 or id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, (str, Path)):  # the path, a file under it, or an origin "ARCHIVE:member"
        return str(value) == root or str(value).startswith((root + "/", root + ":"))
    if isinstance(value, dict) or type(value).__name__ == "PrepareConfig":
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(carries(item, root, depth + 1, seen) for item in list(value)[:100])
    try:
        attributes = vars(value)
    except TypeError:  # ints, bytes, builtins: nothing of the source
        return False
    return not inspect.ismodule(value) and any(carries(item, root, depth + 1, seen) for name, item in attributes.items()
                                               if not name.startswith("__"))


if __name__ == "__main__":
    carrying = "--carrying" in sys.argv
    with tempfile.TemporaryDirectory() as scratch:
        for number, (module, function) in enumerate(walk(Path(sys.argv[-1]), Path(scratch) / "dest", carrying), 1):
            print(f"{number:3d}  {module}  ({function})")
