"""A one-stream gzip inflated on one node: zlib (Python's gzip, one core), against rapidgzip on every core,
which is how prepare reads winter21_whole.tar.gz (prepare/sources/imagenet_full.py).

    python -m prepare.bench.inflate SCRATCH [--mb 1024] [--rounds 3]

The stream is a tar of photo-like JPEGs (the sample generator's, each stored under many names) gzipped as
one stream at level 6, gzip's default, as a release tarball is: its JPEG data barely compresses, as
ImageNet's does not. Each round reads the whole stream once with each reader, alternated, in 4 MiB reads;
throughput is decompressed MB/s by wall time. One JSON line a round and the medians.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import statistics
import tarfile
import time
from pathlib import Path

import rapidgzip

from prepare.sample import SampleSpec, sample_images

READ = 4 << 20


def write_stream(path: Path, megabytes: int) -> int:
    """The gzipped tar; returns its decompressed size."""
    images = [image for _, _, image in sample_images(SampleSpec(classes=10, train_per_class=20, val_per_class=1)).train]
    with gzip.open(path, "wb", compresslevel=6) as raw, tarfile.open(fileobj=raw, mode="w|") as tar:
        n = 0
        while raw.tell() < megabytes << 20:
            data = images[n % len(images)]
            info = tarfile.TarInfo(f"n00000000_{n}.JPEG")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            n += 1
    with gzip.open(path, "rb") as f:
        return sum(len(chunk) for chunk in iter(lambda: f.read(READ), b""))


def timed_read(open_stream) -> tuple[float, float, int]:
    """(wall s, CPU s of this process, bytes) of reading the stream through."""
    wall, cpu, size = time.monotonic(), time.process_time(), 0
    with open_stream() as f:
        while chunk := f.read(READ):
            size += len(chunk)
    return time.monotonic() - wall, time.process_time() - cpu, size


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m prepare.bench.inflate", description=__doc__.split("\n\n")[0])
    p.add_argument("scratch", type=Path)
    p.add_argument("--mb", type=int, default=1024, help="size of the tar the stream holds (its JPEGs barely compress)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    path = args.scratch / "stream.tar.gz"
    if not path.exists():
        write_stream(path, args.mb)
    cores = len(os.sched_getaffinity(0))
    readers = {"zlib": lambda: gzip.open(path, "rb"),
               f"rapidgzip ({cores} threads)": lambda: rapidgzip.open(str(path), parallelization=cores)}
    rates = {name: [] for name in readers}
    for round_ in range(args.rounds):
        for name, open_stream in readers.items():
            wall, cpu, size = timed_read(open_stream)
            rates[name].append(size / 1e6 / wall)
            print(json.dumps({"round": round_, "reader": name, "mb_per_s": round(size / 1e6 / wall, 1),
                              "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "bytes": size,
                              "compressed": path.stat().st_size}))
    medians = {name: round(statistics.median(r), 1) for name, r in rates.items()}
    names = list(medians)
    print(json.dumps({"median_mb_per_s": medians, "ratio": round(medians[names[1]] / medians[names[0]], 2)}))


if __name__ == "__main__":
    main()
