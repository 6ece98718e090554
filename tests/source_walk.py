"""The rooms a `--source` walks through before its first image: every module of the repository whose
functions run between `python -m prepare`'s `main` and the first image a layout reads (its first `Item`),
in the order they are first entered, each with the first function of it that ran. Imports and class bodies
are left out: a module that is only imported is not walked through. One node, one worker, so that the
parts are read in this process. docs/architecture.md gives the walk of the Parquet download and of
winter21_whole.tar.gz; `python tests/source_walk.py SOURCE` prints one."""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class FirstImage(Exception):
    """Raised where the first Item is made: the walk ends there."""


def walk(source: Path, dest: Path) -> list[tuple[str, str]]:
    """(module path, first function) of each module of the repository entered before the first image."""
    from prepare.cli import main
    from prepare.sources import base

    entered: dict[str, str] = {}

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(str(REPO)) or "/.venv/" in code.co_filename \
                or code.co_filename.startswith(str(REPO / "tests")):
            return
        if not code.co_flags & inspect.CO_NEWLOCALS:  # a module's or a class's body: an import, not a walk
            return
        entered.setdefault(os.path.relpath(code.co_filename, REPO), code.co_qualname)

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


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        for number, (module, function) in enumerate(walk(Path(sys.argv[1]), Path(scratch) / "dest"), 1):
            print(f"{number:3d}  {module}  ({function})")
