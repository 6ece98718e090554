"""`python -m train.evaluate RUN_DIR`, the name users type: a run's checkpoint evaluated on its own lives in the
run's wing (train/run/evaluation.py). A door, like train/__main__.py: the library imports neither."""

import sys

from shards.not_built import NotBuilt, run_door, stop_in_one_line

try:
    from train.run.evaluation import main
except NotBuilt as exn:  # a clone's unbuilt tree imported in place of the installed wheel, say
    stop_in_one_line("train.evaluate", exn)

if __name__ == "__main__":
    sys.exit(run_door("train.evaluate", main))
