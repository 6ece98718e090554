"""python -m prepare --source /path/to/imagenet [--dest $SLURM_TMPDIR/imagenet] [options]"""

import sys

from shards.not_built import NotBuilt, run_door, stop_in_one_line

try:
    from prepare.cli import main
except NotBuilt as exn:  # a clone's unbuilt tree imported in place of the installed wheel, say
    stop_in_one_line("prepare", exn)

sys.exit(run_door("prepare", main))
