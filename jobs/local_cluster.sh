#!/usr/bin/env bash
# A real two-node SLURM cluster on this one machine, for the tests and for trying the job scripts:
# munged, slurmctld and two slurmd daemons (node1, node2) from Debian's slurm-wlm, as root.
#
#   bash jobs/local_cluster.sh start    start (or keep) it; returns when sinfo shows both nodes idle
#   bash jobs/local_cluster.sh start --cancel-jobs
#                                       the same, cancelling its jobs first: the tests own the cluster,
#                                       and a job left by a killed run (or one the daemons lost in a
#                                       machine restart) would hold both nodes
#   bash jobs/local_cluster.sh stop     stop the daemons
#   bash jobs/local_cluster.sh status   sinfo
#   bash jobs/local_cluster.sh config   write its slurm.conf and TaskProlog only (what start does first)
#
# Its files are in LOCAL_SLURM_DIR (default /tmp/local-slurm; a relative one is from the folder it is called from).
# Each node gets its own "local disk": a TaskProlog exports
# SLURM_TMPDIR=$LOCAL_SLURM_DIR/tmp/<node>/job<id>, as cluster prologs do.
# Needs: root, slurm-wlm and munge (bash jobs/install.sh --dev installs them).
set -euo pipefail
source "$(dirname "$0")/paths.sh"

# absolute: the daemons do not run in this folder. slurm.conf takes a value with spaces in double quotes, but no `"`
# in it, and reads a `#` as a comment's start and a `\` as an escape
dir=$(absolute "${LOCAL_SLURM_DIR:-/tmp/local-slurm}")
if [[ $dir == *[\"#\\]* || $dir == *$'\n'* ]]; then
  echo "local_cluster.sh: LOCAL_SLURM_DIR=$dir holds a \", # or \\ that slurm.conf cannot take: give another folder" >&2
  exit 2
fi
conf=$dir/slurm.conf
export SLURM_CONF=$conf
# the daemons' command lines as a pgrep/pkill pattern matches them: $conf's own characters, not a regex's
conf_pattern=$(printf %s "$conf" | sed 's/[][\.*^$+?(){}|]/\\&/g')

# sh_quoted WORD: WORD in single quotes, for the TaskProlog (/bin/sh) to read back as it is
sh_quoted() {
  printf "'%s'" "${1//\'/\'\\\'\'}"
}

write_config() {
  mkdir -p "$dir"/{state,spool,log,tmp}
  cat > "$dir/task_prolog.sh" <<EOF
#!/bin/sh
# Runs before each task; lines "export NAME=value" on stdout go into the task's environment.
tmp=$(sh_quoted "$dir")/tmp/\$SLURMD_NODENAME/job\$SLURM_JOB_ID
mkdir -p "\$tmp"
echo "export SLURM_TMPDIR=\$tmp"
EOF
  chmod +x "$dir/task_prolog.sh"
  cat > "$conf" <<EOF
ClusterName=local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=16817
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=600
SlurmdTimeout=60
StateSaveLocation="$dir/state"
SlurmdSpoolDir="$dir/spool/%n"
SlurmctldPidFile="$dir/slurmctld.pid"
SlurmdPidFile="$dir/slurmd-%n.pid"
SlurmctldLogFile="$dir/log/slurmctld.log"
SlurmdLogFile="$dir/log/slurmd-%n.log"
TaskProlog="$dir/task_prolog.sh"
NodeName=node[1-2] NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001,17002 CPUs=2 RealMemory=4000 TmpDisk=100000
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

both_idle() {
  [[ $(sinfo -h -N -o "%N %t" 2>/dev/null | grep -cE "^node[12] idle") == 2 ]]
}

start() {
  [[ $(id -u) == 0 ]] || { echo "local_cluster.sh: needs root (slurmd runs tasks as any user)" >&2; exit 1; }
  for cmd in munged slurmctld slurmd sinfo; do
    command -v $cmd >/dev/null || { echo "local_cluster.sh: $cmd missing: bash jobs/install.sh --dev" >&2; exit 1; }
  done
  # node1/node2 must resolve: the rendezvous address of a job is its first node's name.
  grep -qE "^127\.0\.0\.1\s.*\bnode1\b" /etc/hosts || echo "127.0.0.1 node1 node2" >> /etc/hosts
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- munged
  fi
  write_config
  pgrep -f "slurmctld -f $conf_pattern" >/dev/null || slurmctld -f "$conf"
  for node in node1 node2; do
    pgrep -f "slurmd -f $conf_pattern -N $node" >/dev/null || slurmd -f "$conf" -N $node
  done
  if [[ ${1:-} == --cancel-jobs ]]; then
    for _ in $(seq 20); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
    scancel --full --quiet --partition=debug || true
  fi
  for _ in $(seq 120); do
    if both_idle; then
      echo "local_cluster.sh: node1 and node2 idle (SLURM_CONF=$conf)"
      return 0
    fi
    # A node left down by an earlier, killed run comes back when told to.
    scontrol update nodename=node[1-2] state=resume >/dev/null 2>&1 || true
    sleep 0.5
  done
  echo "local_cluster.sh: nodes not idle after 60 s; logs in $dir/log" >&2
  sinfo -N >&2 || true
  if [[ -n $(squeue -h 2>/dev/null) ]]; then
    squeue >&2 || true
    echo "local_cluster.sh: jobs hold the nodes: wait for them, or cancel them with: $0 start --cancel-jobs" >&2
  fi
  exit 1
}

stop() {
  pkill -f "slurmd -f $conf_pattern" || true
  pkill -f "slurmctld -f $conf_pattern" || true
  for _ in $(seq 50); do
    pgrep -f "slurm(ctld|d) -f $conf_pattern" >/dev/null || return 0
    sleep 0.2
  done
  pkill -9 -f "slurm(ctld|d) -f $conf_pattern" || true
}

case "${1:-}" in
  start) start "${2:-}" ;;
  stop) stop ;;
  status) sinfo -N ;;
  config) write_config ;;
  *) echo "usage: $0 start [--cancel-jobs]|stop|status|config" >&2; exit 2 ;;
esac
