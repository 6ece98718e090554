"""python -m train.bench --data DIR [--modes data,model,feed,full] [options]"""

import sys

from train.bench.cli import main

sys.exit(main())
