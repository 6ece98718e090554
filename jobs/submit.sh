#!/usr/bin/env bash
# sbatch at the current git commit, as the Mila example's safe_sbatch does: the job runs a snapshot
# of the committed code (runs/code/<commit>), so edits made while it waits in the queue, or between
# its requeues, cannot change what it runs.
#
#   bash jobs/submit.sh jobs/imagenet.sbatch --export=ALL,IMAGENET=/datasets/imagenet [more sbatch options]
#
# Refuses uncommitted changes to tracked files. The .venv of this clone is used (PYTHON overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
(( $# >= 1 )) || { echo "usage: bash jobs/submit.sh JOB_SCRIPT [sbatch options]" >&2; exit 2; }
script=$1
shift
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "submit.sh: uncommitted changes (git status): commit them, so the job runs what a commit names" >&2
  exit 2
fi
commit=$(git rev-parse HEAD)
code=${CODE_DIR:-$PWD/runs/code}/$commit
if [[ ! -d $code ]]; then
  mkdir -p "$code.partial"
  git archive "$commit" | tar -x -C "$code.partial"
  echo "$commit" > "$code.partial/COMMIT"
  mv "$code.partial" "$code"
fi
export REPO=$code PYTHON=${PYTHON:-$PWD/.venv/bin/python}
echo "submit.sh: code at commit $commit in $code"
sbatch --chdir="$PWD" "$@" "$code/$script"
