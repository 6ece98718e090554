"""`python -m train.report RUN_DIR`, the name users type: the run's report lives in the run's wing
(train/run/report.py). A door, like train/__main__.py: the library imports neither."""

import sys

from train.run.report import main

if __name__ == "__main__":
    sys.exit(main())
