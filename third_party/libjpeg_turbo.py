"""Build the vendored libjpeg-turbo (third_party/libjpeg-turbo/upstream) as a static library.

setup.py links it into the native modules (train._jpegcrop, prepare._restarts), and jobs/install.sh and
jobs/release/build_wheels.sh build pillow-simd against the same archive, so that every JPEG this project encodes
or decodes goes through one pinned version whatever the system has. The result is a prefix with
include/ (jpeglib.h and the three headers it includes) and lib/libjpeg.a, built position-independent
for shared objects.

    python third_party/libjpeg_turbo.py PREFIX     builds into PREFIX (nothing to do when up to date)
    python third_party/libjpeg_turbo.py --unpatched PREFIX     the release as it is: the tests' reference

The compiler is CMake's choice (CC is honoured); a cross build sets CMAKE_TOOLCHAIN_FILE (the
environment variable CMake reads), as jobs/release/build_wheels.sh does for zig cc.
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
PATCHES = SOURCE.parent / "patches"  # ours, applied in name order to a copy of upstream/ (upstream/ is never edited)
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


def build_key(machine: str, patched: bool = True) -> str:
    """What a finished build was made from: options, compiler, toolchain, source and patches (its stamp)."""
    toolchain = os.environ.get("CMAKE_TOOLCHAIN_FILE", "")
    parts = [machine, *configure_options(machine), os.environ.get("CC", ""), toolchain,
             Path(toolchain).read_text() if toolchain else ""]
    digest = hashlib.sha256("\n".join(parts).encode())
    for path in sorted(SOURCE.rglob("*")):  # the source too: an edited file rebuilds
        if path.is_file():
            digest.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes())
    for patch in patches() if patched else []:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes())
    return digest.hexdigest()


def patches() -> list[Path]:
    return sorted(PATCHES.glob("*.patch"))


class PatchError(BuildError):
    """A patch that does not apply exactly: it was made against another version."""


def apply_patch(diff: str, tree: Path) -> list[str]:
    """Apply a unified diff (`--- a/FILE`, `+++ b/FILE`, hunks) to the files under `tree`, each hunk where
    its header says and only if every context and removed line matches exactly (no fuzz): a patch made
    for another release fails here, and leaves the file it fails on as it was (the build patches a fresh
    copy). Returns the files changed. The text before the first `--- ` line is the patch's description."""
    lines = diff.splitlines(keepends=True)
    changed, at = [], 0
    while at < len(lines):
        if not lines[at].startswith("--- "):
            at += 1
            continue
        name = lines[at + 1][4:].strip().split("/", 1)[1]  # "+++ b/src/jdhuff.c" -> "src/jdhuff.c"
        target = tree / name
        old = target.read_text().splitlines(keepends=True)
        new, copied, at = [], 0, at + 2
        while at < len(lines) and lines[at].startswith("@@"):
            start = int(lines[at].split()[1].split(",")[0][1:]) - 1  # "@@ -660,13 +660,16 @@"
            new += old[copied:start]
            copied, at = start, at + 1
            while at < len(lines) and lines[at][:1] in (" ", "-", "+", "\\"):
                kind, text = lines[at][:1], lines[at][1:]
                if kind in (" ", "-"):
                    if copied >= len(old) or old[copied] != text:
                        raise PatchError(f"{name}: line {copied + 1} is not what the patch expects: "
                                         f"{text.strip()!r} (a patch for another version?)")
                    copied += 1
                if kind in (" ", "+"):
                    new.append(text)
                at += 1
        target.write_text("".join(new + old[copied:]))
        changed.append(name)
    return changed


def patched_source(work: Path, patched: bool = True) -> Path:
    """A copy of upstream/ under `work`, with our patches applied (or none: the reference)."""
    tree = work / "src"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(SOURCE, tree)
    for patch in patches() if patched else []:
        apply_patch(patch.read_text(), tree)
    return tree


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


def build(prefix: Path, log=print, patched: bool = True) -> Path:
    """Build libjpeg-turbo into `prefix` (include/, lib/libjpeg.a) unless a build of the same key is there;
    with our patches, or as released (`patched=False`: the tests' reference)."""
    prefix = Path(prefix).resolve()
    machine = target_machine()
    key = build_key(machine, patched)
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
    source = patched_source(prefix, patched)
    log(f"libjpeg-turbo: building for {machine} into {prefix}, "
        f"{'with ' + ', '.join(p.name for p in patches()) if patched and patches() else 'unpatched'}")
    run([cmake, "-S", str(source), "-B", str(work), *generator, *configure_options(machine)])
    run([cmake, "--build", str(work), "--parallel", str(os.cpu_count() or 1)])
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    for header in [*(source / name for name in HEADERS), work / "jconfig.h"]:
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
    arguments = sys.argv[1:]
    unpatched = arguments[:1] == ["--unpatched"]
    if len(arguments) != 1 + unpatched:
        sys.exit("usage: python third_party/libjpeg_turbo.py [--unpatched] PREFIX")
    try:
        print(build(Path(arguments[-1]), log=lambda line: print(line, file=sys.stderr), patched=not unpatched))
    except BuildError as exn:
        sys.exit(f"third_party/libjpeg_turbo.py: {exn}")
