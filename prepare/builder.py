"""Build the shards: lock, idempotence, scatter (one pass over the source), deal, write, manifest.

    source parts (class tars, val member ranges, chunks of files) --(each read, checked and
        spilled by a worker)--> spill buckets in DEST/.prepare-tmp (a file per bucket and process)
    spill buckets --(deal_into_shards)--> DEST/{train,val}/*.tar, each written to a temporary name,
    fsynced and renamed --> DEST/manifest.json, written last: the completion marker.

A run killed at any moment leaves no manifest; the next run removes what it left and starts
again, and since every byte depends only on (source, options), it writes the same shards.

Evaluation sets added to a complete dataset (`add_eval_sets`) are built the same way, alone: their
shards, then ReaL's labels, then the new manifest over the old one. A kill leaves the old manifest,
whose files were not touched; the next run removes what is not listed (`remove_unlisted`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import logging
import os
import pickle
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Protocol

from prepare.completeness import (
    counted_shortfall, excess, imagenet_1k_warning, nothing_there, refusal, shortfall,
)
from prepare.eval_sets import (
    EvalAddition, PreparedDataset, added_sources, eval_addition, eval_fingerprint, real_labels_document,
    with_eval_sets, without_eval_sets,
)
from prepare.images import RESTART_MCUS, BadImage, Prepared, prepare_image
from prepare.layouts import detect_layout, fingerprint, open_source
from prepare.lock import exclusive_lock
from prepare.node_group import NodeGroupEnv
from prepare.shuffle import bucket_of, deal_into_shards, shard_count
from prepare.space import MARGIN, free_bytes, is_out_of_space, out_of_space_message, space_needed
from prepare.sources import Item, Part, Source, SourceError
from prepare.workers import WorkerPool
from shards.errors import UserError
from shards.format import sample_record, write_tar
from shards.layout import (
    ALL_SPLITS, EVAL_SPLITS, MANIFEST_NAME, REAL_LABELS_FILE, SHARD_FILE, SPLITS, WORK_DIR_NAME, shard_name,
)
from shards.manifest import (
    DatasetNotReady, Manifest, ShardInfo, SplitInfo, checksum_problem, checksummed_files, find_damage, fsync_dir, manifest_path,
    read_manifest, split_order, write_file_atomic, write_manifest,
)
from shards.progress import Progress
from shards.resources import MB, log_pil_build, raise_open_file_limit

if TYPE_CHECKING:
    from prepare.exchange import PartStream

log = logging.getLogger("prepare")



class PrepareError(UserError, RuntimeError):
    """A refusal or failure whose message tells the user what to do."""


@dataclass(frozen=True)
class PrepareConfig:
    source: Path
    dest: Path
    seed: int = 0
    shard_size_mb: float = 200.0
    resize: int | None = None  # longer side at most this many pixels
    quality: int = 90  # JPEG quality of re-encoded images
    restart_mcus: int = RESTART_MCUS  # seekable JPEGs: restart markers every at most this many MCUs (0: none)
    skip_bad: bool = False
    force: bool = False
    verify: bool = False  # read every shard of an existing dataset against its checksums
    workers: int = 1
    progress_interval: float = 10.0
    group: NodeGroupEnv | None = None  # the srun step's nodes, sharing the read (None: this node reads alone)
    group_timeout_s: float = 1800.0  # longest wait for another node in any one collective
    eval_sources: tuple[Path, ...] = ()  # ImageNetV2 variants (archives or folders): further splits (eval_sets.py)
    real_labels: Path | None = None  # ReaL's real.json: the val images' label sets
    allow_partial: bool = False  # prepare what is there of an incomplete download (recorded in the manifest)

    def output_options(self) -> dict:
        """The options that decide the bytes of the shards (a re-run must match them)."""
        return {"seed": self.seed, "shard_size_mb": self.shard_size_mb, "resize": self.resize,
                "quality": self.quality, "restart_mcus": self.restart_mcus, "skip_bad": self.skip_bad}


def prepare(config: PrepareConfig) -> Manifest:
    """Prepare the dataset at config.dest on this node alone, or verify the one already there.
    Returns its manifest. (With the other nodes of an srun step: prepare.shared_read.prepare_in_group,
    which builds with this module's stages and a reader of its own.)"""
    log_pil_build(log)
    source_root, dest = config.source.resolve(), config.dest.resolve()
    identity = checked_identity(source_root, dest, config)
    make_dest(dest)
    with exclusive_lock(dest):
        found = verified_existing(dest, identity, config)
        if found.complete is not None:
            return found.complete
        if found.base is not None:
            return add_eval_sets(dest, config, identity, found.base)
        return build_and_report(open_prepare_source(config), dest, config, identity, found.damaged)


def open_prepare_source(config: PrepareConfig) -> Source:
    """The source's layout, with the evaluation sets the command line adds, checked against what the
    download declares it holds before anything is read (refused if short, unless --allow-partial)."""
    source = with_eval_sets(open_source(config.source.resolve()), config.eval_sources, config.real_labels)
    check_complete(source, config.allow_partial)
    source.check_real_labels(config.allow_partial)
    return source


def check_complete(source: Source, allow_partial: bool) -> None:
    """Refuse a download that lacks what it declares (one line naming what is missing), unless
    --allow-partial: then log it (the manifest records it). A split with nothing of it there, or more
    than declared, is refused either way."""
    for split in source.splits:
        declared = source.declared(split)
        too_many = excess(declared, declared.found)
        if too_many:
            raise SourceError(too_many)
        if nothing_there(declared):
            raise SourceError(f"{shortfall(declared) or f'the {split} split holds no images'}: nothing of the {split} "
                              "split is there. Download it, or point --source at the folder that holds it")
    lines = shortfalls(source)
    if lines and not allow_partial:
        raise SourceError(refusal(list(lines.values())))
    for line in lines.values():
        log.warning("--allow-partial: %s; preparing what is there (recorded in the manifest's \"partial\")", line)


def shortfalls(source: Source) -> dict[str, str]:
    """Split -> what it lacks against the download's declaration, found before reading."""
    return {split: line for split in source.splits if (line := shortfall(source.declared(split)))}


def checked_identity(source_root: Path, dest: Path, config: PrepareConfig) -> dict:
    """What a complete dataset at `dest` must have been made from (after the first refusals)."""
    check_dest_outside_source(source_root, dest)
    source = fingerprint(source_root, detect_layout(source_root)) | eval_fingerprint(config.eval_sources,
                                                                                     config.real_labels)
    return {"source": source, "options": config.output_options()}


def build_and_report(source: Source, dest: Path, config: PrepareConfig, identity: dict, damaged: Manifest | None,
                     reader: "Reader | None" = None) -> Manifest:
    """Build the dataset from the samples `reader` yields (this node's own read of `source` by
    default), log it, and compare it with the damaged dataset it replaces."""
    remove_incomplete(dest)
    manifest = build_or_clean_up(source, dest, config, identity, reader or LocalRead(source, config))
    log_summary(dest, manifest)
    if damaged is not None:
        report_rebuild(damaged, manifest)
    return manifest


def build_or_clean_up(source: Source, dest: Path, config: PrepareConfig, identity: dict, reader: "Reader") -> Manifest:
    """Build and write the manifest; on any failure remove what this run wrote (spills, shards)
    before the error leaves, and name a full disk in one line."""
    state = RunState(free_at_start=free_bytes(dest))
    with cleaned_up_on_failure(dest, state, lambda: remove_this_run(dest)):
        manifest = build(source, dest, config, identity, state, reader)
        state.during = "writing the manifest"
        write_manifest(dest, manifest)
    return manifest


@contextmanager
def cleaned_up_on_failure(dest: Path, state: "RunState", clean_up):
    """On any failure inside, `clean_up()` removes what this run wrote before the error leaves, and
    a full disk is named in one line; on success the scratch goes."""
    try:
        yield
    except BaseException as exn:
        clean_up()
        if is_out_of_space(exn):
            raise PrepareError(out_of_space_message(dest, state.during, state.needed, state.free_at_start)) from None
        raise
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)


@dataclass
class RunState:
    """Where a build is, for the message if the disk fills."""
    free_at_start: int
    during: str = "starting"
    needed: int = 0  # bytes, the largest estimate so far


def remove_this_run(dest: Path) -> None:
    """What a failed run wrote: its scratch, its shards and its ReaL labels (remove_incomplete
    emptied the shard folders before it started, so whatever is there now is this run's)."""
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)
    (dest / REAL_LABELS_FILE).unlink(missing_ok=True)
    for split in ALL_SPLITS:
        for path in (dest / split).iterdir() if (dest / split).is_dir() else ():
            if SHARD_FILE.match(path.name):
                path.unlink(missing_ok=True)


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


@dataclass(frozen=True)
class Existing:
    """What --dest holds, against what this run makes (verified_existing); all None: nothing usable."""
    complete: Manifest | None = None  # this very dataset: nothing to do
    damaged: Manifest | None = None  # a damaged dataset that --verify rebuilds
    base: Manifest | None = None  # a complete dataset lacking only evaluation sets this run adds (add_eval_sets)


def verified_existing(dest: Path, identity: dict, config: PrepareConfig) -> Existing:
    """The dataset at `dest`: complete and made from the same source and options (and evaluation
    sets); or lacking only evaluation sets the command line adds (then kept, as the base of the
    addition); or damaged, when --verify is rebuilding it; or nothing usable.

    Shards are checked by size (fast), and with --verify by their checksums too. Refuses (unless
    --force, or --verify for a damaged one) to replace a dataset made with other options or found
    damaged; the manifest goes first, so nothing mistakes the rebuild for complete. A dataset that
    is kept loses what an addition killed before its manifest left beside it.
    """
    try:
        manifest = read_manifest(dest)
    except DatasetNotReady:
        return Existing()
    old = {"source": manifest.source, "options": manifest.options}
    adds = eval_addition(old, identity)
    kept = old == identity or adds is not None  # the dataset there stays: its files must be whole
    problems = find_damage(dest, manifest) if kept else []
    if kept and not problems and config.verify:
        problems = verify_checksums(dest, manifest, config.workers)
    # a partial dataset of a download completed since: its identity may be the same (a tree's is its path)
    replace_partial = kept and not problems and bool(manifest.partial) and config.force
    if kept and not problems and not replace_partial:
        refuse_partial(dest, manifest, config.allow_partial)
        remove_unlisted(dest, manifest)
        if adds is not None:
            return Existing(base=manifest)
        log.info("%s already holds this dataset (%d train + %d val samples, %d shards %s); nothing to do",
                 dest, manifest.splits["train"].samples, manifest.splits["val"].samples,
                 sum(len(s.shards) for s in manifest.splits.values()),
                 "verified by checksum" if config.verify else "present at their sizes")
        return Existing(complete=manifest)
    for problem in problems:
        log.error("damaged: %s", problem)
    rebuild = kept and config.verify and not replace_partial
    if not (config.force or rebuild):
        if problems:
            reason = "is damaged: " + "; ".join(problems[:3])
            remedy = "Rerun with --verify to rebuild it (the same bytes), or --force to replace it"
        else:
            reason = "was prepared differently: " + "; ".join(describe_difference(old, identity))
            remedy = "Rerun with --force to replace it"
        raise PrepareError(f"{dest} {reason}. {remedy}, or choose another --dest{keep_hint(old, identity, problems)}.")
    log.warning("%s: %s the dataset in %s", "--verify" if rebuild else "--force",
                "rebuilding" if rebuild else "replacing", dest)
    manifest_path(dest).unlink()
    fsync_dir(dest)
    return Existing(damaged=manifest if rebuild else None)


def keep_hint(old: dict, new: dict, problems: list[str]) -> str:
    """Where only the evaluation sets differ (one removed or changed), how to keep the dataset."""
    if problems or without_eval_sets(old) != without_eval_sets(new):
        return ""
    return ("; to keep it, give the evaluation sets it was prepared with (sets are added to a dataset without "
            "--force, never removed or changed)")


def refuse_partial(dest: Path, manifest: Manifest, allow_partial: bool) -> None:
    """A dataset prepared with --allow-partial is used again only with it: a rerun without it asks for
    the whole download."""
    if manifest.partial and not allow_partial:
        raise PrepareError(f"{dest} holds a partial dataset, prepared with --allow-partial ("
                           f"{'; '.join(manifest.partial.values())}). Rerun with --allow-partial to use it as it is, "
                           "or complete the download and rerun with --force")
    for line in manifest.partial.values():
        log.warning("%s holds a partial dataset: %s", dest, line)


def verify_checksums(dest: Path, manifest: Manifest, workers: int) -> list[str]:
    """Read every shard, `workers` at a time, against the manifest's checksums; log the speed."""
    files = checksummed_files(manifest)
    if any(not sha256 for _, _, sha256 in files):
        raise PrepareError(f"{dest} was prepared before shards had checksums: nothing to verify them against. "
                           "Rerun with --force to rebuild it with checksums.")
    start = time.monotonic()
    total = sum(size for _, size, _ in files)
    problems = []
    with Progress("verify", total, "MB", scale=1 / MB, interval=10) as bar, \
            ThreadPoolExecutor(max(1, workers)) as pool:  # hashlib and reads release the GIL
        for (_, size, _), problem in zip(files, pool.map(lambda f: checksum_problem(dest, f[0], f[2]), files)):
            bar.update(size)
            if problem:
                problems.append(problem)
    elapsed = max(time.monotonic() - start, 1e-9)
    rate = total / elapsed / 1e9
    log.info("verified %d files, %.2f GB in %.1f s: %.2f GB/s, %d reading at once (ImageNet's 150 GB: about %.0f min)",
             len(files), total / 1e9, elapsed, rate, workers, 150 / rate / 60)
    return problems


def report_rebuild(damaged: Manifest, rebuilt: Manifest) -> None:
    """The rebuilt shards should be the recorded bytes: every byte depends only on source and options."""
    before = {s.name: s.sha256 for split in damaged.splits.values() for s in split.shards}
    after = {s.name: s.sha256 for name, split in rebuilt.splits.items() if name in damaged.splits  # not those added
             for s in split.shards}
    if before == after:
        log.info("rebuilt: every shard has the bytes its checksum recorded")
    else:
        changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
        log.warning("rebuilt, but %d shard(s) differ from the recorded checksums (e.g. %s): the source read "
                    "differently this time; the new manifest records the new bytes", len(changed), changed[0])


def describe_difference(old: dict, new: dict) -> list[str]:
    diffs = []
    for name in sorted(set(old["options"]) | set(new["options"])):
        if old["options"].get(name) != new["options"].get(name):
            diffs.append(f"{name} was {old['options'].get(name)!r}, now {new['options'].get(name)!r}")
    for name in ("path", "layout"):
        if old["source"].get(name) != new["source"].get(name):
            diffs.append(f"source {name} was {old['source'].get(name)!r}, now {new['source'].get(name)!r}")
    for name, what in (("eval_sets", "--eval-source"), ("real_labels", "--real-labels")):
        if old["source"].get(name) != new["source"].get(name):
            diffs.append(f"{what} was {describe_eval(old['source'].get(name))}, now {describe_eval(new['source'].get(name))}")
    before = {f["path"]: f for f in old["source"].get("files", [])}
    changed = [f["path"] for f in new["source"].get("files", []) if before.get(f["path"]) != f]
    if changed and not diffs:
        diffs.append(f"the source files changed since (size or modification time of {', '.join(changed)})")
    return diffs


def describe_eval(found: list | dict | None) -> str:
    """An evaluation set's part of an identity, for people: 'none', the paths, or the file and its digest."""
    if not found:
        return "none"
    if isinstance(found, dict):  # the ReaL labels
        return f"{found['path']} (sha256 {found['sha256'][:12]}...)"
    return ", ".join(entry["path"] for entry in found)


def remove_incomplete(dest: Path) -> None:
    """Remove what an interrupted run left: shards, spill files. Refuses to touch foreign files."""
    splits = [split for split in ALL_SPLITS if (dest / split).is_dir()]
    for split in splits:
        foreign = [p.name for p in (dest / split).iterdir() if not SHARD_FILE.match(p.name)]
        if foreign:
            raise PrepareError(f"{dest / split} holds files prepare did not write ({foreign[:3]}): "
                               "choose an empty --dest")
    for split in splits:
        for path in (dest / split).iterdir():
            path.unlink()
    (dest / REAL_LABELS_FILE).unlink(missing_ok=True)
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)


# ---------------------------------------------------------------- evaluation sets added to a complete dataset

def add_eval_sets(dest: Path, config: PrepareConfig, identity: dict, base: Manifest) -> Manifest:
    """Prepare only what the command line adds to the complete dataset `base` (verified_existing):
    the new ImageNetV2 splits' shards, ReaL's labels checked against the val shards' keys, then the
    new manifest, written last and atomically. train, val and the evaluation sets there are not
    touched (their ~140 GB are hours to rebuild), so the dataset's id stays and a run resumes on it.
    A kill leaves `base`'s manifest and files; the next run removes what this one wrote."""
    addition = eval_addition({"source": base.source, "options": base.options}, identity)
    log.info("%s: adding %s to the dataset there; train, val%s stay as they are", dest, addition.describe(),
             "".join(f", {split}" for split in base.splits if split not in SPLITS))
    source = open_addition_source(dest, base, config, addition)
    remove_unlisted(dest, base)  # a killed addition's leftovers, a shared read's scratch: build starts clean
    state = RunState(free_at_start=free_bytes(dest))
    with cleaned_up_on_failure(dest, state, lambda: remove_unlisted(dest, manifest_on_disk(dest, base))):
        added = build(source, dest, config, identity, state, LocalRead(source, config)) if source.splits else None
        real = source.real_labels(source.val_keys()) if addition.real_labels else None  # the val shards' keys
        state.during = "writing the manifest"
        manifest = with_additions(base, added, identity, write_real_labels(dest, real) if real is not None else {})
        write_manifest(dest, manifest)
    if added is not None:
        log_summary(dest, added)
    if real is not None:
        log.info("ReaL's labels: %d val images, %d of them labelled, in %s", manifest.real_labels["images"],
                 manifest.real_labels["labelled"], dest / REAL_LABELS_FILE)
    log.info("added %s to %s: its manifest lists them (dataset id %s, as before)", addition.describe(), dest,
             manifest.dataset_id())
    return manifest


def open_addition_source(dest: Path, base: Manifest, config: PrepareConfig, addition: EvalAddition) -> Source:
    """The evaluation sets `addition` names, over the prepared dataset (its classes; its val keys
    for ReaL), checked as a one-shot prepare checks them before anything is read."""
    eval_sources, real_json = added_sources(config.eval_sources, config.real_labels, addition)
    source = with_eval_sets(PreparedDataset(dest, base), eval_sources, real_json)
    check_complete(source, config.allow_partial)
    source.check_real_labels(config.allow_partial)
    return source


def with_additions(base: Manifest, added: Manifest | None, identity: dict, real_labels: dict) -> Manifest:
    """`base` with the splits `added` built and ReaL's labels (where added): the manifest a one-shot
    prepare with every evaluation set writes, but for the stats (the first run's, each addition's
    appended under "added")."""
    added = added or Manifest(base.source, base.options, base.classes, {})
    splits = sorted({**base.splits, **added.splits}.items(), key=lambda item: split_order(item[0]))
    run = {"splits": list(added.splits), "real_labels": bool(real_labels), **added.stats}
    return dataclasses.replace(
        base, source=identity["source"], splits=dict(splits), converted=base.converted | added.converted,
        skipped=base.skipped | added.skipped, damaged=base.damaged | added.damaged,
        real_labels=real_labels or base.real_labels, partial=base.partial | added.partial,
        warnings=base.warnings | added.warnings, stats={**base.stats, "added": [*base.stats.get("added", []), run]})


def manifest_on_disk(dest: Path, fallback: Manifest) -> Manifest:
    """The manifest at `dest` now: after a failure, the new one if its rename happened, else the old."""
    try:
        return read_manifest(dest)
    except DatasetNotReady:
        return fallback


def remove_unlisted(dest: Path, manifest: Manifest) -> None:
    """What an addition killed or failed before its manifest left beside the complete dataset:
    evaluation-set shards and ReaL labels `manifest` does not list, temporary files, the scratch.
    train's and val's folders are not looked in: an addition never writes there."""
    listed = {shard.name for split in manifest.splits.values() for shard in split.shards}
    for split in EVAL_SPLITS:
        folder = dest / split
        for path in folder.iterdir() if folder.is_dir() else ():
            if SHARD_FILE.match(path.name) and f"{split}/{path.name}" not in listed:
                path.unlink()
        if split not in manifest.splits:
            with contextlib.suppress(OSError):
                folder.rmdir()  # empty now, unless it holds files prepare did not write
    if not manifest.real_labels:
        (dest / REAL_LABELS_FILE).unlink(missing_ok=True)
    for name in (MANIFEST_NAME, REAL_LABELS_FILE):
        for path in dest.glob(f".{name}.*.tmp"):  # write_file_atomic's, killed before their rename
            path.unlink(missing_ok=True)
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)


def check_free_space(dest: Path, needed: int, what: str, state: RunState) -> None:
    """Refuse to start a phase that cannot fit: `needed` bytes more on --dest (and a margin)."""
    needed += MARGIN
    state.needed = max(state.needed, needed)
    free = free_bytes(dest)
    if free < needed:
        raise PrepareError(f"{dest} has {free / 1e9:.2f} GB free; {what} needs about {needed / 1e9:.2f} GB more "
                           "(the images once as spill files, then as shards with tar headers). Free space, choose "
                           "another --dest, or shrink the images with --resize.")


# ---------------------------------------------------------------- the build

@dataclass
class SplitResult:
    buckets: list[list[str]]
    converted: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)  # stored as they are: key -> what libjpeg found
    source_bytes: int = 0
    seekable: int = 0  # images stored with restart markers
    partial: str | None = None  # what the split lacks against its declaration (with --allow-partial)
    warning: str | None = None  # its count, where nothing declares one, against ImageNet-1k's


class Reader(Protocol):
    """Where a build's samples come from, a stage passed in: this node's own read of the source
    (LocalRead), or the shared read's exchange with the other nodes (prepare/shared_read.py)."""

    def disk_ahead(self) -> int:
        """Bytes of --dest the reader needs beyond the build's own (parts read ahead)."""

    def split_images(self, split: str, num_buckets: int, work: Path, pool) -> Iterator[Scattered]:
        """Every image of the split, read, checked and spilled to its bucket under `work`: the
        outcomes, in source order."""

    def stats(self) -> dict:
        """The manifest's stats of the reading: nodes, read_from_source_bytes, received_from_nodes_bytes."""


class LocalRead:
    """This node reads every part of the source itself, in its workers."""

    def __init__(self, source: Source, config: PrepareConfig):
        self.source, self.config = source, config
        self.parts = {split: source.parts(split) for split in source.splits}

    def disk_ahead(self) -> int:
        return 0

    def split_images(self, split: str, num_buckets: int, work: Path, pool) -> Iterator[Scattered]:
        return scatter_parts(self.parts[split], self.source.class_index(), num_buckets, work, self.config, pool)

    def stats(self) -> dict:
        read = sum(part.size for parts in self.parts.values() for part in parts)
        return {"nodes": 1, "read_from_source_bytes": read, "received_from_nodes_bytes": 0}


def build(source: Source, dest: Path, config: PrepareConfig, identity: dict, state: RunState,
          reader: Reader) -> Manifest:
    """Every split: its images from `reader` (read and spilled), accounted for in source order,
    dealt into shards, written."""
    start = time.monotonic()
    raise_open_file_limit()
    shard_bytes = config.shard_size_mb * MB
    estimate = dataset_estimate(source, config)
    ahead = reader.disk_ahead()
    what = "the dataset (estimated from the source)" + (
        f", with {ahead / 1e9:.2f} GB of the shared read's parts read ahead (--no-shared-read needs none)" if ahead else "")
    check_free_space(dest, sum(estimate.values()) + ahead, what, state)
    splits, converted, skipped, damaged, source_bytes, seekable = {}, {}, {}, {}, 0, 0
    partial, warnings = {}, {}
    real_labels = None
    damage_log = DamageLog()
    order = reading_order(source.splits)
    with WorkerPool(config.workers) if config.workers > 1 else contextlib.nullcontext() as pool:
        for i, split in enumerate(order):
            work = dest / WORK_DIR_NAME / split
            work.mkdir(parents=True)
            (dest / split).mkdir(exist_ok=True)
            num_buckets = shard_count(source.split_bytes(split), shard_bytes)
            state.during = f"spilling the {split} images"
            images = reader.split_images(split, num_buckets, work, pool)
            result = scatter(source, split, images, num_buckets, config, damage_log)
            if split == "val":  # checked before the shards are written: a wrong real.json fails now
                real_labels = source.real_labels({key for bucket in result.buckets for key in bucket} | result.skipped.keys())
            shards = deal_into_shards(result.buckets, config.seed)
            # exact now: the tar overhead of these samples, the shards in flight, the splits to come
            count = sum(map(len, result.buckets))
            check_free_space(dest, space_needed(0, count, shard_bytes, config.workers)
                             + sum(estimate[s] for s in order[i + 1:]), f"writing the {split} shards", state)
            state.during = f"writing the {split} shards"
            infos = write_shards(split, shards, result.buckets, work, dest, config, pool)
            splits[split] = SplitInfo(sum(s.samples for s in infos), sum(s.bytes for s in infos), infos)
            converted |= result.converted
            skipped |= result.skipped
            damaged |= result.damaged
            source_bytes += result.source_bytes
            seekable += result.seekable
            partial |= {split: result.partial} if result.partial else {}
            warnings |= {split: result.warning} if result.warning else {}
    splits = {split: splits[split] for split in source.splits}
    elapsed = time.monotonic() - start
    samples = sum(s.samples for s in splits.values())
    stats = {"samples": samples, "bytes": sum(s.bytes for s in splits.values()), "source_bytes": source_bytes,
             "elapsed_s": round(elapsed, 3), "images_per_sec": round(samples / elapsed, 1),
             "mb_per_sec": round(source_bytes / MB / elapsed, 1), "workers": config.workers,
             "seekable_images": seekable, **reader.stats()}
    return Manifest(source=identity["source"], options=identity["options"], classes=source.classes,
                    splits=splits, converted=converted, skipped=skipped, damaged=damaged, stats=stats,
                    real_labels=write_real_labels(dest, real_labels) if real_labels is not None else {},
                    partial=partial, warnings=warnings)


def reading_order(splits: tuple[str, ...]) -> tuple[str, ...]:
    """The order splits are read in: the evaluation sets, then val, then train. The small splits come
    first, so that a shortfall only reading can find (a gzip stream's count) shows in minutes, not
    after train's hours. The shared read's nodes read in this order too."""
    return tuple(sorted(splits, key=lambda split: {"val": 1, "train": 2}.get(split, 0)))


def write_real_labels(dest: Path, by_key: dict[str, list[int]]) -> dict:
    """DEST/real_labels.json (atomically, before the manifest), and what the manifest records of it."""
    document = real_labels_document(by_key)
    write_file_atomic(dest / REAL_LABELS_FILE, document)
    return {"file": REAL_LABELS_FILE, "bytes": len(document), "sha256": hashlib.sha256(document).hexdigest(),
            "images": len(by_key), "labelled": sum(1 for labels in by_key.values() if labels)}


def dataset_estimate(source: Source, config: PrepareConfig) -> dict[str, int]:
    """The disk each split's build needs at its peak (spills and shards), estimated from the source."""
    return {split: space_needed(source.split_bytes(split), source.estimated_count(split), config.shard_size_mb * MB,
                                config.workers) for split in source.splits}


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


def damaged_image(damage: str) -> str:
    """Why a damaged JPEG is left out with --skip-bad (after its origin, as BadImage's reasons)."""
    return f"has damaged JPEG data (libjpeg: {damage})"


def scatter(source: Source, split: str, images: Iterator[Scattered], num_buckets: int,
            config: PrepareConfig, damage_log: DamageLog | None = None) -> SplitResult:
    """Account for every image of the split, read once, checked and spilled to its bucket, in source
    order (so bucket key lists, and the shards, are the same for any worker or node count). Damaged
    JPEGs are named in the log (`damage_log`: the first few of the run) and listed: as `damaged`
    where they are stored, as `skipped` with --skip-bad."""
    result = SplitResult([[] for _ in range(num_buckets)])
    damage_log = damage_log or DamageLog()
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
                    raise bad_image_stops_the_run(image)
                if image.damage is None:
                    log.warning("skipping %s: %s", image.origin, image.error)
                else:
                    damage_log.warn("skipping %s: %s", image.origin, image.error)
                result.skipped[image.key] = image.error
                continue
            if image.damage is not None:
                damage_log.warn("damaged JPEG %s: libjpeg says \"%s\"; stored as it is, listed under \"damaged\" "
                                "in the manifest (--skip-bad leaves such images out)", image.origin, image.damage)
                result.damaged[image.key] = image.damage
            if image.note:
                result.converted[image.key] = image.note
            result.seekable += image.seekable
            result.buckets[bucket_of(image.key, config.seed, num_buckets)].append(image.key)
        bar.finish()
    if not seen:
        raise SourceError(f"the {split} split of {source.root} holds no images")
    result.partial, result.warning = counted(source, split, len(seen), config.allow_partial)
    return result


def counted(source: Source, split: str, got: int, allow_partial: bool) -> tuple[str | None, str | None]:
    """After a split is read: (what it lacks, for the manifest's "partial"; a warning where nothing
    declares its count). Refuses more images than declared, and fewer where only reading could count
    them (a gzip stream's), unless --allow-partial."""
    declared = source.declared(split)
    too_many = excess(declared, got)
    if too_many:
        raise SourceError(too_many)
    short = counted_shortfall(declared, got)
    if short and not allow_partial:
        raise SourceError(refusal([short]))
    if short:
        log.warning("--allow-partial: %s; prepared what is there (recorded in the manifest's \"partial\")", short)
    warning = None if declared.images is not None else imagenet_1k_warning(split, len(source.classes), got)
    if warning:
        log.warning("%s (recorded in the manifest's \"warnings\")", warning)
    return shortfall(declared) or short, warning


def bad_image_stops_the_run(image: Scattered) -> PrepareError:
    return PrepareError(f"{image.origin} {image.error}. Replace or remove it, or rerun with --skip-bad to leave it "
                        "out (it is then listed in the manifest).")


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


def threads_per_part(workers: int, parts: int) -> int:
    """Threads that prepare a part's images at once: the workers a split has beyond its parts. The
    official archive's 1,000 class tars get one each; a gzip stream, which cannot be split, gets its
    share of the workers (ILSVRC/imagenet-1k's 5 train archives on 16 workers: 3 each). The C
    rewrite releases the GIL, and the images keep their order: the bytes do not depend on it."""
    return max(1, workers // max(parts, 1))


def scatter_parts(parts: list[Part], classes: dict[str, int], num_buckets: int, work: Path, config: PrepareConfig,
                  pool) -> Iterator[Scattered]:
    """Each part is read where it is scattered, in a worker of `pool` (or here without one): the
    worker reads it at its offset (or its files), checks or re-encodes every image and spills it
    to bucket files of its own. Only small outcomes come back, in source order."""
    threads = threads_per_part(config.workers, len(parts))
    jobs = (PartJob(part, {w: classes[w] for w in part.wnids()}, num_buckets, config.seed, str(work), config.resize,
                    config.quality, config.restart_mcus, config.skip_bad, threads) for part in parts)
    for scattered in pool.imap(scatter_part, jobs) if pool else map(scatter_part, jobs):
        yield from scattered


def scatter_part(job: PartJob) -> list[Scattered]:
    with BucketSpills(Path(job.work), tag=str(os.getpid())) as spills:
        return scatter_items(job, spills)


def scatter_items(job: PartJob, spills: "BucketSpills | PartStream") -> list[Scattered]:
    """Check (or re-encode) each image of the part and write it to `spills`; the outcomes."""
    out = []
    for item, prepared in prepared_in_order(job):
        with failures_named(item.origin):
            if isinstance(prepared, BadImage):
                out.append(Scattered(item.key, item.origin, len(item.data), str(prepared)))
                continue
            if prepared.damage is not None and job.skip_bad:
                out.append(Scattered(item.key, item.origin, len(item.data), damaged_image(prepared.damage),
                                     damage=prepared.damage))
                continue
            spills.write(bucket_of(item.key, job.seed, job.num_buckets),
                         encode_sample(item, prepared.data or item.data, job.classes[item.wnid], prepared))
            out.append(Scattered(item.key, item.origin, len(item.data), None, prepared.note,
                                 prepared.restart_interval > 0, prepared.damage))
    return out


def prepared_in_order(job: PartJob) -> Iterator[tuple[Item, Prepared | BadImage]]:
    """Each item of the part with what prepare_image made of it (or the BadImage it raised), in the
    part's order, `job.threads` images at once (a few more read ahead)."""
    def prepare(item: Item) -> Prepared | BadImage:
        with failures_named(item.origin):  # an unexpected failure: one line naming the image, thread or not
            try:
                return prepare_image(item.data, job.resize, job.quality, restart_mcus=job.restart_mcus)
            except BadImage as exn:
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


@contextmanager
def failures_named(what: str):
    """In a worker: an unexpected failure becomes one line naming the image or shard it was on.
    Errors that already say what to do, and a full disk (named by the main process), pass."""
    try:
        yield
    except UserError:
        raise
    except OSError as exn:
        if is_out_of_space(exn):
            raise
        raise PrepareError(f"{what}: {exn.strerror or exn} (a worker failed there)") from None
    except Exception as exn:
        raise PrepareError(f"{what}: {type(exn).__name__}: {exn} (a worker failed there)") from None


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
    several times cheaper than tar members. Only the final shards are tars (`ShardTarWriter`)."""

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
    """The sample as shards.format writes it, with its image's sizes (and the source's, if resized)."""
    meta = {"wnid": item.wnid, "width": image.width, "height": image.height}
    if (image.source_width, image.source_height) != (image.width, image.height):
        meta |= {"source_width": image.source_width, "source_height": image.source_height}
    return sample_record(item.key, data, label, meta)


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
        partial = work / (Path(name).name + ".partial")
        with failures_named(str(dest / name)):
            checksum = write_tar(partial, (samples[k] for k in job.keys))
            os.replace(partial, dest / name)
        info = ShardInfo(name, len(job.keys), (dest / name).stat().st_size, checksum)
    for path in spills:
        path.unlink(missing_ok=True)
    for path in incoming:
        path.unlink()
    return info


def log_summary(dest: Path, manifest: Manifest) -> None:
    st = manifest.stats
    for split, s in manifest.splits.items():
        log.info("%s: %d samples in %d shards, %.2f GB", split, s.samples, len(s.shards), s.bytes / 1e9)
    checked = manifest.options.get("restart_mcus")  # the rewrite is what decodes (so checks) the JPEGs' data
    damage = (f"stored {len(manifest.damaged)} with damaged JPEG data as they are" if checked
              else "damaged JPEG data not checked (--restart-mcus 0)")
    log.info("converted %d images to RGB JPEG, skipped %d bad ones, %s (listed in the manifest)",
             len(manifest.converted), len(manifest.skipped), damage)
    if st.get("nodes", 1) > 1:
        log.info("shared read: this node read %.2f GB of the source and received %.2f GB from the %d other nodes",
                 st["read_from_source_bytes"] / 1e9, st["received_from_nodes_bytes"] / 1e9, st["nodes"] - 1)
    log.info("done: %d images, %.2f GB written in %.1f s: %.0f images/s, %.0f MB/s of images; manifest %s",
             st["samples"], st["bytes"] / 1e9, st["elapsed_s"], st["images_per_sec"], st["mb_per_sec"],
             manifest_path(dest))
