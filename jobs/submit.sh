#!/usr/bin/env bash
# sbatch at the current git commit, as the Mila example's safe_sbatch does: the job runs a snapshot
# of the committed code (runs/code/<commit>), so edits made while it waits in the queue, or between
# its requeues, cannot change what it runs.
#
#   bash jobs/submit.sh jobs/imagenet.sbatch --export=ALL,IMAGENET=/datasets/imagenet [more sbatch options]
#
# Refuses uncommitted changes to tracked files. The .venv of this clone is used (PYTHON overrides); CODE_DIR is
# where snapshots go (runs/code); a relative one of either is from the folder submit.sh is called from.
set -euo pipefail
source "$(dirname "$0")/paths.sh"
[[ -z ${PYTHON:-} ]] || PYTHON=$(absolute_command "$PYTHON")
[[ -z ${CODE_DIR:-} ]] || CODE_DIR=$(absolute "$CODE_DIR")
(( $# >= 1 )) || { echo "usage: bash jobs/submit.sh JOB_SCRIPT [sbatch options]" >&2; exit 2; }
# JOB_SCRIPT as the caller names it (from any folder, or absolute), else relative to the clone's root: the
# snapshot's copy of it is what runs, so it is made a path inside the clone
script=$1
[[ -f $script ]] && script=$(realpath -- "$script")
shift
cd "$(dirname "$0")/.."
if [[ $script == /* ]]; then
  [[ $script == "$(pwd -P)"/* ]] || {
    echo "submit.sh: $script is not in this clone ($PWD): give one of its job scripts, e.g. jobs/imagenet.sbatch" >&2
    exit 2
  }
  script=${script#"$(pwd -P)"/}
fi
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "submit.sh: uncommitted changes (git status): commit them, so the job runs what a commit names" >&2
  exit 2
fi
commit=$(git rev-parse HEAD)
code=${CODE_DIR:-$PWD/runs/code}/$commit
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
if [[ ! -d $code ]]; then
  # built in a folder of this submit.sh's own (two at once on one commit each build theirs; the first whole one
  # becomes the snapshot, the other's goes), so that a job never starts on a snapshot another is still building
  partial=$code.partial.$HOSTNAME.$$
  rm -rf "$partial"
  trap 'rm -rf "$partial"' EXIT
  for stale in "$code".partial."$HOSTNAME".*; do  # a submit.sh on this host killed while it built
    [[ -e $stale ]] && ! kill -0 "${stale##*.}" 2>/dev/null && rm -rf "$stale"
  done
  mkdir -p "$partial"
  git archive "$commit" | tar -x -C "$partial"
  echo "$commit" > "$partial/COMMIT"
  # the native modules of this commit, built beside its source (git holds no binaries), on the clone's
  # build of the vendored libjpeg-turbo where the commit's is the same (its stamp tells)
  [[ -d build/libjpeg-turbo ]] && mkdir -p "$partial/build" && cp -r build/libjpeg-turbo "$partial/build/"
  (cd "$partial" && "$PYTHON" -W ignore setup.py -q build_ext --inplace) || {
    echo "submit.sh: building the native modules of commit $commit failed (above): it needs what jobs/install.sh" \
         "needs (a compiler, NASM on x86-64, CMake). With the wheels installed instead, sbatch the job script" \
         "directly: the installed package does not change while the job waits" >&2
    exit 1
  }
  # -T: never into a snapshot another made meanwhile (then that one is used, and this one goes)
  mv -T "$partial" "$code" 2>/dev/null || [[ -f $code/COMMIT ]] || { echo "submit.sh: cannot make $code" >&2; exit 1; }
fi
[[ -f $code/$script ]] || {
  echo "submit.sh: $script is not in commit $commit: commit it (the job runs the commit's copy)" >&2
  exit 2
}
export REPO=$code PYTHON
echo "submit.sh: code at commit $commit in $code"
sbatch --chdir="$PWD" "$@" "$code/$script"
