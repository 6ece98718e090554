"""Complete or refused: each layout's declaration of what it holds, checked before anything is written.

The pure decisions (prepare/completeness.py) over their cases; then the same small ImageNet in every
layout with one declared piece removed at a time (a train archive, shard, Parquet file, class archive or
folder, train or val image): refused by name before anything is written, on one node and in a shared
read; with --allow-partial prepared and recorded in the manifest, and used again only with it."""

from __future__ import annotations

import io
import json
import logging
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import config, tree_bytes
from prepare import completeness
from prepare.builder import prepare
from prepare.config import PrepareError
from prepare.completeness import (
    Declared, Gap, counted_shortfall, excess, imagenet_1k_warning, nothing_there, numbering_gap, refusal, shortfall,
)
from prepare.labels import LabelError
from prepare.sources import open_source
from prepare.sample import KAGGLE_ZIP, WRITERS, tar_bytes
from prepare.sources.base import DEVKIT, SourceError
from shards.paths import WORK_DIR_NAME
from shards.manifest import read_manifest

LAYOUTS = ("official", "imagefolder", "kaggle", "kaggle-zip", "hf-imagenet-1k", "timm-wds", "hf-parquet")


# ---------------------------------------------------------------- the pure decisions

@pytest.mark.parametrize("declared,line", [
    (Declared("train"), None),
    (Declared("train", (Gap("shards", 3, "_info.json"),), 180, "_info.json", 180), None),
    (Declared("train", (Gap("shards", 3, "_info.json", ("b.tar",)),), 180, "_info.json", 120),
     "the train split lacks 1 of the 3 shards _info.json lists (b.tar); 60 of the 180 images _info.json declares "
     "(120 are there)"),
    (Declared("val", (Gap("images", 5, "x.csv", ("a", "b", "c", "d")),), 5, "x.csv", 1),
     "the val split lacks 4 of the 5 images x.csv lists (a, b, c and 1 more)"),  # the count says nothing more
    (Declared("val", (), 50_000, "the README", 49_000),
     "the val split lacks 1,000 of the 50,000 images the README declares (49,000 are there)"),
    (Declared("v2", (Gap("images", 30, "ImageNetV2", ("4/ (3)",), count=3),), 30, "ImageNetV2", 27),
     "the v2 split lacks 3 of the 30 images ImageNetV2 lists (4/ (3))"),
    (Declared("train", (), 10, "x", None), None),  # counted as it is read
])
def test_a_shortfall_is_one_line_naming_what_is_missing(declared, line):
    assert shortfall(declared) == line


def test_three_missing_are_all_named_with_no_count_of_more():
    """Only 1 and 4 missing were tried: naming the first three and counting the rest from 3 missing on passed, and
    wrote "(a, b, c and 0 more)"."""
    assert shortfall(Declared("val", (Gap("images", 5, "x.csv", ("a", "b", "c")),), 5, "x.csv", 2)) == (
        "the val split lacks 3 of the 5 images x.csv lists (a, b, c)")


@pytest.mark.parametrize("declared,line", [
    (Declared("v2", (Gap("images", 30, "ImageNetV2", ("4/ (1)",), count=1),), 30, "ImageNetV2", 30),
     "the v2 split lacks 1 of the 30 images ImageNetV2 lists (4/ (1))"),  # another class over by one: 30 there
    (Declared("v2", (Gap("images", 30, "ImageNetV2", ("4/ (2)",), count=2),), 30, "ImageNetV2", 29),
     "the v2 split lacks 2 of the 30 images ImageNetV2 lists (4/ (2)); 1 of the 30 images ImageNetV2 declares (29 are "
     "there)"),  # another class over by one: the count tells of it
    (Declared("train", (Gap("class folders", 3, "m", ("train/c/",)),), 10, "m", 9),
     "the train split lacks 1 of the 3 class folders m lists (train/c/); 1 of the 10 images m declares (9 are there)"),
    (Declared("val", (Gap("images", 5, "x.csv", ("a",)),), 10, "the README", 9),
     "the val split lacks 1 of the 5 images x.csv lists (a); 1 of the 10 images the README declares (9 are there)"),
])
def test_the_count_line_says_what_the_images_its_declaration_lists_do_not(declared, line):
    """The count short is left out only where a gap of images by the same declaration says exactly as much. Each of
    these passed a mutant before: the whole count of a split whose gap is made up by another class's extra image
    said "0 of the 30 images" (with `found > images` for `>=`); a count one short of a gap of two was dropped (with
    `said < short` for `!=`: the line is what tells of the image over); one missing class folder hid one missing
    image (pieces not compared) and one image missing from x.csv's list hid one short of the README's count (the
    declarers not compared)."""
    assert shortfall(declared) == line


@pytest.mark.parametrize("declared,got,short,too_many", [
    (Declared("val", images=30, images_by="the devkit's ground truth"), 29,
     "the val split yielded 29 of the 30 images the devkit's ground truth declares", None),
    (Declared("val", images=30, images_by="the devkit's ground truth"), 30, None, None),
    (Declared("val", images=30, images_by="d"), 31, None, "the val split holds 31 images, d declares 30"),
    (Declared("val", images=30, images_by="d", found=29), 29, None, None),  # named before reading already
    (Declared("val"), 7, None, None),
])
def test_after_reading_fewer_than_declared_is_short_and_more_is_refused(declared, got, short, too_many):
    assert counted_shortfall(declared, got) == short
    assert (excess(declared, got) or "").startswith(too_many or "") and bool(excess(declared, got)) == bool(too_many)


@pytest.mark.parametrize("split,classes,got,warns", [
    ("train", 1000, 1_281_167, False), ("train", 1000, 1_281_166, True), ("val", 1000, 49_999, True),
    ("val", 100, 5_000, False), ("v2", 1000, 9_000, False),
    ("val", 1000, 50_000, False), ("train", 1000, 1_281_168, True), ("val", 1000, 50_001, True),
])
def test_where_nothing_declares_imagenet_1ks_counts_warn(split, classes, got, warns):
    """The last three cases: val's own count was never tried (a table of 50,001 passed), nor a count over
    ImageNet-1k's (no warning above it passed); and only the manifest's test saw a warning that named the split's
    count twice, not ImageNet-1k's."""
    warning = imagenet_1k_warning(split, classes, got)
    assert bool(warning) == warns
    expected = completeness.IMAGENET_1K_IMAGES.get(split)
    assert not warns or f"{got:,} images where ImageNet-1k's holds {expected:,}" in warning


@pytest.mark.parametrize("numbers,missing,listed", [
    ([0, 1, 2], (), 3), ([0, 2], ("f1",), 3), ([3], ("f0", "f1", "f2"), 4), ([], (), 0),
])
def test_gaps_in_a_numbering_are_named(numbers, missing, listed):
    gap = numbering_gap(numbers, "f{}".format, "files")
    assert (gap.missing, gap.listed) == (missing, listed)


@pytest.mark.parametrize("declared,empty", [
    (Declared("val", found=0), True), (Declared("val", found=3), False),
    (Declared("train", (Gap("shards", 2, "x", ("a", "b")),)), True), (Declared("train", (Gap("shards", 2, "x", ("a",)),)), False),
])
def test_a_split_with_nothing_there_is_refused_even_with_allow_partial(declared, empty):
    assert nothing_there(declared) == empty


def test_a_gap_that_lists_no_pieces_does_not_say_nothing_is_there():
    """numbering_gap of no numbered files lists 0 pieces, 0 of them absent: that says nothing of what the split
    holds (reading counts it). A nothing_there that took 0 absent of 0 listed for all of them absent passed."""
    assert not nothing_there(Declared("train", (numbering_gap([], "f{}".format, "shards"),)))


def test_the_refusal_says_what_to_do():
    assert refusal(["the val split lacks x"]).endswith(
        "The download is incomplete: download what is missing, or rerun with --allow-partial to prepare what is "
        "there (the manifest then records what is missing)")


def test_the_refusal_names_every_shortfall_apart():
    """Only one line was tried: lines joined by ", " (within a line the gaps are joined by "; ") passed."""
    assert refusal(["the val split lacks a, b", "the train split lacks c"]).startswith(
        "the val split lacks a, b; the train split lacks c. The download is incomplete")


@pytest.mark.parametrize("shortfalls,excesses,allow,expected", [
    ([], [], False, (None, [])),
    (["the val split lacks x"], [], False, ("the val split lacks x. The download is incomplete", [])),
    (["the val split lacks x"], [], True, (None, ["the val split lacks x"])),
    (["the val split lacks x"], ["val holds 9 images, more than 5"], True, ("val holds 9 images, more than 5", [])),
    ([], ["val holds 9 images, more than 5"], False, ("val holds 9 images, more than 5", [])),
    ([], ["train holds 9", "val holds 6"], True, ("train holds 9; val holds 6", [])),  # each named: not the first only
])
def test_completeness_is_judged_in_one_place_before_a_read_and_after(shortfalls, excesses, allow, expected):
    """completeness.judged: a shortfall refused unless --allow-partial (then handed back to log), more
    than declared refused either way; builder.py (before a read) and scatter.py (after) both ask it."""
    problem, allowed = completeness.judged(shortfalls, excesses, allow)
    assert (problem is None) == (expected[0] is None) and allowed == expected[1]
    assert problem is None or problem.startswith(expected[0])
    for module in ("builder", "scatter"):
        text = (Path(completeness.__file__).parent / f"{module}.py").read_text()
        assert "judged(" in text and "not allow_partial" not in text, module  # the decision is judged's alone


# ---------------------------------------------------------------- every layout, one piece removed at a time

@pytest.fixture(scope="module")
def downloads(tmp_path_factory, images) -> Path:
    """The session's sample ImageNet in every layout; the extracted tree with the devkit beside (which
    then declares its classes, their train counts and the val images)."""
    root = tmp_path_factory.mktemp("downloads")
    for layout in LAYOUTS:
        WRITERS[layout](root / layout, images)
    shutil.copy(root / "official" / DEVKIT, root / "imagefolder")
    return root


def rewrite_tar(path: Path, drop: str) -> None:
    with tarfile.open(path) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.name != drop]
    path.write_bytes(tar_bytes(members))


def rewrite_zip(path: Path, drop: str) -> None:
    with zipfile.ZipFile(path) as old:
        members = [(info, old.read(info)) for info in old.infolist() if info.filename != drop]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as new:
        for info, data in members:
            new.writestr(info, data)
    path.write_bytes(buffer.getvalue())


def second_class(images) -> str:
    return sorted(wnid for wnid, _, _ in images.classes)[1]


VAL_KEY = "ILSVRC2012_val_00000007"
KAGGLE_DATA = "ILSVRC/Data/CLS-LOC"


def remove(layout: str, piece: str, source: Path, images) -> str:
    """Remove one declared piece of `source`; the name the refusal must give it."""
    wnid = second_class(images)
    train_key = next(key for key, w, _ in images.train if w == wnid)
    val_wnid = next(w for key, w, _ in images.val if key == VAL_KEY)
    if (layout, piece) == ("official", "class"):
        rewrite_tar(source / "ILSVRC2012_img_train.tar", f"{wnid}.tar")
        return f"{wnid}.tar"
    if (layout, piece) == ("official", "val image"):
        rewrite_tar(source / "ILSVRC2012_img_val.tar", f"{VAL_KEY}.JPEG")
        return VAL_KEY
    if layout in ("imagefolder", "kaggle"):
        data = "" if layout == "imagefolder" else KAGGLE_DATA + "/"
        if piece == "class":
            shutil.rmtree(source / f"{data}train" / wnid)
            return f"{data}train/{wnid}/"
        if piece == "train image":
            (source / f"{data}train" / wnid / f"{train_key}.JPEG").unlink()
            return train_key
        folder = source / f"{data}val" / (val_wnid if layout == "imagefolder" else "")
        (folder / f"{VAL_KEY}.JPEG").unlink()
        return VAL_KEY
    if layout == "kaggle-zip":
        member = (f"{KAGGLE_DATA}/train/{wnid}/{train_key}.JPEG" if piece == "train image"
                  else f"{KAGGLE_DATA}/val/{VAL_KEY}.JPEG")
        rewrite_zip(source / KAGGLE_ZIP, member)
        return train_key if piece == "train image" else VAL_KEY
    victim = {"hf-imagenet-1k": source / "data/train_images_1.tar.gz", "timm-wds": source / "imagenet1k-train-0001.tar",
              "hf-parquet": max(source.glob("data/train-*.parquet"), default=None)}[layout]
    victim.unlink()
    return victim.name


CASES = [("official", "class", "train"), ("official", "val image", "val"),
         ("imagefolder", "class", "train"), ("imagefolder", "val image", "val"),
         ("kaggle", "class", "train"), ("kaggle", "train image", "train"), ("kaggle", "val image", "val"),
         ("kaggle-zip", "train image", "train"), ("kaggle-zip", "val image", "val"),
         ("hf-imagenet-1k", "archive", "train"), ("timm-wds", "shard", "train"), ("hf-parquet", "file", "train")]


def copy_of(downloads: Path, layout: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(downloads / layout, tmp_path / layout))


def nothing_written(dest: Path) -> bool:
    return not (dest / "manifest.json").exists() and not list(dest.glob("*/*.tar")) and not (dest / WORK_DIR_NAME).exists()


@pytest.mark.parametrize("layout,piece,split", CASES)
def test_a_declared_piece_missing_is_refused_by_name_before_anything_is_written(downloads, images, tmp_path, layout,
                                                                                piece, split):
    source = copy_of(downloads, layout, tmp_path)
    name = remove(layout, piece, source, images)
    dest = tmp_path / "out"
    with pytest.raises(SourceError) as refused:
        prepare(config(source, dest, workers=2))
    message = str(refused.value)
    assert f"the {split} split lacks" in message and name in message and "--allow-partial" in message
    assert "\n" not in message and nothing_written(dest)


@pytest.mark.slow
@pytest.mark.parametrize("layout,piece,split", CASES)
def test_allow_partial_prepares_what_is_there_records_it_and_is_needed_again(downloads, images, tmp_path, layout,
                                                                             piece, split, caplog):
    source = copy_of(downloads, layout, tmp_path)
    name = remove(layout, piece, source, images)
    dest = tmp_path / "out"
    manifest = prepare(config(source, dest, workers=2, allow_partial=True))
    assert list(manifest.partial) == [split] and name in manifest.partial[split]
    assert read_manifest(dest).partial == manifest.partial
    full = {"train": len(images.train), "val": len(images.val)}
    assert manifest.splits[split].samples < full[split]
    assert manifest.splits["train" if split == "val" else "val"].samples == full["train" if split == "val" else "val"]
    with pytest.raises(PrepareError, match="holds a partial dataset, prepared with --allow-partial .*Rerun with "
                                           "--allow-partial to use it as it is, or complete the download"):
        prepare(config(source, dest, workers=2))
    caplog.set_level(logging.INFO)
    prepare(config(source, dest, workers=2, allow_partial=True))
    assert "nothing to do" in caplog.text and "holds a partial dataset" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("layout,piece", [("timm-wds", "shard"), ("kaggle-zip", "val image")])
def test_two_nodes_sharing_the_read_refuse_alike_and_allow_partial_alike(downloads, images, tmp_path, layout, piece):
    from test_shared_read import errors_in, finish, start_nodes

    source = copy_of(downloads, layout, tmp_path)
    name = remove(layout, piece, source, images)
    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(source, dests, workers=2))
    assert [code for code, _ in results] == [2, 2], results
    for dest, (_, log) in zip(dests, results):
        errors = errors_in(log)
        assert len(errors) == 1 and name in errors[0] and "--allow-partial" in errors[0], log
        assert nothing_written(dest)
    results = finish(start_nodes(source, dests, "--allow-partial", workers=2))
    assert [code for code, _ in results] == [0, 0], results
    one_node = prepare(config(source, tmp_path / "one", allow_partial=True))
    for dest in dests:
        assert read_manifest(dest).partial == one_node.partial and name in str(one_node.partial)
        assert tree_bytes(dest) == tree_bytes(tmp_path / "one")


# ---------------------------------------------------------------- what only reading counts, more than declared, nothing declared

def test_a_val_archive_short_of_the_devkit_is_refused_after_val_is_read_before_train(downloads, images, tmp_path,
                                                                                     monkeypatch):
    """The hub's val archive is one gzip stream: only reading counts it. Val is read before train, so
    the shortfall shows before train's hours."""
    from prepare import builder

    source = copy_of(downloads, "hf-imagenet-1k", tmp_path)
    shutil.copy(downloads / "official" / DEVKIT, source)
    archive = source / "data" / "val_images.tar.gz"
    import gzip
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive.read_bytes()))) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()][1:]
    archive.write_bytes(tar_bytes(members, gz=True))
    read = []
    real = builder.account_split
    monkeypatch.setattr(builder, "account_split", lambda source, split, *a, **k: read.append(split) or real(source, split, *a, **k))
    with pytest.raises(SourceError, match="the val split yielded 29 of the 30 images the devkit's ground truth "
                                          "declares.*--allow-partial"):
        prepare(config(source, tmp_path / "out"))
    assert read == ["val"] and nothing_written(tmp_path / "out")
    manifest = prepare(config(source, tmp_path / "partial", allow_partial=True))
    assert manifest.partial == {"val": "the val split yielded 29 of the 30 images the devkit's ground truth declares"}
    assert list(manifest.splits) == ["train", "val"]  # in the dataset's order, whatever the reading order


def test_more_images_than_declared_are_refused_even_with_allow_partial(downloads, tmp_path):
    source = copy_of(downloads, "timm-wds", tmp_path)
    info = json.loads((source / "_info.json").read_text())
    info["splits"]["validation"]["num_samples"] -= 1
    info["splits"]["validation"]["shard_lengths"] = None
    (source / "_info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match="the val split holds 30 images, _info.json declares 29: they do not belong "
                                          "together"):
        prepare(config(source, tmp_path / "out", allow_partial=True))


def test_where_nothing_declares_a_count_unlike_imagenet_1ks_is_a_warning_in_the_manifest(downloads, images, tmp_path,
                                                                                      monkeypatch, caplog):
    """A bare extracted tree (no devkit, no class list) declares nothing: its counts are held against
    ImageNet-1k's, here made the sample's size, with one val image gone."""
    source = copy_of(downloads, "imagefolder", tmp_path)
    (source / DEVKIT).unlink()
    val_wnid = next(w for key, w, _ in images.val if key == VAL_KEY)
    (source / "val" / val_wnid / f"{VAL_KEY}.JPEG").unlink()
    monkeypatch.setattr(completeness, "IMAGENET_1K_CLASSES", len(images.classes))
    monkeypatch.setattr(completeness, "IMAGENET_1K_IMAGES", {"train": len(images.train), "val": len(images.val)})
    manifest = prepare(config(source, tmp_path / "out"))
    assert manifest.partial == {} and list(manifest.warnings) == ["val"]
    assert manifest.warnings["val"].startswith(f"the val split holds {len(images.val) - 1} images where ImageNet-1k's "
                                               f"holds {len(images.val)}, and nothing in the download declares its count")
    assert "recorded in the manifest's \"warnings\"" in caplog.text


def test_a_split_with_nothing_there_is_refused_even_with_allow_partial_by_the_cli(downloads, tmp_path):
    source = copy_of(downloads, "timm-wds", tmp_path)
    for shard in source.glob("imagenet1k-validation-*.tar"):
        shard.unlink()
    with pytest.raises(SourceError, match="the val split lacks 2 of the 2 shards .*nothing of the val split is there"):
        prepare(config(source, tmp_path / "out", allow_partial=True))


# ---------------------------------------------------------------- val sorted into <wnid>/ folders (valprep.sh)

def valprep(source: Path, labels: dict[str, str], val: str) -> None:
    """What PyTorch's examples' valprep.sh does: val/<image> -> val/<wnid>/<image>."""
    for image in sorted((source / val).glob("*.JPEG")):
        (source / val / labels[image.stem]).mkdir(exist_ok=True)
        image.rename(source / val / labels[image.stem] / image.name)


@pytest.mark.parametrize("layout", ["kaggle", "kaggle-zip"])
def test_kaggle_val_sorted_into_wnid_folders_prepares_as_flat_val(downloads, images, tmp_path, layout):
    labels = {key: wnid for key, wnid, _ in images.val}
    source = copy_of(downloads, "kaggle", tmp_path)
    valprep(source, labels, f"{KAGGLE_DATA}/val")
    if layout == "kaggle-zip":
        zipped = tmp_path / "zip" / KAGGLE_ZIP
        zipped.parent.mkdir()
        shutil.make_archive(str(zipped.with_suffix("")), "zip", source)
        source = zipped
    assert open_source(source).layout == layout
    prepare(config(source, tmp_path / "sorted"))
    prepare(config(downloads / "kaggle", tmp_path / "flat"))
    assert tree_bytes(tmp_path / "sorted") == tree_bytes(tmp_path / "flat")


def test_a_val_image_in_another_classes_folder_or_beside_the_folders_is_refused(downloads, images, tmp_path):
    labels = {key: wnid for key, wnid, _ in images.val}
    source = copy_of(downloads, "kaggle", tmp_path)
    val = source / KAGGLE_DATA / "val"
    valprep(source, labels, f"{KAGGLE_DATA}/val")
    other = next(w for w in sorted(set(labels.values())) if w != labels[VAL_KEY])
    (val / labels[VAL_KEY] / f"{VAL_KEY}.JPEG").rename(val / other / f"{VAL_KEY}.JPEG")
    with pytest.raises(LabelError, match=f"{VAL_KEY}.JPEG: in the folder {other}/, but LOC_val_solution.csv says "
                                         f"{labels[VAL_KEY]}"):
        prepare(config(source, tmp_path / "out"))
    (val / other / f"{VAL_KEY}.JPEG").rename(val / f"{VAL_KEY}.JPEG")
    with pytest.raises(SourceError, match="holds 1 images beside 6 <wnid>/ folders: sort all of them"):
        open_source(source)


def test_a_train_image_the_kaggle_list_does_not_name_is_refused(downloads, images, tmp_path):
    source = copy_of(downloads, "kaggle", tmp_path)
    wnid = second_class(images)
    shutil.copy(source / KAGGLE_DATA / "train" / wnid / f"{images.train[40][0]}.JPEG",
                source / KAGGLE_DATA / "train" / wnid / f"{wnid}_999999.JPEG")
    with pytest.raises(LabelError, match=f"{wnid}_999999.JPEG: in the folder {wnid}/, but "
                                         "ILSVRC/ImageSets/CLS-LOC/train_cls.txt does not list it"):
        open_source(source)


@pytest.mark.slow
def test_a_loader_on_a_partial_dataset_says_so_on_rank_0(downloads, images, tmp_path, caplog):
    from train import ImageNetLoader

    source = copy_of(downloads, "timm-wds", tmp_path)
    name = remove("timm-wds", "shard", source, images)
    prepare(config(source, tmp_path / "out", allow_partial=True))
    caplog.set_level(logging.WARNING, logger="train")
    for rank in (1, 0):
        with ImageNetLoader(tmp_path / "out", "val", batch_size=4, image_size=32, device="cpu", workers=1, rank=rank,
                            world_size=2):
            pass
        said = [r.getMessage() for r in caplog.records if r.name == "train" and "--allow-partial" in r.getMessage()]
        assert len(said) == (rank == 0) and (not said or name in said[0])


# ---------------------------------------------------------------- the review's cases

@pytest.mark.slow
def test_a_partial_tree_completed_since_is_rebuilt_with_force(downloads, images, tmp_path):
    """A tree's identity is its path: completing it changes none, so --force (not a refusal) rebuilds."""
    source = copy_of(downloads, "kaggle", tmp_path)
    wnid = second_class(images)
    shutil.move(source / KAGGLE_DATA / "train" / wnid, tmp_path / "aside")
    prepare(config(source, tmp_path / "out", allow_partial=True))
    shutil.move(tmp_path / "aside", source / KAGGLE_DATA / "train" / wnid)
    with pytest.raises(PrepareError, match="holds a partial dataset"):
        prepare(config(source, tmp_path / "out"))
    rebuilt = prepare(config(source, tmp_path / "out", force=True))
    assert rebuilt.partial == {} and rebuilt.splits["train"].samples == len(images.train)


def test_a_short_val_with_real_labels_is_named_as_missing_and_allow_partial_keeps_the_sets_there(downloads, images,
                                                                                                 tmp_path):
    source = copy_of(downloads, "kaggle", tmp_path)
    (source / KAGGLE_DATA / "val" / f"{VAL_KEY}.JPEG").unlink()
    real = tmp_path / "real.json"
    real.write_text(json.dumps([[0]] * len(images.val)))
    with pytest.raises(SourceError, match=f"the val split lacks 1 of the {len(images.val)} images "
                                          f"LOC_val_solution.csv lists \\({VAL_KEY}\\)"):
        prepare(config(source, tmp_path / "out", real_labels=real))
    manifest = prepare(config(source, tmp_path / "out", real_labels=real, allow_partial=True))
    assert manifest.real_labels["images"] == len(images.val) - 1


def test_text_files_are_utf8_on_disk_and_in_the_zip_alike(downloads, tmp_path):
    source = copy_of(downloads, "kaggle", tmp_path)
    mapping = source / "LOC_synset_mapping.txt"
    mapping.write_bytes(mapping.read_bytes().replace(b"tench", b"t\xe9nch"))
    with pytest.raises(SourceError, match="LOC_synset_mapping.txt is not UTF-8 text"):
        open_source(source)
    zipped = tmp_path / KAGGLE_ZIP
    shutil.make_archive(str(zipped.with_suffix("")), "zip", source)
    with pytest.raises(SourceError, match=f"{zipped}:LOC_synset_mapping.txt is not UTF-8 text"):
        open_source(zipped)


def test_a_train_image_in_another_classes_folder_than_kaggles_list_says_is_refused(downloads, images, tmp_path):
    source = copy_of(downloads, "kaggle", tmp_path)
    train = source / KAGGLE_DATA / "train"
    first, second = sorted(wnid for wnid, _, _ in images.classes)[:2]
    moved = next(key for key, wnid, _ in images.train if wnid == first)
    (train / first / f"{moved}.JPEG").rename(train / second / f"{moved}.JPEG")
    with pytest.raises(LabelError, match=f"{moved}.JPEG: in the folder {second}/, but "
                                         f"ILSVRC/ImageSets/CLS-LOC/train_cls.txt says {first}"):
        open_source(source)


@pytest.mark.parametrize("count,listed,declared", [(1000, 1000, True), (999, 1000, True), (900, 1000, True),
                                                   (899, 1000, False), (100, 1000, False), (0, 1000, False)])
def test_a_tree_of_nearly_all_imagenet_1ks_classes_is_declared_by_the_built_in_table(count, listed, declared):
    from prepare.labels import builtin_class_names
    from prepare.sources.imagefolder import mostly_imagenet_1k

    wnids = list(builtin_class_names())[:count]
    assert mostly_imagenet_1k(wnids + ["other", "n99999999"][:1]) == declared  # a folder not a wnid: ignored
    assert not mostly_imagenet_1k(wnids + ["n99999999"])  # a class of another dataset: not ImageNet-1k


def test_a_class_folder_missing_from_a_bare_imagenet_1k_tree_is_named_not_shifted(downloads, images, tmp_path,
                                                                                  monkeypatch):
    """Without a devkit or class list, a tree of (nearly) ImageNet-1k's classes is declared by the built-in
    table: here that table is made the sample's classes and one more, absent."""
    from prepare.sources import imagefolder as trees

    source = copy_of(downloads, "imagefolder", tmp_path)
    (source / DEVKIT).unlink()
    table = {wnid: words for wnid, words, _ in sorted(images.classes)} | {"n15075141": "toilet tissue"}
    monkeypatch.setattr(trees, "builtin_class_names", lambda: table)
    monkeypatch.setattr(trees, "MOSTLY", 0.8)
    with pytest.raises(SourceError, match="the train split lacks 1 of the 7 class folders ImageNet-1k's class table "
                                          "lists \\(train/n15075141/\\)"):
        prepare(config(source, tmp_path / "out"))


@pytest.mark.parametrize("numbers,script,imagenet_1k,missing", [
    ([0, 1, 2, 3], None, True, ("train_images_4.tar.gz",)),  # ILSVRC's own 5
    ([0, 1, 2, 3], None, False, ()),  # another class list: the numbering alone
    ([0, 2], 3, True, ("train_images_1.tar.gz",)),  # the script says
])
def test_ilsvrcs_train_archives_without_the_script_are_its_five(numbers, script, imagenet_1k, missing, tmp_path):
    from prepare.sources.hf_tars import hf_train_gap

    assert hf_train_gap(numbers, script, tmp_path, imagenet_1k).missing == missing


def test_timms_shards_without_info_json_are_its_1024_and_64(tmp_path):
    from prepare.sources.timm_wds import WdsSplit, wds_gap

    present = WdsSplit(tuple(f"imagenet1k-train-{n:04d}.tar" for n in range(1023)), None, None)
    assert wds_gap(tmp_path, present, info=False, known=1024).missing == ("imagenet1k-train-1023.tar",)
    assert wds_gap(tmp_path, present, info=False).missing == ()


def test_a_split_of_no_images_without_a_declared_gap_says_so(downloads, tmp_path):
    source = copy_of(downloads, "timm-wds", tmp_path)
    info = json.loads((source / "_info.json").read_text())
    info["splits"]["validation"]["shard_lengths"] = [0, 0]
    info["splits"]["validation"]["num_samples"] = 0
    (source / "_info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match="^the val split holds no images: nothing of the val split is there"):
        prepare(config(source, tmp_path / "out"))
