"""srun python -m train [--data $SLURM_TMPDIR/imagenet] [--run-dir DIR] [options]"""

import sys

from train.cli import main

sys.exit(main())
