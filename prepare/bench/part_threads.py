"""python -m prepare.bench.part_threads SCRATCH [--threads N] [--val-per-class K] [--rounds R]

One part that cannot be split (ILSVRC/imagenet-1k's val archive: one gzip stream) prepared by one
worker alone and by one worker with N threads (scatter.prepared_in_order, what a worker runs),
side by side in this process, alternating, best of R rounds each. The sample archive is written
to SCRATCH (kept for reruns). Prints images/s of each and their ratio, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from prepare import scatter
from prepare.sources import open_source
from prepare.sample import SampleSpec, make_sample
from shards.resources import available_cpus
from shards.paths import user_path


def time_part(part, classes: dict[str, int], threads: int) -> float:
    job = scatter.PartJob(part, classes, 4, 0, "/nonexistent", None, 90, 2, threads=threads)
    start = time.perf_counter()
    for _ in scatter.prepared_in_order(job):
        pass
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m prepare.bench.part_threads", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scratch", type=user_path)
    p.add_argument("--threads", type=int, default=available_cpus())
    p.add_argument("--val-per-class", type=int, default=60, help="images of each of the 10 classes in the archive")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if not (args.scratch / "data").is_dir():
        make_sample(args.scratch, "hf-imagenet-1k", SampleSpec(classes=10, train_per_class=4,
                                                              val_per_class=args.val_per_class), workers=2)
    source = open_source(args.scratch)
    part, classes = source.parts("val")[0], source.class_index()
    images = sum(1 for _ in part.items())
    best = {1: float("inf"), args.threads: float("inf")}
    for _ in range(args.rounds):
        for threads in best:
            best[threads] = min(best[threads], time_part(part, classes, threads))
    alone, threaded = images / best[1], images / best[args.threads]
    print(f"{images} images of one gzip part, best of {args.rounds}: 1 thread {alone:.0f} images/s, "
          f"{args.threads} threads {threaded:.0f} images/s: {threaded / alone:.2f}x")
    print(json.dumps({"images": images, "threads": args.threads, "alone_images_per_sec": round(alone, 1),
                      "threaded_images_per_sec": round(threaded, 1), "ratio": round(threaded / alone, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
