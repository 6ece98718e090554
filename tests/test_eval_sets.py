"""The evaluation sets papers report: ImageNetV2 as further splits, ReaL's label sets with val.

A fake ImageNetV2 (the real layout: <variant>-format-val/<class index>/<hash>.jpeg) holds the sample's
validation images twice, so each of its images must be predicted as val's copy is, batched alike; a fake
real.json gives the val images label sets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import warm
from conftest import ARCH, config
from prepare.builder import prepare
from prepare.config import PrepareError
from prepare.eval_sets import ImageNet1k, EvalSetError, real_labels_by_key, parse_real_json, read_v2, v2_variant
from prepare.labels import builtin_class_names
from shards.paths import REAL_LABELS_FILE, metric_prefix
from shards.manifest import ClassInfo, read_manifest
from train.errors import ConfigError
from train.run.metrics import epoch_line, read_metrics
from train import RealLabels
from train.shard_index import key_hash

V2_NAME = "imagenetv2-matched-frequency-format-val"
IMAGENET_1K = list(builtin_class_names())  # ImageNetV2's and ReaL's class indices: the 1000 wnids, sorted


def class_order(images) -> list[str]:
    """The sample dataset's classes (real ImageNet-1k wnids, 6 of them), in label order."""
    return sorted({wnid for _, wnid, _ in images.train})


def v2_images(images) -> list[tuple[str, str, bytes]]:
    """The sample's val images twice over: ImageNetV2's 10 a class from the sample's 5 (file i is
    v2_images[i])."""
    return images.val + images.val


def write_v2(folder: Path, images) -> Path:
    """The sample's val images as an ImageNetV2 variant: a folder per ImageNet-1k class index, 10 images
    in each, hashed names."""
    for i, (_, wnid, data) in enumerate(v2_images(images)):
        index_folder = folder / str(IMAGENET_1K.index(wnid))
        index_folder.mkdir(parents=True, exist_ok=True)
        (index_folder / f"{i:040x}.jpeg").write_bytes(data)
    return folder


def real_sets(images, labelled) -> list[list[int]]:
    """real.json for the sample's val images (ILSVRC2012_val_00000001 first), in ImageNet-1k's class
    indices: `labelled(i, wnid)` gives each set."""
    return [labelled(i, wnid) for i, (_, wnid) in enumerate(sorted((key, wnid) for key, wnid, _ in images.val))]


def every_class(images) -> list[int]:
    return [IMAGENET_1K.index(wnid) for wnid in class_order(images)]


@pytest.fixture(scope="module")
def eval_dataset(tmp_path_factory, sources, images):
    """The official sample with ImageNetV2 (its val images) and ReaL sets: every fifth image
    unlabelled, the others labelled with every class (so ReaL top-1 is 100% of 4 in 5)."""
    root = tmp_path_factory.mktemp("eval")
    v2 = write_v2(root / V2_NAME, images)
    real = root / "real.json"
    real.write_text(json.dumps(real_sets(images, lambda i, wnid: [] if i % 5 == 0 else every_class(images))))
    dest = root / "imagenet"
    manifest = prepare(config(sources["official"], dest, eval_sources=(v2,), real_labels=real))
    return dest, manifest, v2, real


# ---------------------------------------------------------------- the pure parts

@pytest.mark.parametrize("name,variant", [(V2_NAME, "matched-frequency"),
                                          ("imagenetv2-threshold0.7-format-val", "threshold0.7"),
                                          ("imagenetv2-top-images", "top-images"),
                                          ("imagenetv2-threshold0.7.tar.gz", "threshold0.7")])
def test_the_variant_comes_from_the_folder_name(name, variant):
    assert v2_variant(Path("/data") / name) == variant


def test_a_folder_of_another_name_is_refused_naming_the_three():
    with pytest.raises(EvalSetError, match="not ImageNetV2.*imagenetv2-matched-frequency.tar.gz, "
                                           "imagenetv2-threshold0.7.tar.gz, imagenetv2-top-images.tar.gz.*"
                                           "imagenetv2-matched-frequency-format-val"):
        v2_variant(Path("/data/imagenet-v2"))


@pytest.mark.parametrize("index,message", [
    ("7", "class index 7 is ImageNet-1k's n01514668, which this dataset does not have"),
    ("1000", "class index 1000 is not one of ImageNet-1k's 0 ... 999"),
])
def test_a_class_index_of_a_class_the_dataset_lacks_is_refused(tmp_path, index, message):
    (tmp_path / V2_NAME / index).mkdir(parents=True)
    classes = [ClassInfo(i, wnid, "x") for i, wnid in enumerate(IMAGENET_1K[:6])]
    with pytest.raises(EvalSetError, match=message):
        read_v2(tmp_path / V2_NAME, classes)


def test_imagenet_1k_indices_become_the_datasets_labels_of_the_same_wnids():
    classes = [ClassInfo(0, IMAGENET_1K[500], "x"), ClassInfo(1, IMAGENET_1K[999], "y")]
    imagenet = ImageNet1k(classes)
    assert imagenet.label(500, "x") == 0 and imagenet.label("999", "x") == 1
    full = ImageNet1k([ClassInfo(i, wnid, "x") for i, wnid in enumerate(IMAGENET_1K)])
    assert [full.label(i, "x") for i in range(1000)] == list(range(1000))


def test_v2_folders_that_are_not_class_indices_are_refused(tmp_path):
    (tmp_path / V2_NAME / "tench").mkdir(parents=True)
    with pytest.raises(EvalSetError, match="one folder per class index .* not 'tench'"):
        read_v2(tmp_path / V2_NAME, [ClassInfo(0, "n01440764", "tench")])


def test_v2_keys_are_class_index_and_name_and_labels_the_class_of_the_index(tmp_path, images):
    v2 = read_v2(write_v2(tmp_path / V2_NAME, images), [ClassInfo(i, w, w) for i, w in enumerate(class_order(images))])
    assert v2.split == "v2" and v2.count() == len(v2_images(images))
    for key, wnid, path in v2.images:
        assert key == f"{Path(path).parent.name}_{Path(path).stem}"
        assert IMAGENET_1K[int(Path(path).parent.name)] == wnid


THREE = ImageNet1k([ClassInfo(i, wnid, "x") for i, wnid in enumerate(IMAGENET_1K[:3])])


def test_real_sets_are_keyed_by_the_val_image_they_belong_to():
    keys = {f"ILSVRC2012_val_{i:08d}" for i in (1, 2, 3)}
    assert real_labels_by_key([[2, 1, 2], [], [0]], keys, THREE, "real.json") == {
        "ILSVRC2012_val_00000001": [1, 2], "ILSVRC2012_val_00000002": [], "ILSVRC2012_val_00000003": [0]}


@pytest.mark.parametrize("sets,message", [
    ([[0], [1]], "2 label sets for 3 validation images"),
    ([[0], [1], [2], [0]], "a set without an image: \\['ILSVRC2012_val_00000004'\\]"),
    ([[0], [1], [3]], "ILSVRC2012_val_00000003: class index 3 is ImageNet-1k's n01491361, which this dataset"),
])
def test_real_sets_that_do_not_fit_the_val_images_are_refused(sets, message):
    keys = {f"ILSVRC2012_val_{i:08d}" for i in (1, 2, 3)}
    with pytest.raises(EvalSetError, match=message):
        real_labels_by_key(sets, keys, THREE, "real.json")


def test_a_whole_real_json_over_a_val_that_lacks_images_says_the_download_is_incomplete():
    """real.json's 50,000 sets over a val of 49,998 images: the images are missing, not real.json wrong."""
    keys = {f"ILSVRC2012_val_{i:08d}" for i in range(1, 50_001)} - {"ILSVRC2012_val_00000004",
                                                                     "ILSVRC2012_val_00012345"}
    with pytest.raises(EvalSetError, match=r"the source's validation split lacks 2 of the 50,000 images --real-labels "
                       r"real.json labels \(ILSVRC2012_val_00000004, ILSVRC2012_val_00012345\): the download is "
                       r"incomplete: download val again, or prepare with --allow-partial"):
        real_labels_by_key([[0]] * 50_000, keys, THREE, "real.json")
    assert len(real_labels_by_key([[0]] * 50_000, keys, THREE, "real.json", partial=True)) == 49_998


@pytest.mark.parametrize("text", ["{not json", '{"a": 1}', "[[1, 2], [\"3\"]]", "[1, 2]", "[[1.5]]",
                                  "[" * 100_000 + "]" * 100_000])  # (nested past Python's stack: a RecursionError)
def test_a_real_json_of_another_shape_is_refused(text):
    with pytest.raises(EvalSetError, match="real.json"):
        parse_real_json(text, "real.json")


def test_real_top1_counts_predictions_in_the_set_over_the_labelled_images():
    real = RealLabels({"a": [1, 2], "b": [], "c": [0], "d": [3]})
    hashes = torch.tensor([key_hash(k) for k in "abcd"])
    right, counted = real.score(torch.tensor([2, 2, 1, 3]), hashes)
    assert (int(right), int(counted)) == (2, 3)  # a right, b not counted, c wrong, d right
    right, counted = real.score(torch.tensor([3, 0]), hashes[[3, 2]])  # any order, any subset
    assert (int(right), int(counted)) == (2, 2)


def test_an_image_whose_outputs_are_not_finite_is_wrong_in_top1_real_and_a_class_subset():
    """torch.topk ranks NaN first (and an infinity): such an image was scored as predicting the first classes."""
    from train.run.loop import ClassSubset, top_classes

    nan, inf = float("nan"), float("inf")
    logits = torch.tensor([[nan, nan, nan, nan], [0.5, 1.0, 0.0, 0.0], [inf, 0.0, 0.0, 0.0]])
    top = top_classes(logits, 2, torch.isfinite(logits).all(dim=1))
    assert top.tolist() == [[4, 4], [1, 0], [4, 4]]  # past the last class: no label's, no ReaL set's
    real = RealLabels({"a": [0, 1], "b": [1], "c": [0]})  # c's set padded with -1
    right, counted = real.score(top[:, 0], torch.tensor([key_hash(k) for k in "abc"]))
    assert (int(right), int(counted)) == (1, 3)
    assert ClassSubset([0, 1], 4, torch.device("cpu")).score(logits, torch.tensor([0, 1, 0])).tolist() == [1, 1, 3]


def test_a_sample_without_a_real_set_is_an_error_not_a_miss():
    real = RealLabels({"a": [1]})
    with pytest.raises(ValueError, match="without ReaL labels"):
        real.score(torch.tensor([1]), torch.tensor([key_hash("z")]))


def test_predictions_that_are_not_one_class_a_sample_are_refused_saying_what_score_takes():
    """Logits, or argmax(1, keepdim=True)'s column, broadcast against the label sets: a torch error about sizes,
    or, where the batch is as long as the widest set, a count: here 2 right where neither is."""
    real = RealLabels({"a": [1, 2], "c": [0, 3]})
    hashes = torch.tensor([key_hash(k) for k in "ac"])
    assert [int(n) for n in real.score(torch.tensor([3, 1]), hashes)] == [0, 2]
    for predictions in (torch.tensor([[3], [1]]), torch.zeros(2, 5), torch.tensor([3])):
        with pytest.raises(ValueError) as refused:
            real.score(predictions, hashes)
        assert str(refused.value) == (
            "score takes one predicted class a sample, model(images).argmax(1), and the batch's key_hashes: not "
            f"predictions of shape {tuple(predictions.shape)} with key hashes of shape (2,)")


def test_the_official_val_keys_have_distinct_key_hashes():
    """ReaL labels are found by the 40-bit key hash batches carry: the 50,000 official keys must not collide."""
    assert len({key_hash(f"ILSVRC2012_val_{i:08d}") for i in range(1, 50_001)}) == 50_000


def test_metric_names_and_the_epoch_line():
    assert [metric_prefix(s) for s in ("val", "v2", "v2-threshold", "v2-top-images")] == [
        "val", "v2", "v2_threshold", "v2_top_images"]
    record = {"epoch": 0, "train_loss": 1.0, "train_top1": 50.0, "val_top1": 70.0, "val_top5": 90.0, "val_images": 10,
              "real_top1": 75.5, "v2_top1": 60.25, "images_per_sec": 10.0, "images_per_sec_per_gpu": 5.0,
              "data_wait_fraction": 0.1}
    assert "val top-1 70.00% top-5 90.00% on 10 images, ReaL 75.50%, v2 60.25% |" in epoch_line(record)


# ---------------------------------------------------------------- prepare

def test_prepare_adds_v2_as_a_split_and_keeps_the_real_sets(eval_dataset, images):
    dest, manifest, _, _ = eval_dataset
    assert list(manifest.splits) == ["train", "val", "v2"]
    assert manifest.splits["v2"].samples == len(v2_images(images))
    assert all((dest / s.name).is_file() and s.name.startswith("v2/v2-") for s in manifest.splits["v2"].shards)
    stored = json.loads((dest / REAL_LABELS_FILE).read_text())
    assert stored["labels"]["ILSVRC2012_val_00000001"] == [] and stored["labels"]["ILSVRC2012_val_00000002"] == list(range(6))  # the dataset's labels
    assert manifest.real_labels["images"] == len(images.val)
    assert manifest.real_labels["labelled"] == len(images.val) - len(images.val[::5])
    assert read_manifest(dest).real_labels == manifest.real_labels


def test_v2_samples_are_its_images_labelled_by_their_class_folder(eval_dataset, images):
    """Each v2 image is one of the val images (write_v2's i-th file is v2_images[i]): stored with the
    same bytes as val stores it (the same rewrite), under the dataset's label of its folder's ImageNet-1k class."""
    import webdataset as wds

    dest, manifest, v2, _ = eval_dataset

    def stored(split):
        urls = [str(dest / s.name) for s in manifest.splits[split].shards]
        return {s["__key__"]: (int(s["cls"]), s["jpg"]) for s in wds.WebDataset(urls, shardshuffle=False)}

    v2_samples, val_samples = stored("v2"), stored("val")
    files = sorted(v2.glob("*/*.jpeg"), key=lambda p: p.stem)
    assert v2_samples.keys() == {f"{p.parent.name}_{p.stem}" for p in files}
    for path, (val_key, _, _) in zip(files, v2_images(images)):
        label, jpeg = v2_samples[f"{path.parent.name}_{path.stem}"]
        assert label == val_samples[val_key][0] == class_order(images).index(IMAGENET_1K[int(path.parent.name)])
        assert jpeg == val_samples[val_key][1]


def test_a_rerun_with_the_same_eval_sets_does_nothing_and_without_them_asks_for_force(eval_dataset, sources):
    dest, manifest, v2, real = eval_dataset
    again = prepare(config(sources["official"], dest, eval_sources=(v2,), real_labels=real))
    assert again.to_json() == manifest.to_json()
    with pytest.raises(PrepareError, match=f"prepared differently: --eval-source was {v2}, now none; --real-labels was "
                                           f"{real} \\(sha256 [0-9a-f]{{12}}...\\), now none. Rerun with --force"):
        prepare(config(sources["official"], dest))


def test_the_eval_splits_leave_the_dataset_id_of_train_and_val(eval_dataset, prepared):
    """A run resumes on the dataset prepared again with evaluation sets added (or removed): its
    checkpoints name the dataset by train and val alone."""
    assert read_manifest(eval_dataset[0]).dataset_id() == read_manifest(prepared).dataset_id()


def test_variants_in_any_order_are_the_same_dataset_and_one_named_twice_is_refused(eval_dataset, sources, tmp_path):
    import shutil

    _, _, v2, _ = eval_dataset
    top = tmp_path / "imagenetv2-top-images-format-val"
    shutil.copytree(v2, top)
    first = prepare(config(sources["official"], tmp_path / "out", eval_sources=(top, v2)))
    assert list(first.splits) == ["train", "val", "v2", "v2-top-images"]
    again = prepare(config(sources["official"], tmp_path / "out", eval_sources=(v2, top)))
    assert again.to_json() == first.to_json()
    with pytest.raises(EvalSetError, match="names one ImageNetV2 variant twice"):
        prepare(config(sources["official"], tmp_path / "out", eval_sources=(v2, top, v2)))


def test_verify_finds_damaged_real_labels_and_rebuilds_them(eval_dataset, sources, tmp_path, caplog):
    import shutil

    dest = tmp_path / "copy"
    shutil.copytree(eval_dataset[0], dest)
    _, manifest, v2, real = eval_dataset
    path = dest / REAL_LABELS_FILE
    good = path.read_bytes()
    path.write_bytes(good.replace(b"[0,1,2,3,4,5]", b"[0,1,2,3,4,4]", 1))  # the same size: as a shard, only --verify sees it
    prepare(config(sources["official"], dest, eval_sources=(v2,), real_labels=real, verify=True))
    assert "damaged: real_labels.json fails its checksum" in caplog.text
    assert path.read_bytes() == good


def test_a_missing_real_labels_file_makes_the_dataset_not_ready(eval_dataset, tmp_path):
    import shutil

    from shards.manifest import DatasetNotReady, read_complete_manifest

    dest = tmp_path / "copy"
    shutil.copytree(eval_dataset[0], dest)
    (dest / REAL_LABELS_FILE).unlink()
    with pytest.raises(DatasetNotReady, match="real_labels.json is missing"):
        read_complete_manifest(dest)


def test_real_labels_that_do_not_match_the_val_images_stop_prepare_in_one_line(sources, images, tmp_path, run_here):
    from prepare.cli import main

    real = tmp_path / "real.json"
    real.write_text(json.dumps([[0]] * (len(images.val) + 1)))
    result = run_here(main, "--source", sources["official"], "--dest", tmp_path / "out", "--real-labels", real)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"{len(images.val) + 1} label sets for {len(images.val)} validation images" in errors[0]
    assert "a set without an image: ['ILSVRC2012_val_00000031']" in errors[0]
    assert "train: read" not in result.stderr  # the official layout lists its val keys: checked before reading
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_wrong_eval_source_is_refused_before_anything_is_read(sources, tmp_path, run_here):
    from prepare.cli import main

    (tmp_path / "imagenet-v2" / "0").mkdir(parents=True)
    result = run_here(main, "--source", sources["official"], "--dest", tmp_path / "out",
                      "--eval-source", tmp_path / "imagenet-v2")
    assert result.returncode == 2 and "not ImageNetV2" in result.stderr
    assert "train: read" not in result.stderr


# ---------------------------------------------------------------- the library and training

@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_loader_reads_every_v2_image_once_over_the_ranks(eval_dataset, world):
    from train import ImageNetLoader

    dest, manifest, _, _ = eval_dataset
    keys = []
    for rank in range(world):
        loader = ImageNetLoader(dest, "v2", batch_size=4, image_size=32, device="cpu", workers=1, rank=rank,
                                world_size=world)
        try:
            for batch in loader.batches():
                keys += batch.key_hashes.tolist()
                assert batch.images.shape[-1] == 32
        finally:
            loader.close()
    assert len(keys) == len(set(keys)) == manifest.splits["v2"].samples


def test_a_split_the_dataset_lacks_names_the_option_that_adds_it(prepared):
    from train import ImageNetLoader

    with pytest.raises(ConfigError, match="v2 is an evaluation set this dataset was not prepared with.*--eval-source"):
        ImageNetLoader(prepared, "v2", batch_size=4, image_size=32, device="cpu", workers=1)


def test_real_labels_of_a_dataset_without_them_are_none(prepared):
    assert RealLabels.of(prepared) is None


def predictions_alone(model: torch.nn.Module, dest: Path, split: str) -> dict[tuple[str, int], list[int]]:
    """{(the image's pixels' hash, its label): [the class predicted for each copy]}: every image of `split`
    evaluated alone, a batch of one. A convolution's numerics depend on the batch around an image (its
    size, the image's place in it), so only images batched alike are promised the same logits."""
    import hashlib

    from train import ImageNetLoader

    found: dict[tuple[str, int], list[int]] = {}
    loader = ImageNetLoader(dest, split, batch_size=1, image_size=32, device="cpu", workers=1)
    try:
        with torch.no_grad():
            for batch in loader.batches():
                pixels = hashlib.sha256(batch.images.numpy().tobytes()).hexdigest()
                predicted = int(model(batch.images).argmax(1))
                found.setdefault((pixels, int(batch.labels)), []).append(predicted)
    finally:
        loader.close()
    return found


@pytest.mark.slow
def test_two_ranks_report_val_v2_and_real_top1_with_every_image_counted_once(eval_dataset, tmp_path, images):
    from test_train import train_args
    from train.run.checkpoint import checkpoint_path, load_checkpoint
    from train.run.models import build_model

    dest, manifest, _, _ = eval_dataset
    ranks = warm.Ranks(2, train_args(dest, tmp_path / "run", "--epochs", 1, "--workers", 1), tmp_path)
    assert ranks.wait() == [0, 0], ranks.text()
    record = read_metrics(tmp_path / "run")[-1]
    assert record["val_images"] == len(images.val) and record["v2_images"] == len(v2_images(images))
    assert record["real_images"] == manifest.real_labels["labelled"] and record["real_top1"] == 100.0
    assert f"ReaL 100.00%, v2 {record['v2_top1']:.2f}%" in ranks.text()
    report = warm.run("train.report", tmp_path / "run")
    assert report.returncode == 0 and f"ReaL 100.00%, v2 {record['v2_top1']:.2f}%" in report.stdout
    # evaluated again on its own, on one rank: every evaluation set's figures the same (train/run/evaluation.py)
    evaluated = warm.run("train.evaluate", tmp_path / "run", "--workers", 1)
    assert evaluated.returncode == 0 and f"ReaL 100.00%, v2 {record['v2_top1']:.2f}%" in evaluated.stderr
    again = json.loads((tmp_path / "run" / "eval.jsonl").read_text())
    counted = [name for name in record if name.startswith(("val_", "v2_", "real_")) and not name.endswith("_loss")]
    assert len(counted) >= 10 and {name: again[name] for name in counted} == {name: record[name] for name in counted}
    for loss in ("val_loss", "v2_loss"):  # sums of other batches: the same to float32's rounding
        assert again[loss] == pytest.approx(record[loss], rel=1e-6)
    # v2 holds val's images twice, under the same labels: the run's model predicts each copy as it predicts
    # val's image when each is evaluated alone (the run's batches of 4 mix other images around them)
    model = build_model(ARCH, manifest.num_classes)
    model.load_state_dict(load_checkpoint(checkpoint_path(tmp_path / "run")).model)
    model.eval()
    val, v2 = predictions_alone(model, dest, "val"), predictions_alone(model, dest, "v2")
    assert sum(map(len, val.values())) == len(images.val) and sum(map(len, v2.values())) == len(v2_images(images))
    assert v2 == {image: predicted * 2 for image, predicted in val.items()}


@pytest.mark.slow
def test_two_nodes_sharing_the_read_write_the_eval_sets_of_a_one_node_prepare(eval_dataset, sources, tmp_path):
    from conftest import tree_bytes
    from test_shared_read import finish, manifest_without_run_stats, start_nodes

    one_node, _, v2, real = eval_dataset
    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(sources["official"], dests, "--eval-source", v2, "--real-labels", real, workers=2))
    assert [code for code, _ in results] == [0, 0], results
    for dest, (_, log) in zip(dests, results):
        assert "v2: read" in log and "shared read: 2 of 2 nodes" in log
        assert tree_bytes(dest) == tree_bytes(one_node) and any(name.startswith("v2/") for name in tree_bytes(dest))
        assert (dest / REAL_LABELS_FILE).read_bytes() == (one_node / REAL_LABELS_FILE).read_bytes()
        assert manifest_without_run_stats(dest) == manifest_without_run_stats(one_node)


# ---------------------------------------------------------------- the archive as downloaded, streamed

def gzip_tar_of(folder: Path, archive: Path) -> Path:
    """The folder as ImageNetV2's archive holds it: imagenetv2-<variant>-format-val/<index>/<name>.jpeg."""
    import tarfile

    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return archive


def v2_samples(dest: Path) -> dict[str, tuple[int, bytes]]:
    import webdataset as wds

    urls = [str(dest / s.name) for s in read_manifest(dest).splits["v2"].shards]
    return {s["__key__"]: (int(s["cls"]), s["jpg"]) for s in wds.WebDataset(urls, shardshuffle=False)}


def test_the_archive_streamed_gives_the_samples_of_its_extracted_folder(eval_dataset, sources, tmp_path):
    dest, _, v2, _ = eval_dataset
    archive = gzip_tar_of(v2, tmp_path / "imagenetv2-matched-frequency.tar.gz")
    streamed = prepare(config(sources["official"], tmp_path / "out", eval_sources=(archive,)))
    assert streamed.splits["v2"].samples == read_manifest(dest).splits["v2"].samples
    assert v2_samples(tmp_path / "out") == v2_samples(dest)
    assert streamed.source["eval_sets"][0]["size"] == archive.stat().st_size


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_v2_archive_stops_prepare_in_one_line_naming_it(eval_dataset, sources, tmp_path, run_here, damage):
    from prepare.cli import main

    _, _, v2, _ = eval_dataset
    archive = gzip_tar_of(v2, tmp_path / "imagenetv2-top-images.tar.gz")
    data = bytearray(archive.read_bytes())
    if damage == "truncated":
        data = data[:len(data) * 2 // 3]
    else:
        data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    result = run_here(main, "--source", sources["official"], "--dest", tmp_path / "out", "--eval-source", archive)
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert str(archive) in errors[0] and "download it again" in errors[0]
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_an_archive_member_of_a_class_the_dataset_lacks_is_named(sources, images, tmp_path):
    folder = tmp_path / V2_NAME
    (folder / "6").mkdir(parents=True)
    (folder / "6" / "abc.jpeg").write_bytes(images.val[0][2])
    archive = gzip_tar_of(folder, tmp_path / "imagenetv2-matched-frequency.tar.gz")
    with pytest.raises(EvalSetError, match=f"{archive}:{V2_NAME}/6/abc.jpeg: class index 6 is ImageNet-1k's "
                                           "n01498041, which this dataset does not have"):
        prepare(config(sources["official"], tmp_path / "out", eval_sources=(archive,)))


def test_the_manuals_real_snippet_runs_as_printed(eval_dataset):
    """docs/library.md's 'ImageNetV2 and ReaL' block, run as printed with its names bound: the text
    and the library cannot drift apart."""
    import re

    import torchvision

    from conftest import ROOT
    from train import ImageNetLoader

    manual = (ROOT / "docs" / "library.md").read_text().split("## ImageNetV2 and ReaL", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", manual, re.S).group(1)
    root = eval_dataset[0]
    train_data = ImageNetLoader(root, "train", batch_size=8, image_size=32, device="cpu", workers=1)
    val_data = train_data.with_split("val")
    names = {"root": root, "train_data": train_data, "val_data": val_data,
             "model": torchvision.models.resnet18(num_classes=6).eval()}
    try:
        with torch.no_grad():
            exec(snippet, names)
        assert len(names["v2_data"]) > 0 and names["real"] is not None
        assert 0 <= int(names["right"]) <= int(names["counted"]) <= 8
    finally:
        for loader in (names.get("v2_data"), val_data, train_data):
            if loader is not None:
                loader.close()


def test_a_training_image_whose_outputs_are_not_finite_is_wrong_in_train_top1():
    """argmax takes NaN (and an infinity) for the highest: fp16's skipped steps, whose logits overflowed, counted
    their images of the class NaN fell on as right; an epoch of them all reported train_top1 at a class's share."""
    from train.run.loop import right_in_top1

    nan, inf = float("nan"), float("inf")
    logits = torch.tensor([[nan, 0.0, 0.0], [0.0, nan, 0.0], [inf, 0.0, 0.0], [0.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    assert int(right_in_top1(logits, torch.tensor([0, 1, 0, 1, 1]))) == 1  # the finite image of class 1 alone
