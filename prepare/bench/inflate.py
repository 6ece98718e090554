"""A one-stream gzip inflated on one node: zlib (Python's gzip, one core), against rapidgzip on every core,
which is how prepare reads winter21_whole.tar.gz the first time (prepare/sources/imagenet_full.py); then
the other way, a node's share read through the seek index that first read keeps (prepare/sources/gzip_index.py).

    python -m prepare.bench.inflate SCRATCH [--mb 1024] [--rounds 3] [--nodes 2 4 8]

The stream is a tar of photo-like JPEGs (the sample generator's, each stored under many names) gzipped as
one stream at level 6, gzip's default, as a release tarball is: its JPEG data barely compresses, as
ImageNet's does not. Each round reads the whole stream once with each reader, alternated, in 4 MiB reads;
throughput is decompressed MB/s by wall time. One JSON line a round and the medians.

With the index: the inflated stream cut into parts of 64 MiB (winter21's class tars average 57 MB), the
parts of one node of N (every N-th, as the shared read deals them) read by this machine's cores, a process
each with a one-thread reader, each part's CRC-32 taken, as prepare's workers read and check class tars. A node's MB/s is its share's bytes by
its wall time; the job's, the whole stream by that time (the nodes read at once, each its share). The
fan-out's job rate is one node's rapidgzip rate, however many nodes.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import multiprocessing
import os
import statistics
import tarfile
import time
import zlib
from pathlib import Path

import rapidgzip

from prepare.sources.gzip_index import index_format
from prepare.sample import SampleSpec, sample_images
from shards.paths import user_path

READ = 4 << 20
PART = 64 << 20


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
    p.add_argument("scratch", type=user_path)
    p.add_argument("--mb", type=int, default=1024, help="size of the tar the stream holds (its JPEGs barely compress)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, nargs="*", default=[2, 4, 8], help="shares read through the seek index")
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
    print(json.dumps({"crc32_mb_per_s": crc32_rate(path, args.rounds)}))  # what checking a class tar costs a core
    index = args.scratch / "stream.tar.gz.index"
    wall = time.monotonic()
    with rapidgzip.open(str(path), parallelization=cores) as f:
        while f.read(READ):
            pass
        size = f.tell()
        f.export_index(str(index), index_format())
    print(json.dumps({"index_bytes": index.stat().st_size, "index_bytes_per_gb": round(index.stat().st_size / (size / 1e9)),
                      "read_and_export_s": round(time.monotonic() - wall, 2)}))
    for nodes in args.nodes:
        node_rates = []
        for round_ in range(args.rounds):
            wall, read = share_read(str(path), str(index), size, nodes, cores)
            node_rates.append(read / 1e6 / wall)
            print(json.dumps({"round": round_, "nodes": nodes, "node_mb_per_s": round(read / 1e6 / wall, 1),
                              "wall_s": round(wall, 2), "bytes": read}))
        node = statistics.median(node_rates)
        job = node * nodes  # the whole stream in the time one node reads its share
        print(json.dumps({"nodes": nodes, "median_node_mb_per_s": round(node, 1), "job_mb_per_s": round(job, 1),
                          "job_against_fan_out": round(job / medians[names[1]], 2),
                          "job_against_zlib": round(job / medians[names[0]], 2)}))


def crc32_rate(path: Path, rounds: int) -> float:
    """Median MB/s of zlib.crc32 over the stream's first 256 MiB, in memory."""
    with gzip.open(path, "rb") as f:
        data = f.read(256 << 20)
    rates = []
    for _ in range(rounds):
        wall = time.monotonic()
        zlib.crc32(data)
        rates.append(len(data) / 1e6 / (time.monotonic() - wall))
    return round(statistics.median(rates), 1)


def share_read(path: str, index: str, size: int, nodes: int, cores: int) -> tuple[float, int]:
    """(wall s, bytes) of reading node 0's share of the parts through the index, `cores` processes."""
    parts = [(offset, min(PART, size - offset)) for offset in range(0, size, PART)][::nodes]
    wall = time.monotonic()
    with multiprocessing.get_context("fork").Pool(cores, initializer=open_indexed, initargs=(path, index)) as pool:
        read = sum(pool.map(read_part, parts, chunksize=1))
    return time.monotonic() - wall, read


_reader = None


def open_indexed(path: str, index: str) -> None:
    global _reader
    _reader = rapidgzip.open(path, parallelization=1)
    _reader.import_index(index)


def read_part(part: tuple[int, int]) -> int:
    """The part's bytes read in 4 MiB reads and their CRC-32 taken; how many there were."""
    offset, size = part
    _reader.seek(offset)
    left, crc = size, 0
    while left and (chunk := _reader.read(min(READ, left))):
        left -= len(chunk)
        crc = zlib.crc32(chunk, crc)
    return size - left


if __name__ == "__main__":
    main()
