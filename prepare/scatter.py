"""The scatter: every image of a split read once, checked (or re-encoded) and spilled to its bucket.

    source parts (class tars, val member ranges, chunks of files, hub archives) --(each read by a
        worker: `scatter_part`, its images prepared in order, in threads where a split has fewer
        parts than workers)--> spill buckets (prepare/spills.py)
    the outcomes (`Scattered`, never the bytes) --(the main process, in source order:
        `account_pass`)--> each bucket's key list, what was converted, skipped or damaged

A pass reads one split; or several, where the source yields them together (winter21's stream before
its seek index: val and train from one inflation), each image naming its split.

Where a split's outcomes come from is a stage passed to the build, a `Reader`: `LocalRead` (this
node reads every part itself, in its workers) or the shared read's `SharedReader`, which sends the
same scatter's output (`scatter_items` into a part stream) to the other nodes.
"""

from __future__ import annotations

import collections
from contextlib import AbstractContextManager, ExitStack, nullcontext
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Protocol

from prepare.completeness import counted_shortfall, excess, imagenet_1k_warning, judged, shortfall
from prepare.config import PrepareConfig, PrepareError
from prepare.images import BadImage, Prepared, TooSmall, prepare_image
from prepare.shuffle import bucket_of
from prepare.sources.base import Item, Part, Source, SourceError
from prepare.spills import BucketSpills, most_spills_open
from prepare.workers import WorkerPool, failures_named, worker_pool
from shards.format import sample_record
from shards.progress import Progress
from shards.resources import MB

if TYPE_CHECKING:
    from prepare.exchange import PartStream

log = logging.getLogger("prepare")


@dataclass(frozen=True)
class Scattered:
    """What the main process learns of one image: enough to account for it, never its bytes."""
    key: str
    origin: str
    size: int  # bytes in the source
    error: str | None  # why it is unusable (then it was not spilled)
    note: str | None = None  # how it was normalised, if it was
    seekable: bool = False  # stored with restart markers
    damage: str | None = None  # what libjpeg found wrong in its entropy-coded data (kept, or with --skip-bad an error)
    left_out: bool = False  # under its layout's smallest side: `error` says so; skipped always, never a failure
    split: str | None = None  # the split it belongs to, where its part yields several (Item.split)


# ---------------------------------------------------------------- where a split's images come from

class Reader(Protocol):
    """Where a build's samples come from, a stage passed in: this node's own read of the source
    (LocalRead), or the shared read's exchange with the other nodes (prepare/shared_read.py)."""

    def disk_ahead(self) -> int:
        """Bytes of --dest the reader needs beyond the build's own (parts read ahead)."""

    def split_images(self, split: str, num_buckets: int, work: Path, pool) -> Iterator[Scattered]:
        """Every image of the split, read, checked and spilled to its bucket under `work`: the
        outcomes, in source order."""

    def read_together(self) -> tuple[str, ...]:
        """The splits this reader reads in one pass (`pass_images`), where the source yields them together."""

    def pass_images(self, into: dict[str, tuple[int, Path]], pool) -> Iterator[Scattered]:
        """Every image of the splits of `into` (split -> its bucket count and scratch, as split_images'),
        read in one pass: the outcomes in source order, each naming its split."""

    def stats(self) -> dict:
        """The manifest's stats of the reading: nodes, read_from_source_bytes, received_from_nodes_bytes."""

    def workers(self) -> "AbstractContextManager[WorkerPool | None]":
        """The worker processes the build runs its jobs in (None: in this process)."""


class LocalRead:
    """This node reads every part of the source itself, in its workers: forked for the build, or
    `forked` earlier (a shared read's, forked before its group's threads). A split's parts are
    planned when it is read, not before: what an earlier pass learnt can change them."""

    def __init__(self, source: Source, config: PrepareConfig, forked: WorkerPool | None = None):
        self.source, self.config, self.forked = source, config, forked
        self.read = 0  # bytes of the source in the parts read so far

    def workers(self) -> AbstractContextManager[WorkerPool | None]:
        return nullcontext(self.forked) if self.forked is not None else worker_pool(self.config.workers)

    def disk_ahead(self) -> int:
        return 0

    def split_images(self, split: str, num_buckets: int, work: Path, pool) -> Iterator[Scattered]:
        return self.scattered(self.source.parts(split), {split: (num_buckets, work)}, pool)

    def read_together(self) -> tuple[str, ...]:
        return self.source.read_together()

    def pass_images(self, into: dict[str, tuple[int, Path]], pool) -> Iterator[Scattered]:
        return self.scattered(self.source.joint_parts(tuple(into)), into, pool)

    def scattered(self, parts: list[Part], into: dict[str, tuple[int, Path]], pool) -> Iterator[Scattered]:
        self.read += sum(part.size for part in parts)
        return scatter_parts(parts, self.source.class_index(), into, self.config, pool)

    def stats(self) -> dict:
        return {"nodes": 1, "read_from_source_bytes": self.read, "received_from_nodes_bytes": 0}


# ---------------------------------------------------------------- the parts, in the workers

@dataclass(frozen=True)
class PartJob:
    """Scatter one part of the source (a class tar, a range of val members, a chunk of files)."""
    part: Part
    classes: dict[str, int]  # the labels of the part's wnids
    num_buckets: int
    seed: int
    work: str
    resize: int | None
    quality: int
    restart_mcus: int
    skip_bad: bool = False  # a damaged JPEG is then a bad image, not spilled
    threads: int = 1  # images of the part prepared at once (threads_per_part)
    joint: tuple[tuple[str, int, str], ...] = ()  # a part of several splits: each's (split, num_buckets, work)

    def buckets_of(self, split: str | None) -> int:
        """The bucket count of the split an image names (None: the job's own)."""
        return self.num_buckets if split is None else dict((name, n) for name, n, _ in self.joint)[split]


def threads_per_part(workers: int, parts: int) -> int:
    """Threads that prepare a part's images at once: the workers a split has beyond its parts. The
    official archive's 1,000 class tars get one each; a gzip stream, which cannot be split, gets its
    share of the workers (ILSVRC/imagenet-1k's 5 train archives on 16 workers: 3 each). The C
    rewrite releases the GIL, and the images keep their order: the bytes do not depend on it."""
    return max(1, workers // max(parts, 1))


def part_jobs(parts: list[Part], classes: dict[str, int], into: dict[str, tuple[int, Path]], config: PrepareConfig,
              at_once: int) -> Iterator[PartJob]:
    """A job for each part, in order, as the workers take them: `at_once` parts are read at the same
    time, so each prepares its images in threads_per_part(workers, at_once) threads. `into`: split ->
    its bucket count and scratch (several where a pass yields several splits)."""
    threads = threads_per_part(config.workers, at_once)
    (num_buckets, work), *_ = into.values()
    joint = tuple((split, n, str(path)) for split, (n, path) in into.items()) if len(into) > 1 else ()
    return (PartJob(part, {w: classes[w] for w in part.wnids()}, num_buckets, config.seed, str(work), config.resize,
                    config.quality, config.restart_mcus, config.skip_bad, threads, joint) for part in parts)


def scatter_parts(parts: list[Part], classes: dict[str, int], into: dict[str, tuple[int, Path]],
                  config: PrepareConfig, pool) -> Iterator[Scattered]:
    """Each part is read where it is scattered, in a worker of `pool` (or here without one): the
    worker reads it at its offset (or its files), checks or re-encodes every image and spills it
    to bucket files of its own. Only small outcomes come back, in source order."""
    jobs = part_jobs(parts, classes, into, config, at_once=len(parts))
    for scattered in pool.imap(scatter_part, jobs) if pool else map(scatter_part, jobs):
        yield from scattered


def scatter_part(job: PartJob) -> list[Scattered]:
    """A worker's task: the part's images into this process's spill files (each split's, where the
    part yields several)."""
    tag = str(os.getpid())
    most_open = most_spills_open(sharing=1 + len(job.joint))
    with ExitStack() as open_spills:
        spills = {None: open_spills.enter_context(BucketSpills(Path(job.work), tag, most_open))}
        for split, _, work in job.joint:
            spills[split] = open_spills.enter_context(BucketSpills(Path(work), tag, most_open))
        return scatter_items(job, spills)


def scatter_items(job: PartJob, spills: dict[str | None, BucketSpills | PartStream]) -> list[Scattered]:
    """Check (or re-encode) each image of the part and write it to its split's `spills` (this
    process's spill files, or the shared read's part stream; None: the job's own split); the outcomes."""
    out = []
    for item, prepared in prepared_in_order(job):
        with failures_named(item.origin):
            if isinstance(prepared, (BadImage, TooSmall)):
                out.append(Scattered(item.key, item.origin, len(item.data), str(prepared),
                                     left_out=isinstance(prepared, TooSmall), split=item.split))
                continue
            if prepared.damage is not None and job.skip_bad:
                out.append(Scattered(item.key, item.origin, len(item.data), damaged_image(prepared.damage),
                                     damage=prepared.damage, split=item.split))
                continue
            spills[item.split].write(bucket_of(item.key, job.seed, job.buckets_of(item.split)),
                                     encode_sample(item, prepared.data or item.data, job.classes[item.wnid], prepared))
            out.append(Scattered(item.key, item.origin, len(item.data), None, prepared.note,
                                 prepared.restart_interval > 0, prepared.damage, split=item.split))
    return out


def prepared_in_order(job: PartJob) -> Iterator[tuple[Item, Prepared | BadImage]]:
    """Each item of the part with what prepare_image made of it (or the BadImage it raised), in the
    part's order, `job.threads` images at once (a few more read ahead)."""
    def prepare(item: Item) -> Prepared | BadImage | TooSmall:
        with failures_named(item.origin):  # an unexpected failure: one line naming the image, thread or not
            try:
                return prepare_image(item.data, job.resize, job.quality, restart_mcus=job.restart_mcus,
                                     min_side=item.min_side)
            except (BadImage, TooSmall) as exn:
                return exn

    if job.threads == 1:
        yield from ((item, prepare(item)) for item in items_named(job.part))
        return
    with ThreadPoolExecutor(job.threads) as pool:
        pending: collections.deque = collections.deque()
        for item in items_named(job.part):
            pending.append((item, pool.submit(prepare, item)))
            if len(pending) > 2 * job.threads:
                item, prepared = pending.popleft()
                yield item, prepared.result()
        while pending:
            item, prepared = pending.popleft()
            yield item, prepared.result()


def items_named(part: Part) -> Iterator[Item]:
    """The part's items; an unexpected failure while reading it is one line naming the part's file."""
    with failures_named(part_origin(part)):
        yield from part.items()


def part_origin(part: Part) -> str:
    """The file a part is read from, for messages: its archive, shard, Parquet file or zip."""
    for name in ("path", "archive", "zip_path"):
        if isinstance(getattr(part, name, None), str):
            return getattr(part, name)
    return f"a {type(part).__name__} of the source"


def encode_sample(item: Item, data: bytes, label: int, image: Prepared) -> dict:
    """The sample as shards.format writes it, with its image's sizes (and the source's, if resized)."""
    meta = {"wnid": item.wnid, "width": image.width, "height": image.height}
    if (image.source_width, image.source_height) != (image.width, image.height):
        meta |= {"source_width": image.source_width, "source_height": image.source_height}
    return sample_record(item.key, data, label, meta)


def damaged_image(damage: str) -> str:
    """Why a damaged JPEG is left out with --skip-bad (after its origin, as BadImage's reasons)."""
    return f"has damaged JPEG data (libjpeg: {damage})"


def bad_image_stops_the_run(image: Scattered) -> PrepareError:
    return PrepareError(f"{image.origin} {image.error}. Replace or remove it, or rerun with --skip-bad to leave it "
                        "out (it is then listed in the manifest).")


# ---------------------------------------------------------------- the outcomes, in the main process

@dataclass
class SplitResult:
    buckets: list[list[str]]
    converted: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)  # stored as they are: key -> what libjpeg found
    source_bytes: int = 0
    seekable: int = 0  # images stored with restart markers
    left_out: int = 0  # images under their layout's smallest side, in `skipped`
    partial: str | None = None  # what the split lacks against its declaration (with --allow-partial)
    warning: str | None = None  # its count, where nothing declares one, against ImageNet-1k's


DAMAGED_NAMED = 20  # damaged JPEGs a run names in its log one by one; the rest are counted (the manifest lists all)


class DamageLog:
    """One warning line for each of a run's first DAMAGED_NAMED damaged JPEGs, then one line saying
    that the others are only counted: a source with thousands of them keeps a readable log."""

    def __init__(self, limit: int | None = None):
        self.limit, self.seen = DAMAGED_NAMED if limit is None else limit, 0

    def warn(self, message: str, *args) -> None:
        self.seen += 1
        if self.seen <= self.limit:
            log.warning(message, *args)
        elif self.seen == self.limit + 1:
            log.warning("more damaged JPEGs: the log names no more of them (%d so far); the manifest lists "
                        "every one and the summary counts them", self.seen)


def account_split(source: Source, split: str, images: Iterator[Scattered], num_buckets: int,
                  config: PrepareConfig, damage_log: DamageLog | None = None) -> SplitResult:
    """Account for every image of the split, read once, checked and spilled to its bucket, in source
    order (so bucket key lists, and the shards, are the same for any worker or node count)."""
    return account_pass(source, images, {split: num_buckets}, config, damage_log)[split]


def account_pass(source: Source, images: Iterator[Scattered], num_buckets: dict[str, int], config: PrepareConfig,
                 damage_log: DamageLog | None = None) -> dict[str, SplitResult]:
    """Account for the images of one pass (one split's, or several splits' where the source yields
    them together: each image names its split), each split's in its source order."""
    damage_log = damage_log or DamageLog()
    accounts = {split: SplitAccount(source, split, n, config, damage_log) for split, n in num_buckets.items()}
    own = next(iter(accounts))
    total = sum(source.split_bytes(split) for split in accounts)
    with Progress(f"{' and '.join(accounts)}: read", total, "MB", scale=1 / MB, interval=config.progress_interval) as bar:
        for image in images:
            bar.update(image.size)
            accounts[image.split or own].add(image)
        bar.finish()
    return {split: account.result() for split, account in accounts.items()}


class SplitAccount:
    """One split's images as they come, in source order: each bucket's keys, what was converted,
    skipped or damaged. Damaged JPEGs are named in the log (`damage_log`: the first few of the run)
    and listed: as `damaged` where they are stored, as `skipped` with --skip-bad."""

    def __init__(self, source: Source, split: str, num_buckets: int, config: PrepareConfig, damage_log: DamageLog):
        self.source, self.split, self.config, self.damage_log = source, split, config, damage_log
        self.num_buckets, self.seen = num_buckets, set()
        self.done = SplitResult([[] for _ in range(num_buckets)])

    def add(self, image: Scattered) -> None:
        result, config = self.done, self.config
        result.source_bytes += image.size
        if image.key in self.seen:
            raise SourceError(f"{image.origin}: a second image with the key {image.key}")
        self.seen.add(image.key)
        if image.left_out:  # under its layout's smallest side: counted and named, whatever --skip-bad says
            result.skipped[image.key] = image.error
            result.left_out += 1
            return
        if image.error is not None:
            if not config.skip_bad:
                raise bad_image_stops_the_run(image)
            if image.damage is None:
                log.warning("skipping %s: %s", image.origin, image.error)
            else:
                self.damage_log.warn("skipping %s: %s", image.origin, image.error)
            result.skipped[image.key] = image.error
            return
        if image.damage is not None:
            self.damage_log.warn("damaged JPEG %s: libjpeg says \"%s\"; stored as it is, listed under \"damaged\" "
                                 "in the manifest (--skip-bad leaves such images out)", image.origin, image.damage)
            result.damaged[image.key] = image.damage
        if image.note:
            result.converted[image.key] = image.note
        result.seekable += image.seekable
        result.buckets[bucket_of(image.key, config.seed, self.num_buckets)].append(image.key)

    def result(self) -> SplitResult:
        """The split's result, once every image came: refused where it holds none, or not what its
        download declares (prepare/completeness.py)."""
        result, split, source = self.done, self.split, self.source
        if result.left_out:
            log.info("%s: left out %d images under their layout's smallest side (named under \"skipped\" in the "
                     "manifest)", split, result.left_out)
        if not self.seen:
            raise SourceError(f"the {split} split of {source.root} holds no images{source.why_empty(split)}")
        result.partial, result.warning = counted(source, split, len(self.seen), self.config.allow_partial)
        return result


def counted(source: Source, split: str, got: int, allow_partial: bool) -> tuple[str | None, str | None]:
    """After a split is read: (what it lacks, for the manifest's "partial"; a warning where nothing
    declares its count). Refuses more images than declared, and fewer where only reading could count
    them (a gzip stream's), unless --allow-partial."""
    declared = source.declared(split)
    short, too_many = counted_shortfall(declared, got), excess(declared, got)
    problem, allowed = judged([short] if short else [], [too_many] if too_many else [], allow_partial)
    if problem:
        raise SourceError(problem)
    for line in allowed:
        log.warning("--allow-partial: %s; prepared what is there (recorded in the manifest's \"partial\")", line)
    warning = None if declared.images is not None else imagenet_1k_warning(split, len(source.classes), got)
    if warning:
        log.warning("%s (recorded in the manifest's \"warnings\")", warning)
    return shortfall(declared) or short, warning
