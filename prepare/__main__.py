"""python -m prepare --source /path/to/imagenet [--dest $SLURM_TMPDIR/imagenet] [options]"""

import sys

from prepare.cli import main

sys.exit(main())
