"""`python -m train.evaluate RUN_DIR`, the name users type: a run's checkpoint evaluated on its own lives in the
run's wing (train/run/evaluation.py). A door, like train/__main__.py: the library imports neither."""

import sys

from train.run.evaluation import main

if __name__ == "__main__":
    sys.exit(main())
