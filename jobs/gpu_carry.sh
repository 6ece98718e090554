#!/usr/bin/env bash
# What jobs/gpu_check.sh needs on a lent GPU machine that its image lacks, made here (this machine reaches
# PyPI; that one reaches nothing): wheels for its Python 3.12 in .whl/ (ignored by git: .git/info/exclude),
# and the native modules themselves, built here for the stable ABI with the vendored libjpeg-turbo linked
# in (nothing of the system's is needed there). They travel with the call:
#
#   bash jobs/gpu_carry.sh
#   device run: bash jobs/gpu_check.sh, carry .whl train/_jpegcrop.abi3.so train/_tarindex.abi3.so
#               train/_batches.abi3.so prepare/_restarts.abi3.so
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl .native
mkdir -p .whl
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
# pure Python: any Python takes these wheels (python-hostlist has no wheel on PyPI: built here)
"${pip[@]}" wheel --no-deps -w .whl python-hostlist webdataset braceexpand
# --decode gpu: nvImageCodec and nvJPEG for CUDA 13, for the machine's Python 3.12
"${pip[@]}" download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl nvidia-nvimgcodec-cu13 nvidia-nvjpeg
.venv/bin/python -c "import train.decoder, train.shard_index, train._batches, prepare.images"  # built by install.sh
du -sh .whl
