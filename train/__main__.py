"""srun python -m train [--data $SLURM_TMPDIR/imagenet] [--run-dir DIR] [options]"""

import sys

from shards.not_built import NotBuilt, run_door, stop_in_one_line

try:
    from train.run.cli import main
except NotBuilt as exn:  # a clone's unbuilt tree imported in place of the installed wheel, say
    stop_in_one_line("train", exn)

sys.exit(run_door("train", main))
