"""--dest before and after a build (refused inside the source before it: prepare/builder.py's `identified`,
by `Detected.holds`): created; what it already holds, judged against what this run makes
(`dataset_identity`): the same dataset (nothing to do), one lacking only evaluation sets the command line
adds (kept, the base of the addition), a damaged one (--verify reads every shard against its checksum and
rebuilds it), or another (refused unless --force); and what an interrupted or failed run left, removed
(`remove_incomplete`, `remove_this_run`, `remove_unlisted`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from prepare.config import PrepareConfig, PrepareError
from prepare.eval_sets import comparable, eval_addition, eval_fingerprint, without_eval_sets
from shards.paths import ALL_SPLITS, EVAL_SPLITS, MANIFEST_NAME, REAL_LABELS_FILE, SHARD_FILE, SPLITS, WORK_DIR_NAME
from shards.manifest import (
    DatasetNotReady, Manifest, ManifestUnreadable, checksum_problem, checksummed_files, find_damage, fsync_dir,
    manifest_path, read_manifest, remove_killed_writes, write_manifest,
)
from shards.progress import Progress
from shards.lock import make_readers_lock
from shards.resources import MB

log = logging.getLogger("prepare")


# ---------------------------------------------------------------- the destination

def dataset_identity(source_identity: dict, config: PrepareConfig) -> dict:
    """What a complete dataset at --dest must have been made from: the source (`Detected.identity`),
    the evaluation sets the command line adds, the options that decide the bytes."""
    source = source_identity | eval_fingerprint(config.eval_sources, config.real_labels)
    return {"source": source, "options": config.output_options()}


def prepared_source(dest: Path) -> dict | None:
    """The source the dataset at --dest was prepared from, as its manifest records it; None where it holds
    none (or one unreadable: `verified_existing` says so, under the lock)."""
    try:
        return read_manifest(dest).source
    except DatasetNotReady:
        return None


def with_class_maps(dest: Path, manifest: Manifest, maps: dict[str, dict]) -> Manifest:
    """A complete dataset prepared before manifests recorded `class_maps` (#53: winter21, fall11, timm's 22k),
    given them by the rerun that finds it whole: its manifest written again, atomically, with them (its files and
    dataset id as they were), so that a model of the other class table evaluates on it. As it is where it has
    them, or its layout has none, or the write fails (a full disk): the dataset is whole and trains as it did,
    so the job goes on, told what it lacks."""
    if manifest.class_maps or not maps:
        return manifest
    try:
        write_manifest(dest, replace(manifest, class_maps=maps))
    except OSError as exn:  # write_file_atomic: the manifest there as it was, its temporary file removed
        log.warning("%s: could not record where its classes lie in %s in its manifest.json (%s): the dataset is "
                    "whole and trains as before; rerun prepare once there is room to record them (a model of "
                    "the other class table needs them to evaluate on it)", dest, " and ".join(maps),
                    exn.strerror or exn)
        return manifest
    log.info("%s: recorded where its classes lie in %s (the manifest's class_maps, which it was prepared without)",
             dest, " and ".join(maps))
    return replace(manifest, class_maps=maps)


def make_dest(dest: Path) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            (dest / split).mkdir(exist_ok=True)
    except OSError as exn:
        raise PrepareError(f"cannot create --dest {dest}: {exn.strerror}. Choose a writable directory.") from None
    make_readers_lock(dest)  # loaders lock it shared: a prepare does not replace the dataset under one


# ---------------------------------------------------------------- what it holds: idempotence and --verify

@dataclass(frozen=True)
class Existing:
    """What --dest holds, against what this run makes (verified_existing); all None: nothing usable."""
    complete: Manifest | None = None  # this very dataset: nothing to do
    damaged: Manifest | None = None  # a damaged dataset that --verify rebuilds
    base: Manifest | None = None  # a complete dataset lacking only evaluation sets this run adds (add_eval_sets)
    # what the build replaces (--force, --verify), said by the build once it goes ahead: a refused one (a loader
    # reading it, no room) said it was replacing a dataset it left as it was
    replacing: str | None = None


def verified_existing(dest: Path, identity: dict, config: PrepareConfig) -> Existing:
    """The dataset at `dest`: complete and made from the same source and options (and evaluation
    sets); or lacking only evaluation sets the command line adds (then kept, as the base of the
    addition); or damaged, when --verify is rebuilding it; or nothing usable.

    Shards are checked by size (fast), and with --verify by their checksums too. Refuses (unless
    --force, or --verify for a damaged one) to replace a dataset made with other options, found
    damaged, or whose manifest this version cannot read. Nothing is removed here: the build removes
    the dataset it replaces when it starts (`remove_incomplete`, the manifest first), after the
    source has been checked, so that a refusal of the source leaves the old dataset whole. A dataset
    that is kept loses what an addition killed before its manifest left beside it.
    """
    try:
        manifest = read_manifest(dest)
    except ManifestUnreadable as exn:
        return unreadable_replaced(dest, exn.why, config.force)
    except DatasetNotReady:
        return Existing()
    old = {"source": manifest.source, "options": manifest.options}
    adds = eval_addition(old, identity)
    kept = comparable(old) == comparable(identity) or adds is not None  # the dataset there stays: its files whole
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
    return Existing(damaged=manifest if rebuild else None,
                    replacing=f"--verify: rebuilding the dataset in {dest}" if rebuild
                    else f"--force: replacing the dataset in {dest}")


def unreadable_replaced(dest: Path, why: str, force: bool) -> Existing:
    """A manifest this version cannot read (damaged, or a later version's format) still marks a dataset
    someone made: replaced only with --force, as one made with other options."""
    if not force:
        raise PrepareError(f"{dest} holds a dataset whose {MANIFEST_NAME} this version of prepare cannot read "
                           f"({why}). Rerun with --force to replace it, or choose another --dest (a dataset of "
                           "a later version: prepare with that version, or train with it)")
    return Existing(replacing=f"--force: replacing the dataset in {dest}, whose {MANIFEST_NAME} cannot be read ({why})")


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
    old_rules, new_rules = old["source"].get("rules") or {}, new["source"].get("rules") or {}
    for name in sorted(set(old_rules) | set(new_rules)):  # what the layout decides: winter21's class table among them
        if old_rules.get(name) != new_rules.get(name):
            # a full release's class_table unset is 22k's (as before winter21's own was the default): said so, never
            # 'unset' where the command line typed --class-table imagenet-22k
            unset = "'imagenet-22k'" if name == "class_table" else "unset"
            was, now = (repr(rules[name]) if name in rules else unset for rules in (old_rules, new_rules))
            diffs.append(f"the layout's rule {name} was {was}, now {now}")
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


# ---------------------------------------------------------------- what a run left

def remove_incomplete(dest: Path) -> None:
    """Remove what an interrupted run left (shards, spill files, a killed atomic write's temporary
    files) and the dataset this build replaces (verified_existing let it: --force, --verify's
    rebuild), its manifest first, so that nothing mistakes the rebuild for complete. Refuses to
    touch foreign files, before removing anything."""
    splits = [split for split in ALL_SPLITS if (dest / split).is_dir()]
    for split in splits:
        foreign = [p.name for p in (dest / split).iterdir() if not SHARD_FILE.match(p.name)]
        if foreign:
            raise PrepareError(f"{dest / split} holds files prepare did not write ({foreign[:3]}): "
                               "choose an empty --dest")
    if manifest_path(dest).exists():
        manifest_path(dest).unlink()
        fsync_dir(dest)
    remove_killed_writes(dest, (MANIFEST_NAME, REAL_LABELS_FILE))
    for path in shard_files(dest):
        path.unlink()
    (dest / REAL_LABELS_FILE).unlink(missing_ok=True)
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)


def shard_files(dest: Path) -> list[Path]:
    """Every file in the split folders of --dest (remove_incomplete has refused any prepare did not write)."""
    return [path for split in ALL_SPLITS if (dest / split).is_dir() for path in (dest / split).iterdir()]


def removed_bytes(dest: Path) -> int:
    """The bytes remove_incomplete frees: the dataset a build replaces (--force, --verify's rebuild), what a killed
    run left."""
    files = [*shard_files(dest), *(dest / WORK_DIR_NAME).rglob("*"), manifest_path(dest), dest / REAL_LABELS_FILE]
    return sum(path.stat().st_size for path in files if path.is_file())


def remove_this_run(dest: Path) -> None:
    """What a failed run wrote: its scratch, its shards and its ReaL labels (remove_incomplete
    emptied the shard folders before it started, so whatever is there now is this run's). A manifest
    there is this run's too, renamed in whole before the failure (a SIGTERM during the fsync after its
    rename): the dataset it lists is complete and stays, where removing its shards left a manifest
    listing none, which the rerun refused as damaged."""
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)
    if manifest_path(dest).exists():
        return
    (dest / REAL_LABELS_FILE).unlink(missing_ok=True)
    for split in ALL_SPLITS:
        for path in (dest / split).iterdir() if (dest / split).is_dir() else ():
            if SHARD_FILE.match(path.name):
                path.unlink(missing_ok=True)


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
    remove_killed_writes(dest, (MANIFEST_NAME, REAL_LABELS_FILE))
    shutil.rmtree(dest / WORK_DIR_NAME, ignore_errors=True)

