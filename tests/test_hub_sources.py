"""The Hugging Face hub's two ImageNet layouts as sources (ILSVRC/imagenet-1k's gzipped tars,
timm/imagenet-1k-wds's WebDataset shards): the same small ImageNet prepared from them and from the
official archives gives the same dataset; their counts, names and class lists are checked; damaged
archives and shards are named in one line; the built-in class table."""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import webdataset as wds

from conftest import SHARD_MB, config, tree_bytes
from prepare.builder import prepare
from prepare.config import PrepareError
from prepare.completeness import shortfall
from prepare.labels import LabelError, builtin_class_names, parse_class_list
from prepare.sources import LAYOUTS, detect, open_source
from prepare.sample import REAL_CLASSES, SampleSpec, make_sample, tar_bytes, write_hf_imagenet, write_timm_wds
from prepare.sources.base import SourceError
from shards.manifest import read_manifest

HUB = ("hf-imagenet-1k", "timm-wds")


@pytest.fixture(scope="module")
def hub_sources(tmp_path_factory, images, sources) -> dict[str, Path]:
    """The session's sample ImageNet in both hub layouts, beside the official one."""
    root = tmp_path_factory.mktemp("hub")
    write_hf_imagenet(root / "hf-imagenet-1k", images)
    write_timm_wds(root / "timm-wds", images)
    return {"official": sources["official"], **{layout: root / layout for layout in HUB}}


@pytest.fixture(scope="module")
def hub_prepared(hub_sources, tmp_path_factory) -> dict[str, Path]:
    dests = {}
    for layout in HUB:
        dests[layout] = tmp_path_factory.mktemp(layout) / "imagenet"
        prepare(config(hub_sources[layout], dests[layout]))
    return dests


def copy_source(hub_sources, layout: str, tmp_path: Path) -> Path:
    copy = tmp_path / layout
    shutil.copytree(hub_sources[layout], copy)
    return copy


def samples_of(dest: Path) -> dict[str, dict[str, tuple[bytes, bytes, bytes]]]:
    """split -> key -> (.cls, .jpg, .json) of every sample of a prepared dataset."""
    manifest = read_manifest(dest)
    return {split: {s["__key__"]: (s["cls"], s["jpg"], s["json"])
                    for shard in manifest.splits[split].shards
                    for s in wds.WebDataset(str(dest / shard.name), shardshuffle=False)}
            for split in ("train", "val")}


# ---------------------------------------------------------------- the same ImageNet from every layout

def wnid_samples(dest: Path) -> dict[str, dict[str, tuple[str, bytes]]]:
    """split -> key -> (wnid, .jpg) of every sample: what stays the same whatever the class table."""
    return {split: {key: (json.loads(meta)["wnid"], jpg) for key, (_, jpg, meta) in samples.items()}
            for split, samples in samples_of(dest).items()}


def test_ilsvrcs_archives_give_the_official_layouts_classes_labels_and_samples(hub_prepared, prepared, images):
    official = read_manifest(prepared)
    expected = samples_of(prepared)
    truth = {wnid: i for i, wnid in enumerate(sorted(w for w, _, _ in images.classes))}
    assert {k: int(v[0]) for k, v in expected["val"].items()} == {k: truth[w] for k, w, _ in images.val}
    manifest = read_manifest(hub_prepared["hf-imagenet-1k"])
    assert manifest.source["layout"] == "hf-imagenet-1k"
    assert manifest.classes == official.classes  # indices, wnids and words
    assert samples_of(hub_prepared["hf-imagenet-1k"]) == expected  # keys, labels, JPEG bytes and metadata, per split
    assert manifest.converted == official.converted and manifest.damaged == official.damaged == {}
    assert {s: manifest.splits[s].samples for s in ("train", "val")} == {"train": 180, "val": 30}


def test_timms_shards_without_a_class_list_give_the_official_samples_as_tfds_stored_them(hub_prepared, prepared):
    """timm/imagenet-1k-wds as TensorFlow Datasets wrote it: ImageNet-1k's 1000 classes from the built-in
    table (no class list beside), the official keys and wnids, and the official bytes but for the images
    TFDS re-encoded (CMYK, the PNG), which prepare then has nothing to convert."""
    official, timm = read_manifest(prepared), read_manifest(hub_prepared["timm-wds"])
    assert [(c.wnid, c.name) for c in timm.classes] == list(builtin_class_names().items())
    expected, got = wnid_samples(prepared), wnid_samples(hub_prepared["timm-wds"])
    reencoded = {key for key, note in official.converted.items() if not note.startswith("L JPEG")}
    assert reencoded and set(timm.converted) == set(official.converted) - reencoded
    for split in ("train", "val"):
        assert {k: wnid for k, (wnid, _) in got[split].items()} == {k: wnid for k, (wnid, _) in expected[split].items()}
        assert {k: jpg for k, (_, jpg) in got[split].items() if k not in reencoded} == {
            k: jpg for k, (_, jpg) in expected[split].items() if k not in reencoded}


def test_with_as_many_shards_every_layout_writes_byte_identical_shards(hub_sources, tmp_path, monkeypatch):
    """The shard count follows the source's bytes (gzip and the WebDataset members change them), so by
    default the hub layouts deal the same samples into another number of shards; with the same number,
    every shard file is the same, byte for byte."""
    import prepare.builder as builder

    monkeypatch.setattr(builder, "shard_count", lambda split_bytes, shard_bytes: 5)
    trees = {}
    for layout in ("official", "hf-imagenet-1k"):
        prepare(config(hub_sources[layout], tmp_path / layout))
        trees[layout] = tree_bytes(tmp_path / layout)
    assert len(trees["official"]) == 10
    assert trees["hf-imagenet-1k"] == trees["official"]


def test_the_data_folder_itself_is_a_source_with_classes_py_from_its_parent(hub_sources, hub_prepared, tmp_path):
    data = hub_sources["hf-imagenet-1k"] / "data"
    assert detect(data).name == "hf-imagenet-1k"
    assert open_source(data).classes[0].name == "tench, Tinca tinca"  # ../classes.py
    assert [f["path"] for f in detect(data).identity()["files"]] == [
        "train_images_0.tar.gz", "train_images_1.tar.gz", "val_images.tar.gz", "../classes.py", "../imagenet-1k.py"]
    prepare(config(data, tmp_path / "out"))
    assert tree_bytes(tmp_path / "out") == tree_bytes(hub_prepared["hf-imagenet-1k"])


def test_fingerprints_name_the_archives_shards_and_class_lists(hub_sources):
    hf = detect(hub_sources["hf-imagenet-1k"]).identity()
    assert [f["path"] for f in hf["files"]] == [
        "data/train_images_0.tar.gz", "data/train_images_1.tar.gz", "data/val_images.tar.gz", "classes.py",
        "imagenet-1k.py"]  # the test archive is not read
    timm = detect(hub_sources["timm-wds"]).identity()
    assert [f["path"] for f in timm["files"]] == [
        "imagenet1k-train-0000.tar", "imagenet1k-train-0001.tar", "imagenet1k-train-0002.tar",
        "imagenet1k-validation-00.tar", "imagenet1k-validation-01.tar", "_info.json"]
    assert all(f["size"] > 0 and f["mtime_ns"] > 0 for f in hf["files"] + timm["files"])


@pytest.mark.parametrize("layout", HUB)
def test_a_rerun_does_nothing_and_a_changed_archive_asks_for_force(hub_sources, tmp_path, layout, caplog):
    caplog.set_level(logging.INFO)
    source = copy_source(hub_sources, layout, tmp_path)
    dest = tmp_path / "imagenet"
    prepare(config(source, dest))
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*.tar")}
    prepare(config(source, dest))
    assert "nothing to do" in caplog.text
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*.tar")} == before
    victim = source / {"hf-imagenet-1k": "data/val_images.tar.gz", "timm-wds": "imagenet1k-validation-00.tar"}[layout]
    os.utime(victim, ns=(0, 10**18))
    with pytest.raises(PrepareError, match=f"was prepared differently: .*{victim.name}.*--force"):
        prepare(config(source, dest))


def test_the_sample_writers_rewrite_the_same_bytes(tmp_path):
    spec = SampleSpec(classes=4, train_per_class=2, val_per_class=1, max_width=64)
    for out in ("a", "b"):
        for layout in HUB:
            make_sample(tmp_path / out / layout, layout, spec)
    for layout in HUB:
        files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a" / layout).rglob("*") if p.is_file())
        assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_the_loader_reads_a_dataset_prepared_from_the_hub(hub_prepared, images):
    from train import ImageNetLoader

    for layout in HUB:
        truth = {c.wnid: c.index for c in read_manifest(hub_prepared[layout]).classes}
        with ImageNetLoader(hub_prepared[layout], "val", batch_size=4, image_size=32, device="cpu", workers=1) as val:
            labels = [label for _, batch in val for label in batch.tolist()]
        assert sorted(labels) == sorted(truth[wnid] for _, wnid, _ in images.val)


# ---------------------------------------------------------------- the layouts, detected; the class tables

def test_no_layout_lists_every_layout_with_what_each_needs(tmp_path):
    with pytest.raises(SourceError) as refused:
        detect(tmp_path).name
    message = str(refused.value)
    for needed in ("ILSVRC2012_img_train.tar", "train/<wnid>/*.JPEG", "LOC_val_solution.csv",
                   "imagenet-object-localization-challenge.zip", "data/train_images_0.tar.gz",
                   "data/val_images.tar.gz", "classes.py", "data/train-NNNNN-of-NNNNN.parquet", "imagenet1k-train-*.tar",
                   "imagenet1k-validation-*.tar", "_info.json", "imagenet12k-train-*.tar", "imagenet22k-validation-*.tar"):
        assert needed in message
    assert message.count("\n  ") == len(LAYOUTS)  # a line each


def test_the_built_in_table_is_imagenet_1k_sorted_and_agrees_with_the_sample():
    names = builtin_class_names()
    assert len(names) == len(set(names)) == 1000 and list(names) == sorted(names)
    assert all(names[wnid] == words for wnid, words in REAL_CLASSES)
    assert names["n01440764"] == "tench, Tinca tinca" and list(names)[-1] == "n15075141"
    with pytest.raises(LabelError, match="line 2: expected 'wnid<TAB>words'"):
        parse_class_list("# a comment\nn01440764 tench\n", "list")


def test_classes_py_is_read_as_text_and_never_run(hub_sources, tmp_path):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    marker = tmp_path / "it-ran"
    original = (source / "classes.py").read_text()
    (source / "classes.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
                                       f"{original}raise SystemExit('classes.py was run')\n")
    prepare(config(source, tmp_path / "out"))
    assert not marker.exists()
    assert read_manifest(tmp_path / "out").classes[3].name == "Shetland sheepdog, Shetland sheep dog, Shetland"


@pytest.mark.parametrize("edit,message", [
    (lambda text: text.replace('"n01440764"', '"n99999999"'), r"numbers its classes in an order other than sorted "
                                                              r"wnids \(class 0 is n99999999 there, n01443537 here\)"),
    (lambda text: text.replace("OrderedDict(", "make_classes("), "is not a literal OrderedDict"),
    (lambda text: text.replace('"n01443537"', '"n01440764"'), "lists n01440764 twice"),
    (lambda text: text.replace("IMAGENET2012_CLASSES", "CLASSES"), "assigns no IMAGENET2012_CLASSES"),
    (lambda text: text + "(", "is not Python source"),
])
def test_a_classes_py_that_is_out_of_order_or_not_a_literal_is_refused(hub_sources, tmp_path, edit, message):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    (source / "classes.py").write_text(edit((source / "classes.py").read_text()))
    with pytest.raises(LabelError, match=message):
        open_source(source)


@pytest.mark.parametrize("layout, name", [("hf-imagenet-1k", "classes.py"), ("timm-wds", "_info.json")])
def test_a_small_file_of_a_hub_download_that_is_not_utf8_is_named_in_one_line(hub_sources, tmp_path, layout, name):
    source = copy_source(hub_sources, layout, tmp_path)
    with open(source / name, "ab") as file:
        file.write(b"# caf\xe9\n")
    with pytest.raises(SourceError, match=f"{name} is not UTF-8 text .*: it is damaged, download it again"):
        prepare(config(source, tmp_path / "out"))


@pytest.mark.parametrize("layout, name", [("hf-imagenet-1k", "data/train_images_1.tar.gz"),
                                          ("timm-wds", "imagenet1k-train-0001.tar")])
def test_a_link_whose_file_is_gone_is_named_in_one_line(hub_sources, tmp_path, layout, name):
    """A hub cache whose blob was removed, or a snapshot folder copied without its blobs/: a link to nothing
    (timm's layout names it a shard missing, as _info.json lists it)."""
    source = copy_source(hub_sources, layout, tmp_path)
    (source / name).unlink()
    (source / name).symlink_to(tmp_path / "blobs" / "gone")
    said = {"hf-imagenet-1k": f"{source / name} is a link to {tmp_path / 'blobs' / 'gone'}, which is not there",
            "timm-wds": "the train split lacks 1 of the 3 shards _info.json lists (imagenet1k-train-0001.tar)"}
    with pytest.raises(SourceError) as refusal:
        prepare(config(source, tmp_path / "out"))
    assert str(refusal.value).startswith(said[layout])


def test_without_a_class_list_the_built_in_table_is_used(hub_sources, tmp_path):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    (source / "classes.py").unlink()
    classes = open_source(source).classes
    assert len(classes) == 1000 and classes[0].wnid == "n01440764" and classes[999].name == "toilet tissue, " \
        "toilet paper, bathroom tissue"
    # the sample's classes are real ones: their labels are now their places among the 1000
    prepare(config(source, tmp_path / "out"))
    labels = {int(cls) for cls, _, _ in samples_of(tmp_path / "out")["val"].values()}
    names = list(builtin_class_names())
    assert labels == {names.index(wnid) for wnid, _ in REAL_CLASSES[:6]}


# ---------------------------------------------------------------- ILSVRC/imagenet-1k: names, classes, archives

def gz_members(path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path, "r:gz") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def rewrite_gz(path: Path, edit) -> None:
    path.write_bytes(tar_bytes(edit(gz_members(path)), gz=True))


@pytest.mark.parametrize("name,message", [
    ("n01440764_77_n09999999.JPEG", "class n09999999 \\(from the name\\) is not in the class table"),
    ("n01440764_77.JPEG", "does not follow ILSVRC/imagenet-1k's rule <image>_<wnid>.JPEG"),
    ("n01440764_77_tench.JPEG", "does not follow ILSVRC/imagenet-1k's rule"),
])
def test_a_member_with_an_unknown_wnid_or_off_the_naming_rule_is_named(hub_sources, images, tmp_path, name,
                                                                       message):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    archive = source / "data" / "train_images_1.tar.gz"
    rewrite_gz(archive, lambda members: members + [(name, images.train[0][2])])
    with pytest.raises(SourceError, match=f"{archive}:{name}: .*{message}") as refused:
        prepare(config(source, tmp_path / "out", workers=2))
    assert "\n" not in str(refused.value)


def test_names_in_a_folder_inside_the_archive_are_read_by_their_base_name(hub_sources, hub_prepared, tmp_path):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    rewrite_gz(source / "data" / "val_images.tar.gz", lambda members: [(f"val/{n}", d) for n, d in members])
    prepare(config(source, tmp_path / "out"))
    assert samples_of(tmp_path / "out") == samples_of(hub_prepared["hf-imagenet-1k"])


def test_the_train_archives_the_script_reads_or_their_numbering_declare(hub_sources, tmp_path):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    (source / "data" / "train_images_1.tar.gz").unlink()
    assert shortfall(open_source(source).declared("train")) == (
        "the train split lacks 1 of the 2 train archives imagenet-1k.py lists (train_images_1.tar.gz)")
    (source / "imagenet-1k.py").unlink()
    (source / "data" / "train_images_0.tar.gz").rename(source / "data" / "train_images_1.tar.gz")
    assert shortfall(open_source(source).declared("train")) == (
        "the train split lacks 1 of the 2 train archives the numbering of the files present lists "
        "(train_images_0.tar.gz)")
    (source / "data" / "train_images_1.tar.gz").rename(source / "data" / "train_images_0.tar.gz")
    assert shortfall(open_source(source).declared("train")) is None  # nothing says a second one is missing


def test_an_archive_beyond_the_scripts_count_is_refused(hub_sources, tmp_path):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    shutil.copy(source / "data" / "train_images_1.tar.gz", source / "data" / "train_images_2.tar.gz")
    with pytest.raises(SourceError, match="train_images_2.tar.gz: imagenet-1k.py has train archives 0..1 only"):
        open_source(source)


def test_a_devkit_beside_the_archives_counts_val_and_checks_its_labels(hub_sources, images, tmp_path):
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    shutil.copy(hub_sources["official"] / "ILSVRC2012_devkit_t12.tar.gz", source)
    assert open_source(source).declared("val").images == 30
    prepare(config(source, tmp_path / "out"))
    wrong = next(wnid for wnid, _, _ in images.classes if wnid != images.val[0][1])
    rewrite_gz(source / "data" / "val_images.tar.gz",
               lambda members: [(n.replace(f"_{images.val[0][1]}.", f"_{wrong}.") if i == 0 else n, d)
                                for i, (n, d) in enumerate(members)])
    with pytest.raises(LabelError, match=f"ILSVRC2012_val_00000001_{wrong}.JPEG: the name says {wrong}, the devkit's "
                                         f"ground truth says {images.val[0][1]}"):
        prepare(config(source, tmp_path / "again"))


# ---------------------------------------------------------------- timm/imagenet-1k-wds: counts, labels, samples

def rewrite_shard(path: Path, edit) -> None:
    with tarfile.open(path) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    path.write_bytes(tar_bytes(edit(members)))


def edit_info(source: Path, edit) -> None:
    info = json.loads((source / "_info.json").read_text())
    edit(info["splits"])
    (source / "_info.json").write_text(json.dumps(info))


def test_info_json_states_the_counts_and_a_shard_that_disagrees_is_named(hub_sources, tmp_path):
    source = copy_source(hub_sources, "timm-wds", tmp_path)
    opened = open_source(source)
    assert [(d.images, d.found, shortfall(d)) for d in map(opened.declared, ("train", "val"))] == [
        (180, 180, None), (30, 30, None)]
    assert [part.count for part in opened.parts("train")] == [60, 60, 60]

    def one_more_in_the_second_shard(splits):
        splits["train"]["shard_lengths"][1] += 1
        splits["train"]["num_samples"] += 1

    edit_info(source, one_more_in_the_second_shard)
    with pytest.raises(SourceError, match=f"{source / 'imagenet1k-train-0001.tar'} holds 60 samples, _info.json says "
                                          "61: the shard is incomplete"):
        prepare(config(source, tmp_path / "out", workers=2))
    edit_info(source, lambda splits: splits["validation"].update(num_samples=29))
    with pytest.raises(SourceError, match="splits.validation: num_samples is 29, shard_lengths add up to 30: the file "
                                          "contradicts itself"):
        open_source(source)
    (source / "_info.json").unlink()  # then the shards present, without counts
    assert open_source(source).declared("train").images is None


def test_a_shard_missing_is_named_by_info_json_or_the_numbering(hub_sources, tmp_path):
    source = copy_source(hub_sources, "timm-wds", tmp_path)
    (source / "imagenet1k-validation-01.tar").unlink()
    declared = open_source(source).declared("val")
    assert shortfall(declared) == ("the val split lacks 1 of the 2 shards _info.json lists "
                                   "(imagenet1k-validation-01.tar); 15 of the 30 images _info.json declares (15 are "
                                   "there)")
    (source / "_info.json").unlink()  # then timm's own 1024 and 64 (the classes are ImageNet-1k's): the sample has 3
    (source / "imagenet1k-train-0001.tar").unlink()
    assert shortfall(open_source(source).declared("train")) == (
        "the train split lacks 1,022 of the 1,024 shards timm/imagenet-1k-wds's layout lists (imagenet1k-train-0001.tar, "
        "imagenet1k-train-0003.tar, imagenet1k-train-0004.tar and 1019 more)")


def drop_member(suffix: str, sample: int = 3):
    def edit(members):
        name = [n for n, _ in members if n.endswith(suffix)][sample]
        return [(n, d) for n, d in members if n != name]
    return edit


def replace_member(suffix: str, data: bytes, sample: int = 3):
    def edit(members):
        name = [n for n, _ in members if n.endswith(suffix)][sample]
        return [(n, data if n == name else d) for n, d in members]
    return edit


def sample_key(shard: Path, sample: int = 3) -> str:
    with tarfile.open(shard) as tar:
        return [m.name for m in tar.getmembers() if m.name.endswith(".jpg")][sample].removesuffix(".jpg")


@pytest.mark.parametrize("edit,message", [
    (drop_member(".cls"), r"the sample has no \.cls \(its class number\)"),
    (drop_member(".jpg"), r"the sample has no \.jpg \(its image\)"),
    (replace_member(".cls", b"1000"), r"\.cls b'1000' is not a class index of the class table \(0..999\)"),
    (replace_member(".cls", b"x1"), r"\.cls b'x1' is not a class index"),
    (replace_member(".json", b"[1"), r"its \.json is not a JSON object"),
])
def test_a_sample_without_its_image_or_label_or_with_a_bad_one_is_named(hub_sources, tmp_path, edit, message):
    source = copy_source(hub_sources, "timm-wds", tmp_path)
    shard = source / "imagenet1k-train-0001.tar"
    key = sample_key(shard)
    rewrite_shard(shard, edit)
    with pytest.raises(SourceError, match=f"{shard}:{key}: {message}") as refused:
        prepare(config(source, tmp_path / "out", workers=2))
    assert "\n" not in str(refused.value)


def test_a_label_that_contradicts_the_wnid_in_the_name_is_named(hub_sources, tmp_path):
    source = copy_source(hub_sources, "timm-wds", tmp_path)
    shard = source / "imagenet1k-train-0000.tar"
    key = sample_key(shard, 0)
    with tarfile.open(shard) as tar:
        meta = json.loads(tar.extractfile(f"{key}.json").read())
        label = int(tar.extractfile(f"{key}.cls").read())
    other = (label + 1) % 1000
    rewrite_shard(shard, lambda members: [(n, str(other).encode() if n == f"{key}.cls" else d) for n, d in members])
    stem = meta["filename"].removesuffix(".JPEG")
    with pytest.raises(SourceError, match=f"{shard}:{key}: .cls {other} is n\\d+ in the class table, but the "
                                          f"image's name {stem} says {stem.split('_')[0]}"):
        prepare(config(source, tmp_path / "out"))


def test_without_a_json_filename_the_key_is_the_samples_own(hub_sources, tmp_path):
    source = copy_source(hub_sources, "timm-wds", tmp_path)
    renamed = {}
    for shard in sorted(source.glob("imagenet1k-validation-*.tar")):
        def edit(members):
            out = []
            for n, d in members:
                key, ext = n.split(".", 1)
                renamed.setdefault(key, f"v{len(renamed):03d}")
                out.append((f"{renamed[key]}.{ext}", b'{"label": 0}' if ext == "json" else d))
            return out
        rewrite_shard(shard, edit)
    opened = open_source(source)
    keys = sorted(item.key for part in opened.parts("val") for item in part.items())
    assert keys == sorted(renamed.values()) and len(keys) == 30


# ---------------------------------------------------------------- damaged archives and shards: one line, by the CLI

def flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xA5 for b in data[middle:middle + 16])
    path.write_bytes(bytes(data))


def cut_at_two_thirds(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) * 2 // 3 // 512 * 512])  # a tar cut at a block boundary: the sneaky case


@pytest.mark.parametrize("layout,victim,damage", [
    ("hf-imagenet-1k", "data/train_images_1.tar.gz", flip_middle),
    ("hf-imagenet-1k", "data/train_images_0.tar.gz", cut_at_two_thirds),
    ("hf-imagenet-1k", "data/val_images.tar.gz", lambda path: path.write_bytes(path.read_bytes()[:-3])),
    ("timm-wds", "imagenet1k-train-0002.tar", cut_at_two_thirds),
])
def test_a_damaged_archive_or_shard_stops_prepare_in_one_line_naming_it(hub_sources, tmp_path, run_here, layout,
                                                                        victim, damage):
    from prepare.cli import main

    source = copy_source(hub_sources, layout, tmp_path)
    damage(source / victim)
    dest = tmp_path / "out"
    result = run_here(main, "--source", source, "--dest", dest, "--shard-size", SHARD_MB, "--workers", 2)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and str((source / victim).resolve()) in errors[0], result.stderr
    assert "download it again" in errors[0] and "Traceback" not in result.stderr
    assert not (dest / "manifest.json").exists() and not (dest / ".prepare-tmp").exists()


def test_a_damaged_header_inside_a_shard_is_named_not_taken_for_its_end(hub_sources, tmp_path):
    """tarfile's stream reader ends quietly at a header whose checksum is wrong, as at the end of the
    archive: the samples after it would be lost without a word."""
    source = copy_source(hub_sources, "timm-wds", tmp_path)
    shard = source / "imagenet1k-validation-01.tar"
    with tarfile.open(shard) as tar:
        header = tar.getmembers()[6].offset
    data = bytearray(shard.read_bytes())
    data[header + 20] ^= 0xFF  # in the name field: only the checksum shows it
    shard.write_bytes(bytes(data))
    (source / "_info.json").unlink()  # no count to catch it otherwise (and the sample is 3 of timm's 1024 shards)
    with pytest.raises(SourceError, match=f"{shard} has a damaged tar header at byte {header} of its tar "
                                          "\\(members follow what would be its end, and would be lost\\): copy or "
                                          "download it again"):
        prepare(config(source, tmp_path / "out", allow_partial=True))


def test_a_gzip_stream_is_checked_to_its_end(hub_sources, tmp_path):
    """tarfile stops at the end-of-archive blocks; the rest of the gzip stream (its padding, CRC and
    length) is read too, so damage there is found."""
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    archive = source / "data" / "val_images.tar.gz"
    raw = gzip.decompress(archive.read_bytes())
    damaged = io.BytesIO()
    with gzip.GzipFile(fileobj=damaged, mode="wb", mtime=0) as f:
        f.write(raw)
    data = bytearray(damaged.getvalue())
    data[-8] ^= 1  # the CRC
    archive.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=f"cannot read {archive}: CRC check failed.*download it again"):
        prepare(config(source, tmp_path / "out"))


# ---------------------------------------------------------------- several nodes

@pytest.mark.slow
def test_two_nodes_share_the_read_of_a_hub_source_and_write_a_one_node_prepares_bytes(hub_sources, hub_prepared,
                                                                                      tmp_path):
    from test_shared_read import finish, start_nodes

    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(hub_sources["hf-imagenet-1k"], dests, workers=2))
    assert [code for code, _ in results] == [0, 0], results
    for dest, (_, log) in zip(dests, results):
        assert tree_bytes(dest) == tree_bytes(hub_prepared["hf-imagenet-1k"])
        assert "shared read: 2 of 2 nodes" in log


# ---------------------------------------------------------------- a gzip stream's images prepared in threads

@pytest.mark.parametrize("workers,parts,expected", [(1, 5, 1), (16, 5, 3), (16, 1, 16), (16, 1000, 1), (4, 4, 1),
                                                    (7, 2, 3)])
def test_the_workers_beyond_a_splits_parts_prepare_their_images_in_threads(workers, parts, expected):
    from prepare.scatter import threads_per_part

    assert threads_per_part(workers, parts) == expected


@pytest.mark.slow
def test_threads_in_a_part_change_no_byte_and_a_bad_image_is_named_as_without(hub_sources, hub_prepared, images,
                                                                              tmp_path):
    """hf-imagenet-1k's val is one gzip stream: with 4 workers its images are prepared 4 at once,
    and the shards are those of one worker; a bad image among them stops the run by name."""
    threaded = prepare(config(hub_sources["hf-imagenet-1k"], tmp_path / "threads", workers=4))
    assert tree_bytes(tmp_path / "threads") == tree_bytes(hub_prepared["hf-imagenet-1k"])
    assert threaded.stats["workers"] == 4
    source = copy_source(hub_sources, "hf-imagenet-1k", tmp_path)
    archive = source / "data" / "val_images.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive.read_bytes()))) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    bad = members[len(members) // 2][0]
    members[len(members) // 2] = (bad, b"not a JPEG at all" * 10)
    archive.write_bytes(tar_bytes(members, gz=True))
    with pytest.raises(PrepareError, match=f"{archive}:{bad} does not decode.*--skip-bad"):
        prepare(config(source, tmp_path / "bad", workers=4))
    skipped = prepare(config(source, tmp_path / "skipped", workers=4, skip_bad=True))
    assert list(skipped.skipped) == [bad.rsplit("/", 1)[-1].rsplit(".", 1)[0].rsplit("_", 1)[0]]


def test_a_parts_images_are_prepared_at_once_in_its_threads_and_come_back_in_order(hub_sources, monkeypatch):
    import threading
    import time

    from prepare import scatter
    from prepare.sources import open_source

    source = open_source(hub_sources["hf-imagenet-1k"])
    part = source.parts("val")[0]
    seen, real = [], scatter.prepare_image

    def slow_prepare(data, *args, **kwargs):
        seen.append(threading.get_ident())
        time.sleep(0.01)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(scatter, "prepare_image", slow_prepare)
    job = scatter.PartJob(part, source.class_index(), 4, 0, "/nonexistent", None, 90, 2, threads=4)
    threaded = [(item.key, prepared.data) for item, prepared in scatter.prepared_in_order(job)]
    assert len(set(seen)) == 4
    alone = [(item.key, prepared.data) for item, prepared in scatter.prepared_in_order(
        scatter.PartJob(part, source.class_index(), 4, 0, "/nonexistent", None, 90, 2))]
    assert threaded == alone and [key for key, _ in alone] == [item.key for item in part.items()]


def test_an_unexpected_failure_in_a_parts_thread_is_one_line_naming_the_image(hub_sources, images, tmp_path,
                                                                             monkeypatch):
    from prepare import scatter

    real, victim = scatter.prepare_image, images.val[7][2]

    def fails_on_one(data, *args, **kwargs):
        if data == victim:
            raise RuntimeError("something unexpected")
        return real(data, *args, **kwargs)

    monkeypatch.setattr(scatter, "prepare_image", fails_on_one)  # before the pool forks: the workers have it
    key = images.val[7][0]
    with pytest.raises(PrepareError, match=rf"val_images\.tar\.gz:{key}_n\d{{8}}\.JPEG: RuntimeError: something "
                                           r"unexpected \(a worker failed there\)"):
        prepare(config(hub_sources["hf-imagenet-1k"], tmp_path / "out", workers=4))
    assert not (tmp_path / "out" / ".prepare-tmp").exists()
