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
from pathlib import Path


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


def moved_to(work: Path, receiver: int) -> list[Path]:
    """The files of samples handed on to bucket `receiver`, in the givers' order."""
    return sorted((work / "moved").glob(f"to-{receiver:06d}-from-*.spill"))


class BucketSpills:
    """One process's spill files, one per bucket, opened as samples arrive, closed on exit."""

    def __init__(self, work: Path, tag: str = ""):
        self.work, self.tag, self.files = work, tag, {}

    def write(self, bucket: int, sample: dict) -> None:
        pickle.dump(sample, self.file(bucket), protocol=pickle.HIGHEST_PROTOCOL)

    def write_pickled(self, bucket: int, pickled) -> None:
        """A sample pickled elsewhere (by another node's worker), as `write` would have written it."""
        self.file(bucket).write(pickled)

    def file(self, bucket: int):
        if bucket not in self.files:
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
