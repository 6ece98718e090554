#!/usr/bin/env bash
# Build this project from source in .venv: the native modules and pillow-simd, both linked with the
# vendored libjpeg-turbo (third_party/), never the system's. For a cluster without a compiler, or
# without root to install one, the wheels need none of this (README, "Install on a cluster").
#
#   bash jobs/install.sh          what `python -m prepare` and `python -m train` need
#   bash jobs/install.sh --gpu    plus NVIDIA nvImageCodec, for train --decode gpu
#   bash jobs/install.sh --dev    plus what the tests need: pytest and accelerate, nvImageCodec, the
#                                 benchmark's peers (NVIDIA DALI, simplejpeg), both trackers, and system
#                                 tools: slurm-wlm + munge (the cluster tests), cjpeg (libjpeg-turbo-progs:
#                                 the tests' arithmetic-coded and 4x2 JPEGs), strace (the shared-read
#                                 test counts each node's reads), mmdebstrap and arch-test, qemu-user-static and
#                                 binfmt-support (the bare-system install test, x86-64 and arm64)
#
# Building needs a C compiler, Python's headers, zlib's headers (pillow-simd) and, on x86-64, NASM
# (libjpeg-turbo's SIMD). What is missing is installed when root on Debian or Ubuntu (the same package
# names on both); anyone else is told what to install or load, or to use the wheels. Safe to rerun: it
# only does what is missing. PYTHON=python3.11 picks the interpreter for the venv (3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/pillow_simd.sh

dev=0
gpu=0
for arg in "$@"; do
  case $arg in
    --dev) dev=1 ;;
    --gpu) gpu=1 ;;
    *) echo "install.sh: unknown option $arg (--dev, --gpu)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
machine=$(uname -m)
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || {
  echo "install.sh: $python is $("$python" -V 2>&1); this project needs Python 3.11 or newer. Without root:" \
       "\`uv python install 3.11\` (or \`module load python/3.11\`), then PYTHON=<its path> bash jobs/install.sh" >&2
  exit 1
}

# What the build and the tests need, each checked for what it is (not for a package name), with the
# Debian/Ubuntu package that provides it: a module or a conda environment that provides it passes too.
has_compiler() { command -v "${CC:-cc}" >/dev/null; }
has_python_headers() { "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }
has_nasm() { [[ $machine != x86_64 ]] || command -v nasm >/dev/null || command -v yasm >/dev/null; }
has_zlib_headers() { echo '#include <zlib.h>' | "${CC:-cc}" -E -x c - >/dev/null 2>&1; }
needs=(compiler:gcc python_headers:python3-dev nasm:nasm zlib_headers:zlib1g-dev)
has_slurm() { command -v slurmctld >/dev/null && command -v slurmd >/dev/null; }
has_munge() { command -v munged >/dev/null; }
has_cjpeg() { command -v cjpeg >/dev/null; }
has_strace() { command -v strace >/dev/null; }
has_mmdebstrap() { command -v mmdebstrap >/dev/null; }
has_arch_test() { command -v arch-test >/dev/null; }  # (mmdebstrap's check that arm64 binaries run here)
has_qemu() { command -v qemu-aarch64-static >/dev/null; }
has_binfmt() { command -v update-binfmts >/dev/null; }
(( dev )) && needs+=(slurm:slurm-wlm munge:munge cjpeg:libjpeg-turbo-progs strace:strace mmdebstrap:mmdebstrap arch_test:arch-test
                     qemu:qemu-user-static binfmt:binfmt-support)

missing=()
for need in "${needs[@]}"; do "has_${need%%:*}" || missing+=("${need#*:}"); done
if (( ${#missing[@]} )); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "install.sh: apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "install.sh: building from source needs ${missing[*]} (Debian/Ubuntu package names; RHEL/Rocky:" \
         "gcc python3-devel zlib-devel, nasm from EPEL/CRB; or \`module load\` them). Without root or a" \
         "compiler, install the prebuilt wheels instead: README, \"Install on a cluster\"." >&2
    exit 1
  fi
fi

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
extras=""
(( gpu )) && extras="[gpu]"
(( dev )) && extras="[test,bench,gpu,tensorboard,wandb]"
# Builds the vendored libjpeg-turbo (build/libjpeg-turbo/, about 20 s the first time) and the native
# modules on it: a failed build stops here, never a slow fall-back later.
"${pip[@]}" install -e ".$extras" || { echo "install.sh: pip install failed (above)" >&2; exit 1; }

# pillow-simd is the PIL that imports, and on the libjpeg-turbo the native modules link (an older
# install.sh built it on the system's). The swap is the wheels' own (shards/pillow_simd.py): stock Pillow
# leaves only once the new wheel is in hand.
simd_installed() {
  .venv/bin/python -c "import sys; from PIL import features; from shards.resources import pil_build
from train._jpegcrop import LIBJPEG_TURBO_VERSION as pinned
sys.exit(0 if pil_build()[1] and features.version('libjpeg_turbo') == pinned else 1)" 2>/dev/null
}
if [[ $machine != x86_64 ]]; then
  echo "install.sh: pillow-simd's SIMD is x86 only: on $machine PIL is stock Pillow (its own libjpeg-turbo)"
elif ! simd_installed; then
  echo "install.sh: replacing stock Pillow with pillow-simd $PILLOW_SIMD_VERSION on the vendored libjpeg-turbo" \
       "(compiles from source, about 2 minutes the first time)"
  jpeg=$(.venv/bin/python third_party/libjpeg_turbo.py "build/libjpeg-turbo/$machine")  # built by the step above
  grep -qw avx2 /proc/cpuinfo || PILLOW_SIMD_FLAGS=""  # this CPU would not run an AVX2 build
  rm -rf build/pillow-simd
  pillow_simd_wheel .venv/bin/python "$jpeg" build/pillow-simd
  # (a pillow-simd on another libjpeg, from an older install.sh, leaves first)
  "${pip[@]}" uninstall -y pillow-simd >/dev/null 2>&1 || true
  .venv/bin/python -m shards.pillow_simd --require build/pillow-simd
  simd_installed || { echo "install.sh: pillow-simd did not end up as the PIL that imports" >&2; exit 1; }
fi
.venv/bin/python -c "from train import decoder, shard_index, _batches" || {
  echo "install.sh: the native modules train._jpegcrop, train._tarindex and train._batches do not import (above):" \
       "rerun after fixing the build" >&2
  exit 1
}
.venv/bin/python -c "from shards.resources import pil_build; from train.decoder import NAME; print('install.sh: ready;', pil_build()[0] + ';', NAME)"
