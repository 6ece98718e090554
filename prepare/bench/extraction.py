"""python -m prepare.bench --source DIR --scratch DIR: prepare against what users do today.

Side by side on the same official archives, same machine, same run:
  copy        a plain copy of the archive bytes (the I/O floor)
  extract     the Mila example's staging: torchvision's extract_archive on the outer train tar, then
              on each class tar, and on the val tar (an ImageFolder tree, not shuffled)
  prepare     python -m prepare's work (globally shuffled shards, labels, checks), in this process
Each starts with the archives evicted from the page cache (cold) and is then repeated warm.
Prints a table and one JSON line, appended to SCRATCH/prepare-benchmark.jsonl.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from prepare.builder import prepare
from prepare.config import PrepareConfig
from prepare.sources.official import TRAIN_TAR, VAL_TAR
from prepare.sources.base import DEVKIT
from shards.help import at_least_one
from shards.resources import available_cpus, evict_from_page_cache
from shards.paths import user_path

ARCHIVES = (TRAIN_TAR, VAL_TAR, DEVKIT)


def copy_archives(source: Path, out: Path) -> None:
    out.mkdir(parents=True)
    for name in ARCHIVES:
        shutil.copyfile(source / name, out / name)


def extract_like_mila(source: Path, out: Path) -> None:
    """torchvision's extract_archive on the outer train tar, then on each per-class tar; val flat."""
    from torchvision.datasets.utils import extract_archive

    train = out / "train"
    extract_archive(str(source / TRAIN_TAR), str(train))
    for inner in sorted(train.glob("*.tar")):
        extract_archive(str(inner), str(train / inner.stem), remove_finished=True)
    extract_archive(str(source / VAL_TAR), str(out / "val"))


def run_prepare(source: Path, out: Path, workers: int) -> None:
    prepare(PrepareConfig(source=source, dest=out, workers=workers, progress_interval=3600))


def timed(name: str, fn, source: Path, scratch: Path, cold: bool) -> float:
    out = scratch / name
    shutil.rmtree(out, ignore_errors=True)
    if cold:
        evict_from_page_cache([source / n for n in ARCHIVES])
    start = time.perf_counter()
    fn(source, out)
    elapsed = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m prepare.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--source", type=user_path, required=True, help="folder with the three official archives")
    p.add_argument("--scratch", type=user_path, required=True, help="local disk for the outputs (removed after)")
    p.add_argument("--workers", type=int, default=available_cpus())
    p.add_argument("--repeats", type=at_least_one, default=1, help="warm repetitions after the cold run")
    args = p.parse_args(argv)
    missing = [name for name in ARCHIVES if not (args.source / name).is_file()]
    if missing:  # the copy and the extraction it times against are of the official archives alone
        p.error(f"--source {args.source} lacks {', '.join(missing)}: give the folder of the three official archives "
                "(python -m prepare.sample OUT writes a small one)")
    logging.basicConfig(level=logging.WARNING)
    args.scratch.mkdir(parents=True, exist_ok=True)
    contenders = {"copy": copy_archives, "extract": extract_like_mila,
                  "prepare": lambda s, o: run_prepare(s, o, args.workers)}
    seconds = {name: {"cold": timed(name, fn, args.source, args.scratch, cold=True),
                      "warm": min(timed(name, fn, args.source, args.scratch, cold=False) for _ in range(args.repeats))}
               for name, fn in contenders.items()}
    images = sum(1 for _ in _val_and_train_members(args.source))
    size = sum((args.source / n).stat().st_size for n in ARCHIVES)
    record = {"images": images, "source_mb": round(size / 2**20, 1), "workers": args.workers, "seconds": seconds,
              "prepare_images_per_sec": images / seconds["prepare"]["warm"],
              "prepare_mb_per_sec": size / 2**20 / seconds["prepare"]["warm"],
              "speedup_vs_extract": seconds["extract"]["warm"] / seconds["prepare"]["warm"],
              "ratio_to_copy": seconds["prepare"]["warm"] / seconds["copy"]["warm"]}
    print(f"{'':10s}{'cold s':>9s}{'warm s':>9s}")
    for name, s in seconds.items():
        print(f"{name:10s}{s['cold']:9.2f}{s['warm']:9.2f}")
    print(f"prepare: {record['prepare_images_per_sec']:.0f} images/s, {record['prepare_mb_per_sec']:.0f} MB/s warm; "
          f"{record['speedup_vs_extract']:.2f}x the speed of extraction (above 1: faster), "
          f"{record['ratio_to_copy']:.2f}x the copy's time")
    print(json.dumps(record, sort_keys=True))
    with open(args.scratch / "prepare-benchmark.jsonl", "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    return 0


def _val_and_train_members(source: Path):
    """Image count of the archives (headers only)."""
    import tarfile

    with tarfile.open(source / VAL_TAR) as tar:
        yield from (m for m in tar if m.isfile())
    with tarfile.open(source / TRAIN_TAR) as outer:
        for member in outer:
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                yield from (m for m in inner if m.isfile())


if __name__ == "__main__":
    sys.exit(main())
