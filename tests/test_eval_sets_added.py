"""Evaluation sets added to a prepared dataset: only what is added is prepared (train and val, the
hours of a real ImageNet, stay untouched), the result is the one-shot prepare's, a kill at any moment
leaves the old dataset or the new one, and what is not an addition is refused as before."""

from __future__ import annotations

import errno
import json
import logging
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, config, copy_dataset, tree_bytes
from prepare.builder import prepare
from prepare.config import PrepareError
from prepare.eval_sets import EvalAddition, EvalSetError, PreparedDataset, eval_addition
from shards.paths import REAL_LABELS_FILE
from shards.manifest import read_complete_manifest, read_manifest
import test_eval_sets
from test_eval_sets import V2_NAME, gzip_tar_of

eval_dataset = test_eval_sets.eval_dataset  # the fixture: the one-shot prepare with v2 and ReaL

TOP_NAME = "imagenetv2-top-images-format-val"


def kept_files(dest: Path) -> dict[str, tuple[int, int, bytes]]:
    """train's and val's files as the file system has them: an addition must not rewrite or touch them."""
    return {str(p.relative_to(dest)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
            for split in ("train", "val") for p in sorted((dest / split).iterdir())}


def split_bytes(dest: Path, split: str) -> dict[str, bytes]:
    return {name: data for name, data in tree_bytes(dest).items() if name.startswith(f"{split}/")}


def without_stats(dest: Path) -> dict:
    return {k: v for k, v in json.loads((dest / "manifest.json").read_text()).items() if k != "stats"}


@pytest.fixture
def plain(prepared, tmp_path) -> Path:
    """A copy of the sample prepared without evaluation sets."""
    return copy_dataset(prepared, tmp_path / "imagenet")


@pytest.fixture(scope="module")
def top(eval_dataset, tmp_path_factory) -> Path:
    """A second ImageNetV2 variant (the first's images, under the top-images name)."""
    return Path(shutil.copytree(eval_dataset[2], tmp_path_factory.mktemp("top") / TOP_NAME))


# ---------------------------------------------------------------- what is an addition (pure)

V2 = {"path": "/d/v2", "variant": "matched-frequency"}
TOP = {"path": "/d/top", "variant": "top-images"}
REAL = {"path": "/d/real.json", "sha256": "ab"}


def identity(eval_sets=(), real=None, seed=0) -> dict:
    source = {"path": "/imagenet", "layout": "official", "files": []}
    source |= {"eval_sets": list(eval_sets)} if eval_sets else {}
    source |= {"real_labels": real} if real else {}
    return {"source": source, "options": {"seed": seed}}


@pytest.mark.parametrize("old,new,expected", [
    (identity(), identity([V2]), EvalAddition(("v2",), False)),
    (identity(), identity(real=REAL), EvalAddition((), True)),
    (identity([V2]), identity([V2, TOP], REAL), EvalAddition(("v2-top-images",), True)),
    (identity([V2], REAL), identity([V2], REAL), None),  # nothing added: the same dataset
    (identity([V2]), identity(), None),  # removed
    (identity([V2]), identity([TOP]), None),  # one removed, one added
    (identity([V2]), identity([{**V2, "path": "/e/v2"}, TOP]), None),  # the same variant from another path
    (identity([{**V2, "size": 1}]), identity([{**V2, "size": 2}, TOP]), None),  # ... with other bytes
    (identity(real=REAL), identity([V2], {**REAL, "sha256": "cd"}), None),  # another real.json
    (identity(), identity([V2], seed=1), None),  # other options
])
def test_only_evaluation_sets_added_to_the_same_train_and_val_are_an_addition(old, new, expected):
    assert eval_addition(old, new) == expected


def test_the_val_keys_are_read_from_the_val_shards_with_the_official_ones_left_out(prepared, images):
    manifest = read_manifest(prepared)
    manifest.skipped = {"ILSVRC2012_val_00000099": "does not decode", "n01440764_1": "does not decode"}
    assert PreparedDataset(prepared, manifest).val_keys() == {key for key, _, _ in images.val} | {
        "ILSVRC2012_val_00000099"}  # a skipped train key is not val's


# ---------------------------------------------------------------- added, untouched, as the one-shot prepare's

def test_v2_then_real_added_leave_train_and_val_untouched_and_give_the_one_shot_dataset(eval_dataset, plain,
                                                                                      sources):
    one_shot, _, v2, real = eval_dataset
    kept, dataset_id = kept_files(plain), read_manifest(plain).dataset_id()
    added = prepare(config(sources["official"], plain, eval_sources=(v2,)))
    assert list(added.splits) == ["train", "val", "v2"] and not (plain / REAL_LABELS_FILE).exists()
    assert split_bytes(plain, "v2") == split_bytes(one_shot, "v2")
    assert kept_files(plain) == kept and added.dataset_id() == dataset_id
    assert read_complete_manifest(plain).to_json() == added.to_json()
    added = prepare(config(sources["official"], plain, eval_sources=(v2,), real_labels=real))
    assert kept_files(plain) == kept and added.dataset_id() == dataset_id
    assert (plain / REAL_LABELS_FILE).read_bytes() == (one_shot / REAL_LABELS_FILE).read_bytes()
    assert tree_bytes(plain) == tree_bytes(one_shot) and without_stats(plain) == without_stats(one_shot)
    assert [run["splits"] for run in added.stats["added"]] == [["v2"], []]
    again = prepare(config(sources["official"], plain, eval_sources=(v2,), real_labels=real))
    assert again.to_json() == added.to_json()  # the same eval sets again: nothing to do


def test_an_addition_that_does_not_fit_names_what_it_adds_and_no_resize(eval_dataset, prepared, sources, tmp_path):
    """On a full disk an addition said 'the dataset (estimated from the source)' and advised a --resize, which would
    make it another dataset, refused as prepared differently (a review's finding). A real full tmpfs."""
    from test_prepare import a_small_disk, fill

    _, _, v2, _ = eval_dataset
    with a_small_disk(tmp_path / "disk", 16) as mount:
        dest = copy_dataset(prepared, mount / "imagenet")
        kept = kept_files(dest)
        fill(mount)
        with pytest.raises(PrepareError) as refused:
            prepare(config(sources["official"], dest, eval_sources=(v2,)))
        said = str(refused.value)
        assert "the evaluation sets it adds (v2) needs about" in said and "--resize" in said
        assert said.endswith("Free space, or choose another --dest: the dataset there keeps its options, and a "
                             "--resize would make it another")
        assert kept_files(dest) == kept


def test_the_same_real_json_at_another_path_is_the_same_dataset(eval_dataset, sources, tmp_path, caplog):
    """timm's copy of real.json moves with every venv: the same bytes elsewhere were refused as 'prepared
    differently' (both checksums shown equal), asking for a rebuild (a review's finding)."""
    one_shot, _, v2, real = eval_dataset
    dest = copy_dataset(one_shot, tmp_path / "imagenet")
    moved = tmp_path / "elsewhere" / "real.json"
    moved.parent.mkdir()
    shutil.copy(real, moved)
    with caplog.at_level(logging.INFO, logger="prepare"):
        kept = prepare(config(sources["official"], dest, eval_sources=(v2,), real_labels=moved))
    assert "already holds this dataset" in caplog.text and kept.to_json() == read_manifest(one_shot).to_json()
    moved.write_text(moved.read_text().replace("[]", "[0]", 1))  # other labels: another dataset
    with pytest.raises(PrepareError, match="was prepared differently"):
        prepare(config(sources["official"], dest, eval_sources=(v2,), real_labels=moved))


def test_real_labels_added_alone(eval_dataset, plain, sources):
    one_shot, _, _, real = eval_dataset
    kept, dataset_id = kept_files(plain), read_manifest(plain).dataset_id()
    added = prepare(config(sources["official"], plain, real_labels=real))
    assert list(added.splits) == ["train", "val"] and added.real_labels == read_manifest(one_shot).real_labels
    assert (plain / REAL_LABELS_FILE).read_bytes() == (one_shot / REAL_LABELS_FILE).read_bytes()
    assert kept_files(plain) == kept and added.dataset_id() == dataset_id


def test_a_second_variant_added_leaves_the_first_untouched(eval_dataset, plain, sources, top, tmp_path):
    _, _, v2, _ = eval_dataset
    prepare(config(sources["official"], plain, eval_sources=(v2,)))
    first = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (plain / "v2").iterdir()}
    added = prepare(config(sources["official"], plain, eval_sources=(top, v2)))  # any order
    assert list(added.splits) == ["train", "val", "v2", "v2-top-images"]
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (plain / "v2").iterdir()} == first
    both = tmp_path / "both"
    prepare(config(sources["official"], both, eval_sources=(v2, top)))
    assert tree_bytes(plain) == tree_bytes(both) and without_stats(plain) == without_stats(both)


def test_the_command_line_says_what_it_adds_and_reads_neither_train_nor_val(eval_dataset, plain, sources, run_here):
    from prepare.cli import main

    result = run_here(main, "--source", sources["official"], "--dest", plain, "--eval-source", eval_dataset[2],
                      "--shard-size", read_manifest(plain).options["shard_size_mb"])
    assert result.returncode == 0, result.stderr
    assert f"{plain}: adding v2 to the dataset there; train, val stay as they are" in result.stderr
    assert "v2: read" in result.stderr and "train: read" not in result.stderr and "val: read" not in result.stderr
    assert "(dataset id" in result.stderr


def test_real_labels_that_do_not_fit_the_val_shards_are_refused_before_anything_is_written(plain, sources, images,
                                                                                          tmp_path):
    real = tmp_path / "real.json"
    real.write_text(json.dumps([[0]] * (len(images.val) + 1)))
    before = (plain / "manifest.json").read_bytes()
    with pytest.raises(EvalSetError, match=f"{len(images.val) + 1} label sets for {len(images.val)} validation"):
        prepare(config(sources["official"], plain, real_labels=real))
    assert (plain / "manifest.json").read_bytes() == before and not (plain / REAL_LABELS_FILE).exists()


# ---------------------------------------------------------------- failed, killed, damaged

def test_a_failure_before_the_manifest_removes_what_the_addition_wrote(eval_dataset, plain, sources, monkeypatch):
    from prepare import builder

    _, _, v2, real = eval_dataset
    kept, before = kept_files(plain), (plain / "manifest.json").read_bytes()

    def full_disk(*args):
        assert any((plain / "v2").iterdir()) and (plain / REAL_LABELS_FILE).exists()  # written, not yet listed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builder, "write_manifest", full_disk)
    with pytest.raises(PrepareError, match="ran out of space while writing the manifest"):
        prepare(config(sources["official"], plain, eval_sources=(v2,), real_labels=real))
    assert (plain / "manifest.json").read_bytes() == before and kept_files(plain) == kept
    assert not (plain / "v2").exists() and not (plain / REAL_LABELS_FILE).exists()
    assert not (plain / ".prepare-tmp").exists()


KILLED = """
import os, signal, sys
sys.path.insert(0, "tests")
from pathlib import Path
import prepare.builder as builder
import prepare.shard_writer as shard_writer
from conftest import config

source, dest, v2, real, point = sys.argv[1:]
real_write_shard, dest = shard_writer.write_shard, Path(dest)

def write_shard(job):  # killed once a v2 shard is in place, before the others
    if any((dest / "v2").glob("*.tar")):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write_shard(job)

def write_manifest(*args):  # killed with every shard and the ReaL labels written
    os.kill(os.getpid(), signal.SIGKILL)

setattr(shard_writer if point == "write_shard" else builder, point, locals()[point])
builder.prepare(config(Path(source), dest, eval_sources=(Path(v2),), real_labels=Path(real)))
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["write_shard", "write_manifest"])
def test_a_kill_leaves_the_old_dataset_and_the_next_run_cleans_up_and_completes(eval_dataset, plain, sources, point):
    one_shot, _, v2, real = eval_dataset
    kept, old = kept_files(plain), read_manifest(plain)
    killed = subprocess.run([sys.executable, "-c", KILLED, sources["official"], plain, v2, real, point], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert any((plain / "v2").glob("*.tar")) and (plain / REAL_LABELS_FILE).exists() == (point == "write_manifest")
    assert read_complete_manifest(plain).to_json() == old.to_json() and kept_files(plain) == kept  # the old one, whole
    again = prepare(config(sources["official"], plain))  # the old dataset's own command: nothing to do, and tidied
    assert again.to_json() == old.to_json() and kept_files(plain) == kept
    assert not (plain / "v2").exists() and not (plain / REAL_LABELS_FILE).exists()
    assert not (plain / ".prepare-tmp").exists() and not list(plain.glob(".*.tmp"))
    killed = subprocess.run([sys.executable, "-c", KILLED, sources["official"], plain, v2, real, point], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    added = prepare(config(sources["official"], plain, eval_sources=(v2,), real_labels=real))  # completes
    assert tree_bytes(plain) == tree_bytes(one_shot) and without_stats(plain) == without_stats(one_shot)
    assert kept_files(plain) == kept and added.dataset_id() == old.dataset_id()
    assert not (plain / ".prepare-tmp").exists()


def test_verify_checks_the_added_shards_and_rebuilds_a_damaged_one(eval_dataset, plain, sources, caplog):
    caplog.set_level(logging.INFO, logger="prepare")
    _, _, v2, _ = eval_dataset
    prepare(config(sources["official"], plain, eval_sources=(v2,)))
    shard = min((plain / "v2").iterdir())
    good = shard.read_bytes()
    shard.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # the same size: only the checksum sees it
    prepare(config(sources["official"], plain, eval_sources=(v2,), verify=True))
    assert f"damaged: v2/{shard.name} fails its checksum" in caplog.text
    assert "rebuilt: every shard has the bytes its checksum recorded" in caplog.text
    assert shard.read_bytes() == good


def test_an_addition_to_a_damaged_dataset_asks_for_verify_which_rebuilds_it_with_the_addition(eval_dataset, prepared,
                                                                                             plain, sources, caplog):
    caplog.set_level(logging.INFO, logger="prepare")
    _, _, v2, _ = eval_dataset
    shard = min((plain / "train").iterdir())
    good = shard.read_bytes()
    shard.write_bytes(good[:-7])
    with pytest.raises(PrepareError, match=f"is damaged: train/{shard.name} has .*Rerun with --verify to rebuild it"):
        prepare(config(sources["official"], plain, eval_sources=(v2,)))
    prepare(config(sources["official"], plain, eval_sources=(v2,), verify=True))
    assert "rebuilt: every shard has the bytes its checksum recorded" in caplog.text  # the added ones not counted
    assert shard.read_bytes() == good and split_bytes(plain, "v2") == split_bytes(eval_dataset[0], "v2")
    assert read_manifest(plain).dataset_id() == read_manifest(prepared).dataset_id()


# ---------------------------------------------------------------- not an addition: refused as before

@pytest.fixture
def with_v2_and_real(eval_dataset, tmp_path) -> Path:
    return copy_dataset(eval_dataset[0], tmp_path / "imagenet")


def other_real(tmp_path: Path, real: Path) -> Path:
    other = tmp_path / "other-real.json"
    other.write_text(real.read_text().replace("[]", "[0]", 1))
    return other


@pytest.mark.parametrize("change", ["v2 removed, another variant added", "another real.json",
                                    "v2 from another path", "ReaL removed"])
def test_what_is_not_an_addition_is_refused_naming_it_and_the_dataset_is_untouched(eval_dataset, with_v2_and_real,
                                                                                  sources, top, tmp_path, change):
    _, _, v2, real = eval_dataset
    moved = Path(shutil.copytree(v2, tmp_path / "elsewhere" / V2_NAME))
    eval_sources, real_labels, said = {
        "v2 removed, another variant added": ((top,), real, f"--eval-source was {v2}, now {top}"),
        "another real.json": ((v2,), other_real(tmp_path, real), f"--real-labels was {real} \\(sha256 "),
        "v2 from another path": ((moved, top), real, f"--eval-source was {v2}, now {moved}, {top}"),
        "ReaL removed": ((v2, top), None,
                         f"--eval-source was {v2}, now {v2}, {top}; --real-labels was {real} .*, now none"),
    }[change]
    before = tree_bytes(with_v2_and_real) | {"manifest": (with_v2_and_real / "manifest.json").read_bytes()}
    with pytest.raises(PrepareError, match=f"prepared differently: {said}.*Rerun with --force to replace it, or choose "
                                           "another --dest; to keep it, give the evaluation sets it was prepared with"):
        prepare(config(sources["official"], with_v2_and_real, eval_sources=eval_sources, real_labels=real_labels))
    assert tree_bytes(with_v2_and_real) | {"manifest": (with_v2_and_real / "manifest.json").read_bytes()} == before
    assert not (with_v2_and_real / "v2-top-images").exists()


def test_an_addition_with_other_options_is_refused_naming_them(eval_dataset, plain, sources):
    with pytest.raises(PrepareError, match="prepared differently: seed was 0, now 1; --eval-source was none, now "
                                           ".*Rerun with --force to replace it, or choose another --dest\\.$"):
        prepare(config(sources["official"], plain, eval_sources=(eval_dataset[2],), seed=1))
    assert not (plain / "v2").exists()


def test_a_variant_archive_with_other_bytes_is_refused(eval_dataset, sources, tmp_path):
    _, _, v2, _ = eval_dataset
    archive = gzip_tar_of(v2, tmp_path / "imagenetv2-matched-frequency.tar.gz")
    dest = tmp_path / "imagenet"
    prepare(config(sources["official"], dest, eval_sources=(archive,)))
    with open(archive, "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(PrepareError, match=f"--eval-source was {archive}, now {archive}.*to keep it"):
        prepare(config(sources["official"], dest, eval_sources=(archive,)))


def test_force_rebuilds_without_the_sets_removed(eval_dataset, with_v2_and_real, sources):
    manifest = prepare(config(sources["official"], with_v2_and_real, force=True))
    assert list(manifest.splits) == ["train", "val"] and not manifest.real_labels
    assert not (with_v2_and_real / "v2").exists() or not any((with_v2_and_real / "v2").iterdir())
    assert not (with_v2_and_real / REAL_LABELS_FILE).exists()


# ---------------------------------------------------------------- several nodes (the shared read)

@pytest.mark.slow
def test_nodes_holding_the_dataset_each_add_the_eval_sets_from_their_own_read(eval_dataset, prepared, sources,
                                                                               tmp_path):
    from test_shared_read import finish, manifest_without_run_stats, start_nodes

    one_shot, _, v2, real = eval_dataset
    dests = [copy_dataset(prepared, tmp_path / f"n{rank}") for rank in range(2)]
    kept = [kept_files(dest) for dest in dests]
    results = finish(start_nodes(sources["official"], dests, "--eval-source", v2, "--real-labels", real, workers=2))
    assert [code for code, _ in results] == [0, 0], results
    for dest, before, (_, log) in zip(dests, kept, results):
        assert "adding v2 and ReaL's labels to the dataset there" in log and "shared read" not in log, log
        assert "train: read" not in log and "val: read" not in log
        assert kept_files(dest) == before and tree_bytes(dest) == tree_bytes(one_shot)
        assert manifest_without_run_stats(dest) == manifest_without_run_stats(one_shot)
        assert (dest / REAL_LABELS_FILE).read_bytes() == (one_shot / REAL_LABELS_FILE).read_bytes()


@pytest.mark.slow
def test_a_node_adding_eval_sets_serves_its_share_to_a_node_that_builds_then_adds_them(eval_dataset, prepared,
                                                                                     sources, tmp_path):
    from test_shared_read import finish, manifest_without_run_stats, start_nodes

    one_shot, _, v2, real = eval_dataset
    holder, empty = copy_dataset(prepared, tmp_path / "n0"), tmp_path / "n1"
    kept = kept_files(holder)
    results = finish(start_nodes(sources["official"], [holder, empty], "--eval-source", v2, "--real-labels", real,
                                 workers=2))
    assert [code for code, _ in results] == [0, 0], results
    assert "n1 needs the dataset" in results[0][1] and "served: read" in results[0][1]
    assert results[0][1].index("served: read") < results[0][1].index("adding v2 and ReaL's labels")
    assert kept_files(holder) == kept
    for dest in (holder, empty):
        assert tree_bytes(dest) == tree_bytes(one_shot)
        assert manifest_without_run_stats(dest) == manifest_without_run_stats(one_shot)
        assert not (dest / ".prepare-tmp").exists()
    assert read_complete_manifest(empty).stats["received_from_nodes_bytes"] > 0
