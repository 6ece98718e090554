"""ILSVRC/imagenet-1k as Parquet (the hub's `main` branch) as a source: the same small ImageNet prepared
from it and from the official archives gives the same samples (labels by the 1000-class table);
the repository, its data/ folder and the hub cache are found; what the download declares (files by
their -of-N names, README.md's counts) against what is there; keys from image.path and the documented
ones where it is null; a disagreeing, missing or test label and a damaged file each one line."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import webdataset as wds

from conftest import SHARD_MB, config, tree_bytes
from prepare.builder import prepare
from prepare.completeness import excess, shortfall
from prepare.sources.hf_parquet import (
    ParquetImageNet, readme_counts, row_group_runs, split_files,
)
from prepare.labels import builtin_class_names
from prepare.sources import detect, open_source
from prepare.sample import SampleSpec, make_sample, parquet_bytes, write_hf_parquet
from prepare.sources.base import SourceError
from shards.manifest import read_manifest

TRAIN = ("train-00000-of-00002.parquet", "train-00001-of-00002.parquet")
VAL = "validation-00000-of-00001.parquet"
INDEX = {wnid: i for i, wnid in enumerate(sorted(builtin_class_names()))}  # ImageNet-1k's label of a wnid


@pytest.fixture(scope="module")
def parquet(tmp_path_factory, images) -> Path:
    """The session's sample ImageNet as ILSVRC/imagenet-1k's Parquet download."""
    root = tmp_path_factory.mktemp("parquet") / "imagenet-1k"
    write_hf_parquet(root, images)
    return root


@pytest.fixture(scope="module")
def parquet_prepared(parquet, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("parquet-prepared") / "imagenet"
    prepare(config(parquet, dest))
    return dest


def copy_source(parquet: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(parquet, tmp_path / "imagenet-1k"))


def rewrite(path: Path, edit, row_group_rows: int = 100) -> None:
    """The file's rows as (path, image bytes, label), edited, written back as the sample writes them."""
    rows = [(r["image"]["path"], r["image"]["bytes"], r["label"]) for r in pq.read_table(path).to_pylist()]
    path.write_bytes(parquet_bytes(edit(rows), row_group_rows))


def samples_of(dest: Path) -> dict[str, dict[str, tuple[bytes, bytes, dict]]]:
    """split -> key -> (.cls, .jpg, .json decoded) of every sample of a prepared dataset."""
    manifest = read_manifest(dest)
    return {split: {s["__key__"]: (s["cls"], s["jpg"], json.loads(s["json"]))
                    for shard in manifest.splits[split].shards
                    for s in wds.WebDataset(str(dest / shard.name), shardshuffle=False)}
            for split in ("train", "val")}


def keys_of(source) -> dict[str, list[str]]:
    return {split: [item.key for part in source.parts(split) for item in part.items()] for split in ("train", "val")}


# ---------------------------------------------------------------- the same ImageNet as the official archives

def test_the_parquet_sample_prepares_into_the_official_archives_samples(parquet_prepared, prepared):
    """Keys, wnids and image bytes as from the official archives; the labels are ImageNet-1k's 1000-class
    index by design (the download holds no class list of its own)."""
    official, ours = samples_of(prepared), samples_of(parquet_prepared)
    for split in ("train", "val"):
        assert sorted(ours[split]) == sorted(official[split])
        for key, (cls, jpg, meta) in ours[split].items():
            assert (jpg, meta) == official[split][key][1:]
            assert int(cls) == INDEX[meta["wnid"]]
    manifest = read_manifest(parquet_prepared)
    assert manifest.source["layout"] == "hf-parquet"
    assert len(manifest.classes) == 1000 and manifest.classes[0].name == "tench, Tinca tinca"
    assert manifest.converted == read_manifest(prepared).converted  # the CMYK, grayscale and PNG images
    assert {s: manifest.splits[s].samples for s in ("train", "val")} == {"train": 180, "val": 30}


def test_the_sample_writer_rewrites_the_same_bytes(tmp_path):
    spec = SampleSpec(classes=4, train_per_class=2, val_per_class=1, max_width=64)
    for out in ("a", "b"):
        make_sample(tmp_path / out, "hf-parquet", spec)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert [str(f) for f in files] == ["README.md", "data/test-00000-of-00001.parquet", f"data/{TRAIN[0]}",
                                       f"data/{TRAIN[1]}", f"data/{VAL}"]
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    before = (tmp_path / "a" / "README.md").stat().st_mtime_ns
    make_sample(tmp_path / "a", "hf-parquet", spec)
    assert (tmp_path / "a" / "README.md").stat().st_mtime_ns == before  # left alone


def test_a_parquet_file_whose_link_leads_nowhere_is_named_in_one_line(parquet, tmp_path):
    """The hub cache's snapshot/ links to blobs/: a blob removed (or the snapshot copied alone) was a traceback."""
    source = copy_source(parquet, tmp_path)
    (source / "data" / TRAIN[1]).unlink()
    (source / "data" / TRAIN[1]).symlink_to(tmp_path / "blobs" / "gone")
    with pytest.raises(SourceError, match=f"data/{TRAIN[1]} is a link to .*gone, which is not there .*download it "
                                          "again"):
        prepare(config(source, tmp_path / "out"))


def test_the_test_split_is_never_read(parquet, tmp_path):
    source = copy_source(parquet, tmp_path)
    (source / "data" / "test-00000-of-00001.parquet").write_bytes(b"not Parquet")
    opened = open_source(source)
    assert {p.path for split in ("train", "val") for p in opened.parts(split)} == {
        str(source / "data" / name) for name in (*TRAIN, VAL)}
    assert [f["path"] for f in detect(source).identity()["files"]] == [
        *(f"data/{name}" for name in (*TRAIN, VAL)), "README.md"]


# ---------------------------------------------------------------- where the files are: detected

SHA = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(parquet: Path, at: Path, sha: str = SHA) -> Path:
    """The hub cache as `load_dataset` leaves it: blobs/, snapshots/<sha>/ of symlinks to them, refs/main."""
    repo = at / "datasets--ILSVRC--imagenet-1k"
    for number, file in enumerate(sorted(p for p in parquet.rglob("*") if p.is_file())):
        blob = repo / "blobs" / f"{number:040x}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, blob)
        link = repo / "snapshots" / sha / file.relative_to(parquet)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    return repo


@pytest.mark.parametrize("where", ["repository", "data", "snapshot", "hub cache"])
def test_the_repository_its_data_folder_and_the_hub_cache_are_found(parquet, tmp_path, where):
    repo = hub_cache(parquet, tmp_path)
    root = {"repository": parquet, "data": parquet / "data", "hub cache": repo,
            "snapshot": next((repo / "snapshots").iterdir())}[where]
    assert detect(root).name == "hf-parquet"
    opened = open_source(root)
    assert keys_of(opened) == keys_of(open_source(parquet))
    assert opened.declared("val").images == 30  # README.md found beside data/ or above it
    top = {"repository": "", "data": "../", "snapshot": "", "hub cache": f"snapshots/{SHA}/"}[where]
    data = "" if where == "data" else f"{top}data/"
    assert [f["path"] for f in detect(root).identity()["files"]] == [
        *(f"{data}{name}" for name in (*TRAIN, VAL)), f"{top}README.md"]


def test_data_is_listed_once_from_detection_to_the_parts(parquet, monkeypatch):
    """On shared storage a listing is a round trip: detection's listing of data/ is the one the identity and
    the split's files are read from."""
    import os

    listed, listdir, scandir = [], os.listdir, os.scandir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(str(path)) or listdir(path))
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or scandir(path))
    detected = detect(parquet)
    detected.identity()
    assert detected.open().parts("train")
    assert listed.count(str(parquet / "data")) == 1


def test_the_parquet_download_walks_to_its_first_image_past_the_layouts_asked_before_it_alone(parquet, tmp_path):
    """tests/source_walk.py: the modules entered from prepare's main to the first image. The layouts after
    Parquet's in the registry are never asked; the walk is no longer than docs/architecture.md's figure (a
    room added to it fails this: say it there)."""
    from source_walk import walk

    modules = [module for module, _ in walk(parquet, tmp_path / "out")]
    assert modules[0] == "prepare/cli.py" and "prepare/sources/hf_parquet.py" in modules
    assert "prepare/sources/imagenet_full.py" not in modules and "prepare/sources/imagefolder.py" not in modules
    assert len(modules) <= 21, modules


def test_the_parquet_download_reaches_its_first_image_through_seven_modules_that_carry_it(parquet, tmp_path):
    """#49's measure (tests/source_walk.py, `carrying`): the modules where a function is called with the
    source's path or what is made from it. Detection asks no layout but the one whose names show
    (`Signs`); the identity and the --dest check are the detected source's answers; the evaluation sets' room is
    entered only where some are asked for."""
    from source_walk import walk

    assert [module for module, _ in walk(parquet, tmp_path / "out", carrying=True)] == [
        "prepare/cli.py", "prepare/sources/__init__.py", "prepare/sources/base.py", "prepare/sources/hf_parquet.py",
        "prepare/builder.py", "prepare/scatter.py", "prepare/workers.py"]


def test_a_hub_cache_without_refs_main_says_which_snapshot_to_give(parquet, tmp_path):
    repo = hub_cache(parquet, tmp_path)
    (repo / "refs" / "main").unlink()
    with pytest.raises(SourceError, match="hub cache folder without refs/main: point --source at the snapshot to "
                                          "read, .*snapshots/<sha> \\(there: 0123456789abcdef"):
        detect(repo).name


def test_prepare_from_the_hub_cache_writes_the_repositorys_shards(parquet, parquet_prepared, tmp_path):
    prepare(config(hub_cache(parquet, tmp_path / "cache"), tmp_path / "out"))
    assert tree_bytes(tmp_path / "out") == tree_bytes(parquet_prepared)


def test_the_datasets_arrow_cache_is_refused_with_where_to_point_instead(tmp_path):
    cache = tmp_path / "ILSVRC___imagenet-1k" / "default" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    (cache / "dataset_info.json").write_text("{}")
    (cache / "imagenet-1k-train-00000-of-00002.arrow").write_bytes(b"")
    for root in (tmp_path / "ILSVRC___imagenet-1k", cache):
        with pytest.raises(SourceError) as refused:
            detect(root).name
        message = str(refused.value)
        assert "Arrow cache" in message and "hub/datasets--ILSVRC--imagenet-1k/snapshots/<sha>" in message
        assert "hf download ILSVRC/imagenet-1k --repo-type dataset" in message and "\n" not in message


def test_no_layout_names_the_parquet_files(tmp_path):
    with pytest.raises(SourceError, match=r"data/train-NNNNN-of-NNNNN\.parquet and data/validation-NNNNN-of-NNNNN"):
        detect(tmp_path).name


# ---------------------------------------------------------------- what the download declares

def test_a_missing_file_is_a_gap_named_before_reading_and_its_rows_are_not_read(parquet, tmp_path):
    source = copy_source(parquet, tmp_path)
    (source / "data" / TRAIN[1]).unlink()
    opened = open_source(source)  # no error at open: prepare decides (--allow-partial)
    declared = opened.declared("train")
    assert declared.gaps[0].missing == (TRAIN[1],) and declared.gaps[0].listed == 2
    assert (declared.images, declared.found) == (180, 90)
    assert shortfall(declared) == (f"the train split lacks 1 of the 2 Parquet files their names' -of-N lists "
                                   f"({TRAIN[1]}); 90 of the 180 images README.md's dataset_info declares (90 are "
                                   "there)")
    assert shortfall(opened.declared("val")) is None
    assert {part.path for part in opened.parts("train")} == {str(source / "data" / TRAIN[0])}
    assert [f["path"] for f in detect(source).identity()["files"]] == [
        f"data/{TRAIN[0]}", f"data/{VAL}", "README.md"]


def test_prepare_refuses_a_missing_file_unless_allow_partial(parquet, tmp_path):
    source = copy_source(parquet, tmp_path)
    (source / "data" / TRAIN[0]).unlink()
    with pytest.raises(SourceError, match=f"lacks 1 of the 2 Parquet files .*\\({TRAIN[0]}\\).*--allow-partial") \
            as refused:
        prepare(config(source, tmp_path / "out"))
    assert "\n" not in str(refused.value)
    manifest = prepare(config(source, tmp_path / "partial", allow_partial=True))
    assert manifest.splits["train"].samples == 90 and TRAIN[0] in manifest.partial["train"]


@pytest.mark.parametrize("names,message", [
    ([TRAIN[0], "train-00001-of-00003.parquet"], "train files of 2 conversions \\(-of-00002, -of-00003\\)"),
    (["train-00002-of-00002.parquet"], "train-00002-of-00002.parquet is numbered beyond its -of-00002"),
    ([VAL], "holds no train-NNNNN-of-NNNNN.parquet: download .* --include 'data/train-\\*'"),
])
def test_file_names_that_contradict_each_other_are_refused(names, message):
    with pytest.raises(SourceError, match=message):
        split_files(names, "train", "data")


def test_the_numbering_names_the_missing_files_as_written():
    files = split_files(["train-00000-of-00294.parquet", "train-00002-of-00294.parquet", "x.parquet"], "train", "d")
    assert (files.listed, files.missing[:2], len(files.missing)) == (
        294, ("train-00001-of-00294.parquet", "train-00003-of-00294.parquet"), 292)


@pytest.mark.parametrize("count,complaint", [
    (181, "the train split lacks 1 of the 181 images README.md's dataset_info declares (180 are there)"),
    (179, "the train split holds 180 images, README.md's dataset_info declares 179: they do not belong together"),
])
def test_a_readme_count_that_disagrees_with_the_footers_is_named(parquet, tmp_path, count, complaint):
    source = copy_source(parquet, tmp_path)
    readme = source / "README.md"
    readme.write_text(readme.read_text().replace("num_examples: 180\n", f"num_examples: {count}\n"))
    declared = open_source(source).declared("train")
    assert (declared.images, declared.found) == (count, 180)
    assert (shortfall(declared) if count > 180 else excess(declared, declared.found)).startswith(complaint)
    with pytest.raises(SourceError, match=re.escape(complaint)):
        prepare(config(source, tmp_path / "out"))


def test_without_a_readme_the_download_declares_only_its_files(parquet, tmp_path):
    source = copy_source(parquet, tmp_path)
    (source / "README.md").unlink()
    declared = open_source(source).declared("val")
    assert (declared.images, declared.images_by, declared.found) == (None, None, 30)
    assert declared.gaps[0].listed == 1 and not declared.gaps[0].missing


HEADER = """---
license: other
dataset_info:
{info}configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---
# card
dataset_info:
  splits:
  - name: train
    num_examples: 1
"""
FEATURES = """  features:
  - name: image
    dtype: image
  - name: label
    dtype:
      class_label:
        names:
          '0': tench, Tinca tinca
"""
SPLITS = """  splits:
  - name: train
    num_bytes: 154811714030
    num_examples: 1281167
  - name: 'validation'
    num_bytes: 6724225350
    num_examples: 50000
  - name: test
    num_examples: 100000
  download_size: 166114018980
"""


COUNTS = {"train": 1281167, "validation": 50000, "test": 100000}


@pytest.mark.parametrize("info,counts", [
    (FEATURES + SPLITS, COUNTS),
    ("- config_name: other\n" + SPLITS.replace("1281167", "5") + "- config_name: default\n" + FEATURES + SPLITS,
     COUNTS),
    ("- config_name: only\n" + FEATURES + SPLITS.replace("  - name", "    - name").replace("    num", "      num"),
     COUNTS),  # a list indented under its key
    ("- config_name: a\n" + SPLITS + "- config_name: b\n" + SPLITS, {}),  # which? none said: no count
    (FEATURES, {}),
])
def test_readme_counts_come_from_dataset_info_of_the_default_or_only_config(info, counts):
    assert readme_counts(HEADER.format(info=info)) == counts


def test_readme_counts_read_any_yaml_the_header_is_written_in_and_nothing_from_broken_yaml():
    """PyYAML reads the header, so YAML's other spellings count too (flow style, quoted counts, comments);
    a header that is no YAML declares nothing (the files' own counts then stand)."""
    flow = "dataset_info: {splits: [{name: train, num_examples: 3}, {name: validation, num_examples: '2'}]}  # x\n"
    assert readme_counts(f"---\n{flow}---\n# card\n") == {"train": 3, "validation": 2}
    assert readme_counts("---\ndataset_info:\n  splits: [\n---\n") == {}
    assert readme_counts("---\ndataset_info:\n  splits:\n  - name: train\n    num_examples: true\n---\n") == {}


def test_a_readme_without_a_yaml_header_declares_nothing():
    assert readme_counts("# ImageNet\ndataset_info:\n  splits:\n  - name: train\n    num_examples: 3\n") == {}
    assert readme_counts("") == {}


# ---------------------------------------------------------------- keys and labels

def test_rows_without_a_path_get_the_documented_keys_and_one_warning(parquet, tmp_path, caplog):
    source = copy_source(parquet, tmp_path)
    for name in TRAIN:
        rewrite(source / "data" / name, lambda rows: [(None, data, label) for _, data, label in rows])
    caplog.set_level(logging.WARNING)
    opened = open_source(source)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "train_<the file's number, 5 digits>_<the row in the file, 6 digits>" in warnings[0]
    assert TRAIN[0] in warnings[0] and "and 1 more train files" in warnings[0]
    keys = keys_of(opened)
    assert keys["train"] == [f"train_{f:05d}_{n:06d}" for f in range(2) for n in range(90)]  # by file and row
    assert keys["val"] == keys_of(open_source(parquet))["val"]  # paths there: the original names
    wnids = [item.wnid for part in opened.parts("train") for item in part.items()]
    assert wnids == [item.wnid for part in open_source(parquet).parts("train") for item in part.items()]


def test_a_path_that_is_null_in_some_rows_keys_those_rows_alone(parquet, tmp_path, caplog):
    source = copy_source(parquet, tmp_path)
    rewrite(source / "data" / TRAIN[1], lambda rows: [(None, *row[1:]) if i == 5 else row
                                                      for i, row in enumerate(rows)])
    caplog.set_level(logging.WARNING)
    keys = keys_of(open_source(source))["train"]
    original = keys_of(open_source(parquet))["train"]
    assert keys == original[:95] + ["train_00001_000005"] + original[96:]
    assert sum("without image.path" in r.getMessage() for r in caplog.records) == 1


def test_without_null_counts_or_without_the_path_column_the_warning_still_comes(parquet, tmp_path, caplog):
    """Statistics are optional in Parquet, and an older conversion may have no image.path at all: the
    first row group then tells (its path column read), and the rows are keyed as they are."""
    import pyarrow as pa

    source = copy_source(parquet, tmp_path)
    table = pq.read_table(source / "data" / VAL)
    pq.write_table(table.set_column(0, "image", pa.StructArray.from_arrays(
        [table.column("image").combine_chunks().field("bytes"), pa.nulls(len(table), pa.string())], ["bytes", "path"])),
        source / "data" / VAL, write_statistics=False)
    only_bytes = pq.read_table(source / "data" / TRAIN[0])
    pq.write_table(only_bytes.set_column(0, "image", pa.StructArray.from_arrays(
        [only_bytes.column("image").combine_chunks().field("bytes")], ["bytes"])), source / "data" / TRAIN[0])
    caplog.set_level(logging.WARNING)
    keys = keys_of(open_source(source))
    assert sum("without image.path" in r.getMessage() for r in caplog.records) == 2  # train's, val's
    assert keys["val"] == [f"val_00000_{n:06d}" for n in range(30)]
    assert keys["train"][:90] == [f"train_00000_{n:06d}" for n in range(90)]
    assert keys["train"][90:] == keys_of(open_source(parquet))["train"][90:]


def other_class(label: int) -> int:
    return next(i for i in sorted(INDEX.values()) if i != label and i < 10)


@pytest.mark.parametrize("edit,message", [
    (lambda row: (row[0], row[1], other_class(row[2])), "row 3: image.path '{path}' says {wnid}, label {other} is "
                                                        "{other_wnid}: the file is damaged"),
    (lambda row: (row[0], row[1], -1), "row 3: label -1 is not one of ImageNet-1k's classes \\(0..999\\) \\(-1 marks "
                                       "the unlabelled test split\\)"),
    (lambda row: (row[0], row[1], 1000), "row 3: label 1000 is not one of ImageNet-1k's classes"),
    (lambda row: ("n01440764_77.JPEG", row[1], row[2]), "row 3: the name 'n01440764_77.JPEG' does not follow "
                                                        "ILSVRC/imagenet-1k's rule"),
    (lambda row: (row[0], None, row[2]), "row 3: image.bytes is null"),
])
def test_a_label_or_path_that_is_wrong_is_one_line_naming_file_and_row(parquet, tmp_path, edit, message):
    source = copy_source(parquet, tmp_path)
    victim = source / "data" / TRAIN[1]
    rows = [(r["image"]["path"], r["label"]) for r in pq.read_table(victim).to_pylist()]
    path, label = rows[3]
    other = other_class(label)
    names = list(INDEX)
    rewrite(victim, lambda rows: [edit(row) if i == 3 else row for i, row in enumerate(rows)])
    expected = message.format(path=path, wnid=names[label], other=other, other_wnid=names[other])
    with pytest.raises(SourceError, match=f"{victim}:{expected}") as refused:
        prepare(config(source, tmp_path / "out", workers=2))
    assert "\n" not in str(refused.value)


# ---------------------------------------------------------------- parts: runs of row groups

@pytest.mark.parametrize("rows,per_part,runs", [
    ([100] * 43 + [58], 1000, [range(0, 10), range(10, 20), range(20, 30), range(30, 40), range(40, 44)]),
    ([100] * 10, 1000, [range(0, 10)]),
    ([4358], 1000, [range(0, 1)]),
    ([300, 800, 50, 50], 1000, [range(0, 2), range(2, 4)]),
    ([], 1000, []),
])
def test_row_groups_are_cut_into_runs_of_about_a_thousand_rows(rows, per_part, runs):
    assert row_group_runs(rows, per_part) == runs


def test_the_row_group_parts_cover_every_row_once_in_order(images, tmp_path, monkeypatch):
    import prepare.sources.hf_parquet as hub_parquet

    write_hf_parquet(tmp_path / "src", images, row_group_rows=7)
    monkeypatch.setattr(hub_parquet, "ROWS_PER_PART", 20)
    opened = ParquetImageNet(tmp_path / "src")
    parts = opened.parts("train")
    assert len(parts) == 2 * 5  # 90 rows a file in 13 row groups of 7 (the last 6): runs of 3, 3, 3, 3, 1
    assert [p.groups for p in parts[:5]] == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11), (12,)]
    assert [(p.file_number, p.first_row) for p in parts] == [(f, r) for f in range(2) for r in (0, 21, 42, 63, 84)]
    meta = pq.ParquetFile(parts[0].path).metadata
    assert parts[0].size == sum(meta.row_group(g).column(c).total_compressed_size for g in (0, 1, 2) for c in range(3))
    items = [item for part in parts for item in part.items()]
    assert [(i.key, i.wnid, i.data) for i in items] == [(k, w, d) for k, w, d in images.train]
    assert opened.split_bytes("train") == sum(p.size for p in parts)
    assert opened.estimated_count("train") == 180


# ---------------------------------------------------------------- damaged files: one line

def cut_in_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def break_a_page_header(path: Path) -> None:
    """The page header of the second row group's image column: only thrift's parse shows it."""
    offset = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 8] = bytes(b ^ 0xFF for b in data[offset:offset + 8])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage,said", [
    (cut_in_half, "Its footer is damaged or it is truncated: download it again"),
    (break_a_page_header, "its row group 1 \\(of 0..1\\): .*The file is damaged: download it again"),
])
def test_a_damaged_parquet_file_stops_prepare_in_one_line_naming_it(images, tmp_path, run_here, damage, said):
    from prepare.cli import main

    source = tmp_path / "imagenet-1k"
    write_hf_parquet(source, images, row_group_rows=50)
    victim = source / "data" / TRAIN[1]
    damage(victim)
    dest = tmp_path / "out"
    result = run_here(main, "--source", source, "--dest", dest, "--shard-size", SHARD_MB, "--workers", 2)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"cannot read {victim.resolve()}" in errors[0], result.stderr
    assert re.search(said, errors[0]) and "Traceback" not in result.stderr, errors[0]
    assert not (dest / "manifest.json").exists() and not (dest / ".prepare-tmp").exists()


# ---------------------------------------------------------------- several nodes

@pytest.mark.slow
def test_two_nodes_share_the_read_of_the_parquet_and_write_a_one_node_prepares_bytes(parquet, parquet_prepared,
                                                                                     tmp_path):
    from test_shared_read import finish, start_nodes

    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(parquet, dests, workers=2))
    assert [code for code, _ in results] == [0, 0], results
    for dest, (_, log) in zip(dests, results):
        assert tree_bytes(dest) == tree_bytes(parquet_prepared)
        assert "shared read: 2 of 2 nodes" in log


# ---------------------------------------------------------------- the layouts benchmark

def test_the_layouts_benchmark_times_parquet_against_the_official_archives(tmp_path, run_here):
    from prepare.bench.layouts import main

    result = run_here(main, tmp_path, "--rounds", 1, "--classes", 4, "--train-per-class", 3, "--val-per-class", 1,
                      "--max-width", 64, "--workers", 1)
    assert result.returncode == 0, result.stderr
    record = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    assert record["images"] == {"official": 16, "hf-parquet": 16} and record["ratio_to_first"]["official"] == 1.0
    assert all(len(seconds) == 1 for seconds in record["seconds"].values()) and record["images_per_sec"]["hf-parquet"]
    assert not (tmp_path / "out").exists()  # the outputs removed; the sources kept for reruns
