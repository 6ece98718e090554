"""The native modules: plain C beside the Python modules that wrap them, built for Python's stable ABI
(one `.abi3.so` for Python 3.11 and later; the wheel is tagged cp311-abi3).

The two JPEG modules link the vendored libjpeg-turbo (third_party/libjpeg-turbo, built statically first
by third_party/libjpeg_turbo.py), never the system's: no JPEG headers or library are needed to build or
run, and the pixels are the same on every machine. A failed build fails the install.
"""

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, str(Path(__file__).resolve().parent / "third_party"))
import libjpeg_turbo  # noqa: E402  (third_party/libjpeg_turbo.py)

LIMITED_API = [("Py_LIMITED_API", "0x030B0000")]  # 3.11: the buffer protocol entered the stable ABI
# -ffp-contract=off: no a*b+c fused into one rounding where the CPU has FMA (every aarch64, clang's default there):
# the resamplers' filter weights and every float result must not depend on the machine
FLAGS = ["-O3", "-Wall", "-ffp-contract=off"]


def native(name: str, sources: list[str], depends: list[str] = (), include_dirs: list[str] = ()) -> Extension:
    return Extension(name, sources, depends=list(depends), include_dirs=list(include_dirs),
                     define_macros=LIMITED_API, py_limited_api=True, extra_compile_args=FLAGS)


EXTENSIONS = [
    # the crop-region JPEG decoder, wrapped by train/decoder.py; shards/native/jpeg_rules.h: the statuses,
    # limits, memory budget, libjpeg guard and restart grid both JPEG modules keep (header-only)
    native("train._jpegcrop",
           ["train/native/jpegcrop.c", "train/native/resample.c", "train/native/seek.c", "train/native/arrays.c"],
           depends=["shards/native/jpeg_rules.h", "train/native/arrays.h", "train/native/buffers.h",
                    "train/native/resample.h", "train/native/resample_column.h", "train/native/seek.h",
                    "train/native/cpu_features.h"],
           include_dirs=["shards/native"]),
    # a batch normalised on the host (the CPU device), wrapped by train/device_batches.py
    native("train._batches", ["train/native/batches.c", "train/native/arrays.c"],
           depends=["train/native/arrays.h", "train/native/cpu_features.h"]),
    # JPEGs made seekable without loss, wrapped by prepare/images.py
    native("prepare._restarts", ["prepare/native/restarts.c"], depends=["shards/native/jpeg_rules.h"],
           include_dirs=["shards/native"]),
    # the shard index, wrapped by train/shard_index.py
    native("train._tarindex", ["train/native/tarindex.c"]),
]
USES_LIBJPEG = {"train._jpegcrop", "prepare._restarts"}


class BuildWithPinnedLibjpeg(build_ext):
    """build_ext that first builds the vendored libjpeg-turbo and links it into the JPEG modules."""

    def run(self):
        # build/libjpeg-turbo/<machine>: beside setuptools' own build folders, kept between builds
        # (jobs/install.sh builds pillow-simd against the same prefix)
        prefix = Path("build") / "libjpeg-turbo" / libjpeg_turbo.target_machine()
        try:
            libjpeg = libjpeg_turbo.build(prefix)
        except libjpeg_turbo.BuildError as exn:
            sys.exit(f"setup.py: {exn}")
        for extension in self.extensions:
            if extension.name in USES_LIBJPEG:
                extension.include_dirs.insert(0, str(libjpeg / "include"))
                extension.extra_objects.append(str(libjpeg / "lib" / "libjpeg.a"))
                extension.depends.append(str(libjpeg / "lib" / "libjpeg.a"))
        super().run()


if __name__ == "__main__":  # (pip's build runs this file as __main__; the tests import EXTENSIONS)
    setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildWithPinnedLibjpeg},
          options={"bdist_wheel": {"py_limited_api": "cp311"}})
