# Sourced by the job scripts (stage_and_train.sh, benchmark.sbatch) and the dev scripts (demo.sh, gpu_benchmark.sh,
# local_cluster.sh): a path from the environment as the steps need it, and whether the clone's code is built to run.

# absolute PATH: PATH made absolute against this shell's working directory (the job's: where sbatch was called, or
# its --chdir), before the script's `cd "$REPO"` (under submit.sh REPO is a snapshot of the commit: a relative path
# would land inside it: a run directory there moves with the next commit, its --resume auto then starting over).
# A leading `~` is the home: sbatch --export=ALL,RUN_DIR=~/runs hands it over as typed (bash expands `~` only at a
# word's start or after an assignment's `=`), and a folder named `~` made here is one `rm -rf ~` from losing the home.
absolute() {
  local path=$1
  [[ $path == "~" || $path == "~/"* ]] && path=$HOME${path:1}
  if [[ $path == /* ]]; then echo "$path"; else echo "$PWD/$path"; fi
}

# absolute_command COMMAND: a command given as a path (PYTHON=.venv/bin/python, typed in the folder the script is
# called from) made absolute as `absolute` makes one, before the script's cd; a bare name (python3) is PATH's and
# stays as it is.
absolute_command() {
  if [[ $1 == */* || $1 == "~" ]]; then absolute "$1"; else echo "$1"; fi
}

# built_in REPO: whether REPO's native modules are built there (install.sh, submit.sh's snapshot), not the wheels
# installed. REPO quoted, the pattern only after it: compgen -G "$REPO/..." took a `[` or `*` in REPO's path as
# a pattern, matched nothing, and the job ran the installed package (`python -P`) in place of the clone's code.
built_in() {
  local found
  for found in "$1"/train/_jpegcrop*.so; do [[ -e $found ]] && return 0; done
  return 1
}
