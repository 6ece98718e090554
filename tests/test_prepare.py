"""The prepare stage end to end on real tar files and real JPEGs."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from PIL import Image

from conftest import BIG_SPEC, ROOT, SHARD_MB, config, copy_dataset, run_module, tree_bytes, write_sample
from prepare.builder import prepare
from prepare.config import PrepareError
from prepare.labels import LabelError
from prepare.sample import PNG_KEY, SampleSpec, make_sample, tar_bytes
from prepare.sources.base import SourceError
from shards.manifest import DatasetNotReady, read_complete_manifest, read_manifest


def read_split(dest: Path, split: str) -> list[tuple[str, Image.Image, int]]:
    """Every sample, through the plainest webdataset pipeline a user would write."""
    urls = [str(dest / s.name) for s in read_manifest(dest).splits[split].shards]
    return list(wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("__key__", "jpg", "cls"))


def expected_labels(images) -> dict[str, int]:
    index = {wnid: i for i, wnid in enumerate(sorted(w for w, _, _ in images.classes))}
    return {key: index[wnid] for key, wnid, _ in images.train + images.val}


@pytest.mark.parametrize("layout", ["official", "imagefolder", "kaggle"])
def test_every_layout_gives_every_sample_once_with_its_exact_label(layout, sources, images, tmp_path, prepared):
    dest = prepared if layout == "official" else tmp_path / "imagenet"
    if layout != "official":
        prepare(config(sources[layout], dest))
    truth = expected_labels(images)
    for split, rows in (("train", images.train), ("val", images.val)):
        samples = read_split(dest, split)
        keys = [key for key, _, _ in samples]
        assert sorted(keys) == sorted(key for key, _, _ in rows)  # each exactly once
        assert all(label == truth[key] for key, _, label in samples)
        assert all(image.mode == "RGB" for _, image, _ in samples)
    manifest = read_manifest(dest)
    assert [(c.index, c.wnid) for c in manifest.classes] == list(enumerate(sorted(w for w, _, _ in images.classes)))
    # A bare extracted tree has no names (unless a devkit or LOC_synset_mapping.txt sits beside it).
    assert manifest.classes[0].name == ("n01440764" if layout == "imagefolder" else "tench, Tinca tinca")


def stored_images(prepared: Path) -> dict[str, bytes]:
    """Every stored image's bytes by key, read back from the shards."""
    manifest = read_manifest(prepared)
    return {sample["__key__"]: sample["jpg"] for split in ("train", "val")
            for s in manifest.splits[split].shards
            for sample in wds.WebDataset(str(prepared / s.name), shardshuffle=False)}


def restart_interval_of(data: bytes) -> int:
    """The restart interval a JPEG's DRI segment declares, 0 without one (PIL does not say)."""
    at = data.find(b"\xff\xdd\x00\x04")
    return int.from_bytes(data[at + 4:at + 6], "big") if at >= 0 else 0


def test_quirk_images_are_normalised_and_good_jpegs_keep_their_pixels_made_seekable(prepared, images):
    manifest = read_manifest(prepared)
    assert manifest.converted == {
        "n01440764_10000": "CMYK JPEG -> RGB JPEG", "n01443537_10038": "L JPEG -> RGB JPEG",
        PNG_KEY: "RGB PNG -> RGB JPEG", "ILSVRC2012_val_00000002": "CMYK JPEG -> RGB JPEG",
        "ILSVRC2012_val_00000003": "L JPEG -> RGB JPEG"}
    original = {key: data for key, _, data in images.train + images.val}
    stored = stored_images(prepared)
    for key, data in stored.items():
        image = Image.open(io.BytesIO(data))
        assert (image.format, image.mode) == ("JPEG", "RGB")
        assert image.info.get("progressive", 0) == 0  # baseline: the only kind that seeks
        assert 1 <= restart_interval_of(data) <= manifest.options["restart_mcus"] == 2
        if key not in manifest.converted:
            assert np.array_equal(np.asarray(image), np.asarray(Image.open(io.BytesIO(original[key]))))
    assert manifest.stats["seekable_images"] == len(stored) == manifest.stats["samples"]
    for split in ("train", "val"):
        for url in (prepared / s.name for s in manifest.splits[split].shards):
            for sample in wds.WebDataset(str(url), shardshuffle=False):
                meta = json.loads(sample["json"])
                assert (meta["width"], meta["height"]) == Image.open(io.BytesIO(sample["jpg"])).size


def test_without_restart_markers_good_jpegs_keep_their_bytes(sources, images, tmp_path):
    prepare(config(sources["official"], tmp_path / "plain", restart_mcus=0))
    manifest = read_manifest(tmp_path / "plain")
    original = {key: data for key, _, data in images.train + images.val}
    stored = stored_images(tmp_path / "plain")
    assert {key for key, data in stored.items() if data == original[key]} == set(stored) - set(manifest.converted)
    assert not any(restart_interval_of(data) for data in stored.values())
    assert manifest.stats["seekable_images"] == 0 and manifest.options["restart_mcus"] == 0


def test_shards_are_equal_sized_and_mixed_across_classes(prepared):
    import scipy.stats  # (half a second: imported by the tests that use it, not by every collection)

    manifest = read_manifest(prepared)
    for split in ("train", "val"):
        counts = [s.samples for s in manifest.splits[split].shards]
        assert len(counts) > 1 and max(counts) - min(counts) <= 1
    # Class-sorted input (the train archive) must not give class-sorted shards. Under a uniform
    # shuffle the shard x class table is a random contingency table: a chi-square test of
    # independence passes, where class-sorted shards give p ~ 0.
    table = [[0] * 6 for _ in manifest.splits["train"].shards]
    for row, shard in zip(table, manifest.splits["train"].shards):
        for _, label in wds.WebDataset(str(prepared / shard.name), shardshuffle=False).to_tuple("__key__", "cls"):
            row[int(label)] += 1
    assert scipy.stats.chi2_contingency(table).pvalue > 0.01
    assert all(max(row) <= sum(row) / 2 for row in table)


def test_any_tar_tool_reads_the_shards(prepared):
    shard = read_manifest(prepared).splits["val"].shards[0]
    listing = subprocess.run(["tar", "-tf", prepared / shard.name], capture_output=True, text=True, check=True)
    names = listing.stdout.split()
    assert len(names) == 3 * shard.samples and all("/" not in n and n.count(".") == 1 for n in names)


def test_same_source_and_seed_give_byte_identical_shards_with_any_worker_count(sources, prepared, tmp_path):
    prepare(config(sources["official"], tmp_path / "two", workers=2))
    assert tree_bytes(tmp_path / "two") == tree_bytes(prepared)
    prepare(config(sources["official"], tmp_path / "seed1", seed=1))
    assert tree_bytes(tmp_path / "seed1") != tree_bytes(prepared)


@pytest.mark.slow
def test_a_hard_open_file_limit_below_the_buckets_gives_the_same_shards(sources, tmp_path):
    """A cluster's hard `ulimit -n` below a part's buckets (ImageNet-21k's 6,500 under 1024): each process keeps
    fewer spill files open than it writes, reopening them (before: "cannot read IMAGE: Too many open files")."""
    import resource

    limit, shard_mb = 40, 0.02  # a hundred buckets a split
    prepare(config(sources["imagefolder"], tmp_path / "unlimited", shard_size_mb=shard_mb))
    assert len(read_manifest(tmp_path / "unlimited").splits["train"].shards) > 2 * limit
    done = run_module("prepare", "--source", sources["imagefolder"], "--dest", tmp_path / "low", "--shard-size",
                      shard_mb, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    assert done.returncode == 0, done.stderr
    assert tree_bytes(tmp_path / "low") == tree_bytes(tmp_path / "unlimited")


def test_bucket_spills_past_their_open_files_append_in_order(tmp_path):
    from prepare.spills import BucketSpills, read_spill, spill_path

    with BucketSpills(tmp_path, "1", most_open=2) as spills:
        for i in range(30):
            spills.write(i % 5, {"__key__": f"k{i:02d}", "i": i})
            assert len(spills.files) <= 2
    for bucket in range(5):
        assert list(read_spill(spill_path(tmp_path, bucket, "1"))) == [f"k{i:02d}" for i in range(bucket, 30, 5)]



def test_each_receiving_shard_takes_what_was_handed_to_it_without_listing_what_moved(tmp_path, monkeypatch):
    """The shard writer's receivers take in what the givers handed on: moved/ holds a file for nearly every sample
    that moves (about 120,000 at ImageNet-21k's 6,500 shards), and each receiver listed all of it to find its own,
    which made the writing quadratic in the shards (343 s of a core at 21k's size, 5 s at 1k's 1,000 shards). Each
    job names its givers now: nothing lists moved/, and each shard holds the keys it was dealt, in their order."""
    import prepare.shard_writer
    from prepare.shard_writer import write_shards
    from prepare.shuffle import bucket_of, deal_into_shards
    from prepare.spills import BucketSpills
    from shards.format import sample_record, shard_keys

    seed, count = 3, 40
    work, dest = tmp_path / "work", tmp_path / "imagenet"
    work.mkdir()
    (dest / "train").mkdir(parents=True)
    buckets = [[] for _ in range(count)]
    with BucketSpills(work, "1") as spills:
        for i in range(2000):
            key = f"n{i % 7:08d}_{i}"
            buckets[bucket_of(key, seed, count)].append(key)
            spills.write(bucket_of(key, seed, count), sample_record(key, key.encode(), i % 7, {}))
    shards = deal_into_shards(buckets, seed)
    assert sum(1 for b, keys in shards for key in keys if bucket_of(key, seed, count) != b) > 20  # some move
    listed, scandir = [], os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(Path(path).name) or scandir(path))
    handed, write_spill = [], prepare.shard_writer.write_spill
    monkeypatch.setattr(prepare.shard_writer, "write_spill",
                        lambda path, samples: write_spill(path, [handed.append(s["__key__"]) or s for s in samples]))
    infos = write_shards("train", shards, buckets, work, dest, config(tmp_path, dest, seed=seed), None)
    assert "moved" not in listed
    # each sample that moves handed on once, to its receiver alone (moved/ is on --dest, counted in its space)
    assert sorted(handed) == sorted(key for b, keys in shards for key in keys if bucket_of(key, seed, count) != b)
    assert [shard_keys(dest / info.name) for info in infos] == [keys for _, keys in shards]
    assert not list((work / "moved").iterdir())  # each file handed on was taken in, and removed


def test_a_split_with_fewer_samples_than_buckets_gives_every_key_once_in_shards_numbered_from_zero(tmp_path):
    """A small split (an evaluation set, a --shard-size under its images' size) leaves buckets the hash filled with
    nothing, and buckets some worker's spills never reached: such a bucket still receives its share, a worker's
    missing spill file is none to read or remove, and the shards are numbered by their order, not by bucket."""
    from prepare.shard_writer import write_shards
    from prepare.shuffle import bucket_of, deal_into_shards
    from prepare.spills import BucketSpills
    from shards.format import sample_record, shard_keys

    seed, count = 0, 12
    work, dest = tmp_path / "work", tmp_path / "imagenet"
    work.mkdir()
    (dest / "val").mkdir(parents=True)
    keys = [f"n{i % 3:08d}_{i}" for i in range(6)]
    buckets = [[key for key in keys if bucket_of(key, seed, count) == b] for b in range(count)]
    for tag, mine in (("1", keys[0::2]), ("2", keys[1::2])):  # two workers' spills
        with BucketSpills(work, tag) as spills:
            for key in mine:
                spills.write(bucket_of(key, seed, count), sample_record(key, key.encode(), 0, {}))
    shards = deal_into_shards(buckets, seed)
    assert [b for b, _ in shards] == [0, 1, 6, 7, 10, 11]  # 0 and 1 spilled nothing: each receives one of 6's, 11's
    infos = write_shards("val", shards, buckets, work, dest, config(tmp_path, dest, seed=seed), None)
    assert [info.name for info in infos] == [f"val/val-{i:06d}.tar" for i in range(6)]
    assert [shard_keys(dest / info.name) for info in infos] == [keys for _, keys in shards]
    assert not list(work.glob("*.spill")) and not list((work / "moved").iterdir())

@contextmanager
def garbled(*paths: Path):
    """The files overwritten with other bytes of the same size and mtime; restored, times too, after."""
    saved = [(path, path.read_bytes(), path.stat()) for path in paths]
    for path, data, stat in saved:
        path.write_bytes(bytes(b ^ 0x5A for b in data))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    try:
        yield
    finally:
        for path, data, stat in saved:
            path.write_bytes(data)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.slow
def test_a_rerun_checks_only_sizes_and_other_options_refuse(sources, tmp_path):
    """A rerun (what every requeued job does) stats the source and the shards and reads neither:
    that is why it takes about a second. Shown with both garbled in place at the same sizes."""
    source = copy_official(sources, tmp_path)
    dest = tmp_path / "imagenet"
    args = ["prepare", "--source", source, "--dest", dest, "--shard-size", SHARD_MB]
    assert run_module(*args).returncode == 0
    before = tree_bytes(dest)
    with garbled(sorted(dest.glob("train/*.tar"))[0], source / "ILSVRC2012_img_train.tar"):
        again = run_module(*args)
    assert again.returncode == 0 and "nothing to do" in again.stderr, again.stderr
    assert tree_bytes(dest) == before
    refused = run_module(*args, "--seed", "7")
    assert refused.returncode == 2
    assert "was prepared differently: seed was 0, now 7" in refused.stderr and "--force" in refused.stderr
    assert tree_bytes(dest) == before
    assert run_module(*args, "--seed", "7", "--force").returncode == 0
    assert read_manifest(dest).options["seed"] == 7


def test_a_damaged_dataset_is_detected_and_rebuilt_with_force(sources, tmp_path):
    dest = tmp_path / "imagenet"
    prepare(config(sources["official"], dest))
    victim = dest / read_manifest(dest).splits["train"].shards[1].name
    victim.unlink()
    with pytest.raises(DatasetNotReady, match="missing"):
        read_complete_manifest(dest)
    with pytest.raises(PrepareError, match="is damaged: .* is missing.*--force"):
        prepare(config(sources["official"], dest))
    prepare(config(sources["official"], dest, force=True))
    assert victim.exists()


@pytest.mark.parametrize("change", ["a later format", "cut short", "not an object"])
def test_a_manifest_this_version_cannot_read_keeps_its_dataset_until_force(prepared, sources, tmp_path, change):
    """A dataset whose manifest does not parse here (a later version's, or damaged) is someone's dataset:
    refused in one line, every file kept, as one made with other options; --force replaces it, and the
    build removes a killed atomic write's temporary file too."""
    dest = copy_dataset(prepared, tmp_path / "imagenet")
    manifest = dest / "manifest.json"
    text = manifest.read_text()
    manifest.write_text({"a later format": text.replace('"imagenet-wds/1"', '"imagenet-wds/2"'),
                         "cut short": text[:len(text) // 2], "not an object": "[]"}[change])
    before = {**tree_bytes(dest), "manifest.json": manifest.read_bytes()}
    with pytest.raises(PrepareError, match=r"holds a dataset whose manifest.json this version of prepare cannot read "
                                           r"\(.+\)\. Rerun with --force to replace it, or choose another --dest"):
        prepare(config(sources["official"], dest))
    assert {**tree_bytes(dest), "manifest.json": manifest.read_bytes()} == before
    (dest / ".manifest.json.k9x1ab.tmp").write_text("{")  # a kill between write_file_atomic's write and rename
    prepare(config(sources["official"], dest, force=True))
    assert tree_bytes(dest) == tree_bytes(prepared) and read_complete_manifest(dest)
    assert not list(dest.glob(".manifest.json.*.tmp"))


def test_a_shard_that_cannot_be_read_is_a_damaged_one_not_a_traceback(prepared, tmp_path):
    """--verify reads every shard: one the disk fails to read (EIO; here a folder in its place, whose read
    fails as such a read does, with an OSError) is named as damaged, as a missing one is."""
    from shards.manifest import checksum_problem

    dest = copy_dataset(prepared, tmp_path / "imagenet")
    shard = read_manifest(dest).splits["train"].shards[0]
    (dest / shard.name).unlink()
    assert checksum_problem(dest, shard.name, shard.sha256) == f"{shard.name} is missing"
    (dest / shard.name).mkdir()
    assert checksum_problem(dest, shard.name, shard.sha256) == f"{shard.name} cannot be read (Is a directory)"


def test_the_manifest_is_written_after_the_folders_of_the_shards_it_lists_are_made_durable(prepared, tmp_path,
                                                                                           monkeypatch):
    """A shard's rename is durable once its folder is fsynced: each folder the manifest lists shards in is
    fsynced before the manifest, the completion marker, is written (and its own folder after it)."""
    import shards.manifest as manifest_module

    dest = copy_dataset(prepared, tmp_path / "imagenet")
    done, fsync_dir, write_file_atomic = [], manifest_module.fsync_dir, manifest_module.write_file_atomic
    monkeypatch.setattr(manifest_module, "fsync_dir", lambda path: done.append(Path(path).name) or fsync_dir(path))
    monkeypatch.setattr(manifest_module, "write_file_atomic",
                        lambda path, data: done.append(Path(path).name) or write_file_atomic(path, data))
    manifest_module.write_manifest(dest, read_manifest(dest))
    assert done == ["train", "val", "manifest.json", "imagenet"]  # (the last: write_file_atomic's rename)


def test_a_stop_after_the_manifests_rename_keeps_the_complete_dataset_it_lists(sources, prepared, tmp_path,
                                                                              monkeypatch):
    """SIGTERM (SLURM's time limit) or Ctrl-C landing in the fsync of --dest after the manifest's rename (a slow
    disk): the manifest is there, whole, so the shards it lists stay and a rerun finds the dataset complete. The
    clean-up removed them before, leaving a manifest that listed none: the rerun that the message asked for refused
    the dataset as damaged, and training would have too."""
    import shards.manifest as manifest_module

    dest = tmp_path / "imagenet"
    fsync_dir = manifest_module.fsync_dir

    def stopped_after_the_rename(path):
        fsync_dir(path)
        if Path(path).resolve() == dest.resolve() and (dest / "manifest.json").exists():
            raise KeyboardInterrupt  # what the signal's handler raises there (prepare/cli.py's Stopped alike)

    monkeypatch.setattr(manifest_module, "fsync_dir", stopped_after_the_rename)
    with pytest.raises(KeyboardInterrupt):
        prepare(config(sources["official"], dest))
    monkeypatch.undo()
    assert read_complete_manifest(dest) and tree_bytes(dest) == tree_bytes(prepared)
    assert not (dest / ".prepare-tmp").exists()
    assert prepare(config(sources["official"], dest)).dataset_id() == read_manifest(prepared).dataset_id()  # rerun


@pytest.mark.parametrize("flag", ["force", "verify"])
def test_a_source_refused_after_force_or_verify_leaves_the_dataset_there_whole(prepared, sources, tmp_path, flag):
    """--force (another seed) or --verify (a damaged shard), with ReaL labels that do not fit the val
    split: the refusal comes before anything at --dest is removed, its manifest first."""
    from prepare.eval_sets import EvalSetError

    dest = copy_dataset(prepared, tmp_path / "imagenet")
    if flag == "verify":
        victim = dest / read_manifest(dest).splits["train"].shards[0].name
        victim.write_bytes(bytes(victim.stat().st_size))
    before = {**tree_bytes(dest), "manifest.json": (dest / "manifest.json").read_bytes()}
    labels = tmp_path / "real.json"
    labels.write_text("[[1]]")
    options = {"seed": 3, "force": True} if flag == "force" else {"verify": True}
    with pytest.raises(EvalSetError, match="label sets for"):
        prepare(config(sources["official"], dest, real_labels=labels, **options))
    assert {**tree_bytes(dest), "manifest.json": (dest / "manifest.json").read_bytes()} == before


def big_source(tmp_path: Path) -> Path:
    """A sample large enough that prepare runs for a few seconds, to be killed in the middle."""
    return write_sample(tmp_path / "big", "official", BIG_SPEC)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["spilling", "writing shards"])
def test_kill_9_mid_run_leaves_nothing_complete_and_a_rerun_gives_identical_bytes(tmp_path, when):
    source = big_source(tmp_path)
    reference = tmp_path / "reference"
    args = ["--source", source, "--shard-size", 0.5, "--workers", 1]
    assert run_module("prepare", *args, "--dest", reference).returncode == 0
    dest = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "prepare", *map(str, args), "--dest", str(dest)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = (lambda: any((dest / ".prepare-tmp" / "train").glob("bucket-*"))) if when == "spilling" else \
        (lambda: any((dest / "train").glob("*.tar")))
    deadline = time.monotonic() + 60
    while not marker() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (dest / "manifest.json").exists()
    with pytest.raises(DatasetNotReady, match="run `srun --ntasks-per-node=1 python -m prepare"):
        read_complete_manifest(dest)
    assert run_module("prepare", *args, "--dest", dest).returncode == 0
    assert tree_bytes(dest) == tree_bytes(reference)
    assert not (dest / ".prepare-tmp").exists()


@pytest.mark.slow
@pytest.mark.parametrize("to", ["prepare", "its process group"])
def test_sigterm_mid_run_removes_what_the_run_wrote_and_says_so_in_one_line(tmp_path, to):
    """SLURM's time limit and scancel send SIGTERM (to the step's every process: the group; `timeout` to
    prepare alone): the run unwinds through its clean-up, as on any failure, where the default action left
    its scratch and shards behind without a word; exit status 128 + 15."""
    source = big_source(tmp_path)
    dest = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "prepare", "--source", str(source), "--dest", str(dest),
                             "--shard-size", "0.5", "--workers", "2"], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not any((dest / ".prepare-tmp" / "train").glob("bucket-*")) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.005)
    (os.kill if to == "prepare" else os.killpg)(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert [line.split("] ", 1)[1] for line in stderr.splitlines() if " ERROR " in line] == [
        "ERROR stopped by SIGTERM, its scratch and unfinished shards removed: rerun the same command to prepare "
        f"{dest}"]
    assert "Traceback" not in stderr
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [".prepare.lock",
                                                                                            ".readers.lock"]


def test_a_second_ctrl_c_waits_for_the_clean_up_that_the_message_says_is_done(sources, tmp_path, monkeypatch, caplog,
                                                                            ctrl_c_delivered):
    """Ctrl-C pressed twice (the second as the clean-up starts) leaves --dest as one Ctrl-C does, the val
    shards written and the scratch removed, as the line says; the second KeyboardInterrupt cut the clean-up
    short, leaving them (150 GB of spills, on ImageNet) under that line. A second SIGTERM was ignored already."""
    import prepare.builder as builder
    from prepare.cli import main

    real_write_split, real_remove = builder.write_split, builder.remove_this_run

    def ctrl_c_after_val(split, *args):
        info = real_write_split(split, *args)
        os.kill(os.getpid(), signal.SIGINT)  # the first: val's shards are written
        return info

    def ctrl_c_again(dest):
        os.kill(os.getpid(), signal.SIGINT)
        real_remove(dest)

    monkeypatch.setattr(builder, "write_split", ctrl_c_after_val)
    monkeypatch.setattr(builder, "remove_this_run", ctrl_c_again)
    dest = tmp_path / "imagenet"
    before = signal.getsignal(signal.SIGINT)  # (under pytest-xdist, the worker's, not Python's default)
    assert main(["--source", str(sources["official"]), "--dest", str(dest), "--workers", "1"]) == 130
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"stopped by SIGINT, its scratch and unfinished shards removed: rerun the same command to prepare {dest}"]
    left = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    assert left == [".prepare.lock", ".readers.lock", "train", "val"]
    assert signal.getsignal(signal.SIGINT) is before  # put back as it was


@pytest.mark.slow
def test_concurrent_prepares_on_one_destination_do_the_work_once(tmp_path):
    source = big_source(tmp_path)
    dest = tmp_path / "imagenet"
    command = [sys.executable, "-m", "prepare", "--source", str(source), "--dest", str(dest), "--shard-size", "0.5"]
    procs = [subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    logs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    assert sum("done:" in log for log in logs) == 1
    assert sum("nothing to do" in log for log in logs) == 1
    read_complete_manifest(dest)


# ---------------------------------------------------------------- bad input: clear errors, nothing lost

def test_missing_or_unrecognised_source(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        prepare(config(tmp_path / "nope", tmp_path / "out"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="(?s)holds no ImageNet layout.*official archives"):
        prepare(config(tmp_path / "empty", tmp_path / "out"))


def test_a_prepared_dataset_given_as_source_is_said_to_be_one_naming_its_download(prepared, sources, tmp_path):
    """Its train/ passed for an extracted tree: "imagenet/train holds no <wnid>/ folders with images", which says
    nothing of the mistake. Another program's manifest.json is no prepared dataset: the layouts decide."""
    with pytest.raises(SourceError) as refused:
        prepare(config(prepared, tmp_path / "again"))
    assert str(refused.value) == (f"--source {prepared} is a dataset `python -m prepare` wrote (its manifest.json), "
                                  "ready to train from, not an ImageNet download: give --source the download it was "
                                  f"prepared from ({sources['official'].resolve()})")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"name": "not ours"}')
    with pytest.raises(SourceError, match="(?s)holds no ImageNet layout.*official archives"):
        prepare(config(tmp_path / "other", tmp_path / "out"))


def test_a_layout_is_asked_only_where_its_names_show():
    """Detection as data (#49): each layout's `SIGNS` against --source's one listing, pure."""
    from prepare.sources import signs_show
    from prepare.sources.base import Signs

    hub = Signs(names=("*.parquet", "snapshots"), folders=("data",))
    assert signs_show(hub, {"": ("README.md", "data"), "data": ("train-00000-of-00002.parquet",)})
    assert signs_show(hub, {"": ("blobs", "refs", "snapshots")})  # the hub cache's repository folder
    assert not signs_show(hub, {"": ("README.md", "train"), "data": ("notes.txt",)})
    assert not signs_show(hub, {None: ("data.parquet",)})  # a file: only `file` patterns speak for it
    full = Signs(names=("winter21_whole.tar.gz",), file=("winter21_whole.tar.gz",))
    assert signs_show(full, {None: ("winter21_whole.tar.gz",)}) and signs_show(full, {"": ("winter21_whole.tar.gz",)})
    assert signs_show(Signs(file=("*.zip",)), {None: ("imagenet.zip",)})  # the name lower-cased by what_shows
    assert not signs_show(Signs(names=("train",)), {"": ("val", "trains")})


def test_every_layout_declares_its_signs_and_is_found_by_them_in_the_sample(sources):
    """Each sample download is detected as its own layout through its signs (no layout's code declines it)."""
    from prepare.sources import LAYOUTS, detect
    from prepare.sources.base import Signs

    assert all(isinstance(layout.SIGNS, Signs) and (layout.SIGNS.names or layout.SIGNS.file)
               for layout in LAYOUTS.values())
    for name, path in sources.items():
        assert detect(path).name == name


def copy_official(sources, tmp_path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(sources["official"], copy)
    return copy


def test_missing_devkit_and_unreadable_archive(sources, tmp_path):
    source = copy_official(sources, tmp_path)
    (source / "ILSVRC2012_devkit_t12.tar.gz").unlink()
    with pytest.raises(SourceError, match="ILSVRC2012_devkit_t12.tar.gz not found: the devkit holds"):
        prepare(config(source, tmp_path / "out"))
    source = copy_official(sources, tmp_path / "2")
    train = source / "ILSVRC2012_img_train.tar"
    train.unlink()
    train.symlink_to(tmp_path / "gone.tar")  # a dangling link: unreadable even for root
    with pytest.raises(SourceError, match="ILSVRC2012_img_train.tar not found"):
        prepare(config(source, tmp_path / "out"))


@pytest.mark.slow  # it reads as another user, in a child
def test_a_dataset_this_user_may_not_read_is_named_in_one_line_not_a_traceback_or_a_changed_shard(prepared):
    """Real permissions (root only: run as uid 12345, a child without torch): a colleague's dataset with its val/
    private was a PermissionError's traceback from find_damage's stat; a shard of theirs not readable (their umask
    077) was met mid-epoch as a shard 'changed after this loader was made'. Both are one line before the run."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to read the dataset as another user")
    top = Path(tempfile.mkdtemp(prefix="unreadable-"))  # (pytest's tmp_path lies in root's 0700 folder)
    try:
        top.chmod(0o755)
        dataset = shutil.copytree(prepared, top / "dataset")
        shard = sorted((dataset / "train").glob("*.tar"))[0]
        for private, named in ((dataset / "val", "val/val-000000.tar (Permission denied)"),
                               (shard, f"train/{shard.name} (Permission denied)")):
            private.chmod(0o700 if private.is_dir() else 0o600)
            shown = subprocess.run(["setpriv", "--reuid", "12345", "--regid", "12345", "--clear-groups",
                                    sys.executable, "-c", "import sys; from shards.manifest import "
                                    "read_complete_manifest; read_complete_manifest(sys.argv[1])", str(dataset)],
                                   cwd=ROOT, capture_output=True, text=True, timeout=60)
            private.chmod(0o755 if private.is_dir() else 0o644)
            assert shown.stderr.splitlines()[-1] == (
                f"shards.manifest.DatasetNotReady: the dataset at {dataset} cannot be read by this user: {named}. Ask "
                "its owner for read access (chmod -R a+rX on its folder; g+rX for a group), or prepare a copy of your "
                "own"), shown.stderr
    finally:
        shutil.rmtree(top)


@pytest.mark.slow  # it starts prepare as another user
def test_a_download_this_user_may_not_read_is_named_in_one_line_not_a_traceback_or_damage(sources):
    """Real permissions (root only, to run as uid 12345): a download of another user's, one folder of it left
    private, was a PermissionError's traceback from the listing; a Kaggle zip or a Parquet file not readable was
    said to be truncated, to be downloaded again."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to run prepare as another user")
    top = Path(tempfile.mkdtemp(prefix="unreadable-"))  # (pytest's tmp_path lies in root's 0700 folder)
    try:
        top.chmod(0o755)
        tree = shutil.copytree(sources["imagefolder"], top / "tree")
        spec = SampleSpec(classes=4, train_per_class=2, val_per_class=1)
        for layout in ("kaggle-zip", "hf-parquet"):
            make_sample(top / layout, layout, spec)
        private_class = sorted((tree / "val").iterdir())[1]
        parquet = sorted((top / "hf-parquet" / "data").glob("train-*.parquet"))[0]
        (archive,) = (top / "kaggle-zip").glob("*.zip")
        cases = [(tree, private_class), (tree, tree / "train"), (top / "kaggle-zip", archive),
                 (top / "hf-parquet", parquet)]
        for number, (source, private) in enumerate(cases):
            private.chmod(0o700 if private.is_dir() else 0o600)
            dest = top / f"dest{number}"
            dest.mkdir()
            os.chown(dest, 12345, 12345)
            shown = subprocess.run(["setpriv", "--reuid", "12345", "--regid", "12345", "--clear-groups",
                                    sys.executable, "-m", "prepare", "--source", str(source), "--dest", str(dest),
                                    "--no-shared-read"], cwd=ROOT, capture_output=True, text=True, timeout=120)
            private.chmod(0o755 if private.is_dir() else 0o644)
            errors = [line for line in shown.stderr.splitlines() if " ERROR " in line]
            assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
            assert len(errors) == 1 and errors[0].endswith(
                f"] ERROR {private} is not readable by this user (Permission denied): the download must be readable "
                "throughout by whoever prepares it; ask its owner for read access (chmod -R a+rX, or a group you "
                "are in)"), errors
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize("archive,cut", [("ILSVRC2012_img_train.tar", 0.5), ("ILSVRC2012_img_val.tar", 0.7)])
def test_truncated_archives_are_named(sources, tmp_path, archive, cut):
    source = copy_official(sources, tmp_path)
    path = source / archive
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut) // 512 * 512])  # cut at a block boundary: the sneaky case
    with pytest.raises(SourceError, match=f"{archive} is truncated"):
        prepare(config(source, tmp_path / "out"))
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("archive", ["ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar"])
@pytest.mark.parametrize("damage", ["garbled", "zeroed", "cut"])
def test_an_archive_whose_walk_ends_early_is_named_never_taken_for_missing_pieces(sources, tmp_path, archive, damage):
    """tarfile's walk over the headers ends without a word at a damaged header (garbled, or zeroed: an end of
    the archive in its middle) and at the file's end where the archive was cut between two members: the
    pieces after it were called missing, and --allow-partial left intact images out. Now the archive must
    end where the walk did: its end-of-archive blocks, and no header after them."""
    source = copy_official(sources, tmp_path)
    path = source / archive
    data = bytearray(path.read_bytes())
    third = tarfile.open(path).getmembers()[2].offset
    if damage == "garbled":
        data[third + 100] ^= 0xFF  # its mode field: the header's checksum no longer matches
    elif damage == "zeroed":
        data[third:third + 512] = bytes(512)
    path.write_bytes(bytes(data[:third] if damage == "cut" else data))
    why = (f"{archive} is truncated" if damage == "cut" else  # the train archive's class tars end in zero blocks
           f"{archive} has a damaged tar header at byte {third}")
    for allow_partial in (False, True):
        with pytest.raises(SourceError, match=why):
            prepare(config(source, tmp_path / "out", allow_partial=allow_partial))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_val_member_by_an_images_name_that_is_no_file_is_named_missing(sources, tmp_path):
    """A link or a folder in the val archive under a val image's name holds no image: named as missing,
    where it was counted present and the split prepared one image short without a word."""
    source = copy_official(sources, tmp_path)
    path = source / "ILSVRC2012_img_val.tar"
    out = io.BytesIO()
    with tarfile.open(path) as tar, tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as copy:
        members = tar.getmembers()
        for number, member in enumerate(members):
            if number in (2, 4):
                odd = tarfile.TarInfo(member.name)
                odd.type, odd.linkname = (tarfile.SYMTYPE, members[0].name) if number == 2 else (tarfile.DIRTYPE, "")
                copy.addfile(odd)
            else:
                copy.addfile(member, tar.extractfile(member))
    path.write_bytes(out.getvalue())
    keys = [members[n].name.removesuffix(".JPEG") for n in (2, 4)]
    with pytest.raises(SourceError, match=f"the val split lacks 2 of the .* images the devkit's ground truth lists "
                                          f"\\({keys[0]}, {keys[1]}\\)"):
        prepare(config(source, tmp_path / "out"))


def tar_members(fileobj) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=fileobj) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def replace_val_image(source: Path, key: str, data: bytes) -> None:
    path = source / "ILSVRC2012_img_val.tar"
    members = tar_members(io.BytesIO(path.read_bytes()))
    path.write_bytes(tar_bytes([(name, data if name == f"{key}.JPEG" else body) for name, body in members]))


def rewrite_class_tar(source: Path, edit) -> None:
    """Rewrite the official train archive's first class tar as the bytes `edit(members)` returns."""
    path = source / "ILSVRC2012_img_train.tar"
    inner = tar_members(io.BytesIO(path.read_bytes()))
    name, data = inner[0]
    path.write_bytes(tar_bytes([(name, edit(tar_members(io.BytesIO(data))))] + inner[1:]))


def replace_an_image_with_junk(source: Path) -> str:
    """Make the fourth image of the first class tar not an image; its key."""
    bad = {}

    def damage(members):
        name, _ = members[3]
        bad["key"] = name.rsplit("/", 1)[-1].split(".")[0]
        return tar_bytes([(n, b"not a jpeg at all" if n == name else body) for n, body in members])

    rewrite_class_tar(source, damage)
    return bad["key"]


def truncate_second_class_tar(source: Path) -> str:
    """Cut the train archive's second class tar in half, at a block boundary; its member name."""
    path = source / "ILSVRC2012_img_train.tar"
    inner = tar_members(io.BytesIO(path.read_bytes()))
    name, data = inner[1]
    path.write_bytes(tar_bytes(inner[:1] + [(name, data[: len(data) // 2 // 512 * 512])] + inner[2:]))
    return name


def test_parallel_class_tars_report_bad_images_like_one_process(sources, tmp_path):
    """With workers each class tar is read, checked and spilled by a worker: a bad image still stops
    the run by name, --skip-bad still lists it, and the shards equal a one-process run's."""
    source = copy_official(sources, tmp_path)
    bad = {"key": replace_an_image_with_junk(source)}
    with pytest.raises(PrepareError, match=f"{bad['key']}.JPEG does not decode.*--skip-bad"):
        prepare(config(source, tmp_path / "stopped", workers=2))
    prepare(config(source, tmp_path / "two", workers=2, skip_bad=True))
    prepare(config(source, tmp_path / "one", workers=1, skip_bad=True))
    assert list(read_manifest(tmp_path / "two").skipped) == [bad["key"]]
    assert tree_bytes(tmp_path / "two") == tree_bytes(tmp_path / "one")
    assert not (tmp_path / "two" / ".prepare-tmp").exists()


@pytest.mark.parametrize("layout", ["imagefolder", "kaggle"])
def test_trees_read_in_many_chunks_give_the_same_bytes_with_any_worker_count(sources, tmp_path, monkeypatch, layout):
    from prepare.sources import base as source_module

    monkeypatch.setattr(source_module, "FILES_PER_CHUNK", 16)  # many parts from the small sample
    prepare(config(sources[layout], tmp_path / "one", workers=1))
    prepare(config(sources[layout], tmp_path / "two", workers=2))
    assert tree_bytes(tmp_path / "two") == tree_bytes(tmp_path / "one")
    assert not (tmp_path / "two" / ".prepare-tmp").exists()


def test_a_truncated_class_tar_inside_the_archive_is_named_by_a_worker(sources, tmp_path):
    source = copy_official(sources, tmp_path)
    name = truncate_second_class_tar(source)
    with pytest.raises(SourceError, match=f"{name} is truncated"):
        prepare(config(source, tmp_path / "out", workers=2))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_class_tar_with_a_header_zeroed_in_its_middle_stops_the_run_in_one_line(sources, tmp_path, run_here):
    """The class tar still ends in zero blocks (so it is not 'truncated'), but a zeroed header in its
    middle would end it early for tarfile: the images after it are not silently left out."""
    from prepare.cli import main

    source = copy_official(sources, tmp_path)
    path = source / "ILSVRC2012_img_train.tar"
    inner = tar_members(io.BytesIO(path.read_bytes()))
    name, data = inner[1]
    third = sorted(m.offset for m in tarfile.open(fileobj=io.BytesIO(data)).getmembers())[2]
    damaged = data[:third] + bytes(512) + data[third + 512:]
    path.write_bytes(tar_bytes(inner[:1] + [(name, damaged)] + inner[2:]))
    result = run_here(main, "--source", source, "--dest", tmp_path / "out", "--workers", 2)
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"{name} has a damaged tar header at byte {third}" in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_val_ranges_cover_the_val_archive_in_order_with_their_labels(sources, images):
    from prepare.sources.official import OfficialArchives

    archives = OfficialArchives(sources["official"])
    ranges = archives.val_ranges(per_range=7)
    with tarfile.open(archives.val_tar) as tar:
        names = [m.name for m in tar.getmembers()]
    assert [len(r.labels) for r in ranges[:-1]] == [7] * (len(ranges) - 1)
    items = [item for r in ranges for item in r.items()]
    assert [f"{i.key}.JPEG" for i in items] == names
    assert {i.key: i.wnid for i in items} == {key: wnid for key, wnid, _ in images.val}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_image_stops_the_run_unless_skip_bad(sources, images, tmp_path, damage, workers):
    source = copy_official(sources, tmp_path)
    key, _, good = images.val[5]
    replace_val_image(source, key, b"not a jpeg at all" if damage == "garbage" else good[: len(good) // 2])
    with pytest.raises(PrepareError, match=f"ILSVRC2012_img_val.tar:{key}.JPEG does not decode.*--skip-bad"):
        prepare(config(source, tmp_path / "out", workers=workers))
    prepare(config(source, tmp_path / "out", skip_bad=True, workers=workers))
    manifest = read_manifest(tmp_path / "out")
    assert list(manifest.skipped) == [key]
    assert key not in {k for k, _, _ in read_split(tmp_path / "out", "val")}
    assert manifest.splits["val"].samples == len(images.val) - 1


@pytest.mark.parametrize("workers", [1, 2])
def test_an_image_over_the_pixel_limit_stops_the_run_unless_skip_bad(sources, images, tmp_path, workers):
    """The limit of shards.limits, checked from the header before anything is decoded: a JPEG that
    claims 9000 x 9000 (81 Mpx: under PIL's own bomb limit) never reaches the shards."""
    from jpegs import with_size

    source = copy_official(sources, tmp_path)
    key, _, good = images.val[3]
    replace_val_image(source, key, with_size(good, 9000, 9000))
    with pytest.raises(PrepareError, match=f"{key}.JPEG has 9000 x 9000 pixels, more than the limit of 67,108,864.*"
                                           "--skip-bad"):
        prepare(config(source, tmp_path / "out", workers=workers))
    prepare(config(source, tmp_path / "out", skip_bad=True, workers=workers))
    manifest = read_manifest(tmp_path / "out")
    assert list(manifest.skipped) == [key] and "more than the limit" in manifest.skipped[key]
    assert manifest.splits["val"].samples == len(images.val) - 1


def damaged_in_the_middle(data: bytes, fill: bytes = b"\0", length: int = 300) -> bytes:
    """The JPEG with `length` bytes in the middle of its first scan's entropy-coded data overwritten
    with `fill` repeated (zeros: a stretch of a disk or a transfer lost); it still ends in EOI."""
    from jpegs import segments

    start = segments(data)[-1][2]
    at = (start + len(data) - 2) // 2 - length // 2
    return data[:at] + (fill * length)[:length] + data[at + length:]


DAMAGED_SEEDS = (0, 1, 2, 3, 5)  # with seed 4 the zeroed stretch shows only as coefficients past baseline's range


def a_damaged_jpeg(seed: int = 0) -> bytes:
    """A real photo-like JPEG (Huffman tables made for it, as most cameras' and editors' are) with
    300 bytes of its scan zeroed: for the DAMAGED_SEEDS, libjpeg runs out of data before the last
    MCU. (Much damage decodes without a word from libjpeg: see docs/reliability.md, Damaged JPEG data is named.)"""
    from jpegs import jpeg

    damaged = damaged_in_the_middle(jpeg(333, 217, optimize=True, seed=seed))
    assert damaged.endswith(b"\xff\xd9")
    return damaged


PREMATURE_END = "Corrupt JPEG data: premature end of data segment"


def test_the_rewrite_tells_damaged_data_from_a_jpeg_it_refuses():
    """Damage is libjpeg's warning or error on the data, in its words; a refusal is a sound JPEG
    the rewrite cannot keep exactly. Both keep the original bytes; only damage is reported."""
    from jpegs import DQT, jpeg, many_scans, photo, without
    from prepare.images import BadImage, prepare_image, rewrite_with_restarts, with_restarts
    from shards.limits import MAX_PIXELS

    good = rewrite_with_restarts(jpeg(333, 217), 2, MAX_PIXELS)
    assert good.data is not None and good.interval == 1 and good.damage is None and good.refusal is None
    damaged = rewrite_with_restarts(a_damaged_jpeg(), 2, MAX_PIXELS)
    assert (damaged.data, damaged.damage, damaged.refusal) == (None, PREMATURE_END, None)
    # a stretch of bytes that are no Huffman code, in a baseline scan: libjpeg-turbo's fast path,
    # which it takes while a whole MCU's worth of input is buffered, reads them as zeros silently
    for kind in ({}, {"optimize": True}, {"mode": "L"}, {"subsampling": 0}):
        garbled = damaged_in_the_middle(jpeg(1000, 700, **kind), fill=b"\xff\x00")  # stuffed: 0xFF data bytes
        assert rewrite_with_restarts(garbled, 2, MAX_PIXELS).damage == "Corrupt JPEG data: bad Huffman code", kind
        assert with_restarts(garbled, 2, MAX_PIXELS) is None
    truncated = jpeg(333, 217)[:5000]
    assert rewrite_with_restarts(truncated, 2, MAX_PIXELS).damage == "Premature end of JPEG file"
    progressive = rewrite_with_restarts(many_scans(photo(64, 48), 10), 2, MAX_PIXELS)  # scans stop short: fine
    assert progressive.damage is None and progressive.data is None
    assert progressive.refusal == "progressive scans leave coefficient bits unsent (decoders estimate them)"
    too_large = rewrite_with_restarts(jpeg(333, 217), 2, 333 * 217 - 1)
    assert too_large.damage is None and "more than the limit" in too_large.refusal
    assert rewrite_with_restarts(b"\xff\xd8 not a JPEG", 2, MAX_PIXELS).damage is not None
    assert rewrite_with_restarts(b"not a JPEG", 2, MAX_PIXELS).refusal == "no JPEG start-of-image marker"

    kept = prepare_image(a_damaged_jpeg())
    assert kept.data is None and kept.damage == PREMATURE_END and kept.restart_interval == 0
    # damage that leaves nothing to decode (a JPEG without its quantisation tables, which PIL opens
    # as RGB, but no decoder can decode) is an image that does not decode
    with pytest.raises(BadImage, match=r"does not decode as an image \(libjpeg: Quantization table 0x00 was not "
                                       r"defined\)"):
        prepare_image(without(jpeg(333, 217), DQT))
    assert prepare_image(a_damaged_jpeg(), restart_mcus=0).damage is None  # its data not decoded: not checked
    assert prepare_image(many_scans(photo(64, 48), 10)).damage is None
    assert prepare_image(jpeg(333, 217)).damage is None


def damaged_val_source(sources, images, tmp_path: Path, count: int = 1) -> tuple[Path, list[str], str]:
    """A copy of the official sample whose first `count` val images are damaged JPEGs (their scans
    zeroed in the middle) and the next a progressive JPEG the rewrite refuses but that is fine:
    (the source, the damaged keys, the progressive one's key)."""
    from jpegs import many_scans, photo

    source = copy_official(sources, tmp_path)
    path = source / "ILSVRC2012_img_val.tar"
    members = dict(tar_members(io.BytesIO(path.read_bytes())))
    keys = [key for key, _, _ in images.val[:count + 1]]
    for i, key in enumerate(keys[:-1]):
        members[f"{key}.JPEG"] = a_damaged_jpeg(seed=DAMAGED_SEEDS[i])
    members[f"{keys[-1]}.JPEG"] = many_scans(photo(64, 48), 10)
    path.write_bytes(tar_bytes(list(members.items())))
    return source, keys[:-1], keys[-1]


def warnings_in(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_damaged_jpeg_is_stored_named_and_listed_and_left_out_with_skip_bad(sources, images, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="prepare")
    source, (key,), progressive = damaged_val_source(sources, images, tmp_path)
    damaged = a_damaged_jpeg(seed=DAMAGED_SEEDS[0])
    dest = tmp_path / "kept"
    prepare(config(source, dest))
    manifest = read_manifest(dest)
    assert manifest.damaged == {key: PREMATURE_END}
    assert not manifest.skipped and progressive not in manifest.damaged
    stored = stored_images(dest)
    assert stored[key] == damaged  # the original bytes, not rewritten
    assert restart_interval_of(stored[progressive]) == 0 and progressive not in manifest.converted
    named = [m for m in warnings_in(caplog) if key in m]
    origin = f"{source / 'ILSVRC2012_img_val.tar'}:{key}.JPEG"
    assert named == [f'damaged JPEG {origin}: libjpeg says "{PREMATURE_END}"; stored as it is, listed under '
                     '"damaged" in the manifest (--skip-bad leaves such images out)']
    assert not [m for m in warnings_in(caplog) if progressive in m]
    assert "skipped 0 bad ones, stored 1 with damaged JPEG data as they are (listed in the manifest)" in caplog.text
    assert manifest.splits["val"].samples == len(images.val)

    caplog.clear()
    prepare(config(source, dest))  # the same options: complete, nothing to do
    assert "nothing to do" in caplog.text
    raw = json.loads((dest / "manifest.json").read_text())
    del raw["damaged"]  # as a manifest written before prepare checked for damage
    (dest / "manifest.json").write_text(json.dumps(raw))
    assert read_manifest(dest).damaged == {}
    caplog.clear()
    prepare(config(source, dest))
    assert "nothing to do" in caplog.text

    caplog.clear()
    skipped = tmp_path / "skipped"
    prepare(config(source, skipped, skip_bad=True))
    manifest = read_manifest(skipped)
    assert manifest.skipped == {key: f"has damaged JPEG data (libjpeg: {PREMATURE_END})"} and not manifest.damaged
    assert key not in stored_images(skipped) and progressive in stored_images(skipped)
    assert manifest.splits["val"].samples == len(images.val) - 1
    assert [m for m in warnings_in(caplog) if key in m] == [
        f"skipping {origin}: has damaged JPEG data (libjpeg: {PREMATURE_END})"]

    caplog.clear()
    plain = tmp_path / "plain"
    prepare(config(source, plain, restart_mcus=0))  # nothing decodes the data: stored, not checked
    assert not read_manifest(plain).damaged and stored_images(plain)[key] == damaged
    assert "damaged JPEG data not checked (--restart-mcus 0)" in caplog.text


def test_many_damaged_jpegs_are_all_listed_and_the_first_few_named(sources, images, tmp_path, caplog, monkeypatch):
    import prepare.scatter as scatter

    monkeypatch.setattr(scatter, "DAMAGED_NAMED", 2)
    caplog.set_level(logging.INFO, logger="prepare")
    source, keys, _ = damaged_val_source(sources, images, tmp_path, count=4)
    dest = tmp_path / "out"
    prepare(config(source, dest, workers=2))
    assert read_manifest(dest).damaged == {key: PREMATURE_END for key in keys}
    damaged_lines = [m for m in warnings_in(caplog) if "damaged JPEG" in m]
    assert len(damaged_lines) == 3
    assert all(f":{key}.JPEG: libjpeg says" in m for m, key in zip(damaged_lines[:2], keys))
    assert damaged_lines[2:] == ["more damaged JPEGs: the log names no more of them (3 so far); the manifest lists "
                                 "every one and the summary counts them"]
    assert "stored 4 with damaged JPEG data as they are" in caplog.text


def test_not_enough_space_is_refused_before_writing(sources, tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount]).returncode:
        pytest.skip("needs root and mount to make a small filesystem (CI runs as root)")
    try:
        with pytest.raises(PrepareError, match=r"has 0.00 GB free; the dataset \(estimated from the source\) needs "
                                               r"about .* GB more"):
            prepare(config(sources["official"], mount / "imagenet"))
        assert not any((mount / "imagenet" / "train").iterdir())
    finally:
        subprocess.run(["umount", mount], check=True)


def test_a_dest_full_or_read_only_at_the_lock_is_refused_in_one_line(sources, prepared, tmp_path, caplog):
    """The lock is prepare's first write: a --dest whose disk another job filled, or a copy of a complete
    dataset on a file system mounted read-only, is one line naming the lock file and why, exit status 2."""
    from prepare.cli import main

    mount = tmp_path / "small"
    reason = small_tmpfs(mount, 4)
    if reason:
        pytest.skip(reason)
    try:
        dest = copy_dataset(prepared, mount / "imagenet")
        (dest / ".prepare.lock").unlink(missing_ok=True)  # the copy's: the lock is made anew on the full disk
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'other-job.bin'}", "bs=1M"], capture_output=True)
        args = ["--source", str(sources["official"]), "--dest", str(dest), "--shard-size", str(SHARD_MB)]
        for why in ("No space left on device", "Read-only file system"):
            if why.startswith("Read-only"):
                subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
            caplog.clear()
            assert main(args) == 2
            errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            assert errors == [f"cannot write the lock file {dest / '.prepare.lock'} ({why}): its folder must be "
                              "writable by this user, with free space"], errors
    finally:  # (lazily where busy: a descriptor of the lock left open would keep it so)
        subprocess.run(["umount", mount]).returncode == 0 or subprocess.run(["umount", "-l", mount], check=True)


@pytest.mark.slow
def test_dest_defaults_to_slurm_tmpdir_and_is_required_without_it(sources, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SLURM_TMPDIR"}
    result = subprocess.run([sys.executable, "-m", "prepare", "--source", str(sources["official"])], cwd=ROOT,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 2 and "--dest is required outside a SLURM job" in result.stderr
    result = run_module("prepare", "--source", sources["official"], "--shard-size", SHARD_MB,
                        env={"SLURM_TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    read_complete_manifest(tmp_path / "imagenet")


def test_dest_inside_the_source_and_foreign_files_are_refused(sources, tmp_path):
    with pytest.raises(PrepareError, match="inside --source"):
        prepare(config(sources["official"], sources["official"] / "out"))
    dest = tmp_path / "imagenet"
    (dest / "train").mkdir(parents=True)
    (dest / "train" / "thesis.pdf").write_bytes(b"precious")
    with pytest.raises(PrepareError, match="holds files prepare did not write"):
        prepare(config(sources["official"], dest))
    assert (dest / "train" / "thesis.pdf").read_bytes() == b"precious"


def rewrite_with_extra_members(source: Path, names: list[str], link: bool = False) -> None:
    """Add members named `names` (copies of the first image) to the first class tar, and a
    symlink member to /etc/passwd if `link`."""
    def add(members):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for member, body in members + [(name, members[0][1]) for name in names]:
                info = tarfile.TarInfo(member)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
            if link:
                info = tarfile.TarInfo("link.JPEG")
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
        return out.getvalue()

    rewrite_class_tar(source, add)


@pytest.mark.parametrize("name", ["../../../escaped.JPEG", "/abs/escaped.JPEG"])
def test_unsafe_member_names_are_refused_by_name_and_never_become_paths(sources, tmp_path, name):
    source = copy_official(sources, tmp_path)
    rewrite_with_extra_members(source, [name])
    before = set(tmp_path.parent.rglob("*"))
    dest = tmp_path / "out"
    with pytest.raises(SourceError, match=f"member name {re.escape(repr(name))} is unsafe .* and was refused"):
        prepare(config(source, dest, workers=2))
    created = set(tmp_path.parent.rglob("*")) - before
    assert all(dest in p.parents or p == dest for p in created), [p for p in created if dest not in p.parents]
    assert not (dest / "manifest.json").exists()


def test_links_in_archives_are_ignored(sources, tmp_path):
    source = copy_official(sources, tmp_path)
    rewrite_with_extra_members(source, [], link=True)
    dest = tmp_path / "out"
    prepare(config(source, dest))
    assert "link" not in {k for k, _, _ in read_split(dest, "train")}


def test_imagefolder_with_flat_val_reads_labels_from_the_devkit(sources, images, tmp_path):
    source = tmp_path / "tree"
    shutil.copytree(sources["imagefolder"] / "train", source / "train")
    (source / "val").mkdir()
    for path in (sources["imagefolder"] / "val").glob("*/*.JPEG"):
        shutil.copy(path, source / "val" / path.name)
    with pytest.raises(SourceError, match="put ILSVRC2012_devkit_t12.tar.gz in"):
        prepare(config(source, tmp_path / "out"))
    shutil.copy(sources["official"] / "ILSVRC2012_devkit_t12.tar.gz", source)
    prepare(config(source, tmp_path / "out"))
    truth = expected_labels(images)
    assert all(label == truth[key] for key, _, label in read_split(tmp_path / "out", "val"))


def test_an_empty_class_folder_where_the_folders_are_the_classes_is_refused(sources, images, tmp_path):
    """Nothing lists the classes (no devkit, no mapping, not ImageNet-1k's): the train folders are the class
    table, so a <wnid>/ folder without images (a copy cut short) would leave its class out and shift every
    later class's label, where torchvision's ImageFolder refuses the tree. An empty val/<wnid>/ changes no label."""
    source = tmp_path / "tree"
    shutil.copytree(sources["imagefolder"], source)
    wnids = sorted(path.name for path in (source / "train").iterdir())
    empty = wnids[0][:-1] + ("1" if wnids[0][-1] == "0" else "0")  # sorts first: every label would shift
    (source / "val" / empty).mkdir()
    (source / "train" / empty).mkdir()
    (source / "train" / empty / "._n01440764_1.JPEG").write_bytes(b"macOS's metadata, not an image")
    with pytest.raises(SourceError, match=f"train/{empty}/ holds no images: its class would be left out of the class "
                                          "table, shifting the labels of the classes after it"):
        prepare(config(source, tmp_path / "out"))
    (source / "train" / empty / "._n01440764_1.JPEG").unlink()
    (source / "train" / empty).rmdir()
    prepare(config(source, tmp_path / "out"))
    assert [c.wnid for c in read_manifest(tmp_path / "out").classes] == wnids


def test_hidden_files_in_a_tree_are_not_images_and_a_link_to_nothing_is_named(sources, tmp_path):
    """macOS's AppleDouble `._NAME` beside every file of a tree copied from a Mac: left out (they refused the
    tree, their names being no sample key); an image's link whose target is gone: named (left out before)."""
    source = tmp_path / "tree"
    shutil.copytree(sources["imagefolder"], source)
    for image in sorted(source.glob("*/*/*.JPEG")):
        (image.parent / f"._{image.name}").write_bytes(b"\0\5\26\7" + bytes(78))
    prepare(config(source, tmp_path / "out"))
    prepare(config(sources["imagefolder"], tmp_path / "plain"))
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "plain")
    link = next((source / "train").iterdir()) / "n00000000_1.JPEG"
    link.symlink_to(tmp_path / "moved" / "n00000000_1.JPEG")
    with pytest.raises(SourceError, match=f"{link} is a link to .*moved/n00000000_1.JPEG, which is not there"):
        prepare(config(source, tmp_path / "again"))


def test_kaggles_image_folder_given_as_the_source_is_told_the_folder_to_pass(sources, tmp_path):
    inner = sources["kaggle"] / "ILSVRC" / "Data" / "CLS-LOC"
    with pytest.raises(SourceError, match=f"{inner} is the image folder of Kaggle's download, whose val labels are in "
                                          f".*LOC_val_solution.csv: pass --source {sources['kaggle']}$"):
        prepare(config(inner, tmp_path / "out"))


def test_kaggle_val_without_a_label_is_an_error(sources, tmp_path):
    source = tmp_path / "kaggle"
    shutil.copytree(sources["kaggle"], source)
    csv = source / "LOC_val_solution.csv"
    csv.write_text("\n".join(csv.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(LabelError, match="no label for ILSVRC2012_val_.* in LOC_val_solution.csv"):
        prepare(config(source, tmp_path / "out"))


def test_resize_caps_the_longer_side(sources, tmp_path):
    dest = tmp_path / "small"
    prepare(config(sources["official"], dest, resize=64, quality=80))
    for key, image, _ in read_split(dest, "val"):
        assert max(image.size) == 64
    assert read_manifest(dest).options["resize"] == 64


def test_manifest_records_counts_and_speed(prepared, images):
    stats = read_manifest(prepared).stats
    assert stats["samples"] == len(images.train) + len(images.val)
    assert stats["images_per_sec"] > 0 and stats["mb_per_sec"] > 0 and stats["source_bytes"] > 0


def test_the_last_progress_line_of_a_read_says_100_percent(sources, tmp_path, capsys):
    """Image bytes are counted against the archive's size, which also holds tar headers and padding."""
    prepare(config(sources["official"], tmp_path / "out", progress_interval=3600))
    err = capsys.readouterr().err
    for split in ("train", "val"):
        last = [line for line in err.splitlines() if line.startswith(f"{split}: read")][-1]
        assert "(100%)" in last, last


# ---------------------------------------------------------------- checksums, --verify, full disks, failing workers

def test_the_manifest_records_each_shards_sha256_as_sha256sum_computes_it(prepared):
    shards = [s for split in ("train", "val") for s in read_manifest(prepared).splits[split].shards]
    listing = subprocess.run(["sha256sum", *[prepared / s.name for s in shards]], capture_output=True, text=True,
                             check=True).stdout.split()
    assert [s.sha256 for s in shards] == listing[::2]


def flip_bytes(path: Path, count: int = 2000) -> None:
    """Invert `count` bytes in the middle of a file, in place: its size stays the same."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_verify_finds_a_damaged_shard_by_name_and_rebuilds_the_same_bytes(sources, tmp_path, caplog):
    dest = tmp_path / "imagenet"
    args = ["prepare", "--source", sources["official"], "--dest", dest, "--shard-size", SHARD_MB]
    assert run_module(*args).returncode == 0
    before = tree_bytes(dest)
    victim = read_manifest(dest).splits["train"].shards[1].name
    flip_bytes(dest / victim)
    quick = run_module(*args)  # sizes only: the damage goes unseen
    assert quick.returncode == 0 and "present at their sizes" in quick.stderr
    verified = run_module(*args, "--verify")
    assert verified.returncode == 0, verified.stderr
    assert f"damaged: {victim} fails its checksum" in verified.stderr
    assert "rebuilt: every shard has the bytes its checksum recorded" in verified.stderr
    assert tree_bytes(dest) == before
    again = run_module(*args, "--verify")
    assert "verified by checksum" in again.stderr and re.search(r"verified \d+ files, .* GB/s", again.stderr)


def test_verify_needs_checksums(sources, tmp_path):
    dest = tmp_path / "imagenet"
    prepare(config(sources["official"], dest))
    manifest = json.loads((dest / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            shard.pop("sha256")  # as datasets made before checksums
    (dest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PrepareError, match="prepared before shards had checksums.*--force"):
        prepare(config(sources["official"], dest, verify=True))
    prepare(config(sources["official"], dest))  # without --verify it is still complete


def test_the_space_estimate_counts_the_tar_overhead(prepared):
    from shards.format import tar_bytes

    manifest = read_manifest(prepared)
    for split in ("train", "val"):
        stored = read_split_bytes(prepared, split)
        actual = manifest.splits[split].bytes
        estimate = tar_bytes(sum(stored), len(stored), len(manifest.splits[split].shards))
        assert abs(estimate - actual) < 0.05 * actual, (split, estimate, actual)
        assert actual > 1.3 * sum(stored)  # small images: the headers and padding are a third and more


def read_split_bytes(dest: Path, split: str) -> list[int]:
    urls = [str(dest / s.name) for s in read_manifest(dest).splits[split].shards]
    return [len(s["jpg"]) for s in wds.WebDataset(urls, shardshuffle=False)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_failing_on_an_image_is_one_line_naming_it(sources, tmp_path, monkeypatch, workers):
    import prepare.scatter as scatter

    real = scatter.prepare_image

    def fails_on_one(data, *args, **kwargs):
        if data.startswith(b"\xff\xd8") and len(data) % 7 == 3:
            raise RuntimeError("something unexpected")
        return real(data, *args, **kwargs)

    monkeypatch.setattr(scatter, "prepare_image", fails_on_one)  # before the pool forks: the workers have it
    dest = tmp_path / "out"
    with pytest.raises(PrepareError, match=r"ILSVRC2012_img_\w+\.tar:.*\.JPEG: RuntimeError: something unexpected "
                                           r"\(a worker failed there\)"):
        prepare(config(sources["official"], dest, workers=workers))
    assert not (dest / ".prepare-tmp").exists() and not any((dest / "train").iterdir())


def test_a_worker_killed_outright_is_one_line_not_a_hang(sources, tmp_path, monkeypatch):
    """The out-of-memory killer, say: multiprocessing.Pool would wait for the lost task for ever."""
    import prepare.scatter as scatter
    from prepare.workers import WorkerDied

    real = scatter.prepare_image

    def killed_on_one(data, *args, **kwargs):
        if data.startswith(b"\xff\xd8") and len(data) % 7 == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(scatter, "prepare_image", killed_on_one)  # before the pool forks: the workers have it
    dest = tmp_path / "out"
    with pytest.raises(WorkerDied, match="a prepare worker process died mid-task"):
        prepare(config(sources["official"], dest, workers=2))
    assert not (dest / ".prepare-tmp").exists() and not any((dest / "train").iterdir())


def test_a_worker_killed_while_idle_is_one_line_at_the_next_submit(sources, tmp_path, monkeypatch):
    """The out-of-memory killer picks a worker while it waits between tasks (the main process dealing a split's keys
    into shards): the pool is broken before the shard jobs are submitted, and the submit's BrokenProcessPool is the
    one line a death mid-task is, the run cleaned up; it was a traceback."""
    import multiprocessing

    import prepare.builder as builder
    from prepare.workers import WorkerDied

    real = builder.deal_into_shards

    def a_worker_killed_first(buckets, seed):
        worker = multiprocessing.active_children()[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(10)
        time.sleep(0.5)  # the pool's manager thread marks it broken
        return real(buckets, seed)

    monkeypatch.setattr(builder, "deal_into_shards", a_worker_killed_first)
    dest = tmp_path / "out"
    with pytest.raises(WorkerDied, match="a prepare worker process died"):
        prepare(config(sources["official"], dest, workers=2))
    assert not (dest / ".prepare-tmp").exists() and not any((dest / "val").iterdir())


def test_a_worker_the_node_refuses_to_fork_is_one_line_and_no_hang(sources, tmp_path, monkeypatch):
    """A limit on the job's processes (ulimit -u, a cgroup's pids.max) or strict overcommit refuses the third
    fork with EAGAIN: one line saying to use fewer --workers, the two workers forked before it ended. It was a
    traceback, then a hang at the interpreter's exit, which waited for those two (seen under a pids cgroup)."""
    import multiprocessing

    real_fork, forks = os.fork, []

    def refused_third(*args):
        forks.append(1)
        if len(forks) == 3:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real_fork(*args)

    monkeypatch.setattr(os, "fork", refused_third)
    dest = tmp_path / "out"
    with pytest.raises(PrepareError, match=r"^cannot start 4 prepare worker processes \(Resource temporarily "
                                           r"unavailable\): .* Rerun with fewer --workers$"):
        prepare(config(sources["official"], dest, workers=4))
    assert multiprocessing.active_children() == []
    assert not (dest / ".prepare-tmp").exists() and not any((dest / "train").iterdir())


def small_tmpfs(path: Path, megabytes: int, inodes: int | None = None):
    """Mount a tmpfs of `megabytes` (and at most `inodes` files and folders) at `path` (root only); the reason when
    it cannot be done."""
    path.mkdir(parents=True)
    if os.geteuid() != 0:
        return "needs root to mount a small file system"
    options = f"size={megabytes}m" + (f",nr_inodes={inodes}" if inodes else "")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path],
                            capture_output=True, text=True)
    return result.stderr.strip() or "mount failed" if result.returncode else None


@contextmanager
def a_small_disk(path: Path, megabytes: int, inodes: int | None = None):
    """A real tmpfs of `megabytes` (and `inodes`) at `path` for the test's body (skipped where none can be mounted),
    unmounted after it, lazily where something still holds it."""
    reason = small_tmpfs(path, megabytes, inodes)
    if reason:
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", path]).returncode == 0 or subprocess.run(["umount", "-l", path], check=True)


def fill(mount: Path, block: str = "64k") -> None:
    """Another job fills what is left of the file system at `mount`."""
    subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'other-job.bin'}", f"bs={block}"], capture_output=True)


def fill_while_paused(proc: subprocess.Popen, mount: Path) -> None:
    """Another job fills what is left of the file system at `mount` while `proc` (started in a
    session of its own) and its workers stand still: on a fast machine a small prepare finishes
    its writes within the few milliseconds `dd` takes to start and fill, and the disk must be full
    while there is still something to write."""
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'other-job.bin'}", "bs=1M"], capture_output=True)
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["spilling", "writing shards"])
def test_a_disk_filled_by_another_job_stops_prepare_in_one_line_and_leaves_nothing(tmp_path, when):
    source = tmp_path / "source"
    write_sample(source, "official", SampleSpec(classes=6, train_per_class=120, val_per_class=20, max_width=320))
    mount = tmp_path / "local"
    reason = small_tmpfs(mount, 80)
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the full-disk test, but: {reason}")
        pytest.skip(reason)
    try:
        dest = mount / "imagenet"
        proc = subprocess.Popen([sys.executable, "-m", "prepare", "--source", str(source), "--dest", str(dest),
                                 "--shard-size", "1", "--workers", "1"], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        started = (lambda: any((dest / ".prepare-tmp" / "train").glob("bucket-*"))) if when == "spilling" else \
            (lambda: any((dest / "train").glob("*.tar")))
        deadline = time.monotonic() + 120
        while not started() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        fill_while_paused(proc, mount)
        stderr = proc.communicate(timeout=120)[1]
        assert proc.returncode == 2, stderr
        errors = [line for line in stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and f"{dest} ran out of space while" in errors[0], stderr
        assert "GB free at the start" in errors[0] and "--resize" in errors[0]
        assert "Traceback" not in stderr
        left = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
        assert left == [".prepare.lock", ".readers.lock", "train", "val"], left
    finally:
        subprocess.run(["umount", mount], check=True)


def test_every_image_prepare_cannot_use_is_a_bad_image_with_the_reason():
    """PIL raises many exception types on hostile bytes (its plugins' own): each is a BadImage, the
    image named by the caller, never a worker's traceback."""
    from jpegs import bmp_claiming, jpeg, png_claiming, with_size
    from prepare.images import BadImage, prepare_image

    cases = {b"not an image": "does not decode", png_claiming(30000, 8000): "DecompressionBombError",
             bmp_claiming(30000, 8000): "DecompressionBombError", png_claiming(9000, 9000): "more than the limit",
             png_claiming(64, 48): "does not decode", with_size(jpeg(), 8200, 8200): "more than the limit",
             jpeg()[:300]: "does not decode"}
    for data, reason in cases.items():
        with pytest.raises(BadImage, match=reason):
            prepare_image(data)
    assert prepare_image(jpeg(), max_pixels=333 * 217, restart_mcus=0).data is None  # at the limit: kept as it is
    assert prepare_image(jpeg(), max_pixels=333 * 217).restart_interval == 1  # and made seekable
    with pytest.raises(BadImage, match="333 x 217 pixels"):
        prepare_image(jpeg(), max_pixels=333 * 217 - 1)


def random_samples(rng, count: int) -> list[dict]:
    """Samples as prepare writes them, with the odd cases: empty and block-sized data, names that
    need a pax header (long, non-ASCII)."""
    samples = []
    for i in range(count):
        size = rng.choice([0, 1, 511, 512, 513, 1024, int(rng.integers(0, 200_000))])
        key = rng.choice([f"n01440764_{i}", "k" * int(rng.integers(90, 110)) + str(i), f"clé_{i}", f"ILSVRC2012_val_{i:08d}"])
        samples.append({"__key__": key, "jpg": rng.bytes(size), "cls": str(int(rng.integers(1000))).encode(),
                        "json": b'{"height": 375, "width": 500, "wnid": "n01440764"}'})
    return samples


def test_the_shard_writer_writes_webdatasets_bytes():
    """ShardTarWriter's shards are byte for byte webdataset's TarWriter(encoder=False, mtime=0)
    on a tarfile stream, and their SHA-256 the digest of those bytes, whatever the flush size."""
    import hashlib

    from shards.format import ShardTarWriter

    rng = np.random.default_rng(0)
    for trial in range(20):
        samples = random_samples(rng, int(rng.integers(0, 40)))
        expected = io.BytesIO()
        with wds.TarWriter(expected, encoder=False, mtime=0) as writer:
            for sample in samples:
                writer.write(sample)
        got = io.BytesIO()
        writer = ShardTarWriter(got)
        writer.FLUSH = [1, 4096, 1 << 20][trial % 3]
        for sample in samples:
            writer.write(sample)
        writer.close()
        assert got.getvalue() == expected.getvalue()
        assert writer.digest.hexdigest() == hashlib.sha256(expected.getvalue()).hexdigest()


def tarfile_stream_members(data: bytes) -> list[tuple[str, bytes]] | str:
    """What webdataset's tar reader yields of a tar (tarfile's "r|*" stream, regular files, top-level
    __*__ names left out), or "refused" where tarfile raises."""
    out = []
    try:
        stream = tarfile.open(fileobj=io.BytesIO(data), mode="r|*")
        for info in stream:
            if info.isreg() and not ("/" not in info.name and info.name.startswith("__") and info.name.endswith("__")):
                out.append((info.name, stream.extractfile(info).read()))
    except (tarfile.TarError, OSError, EOFError):
        return "refused"
    return out


def test_plain_tars_are_sliced_and_others_read_by_tarfile_alike():
    """iterate_tar's slicing of plain tars yields what tarfile's stream reader (webdataset's) yields,
    and every tar it does not take (links, directories, long names, damaged or truncated headers)
    goes to tarfile; where tarfile's stream would end early and silently at a damaged header,
    iterate_tar refuses the tar instead."""
    from prepare.sources.tars import iterate_tar, plain_tar_members

    rng = np.random.default_rng(1)

    def read(data):
        try:
            return list(iterate_tar(data, "x"))
        except SourceError:
            return "refused"

    def same(data: bytes) -> bool:
        assert read(data) == tarfile_stream_members(data)
        return plain_tar_members(data) is not None

    def tar_of(kinds, fmt) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
            for i, kind in enumerate(kinds):
                info = tarfile.TarInfo({"file": f"n01440764_{i}.JPEG", "meta": "__meta__", "long": "a" * 120 + ".JPEG",
                                        "dir": f"d{i}", "symlink": f"s{i}.JPEG", "link": f"l{i}.JPEG"}[kind])
                data = rng.bytes(int(rng.choice([0, 1, 512, 700, 5000]))) if kind in ("file", "meta", "long") else b""
                info.size = len(data)
                if kind in ("dir", "symlink", "link"):
                    info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "link": tarfile.LNKTYPE}[kind]
                    info.linkname = "../../etc/passwd" if kind == "symlink" else "n01440764_0.JPEG"
                if fmt == tarfile.USTAR_FORMAT and kind == "long":
                    continue  # too long for ustar
                tar.addfile(info, io.BytesIO(data))
        return out.getvalue()

    plain = tar_of(["file"] * 5 + ["meta"], tarfile.GNU_FORMAT)
    assert same(plain)
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        for odd in ("dir", "symlink", "link", "long"):
            same(tar_of(["file", odd, "file"], fmt))
    members = plain_tar_members(plain)
    whole = tarfile_stream_members(plain)
    refused = 0
    for _ in range(300):  # one byte of a header changed, the tar cut short, junk after its end
        data = bytearray(plain)
        cut = int(rng.integers(3))
        if cut == 0:
            header = members[int(rng.integers(len(members)))][1] - 512
            data[header + int(rng.integers(512))] = int(rng.choice([0, 32, 48, 55, 56, 95, 120, 128, 255]))
        elif cut == 1:
            data = data[:int(rng.integers(len(data) + 1))]
        else:
            data += rng.bytes(int(rng.integers(1, 2000)))
        ours, theirs = read(bytes(data)), tarfile_stream_members(bytes(data))
        if ours == "refused":
            refused += theirs != "refused"
        else:  # what it takes, it reads as tarfile does, and whole: no member is lost
            assert ours == theirs and len(ours) == len(whole)
    assert refused > 10  # tars tarfile would end early, silently
    for data in (b"", bytes(1024), b"\x1f\x8b\x08" + bytes(1021)):
        assert not same(data)


def test_junk_after_a_tars_end_is_left_alone_as_tarfile_leaves_it_but_a_member_there_is_refused():
    from prepare.sources.tars import iterate_tar

    whole = tar_bytes([(f"n01440764_{i}.JPEG", bytes([i + 1]) * 700) for i in range(2)])
    junk = np.random.default_rng(0).bytes(50_000)
    assert [name for name, _ in iterate_tar(whole + junk, "x")] == ["n01440764_0.JPEG", "n01440764_1.JPEG"]
    assert tarfile_stream_members(whole + junk) == list(iterate_tar(whole + junk, "x"))
    with pytest.raises(SourceError, match="members follow what would be its end"):
        list(iterate_tar(whole + whole, "x"))  # a member after the end blocks: a header lost between


def test_a_header_zeroed_in_the_middle_of_a_tar_is_refused_not_read_as_its_end():
    """tarfile's stream reader takes a zero block for the end of the archive and stops there; the
    members after it would be lost without a word."""
    from prepare.sources.tars import iterate_tar, plain_tar_members

    data = bytearray(tar_bytes([(f"n01440764_{i}.JPEG", bytes([i + 1]) * 700) for i in range(4)]))
    third = plain_tar_members(bytes(data))[2][1] - 512
    data[third:third + 512] = bytes(512)
    assert len(tarfile_stream_members(bytes(data))) == 2  # silently short
    with pytest.raises(SourceError, match="damaged tar header at byte 3072"):
        list(iterate_tar(bytes(data), "n01440764.tar"))


def test_an_image_name_longer_than_a_shard_key_can_be_is_refused_by_name():
    """A key of more than MAX_KEY_LENGTH characters would need a pax header in the shard, which the
    reader's native index does not read: refused at the source, not found damaged at training."""
    from prepare.sources.base import image_key
    from shards.format import MAX_KEY_LENGTH

    assert image_key("a" * MAX_KEY_LENGTH + ".JPEG", "x") == "a" * MAX_KEY_LENGTH
    with pytest.raises(SourceError, match=f"longer than {MAX_KEY_LENGTH} characters"):
        image_key("n01440764/" + "a" * (MAX_KEY_LENGTH + 1) + ".JPEG", "train.tar:n01440764.tar")


@pytest.mark.slow
def test_a_dataset_too_big_for_the_disk_is_refused_naming_the_resize_that_fits(tmp_path):
    """On a real small file system: the full-size shards do not fit, and the refusal names the largest
    --resize whose shards do (from a sample prepared at each size); with it, prepare fits and runs."""
    source = tmp_path / "source"
    make_sample(source, "official", SampleSpec(classes=6, train_per_class=60, val_per_class=5, max_width=500))
    mount = tmp_path / "local"
    reason = small_tmpfs(mount, 36)  # MB: the full-size need is about 45 (16 of them prepare's margin)
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the full-disk test, but: {reason}")
        pytest.skip(reason)
    try:
        with pytest.raises(PrepareError, match=r"the dataset \(estimated from the source\) needs about .* GB more .*"
                                               r"--resize (\d+) fits: about .* GB \(estimated from 48 of its images") as no:
            prepare(config(source, mount / "imagenet", workers=1))
        assert not any((mount / "imagenet" / "train").iterdir())
        size = int(re.search(r"--resize (\d+) fits", str(no.value)).group(1))
        assert size < 500
        manifest = prepare(config(source, mount / "imagenet", workers=1, resize=size))
        assert manifest.splits["train"].samples == 360
    finally:
        subprocess.run(["umount", mount], check=True)


@pytest.mark.slow
def test_a_file_system_out_of_files_is_said_so_with_what_helps(sources, tmp_path):
    """A tmpfs (or a quota) that runs out of inodes with bytes to spare: "ran out of space ... shrink the images
    with --resize" sent the user the wrong way; the shards and spill files are what take the files."""
    with a_small_disk(tmp_path / "local", 200, inodes=120) as mount:
        with pytest.raises(PrepareError, match=r"ran out of files \(inodes: its file system holds at most 120\) "
                                               r"while .* GB free now\. What this run wrote is removed\. Give a "
                                               r"larger --shard-size"):
            prepare(config(sources["official"], mount / "imagenet", shard_size_mb=0.02, workers=2))
        assert [path.name for path in mount.iterdir()] in ([], ["imagenet"])
        locks = (".prepare.lock", ".readers.lock")
        assert not [path for path in mount.rglob("*") if path.is_file() and path.name not in locks]


@pytest.mark.slow  # three prepares on a small disk (1.1 s)
def test_a_force_that_cannot_fit_is_refused_before_the_dataset_it_replaces_is_removed(tmp_path):
    """A dataset prepared at --resize 32 on a small disk, then --force at full size, which does not fit even with
    it gone: refused in one line, the dataset there kept whole (it was removed first, then the build refused:
    neither dataset was left); a --force at a size that fits replaces it."""
    source = tmp_path / "source"
    make_sample(source, "official", SampleSpec(classes=4, train_per_class=40, val_per_class=5, max_width=320))
    with a_small_disk(tmp_path / "local", 21) as mount:  # MB: --resize 32 needs about 18, full size about 24.5
        dest = mount / "imagenet"
        prepare(config(source, dest, resize=32))
        before = {**tree_bytes(dest), "manifest.json": (dest / "manifest.json").read_bytes()}
        with pytest.raises(PrepareError, match=r"GB free \(counting the 0.00 GB the build would replace, kept\); the "
                                               r"dataset \(estimated from the source\) needs about 0.02 GB more"):
            prepare(config(source, dest, force=True))
        assert {**tree_bytes(dest), "manifest.json": (dest / "manifest.json").read_bytes()} == before
        prepare(config(source, dest, force=True, resize=64))
        assert read_complete_manifest(dest).options["resize"] == 64


def test_the_disk_a_split_needs_counts_shards_in_flight_at_most_the_splits_own():
    """--shard-size 100000 (one shard a split) on 16 workers was refused for 3.2 TB of disk for ImageNet's 145 GB,
    and 1e308 overflowed in the estimate (a traceback): a worker's shard is at most the split."""
    from prepare.space import space_needed
    from shards.resources import MB

    small = space_needed(145 * 10 ** 9, 1_281_167, 200 * MB, 16)
    assert space_needed(145 * 10 ** 9, 1_281_167, 100_000 * MB, 16) < 2.1 * small
    assert space_needed(145 * 10 ** 9, 1_281_167, 1e308, 16) < 2.1 * small
    assert space_needed(0, 1000, 1e308, 16, 10 ** 6) < 10 ** 7  # the shards' images counted apart from the spills


@pytest.mark.slow
def test_a_shard_size_past_the_source_prepares_one_shard_a_split(sources, tmp_path):
    from prepare.cli import main

    assert main(["--source", str(sources["official"]), "--dest", str(tmp_path / "imagenet"), "--shard-size", "1e308",
                 "--workers", "2"]) == 0
    assert {split: len(info.shards) for split, info in read_manifest(tmp_path / "imagenet").splits.items()} == \
        {"train": 1, "val": 1}


@pytest.mark.slow
@pytest.mark.parametrize("size", ["1e-300", "1e-320", "0.00001"])
def test_a_shard_size_of_far_more_shards_than_images_is_refused_in_one_line_naming_the_least(sources, tmp_path, caplog,
                                                                                              size):
    """1e-300 made 1e300 spill buckets, a MemoryError (1e-320 an OverflowError), after the checks: refused before
    the source is read, naming a size that works. (The full releases' small samples, whose count is estimated from a
    typical image's bytes, prepare at 0.02 MB: tests/test_large_sources.py.)"""
    from prepare.cli import main

    dest = tmp_path / "imagenet"
    assert main(["--source", str(sources["official"]), "--dest", str(dest), "--shard-size", size]) == 2
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(said) == 1 and re.fullmatch(r"--shard-size \S+ makes \S+ shards of the (train|val) split's [\d,]+ "
                                           r"images \(about\), over 100 an image: give --shard-size (\S+) "
                                           r"\(MB, its average image\) or more", said[0]), said
    least = re.search(r"give --shard-size (\S+)", said[0]).group(1)
    assert main(["--source", str(sources["official"]), "--dest", str(dest), "--shard-size", least]) == 0


@pytest.mark.parametrize("interval", ["nan", "inf", "-1"])
def test_a_progress_interval_that_is_no_finite_number_of_0_or_more_is_refused_in_one_line(sources, tmp_path, capsys,
                                                                                        interval):
    """NaN printed no progress line at all, silently; -1 one at every update."""
    from prepare.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--source", str(sources["official"]), "--dest", str(tmp_path / "imagenet"), "--progress-interval",
              interval])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("python -m prepare: error: --progress-interval must be a "
                                                        f"finite number of seconds, 0 or more, not {float(interval)}")


def test_a_group_timeout_past_what_gloo_takes_is_refused_in_one_line(sources, tmp_path, capsys):
    """On several nodes 1e14 s failed gloo's check of its timeout and 1e308 timedelta's: a traceback."""
    from prepare.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--source", str(sources["official"]), "--dest", str(tmp_path / "imagenet"), "--group-timeout", "1e14"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "python -m prepare: error: --group-timeout must be at most 1e+09 s (31 years), not 1e+14"


@pytest.mark.parametrize("option,value", [("--shard-size", "nan"), ("--shard-size", "inf"), ("--group-timeout", "inf"),
                                          ("--group-timeout", "nan"), ("--shard-size", "0")])
def test_a_shard_size_or_group_timeout_that_is_no_positive_finite_number_is_refused_in_one_line(
        sources, tmp_path, capsys, option, value):
    """NaN passed the check `<= 0` and ended in a traceback (the shard count: ValueError, OverflowError for inf); an
    infinite --group-timeout reached the rendezvous on several nodes, whose OverflowError was told as a node that
    never arrived."""
    from prepare.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--source", str(sources["official"]), "--dest", str(tmp_path / "imagenet"), option, value])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "python -m prepare: error: --shard-size, --workers and --group-timeout must be positive (and finite)"
    assert not (tmp_path / "imagenet").exists()
