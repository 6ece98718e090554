"""Beyond ImageNet-1k: timm's ImageNet-12k and -22k WebDataset downloads, as small fakes with the real
class tables and the real names and structure (shards named as the hub's, _info.json with timm's
alternative 12k splits, samples KEY.jpg/.cls/.json as rwightman/imagenet-12k's writer makes them),
prepared and trained the same way as ImageNet-1k."""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil
import tarfile
from pathlib import Path

import pytest

import warm
from conftest import config, run_module, tree_bytes
from prepare.builder import prepare
from prepare.completeness import shortfall
from prepare.labels import builtin_class_names
from prepare.sources import detect
from prepare.sources.base import SourceError
from shards.manifest import read_manifest
from test_shared_read import manifest_without_run_stats
from tests.jpegs import jpeg
from train.run.metrics import read_metrics

TABLE_22K = list(builtin_class_names("imagenet-22k"))
TABLE_W21 = list(builtin_class_names("imagenet-w21"))
SET_W21 = set(TABLE_W21)  # once, as SET_12K
TABLE_12K = list(builtin_class_names("imagenet-12k"))
SET_12K = set(TABLE_12K)  # once: a set made in each comprehension's test took 8 s of every run's collection
IN_12K = [wnid for wnid in TABLE_22K if wnid in SET_12K]
# train: four classes of 12k (so of 22k) and two of 22k only; val: 12k's classes only, as the hub's
TRAIN_CLASSES = IN_12K[:2] + IN_12K[-2:] + [w for w in TABLE_22K if w not in SET_12K][:2]
VAL_CLASSES = TRAIN_CLASSES[:4]


def sample(wnid: str, n: int, table: list[str], seed: int) -> dict[str, bytes]:
    """A sample as the writer makes it: .cls the index in the sorted table; .json with the 12k label
    (-1 where the class is not in 12k) and the wnid."""
    key = f"{wnid}_{n}"
    meta = {"label": table.index(wnid), "class_name": wnid, "width": 40, "height": 32,
            "label_12k": TABLE_12K.index(wnid) if wnid in TABLE_12K else -1}
    return {"__key__": key, "jpg": jpeg(40, 32, seed=seed % 7), "cls": str(table.index(wnid)).encode(),
            "json": json.dumps(meta).encode()}


def write_tar(path: Path, samples: list[dict[str, bytes]]) -> int:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for s in samples:
            for ext in ("jpg", "cls", "json"):
                if ext in s:
                    info = tarfile.TarInfo(f"{s['__key__']}.{ext}")
                    info.size = len(s[ext])
                    tar.addfile(info, io.BytesIO(s[ext]))
            if "webp" in s:
                info = tarfile.TarInfo(f"{s['__key__']}.webp")
                info.size = len(s["webp"])
                tar.addfile(info, io.BytesIO(s["webp"]))
    return len(samples)


def write_timm(root: Path, prefix: str, table: list[str], per_class: int = 4, train_shards: int = 2,
               classes: list[str] = TRAIN_CLASSES) -> Path:
    """A timm WebDataset download: {prefix}-train-NNNN.tar, {prefix}-validation-NNNN.tar and _info.json
    (with the 12k alternative splits for 22k, as timm's writer lists them)."""
    root.mkdir(parents=True)
    train = [sample(w, n, table, i) for i, (w, n) in enumerate((w, n) for n in range(per_class) for w in classes)]
    val = [sample(w, 100 + n, table, i) for i, (w, n) in enumerate((w, n) for n in range(2) for w in VAL_CLASSES)]
    splits = {}
    for name, samples, count in (("train", train, train_shards), ("validation", val, 1)):
        files = [f"{prefix}-{name}-{i:04d}.tar" for i in range(count)]
        lengths = [write_tar(root / f, samples[i::count]) for i, f in enumerate(files)]
        splits[name] = {"name": name, "filenames": files, "shard_lengths": lengths, "num_samples": sum(lengths),
                        "alt_label": None}
        if prefix == "imagenet22k":
            twelve = [sum(1 for s in samples[i::count] if json.loads(s["json"])["label_12k"] >= 0) for i in range(count)]
            splits[f"{name}_12k"] = {"name": f"{name}_12k", "filenames": files, "shard_lengths": twelve,
                                     "num_samples": sum(twelve), "alt_label": "label_12k"}
    (root / "_info.json").write_text(json.dumps({"name": prefix, "splits": splits}))
    return root


def shard_labels(dest: Path) -> dict[str, dict[str, int]]:
    """split -> key -> label: the .cls of every sample of a prepared dataset's train and val shards."""
    manifest, labels = read_manifest(dest), {}
    for split in ("train", "val"):
        labels[split] = {}
        for shard in manifest.splits[split].shards:
            with tarfile.open(dest / shard.name) as tar:
                for member in tar:
                    if member.name.endswith(".cls"):
                        labels[split][member.name.removesuffix(".cls")] = int(tar.extractfile(member).read())
    return labels


@pytest.fixture(scope="module")
def timm_22k(tmp_path_factory) -> Path:
    return write_timm(tmp_path_factory.mktemp("hub") / "imagenet-22k-wds", "imagenet22k", TABLE_22K)


@pytest.fixture(scope="module")
def prepared_22k(tmp_path_factory, timm_22k) -> Path:
    dest = tmp_path_factory.mktemp("prepared") / "imagenet22k"
    prepare(config(timm_22k, dest, shard_size_mb=0.02))
    return dest


def test_a_22k_manifest_is_written_and_fingerprinted_as_dataclasses_asdict_gives_it(prepared_22k):
    """shards/manifest.py's as_plain, which copies nothing that holds no dataclass, in place of asdict: the same
    JSON to the byte and the same dataset id, for a 22k dataset's 21,841 classes, its 12k subset and a class map."""
    import dataclasses
    import hashlib

    from prepare.labels import class_maps

    manifest = dataclasses.replace(read_manifest(prepared_22k), class_maps=class_maps("imagenet-w21"),
                                   converted={"a": "cmyk"}, damaged={"b": "premature end"})
    assert manifest.num_classes == 21841 and manifest.class_subsets["12k"] and manifest.class_maps["imagenet-22k"]
    assert manifest.to_json() == json.dumps(dataclasses.asdict(manifest), indent=1, sort_keys=True)
    splits = {name: {"samples": split.samples, "bytes": split.bytes,
                     "shards": [{"name": s.name, "samples": s.samples, "bytes": s.bytes} for s in split.shards]}
              for name, split in manifest.splits.items()}
    content = json.dumps([manifest.options, [dataclasses.asdict(c) for c in manifest.classes], splits], sort_keys=True)
    assert manifest.dataset_id() == hashlib.blake2b(content.encode(), digest_size=8).hexdigest()


def test_the_shipped_tables_are_timms_sorted_and_12k_lies_in_22k():
    assert len(TABLE_22K) == 21841 and len(TABLE_12K) == 11821
    assert TABLE_22K == sorted(TABLE_22K) and TABLE_12K == sorted(TABLE_12K)
    assert set(TABLE_12K) <= set(TABLE_22K)
    assert builtin_class_names("imagenet-22k")["n00004475"] == "organism, being"  # timm's lemma, the first wnid


def test_winter21s_own_table_is_22ks_less_2674_classes_and_maps_into_it():
    """#53's first step: winter21's 19,167 synsets (birder's list, Apache-2.0), sorted, each with 22k's words; the
    index of each in 22k's table (the mapping a manifest will record, as 12k's in 22k)."""
    from prepare.labels import indices_in

    w21 = builtin_class_names("imagenet-w21")
    assert len(w21) == 19167 and list(w21) == sorted(w21) and set(w21) <= set(TABLE_22K)
    assert len(set(TABLE_22K) - set(w21)) == 2674
    words_22k = builtin_class_names("imagenet-22k")  # (a copy a call: once, not once a class)
    assert all(w21[wnid] == words_22k[wnid] for wnid in w21)
    in_22k = indices_in("imagenet-w21", "imagenet-22k")
    assert [TABLE_22K[i] for i in in_22k] == list(w21) and in_22k == sorted(in_22k)
    assert in_22k[list(w21).index("n01440764")] == TABLE_22K.index("n01440764")  # tench, in both
    with pytest.raises(Exception, match="2674 classes of imagenet-22k are not in imagenet-w21"):
        indices_in("imagenet-22k", "imagenet-w21")


def test_the_shipped_tables_are_the_installed_timms():
    """prepare ships timm's lists (it does not depend on timm); the test extra installs timm to check them."""
    from importlib.resources import files

    for table, name in (("imagenet-12k", "imagenet12k_synsets.txt"), ("imagenet-22k", "imagenet22k_synsets.txt")):
        assert list(builtin_class_names(table)) == files("timm.data._info").joinpath(name).read_text().split()


def test_22k_is_recognised_with_its_table_and_its_12k_subset(timm_22k):
    detected = detect(timm_22k)
    assert detected.name == "timm-22k-wds"
    source = detected.open()
    assert [c.wnid for c in source.classes] == TABLE_22K
    subset = source.class_subsets()["12k"]
    assert [TABLE_22K[i] for i in subset] == TABLE_12K  # in 12k's own order
    assert source.declared("train").images == 24 and source.declared("val").images == 8
    assert [f["path"] for f in detected.identity()["files"]] == [
        "imagenet22k-train-0000.tar", "imagenet22k-train-0001.tar", "imagenet22k-validation-0000.tar", "_info.json"]


def test_22k_prepares_with_exact_labels_and_records_the_12k_subset(prepared_22k):
    manifest = read_manifest(prepared_22k)
    assert manifest.num_classes == 21841 and manifest.source["layout"] == "timm-22k-wds"
    assert manifest.class_subsets["12k"][:2] == [TABLE_22K.index(w) for w in TABLE_12K[:2]]
    seen = {key: label for labels in shard_labels(prepared_22k).values() for key, label in labels.items()}
    assert len(seen) == 32
    assert all(TABLE_22K[label] == key.split("_")[0] for key, label in seen.items())


@pytest.mark.parametrize("width", [3, 4])
def test_12k_and_22k_val_shards_are_read_whatever_the_width_of_their_number(tmp_path, width):
    """The 12k and 22k val shards are probably -000 to -511 (the writer pads to the count, as the 1k
    set's -00 to -63 show); -0000 is taken too, and a gap is named at the width the download uses."""
    from prepare.sources.timm_wds import IMAGENET_12K, IMAGENET_22K, WdsSplit, wds_gap

    for spec in (IMAGENET_12K, IMAGENET_22K):
        names = [f"{spec.prefix}-validation-{n:0{width}d}.tar" for n in (0, 1, 3)]
        assert all(spec.shard_number().match(name) for name in names)
        for name in names:
            (tmp_path / name).write_bytes(b"")
        gap = wds_gap(tmp_path, WdsSplit(tuple(names), None, None), info=False, known=4, spec=spec)
        assert gap.missing == (f"{spec.prefix}-validation-{2:0{width}d}.tar",), gap


def test_12k_is_its_own_layout_with_11821_classes(tmp_path):
    root = write_timm(tmp_path / "imagenet-12k-wds", "imagenet12k", TABLE_12K, classes=VAL_CLASSES)
    detected = detect(root)
    assert detected.name == "timm-12k-wds"
    source = detected.open()
    assert len(source.classes) == 11821 and source.class_subsets() == {}


def test_12k_with_a_22k_only_class_is_refused_naming_the_tables(tmp_path):
    """12k's table has no index for a 22k-only class: a .cls beyond it (a 22k download renamed) is refused."""
    root = write_timm(tmp_path / "imagenet-12k-wds", "imagenet12k", TABLE_22K)  # 22k's indices under 12k's names
    with pytest.raises(SourceError, match="the class table \\(timm/imagenet-12k-wds's, or the class list beside"):
        prepare(config(root, tmp_path / "out", shard_size_mb=0.02))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_missing_22k_shard_is_named_and_allow_partial_prepares_the_rest(tmp_path, timm_22k):
    root = tmp_path / "hub"
    root.mkdir()
    for path in timm_22k.iterdir():
        (root / path.name).symlink_to(path)
    (root / "imagenet22k-train-0001.tar").unlink()
    assert shortfall(detect(root).open().declared("train")) == (
        "the train split lacks 1 of the 2 shards _info.json lists (imagenet22k-train-0001.tar); 12 of the 24 images "
        "_info.json declares (12 are there)")
    with pytest.raises(SourceError, match="imagenet22k-train-0001.tar"):
        prepare(config(root, tmp_path / "out", shard_size_mb=0.02))
    manifest = prepare(config(root, tmp_path / "out", shard_size_mb=0.02, allow_partial=True))
    assert manifest.splits["train"].samples == 12 and "imagenet22k-train-0001.tar" in manifest.partial["train"]


def test_a_webp_sample_is_refused_naming_the_jpeg_download(tmp_path):
    root = write_timm(tmp_path / "w21-webp", "imagenet22k", TABLE_22K, train_shards=1)
    webp = sample(TRAIN_CLASSES[0], 9, TABLE_22K, 0)
    webp["webp"] = webp.pop("jpg")
    write_tar(root / "imagenet22k-validation-0000.tar", [webp])
    info = json.loads((root / "_info.json").read_text())
    info["splits"]["validation"]["shard_lengths"] = [1]
    info["splits"]["validation"]["num_samples"] = 1
    (root / "_info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match="is WebP .* Prepare its JPEG variant, timm/imagenet-w21-wds, or image-net.org's winter21_whole.tar.gz"):
        prepare(config(root, tmp_path / "out", shard_size_mb=0.02))
    info["name"] = "imagenet_w21_webp"  # its _info.json names it: refused before reading
    (root / "_info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match="WebP"):
        detect(root).open()


@pytest.mark.slow
def test_training_on_22k_classes_reports_the_12k_val_under_its_own_name(prepared_22k, tmp_path):
    result = warm.run("train", "--data", prepared_22k, "--run-dir", tmp_path / "run", "--arch", "resnet18",
                      "--image-size", "32", "--batch-size", "4", "--epochs", "1", "--workers", "1",
                      "--warmup-epochs", "1", "--shuffle-buffer", "16")
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = read_metrics(tmp_path / "run")
    assert record["val_images"] == record["val_12k_images"] == 8  # every val image is of a 12k class
    assert 0 <= record["val_12k_top1"] <= record["val_12k_top5"] <= 100
    assert record["val_12k_top1"] >= record["val_top1"]  # among fewer classes: never worse
    assert "val among 12k's classes" in result.stderr + result.stdout


# ---------------------------------------------------------------- image-net.org's full releases

FULL_CLASSES = TABLE_22K[:3] + TABLE_22K[-2:]  # ImageNet-22k's first and last synsets
PER_CLASS = {wnid: 4 + i for i, wnid in enumerate(FULL_CLASSES)}  # 4..8 images


def class_tar(wnid: str, count: int, tiny: bool = False) -> bytes:
    """`count` images (and with `tiny`, one more of 20 x 20 px, which the full releases leave out)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for n in reversed(range(count + tiny)):  # not in name order: the held-out rule sorts
            data = jpeg(20, 20) if n == count else jpeg(40, 32, seed=n % 7)
            info = tarfile.TarInfo(f"{wnid}_{n + 1}.JPEG")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def write_full(path: Path, prefix: str = "", mode: str = "w", counts: dict[str, int] = PER_CLASS,
               tiny: frozenset[str] = frozenset(), filler_mb: int = 0, **gzip_options) -> Path:
    """fall11_whole.tar (mode "w") or winter21_whole.tar.gz ("w:gz", members under `prefix`): a tar of <wnid>.tar
    (the classes in `tiny` with one image too small to keep), between two members of `filler_mb` random bytes
    that are not class tars (prepare passes over them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    members = [(f"{wnid}.tar", class_tar(wnid, count, wnid in tiny)) for wnid, count in counts.items()]
    if filler_mb:
        filler = random.Random(0).randbytes(filler_mb << 20)
        members = [("before.bin", filler), *members, ("after.bin", filler)]
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT, **gzip_options) as tar:
        for name, data in members:
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def small_held_out(monkeypatch):
    """The rule at the fakes' scale: 2 images a class from classes of more than 5 (forked workers inherit it)."""
    from prepare.sources import imagenet_full

    monkeypatch.setattr(imagenet_full, "HELD_OUT_FROM", 5)
    monkeypatch.setattr(imagenet_full, "HELD_OUT_PER_CLASS", 2)


def test_the_held_out_rule_takes_the_first_50_by_name_of_classes_over_500():
    from prepare.sources.imagenet_full import held_out

    names = [f"n00004475_{n}.JPEG" for n in range(1, 502)]
    assert held_out(names[:500]) == set()  # 500: all train
    val = held_out(list(reversed(names)))
    assert len(val) == 50 and "n00004475_1.JPEG" in val and "n00004475_10.JPEG" in val  # byte order: _1, _10, _100
    assert "n00004475_2.JPEG" not in val and "n00004475_142.JPEG" in val


@pytest.mark.parametrize("name,prefix,mode,asked,table", [
    ("fall11_whole.tar", "", "w", None, TABLE_22K),
    ("winter21_whole.tar.gz", "winter21_whole/", "w:gz", None, TABLE_W21),  # its own table, the default
    ("winter21_whole.tar.gz", "winter21_whole/", "w:gz", "imagenet-22k", TABLE_22K),  # as before #53
])
def test_a_full_release_prepares_in_its_class_table_with_a_held_out_val(tmp_path, small_held_out, name, prefix, mode,
                                                                        asked, table):
    """winter21's stream through rapidgzip (a dependency), with its members in a folder as some copies hold them.
    The last two of FULL_CLASSES have another index in winter21's table than in 22k's."""
    archive = write_full(tmp_path / "src" / name, prefix, mode)
    assert detect(archive.parent).name == detect(archive).name == "imagenet-full"
    # fall11 lacks 21,836 of ImageNet-22k's class tars here (the next test): prepared as it is
    manifest = prepare(config(archive.parent, tmp_path / "out", shard_size_mb=0.02, allow_partial=True,
                              class_table=asked))
    assert [c.wnid for c in manifest.classes] == table
    keys = shard_labels(tmp_path / "out")
    big = [wnid for wnid, count in PER_CLASS.items() if count > 5]  # 6, 7, 8 images: 2 each held out
    assert sorted(keys["val"]) == sorted(f"{wnid}_{n}" for wnid in big for n in (1, 2))
    assert len(keys["train"]) == sum(PER_CLASS.values()) - 2 * len(big)
    assert not keys["train"].keys() & keys["val"].keys()
    assert all(table[label] == key.split("_")[0] for split in keys for key, label in keys[split].items())
    labels = {label for split in keys.values() for label in split.values()}
    assert labels >= {table.index(wnid) for wnid in FULL_CLASSES[-2:]}


def test_fall11_missing_a_class_tar_is_named_and_allow_partial_prepares_the_rest(tmp_path, small_held_out):
    archive = write_full(tmp_path / "src" / "fall11_whole.tar")
    line = shortfall(detect(archive).open().declared("train"))
    assert line.startswith("the train split lacks 21,836 of the 21,841 class archives ImageNet-22k's table (fall11's) "
                           f"lists ({TABLE_22K[3]}.tar")
    with pytest.raises(SourceError, match="class archives"):
        prepare(config(archive, tmp_path / "out", shard_size_mb=0.02))
    manifest = prepare(config(archive, tmp_path / "out", shard_size_mb=0.02, allow_partial=True))
    assert manifest.splits["train"].samples + manifest.splits["val"].samples == sum(PER_CLASS.values())
    assert "21,836 of the 21,841" in manifest.partial["train"]


def test_a_class_tar_of_another_dataset_is_refused(tmp_path):
    archive = tmp_path / "fall11_whole.tar"
    with tarfile.open(archive, "w") as tar:
        data = class_tar("n99999999", 2)
        info = tarfile.TarInfo("n99999999.tar")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(SourceError, match="synset n99999999 is not among ImageNet-22k's 21,841"):
        detect(archive).open()


# ---------------------------------------------------------------- winter21's seek index

def test_winter21_keeps_a_seek_index_and_later_runs_read_each_class_tar_at_its_offset(tmp_path, small_held_out):
    """The first run reads the stream whole and keeps the index beside it; the next reads a part a class
    tar through it, and writes the same bytes."""
    from prepare.sources.imagenet_full import FullClassTar, FullStream

    archive = write_full(tmp_path / "src" / "winter21_whole.tar.gz", "winter21_whole/", "w:gz")
    assert [type(p) for p in detect(archive).open().parts("train")] == [FullStream]
    prepare(config(archive, tmp_path / "first", shard_size_mb=0.02))
    index = archive.with_name("winter21_whole.tar.gz.prepare-index")
    assert index.is_file()
    parts = detect(archive).open().parts("train")
    assert [type(p) for p in parts] == [FullClassTar] * len(PER_CLASS)
    assert [p.wnid for p in parts] == list(PER_CLASS) and all(p.index == str(index) for p in parts)
    second = prepare(config(archive, tmp_path / "second", shard_size_mb=0.02))
    assert tree_bytes(tmp_path / "second") == tree_bytes(tmp_path / "first")
    assert manifest_without_run_stats(tmp_path / "second") == manifest_without_run_stats(tmp_path / "first")
    # the first read the stream, one part a split; the second a part a class tar in each split
    assert second.stats["read_from_source_bytes"] == 2 * sum(p.size for p in parts)


def test_winter21_reaches_its_first_image_through_the_modules_that_carry_it_alone(tmp_path, small_held_out):
    """#49's measure (tests/source_walk.py, `carrying`), on the first job's stream: detection asks the full
    release's layout alone (a file's name shows it); its seek index and the tar reader are the two rooms
    beyond the Parquet download's seven."""
    from source_walk import walk

    archive = write_full(tmp_path / "src" / "winter21_whole.tar.gz", "winter21_whole/", "w:gz")
    assert [module for module, _ in walk(archive, tmp_path / "out", carrying=True)] == [
        "prepare/cli.py", "prepare/sources/__init__.py", "prepare/sources/imagenet_full.py", "prepare/builder.py",
        "prepare/sources/base.py", "prepare/sources/gzip_index.py", "prepare/scatter.py", "prepare/workers.py",
        "prepare/sources/tars.py"]


def test_the_first_winter21_job_inflates_the_stream_once_for_both_splits(tmp_path, small_held_out, monkeypatch):
    """Without its seek index, val and train come from one pass (val is held out of every class tar): the bytes
    inflated are the stream's, once, where a pass a split inflated them twice. One worker: the reads are here."""
    import gzip

    from prepare.sources import gzip_index

    archive = write_full(tmp_path / "src" / "winter21_whole.tar.gz", "winter21_whole/", "w:gz")
    inflated, real_read = [], gzip_index.Inflated.read
    monkeypatch.setattr(gzip_index.Inflated, "read", lambda self, size=-1: inflated.append(len(data := real_read(
        self, size))) or data)
    manifest = prepare(config(archive, tmp_path / "out", shard_size_mb=0.02, workers=1))
    assert sum(inflated) == len(gzip.decompress(archive.read_bytes()))
    assert manifest.stats["read_from_source_bytes"] == sum(detect(archive).open().split_bytes(s) for s in ("val", "train"))
    assert manifest.splits["val"].samples == 2 * sum(count > 5 for count in PER_CLASS.values())


def test_splits_read_together_are_one_pass_where_the_first_of_them_comes():
    from prepare.builder import reading_passes

    order = ("v2", "val", "train")
    assert reading_passes(order, ()) == [("v2",), ("val",), ("train",)]
    assert reading_passes(order, ("val", "train")) == [("v2",), ("val", "train")]
    assert reading_passes(order, ("train", "val")) == [("v2",), ("val", "train")]  # in reading order


@pytest.mark.parametrize("change", ["archive touched", "index damaged", "index cut"])
def test_a_stale_or_damaged_seek_index_is_ignored_said_and_replaced(tmp_path, small_held_out, caplog, change):
    import os

    archive = write_full(tmp_path / "src" / "winter21_whole.tar.gz", mode="w:gz")
    prepare(config(archive, tmp_path / "first", shard_size_mb=0.02))
    index = archive.with_name("winter21_whole.tar.gz.prepare-index")
    data = index.read_bytes()
    if change == "archive touched":
        os.utime(archive, ns=(archive.stat().st_atime_ns, archive.stat().st_mtime_ns + 1))
    elif change == "index damaged":
        index.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # a bit of rapidgzip's part
    else:
        index.write_bytes(data[: len(data) // 2])
    why = {"archive touched": "made for another state of the archive", "index damaged": "damaged (its checksum",
           "index cut": "damaged"}[change]
    with caplog.at_level("WARNING", logger="prepare"):
        source = detect(archive).open()
    assert source.streamed and why in caplog.text and "ignored" in caplog.text
    prepare(config(archive, tmp_path / "second", shard_size_mb=0.02))
    assert tree_bytes(tmp_path / "second") == tree_bytes(tmp_path / "first")
    assert not detect(archive).open().streamed  # a new index, for the archive as it is now


@pytest.mark.parametrize("through", ["the whole stream", "the index"])
def test_a_damaged_winter21_is_refused_in_one_line_saying_what_to_do(tmp_path, small_held_out, through):
    """Bytes flipped in the middle of the gzip stream: read whole (rapidgzip: a CRC, a distance or a size),
    or through an index kept before the damage (its time put back, so the index is taken)."""
    import os

    archive = write_full(tmp_path / "src" / "winter21_whole.tar.gz", mode="w:gz")
    if through == "the index":
        prepare(config(archive, tmp_path / "first", shard_size_mb=0.02))
    data, stat = bytearray(archive.read_bytes()), archive.stat()
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0x5A for b in data[middle:middle + 64])
    archive.write_bytes(bytes(data))
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert detect(archive).open().streamed == (through == "the whole stream")
    with pytest.raises(SourceError, match="download it again|download the archive again"):
        prepare(config(archive, tmp_path / "out", shard_size_mb=0.02))
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "val"])
def test_bytes_that_inflate_to_others_through_the_index_are_refused_by_their_class_tars_crc(tmp_path, small_held_out,
                                                                                           split):
    """A gzip of stored blocks (level 0) holds the tar's bytes as they are: a byte changed there inflates
    without an error, to another byte, and a read at an offset in the middle of a stream (here, 12 MiB on
    either side: rapidgzip's checkpoints are 4 MiB apart) never reaches the trailer's CRC. The class tar's
    CRC-32, kept in the index by the whole read, is what catches it, in either split's part."""
    import dataclasses
    import gzip
    import os

    archive = write_full(tmp_path / "src" / "winter21_whole.tar.gz", mode="w:gz", filler_mb=12, compresslevel=0)
    prepare(config(archive, tmp_path / "first", shard_size_mb=0.02))
    source = detect(archive).open()
    part = next(p for p in source.parts(split) if PER_CLASS[p.wnid] > 5)  # a class that gives val images
    with source:
        before = {item.key: item.data for item in part.items()}
    raw, stat = bytearray(archive.read_bytes()), archive.stat()
    inflated = gzip.decompress(raw)
    with tarfile.open(fileobj=io.BytesIO(inflated[part.offset:part.offset + part.size])) as inner:
        image = (min if split == "val" else max)(inner.getmembers(), key=lambda m: m.name)  # one of the split's
    middle = part.offset + image.offset_data + image.size // 2
    name = image.name.encode() + b"\0"  # its header's, unique in the stream; the same bytes follow in other images
    assert raw.count(name) == 1
    where = raw.find(inflated[middle:middle + 16], raw.find(name))
    raw[where + 8] ^= 0x01
    archive.write_bytes(bytes(raw))
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the index still takes the archive
    assert not detect(archive).open().streamed
    with source, pytest.raises(SourceError, match=f"{part.name}: inflated through the seek index .* CRC-32 "
                                                           "differs.*download"):
        list(part.items())
    with source:  # what a read without the check would take: no error, another image
        unchecked = {item.key: item.data for item in dataclasses.replace(part, crc32=None).items()}
    assert unchecked.keys() == before.keys() and unchecked != before
    with pytest.raises(SourceError, match="CRC-32 differs"):
        prepare(config(archive, tmp_path / "out", shard_size_mb=0.02))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_nodes_that_see_different_seek_indexes_are_refused_naming_the_index():
    from prepare.shared_read import refuse_disagreement

    refuse_disagreement(["a", "b"], ["p", "p"], ["/src/x.prepare-index"] * 2, [None, None])
    with pytest.raises(Exception, match="nodes a read the source through its seek index /src/x.prepare-index, nodes b do "
                                        "not see that index .*: delete it"):
        refuse_disagreement(["a", "b"], ["p", "q"], ["/src/x.prepare-index", None], [None, None])


def test_nodes_that_would_label_in_different_class_tables_are_refused_naming_them():
    """Without --class-table a node keeps the table of the dataset its --dest holds: nodes of which some hold
    winter21 prepared in 22k's table before, the others nothing, would write different labels."""
    from prepare.shared_read import refuse_disagreement

    with pytest.raises(Exception, match="different class tables \\(a, c: imagenet-22k; b: imagenet-w21\\): without "
                                        "--class-table a node keeps .* Give every node the same --class-table"):
        refuse_disagreement(["a", "b", "c"], ["p", "q", "p"], [None] * 3,
                            ["imagenet-22k", "imagenet-w21", "imagenet-22k"])


def test_parse_index_takes_only_an_index_of_this_archive_whole():
    from prepare.sources.gzip_index import FORMAT, Member, parse_index
    import hashlib

    binary = b"rapidgzip's checkpoints"
    stamp = {"bytes": 10, "mtime_ns": 5}
    header = {"format": FORMAT, "archive": stamp, "members": [["n00004475.tar", 512, 1024, 4242]],
              "index_bytes": len(binary), "index_sha256": hashlib.sha256(binary).hexdigest()}
    data = json.dumps(header).encode() + b"\n" + binary
    assert parse_index(data, stamp) == ((Member("n00004475.tar", 512, 1024, 4242),), binary)
    assert parse_index(data, {"bytes": 10, "mtime_ns": 6}).startswith("made for another state")
    assert parse_index(data[:-1], stamp) == "damaged (its checksum differs)"
    assert parse_index(data[:20], stamp).startswith("damaged") or parse_index(data[:20], stamp).startswith("not an")
    assert parse_index(b"", stamp) == "damaged (its header cannot be read)"
    assert parse_index(json.dumps({**header, "format": 0}).encode() + b"\n" + binary, stamp).startswith("not an index")
    for member in (["x"], ["n00004475.tar", 512, 1024]):  # the second without its CRC-32
        assert parse_index(json.dumps({**header, "members": [member]}).encode() + b"\n" + binary, stamp).startswith("damaged")


def test_an_index_whose_members_changed_is_damaged_not_read_into_another_class():
    """The checksum covered rapidgzip's part alone: a bit flipped in a class tar's name in the header (n00004475 to
    n04004475, another winter21 synset) labelled the class as the other, with the dataset id unchanged (a
    review's finding). The members have a checksum of their own; an index written before it is read as it was."""
    from prepare.sources.gzip_index import FORMAT, Member, members_digest, parse_index
    import hashlib

    binary, stamp = b"rapidgzip's checkpoints", {"bytes": 10, "mtime_ns": 5}
    listed = [["n00004475.tar", 512, 1024, 4242]]
    header = {"format": FORMAT, "archive": stamp, "members": listed, "members_sha256": members_digest(listed),
              "index_bytes": len(binary), "index_sha256": hashlib.sha256(binary).hexdigest()}
    data = json.dumps(header).encode() + b"\n" + binary
    assert parse_index(data, stamp) == ((Member("n00004475.tar", 512, 1024, 4242),), binary)
    for flipped in (data.replace(b"n00004475", b"n04004475"), data.replace(b"4242", b"4243"),
                    data.replace(b"512", b"516")):
        assert parse_index(flipped, stamp) == "damaged (its checksum differs)"
    older = {name: value for name, value in header.items() if name != "members_sha256"}
    assert parse_index(json.dumps(older).encode() + b"\n" + binary, stamp)[0] == (Member("n00004475.tar", 512, 1024,
                                                                                       4242),)


def test_the_index_lies_beside_the_archive_alone_where_no_home_is_known(tmp_path):
    """HOME unset and a user without a passwd entry (real: uid 12345 here): Path.home() raised, a traceback for
    every winter21 job."""
    import os
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("needs root to run as a user without a passwd entry")
    archive = tmp_path / "winter21_whole.tar.gz"
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    shown = subprocess.run(["setpriv", "--reuid", "12345", "--regid", "12345", "--clear-groups", sys.executable, "-c",
                            "import sys; from pathlib import Path; from prepare.sources.gzip_index import "
                            "index_locations; print(index_locations(Path(sys.argv[1])))", str(archive)],
                           env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == repr([archive.with_name("winter21_whole.tar.gz.prepare-index")])


def test_winter21_on_a_read_only_folder_keeps_its_index_in_the_users_cache(tmp_path, small_held_out, monkeypatch):
    """A real read-only mount (root only, as the disk tests): the index goes to $XDG_CACHE_HOME."""
    import shutil
    import subprocess

    from test_prepare import small_tmpfs

    mount = tmp_path / "ro"
    reason = small_tmpfs(mount, 8)
    if reason:
        pytest.skip(reason)
    try:
        archive = write_full(mount / "winter21_whole.tar.gz", mode="w:gz")
        assert subprocess.run(["mount", "-o", "remount,ro", str(mount)]).returncode == 0
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        prepare(config(archive, tmp_path / "first", shard_size_mb=0.02))
        kept = list((tmp_path / "cache" / "imagenet-prepare").glob("winter21_whole.tar.gz-*.prepare-index"))
        assert len(kept) == 1 and not archive.with_name("winter21_whole.tar.gz.prepare-index").exists()
        parts = detect(archive).open().parts("val")
        assert {p.index for p in parts} == {str(kept[0])}
        prepare(config(archive, tmp_path / "second", shard_size_mb=0.02))
        assert tree_bytes(tmp_path / "second") == tree_bytes(tmp_path / "first")
    finally:
        subprocess.run(["umount", str(mount)])
        shutil.rmtree(mount, ignore_errors=True)


# ---------------------------------------------------------------- on two nodes: the shared read

@pytest.mark.slow
@pytest.mark.parametrize("layout", ["timm-22k-wds", "timm-w21-wds", "fall11", "winter21", "winter21 indexed"])
def test_two_nodes_read_each_part_once_and_write_the_bytes_of_one_node(tmp_path, timm_22k, layout):
    """Real `python -m prepare` processes joined over gloo (tests/test_shared_read.py's): the held-out rule
    at its real threshold (a class of 503 images gives 50 to val), as the nodes' processes see it.
    winter21 without its seek index: one node reads the stream, once for val and train, sending both
    splits' samples as it inflates them (and keeps the index); with it: a part a class tar, as fall11."""
    from test_shared_read import finish, start_nodes

    counts = {FULL_CLASSES[0]: 503, **{wnid: 5 for wnid in FULL_CLASSES[1:]}}
    tiny = frozenset(FULL_CLASSES[1:2])  # a 20 x 20 image: left out on every node, never a failure
    winter21 = lambda: write_full(tmp_path / "src" / "winter21_whole.tar.gz", mode="w:gz", counts=counts, tiny=tiny)
    source = {"timm-22k-wds": lambda: timm_22k, "timm-w21-wds": lambda: write_w21(tmp_path / "imagenet-w21-wds"),
              "fall11": lambda: write_full(tmp_path / "src" / "fall11_whole.tar", counts=counts, tiny=tiny),
              "winter21": winter21, "winter21 indexed": winter21}[layout]()
    index = tmp_path / "src" / "winter21_whole.tar.gz.prepare-index"
    one = tmp_path / "one"
    assert run_module("prepare", "--source", source, "--dest", one, "--shard-size", 0.05, "--workers", 1,
                      "--allow-partial").returncode == 0
    if layout == "winter21 indexed":  # the first run kept the index: prepare again, reading through it
        shutil.rmtree(one)
        assert run_module("prepare", "--source", source, "--dest", one, "--shard-size", 0.05, "--workers", 1,
                          "--allow-partial").returncode == 0
    elif layout == "winter21":
        index.unlink()
    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(source, dests, "--allow-partial", "--shard-size", 0.05, workers=2))
    assert [code for code, _ in results] == [0, 0], results
    whole = read_manifest(one).stats["read_from_source_bytes"]
    reads = [read_manifest(dest).stats["read_from_source_bytes"] for dest in dests]
    if layout == "winter21":  # one part, the stream: inflated once in the whole job, by one node
        said = [line for _, log in results for line in log.splitlines() if "inflated the stream whole" in line]
        assert len(said) == 1, said
        assert f", {len(gzip.decompress(source.read_bytes()))} bytes, once for val and train" in said[0]
        assert sorted(reads) == [0, whole]
    else:
        assert sum(reads) == whole and min(reads) > 0  # each part read once, by one node
    for dest in dests:
        assert manifest_without_run_stats(dest) == manifest_without_run_stats(one)
        assert tree_bytes(dest) == tree_bytes(one)
    if not layout.startswith("timm"):
        assert read_manifest(one).splits["val"].samples == 50
        assert list(read_manifest(one).skipped) == [f"{FULL_CLASSES[1]}_6"]
    if layout.startswith("winter21"):
        assert index.is_file()  # kept by the node that read the stream, or used
    if layout == "timm-22k-wds":  # datasets prepared before class_maps existed: a rerun on the nodes records them
        from dataclasses import replace

        from shards.manifest import write_manifest

        for dest in dests:
            write_manifest(dest, replace(read_manifest(dest), class_maps={}))
        results = finish(start_nodes(source, dests, "--allow-partial", "--shard-size", 0.05, workers=2))
        assert [code for code, _ in results] == [0, 0], results
        for dest in dests:
            assert read_manifest(dest).class_maps == read_manifest(one).class_maps != {}
            assert tree_bytes(dest) == tree_bytes(one)


@pytest.mark.slow  # three prepares of 22k's fake, on a real tmpfs
def test_a_full_disk_while_class_maps_are_recorded_keeps_the_dataset_and_the_job_going(tmp_path, timm_22k, caplog):
    """A dataset prepared before manifests recorded class_maps, rerun on a --dest another job has filled (a real
    small tmpfs): its manifest stays as it was (no temporary file beside it) and the run goes on, the dataset being
    whole, with a warning saying what it lacks; the rerun with room records them."""
    from dataclasses import replace

    from shards.manifest import manifest_path, write_manifest
    from test_prepare import a_small_disk, fill

    with a_small_disk(tmp_path / "disk", 48) as mount:  # room for the estimate before the build
        dest = mount / "imagenet22k"
        before = prepare(config(timm_22k, dest, shard_size_mb=0.02))
        assert before.class_maps
        write_manifest(dest, replace(before, class_maps={}))  # as manifests were before #53
        written, shards = manifest_path(dest).read_bytes(), tree_bytes(dest)
        fill(mount, "1M")
        with caplog.at_level("INFO", logger="prepare"):
            again = prepare(config(timm_22k, dest, shard_size_mb=0.02))
        assert again.class_maps == {} and tree_bytes(dest) == shards and manifest_path(dest).read_bytes() == written
        assert sorted(path.name for path in dest.iterdir() if path.name.endswith(".tmp")) == []
        assert (f"{dest}: could not record where its classes lie in imagenet-w21 in its manifest.json (No space "
                "left on device): the dataset is whole and trains as before") in caplog.text
        (mount / "other-job.bin").unlink()
        assert prepare(config(timm_22k, dest, shard_size_mb=0.02)).class_maps == read_manifest(dest).class_maps \
            == before.class_maps


def test_the_library_loader_exposes_the_22k_table_the_12k_subset_and_the_map_into_winter21s(prepared_22k):
    from train import ImageNetLoader

    with ImageNetLoader(prepared_22k, "val", batch_size=4, image_size=32, device="cpu", workers=1) as data:
        assert data.num_classes == 21841 and data.classes[0].wnid == "n00004475"
        subset = data.class_subsets["12k"]
        assert [data.classes[label].wnid for label in subset] == TABLE_12K
        to_w21 = data.class_maps["imagenet-w21"]  # a w21 model's label of each class, -1 where it has none
        assert len(to_w21) == 21841 and to_w21.count(-1) == 2674
        assert all(TABLE_W21[j] == data.classes[i].wnid for i, j in enumerate(to_w21) if j >= 0)
        labels = [int(label) for batch in data.batches() for label in batch.labels]
        assert len(labels) == 8 and set(labels) <= set(subset)  # 22k's val is 12k's


W21_CLASSES = TABLE_22K[:3]  # where winter21's index is 22k's (none of the 2,674 it lacks comes before them)
# winter21's first synset, the first whose index in 22k's table is not its own (12,212 of 22k's come before the
# first class winter21 lacks), and its last: the real table's ends and a place where the two tables part
W21_SPREAD = [TABLE_W21[0], TABLE_W21[12212], TABLE_W21[-1]]
W21_PRESENT = [0, 1, 2038, 2039, 2047]  # of its 2,048 shards: val is the last 10 (2038..2047)


def w21_sample(wnid: str, n: int, cls: int | None = None) -> dict[str, bytes]:
    """As rwightman's writer makes them: KEY the image's stem, .cls the index among winter21's sorted wnids."""
    meta = {"label": TABLE_W21.index(wnid) if wnid in TABLE_W21 else -1, "class_name": wnid, "width": 40, "height": 32}
    return {"__key__": f"{wnid}_{n}", "jpg": jpeg(40, 32, seed=n % 7),
            "cls": str(TABLE_W21.index(wnid) if cls is None else cls).encode(), "json": json.dumps(meta).encode()}


def write_w21(root: Path, info: bool = True, bad: dict[str, bytes] | None = None,
              classes: list[str] = W21_CLASSES) -> Path:
    """timm/imagenet-w21-wds: _info.json lists 2,048 train shards (and no other split); W21_PRESENT are here,
    two samples each (`bad` in the first)."""
    root.mkdir(parents=True)
    files = [f"imagenet_w21-train-{n:04d}.tar" for n in range(2048)]
    for n in W21_PRESENT:
        samples = [w21_sample(classes[(n + i) % len(classes)], 10 * n + i) for i in range(2)]
        write_tar(root / files[n], ([bad] if bad and n == 0 else []) + samples)
    if info:
        lengths = [2 + (n == 0 and bad is not None) for n in range(2048)]
        (root / "_info.json").write_text(json.dumps({"name": "imagenet_w21", "splits": {"train": {
            "name": "train", "filenames": files, "shard_lengths": lengths, "num_samples": sum(lengths)}}}))
    return root


def source_cls(root: Path) -> dict[str, int]:
    """key -> the .cls of every sample of a timm download's shards."""
    labels = {}
    for shard in root.glob("*.tar"):
        with tarfile.open(shard) as tar:
            labels |= {m.name.removesuffix(".cls"): int(tar.extractfile(m).read())
                       for m in tar if m.name.endswith(".cls")}
    return labels


@pytest.mark.parametrize("info", [True, False])
@pytest.mark.parametrize("asked,table", [(None, TABLE_W21), ("imagenet-22k", TABLE_22K)])
def test_timms_w21_prepares_in_its_class_table_with_its_last_10_shards_held_out(tmp_path, info, asked, table):
    """By default in winter21's own 19,167 classes, each label the shards' own .cls; with --class-table
    imagenet-22k in 22k's 21,841, by the wnid each image's name carries (as before #53)."""
    root = write_w21(tmp_path / "imagenet-w21-wds", info, classes=W21_SPREAD)
    detected = detect(root)
    assert detected.name == "timm-w21-wds"
    source = detected.open()
    assert [p.path.rsplit("-", 1)[1] for p in source.parts("val")] == ["2038.tar", "2039.tar", "2047.tar"]
    assert shortfall(source.declared("val")).startswith("the val split lacks 7 of the 10 shards")
    with pytest.raises(SourceError, match="imagenet_w21-train-0002.tar"):
        prepare(config(root, tmp_path / "out", shard_size_mb=0.02))
    manifest = prepare(config(root, tmp_path / "out", shard_size_mb=0.02, allow_partial=True, class_table=asked))
    assert [c.wnid for c in manifest.classes] == table and manifest.source["layout"] == "timm-w21-wds"
    keys = shard_labels(tmp_path / "out")
    assert sorted(int(key.split("_")[1]) // 10 for key in keys["val"]) == [2038, 2038, 2039, 2039, 2047, 2047]
    assert sorted(int(key.split("_")[1]) // 10 for key in keys["train"]) == [0, 0, 1, 1]
    assert all(table[label] == key.split("_")[0] for split in keys for key, label in keys[split].items())
    labels = keys["train"] | keys["val"]
    assert (labels == source_cls(root)) == (asked is None)  # its own table: the labels are its .cls


def no_wnid(sample: dict[str, bytes], class_name: bool) -> dict[str, bytes]:
    """The sample under a key without its wnid, its .json with or without the class_name."""
    meta = json.loads(sample["json"])
    if not class_name:
        del meta["class_name"]
    return {**sample, "__key__": "image_99", "json": json.dumps(meta).encode()}


@pytest.mark.parametrize("bad,why", [
    (w21_sample(W21_CLASSES[0], 99, cls=TABLE_22K.index(W21_CLASSES[0]) + 1), f"the images of {W21_CLASSES[0]} carry "
                                                                              ".cls 0, 1: its .cls numbers and its images' names disagree"),
    (w21_sample(TABLE_22K[5000], 99, cls=0), f".cls 1 of {W21_CLASSES[1]} is not below .cls 0 of {TABLE_22K[5000]}"),
    (no_wnid(w21_sample(TABLE_22K[0], 99), class_name=False), "neither the image's name image_99 nor its .json's class_name"),
])
def test_a_w21_sample_whose_cls_or_name_does_not_fit_22ks_table_is_refused(tmp_path, bad, why):
    """In 22k's table the labels are the names' wnids: .cls is checked to number them as sorted wnids."""
    root = write_w21(tmp_path / "imagenet-w21-wds", bad=bad)
    with pytest.raises(SourceError, match=why):
        prepare(config(root, tmp_path / "out", shard_size_mb=0.02, allow_partial=True, class_table="imagenet-22k"))
    assert not (tmp_path / "out" / "manifest.json").exists()


LACKED = next(wnid for wnid in TABLE_22K if wnid not in SET_W21)  # one of the 2,674 winter21 lacks


@pytest.mark.parametrize("bad,why", [
    (w21_sample(W21_CLASSES[0], 99, cls=1), f".cls 1 is {W21_CLASSES[1]} in the class table, but the image's name "
                                            f"{W21_CLASSES[0]}_99 says {W21_CLASSES[0]}"),
    (w21_sample(W21_CLASSES[0], 99, cls=19167), "not a class index of the class table \\(0..19166\\)"),
    (w21_sample(LACKED, 99, cls=0), f"the image's name {LACKED}_99 says {LACKED}"),
])
def test_a_w21_sample_whose_cls_does_not_fit_its_own_table_is_refused(tmp_path, bad, why):
    """In winter21's own table the label is .cls, checked against the wnid the image's name carries."""
    root = write_w21(tmp_path / "imagenet-w21-wds", bad=bad)
    with pytest.raises(SourceError, match=why):
        prepare(config(root, tmp_path / "out", shard_size_mb=0.02, allow_partial=True))
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("asked,table", [(None, TABLE_W21), ("imagenet-22k", TABLE_22K)])
def test_a_w21_sample_without_a_wnid_in_its_name_takes_its_cls_or_its_jsons_class_name(tmp_path, asked, table):
    """Its own table: the label is .cls; 22k's: the wnid of its .json's class_name."""
    root = write_w21(tmp_path / "imagenet-w21-wds", bad=no_wnid(w21_sample(W21_SPREAD[2], 99), class_name=True))
    prepare(config(root, tmp_path / "out", shard_size_mb=0.02, allow_partial=True, class_table=asked))
    with tarfile.open(next((tmp_path / "out" / "train").glob("*.tar"))) as tar:
        labels = {m.name: int(tar.extractfile(m).read()) for m in tar if m.name.endswith(".cls")}
    assert labels["image_99.cls"] == table.index(W21_SPREAD[2])


def test_cls_order_takes_any_index_among_sorted_wnids_and_refuses_what_disagrees_with_the_names():
    from prepare.sources.timm_wds import check_cls_order

    a, b, c = TABLE_22K[0], TABLE_22K[7], TABLE_22K[3000]
    for numbers in ({a: {0}, b: {5}, c: {2999}}, {a: {1}, b: {2}, c: {3}}, {}):  # 0- or 1-based, gaps: all fine
        check_cls_order(numbers, "x", "w21")
    for numbers, why in (({a: {0, 1}}, "carry .cls 0, 1"), ({a: {3}, b: {3}}, "is not below"),
                         ({a: {5}, c: {2}}, "is not below"), ({a: {-1}}, "carry")):
        with pytest.raises(SourceError, match=why):
            check_cls_order(numbers, "x", "w21")


def test_w21_without_info_refuses_a_shard_beyond_its_numbering_and_records_its_rules(tmp_path):
    root = write_w21(tmp_path / "imagenet-w21-wds", info=False)
    assert detect(root).identity()["rules"] == {"held_out_shards": 10,
                                                "labels": ".cls, checked against the wnid of each image's name"}
    # in 22k's table, the rules datasets prepared before #53 recorded, word for word: they keep their identity
    assert detect(root).labelled_in("imagenet-22k", None).identity()["rules"] == {
        "held_out_shards": 10, "labels": "the wnid of each image's name, in ImageNet-22k's table"}
    write_tar(root / "imagenet_w21-train-2048.tar", [w21_sample(W21_CLASSES[0], 1)])
    with pytest.raises(SourceError, match="holds imagenet_w21-train-2048.tar, which is not among .* 2,048 train shards"):
        detect(root).open()


# ---------------------------------------------------------------- winter21's class table (#53)

def winter21_download(tmp_path: Path, layout: str) -> Path:
    """winter21 as image-net.org's archive or as timm's w21 shards, of W21_SPREAD's classes."""
    if layout == "imagenet-full":
        return write_full(tmp_path / "src" / "winter21_whole.tar.gz", "winter21_whole/", "w:gz",
                          counts={wnid: 6 for wnid in W21_SPREAD})
    return write_w21(tmp_path / "imagenet-w21-wds", classes=W21_SPREAD)


@pytest.mark.slow  # five prepares of each
@pytest.mark.parametrize("layout", ["imagenet-full", "timm-w21-wds"])
def test_a_winter21_dataset_prepared_in_22ks_table_keeps_it_and_another_table_is_asked_for(tmp_path, small_held_out,
                                                                                          caplog, layout):
    """A dataset prepared before winter21's own table was the default is in 22k's, with the identity
    --class-table imagenet-22k gives now (the rules it recorded, word for word), and without class_maps: a rerun
    without --class-table finds it whole and keeps it, recording its class_maps; winter21's own table is another
    dataset (refused without --force, through the command line's flag)."""
    from dataclasses import replace

    from prepare.cli import main
    from shards.manifest import write_manifest

    root, dest = winter21_download(tmp_path, layout), tmp_path / "out"
    options = {"shard_size_mb": 0.02, "allow_partial": True}
    before = prepare(config(root, dest, class_table="imagenet-22k", **options))
    assert before.num_classes == 21841 and before.source["rules"] == {
        "imagenet-full": {"held_out_per_class": 50, "held_out_from": 500, "min_side": 32},
        "timm-w21-wds": {"held_out_shards": 10, "labels": "the wnid of each image's name, in ImageNet-22k's table"},
    }[layout]
    write_manifest(dest, replace(before, class_maps={}))  # as manifests were before #53
    shards = tree_bytes(dest)
    with caplog.at_level("INFO", logger="prepare"):
        again = prepare(config(root, dest, **options))
    assert again.num_classes == 21841 and tree_bytes(dest) == shards and again.dataset_id() == before.dataset_id()
    assert read_manifest(dest).class_maps == again.class_maps == before.class_maps  # recorded, as a build does
    assert f"{dest} holds this download prepared in the imagenet-22k class table: it keeps it" in caplog.text
    assert "already holds this dataset" in caplog.text
    assert f"{dest}: recorded where its classes lie in imagenet-w21 (the manifest's class_maps" in caplog.text
    flags = ["--source", str(root), "--dest", str(dest), "--shard-size", "0.02", "--allow-partial", "--no-shared-read",
             "--class-table", "imagenet-w21"]
    assert main(flags) == 2 and read_manifest(dest).num_classes == 21841
    assert {"imagenet-full": "was prepared differently: the layout's rule class_table was 'imagenet-22k', now "
                             "'imagenet-w21'",
            "timm-w21-wds": "was prepared differently: the layout's rule labels was \"the wnid of each image's name, "
                            "in ImageNet-22k's table\", now \".cls, checked against the wnid of each image's name\"",
            }[layout] in caplog.text
    assert main([*flags, "--force"]) == 0
    after = read_manifest(dest)
    assert after.num_classes == 19167 and after.class_maps["imagenet-22k"]["classes"] == 21841
    assert prepare(config(root, dest, **options)).num_classes == 19167  # now its own table is what --dest keeps


@pytest.mark.slow  # two prepares in 19,167 and 21,841 classes
def test_the_manifest_maps_winter21s_classes_into_the_other_table(tmp_path, small_held_out):
    """Labelled in its own table, each class's index among 22k's; labelled in 22k's, each one's among winter21's
    (-1 for the 2,674 it lacks): recorded as 22k's val records 12k's classes."""
    from prepare.labels import indices_in

    root = winter21_download(tmp_path, "imagenet-full")
    own = prepare(config(root, tmp_path / "own", shard_size_mb=0.02))
    in_22k = prepare(config(root, tmp_path / "in-22k", shard_size_mb=0.02, class_table="imagenet-22k"))
    assert own.class_maps == {"imagenet-22k": {"classes": 21841, "index": indices_in("imagenet-w21", "imagenet-22k")}}
    back = in_22k.class_maps["imagenet-w21"]
    assert back["classes"] == 19167 and back["index"].count(-1) == 2674
    assert all(TABLE_W21[j] == TABLE_22K[i] for i, j in enumerate(back["index"]) if j >= 0)
    assert read_manifest(tmp_path / "own").class_maps == own.class_maps  # as written, read back
    keys_own, keys_22k = shard_labels(tmp_path / "own"), shard_labels(tmp_path / "in-22k")
    assert {key: own.class_maps["imagenet-22k"]["index"][label] for key, label in keys_own["train"].items()} \
        == keys_22k["train"]


@pytest.mark.slow  # about 15 s: 19,167 classes twice
def test_winter21_and_w21_with_every_one_of_the_19167_synsets_label_each_as_its_w21_cls(tmp_path, small_held_out):
    """Fakes that hold each of winter21's real synsets: w21 shards with one sample a synset (.cls its index among
    the sorted synsets, as timm's shards number them), winter21_whole.tar.gz with one class tar a synset (six
    images in every 1,000th, for a val). Both prepare to 19,167 classes in that order, and every image's label is
    the .cls of its synset."""
    image = jpeg(16, 16)
    w21 = tmp_path / "imagenet-w21-wds"
    w21.mkdir()
    samples = [{"__key__": f"{wnid}_{n}", "jpg": image, "cls": str(n).encode()} for n, wnid in enumerate(TABLE_W21)]
    write_tar(w21 / "imagenet_w21-train-0000.tar", samples[:19000])
    write_tar(w21 / "imagenet_w21-train-2047.tar", samples[19000:])  # a val shard: the last 10 are held out
    counts = {wnid: 6 if n % 1000 == 0 else 1 for n, wnid in enumerate(TABLE_W21)}
    winter21 = write_full(tmp_path / "src" / "winter21_whole.tar.gz", "winter21_whole/", "w:gz", counts=counts)
    cls = {key.split("_")[0]: label for key, label in source_cls(w21).items()}
    assert sorted(cls.values()) == list(range(19167))
    for root, dest in ((w21, tmp_path / "from-w21"), (winter21, tmp_path / "from-winter21")):
        manifest = prepare(config(root, dest, shard_size_mb=1, allow_partial=True))
        assert [c.wnid for c in manifest.classes] == TABLE_W21
        labels = {key: label for split in shard_labels(dest).values() for key, label in split.items()}
        assert {key.split("_")[0] for key in labels} == set(TABLE_W21)  # every synset, each image labelled
        assert all(label == cls[key.split("_")[0]] for key, label in labels.items())


@pytest.mark.slow  # two training processes
def test_a_model_trained_in_either_table_evaluates_on_winter21_in_the_other_through_the_recorded_mapping(
        tmp_path, small_held_out, caplog):
    """python -m train.evaluate of a checkpoint trained on winter21 in one table, given winter21 prepared in the
    other: the data's manifest maps its classes into the checkpoint's table. The w21 model (19,167 outputs) on
    22k's labels predicts what it predicted on its own (its classes are all there): the run's own figures. The
    22k model (21,841) on w21's labels is scored among the data's classes: never worse than on its own, and its loss
    lower (the softmax over fewer classes)."""
    from train.run.evaluation import EVAL_NAME, main

    root = winter21_download(tmp_path, "imagenet-full")
    datasets = {table: tmp_path / table for table in ("imagenet-w21", "imagenet-22k")}
    for table, dest in datasets.items():
        prepare(config(root, dest, shard_size_mb=0.02, class_table=table))
    for trained, other in (("imagenet-w21", "imagenet-22k"), ("imagenet-22k", "imagenet-w21")):
        run = tmp_path / f"run-{trained}"
        result = warm.run("train", "--data", datasets[trained], "--run-dir", run, "--arch", "resnet18", "--image-size",
                          "32", "--batch-size", "4", "--epochs", "1", "--workers", "1", "--warmup-epochs", "1",
                          "--shuffle-buffer", "16")
        assert result.returncode == 0, result.stderr[-3000:]
        (own,) = read_metrics(run)
        with caplog.at_level("INFO", logger="train"):
            assert main([str(run), "--data", str(datasets[other]), "--workers", "1"]) == 0
        record = json.loads((run / EVAL_NAME).read_text().splitlines()[-1])
        assert record["class_map"] == trained and record["val_images"] == own["val_images"] == 6
        assert f"through its manifest's mapping into {trained}" in caplog.text
        if trained == "imagenet-w21":
            assert [record[k] for k in ("val_top1", "val_top5")] == [own[k] for k in ("val_top1", "val_top5")]
            assert record["val_loss"] == pytest.approx(own["val_loss"], rel=1e-5)
        else:  # its 2,674 other outputs left out: the true class's rank and softmax can only gain
            assert record["val_top1"] >= own["val_top1"] and record["val_top5"] >= own["val_top5"]
            assert record["val_loss"] < own["val_loss"]


def test_outputs_are_placed_on_the_datas_classes_only_through_a_mapping_the_manifest_records():
    """mapped_outputs (pure): the table whose mapping names the checkpoint's classes; ClassPlacement: the model's
    columns on the data's, what the model lacks below everything it has."""
    import torch

    from shards.manifest import ClassInfo, Manifest
    from train.run.evaluation import mapped_outputs
    from train.run.loop import ClassPlacement

    data = ["n1", "n2", "n3"]  # labelled in a table of 3; the model's table holds n3 and n1 (and n9, not here)
    manifest = Manifest(source={"path": "/data"}, options={}, classes=[ClassInfo(i, w, w) for i, w in enumerate(data)],
                        splits={}, class_maps={"small": {"classes": 3, "index": [1, -1, 0]}})
    assert mapped_outputs(None, manifest, "/data") is None and mapped_outputs(data, manifest, "/data") is None
    assert mapped_outputs(["n3", "n1", "n9"], manifest, "/data") == ("small", [1, 0], [0, 2])
    for trained in (["n1", "n3", "n9"], ["n3", "n1"], ["a", "b"]):  # another order, another count, other classes
        with pytest.raises(Exception, match=f"predicts the {len(trained)} classes its run trained on, not the 3 of "
                                            "/data .*it maps them into: small \\(3\\)\\): give --data"):
            mapped_outputs(trained, manifest, "/data")
    placed = ClassPlacement([1, 0], [0, 2], 3, torch.device("cpu")).place(torch.tensor([[5.0, 7.0, 9.0]]))
    assert placed[0, 0] == 7.0 and placed[0, 2] == 5.0 and placed[0, 1] == 5.0 - ClassPlacement.LACKING
    # an image's NaN outputs (which count it wrong) leave the others' finite: they were all NaN where lacking
    placed = ClassPlacement([1, 0], [0, 2], 3, torch.device("cpu")).place(torch.tensor([[5.0, 7.0, 9.0],
                                                                                      [float("nan"), 1.0, 2.0]]))
    assert torch.isfinite(placed[0]).all() and placed[0, 1] == 1.0 - ClassPlacement.LACKING


def test_a_class_table_the_download_is_not_labelled_in_is_refused_naming_it(tmp_path, sources, small_held_out):
    """fall11 holds the 2,674 classes winter21 lacks: only 22k's table; ImageNet-1k has its own alone."""
    fall11 = write_full(tmp_path / "src" / "fall11_whole.tar")
    with pytest.raises(SourceError, match="--class-table imagenet-w21: this download \\(layout imagenet-full\\) is "
                                          "labelled in its own table, imagenet-22k alone; .* leave it out"):
        prepare(config(fall11, tmp_path / "out", class_table="imagenet-w21", allow_partial=True))
    with pytest.raises(SourceError, match="--class-table imagenet-22k: this download \\(layout official\\) is "
                                          "labelled in its own table alone"):
        prepare(config(sources["official"], tmp_path / "out", class_table="imagenet-22k"))
    assert not (tmp_path / "out").exists()
    assert prepare(config(fall11, tmp_path / "out", class_table="imagenet-22k", allow_partial=True,
                          shard_size_mb=0.02)).num_classes == 21841  # its own, named


def test_images_under_32_px_in_a_full_release_are_left_out_counted_and_named(tmp_path, caplog, small_held_out):
    """Without --skip-bad: a tiny image is no failure, only left out (timm's w21 dropped about 2,000)."""
    wnid = FULL_CLASSES[0]
    images = [(f"{wnid}_{n}.JPEG", jpeg(32, 32, seed=n) if n == 1 else jpeg(40, 32, seed=n)) for n in range(1, 8)]
    images.append((f"{wnid}_9.JPEG", jpeg(31, 40, seed=9)))
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in images:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / "fall11_whole.tar"
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(f"{wnid}.tar")
        info.size = inner.tell()
        inner.seek(0)
        tar.addfile(info, inner)
    with caplog.at_level("INFO", logger="prepare"):
        manifest = prepare(config(archive, tmp_path / "out", shard_size_mb=0.02, allow_partial=True))
    assert manifest.skipped == {f"{wnid}_9": "is 31 x 40 px, under the 32 px its layout takes"}
    assert manifest.splits["val"].samples == 2 and manifest.splits["train"].samples == 5  # 32 x 32 is kept
    assert "train: left out 1 images under their layout's smallest side" in caplog.text


def test_the_smallest_side_is_checked_from_the_header_only_where_a_layout_asks():
    from prepare.images import TooSmall, prepare_image

    assert prepare_image(jpeg(20, 20)).width == 20  # ImageNet-1k's layouts ask nothing
    with pytest.raises(TooSmall, match="is 20 x 64 px, under the 32 px"):
        prepare_image(jpeg(20, 64), min_side=32)


def test_a_full_release_with_no_class_large_enough_for_val_says_so(tmp_path):
    archive = write_full(tmp_path / "fall11_whole.tar")  # 4 to 8 images a class: none over 500
    with pytest.raises(SourceError, match="holds no images: val is held out from classes of more than 500 images "
                                          "\\(50 each\\), and none has that many"):
        prepare(config(archive, tmp_path / "out", shard_size_mb=0.02, allow_partial=True))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_an_index_that_cannot_be_used_is_warned_of_once_a_process(tmp_path, caplog):
    """load_index runs three times a job: a stale index beside a read-only archive said so three times in each job,
    that 'the next whole read replaces it' (a review's finding): once, saying where a new one goes."""
    from prepare.sources import gzip_index

    archive = tmp_path / "winter21_whole.tar.gz"
    archive.write_bytes(b"a stream")
    (tmp_path / "winter21_whole.tar.gz.prepare-index").write_bytes(b"{}\nstale")
    with caplog.at_level("WARNING", logger="prepare"):
        for _ in range(3):
            assert gzip_index.load_index(archive) is None
    said = [r.getMessage() for r in caplog.records if "seek index" in r.getMessage()]
    assert len(said) == 1 and "else in the user's cache: delete this one" in said[0], said


def test_images_left_out_for_their_size_are_not_summed_up_as_bad_ones(tmp_path, small_held_out, caplog):
    """A full release's images under 32 px are left out, never a failure: the summary called them 'bad ones' (on
    the real releases, some 2,000 of them: a review's finding)."""
    archive = write_full(tmp_path / "src" / "fall11_whole.tar", tiny=frozenset(list(PER_CLASS)[:1]))
    with caplog.at_level("INFO", logger="prepare"):
        manifest = prepare(config(archive, tmp_path / "out", shard_size_mb=0.02, allow_partial=True))
    assert len(manifest.skipped) == 1 and manifest.stats["left_out_small"] == 1
    assert "skipped 0 bad ones, left out 1 under their layout's smallest side" in caplog.text
