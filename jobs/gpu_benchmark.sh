#!/usr/bin/env bash
# The GPU checks of BENCHMARKS.md, on one GPU node, most important first: the CUDA data path's
# correctness tests, the GPU data path stage by stage (train/bench/stages.py), the benchmark's
# model, feed and full modes (--decode cpu and --decode gpu), the rest of the CUDA tests, the
# benchmark's data mode, and a short ResNet-50 training run. A failing step is reported and the
# next one still runs; once BUDGET seconds have passed the remaining steps are skipped (named);
# the exit status says whether all ran and passed.
#
#   bash jobs/gpu_benchmark.sh                          # on the sample data, made here
#   DATA=/path/to/shards bash jobs/gpu_benchmark.sh     # on shards made by python -m prepare
#
# Env: PYTHON (the clone's .venv/bin/python, with -P where the wheels are installed in it and the clone's
# modules are not built; else python3), OUT (results: runs/gpu-benchmark), SCRATCH (sample data, shards and
# checkpoints: $SLURM_TMPDIR or /tmp), PER_CLASS (sample train images per class, 10 classes:
# 1000), WORKERS (loader threads: CPUs - 1), STEPS (timed steps of model and full: 60), BUDGET
# (seconds: 3600). A relative PYTHON, OUT, SCRATCH or DATA is from the folder the script is called from.
set -uo pipefail
source "$(dirname "$0")/paths.sh"
# OUT, SCRATCH and DATA given are the caller's, made absolute before the cd to the clone (relative: inside the clone),
# and so is PYTHON's command: PYTHON is a command and its flags, split at spaces ("venv/bin/python -P"), kept as
# words (`python`), so that the folder it is made absolute against may hold a space
for name in OUT SCRATCH DATA; do
  if [[ -n ${!name:-} ]]; then printf -v "$name" %s "$(absolute "${!name}")"; fi
done
read -r -a python <<< "${PYTHON:-}"
(( ${#python[@]} == 0 )) || python[0]=$(absolute_command "${python[0]}")
cd "$(dirname "$0")/.."
if (( ${#python[@]} == 0 )) && [[ -x .venv/bin/python ]]; then  # the README's set-up: jobs/install.sh, or the wheels
  python=(.venv/bin/python)
  built_in . || python+=(-P)  # the installed wheel, not the clone's tree
fi
(( ${#python[@]} > 0 )) || python=(python3)
OUT=${OUT:-runs/gpu-benchmark}
SCRATCH=${SCRATCH:-${SLURM_TMPDIR:-/tmp}/gpu-benchmark}
CPUS=$("${python[@]}" -c 'from shards.resources import available_cpus; print(available_cpus())') || exit
WORKERS=${WORKERS:-$(( CPUS > 1 ? CPUS - 1 : 1 ))}
STEPS=${STEPS:-60}
mkdir -p "$OUT" "$SCRATCH"
BUDGET=${BUDGET:-3600}
failed=()
skipped=()
step() {  # step NAME COMMAND...: run it within the budget left, note a failure, go on
    local name=$1; shift
    if [ "$SECONDS" -ge "$BUDGET" ]; then skipped+=("$name"); return; fi
    echo "== $(date +%T) $name"
    timeout "$(( BUDGET - SECONDS ))" "$@" || { echo "!! $name failed"; failed+=("$name"); }
}

# The native modules, built here when the checkout carried none for this machine (a compiler, NASM and
# CMake are needed, as for jobs/install.sh: setup.py builds the vendored libjpeg-turbo first).
"${python[@]}" -c "import train.decoder, train.shard_index" 2>/dev/null ||
    "${python[@]}" -W ignore setup.py -q build_ext --inplace || exit
"${python[@]}" -c "from train.decoder import NAME; print(NAME)"
"${python[@]}" -c "from train.device_decode import DeviceDecoder; print(DeviceDecoder().describe())" ||
    echo "!! --decode gpu needs nvImageCodec: pip install 'nvidia-nvimgcodec-cu13[nvjpeg]'"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"${python[@]}" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
echo "cpus $CPUS, loader workers $WORKERS"

if [ -z "${DATA:-}" ]; then
    DATA=$SCRATCH/shards
    step "sample data" "${python[@]}" -m prepare.sample "$SCRATCH/source" --classes 10 \
        --train-per-class "${PER_CLASS:-1000}" --val-per-class 50
    step "prepare" "${python[@]}" -m prepare --source "$SCRATCH/source" --dest "$DATA"
fi
bench=("${python[@]}" -m train.bench --data "$DATA" --run-dir "$OUT" --no-dali)
step "CUDA data path tests" "${python[@]}" -m pytest -q -o addopts= -p no:cacheprovider tests/test_gpu.py \
    -k "not training"
step "GPU data path, stage by stage" "${python[@]}" -m train.bench.stages "$DATA"
step "model, feed and full, --decode cpu" "${bench[@]}" --modes model,feed,full --decode cpu --workers "$WORKERS" \
    --steps "$STEPS"
step "feed and full, --decode gpu" "${bench[@]}" --modes feed,full --decode gpu --workers "$WORKERS" --steps "$STEPS"
step "CUDA training tests" "${python[@]}" -m pytest -q -o addopts= -p no:cacheprovider tests/test_gpu.py \
    -k "training"
step "data" "${bench[@]}" --modes data --workers "1,$(( (WORKERS + 1) / 2 )),$WORKERS" --images 4000
rm -rf "$SCRATCH/train"  # a new run each time: python -m train refuses to overwrite a run's checkpoint
step "train resnet50, 2 epochs" "${python[@]}" -m train --data "$DATA" --run-dir "$SCRATCH/train" --arch resnet50 \
    --epochs 2 --batch-size 256 --workers "$WORKERS" --warmup-epochs 0 --log-every 10
cp "$SCRATCH/train/metrics.jsonl" "$OUT/train-metrics.jsonl" 2>/dev/null
echo "== $(date +%T) done in ${SECONDS}s: $OUT/benchmark.jsonl, $OUT/train-metrics.jsonl; failed: ${failed[*]:-none}; \
skipped (budget): ${skipped[*]:-none}"
[ ${#failed[@]} -eq 0 ] && [ ${#skipped[@]} -eq 0 ]
