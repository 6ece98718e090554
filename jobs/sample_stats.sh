#!/usr/bin/env bash
# What a node does while its job trains, sampled every STATS_EVERY seconds (default 10) into DIR (the run
# directory's stats/, beside metrics.jsonl), one file a node and tool, appended across a requeued job's starts:
#   vmstat-NODE.txt       vmstat -t -w: CPUs (user, system, idle, waiting on I/O), memory, swap, I/O: every node
#   xpu-smi-NODE.csv      Intel's GPUs (DAWN, Aurora): xpu-smi dump, every device, utilisation, power, memory
#   nvidia-smi-NODE.csv   NVIDIA's: utilisation, memory, power, a line a GPU
# A node with neither GPU tool is said in one line (its vmstat still sampled). Run by jobs/stage_and_train.sh with
# STATS=1, one task a node beside the training step; each ends when the file STOP appears (the job script makes it
# when training ends: a step ended by a signal would leave srun's complaints in the job's log):
#   srun --overlap --ntasks-per-node=1 bash jobs/sample_stats.sh DIR STOP
set -uo pipefail
dir=${1:?usage: sample_stats.sh DIR STOP} stop=${2:?usage: sample_stats.sh DIR STOP}
every=${STATS_EVERY:-10}
node=${SLURMD_NODENAME:-$(hostname -s)}  # (the node's name in SLURM: two slurmd on one host, as the tests run them, too)
mkdir -p "$dir"
trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM INT
vmstat -t -w "$every" >> "$dir/vmstat-$node.txt" &
if command -v xpu-smi > /dev/null; then  # metrics 0 GPU utilisation, 1 power, 5 memory utilisation, 18 memory used
  xpu-smi dump -d -1 -m 0,1,5,18 -i "$every" >> "$dir/xpu-smi-$node.csv" &
elif command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,utilization.memory,memory.used,power.draw --format=csv \
    -l "$every" >> "$dir/nvidia-smi-$node.csv" &
else
  echo "sample_stats.sh: $node has neither xpu-smi nor nvidia-smi: its GPUs are not sampled (vmstat is)"
fi
while [[ ! -e $stop ]]; do sleep 1; done
kill $(jobs -p) 2>/dev/null
exit 0
