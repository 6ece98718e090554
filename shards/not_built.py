"""The error for a native module that does not import, saying which of the two installs is at fault."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Callable, NoReturn

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder that holds shards/, train/ and prepare/


def installed_elsewhere() -> Path | None:
    """Where an installed (not editable) imagenet-slurm keeps its packages, when that is not this
    folder: this folder is then a clone's source tree, importable from the working directory, that
    hides the installed wheel and lacks its built modules."""
    try:
        site = Path(importlib.metadata.distribution("imagenet-slurm").locate_file("")).resolve()
    except importlib.metadata.PackageNotFoundError:
        return None
    return site if site != PACKAGE_ROOT and (site / "train").is_dir() else None


class NotBuilt(ImportError):
    """A native module that does not import, its message saying which install is at fault."""


def not_built(module: str, what: str, exn: ImportError) -> NotBuilt:
    """NotBuilt for `module` (e.g. train._jpegcrop), `what` it is (e.g. 'the native decoder')."""
    site = installed_elsewhere()
    if site is not None:
        return NotBuilt(
            f"{what} {module} is not built in {PACKAGE_ROOT}, a clone's source tree that Python imports from the "
            f"working directory instead of the installed wheel in {site}: run from another folder, or with "
            "`python -P` (the job scripts do)")
    return NotBuilt(
        f"{what} {module} is not built ({exn}): run `bash jobs/install.sh` in the clone (it builds the native "
        "modules on the vendored libjpeg-turbo), or install the prebuilt wheels (README, 'Install on a cluster')")


def stop_in_one_line(command: str, exn: NotBuilt) -> NoReturn:
    """What a door (`python -m prepare`, `python -m train`, ...) does where its native modules do not import:
    one line and exit status 2, not the 14-19 lines of an import's traceback."""
    print(f"python -m {command}: {exn}", file=sys.stderr)
    sys.exit(2)


def run_door(command: str, main: Callable[[], int]) -> int:
    """main(), its native modules imported where it needs them (a parser's choices, a decoder): NotBuilt there
    is one line too."""
    try:
        return main()
    except NotBuilt as exn:
        stop_in_one_line(command, exn)
