"""The writer: a split's spill buckets dealt into equal shards and written, in the workers.

    spill buckets (prepare/spills.py) --(shuffle.deal_into_shards, pure: which keys each shard
        holds)--> shard jobs (`shard_jobs`, pure: givers first, which only lose samples and hand
        them on to `moved/`, then receivers) --(`write_shard`, each in a worker)-->
        DEST/SPLIT/SPLIT-NNNNNN.tar, written to a temporary name in the scratch and renamed

A shard's bytes depend only on its keys and their samples (shards.format's writer), so the shards
are the same for any worker count and for the shared read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from prepare.config import PrepareConfig
from prepare.shuffle import bucket_of
from prepare.spills import moved_path, read_spill, spill_path, spill_tags, write_spill
from prepare.workers import failures_named
from shards.format import write_tar
from shards.paths import shard_name
from shards.manifest import ShardInfo
from shards.progress import Progress


@dataclass(frozen=True)
class ShardJob:
    """Write shard `index` from spill bucket `bucket`: keep what stays, hand on what moves."""
    split: str
    bucket: int
    index: int | None  # None: the bucket only gives its samples away
    keys: list[str]
    outgoing: dict[str, int]  # key -> bucket that receives it
    work: str
    dest: str
    tags: list[str]  # whose spill files of this bucket to read (see spill_path)
    # the buckets that hand samples on to this one (their moved files it reads), named: moved/ holds a file for
    # nearly every sample that moves (about 120,000 at ImageNet-21k's 6,500 shards), and each receiver listing it
    # made the writing quadratic in the shards
    incoming: tuple[int, ...]


def write_shards(split: str, shards: list[tuple[int, list[str]]], buckets: list[list[str]], work: Path,
                 dest: Path, config: PrepareConfig, pool) -> list[ShardInfo]:
    """The shards `shards` (deal_into_shards: (bucket, keys) of each) written from the spill
    `buckets` (the keys each holds), givers first, then receivers; their infos, by name."""
    (work / "moved").mkdir()
    givers, receivers = shard_jobs(split, shards, buckets, config.seed, work, dest, spill_tags(work))
    infos = []
    with Progress(f"{split}: write", len(shards), "shards", interval=config.progress_interval) as bar:
        for jobs in (givers, receivers):
            for info in (pool.imap_unordered(write_shard, jobs) if pool else map(write_shard, jobs)):
                if info is not None:
                    infos.append(info)
                    bar.update()
    return sorted(infos, key=lambda s: s.name)


def shard_jobs(split: str, shards: list[tuple[int, list[str]]], buckets: list[list[str]], seed: int, work: Path,
               dest: Path, tags: list[str]) -> tuple[list[ShardJob], list[ShardJob]]:
    """(givers, receivers): a job for every bucket that holds samples or receives some. Givers only
    lose samples, which they hand on to `moved/`; receivers, run after them, take them in."""
    index_of = {bucket: index for index, (bucket, _) in enumerate(shards)}
    keys_of = dict(shards)
    moved, incoming = {}, {}  # key -> the bucket that receives it; bucket -> the buckets that give to it
    for b, keys in shards:
        for k in keys:
            if (origin := bucket_of(k, seed, len(buckets))) != b:
                moved[k] = b
                incoming.setdefault(b, set()).add(origin)
    givers, receivers = [], []
    for b, keys in enumerate(buckets):
        job = ShardJob(split, b, index_of.get(b), keys_of.get(b, []), {k: moved[k] for k in keys if k in moved},
                       str(work), str(dest), tags, tuple(sorted(incoming.get(b, ()))))
        if not keys and not job.keys:
            continue
        (receivers if len(job.keys) > len(keys) else givers).append(job)
    return givers, receivers


def write_shard(job: ShardJob) -> ShardInfo | None:
    """A worker's task: the bucket's samples (its spills and what givers handed on) read back, the
    samples that move handed on, the shard written (if the bucket is one), its spills removed."""
    work, dest = Path(job.work), Path(job.dest)
    spills = [spill_path(work, job.bucket, tag) for tag in job.tags]
    incoming = [moved_path(work, job.bucket, giver) for giver in job.incoming]
    samples = {}
    for path in spills + incoming:
        samples |= read_spill(path)
    for receiver in sorted(set(job.outgoing.values())):
        write_spill(moved_path(work, receiver, job.bucket),
                    (samples[key] for key in sorted(k for k, b in job.outgoing.items() if b == receiver)))
    info = None if job.index is None else write_one(job.split, job.index, job.keys, samples, work, dest)
    for path in spills:
        path.unlink(missing_ok=True)
    for path in incoming:
        path.unlink()
    return info


def write_one(split: str, index: int, keys: list[str], samples: dict[str, dict], work: Path, dest: Path) -> ShardInfo:
    """Shard `index` of the split: `keys`' samples in that order, written in the scratch, renamed."""
    name = shard_name(split, index)
    partial = work / (Path(name).name + ".partial")
    with failures_named(str(dest / name)):
        checksum = write_tar(partial, (samples[k] for k in keys))
        os.replace(partial, dest / name)
    return ShardInfo(name, len(keys), (dest / name).stat().st_size, checksum)
