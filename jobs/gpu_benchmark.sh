#!/usr/bin/env bash
# The GPU checks of BENCHMARKS.md, on one GPU node: the benchmark's model, feed and full modes
# (--decode cpu and --decode gpu), the GPU data path stage by stage (train/bench/stages.py), the
# benchmark's data mode, the CUDA tests, and a short ResNet-50 training run. A failing step is
# reported and the next one still runs; the exit status says whether all passed.
#
#   bash jobs/gpu_benchmark.sh                          # on the sample data, made here
#   DATA=/path/to/shards bash jobs/gpu_benchmark.sh     # on shards made by python -m prepare
#
# Env: PYTHON (python3), OUT (results: runs/gpu-benchmark), SCRATCH (sample data, shards and
# checkpoints: $SLURM_TMPDIR or /tmp), PER_CLASS (sample train images per class, 10 classes:
# 1000), WORKERS (loader workers: CPUs - 1), STEPS (timed steps of model and full: 60).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/gpu-benchmark}
SCRATCH=${SCRATCH:-${SLURM_TMPDIR:-/tmp}/gpu-benchmark}
CPUS=$($PYTHON -c 'from shards.resources import available_cpus; print(available_cpus())') || exit
WORKERS=${WORKERS:-$(( CPUS > 1 ? CPUS - 1 : 1 ))}
STEPS=${STEPS:-60}
mkdir -p "$OUT" "$SCRATCH"
failed=()
step() {  # step NAME COMMAND...: run it, note a failure, go on
    local name=$1; shift
    echo "== $(date +%T) $name"
    "$@" || { echo "!! $name failed"; failed+=("$name"); }
}
bench() { $PYTHON -m train.bench --data "$DATA" --run-dir "$OUT" --no-dali "$@"; }

# The native decoder, built here when the checkout carried none for this machine (gcc and the
# libjpeg-turbo headers are needed: jobs/install.sh installs them).
$PYTHON -c "import train.decoder" 2>/dev/null ||
    $PYTHON -W ignore -c "from setuptools import setup; setup()" -q build_ext --inplace || exit
$PYTHON -c "from train.decoder import NAME; print(NAME)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PYTHON -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
echo "cpus $CPUS, loader workers $WORKERS"

if [ -z "${DATA:-}" ]; then
    DATA=$SCRATCH/shards
    step "sample data" $PYTHON -m prepare.sample "$SCRATCH/source" --classes 10 \
        --train-per-class "${PER_CLASS:-1000}" --val-per-class 50
    step "prepare" $PYTHON -m prepare --source "$SCRATCH/source" --dest "$DATA"
fi
step "model, feed and full, --decode cpu" bench --modes model,feed,full --decode cpu --workers "$WORKERS" \
    --steps "$STEPS"
step "feed and full, --decode gpu" bench --modes feed,full --decode gpu --workers "$WORKERS" --steps "$STEPS"
step "GPU data path, stage by stage" $PYTHON -m train.bench.stages "$DATA"
step "CUDA tests" $PYTHON -m pytest -q -p no:cacheprovider tests/test_gpu.py
step "data" bench --modes data --workers "1,$(( (WORKERS + 1) / 2 )),$WORKERS" --images 4000
step "train resnet50, 2 epochs" $PYTHON -m train --data "$DATA" --run-dir "$SCRATCH/train" --arch resnet50 \
    --epochs 2 --batch-size 256 --workers "$WORKERS" --warmup-epochs 0 --log-every 10
cp "$SCRATCH/train/metrics.jsonl" "$OUT/train-metrics.jsonl" 2>/dev/null
echo "== $(date +%T) done: $OUT/benchmark.jsonl, $OUT/train-metrics.jsonl; failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
