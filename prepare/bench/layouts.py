"""python -m prepare.bench.layouts SCRATCH [--layouts official hf-parquet] [--workers 2] [--rounds 5]

The same sample ImageNet in several source layouts (prepare/sample.py's writers), prepared by
`prepare` from each, side by side in this process: interleaved rounds (the layouts' order turned
round each round, so drift in the machine's speed falls on all alike), warm page cache, the median
of the rounds. The sources are written to SCRATCH (kept for reruns of the same spec), the outputs
under SCRATCH/out (removed after each run). Prints images/s of each layout and its ratio to the
first, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path

from prepare.builder import prepare
from prepare.config import PrepareConfig
from prepare.sample import WRITERS, SampleSpec, sample_images
from shards.help import at_least_one
from shards.paths import user_path


def write_sources(scratch: Path, layouts: list[str], spec: SampleSpec) -> dict[str, Path]:
    """Each layout's sample under SCRATCH/<spec>/<layout>: the images drawn once, written if changed."""
    root = scratch / f"c{spec.classes}-t{spec.train_per_class}-v{spec.val_per_class}-w{spec.max_width}"
    images = sample_images(spec, workers=2)
    for layout in layouts:
        WRITERS[layout](root / layout, images)
    return {layout: root / layout for layout in layouts}


def time_prepare(source: Path, out: Path, workers: int) -> tuple[float, int]:
    """Seconds one prepare takes, and the images it wrote."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    manifest = prepare(PrepareConfig(source=source, dest=out, workers=workers, progress_interval=3600))
    elapsed = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    return elapsed, sum(split.samples for split in manifest.splits.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m prepare.bench.layouts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scratch", type=user_path)
    p.add_argument("--layouts", nargs="+", choices=list(WRITERS), default=["official", "hf-parquet"],
                   help="the first is the one the others are compared with")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=at_least_one, default=5)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=100)
    p.add_argument("--val-per-class", type=int, default=20)
    p.add_argument("--max-width", type=int, default=SampleSpec.max_width)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    spec = SampleSpec(args.classes, args.train_per_class, args.val_per_class, max_width=args.max_width)
    sources = write_sources(args.scratch, args.layouts, spec)
    seconds = {layout: [] for layout in args.layouts}
    images = {}
    time_prepare(sources[args.layouts[0]], args.scratch / "out", args.workers)  # warm: page cache, imports
    for round_ in range(args.rounds):
        for layout in args.layouts[::-1] if round_ % 2 else args.layouts:
            elapsed, images[layout] = time_prepare(sources[layout], args.scratch / "out", args.workers)
            seconds[layout].append(elapsed)
    rates = {layout: images[layout] / statistics.median(s) for layout, s in seconds.items()}
    first = args.layouts[0]
    for layout in args.layouts:
        median = statistics.median(seconds[layout])
        print(f"{layout:16s} {images[layout]} images, median of {args.rounds}: {median:.2f} s, "
              f"{rates[layout]:.0f} images/s, {rates[layout] / rates[first]:.3f}x {first}'s")
    print(json.dumps({"workers": args.workers, "rounds": args.rounds, "images": images,
                      "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
                      "images_per_sec": {k: round(v, 1) for k, v in rates.items()},
                      "ratio_to_first": {k: round(v / rates[first], 3) for k, v in rates.items()}}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
