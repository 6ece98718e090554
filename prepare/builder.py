"""The build, start to end: lock, idempotence, the build of each split, manifest last, clean-up.

    prepare/destination.py   --dest: checked, created; what it holds (nothing to do, --verify, --force)
    prepare/scatter.py       each split read once: parts read, checked and spilled by the workers
                             (or received from the other nodes: the build takes a `Reader`)
    prepare/shard_writer.py  spill buckets dealt into shards, each written to a temporary name,
                             fsynced and renamed
    DEST/manifest.json, written last: the completion marker

A run killed at any moment leaves no manifest; the next run removes what it left and starts
again, and since every byte depends only on (source, options), it writes the same shards.

Evaluation sets added to a complete dataset (`add_eval_sets`) are built the same way, alone: their
shards, then ReaL's labels, then the new manifest over the old one. A kill leaves the old manifest,
whose files were not touched; the next run removes what is not listed (`remove_unlisted`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import shutil
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prepare.completeness import excess, judged, nothing_there, shortfall
from prepare.config import PrepareConfig, PrepareError
from prepare.destination import (
    Existing, dataset_identity, make_dest, prepared_source, remove_incomplete, remove_this_run, remove_unlisted,
    removed_bytes, report_rebuild, verified_existing, with_class_maps,
)
from prepare.eval_sets import EvalAddition, PreparedDataset, added_sources, eval_addition, real_labels_document, with_eval_sets
from prepare.sources import Detected, detect
from shards.lock import exclusive_lock, readers, release, sole_reader_lock
from prepare.scatter import DamageLog, LocalRead, Reader, SplitResult, account_pass, account_split
from prepare.shard_writer import write_shards
from prepare.shuffle import deal_into_shards, shard_count
from prepare.sizing import RESIZE_CHOICES, fitting_resize, sampled_images, sampled_ratios
from prepare.space import (MARGIN, free_bytes, is_out_of_space, out_of_space_message, ran_out_of_files,
                           space_needed)
from prepare.sources.base import Part, Source, SourceError
from prepare.workers import WorkerPool
from shards.paths import REAL_LABELS_FILE, SPLITS, WORK_DIR_NAME
from shards.manifest import (
    DatasetNotReady, Manifest, SplitInfo, manifest_path, read_manifest, split_order, write_file_atomic, write_manifest,
)
from shards.resources import MB, log_pil_build, raise_open_file_limit

log = logging.getLogger("prepare")


def prepare(config: PrepareConfig) -> Manifest:
    """Prepare the dataset at config.dest on this node alone, or verify the one already there.
    Returns its manifest. (With the other nodes of an srun step: prepare.shared_read.prepare_in_group,
    which builds with this module's stages and a reader of its own.)"""
    log_pil_build(log)
    detected, dest, identity = identified(config)
    make_dest(dest)
    with exclusive_lock(dest):
        found = verified_existing(dest, identity, config)
        if found.complete is not None:
            return with_class_maps(dest, found.complete, detected.class_maps())
        if found.base is not None:
            return add_eval_sets(dest, config, identity, with_class_maps(dest, found.base, detected.class_maps()))
        # the source closes what it opened to read at the end; the readers lock is taken once it was checked
        with open_prepare_source(detected, config) as source, no_loader_reading(dest):
            return build_and_report(source, dest, config, identity, found)


def identified(config: PrepareConfig) -> tuple[Detected, Path, dict]:
    """The source's layout, --dest (refused inside the source), and what a complete dataset there must
    have been made from (its identity, `dataset_identity`)."""
    detected, dest = detect(config.source.resolve()), config.dest.resolve()
    if detected.holds(dest):
        raise PrepareError(f"--dest {dest} is inside --source {detected.root}: choose node-local disk outside the "
                           "source, e.g. $SLURM_TMPDIR/imagenet")
    detected = labelled(detected, config.class_table, dest)
    return detected, dest, dataset_identity(detected.identity(), config)


def labelled(detected: Detected, asked: str | None, dest: Path) -> Detected:
    """The download in the class table --class-table asks for; without it, in the table of the dataset prepared
    from it at --dest (said, where that is not the layout's default: winter21 in 22k's, from before its own table
    was the default), else in the layout's default."""
    chosen = detected.labelled_in(asked, prepared_source(dest))
    if chosen.table != detected.table and asked is None:
        log.info("%s holds this download prepared in the %s class table: it keeps it (--class-table %s --force "
                 "prepares it in %s, now the default)", dest, chosen.table, detected.table, detected.table)
    return chosen


def open_prepare_source(detected: Detected, config: PrepareConfig) -> Source:
    """The source's layout, with the evaluation sets the command line adds, checked against what the
    download declares it holds before anything is read (refused if short, unless --allow-partial)."""
    source = detected.open()
    if config.eval_sources or config.real_labels:  # only then: the plain build never enters eval_sets.py
        source = with_eval_sets(source, config.eval_sources, config.real_labels)
    check_complete(source, config.allow_partial)
    source.check_real_labels(config.allow_partial)
    return source


@contextmanager
def no_loader_reading(dest: Path):
    """The dataset at `dest` replaced (or first built) only where no loader of this node reads it, and no loader
    starts on it until the new one is whole: the readers lock, taken alone. A training run on this node kept reading
    the shards it had mapped (their space not freed: the room check counted it free) and died, one line, at the
    first it had not."""
    held = sole_reader_lock(dest)
    if held is None:
        pids = readers(dest)
        who = f" (pid {', '.join(map(str, pids))})" if pids else ""
        raise PrepareError(f"{dest} is being read by a training run or loader on this node{who}: replacing its dataset "
                           "now would pull it from under that run. Stop the run (or let it finish) and rerun, or "
                           "prepare into another --dest")
    try:
        yield
    finally:
        release(held)


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
    problem, allowed = judged(list(shortfalls(source).values()), [], allow_partial)
    if problem:
        raise SourceError(problem)
    for line in allowed:
        log.warning("--allow-partial: %s; preparing what is there (recorded in the manifest's \"partial\")", line)


def shortfalls(source: Source) -> dict[str, str]:
    """Split -> what it lacks against the download's declaration, found before reading."""
    return {split: line for split in source.splits if (line := shortfall(source.declared(split)))}


def build_and_report(source: Source, dest: Path, config: PrepareConfig, identity: dict, found: Existing,
                     reader: Reader | None = None) -> Manifest:
    """Build the dataset from the samples `reader` yields (this node's own read of `source` by
    default), log it, and compare it with the damaged dataset it replaces (`found`, what --dest held). The caller
    holds the readers lock alone (`no_loader_reading`)."""
    reader = reader or LocalRead(source, config)
    check_room_to_build(source, dest, config, reader.disk_ahead())
    if found.replacing is not None:
        log.warning("%s", found.replacing)
    remove_incomplete(dest)
    manifest = build_or_clean_up(source, dest, config, identity, reader)
    log_summary(dest, manifest)
    if found.damaged is not None:
        report_rebuild(found.damaged, manifest)
    return manifest


def build_or_clean_up(source: Source, dest: Path, config: PrepareConfig, identity: dict, reader: Reader) -> Manifest:
    """Build and write the manifest; on any failure remove what this run wrote (spills, shards)
    before the error leaves, and name a full disk in one line."""
    state = RunState(free_at_start=free_bytes(dest))
    with cleaned_up_on_failure(dest, state, lambda: remove_this_run(dest)):
        manifest = build(source, dest, config, identity, state, reader)
        state.during = "writing the manifest"
        write_manifest(dest, manifest)
    return manifest


@contextmanager
def cleaned_up_on_failure(dest: Path, state: RunState, clean_up):
    """On any failure inside, `clean_up()` removes what this run wrote before the error leaves, and
    a full disk is named in one line; on success the scratch goes."""
    try:
        yield
    except BaseException as exn:
        files = is_out_of_space(exn) and ran_out_of_files(dest)  # asked before the clean-up frees them
        clean_up()
        if is_out_of_space(exn):
            raise PrepareError(out_of_space_message(dest, state.during, state.needed, state.free_at_start,
                                                    files)) from None
        raise
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)


@dataclass
class RunState:
    """Where a build is, for the message if the disk fills."""
    free_at_start: int
    during: str = "starting"
    needed: int = 0  # bytes, the largest estimate so far


def check_free_space(dest: Path, needed: int, what: str, state: RunState, advice=None, freed: int = 0) -> None:
    """Refuse to start a phase that cannot fit: `needed` bytes more on --dest (and a margin);
    `advice(free)` says what would fit (the dataset's check names a --resize). `freed`: bytes the
    build removes before it writes (the dataset it replaces), counted as free."""
    needed += MARGIN
    state.needed = max(state.needed, needed)
    free = free_bytes(dest) + freed
    if free < needed:
        raise PrepareError(f"{dest} has {free / 1e9:.2f} GB free"
                           f"{f' (counting the {freed / 1e9:.2f} GB the build would replace, kept)' if freed else ''}; "
                           f"{what} needs about {needed / 1e9:.2f} GB more "
                           "(the images once as spill files, then as shards with tar headers). "
                           + (advice(free) if advice else "Free space, choose another --dest, or shrink the images "
                                                          "with --resize."))


def resize_ratio(source: Source, config: PrepareConfig) -> float:
    """The shards' image bytes over the source's: 1 without --resize, else a sample's at --resize (read
    once a process: the shared read asks before the build does)."""
    if config.resize is None or not source.splits:
        return 1.0
    key = (config.resize, config.quality, config.restart_mcus)
    known = RATIOS.setdefault(source, {})
    if key not in known:
        known[key] = sampled_ratios(sampled_images(source, sampled_split(source)), (config.resize,), config)[config.resize]
    return known[key]


RATIOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # source -> (resize, quality, restart_mcus) -> ratio


def sampled_split(source: Source) -> str:
    """The split a size sample comes from: train, the bulk of the bytes, where the build has it."""
    return "train" if "train" in source.splits else source.splits[-1]


def resize_that_fits(source: Source, config: PrepareConfig, ahead: int, free: int) -> str:
    """The refusal's advice: the largest --resize (smaller than the one given) whose shards fit in
    `free`, estimated from a sample of the images prepared at each size."""
    choices = tuple(size for size in RESIZE_CHOICES if config.resize is None or size < config.resize)
    images = sampled_images(source, sampled_split(source)) if source.splits and choices else []
    if not images:
        return "Free space, or choose another --dest."
    ratios = sampled_ratios(images, choices, config)

    def need_at(size: int) -> int:
        return sum(dataset_estimate(source, config, ratios[size]).values()) + ahead + MARGIN

    size = fitting_resize(need_at, free, choices)
    if size is None:
        return (f"Even --resize {choices[-1]} needs about {need_at(choices[-1]) / 1e9:.2f} GB (estimated from "
                f"{len(images)} of its images): free space, or choose another --dest.")
    return (f"--resize {size} fits: about {need_at(size) / 1e9:.2f} GB (estimated from {len(images)} of its images "
            f"prepared at that size); or free space, or choose another --dest.")


# ---------------------------------------------------------------- the build

def build(source: Source, dest: Path, config: PrepareConfig, identity: dict, state: RunState,
          reader: Reader) -> Manifest:
    """Every split: its images from `reader` (read and spilled), accounted for in source order,
    dealt into shards, written."""
    start = time.monotonic()
    raise_open_file_limit()
    check_shard_size(source, config)
    estimate = check_dataset_fits(source, dest, config, state, reader.disk_ahead())
    results, splits, real_labels, damage_log = {}, {}, None, DamageLog()
    order = reading_order(source.splits)
    with reader.workers() as pool:
        for one_pass in reading_passes(order, reader.read_together()):
            results |= read_pass(source, one_pass, dest, config, state, reader, pool, damage_log)
            for split in one_pass:
                if split == "val":  # checked before the shards are written: a wrong real.json fails now
                    real_labels = source.real_labels({key for bucket in results[split].buckets for key in bucket}
                                                     | results[split].skipped.keys())
                later = disk_to_come(order[order.index(split) + 1:], estimate, results, config)
                splits[split] = write_split(split, results[split], dest, config, state, pool, later)
    elapsed = time.monotonic() - start
    stats = run_stats(results, splits, elapsed, config.workers) | reader.stats()
    return Manifest(source=identity["source"], options=identity["options"], classes=source.classes,
                    class_subsets=source.class_subsets(), class_maps=source.class_maps(),
                    splits={split: splits[split] for split in source.splits},
                    converted=merged(results, "converted"), skipped=merged(results, "skipped"),
                    damaged=merged(results, "damaged"), stats=stats,
                    real_labels=write_real_labels(dest, real_labels) if real_labels is not None else {},
                    partial={split: r.partial for split, r in results.items() if r.partial},
                    warnings={split: r.warning for split, r in results.items() if r.warning})


SHARDS_AN_IMAGE = 100  # past this many shards an image a --shard-size is refused; see check_shard_size


def check_shard_size(source: Source, config: PrepareConfig) -> None:
    """Refuse a --shard-size that makes far more shards than a split has images, before anything is read: 1e-300
    made 1e300 spill buckets, a MemoryError (1e-320 an OverflowError). Far more: a hundred an image, as the counts
    are estimates before the read (the full releases' from their archive's bytes and a typical image's, wrong by
    tens for small or resized images), and a few empty shards harm nothing."""
    shard_bytes, least = config.shard_size_mb * MB, {}
    for split in source.splits:
        split_bytes, images = source.split_bytes(split), max(1, source.estimated_count(split))
        if split_bytes / shard_bytes > SHARDS_AN_IMAGE * images:
            least[split] = (split_bytes / shard_bytes, images, split_bytes / images / MB)
    if least:
        split, (count, images, average) = max(least.items(), key=lambda item: item[1][2])
        raise PrepareError(f"--shard-size {config.shard_size_mb:g} makes {count:.3g} shards of the {split} split's "
                           f"{images:,} images (about), over {SHARDS_AN_IMAGE} an image: give --shard-size "
                           f"{average:.2g} (MB, its average image) or more")


def check_room_to_build(source: Source, dest: Path, config: PrepareConfig, ahead: int) -> None:
    """Refuse a build --dest has no room for before the dataset it replaces (--force, --verify's rebuild) is removed,
    its space counted as free: a --force that cannot fit removed it first, then refused, losing both. `ahead`: the
    disk the shared read's parts read ahead take (`Reader.disk_ahead`). On several nodes each asks it before they
    agree to build (prepare.shared_read.node_state), so that no node removes its dataset for a build another refuses."""
    check_dataset_fits(source, dest, config, RunState(free_at_start=free_bytes(dest)), ahead, removed_bytes(dest))


def check_dataset_fits(source: Source, dest: Path, config: PrepareConfig, state: RunState, ahead: int,
                       freed: int = 0) -> dict[str, int]:
    """Refuse a build --dest has no room for (its `freed` bytes counted as free: check_free_space), with `ahead`
    bytes of the shared read's parts read ahead; each split's estimate."""
    estimate = dataset_estimate(source, config, resize_ratio(source, config))
    adding = "train" not in source.splits  # evaluation sets added to a dataset there, which keeps its options
    what = (f"the evaluation sets it adds ({', '.join(source.splits)})" if adding else
            "the dataset (estimated from the source)") + (
        f", with {ahead / 1e9:.2f} GB of the shared read's parts read ahead (--no-shared-read needs none)"
        if ahead else "")
    advice = ((lambda free: "Free space, or choose another --dest: the dataset there keeps its options, and a --resize "
                            "would make it another") if adding else
              (lambda free: resize_that_fits(source, config, ahead, free)))
    check_free_space(dest, sum(estimate.values()) + ahead, what, state, advice, freed)
    return estimate


def read_pass(source: Source, splits: tuple[str, ...], dest: Path, config: PrepareConfig, state: RunState,
              reader: Reader, pool, damage_log: DamageLog) -> dict[str, SplitResult]:
    """The images of one pass over the source (one split, or the several it yields together) read,
    checked and spilled to each split's buckets in the scratch (by `reader`), and accounted for in
    source order."""
    into = pass_scratch(source, splits, dest / WORK_DIR_NAME, config)
    for split in splits:
        (dest / split).mkdir(exist_ok=True)
    state.during = f"spilling the {' and '.join(splits)} images"
    if len(splits) == 1:
        (split, (num_buckets, work)), = into.items()
        return {split: account_split(source, split, reader.split_images(split, num_buckets, work, pool), num_buckets,
                                     config, damage_log)}
    images = reader.pass_images(into, pool)
    return account_pass(source, images, {split: n for split, (n, _) in into.items()}, config, damage_log)


def pass_scratch(source: Source, splits: tuple[str, ...], work_root: Path, config: PrepareConfig
                 ) -> dict[str, tuple[int, Path]]:
    """Each split of a pass: its spill bucket count and its scratch folder under `work_root`, made."""
    into = {}
    for split in splits:
        (work_root / split).mkdir(parents=True)
        into[split] = (shard_count(source.split_bytes(split), config.shard_size_mb * MB), work_root / split)
    return into


def write_split(split: str, result: SplitResult, dest: Path, config: PrepareConfig, state: RunState, pool,
                later: int) -> SplitInfo:
    """The split's spill buckets dealt into shards and written, once --dest has room for them and
    for the `later` bytes the splits still to come need."""
    shards = deal_into_shards(result.buckets, config.seed)
    # exact now: the tar overhead of these samples, the shards in flight, the splits to come
    check_free_space(dest, shards_overhead(result, config) + later, f"writing the {split} shards", state)
    state.during = f"writing the {split} shards"
    infos = write_shards(split, shards, result.buckets, dest / WORK_DIR_NAME / split, dest, config, pool)
    return SplitInfo(sum(s.samples for s in infos), sum(s.bytes for s in infos), infos)


def disk_to_come(splits: tuple[str, ...], estimate: dict[str, int], results: dict[str, SplitResult],
                 config: PrepareConfig) -> int:
    """The disk the `splits` still to be written need: their estimate, or where a pass read them
    already (their spills are on --dest), their shards' tar overhead only."""
    return sum(shards_overhead(results[split], config) if split in results else estimate[split] for split in splits)


def shards_overhead(result: SplitResult, config: PrepareConfig) -> int:
    """What writing a split read already (its images spilled on --dest) adds to the disk: its samples' tar
    headers and the shards in flight."""
    return space_needed(0, sum(map(len, result.buckets)), config.shard_size_mb * MB, config.workers,
                        result.source_bytes)


def merged(results: dict[str, SplitResult], what: str) -> dict[str, str]:
    """The splits' `what` (converted, skipped, damaged: key -> why), in reading order."""
    return {key: why for result in results.values() for key, why in getattr(result, what).items()}


def run_stats(results: dict[str, SplitResult], splits: dict[str, SplitInfo], elapsed: float, workers: int) -> dict:
    """The manifest's stats of the build (the reader adds its own)."""
    samples = sum(s.samples for s in splits.values())
    source_bytes = sum(r.source_bytes for r in results.values())
    return {"samples": samples, "bytes": sum(s.bytes for s in splits.values()), "source_bytes": source_bytes,
            "elapsed_s": round(elapsed, 3), "images_per_sec": round(samples / elapsed, 1),
            "mb_per_sec": round(source_bytes / MB / elapsed, 1), "workers": workers,
            "seekable_images": sum(r.seekable for r in results.values()),
            "left_out_small": sum(r.left_out for r in results.values())}


def reading_order(splits: tuple[str, ...]) -> tuple[str, ...]:
    """The order splits are read in: the evaluation sets, then val, then train. The small splits come
    first, so that a shortfall only reading can find (a gzip stream's count) shows in minutes, not
    after train's hours. The shared read's nodes read in this order too."""
    return tuple(sorted(splits, key=lambda split: {"val": 1, "train": 2}.get(split, 0)))


def reading_passes(order: tuple[str, ...], together: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The passes over the source, in reading order: each split alone, but for those read `together`,
    one pass where the first of them comes. Pure."""
    passes = []
    for split in order:
        if split not in together:
            passes.append((split,))
        elif split == next(s for s in order if s in together):
            passes.append(tuple(s for s in order if s in together))
    return passes


def passes_of(source: Source) -> list[tuple[str, ...]]:
    """The source's passes, in reading order: what a one-node build and the shared read both read."""
    return reading_passes(reading_order(source.splits), source.read_together())


def pass_parts(source: Source, splits: tuple[str, ...]) -> list[Part]:
    """The parts of one pass: a split's own, or those of the splits it yields together."""
    return source.parts(splits[0]) if len(splits) == 1 else source.joint_parts(splits)


def write_real_labels(dest: Path, by_key: dict[str, list[int]]) -> dict:
    """DEST/real_labels.json (atomically, before the manifest), and what the manifest records of it."""
    document = real_labels_document(by_key)
    write_file_atomic(dest / REAL_LABELS_FILE, document)
    return {"file": REAL_LABELS_FILE, "bytes": len(document), "sha256": hashlib.sha256(document).hexdigest(),
            "images": len(by_key), "labelled": sum(1 for labels in by_key.values() if labels)}


def dataset_estimate(source: Source, config: PrepareConfig, ratio: float = 1.0) -> dict[str, int]:
    """The disk each split's build needs at its peak (spills and shards), estimated from the source's
    bytes, times `ratio` (what --resize makes of them: `resize_ratio`)."""
    return {split: space_needed(round(source.split_bytes(split) * ratio), source.estimated_count(split),
                                config.shard_size_mb * MB, config.workers) for split in source.splits}


def log_summary(dest: Path, manifest: Manifest) -> None:
    st = manifest.stats
    for split, s in manifest.splits.items():
        log.info("%s: %d samples in %d shards, %.2f GB", split, s.samples, len(s.shards), s.bytes / 1e9)
    checked = manifest.options.get("restart_mcus")  # the rewrite is what decodes (so checks) the JPEGs' data
    damage = (f"stored {len(manifest.damaged)} with damaged JPEG data as they are" if checked
              else "damaged JPEG data not checked (--restart-mcus 0)")
    small = st.get("left_out_small", 0)  # in `skipped` too, but never bad: under their layout's smallest side
    log.info("converted %d images to RGB JPEG, skipped %d bad ones%s, %s (listed in the manifest)",
             len(manifest.converted), len(manifest.skipped) - small,
             f", left out {small} under their layout's smallest side" if small else "", damage)
    if st.get("nodes", 1) > 1:
        log.info("shared read: this node read %.2f GB of the source and received %.2f GB from the %d other nodes",
                 st["read_from_source_bytes"] / 1e9, st["received_from_nodes_bytes"] / 1e9, st["nodes"] - 1)
    log.info("done: %d images, %.2f GB written in %.1f s: %.0f images/s, %.0f MB/s of images; manifest %s",
             st["samples"], st["bytes"] / 1e9, st["elapsed_s"], st["images_per_sec"], st["mb_per_sec"],
             manifest_path(dest))


# ---------------------------------------------------------------- evaluation sets added to a complete dataset

def add_eval_sets(dest: Path, config: PrepareConfig, identity: dict, base: Manifest,
                  forked: WorkerPool | None = None) -> Manifest:
    """Prepare only what the command line adds to the complete dataset `base` (verified_existing):
    the new ImageNetV2 splits' shards, ReaL's labels checked against the val shards' keys, then the
    new manifest, written last and atomically. train, val and the evaluation sets there are not
    touched (their ~140 GB are hours to rebuild), so the dataset's id stays and a run resumes on it.
    A kill leaves `base`'s manifest and files; the next run removes what this one wrote. `forked`: the
    workers to read in, forked earlier (LocalRead)."""
    addition = eval_addition({"source": base.source, "options": base.options}, identity)
    log.info("%s: adding %s to the dataset there; train, val%s stay as they are", dest, addition.describe(),
             "".join(f", {split}" for split in base.splits if split not in SPLITS))
    source = open_addition_source(dest, base, config, addition)
    remove_unlisted(dest, base)  # a killed addition's leftovers, a shared read's scratch: build starts clean
    state = RunState(free_at_start=free_bytes(dest))
    with cleaned_up_on_failure(dest, state, lambda: remove_unlisted(dest, manifest_on_disk(dest, base))):
        added = build(source, dest, config, identity, state, LocalRead(source, config, forked)) if source.splits else None
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

