#!/usr/bin/env bash
# The body of the job scripts (imagenet.sbatch, imagenet-1node.sbatch): stage ImageNet once per
# node into node-local disk, then train one task per GPU, forwarding the preemption signal.
#
# Environment (set with `sbatch --export=ALL,IMAGENET=...` or in the calling script):
#   IMAGENET      folder with the ImageNet archives (or extracted / Kaggle tree, or a Hugging Face hub
#                 download: ILSVRC/imagenet-1k, timm/imagenet-1k-wds) on shared storage
#   REPO          this repository (default: the folder sbatch was called from)
#   LOCAL_DISK    node-local disk, the same path on every node, where your site does not provide
#                 $SLURM_TMPDIR (default: each task's own $SLURM_TMPDIR, which may differ per node)
#   RUN_DIR       checkpoints and metrics on shared storage (default: runs/<job name>-<job id>)
# Relative paths are the job's working directory's (where sbatch was called, or its --chdir: submit.sh's clone);
# a leading ~/ is $HOME.
#   PREPARE_ARGS  extra options for `python -m prepare` (e.g. "--resize 512"; the evaluation sets:
#                 "--eval-source /datasets/imagenetv2-matched-frequency.tar.gz --real-labels /datasets/real.json")
#   TRAIN_ARGS    options for `python -m train` (default: "--arch resnet50 --epochs 90")
# The paths inside PREPARE_ARGS and TRAIN_ARGS are split at spaces and read from REPO, where the steps run (under
# submit.sh its snapshot of the commit, not the clone): give them absolute, without spaces.
#   STATS         1: sample each node while it trains (vmstat; xpu-smi or nvidia-smi where the node has it) into
#                 $RUN_DIR/stats/, every STATS_EVERY seconds (default 10): jobs/sample_stats.sh
set -euo pipefail

# A preemption signal before training (#SBATCH --signal=B:USR1@...: the time limit comes while prepare runs) has no
# step to forward to, and its default action ended this shell, and with it the job, not requeued: the job is requeued
# now (prepare stops and removes what it wrote; the requeued job prepares again).
trap 'echo "preemption signal before training: requeueing SLURM job $SLURM_JOB_ID (it prepares again when it starts)"
      scontrol requeue "$SLURM_JOB_ID"' USR1

: "${IMAGENET:?set IMAGENET to the folder with the ImageNet archives, e.g. sbatch --export=ALL,IMAGENET=/datasets/imagenet}"
REPO=${REPO:-$SLURM_SUBMIT_DIR}
[[ -f $REPO/prepare/__main__.py ]] || { echo "REPO=$REPO is not this repository: submit from its root or set REPO" >&2; exit 2; }
# With the wheels installed in the clone's .venv (README, "Install on a cluster") the clone's source tree
# has no built modules: `python -P` then imports the installed packages, not the clone's folders from
# the working directory. A clone built by install.sh (or submit.sh's snapshot) runs its own code.
source "$REPO/jobs/paths.sh"
PYTHON=$(absolute_command "${PYTHON:-$REPO/.venv/bin/python}")  # a relative one is the job's folder's, as the paths
python_flags=()
built_in "$REPO" || python_flags=(-P)
# The paths made absolute before the `cd "$REPO"` below (jobs/paths.sh says why).
IMAGENET=$(absolute "$IMAGENET")
[[ -z ${LOCAL_DISK:-} ]] || LOCAL_DISK=$(absolute "$LOCAL_DISK")
# Without LOCAL_DISK neither stage gets a path: each task takes its own node's $SLURM_TMPDIR/imagenet
# (this script runs on the first node only, and its $SLURM_TMPDIR may not be the others').
data_option=()
if [[ -n ${LOCAL_DISK:-} ]]; then
  data_option=(--dest "$LOCAL_DISK/imagenet")
elif [[ -z ${SLURM_TMPDIR:-} ]]; then
  echo "no SLURM_TMPDIR on this cluster: set LOCAL_DISK to the node-local disk" >&2
  exit 2
fi
RUN_DIR=$(absolute "${RUN_DIR:-runs/$SLURM_JOB_NAME-$SLURM_JOB_ID}")
TRAIN_ARGS=${TRAIN_ARGS:---arch resnet50 --epochs 90}
mkdir -p "$RUN_DIR"

# Slurm 22.05 to 23.02's srun does not inherit the job's --cpus-per-task, but reads this (23.11's inherits it again).
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}
tasks_per_node=${SLURM_NTASKS_PER_NODE:-1}
node_cpus=$(( SRUN_CPUS_PER_TASK * tasks_per_node ))
# A step of one task a node. The task count too: srun takes it from SLURM_NTASKS, which sbatch exports (every task
# of the job), and with several tasks a node it ignored --ntasks-per-node=1 alone ("Ignoring --ntasks-per-node").
one_a_node=(--nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1)

log=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -o 'StdOut=[^ ]*' | cut -d= -f2 || true)
echo "job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, $SLURM_NTASKS tasks"
echo "  log:         ${log:-see sbatch --output}"
echo "  code:        $REPO$( [[ -f $REPO/COMMIT ]] && echo " (commit $(cat "$REPO/COMMIT"))" )"
echo "  data:        $IMAGENET -> ${LOCAL_DISK:-\$SLURM_TMPDIR}/imagenet on each node"
echo "  metrics:     $RUN_DIR/metrics.jsonl"
echo "  checkpoints: $RUN_DIR/last.pt"
cd "$REPO"

# On every node, with all of its CPUs; the nodes share one read of the source; idempotent, so a
# requeued job only verifies (or re-stages just the nodes that lack the data). No --kill-on-bad-exit
# here: when one node fails, prepare tells the others, which print its error and clean up first.
# wait_for PID: its exit status, in $status. `wait` returns early when a trap fires: wait again until it is gone.
wait_for() {
  while true; do
    wait "$1" && status=0 || status=$?
    kill -0 "$1" 2>/dev/null || break
  done
}

# In the background, so that the trap above runs as the signal comes, not when prepare ends.
srun "${one_a_node[@]}" --cpus-per-task="$node_cpus" \
    "$PYTHON" "${python_flags[@]}" -m prepare --source "$IMAGENET" "${data_option[@]}" ${PREPARE_ARGS:-} &
step=$!
wait_for "$step"
(( status == 0 )) || exit "$status"

# Training runs in the background so that this shell can forward the preemption signal
# (#SBATCH --signal=B:USR1@...) to the step; train checkpoints and requeues the job.
[[ -n ${LOCAL_DISK:-} ]] && data_option=(--data "$LOCAL_DISK/imagenet")
srun --kill-on-bad-exit=1 "$PYTHON" "${python_flags[@]}" -m train "${data_option[@]}" --run-dir "$RUN_DIR" --resume auto --requeue \
    $TRAIN_ARGS &
step=$!
sampler=
if [[ ${STATS:-0} == 1 ]]; then  # beside the training, on its nodes, sharing their CPUs (--overlap) rather than taking any
  stop=$RUN_DIR/stats/.stop-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}
  srun --overlap "${one_a_node[@]}" --cpus-per-task=1 bash jobs/sample_stats.sh "$RUN_DIR/stats" "$stop" &
  sampler=$!
  echo "  stats:       $RUN_DIR/stats/ (every ${STATS_EVERY:-10} s)"
fi
trap 'echo "preemption signal: forwarding SIGUSR1 to the training step"; kill -USR1 $step' USR1
wait_for "$step"
if [[ -n $sampler ]]; then  # the samplers end as the file appears (each looks every second)
  touch "$stop"
  wait "$sampler" || true
  rm -f "$stop"
fi
exit "$status"
