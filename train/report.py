"""`python -m train.report RUN_DIR`, the name users type: the run's report lives in the run's wing
(train/run/report.py). A door, like train/__main__.py: the library imports neither."""

import sys

from shards.not_built import NotBuilt, run_door, stop_in_one_line

try:
    from train.run.report import main
except NotBuilt as exn:  # a clone's unbuilt tree imported in place of the installed wheel, say
    stop_in_one_line("train.report", exn)

if __name__ == "__main__":
    sys.exit(run_door("train.report", main))
