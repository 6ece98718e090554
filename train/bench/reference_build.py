"""The crop decoder built on the unpatched libjpeg-turbo release: the reference that our patches of it
(third_party/libjpeg-turbo/patches) must equal, output for output, on every input
(tests/test_huffman_fast_path.py), and the baseline they are timed against (train.bench.huffman). Needs a
clone (setup.py, third_party/), a compiler, CMake and Ninja (the test extra) and, on x86-64, NASM."""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import sys
from pathlib import Path

from setuptools import Distribution

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "third_party"))
sys.path.insert(0, str(ROOT))
import libjpeg_turbo  # noqa: E402  (third_party/libjpeg_turbo.py)
import setup as project_setup  # noqa: E402  (setup.py: the native modules' definitions)

FOLDER = ROOT / "build" / "reference"


@functools.cache  # (it edits setup.EXTENSIONS' definition: once a process)
def reference_jpegcrop():
    """train._jpegcrop's sources, compiled as setup.py compiles them, linked with the release as it is
    (built once into build/reference, then kept while its source and ours are the same). One process at a
    time builds there: two at once (two pytest workers, a benchmark beside the tests) broke each other's
    build files."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    with open(FOLDER / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        return _build_reference()


def _build_reference():
    libjpeg = libjpeg_turbo.build(FOLDER / "libjpeg-turbo", log=lambda line: None, patched=False)
    [extension] = [e for e in project_setup.EXTENSIONS if e.name == "train._jpegcrop"]
    extension.include_dirs = [str(libjpeg / "include"), *(str(ROOT / d) for d in extension.include_dirs)]
    extension.sources = [str(ROOT / source) for source in extension.sources]
    extension.depends = [str(ROOT / depend) for depend in extension.depends] + [str(libjpeg / "lib" / "libjpeg.a")]
    extension.extra_objects = [str(libjpeg / "lib" / "libjpeg.a")]
    extension.name = "_jpegcrop"
    build = Distribution({"ext_modules": [extension]}).get_command_obj("build_ext")
    build.build_lib, build.build_temp = str(FOLDER / "lib"), str(FOLDER / "temp")
    build.ensure_finalized()
    build.run()
    [built] = (FOLDER / "lib").glob("_jpegcrop*.so")
    spec = importlib.util.spec_from_file_location("reference._jpegcrop", built)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
