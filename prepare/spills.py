"""The spill files: the build's private scratch in DEST/.prepare-tmp/SPLIT, between the scatter
(prepare/scatter.py, which appends each sample to its bucket's file) and the shard writer
(prepare/shard_writer.py, which reads a bucket back and hands on the samples that move).

    bucket-000042.PID.spill            one process's samples of bucket 42 (tagged: each process
                                       appends only to its own; the shared read's receiver: "x")
    moved/to-000007-from-000042.spill  the samples bucket 42 gives to bucket 7 (dealing)

Streams of pickled sample dicts, several times cheaper than tar members, read back only by this
run. Only the final shards are tars (`shards.format.ShardTarWriter`).
"""

from __future__ import annotations

import pickle
import resource
from pathlib import Path

# Open files a process keeps for everything but its spill files: the source's files, the pool's pipes, a shared
# read's sockets, the logs.
RESERVED_FILES = 128


def spill_path(work: Path, bucket: int, tag: str = "") -> Path:
    """Bucket `bucket`'s spill file of one process, tagged with its pid: each process appends only
    to its own. Files are opened per part and closed after it, so none outlives the scatter (an
    open handle would keep a removed spill file's space until the pool ends)."""
    return work / f"bucket-{bucket:06d}{'.' + tag if tag else ''}.spill"


def spill_tags(work: Path) -> list[str]:
    """The tags of the spill files in `work` (one directory listing, after the scatter)."""
    return sorted({p.name.split(".")[1] if p.name.count(".") == 2 else "" for p in work.glob("bucket-*.spill")})


def moved_path(work: Path, receiver: int, giver: int) -> Path:
    """The samples bucket `giver` hands on to bucket `receiver` (written by the giver's shard job)."""
    return work / "moved" / f"to-{receiver:06d}-from-{giver:06d}.spill"


def most_spills_open(sharing: int = 1) -> int:
    """How many spill files one `BucketSpills` keeps open at once: the process's open-file limit (prepare lifts it
    to the hard limit) less what the rest of the process holds, shared by the `sharing` BucketSpills a process
    writes at once (a pass of several splits). It matters only where the limit is lower than a part's buckets: a
    cluster's hard `ulimit -n` of 1024 under ImageNet-21k's 6,500 buckets failed with "Too many open files"."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(4, (soft - RESERVED_FILES) // max(sharing, 1))


class BucketSpills:
    """One process's spill files, one per bucket, opened as samples arrive, closed on exit; at most `most_open`
    at once (past it, the one opened first is closed: appending reopens it)."""

    def __init__(self, work: Path, tag: str = "", most_open: int | None = None):
        self.work, self.tag, self.files = work, tag, {}
        self.most_open = most_open if most_open is not None else most_spills_open()

    def write(self, bucket: int, sample: dict) -> None:
        pickle.dump(sample, self.file(bucket), protocol=pickle.HIGHEST_PROTOCOL)

    def write_pickled(self, bucket: int, pickled) -> None:
        """A sample pickled elsewhere (by another node's worker), as `write` would have written it."""
        self.file(bucket).write(pickled)

    def file(self, bucket: int):
        if bucket not in self.files:
            if len(self.files) >= self.most_open:
                self.files.pop(next(iter(self.files))).close()
            self.files[bucket] = open(spill_path(self.work, bucket, self.tag), "ab")
        return self.files[bucket]

    def __enter__(self) -> "BucketSpills":
        return self

    def __exit__(self, *exc) -> None:
        for f in self.files.values():
            f.close()


def read_spill(path: Path) -> dict[str, dict]:
    """The samples of a spill file by key (none if it does not exist)."""
    samples = {}
    if path.exists():
        with open(path, "rb") as f:
            while True:
                try:
                    sample = pickle.load(f)  # our own scratch file, written above: trusted
                except EOFError:
                    return samples
                samples[sample["__key__"]] = sample
    return samples


def write_spill(path: Path, samples) -> None:
    """`samples` (dicts), pickled one after another, as a new spill file."""
    with open(path, "wb") as spill:
        for sample in samples:
            pickle.dump(sample, spill, protocol=pickle.HIGHEST_PROTOCOL)
