"""Build the vendored libjpeg-turbo (third_party/libjpeg-turbo/upstream) as a static library.

setup.py links it into the native modules (train._jpegcrop, prepare._restarts), and jobs/install.sh and
jobs/build_wheels.sh build pillow-simd against the same archive, so that every JPEG this project encodes
or decodes goes through one pinned version whatever the system has. The result is a prefix with
include/ (jpeglib.h and the three headers it includes) and lib/libjpeg.a, built position-independent
for shared objects.

    python third_party/libjpeg_turbo.py PREFIX     builds into PREFIX (nothing to do when up to date)

The compiler is CMake's choice (CC is honoured); a cross build sets CMAKE_TOOLCHAIN_FILE (the
environment variable CMake reads), as jobs/build_wheels.sh does for zig cc.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "libjpeg-turbo" / "upstream"
HEADERS = ["src/jpeglib.h", "src/jmorecfg.h", "src/jerror.h"]  # plus jconfig.h, which the configure writes

# The library only: no shared library, no TurboJPEG API, no command-line tools or their tests.
OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DENABLE_SHARED=OFF", "-DENABLE_STATIC=ON", "-DWITH_TURBOJPEG=OFF",
           "-DWITH_TOOLS=OFF", "-DWITH_TESTS=OFF", "-DCMAKE_POSITION_INDEPENDENT_CODE=ON"]
# The SIMD kept in upstream/simd: x86-64 (NASM assembly) and Arm 64 (C intrinsics). Elsewhere the library
# builds without SIMD: the same pixels (libjpeg-turbo's SIMD is exact for the default integer DCT), slower.
SIMD_MACHINES = {"x86_64", "amd64", "aarch64", "arm64"}

NO_NASM = ("libjpeg-turbo's x86-64 SIMD is assembled with NASM at build time, and no `nasm` is on PATH. "
           "Install the prebuilt wheels instead (README, 'Install on a cluster': nothing to compile), or "
           "NASM (Debian/Ubuntu: apt install nasm; RHEL/Rocky: dnf install nasm; conda install nasm; "
           "or `module load nasm`) and build again.")


class BuildError(RuntimeError):
    """libjpeg-turbo could not be built: the message says what to do."""


def target_machine() -> str:
    """The CPU the library is built for: the toolchain file's CMAKE_SYSTEM_PROCESSOR in a cross build."""
    toolchain = os.environ.get("CMAKE_TOOLCHAIN_FILE")
    if toolchain:
        for line in Path(toolchain).read_text().splitlines():
            words = line.replace("(", " ").replace(")", " ").split()
            if words[:2] == ["set", "CMAKE_SYSTEM_PROCESSOR"]:
                return words[2].lower()
    return platform.machine().lower()


def configure_options(machine: str) -> list[str]:
    """The CMake options for a build for `machine` (SIMD required where upstream/simd holds it)."""
    simd = machine in SIMD_MACHINES
    return OPTIONS + ["-DREQUIRE_SIMD=ON" if simd else "-DWITH_SIMD=OFF"]


def build_key(machine: str) -> str:
    """What a finished build was made from: options, compiler, toolchain and source (its stamp)."""
    toolchain = os.environ.get("CMAKE_TOOLCHAIN_FILE", "")
    parts = [machine, *configure_options(machine), os.environ.get("CC", ""), toolchain,
             Path(toolchain).read_text() if toolchain else ""]
    digest = hashlib.sha256("\n".join(parts).encode())
    for path in sorted(SOURCE.rglob("*")):  # the source too: a patched file rebuilds
        if path.is_file():
            digest.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def tool(name: str) -> str | None:
    """A build tool from PATH, or from the PyPI package of that name (cmake, ninja) in this Python."""
    found = shutil.which(name)
    if found:
        return found
    try:
        module = __import__(name)
    except ImportError:
        return None
    folder = getattr(module, "CMAKE_BIN_DIR", None) or getattr(module, "BIN_DIR", None)
    candidate = Path(folder) / name if folder else None
    return str(candidate) if candidate and candidate.exists() else None


def build(prefix: Path, log=print) -> Path:
    """Build libjpeg-turbo into `prefix` (include/, lib/libjpeg.a) unless a build of the same key is there."""
    prefix = Path(prefix).resolve()
    machine = target_machine()
    key = build_key(machine)
    stamp = prefix / "built-from"
    if stamp.exists() and stamp.read_text() == key and (prefix / "lib" / "libjpeg.a").exists():
        return prefix
    if machine in {"x86_64", "amd64"} and not (shutil.which("nasm") or shutil.which("yasm")):
        raise BuildError(NO_NASM)
    cmake = tool("cmake")
    if cmake is None:
        raise BuildError("building libjpeg-turbo needs CMake: `pip install cmake ninja` (or install the wheels)")
    work = prefix / "cmake"
    shutil.rmtree(prefix, ignore_errors=True)
    ninja = tool("ninja")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    log(f"libjpeg-turbo: building {SOURCE.name} for {machine} into {prefix}")
    run([cmake, "-S", str(SOURCE), "-B", str(work), *generator, *configure_options(machine)])
    run([cmake, "--build", str(work), "--parallel", str(os.cpu_count() or 1)])
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    for header in [*(SOURCE / name for name in HEADERS), work / "jconfig.h"]:
        shutil.copy2(header, prefix / "include")
    shutil.copy2(work / "libjpeg.a", prefix / "lib")
    stamp.write_text(key)
    return prefix


def run(command: list[str]) -> None:
    """Run a build step, its output kept out of the way unless it fails."""
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        raise BuildError(f"libjpeg-turbo's build failed: {' '.join(command)}\n{done.stdout[-4000:]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python third_party/libjpeg_turbo.py PREFIX")
    try:
        print(build(Path(sys.argv[1]), log=lambda line: print(line, file=sys.stderr)))
    except BuildError as exn:
        sys.exit(f"third_party/libjpeg_turbo.py: {exn}")
