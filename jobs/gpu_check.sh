#!/usr/bin/env bash
# The GPU check (issue 24), for one call of at most 8 minutes on a lent GPU machine (16 vCPUs): most
# important first, each step under its own time limit; a failing step is noted and the next one runs.
# Every figure goes into $OUT/gpu_check.txt, printed at the end:
#   1. the CUDA tests (tests/test_gpu.py, the device half of tests/test_augment_ops.py), with issue 41's
#      early-write tests (a decode must not write what earlier work on its stream still reads)
#   2. ImageNetLoader on the device with --decode cpu and gpu, plain and seekable shards, torchvision-v2's
#      augmentation (jobs/gpu_check.py): the checks of what a caller gets, images/s
#   3. python -m train for a few steps: --decode cpu, --decode gpu, --recipe torchvision-v2
#   4. the benchmark's model and full modes (ResNet-50, bf16, channels_last, batch 256) for --decode cpu
#      and gpu with the cores pinned to 16 and to 4 (taskset; --workers one less), and full with
#      torchvision-v2's policy and erasing on the device against without
#
#   bash jobs/gpu_carry.sh            # here, once: what the GPU machine lacks, into .whl/
#   bash jobs/gpu_check.sh            # there, from the repository root (carry .whl and the four
#                                     # native modules: jobs/gpu_carry.sh says which)
#   DEVICE=cpu bash jobs/gpu_check.sh # the same steps on the CPU, at toy sizes: how it is tested here
#
# Env: OUT (the results folder: $OUT of the device tool, else runs/gpu-check), SCRATCH (data: /tmp/gpu-check),
# PER_CLASS (sample train images per class, 10 classes), CPU_SETS (core counts to pin: "16 4"), STEPS.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-runs/gpu-check}
SCRATCH=${SCRATCH:-/tmp/gpu-check}
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ "$DEVICE" = cpu ] && PYTHON=.venv/bin/python
mkdir -p "$OUT" "$SCRATCH"
RESULTS=$OUT/gpu_check.txt
: > "$RESULTS"
if [ "$DEVICE" = cuda ]; then
    PER_CLASS=${PER_CLASS:-300}; CPU_SETS=${CPU_SETS:-"16 4"}; STEPS=${STEPS:-30}
    ARCH=resnet50; SIZE=176; BATCH=256; MODEL_BATCH=256; TRAIN_SIZE=224
else  # toy sizes: the same code on the CPU
    PER_CLASS=${PER_CLASS:-12}; CPU_SETS=${CPU_SETS:-"2 1"}; STEPS=${STEPS:-2}
    ARCH=resnet18; SIZE=32; BATCH=8; MODEL_BATCH=8; TRAIN_SIZE=32
fi
failed=()
note() { echo "$*" | tee -a "$RESULTS"; }
step() {  # step NAME SECONDS COMMAND...: run it within its limit (output in $LOG), note a failure, go on
    local name=$1 limit=$2; shift 2
    echo "== $(date +%T) $name"
    timeout "$limit" "$@" > "$LOG" 2>&1
    local status=$?
    tail -n 4 "$LOG"
    if [ $status -ne 0 ]; then
        note "FAILED $name (status $status), its last lines:"; tail -n 12 "$LOG" >> "$RESULTS"; failed+=("$name")
    fi
    return $status
}
keep() { grep -E "$1" "$LOG" >> "$RESULTS"; }  # the last step's lines that match
LOG=$SCRATCH/step.log

# What the machine's image lacks, carried (jobs/gpu_carry.sh): pure-Python wheels, nvImageCodec.
if [ -d .whl ]; then
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
$PYTHON -c "import train.decoder, train.shard_index, prepare.images" || {
    note "FAILED: the native modules do not import (carry the .so files built by jobs/gpu_carry.sh)"; exit 1; }
note "== gpu_check $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), device $DEVICE"
[ "$DEVICE" = cuda ] && note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
note "$($PYTHON -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)')"
note "$(lscpu | grep 'Model name' | sed 's/  */ /g'), $(nproc) CPUs; $($PYTHON -c 'from train.decoder import NAME; print(NAME)')"
$PYTHON -c "from train.device_decode import DeviceDecoder; print(DeviceDecoder().describe())" >> "$RESULTS" 2>&1 ||
    note "(no nvImageCodec: --decode gpu steps will fail)"

# Data: a small sample, prepared twice: seekable (the default) and plain (the original JPEGs' bytes).
step "sample data" 120 $PYTHON -m prepare.sample "$SCRATCH/source" --classes 10 --train-per-class "$PER_CLASS" \
    --val-per-class 20
step "prepare, seekable" 120 $PYTHON -m prepare --source "$SCRATCH/source" --dest "$SCRATCH/seekable"
step "prepare, plain" 120 $PYTHON -m prepare --source "$SCRATCH/source" --dest "$SCRATCH/plain" --restart-mcus 0

# 1. The CUDA tests. On the CPU they are only collected: the suite runs them there (the CUDA ones skip).
COLLECT_ONLY=; [ "$DEVICE" = cpu ] && COLLECT_ONLY=--collect-only
step "CUDA tests" 180 $PYTHON -m pytest -q -o addopts= -p no:cacheprovider -rs $COLLECT_ONLY tests/test_gpu.py \
    tests/test_augment_ops.py
keep "passed|failed|skipped|error|collected"

# 2. The public loader on the device, both decodes, both kinds of shards
step "loader" 150 $PYTHON jobs/gpu_check.py --data "$SCRATCH/plain" "$SCRATCH/seekable" --device "$DEVICE" \
    --decode cpu gpu --batch-size "$BATCH" --size "$SIZE"
keep "^loader|^FAILED"

# 3. python -m train, a few steps of each path
for case in "--decode cpu" "--decode gpu" "--decode gpu --recipe torchvision-v2 --val-crop $TRAIN_SIZE"; do
    run=$SCRATCH/train-${case// /}
    rm -rf "$run"
    step "train $case" 150 $PYTHON -m train --data "$SCRATCH/seekable" --run-dir "$run" --device "$DEVICE" \
        --arch "$ARCH" --image-size "$TRAIN_SIZE" --batch-size "$BATCH" --epochs 1 --warmup-epochs 0 --max-steps 10 --log-every 5 $case
    keep "INFO epoch 0:"
done

# 4. model and full: the training step alone and fed by the loader, on the first CPUS cores pinned
bench() {  # bench CPUS ARGS...: the benchmark's summary as one line of the results
    local cpus=$1; shift
    step "bench $cpus cores $*" 180 taskset -c "0-$(( cpus - 1 ))" $PYTHON -m train.bench --data "$SCRATCH/seekable" \
        --run-dir "$OUT/bench" --device "$DEVICE" --no-dali --arch "$ARCH" --image-size "$TRAIN_SIZE" \
        --model-batch-size "$MODEL_BATCH" --steps "$STEPS" --warmup-batches 3 --workers $(( cpus > 1 ? cpus - 1 : 1 )) "$@" &&
    $PYTHON -c "
import json, sys
r = json.loads(open('$OUT/bench/benchmark.jsonl').read().splitlines()[-1])
model, full = r.get('model_images_per_sec'), r.get('full_images_per_sec')
parts = [f'{name} {value:.0f} img/s' for name, value in (('model', model), ('full', full)) if value]
print(f'bench $cpus cores, $*: ' + ', '.join(parts) + (f', full/model {full / model:.2f}' if full and model else ''))
" >> "$RESULTS"
}
for cpus in $CPU_SETS; do
    bench "$cpus" --modes model,full --decode cpu
    bench "$cpus" --modes model,full --decode gpu
done
first=${CPU_SETS%% *}
bench "$first" --modes full --decode gpu --augment torchvision-v2
bench "$first" --modes full --decode cpu --augment torchvision-v2

note "== $(date +%T) done in ${SECONDS}s; failed: ${failed[*]:-none}"
cat "$RESULTS"
[ ${#failed[@]} -eq 0 ]
