#!/usr/bin/env bash
# Set up this project from nothing: system packages (when root), .venv with the Python dependencies,
# and pillow-simd swapped in for stock Pillow as the very last step (torchvision depends on stock
# Pillow, so any later `pip install` that touches torchvision may put it back: rerun this script).
#
#   bash jobs/install.sh          what `python -m prepare` and `python -m train` need
#   bash jobs/install.sh --gpu    plus NVIDIA nvImageCodec, for train --decode gpu
#   bash jobs/install.sh --dev    plus pytest and accelerate, nvImageCodec, the benchmark's peers
#                                 (NVIDIA DALI, simplejpeg), both trackers (tensorboard, wandb),
#                                 slurm-wlm + munge for the cluster tests, libjpeg-turbo-progs
#                                 (cjpeg: the tests' arithmetic-coded and 4x2 JPEGs), and strace
#                                 (the shared-read test counts each node's reads of the source)
#
# Safe to rerun: it only does what is missing. PYTHON=python3.11 picks the interpreter for the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

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
packages=(libjpeg62-turbo-dev zlib1g-dev gcc python3-dev)   # pillow-simd and the native decoder compile against these
(( dev )) && packages+=(slurm-wlm munge libjpeg-turbo-progs strace)

if command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if (( ${#missing[@]} )); then
    if [[ $(id -u) == 0 ]]; then
      echo "install.sh: apt-get install ${missing[*]}"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      echo "install.sh: missing Debian packages ${missing[*]}; ask an admin, or load modules that provide" \
           "the libjpeg-turbo and zlib headers" >&2
      exit 1
    fi
  fi
fi

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
extras=""
(( gpu )) && extras="[gpu]"
(( dev )) && extras="[test,bench,gpu,tensorboard,wandb]"
# Builds the native code (train/native/: the crop-region decoder, the shard index) too: a failed build
# stops here, never a slow fall-back later.
"${pip[@]}" install -e ".$extras" || {
  echo "install.sh: pip install failed (above). If it is the native code in train/native/, it needs gcc," \
       "the Python headers and libjpeg-turbo's (Debian: libjpeg62-turbo-dev, python3-dev)" >&2
  exit 1
}

simd_installed() {
  .venv/bin/python -c "import sys; from shards.resources import pil_build; sys.exit(0 if pil_build()[1] else 1)"
}
if ! simd_installed; then
  echo "install.sh: replacing stock Pillow with pillow-simd (compiles from source, about 2 minutes the first time)"
  "${pip[@]}" uninstall -y pillow pillow-simd >/dev/null 2>&1 || true
  cc="cc"
  grep -qw avx2 /proc/cpuinfo && cc="cc -mavx2"
  CC="$cc" "${pip[@]}" install --no-binary pillow-simd "pillow-simd>=9.0"
fi
simd_installed || { echo "install.sh: pillow-simd did not end up as the PIL that imports" >&2; exit 1; }
.venv/bin/python -c "from train import decoder, shard_index, _batches" || {
  echo "install.sh: the native modules train._jpegcrop, train._tarindex and train._batches do not import (above):" \
       "rerun after fixing the build" >&2
  exit 1
}
.venv/bin/python -c "from shards.resources import pil_build; from train.decoder import NAME; print('install.sh: ready;', pil_build()[0] + ';', NAME)"
