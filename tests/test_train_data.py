"""The loader's stages on real shards: seeking into a shard, the planned order, resume, transforms."""

import io
from collections import Counter

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image
from torchvision import transforms as T

from shards.manifest import read_manifest
from shards.plan import buffered_order, seeded_rng, steps_per_epoch
from train.data import PlanArgs, PlannedShards, key_hash, make_loader, read_piece, reorder, to_device
from train.transforms import TrainTransform, ValTransform


def shard_paths(prepared, split="train"):
    return [prepared / s.name for s in read_manifest(prepared).splits[split].shards]


def test_read_piece_seeks_to_the_exact_samples(prepared):
    path = shard_paths(prepared)[0]
    everything = [s["__key__"] for s in wds.WebDataset(str(path), shardshuffle=False)]
    assert [s["__key__"] for s in read_piece(path, 0, len(everything))] == everything
    assert [s["__key__"] for s in read_piece(path, 3, 7)] == everything[3:7]
    assert [s["__key__"] for s in read_piece(path, len(everything) - 1, len(everything))] == everything[-1:]


def test_reorder_follows_the_plan_and_skips_what_was_consumed():
    order = buffered_order(20, 5, seeded_rng(3))
    samples = [{"i": i} for i in range(20)]
    assert [s["i"] for s in reorder(iter(samples), order, 0)] == list(order)
    assert [s["i"] for s in reorder(iter(samples), order, 7)] == list(order[7:])


def loader_key_hashes(prepared, workers, start_step=0, epoch=0, batch=4):
    sizes = [s.samples for s in read_manifest(prepared).splits["train"].shards]
    args = PlanArgs(split="train", shard_sizes=sizes, epoch=epoch, seed=0, world_size=1, rank=0, num_workers=workers,
                    batch_size=batch, shuffle_buffer=8, start_step=start_step)
    dataset = PlannedShards(shard_paths(prepared), args, ValTransform(32))
    return [batch_hashes.tolist() for _, _, batch_hashes in make_loader(dataset, batch, workers, False)]


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_a_resumed_loader_yields_exactly_the_batches_not_yet_taken(prepared, workers):
    full = loader_key_hashes(prepared, workers)
    total = sum(s.samples for s in read_manifest(prepared).splits["train"].shards)
    assert len(full) == steps_per_epoch(total, 1, 4)
    for step in (1, 5, len(full) - 1):
        assert loader_key_hashes(prepared, workers, start_step=step) == full[step:]


def test_batches_are_uint8_nhwc_and_normalised_on_the_device(prepared):
    sizes = [s.samples for s in read_manifest(prepared).splits["val"].shards]
    args = PlanArgs(split="val", shard_sizes=sizes, epoch=0, seed=0, world_size=1, rank=0, num_workers=0, batch_size=8,
                    shuffle_buffer=1)
    images, labels, _ = next(iter(make_loader(PlannedShards(shard_paths(prepared, "val"), args, ValTransform(32)),
                                              8, 0, False)))
    assert images.dtype == torch.uint8 and images.shape == (8, 32, 32, 3) and labels.dtype == torch.int64
    x = to_device(images, torch.device("cpu"))
    assert x.shape == (8, 3, 32, 32) and x.is_contiguous(memory_format=torch.channels_last)
    assert -3 < float(x.mean()) < 3


def jpeg(size=(400, 300)):
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).resize(size, Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=95)
    return out.getvalue(), image


def test_train_augmentation_is_a_function_of_seed_epoch_and_key():
    data, _ = jpeg()
    transform = TrainTransform(64, seed=0)
    a = transform(data, 0, "k1")
    assert a.shape == (64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, transform(data, 0, "k1"))
    assert not np.array_equal(a, transform(data, 1, "k1"))
    flips = Counter(transform.crop_and_flip(Image.open(io.BytesIO(data)), 0, f"k{i}")[1] for i in range(400))
    assert 150 < flips[True] < 250


def test_validation_transform_matches_torchvision_resize_and_centre_crop():
    data, _ = jpeg((500, 375))
    ours = ValTransform(224)(data).astype(np.float32)
    reference = T.Compose([T.Resize(256), T.CenterCrop(224)])(Image.open(io.BytesIO(data)).convert("RGB"))
    assert np.abs(ours - np.asarray(reference, dtype=np.float32)).mean() < 2.0  # 8-bit levels


def test_key_hash_is_stable_and_40_bits():
    assert key_hash("n01440764_10026") == key_hash("n01440764_10026") < 1 << 40


def test_device_decode_path_matches_the_cpu_path(prepared):
    """--decode gpu's path, run on the CPU device: the same crops, and nearly the same pixels."""
    from train.data import collate
    from train.transforms import TrainCrop, ValCrop

    samples = list(wds.WebDataset(str(shard_paths(prepared, "val")[0]), shardshuffle=False))[:6]
    cpu = torch.stack([torch.from_numpy(ValTransform(48)(s["jpg"])) for s in samples])
    encoded, _, _ = collate([(ValCrop(48)(s["jpg"]), 0, 0) for s in samples])
    device = to_device(encoded, torch.device("cpu"))
    reference = to_device(cpu, torch.device("cpu"))
    assert device.shape == reference.shape == (6, 3, 48, 48)
    assert (device - reference).abs().mean() < 0.1  # normalised units: about 6 of 255 levels

    train, crop = TrainTransform(48, seed=3), TrainCrop(48, seed=3)
    for s in samples:
        box, flip = train.crop_and_flip(Image.open(io.BytesIO(s["jpg"])), 2, s["__key__"])
        encoded = crop(s["jpg"], 2, s["__key__"])
        assert encoded.box.tolist() == list(box) and encoded.flip == flip


def fake_batches(count, fail_at=None):
    for i in range(count):
        if i == fail_at:
            raise RuntimeError("a shard holds fewer samples than the manifest lists")
        yield torch.full((2, 4, 4, 3), i, dtype=torch.uint8), torch.tensor([i, i]), torch.tensor([i])


def test_device_batches_are_to_device_of_each_batch_in_order():
    from train.data import DeviceBatches

    cpu = torch.device("cpu")
    with DeviceBatches(fake_batches(7), cpu) as batches:
        got = list(batches)
    assert [int(y[0]) for _, y, _ in got] == list(range(7))
    for (x, _, _), (images, _, _) in zip(got, fake_batches(7)):
        assert torch.equal(x, to_device(images, cpu))


def test_device_batches_stop_their_thread_when_the_consumer_leaves_early():
    from train.data import DeviceBatches

    with DeviceBatches(fake_batches(1000), torch.device("cpu"), depth=2) as batches:
        for step, _ in enumerate(batches):
            if step == 3:
                break
    assert not batches.thread.is_alive()


def test_device_batches_raise_the_loaders_error_in_the_consumer():
    from train.data import DeviceBatches

    seen = []
    with pytest.raises(RuntimeError, match="fewer samples than the manifest"):
        with DeviceBatches(fake_batches(10, fail_at=4), torch.device("cpu")) as batches:
            for _, y, _ in batches:
                seen.append(int(y[0]))
    assert seen == [0, 1, 2, 3] and not batches.thread.is_alive()
