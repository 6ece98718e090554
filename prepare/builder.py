"""Build the shards: lock, idempotence, scatter (one pass over the source), deal, write, manifest.

    source parts (class tars, val member ranges, chunks of files) --(each read, checked and
        spilled by a worker)--> spill buckets in DEST/.prepare-tmp (a file per bucket and process)
    spill buckets --(deal_into_shards)--> DEST/{train,val}/*.tar, each written to a temporary name,
    fsynced and renamed --> DEST/manifest.json, written last: the completion marker.

A run killed at any moment leaves no manifest; the next run removes what it left and starts
again, and since every byte depends only on (source, options), it writes the same shards.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import pickle
import re
import resource
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from prepare.images import BadImage, Prepared, prepare_image
from prepare.shuffle import bucket_of, deal_into_shards, shard_count
from prepare.sources import (
    Item, Part, Source, SourceError, detect_layout, fingerprint, open_source,
)
from shards.layout import LOCK_NAME, SPLITS, WORK_DIR_NAME, shard_name
from shards.manifest import (
    DatasetNotReady, Manifest, ShardInfo, SplitInfo, find_damage, fsync_dir, manifest_path, read_manifest,
    write_manifest,
)
from shards.progress import Progress
from shards.resources import log_pil_build

log = logging.getLogger("prepare")

MB = 1 << 20
SHARD_FILE = re.compile(r"^(train|val)-\d{6}\.tar$")


class PrepareError(RuntimeError):
    """A refusal or failure whose message tells the user what to do."""


@dataclass(frozen=True)
class PrepareConfig:
    source: Path
    dest: Path
    seed: int = 0
    shard_size_mb: float = 200.0
    resize: int | None = None  # longer side at most this many pixels
    quality: int = 90  # JPEG quality of re-encoded images
    skip_bad: bool = False
    force: bool = False
    workers: int = 1
    progress_interval: float = 10.0

    def output_options(self) -> dict:
        """The options that decide the bytes of the shards (a re-run must match them)."""
        return {"seed": self.seed, "shard_size_mb": self.shard_size_mb, "resize": self.resize,
                "quality": self.quality, "skip_bad": self.skip_bad}


def prepare(config: PrepareConfig) -> Manifest:
    """Prepare the dataset at config.dest, or verify the one already there. Returns its manifest."""
    log_pil_build(log)
    source_root, dest = config.source.resolve(), config.dest.resolve()
    check_dest_outside_source(source_root, dest)
    identity = {"source": fingerprint(source_root, detect_layout(source_root)),
                "options": config.output_options()}
    make_dest(dest)
    with exclusive_lock(dest):
        existing = verified_existing(dest, identity, config.force)
        if existing is not None:
            return existing
        remove_incomplete(dest)
        source = open_source(source_root)
        check_free_space(dest, source, config)
        manifest = build(source, dest, config, identity)
        write_manifest(dest, manifest)
        shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)
    log_summary(dest, manifest)
    return manifest


# ---------------------------------------------------------------- refusals and idempotence

def check_dest_outside_source(source: Path, dest: Path) -> None:
    if dest == source or source in dest.parents:
        raise PrepareError(f"--dest {dest} is inside --source {source}: choose node-local disk "
                           "outside the source, e.g. $SLURM_TMPDIR/imagenet")


def make_dest(dest: Path) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            (dest / split).mkdir(exist_ok=True)
    except OSError as exn:
        raise PrepareError(f"cannot create --dest {dest}: {exn.strerror}. Choose a writable directory.") from None


@contextmanager
def exclusive_lock(dest: Path):
    """One prepare per destination: the others wait here, then find the manifest and verify it."""
    with open(dest / LOCK_NAME, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another prepare is writing %s; waiting for it to finish", dest)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def verified_existing(dest: Path, identity: dict, force: bool) -> Manifest | None:
    """The manifest of a complete dataset made from the same source and options, else None.

    Refuses (unless --force) to replace a dataset made with other options or found damaged; with
    --force, removes its manifest first so nothing mistakes the rebuild for complete.
    """
    try:
        manifest = read_manifest(dest)
    except DatasetNotReady:
        return None
    old = {"source": manifest.source, "options": manifest.options}
    problems = find_damage(dest, manifest) if old == identity else []
    if old == identity and not problems:
        log.info("%s already holds this dataset (%d train + %d val samples, %d shards verified); nothing to do",
                 dest, manifest.splits["train"].samples, manifest.splits["val"].samples,
                 sum(len(s.shards) for s in manifest.splits.values()))
        return manifest
    if not force:
        if problems:
            reason = "is damaged: " + "; ".join(problems[:3])
        else:
            reason = "was prepared differently: " + "; ".join(describe_difference(old, identity))
        raise PrepareError(f"{dest} {reason}. Rerun with --force to replace it, or choose another --dest.")
    log.warning("--force: replacing the dataset in %s", dest)
    manifest_path(dest).unlink()
    fsync_dir(dest)
    return None


def describe_difference(old: dict, new: dict) -> list[str]:
    diffs = []
    for name in sorted(set(old["options"]) | set(new["options"])):
        if old["options"].get(name) != new["options"].get(name):
            diffs.append(f"{name} was {old['options'].get(name)!r}, now {new['options'].get(name)!r}")
    for name in ("path", "layout"):
        if old["source"].get(name) != new["source"].get(name):
            diffs.append(f"source {name} was {old['source'].get(name)!r}, now {new['source'].get(name)!r}")
    before = {f["path"]: f for f in old["source"].get("files", [])}
    changed = [f["path"] for f in new["source"].get("files", []) if before.get(f["path"]) != f]
    if changed and not diffs:
        diffs.append(f"the source files changed since (size or modification time of {', '.join(changed)})")
    return diffs


def remove_incomplete(dest: Path) -> None:
    """Remove what an interrupted run left: shards, spill files. Refuses to touch foreign files."""
    for split in SPLITS:
        foreign = [p.name for p in (dest / split).iterdir() if not SHARD_FILE.match(p.name)]
        if foreign:
            raise PrepareError(f"{dest / split} holds files prepare did not write ({foreign[:3]}): "
                               "choose an empty --dest")
    for split in SPLITS:
        for path in (dest / split).iterdir():
            path.unlink()
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)


def check_free_space(dest: Path, source: Source, config: PrepareConfig) -> None:
    """Shards take about the source's size; spill files are removed as shards are written."""
    need = int(sum(source.split_bytes(s) for s in SPLITS) * 1.05 + 4 * config.shard_size_mb * MB)
    free = shutil.disk_usage(dest).free
    if free < need:
        raise PrepareError(f"{dest} has {free / 1e9:.1f} GB free; prepare needs about {need / 1e9:.1f} GB "
                           "(the size of the source). Free space, choose another --dest, or use --resize.")


# ---------------------------------------------------------------- the build

@dataclass
class SplitResult:
    buckets: list[list[str]]
    converted: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    source_bytes: int = 0


def build(source: Source, dest: Path, config: PrepareConfig, identity: dict) -> Manifest:
    start = time.monotonic()
    raise_open_file_limit()
    # webdataset's tar reader and writer, and torch, which it imports (about 2 s), are imported
    # here, once, before the pool forks: otherwise every worker pays the import on its first task.
    import webdataset  # noqa: F401
    context = multiprocessing.get_context("fork")  # fast start; nothing here has threads yet
    splits, converted, skipped, source_bytes = {}, {}, {}, 0
    with context.Pool(config.workers) if config.workers > 1 else contextlib.nullcontext() as pool:
        for split in SPLITS:
            work = dest / WORK_DIR_NAME / split
            work.mkdir(parents=True)
            num_buckets = shard_count(source.split_bytes(split), config.shard_size_mb * MB)
            result = scatter(source, split, num_buckets, work, config, pool)
            shards = deal_into_shards(result.buckets, config.seed)
            infos = write_shards(split, shards, result.buckets, work, dest, config, pool)
            splits[split] = SplitInfo(sum(s.samples for s in infos), sum(s.bytes for s in infos), infos)
            converted |= result.converted
            skipped |= result.skipped
            source_bytes += result.source_bytes
    elapsed = time.monotonic() - start
    samples = sum(s.samples for s in splits.values())
    stats = {"samples": samples, "bytes": sum(s.bytes for s in splits.values()), "source_bytes": source_bytes,
             "elapsed_s": round(elapsed, 3), "images_per_sec": round(samples / elapsed, 1),
             "mb_per_sec": round(source_bytes / MB / elapsed, 1), "workers": config.workers}
    return Manifest(source=identity["source"], options=identity["options"], classes=source.classes,
                    splits=splits, converted=converted, skipped=skipped, stats=stats)


def raise_open_file_limit() -> None:
    """A process scattering a part keeps up to one spill file per bucket open (700 for ImageNet's
    train); the workers inherit the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass(frozen=True)
class Scattered:
    """What the main process learns of one image: enough to account for it, never its bytes."""
    key: str
    origin: str
    size: int  # bytes in the source
    error: str | None  # why it is unusable (then it was not spilled)
    note: str | None = None  # how it was normalised, if it was


def scatter(source: Source, split: str, num_buckets: int, work: Path, config: PrepareConfig, pool) -> SplitResult:
    """Read the split once, check each image and spill it to its bucket; account for every image
    in source order (so bucket key lists, and the shards, are the same for any worker count)."""
    images = scatter_parts(source.parts(split), source.class_index(), num_buckets, work, config, pool)
    result = SplitResult([[] for _ in range(num_buckets)])
    seen = set()
    with Progress(f"{split}: read", source.split_bytes(split), "MB", scale=1 / MB,
                  interval=config.progress_interval) as bar:
        for image in images:
            result.source_bytes += image.size
            bar.update(image.size)
            if image.key in seen:
                raise SourceError(f"{image.origin}: a second image with the key {image.key}")
            seen.add(image.key)
            if image.error is not None:
                if not config.skip_bad:
                    raise PrepareError(f"{image.origin} {image.error}. Replace or remove it, or rerun with "
                                       "--skip-bad to leave it out (it is then listed in the manifest).")
                log.warning("skipping %s: %s", image.origin, image.error)
                result.skipped[image.key] = image.error
                continue
            if image.note:
                result.converted[image.key] = image.note
            result.buckets[bucket_of(image.key, config.seed, num_buckets)].append(image.key)
        bar.finish()
    expected, got = source.expected_count(split), len(seen)
    if expected is not None and got != expected:
        raise SourceError(f"the {split} source yielded {got} images, its labels list {expected}: "
                          "the archive or folder is incomplete")
    if not seen:
        raise SourceError(f"the {split} split of {source.root} holds no images")
    return result


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


def scatter_parts(parts: list[Part], classes: dict[str, int], num_buckets: int, work: Path, config: PrepareConfig,
                  pool) -> Iterator[Scattered]:
    """Each part is read where it is scattered, in a worker of `pool` (or here without one): the
    worker reads it at its offset (or its files), checks or re-encodes every image and spills it
    to bucket files of its own. Only small outcomes come back, in source order."""
    jobs = (PartJob(part, {w: classes[w] for w in part.wnids()}, num_buckets, config.seed, str(work), config.resize,
                    config.quality) for part in parts)
    for scattered in pool.imap(scatter_part, jobs) if pool else map(scatter_part, jobs):
        yield from scattered


def scatter_part(job: PartJob) -> list[Scattered]:
    out = []
    with BucketSpills(Path(job.work), tag=str(os.getpid())) as spills:
        for item in job.part.items():
            try:
                prepared = prepare_image(item.data, job.resize, job.quality)
            except BadImage as exn:
                out.append(Scattered(item.key, item.origin, len(item.data), str(exn)))
                continue
            spills.write(bucket_of(item.key, job.seed, job.num_buckets),
                         encode_sample(item, prepared.data or item.data, job.classes[item.wnid], prepared))
            out.append(Scattered(item.key, item.origin, len(item.data), None, prepared.note))
    return out


def spill_path(work: Path, bucket: int, tag: str = "") -> Path:
    """Bucket `bucket`'s spill file of one process, tagged with its pid: each process appends only
    to its own. Files are opened per part and closed after it, so none outlives the scatter (an
    open handle would keep a removed spill file's space until the pool ends)."""
    return work / f"bucket-{bucket:06d}{'.' + tag if tag else ''}.spill"


def spill_tags(work: Path) -> list[str]:
    """The tags of the spill files in `work` (one directory listing, after the scatter)."""
    return sorted({p.name.split(".")[1] if p.name.count(".") == 2 else "" for p in work.glob("bucket-*.spill")})


class BucketSpills:
    """One process's spill files, one per bucket, opened as samples arrive, closed on exit.

    Spill files are private scratch, read back only by this run: streams of pickled sample dicts,
    several times cheaper than tar members. Only the final shards are tars (webdataset's writer)."""

    def __init__(self, work: Path, tag: str = ""):
        self.work, self.tag, self.files = work, tag, {}

    def write(self, bucket: int, sample: dict) -> None:
        if bucket not in self.files:
            self.files[bucket] = open(spill_path(self.work, bucket, self.tag), "ab")
        pickle.dump(sample, self.files[bucket], protocol=pickle.HIGHEST_PROTOCOL)

    def __enter__(self) -> "BucketSpills":
        return self

    def __exit__(self, *exc) -> None:
        for f in self.files.values():
            f.close()


def read_spill(path: Path) -> dict[str, dict]:
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


def encode_sample(item: Item, data: bytes, label: int, image: Prepared) -> dict:
    meta = {"wnid": item.wnid, "width": image.width, "height": image.height}
    if (image.source_width, image.source_height) != (image.width, image.height):
        meta |= {"source_width": image.source_width, "source_height": image.source_height}
    return {"__key__": item.key, "jpg": data, "cls": str(label).encode(),
            "json": json.dumps(meta, sort_keys=True).encode()}


# ---------------------------------------------------------------- dealing spill buckets into shards

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


def write_shards(split: str, shards: list[tuple[int, list[str]]], buckets: list[list[str]], work: Path,
                 dest: Path, config: PrepareConfig, pool) -> list[ShardInfo]:
    """Givers first (they only lose samples, which they hand on to `moved/`), then receivers."""
    (work / "moved").mkdir()
    index_of = {bucket: index for index, (bucket, _) in enumerate(shards)}
    keys_of = dict(shards)
    moved_to = {k: b for b, keys in shards for k in keys if bucket_of(k, config.seed, len(buckets)) != b}
    givers, receivers = [], []
    tags = spill_tags(work)
    for b, keys in enumerate(buckets):
        job = ShardJob(split, b, index_of.get(b), keys_of.get(b, []),
                       {k: moved_to[k] for k in keys if k in moved_to}, str(work), str(dest), tags)
        if not keys and not job.keys:
            continue
        (receivers if len(job.keys) > len(keys) else givers).append(job)
    infos = []
    with Progress(f"{split}: write", len(shards), "shards", interval=config.progress_interval) as bar:
        for jobs in (givers, receivers):
            for info in (pool.imap_unordered(write_shard, jobs) if pool else map(write_shard, jobs)):
                if info is not None:
                    infos.append(info)
                    bar.update()
    return sorted(infos, key=lambda s: s.name)


def write_shard(job: ShardJob) -> ShardInfo | None:
    work, dest = Path(job.work), Path(job.dest)
    spills = [spill_path(work, job.bucket, tag) for tag in job.tags]
    samples = {}
    for path in spills:
        samples |= read_spill(path)
    incoming = sorted((work / "moved").glob(f"to-{job.bucket:06d}-from-*.spill"))
    for path in incoming:
        samples |= read_spill(path)
    for receiver in sorted(set(job.outgoing.values())):
        with open(work / "moved" / f"to-{receiver:06d}-from-{job.bucket:06d}.spill", "wb") as spill:
            for key in sorted(k for k, b in job.outgoing.items() if b == receiver):
                pickle.dump(samples[key], spill, protocol=pickle.HIGHEST_PROTOCOL)
    info = None
    if job.index is not None:
        name = shard_name(job.split, job.index)
        partial = work / f"{job.split}-{job.index:06d}.tar.partial"
        write_tar(partial, (samples[k] for k in job.keys))
        os.replace(partial, dest / name)
        info = ShardInfo(name, len(job.keys), (dest / name).stat().st_size)
    for path in spills:
        path.unlink(missing_ok=True)
    for path in incoming:
        path.unlink()
    return info


def write_tar(path: Path, samples: Iterable[dict]) -> None:
    """A shard written by webdataset's TarWriter with fixed metadata (mtime 0): same samples, same
    bytes. Fsynced: the manifest written after it must not outlive it."""
    # Imported here, not at the top: webdataset imports torch (2 s), which an idempotent re-run,
    # expected to finish in about a second, never needs.
    from webdataset import TarWriter

    with open(path, "wb") as f:
        with TarWriter(f, encoder=False, mtime=0) as writer:
            for sample in samples:
                writer.write(sample)
        f.flush()
        os.fsync(f.fileno())


def log_summary(dest: Path, manifest: Manifest) -> None:
    st = manifest.stats
    for split in SPLITS:
        s = manifest.splits[split]
        log.info("%s: %d samples in %d shards, %.2f GB", split, s.samples, len(s.shards), s.bytes / 1e9)
    log.info("converted %d images to RGB JPEG, skipped %d bad ones (listed in the manifest)",
             len(manifest.converted), len(manifest.skipped))
    log.info("done: %d images, %.2f GB written in %.1f s: %.0f images/s, %.0f MB/s read; manifest %s",
             st["samples"], st["bytes"] / 1e9, st["elapsed_s"], st["images_per_sec"], st["mb_per_sec"],
             manifest_path(dest))
