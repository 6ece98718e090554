"""srun python -m train [--data $SLURM_TMPDIR/imagenet] [--run-dir DIR] [options]"""

import sys

from train.run.cli import main

sys.exit(main())
