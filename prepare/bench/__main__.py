"""python -m prepare.bench --source DIR --scratch DIR: prepare against extraction and a copy (extraction.py)."""

import sys

from prepare.bench.extraction import main

sys.exit(main())
