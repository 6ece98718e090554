"""The loader on real shards: the sample table, the planned order, resume, any thread count, the
PIL fallback, damaged samples, and the batches' way onto the device."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image

from jpegs import jpeg
from shards.manifest import read_manifest
from shards.plan import steps_per_epoch
from train.data import (Batch, DeviceBatches, Loader, PlanArgs, ShardSet, chunk_size, decode_to_device, key_hash,
                        to_device)
from train.decoder import pil_decode_crop
from train.device_decode import DeviceDecoder
from train.transforms import centre_crops


def shard_set(prepared, split="train") -> ShardSet:
    return ShardSet.of(prepared, read_manifest(prepared), split)


def plan_args(shards: ShardSet, split="train", batch=4, epoch=0, start_step=0, world_size=1, rank=0) -> PlanArgs:
    return PlanArgs(split=split, epoch=epoch, seed=0, world_size=world_size, rank=rank,
                    batch_size=batch, shuffle_buffer=8, start_step=start_step)


def epoch_batches(shards: ShardSet, threads: int, size=32, **plan) -> list[Batch]:
    """Every batch of an epoch, copied out of the ring buffers (a batch is valid until the next)."""
    batch = plan.get("batch", 4)
    with Loader({plan.get("split", "train"): shards}, batch_size=batch, image_size=size, threads=threads) as loader:
        return [Batch(b.images.clone(), b.labels, b.key_hashes, b.bad) for b in loader.epoch(plan_args(shards, **plan))]


def test_the_sample_table_matches_what_webdataset_reads(prepared):
    shards = shard_set(prepared)
    shards.ensure_indexed(np.arange(sum(shards.sizes)))
    samples = [s for path in shards.paths for s in wds.WebDataset(str(path), shardshuffle=False)]
    assert shards.labels.tolist() == [int(s["cls"]) for s in samples]
    assert [int(h) >> 24 for h in shards.hashes] == [key_hash(s["__key__"]) for s in samples]
    images = shards.images(np.arange(len(samples)))
    assert all(bytes(images.data(i)) == s["jpg"] for i, s in enumerate(samples))
    assert shards.describe(5) == f"{shards.paths[0]}: {samples[5]['__key__']}"


def test_validation_reads_every_sample_once_with_its_label(prepared):
    shards = shard_set(prepared, "val")
    got = epoch_batches(shards, threads=2, split="val", batch=4)
    expected = {key_hash(s["__key__"]): int(s["cls"]) for p in shards.paths for s in wds.WebDataset(str(p), shardshuffle=False)}
    hashes = [h for b in got for h in b.key_hashes.tolist()]
    labels = [y for b in got for y in b.labels.tolist()]
    assert sorted(hashes) == sorted(expected) and dict(zip(hashes, labels)) == expected
    assert [len(b.labels) for b in got][:-1] == [4] * (len(got) - 1)  # a last partial batch


def test_validation_pixels_are_the_centre_crop(prepared):
    shards = shard_set(prepared, "val")
    (first, *_) = epoch_batches(shards, threads=1, split="val", batch=4, size=48)
    shards.ensure_indexed(np.arange(4))  # the loader closed its shard sets; map them again
    for i in range(4):
        data = bytes(shards.images(np.array([i])).data(0))
        width, height = Image.open(io.BytesIO(data)).size
        box = centre_crops(np.array([width]), np.array([height]))[0]
        reference = pil_decode_crop(data, tuple(box.tolist()), False, 48)
        assert np.abs(first.images[i].numpy().astype(int) - reference).max() <= 2


@pytest.mark.parametrize("threads", [1, 3])
def test_a_resumed_epoch_yields_exactly_the_batches_not_yet_taken(prepared, threads):
    shards = shard_set(prepared)
    full = epoch_batches(shards, threads)
    assert len(full) == steps_per_epoch(sum(shards.sizes), 1, 4)
    for step in (1, 5, len(full) - 1):
        resumed = epoch_batches(shards, threads, start_step=step)
        assert [b.key_hashes.tolist() for b in resumed] == [b.key_hashes.tolist() for b in full[step:]]
        assert all(torch.equal(a.images, b.images) for a, b in zip(resumed, full[step:]))


@pytest.mark.parametrize("batch, threads, chunk", [(64, 2, 32), (64, 15, 5), (256, 15, 18), (512, 4, 32), (8, 16, 4),
                                                  (3, 1, 4)])
def test_each_batch_spreads_over_every_thread_in_chunks_of_4_to_32(batch, threads, chunk):
    assert chunk_size(batch, threads) == chunk


def test_batches_are_the_same_pixels_for_any_thread_count(prepared):
    """One thread decodes a batch of 12 in one task, five in three: the same pixels."""
    shards = shard_set(prepared)
    one, many = epoch_batches(shards, 1, epoch=2, batch=12), epoch_batches(shards, 5, epoch=2, batch=12)
    assert [b.key_hashes.tolist() for b in one] == [b.key_hashes.tolist() for b in many]
    assert all(torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) for a, b in zip(one, many))
    other_epoch = epoch_batches(shards, 1, epoch=3)
    assert [b.key_hashes.tolist() for b in other_epoch] != [b.key_hashes.tolist() for b in one]


def test_ranks_read_disjoint_samples(prepared):
    shards = shard_set(prepared)
    seen = [set(h for b in epoch_batches(shards, 2, world_size=3, rank=r) for h in b.key_hashes.tolist())
            for r in range(3)]
    assert not (seen[0] & seen[1] or seen[1] & seen[2] or seen[0] & seen[2])
    assert sum(map(len, seen)) == 3 * steps_per_epoch(sum(shards.sizes), 3, 4) * 4


def test_leaving_an_epoch_early_and_starting_another(prepared):
    shards = shard_set(prepared)
    with Loader({"train": shards}, batch_size=4, image_size=32, threads=2) as loader:
        batches = loader.epoch(plan_args(shards))
        next(batches)
        batches.close()  # a preemption: the queued decodes are dropped
        assert len(list(loader.epoch(plan_args(shards, epoch=1)))) == steps_per_epoch(sum(shards.sizes), 1, 4)


def write_shard(path, samples: list[tuple[str, bytes, int]]) -> None:
    with wds.TarWriter(str(path), encoder=False) as writer:
        for key, data, label in samples:
            writer.write({"__key__": key, "jpg": data, "cls": str(label).encode(), "json": b"{}"})


def cmyk(data: bytes) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("CMYK").save(out, "JPEG")
    return out.getvalue()


def test_images_the_decoder_refuses_go_through_pil_counted_and_logged_once(tmp_path, caplog):
    good = [jpeg(seed=s) for s in range(6)]
    write_shard(tmp_path / "s.tar", [(f"k{i}", cmyk(d) if i in (1, 4) else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [6])
    with caplog.at_level(logging.WARNING, logger="train"), \
            Loader({"val": shards}, batch_size=3, image_size=40, threads=2) as loader:
        batches = [b.images.clone() for b in loader.epoch(plan_args(shards, split="val", batch=3))]
        assert loader.fallbacks == 2
    assert caplog.text.count("decoded by the PIL path") == 1
    pixels = torch.cat(batches)
    for i in (1, 4):
        width, height = Image.open(io.BytesIO(good[i])).size
        box = centre_crops(np.array([width]), np.array([height]))[0]
        reference = pil_decode_crop(cmyk(good[i]), tuple(box.tolist()), False, 40)
        assert np.abs(pixels[i].numpy().astype(int) - reference).max() <= 2


def test_a_damaged_sample_is_left_out_and_named(tmp_path):
    good = [jpeg(seed=s) for s in range(6)]
    middle = len(good[2]) // 3  # inside the rows the centre crop decodes
    broken = good[2][:middle] + b"\xff\xd9" + good[2][middle + 2:]
    write_shard(tmp_path / "s.tar", [(f"k{i}", broken if i == 2 else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [6])
    with Loader({"val": shards}, batch_size=3, image_size=40, threads=2) as loader:
        batches = list(loader.epoch(plan_args(shards, split="val", batch=3)))
    assert [len(b.labels) for b in batches] == [2, 3]
    assert batches[0].labels.tolist() == [0, 1] and batches[0].bad == ((f"{tmp_path / 's.tar'}: k2", "damaged JPEG data"),)


def test_batches_are_uint8_nhwc_and_normalised_on_the_device(prepared):
    (batch, *_) = epoch_batches(shard_set(prepared, "val"), 1, split="val", batch=8)
    assert batch.images.dtype == torch.uint8 and batch.images.shape == (8, 32, 32, 3) and batch.labels.dtype == torch.int64
    x = to_device(batch.images, torch.device("cpu"))
    assert x.shape == (8, 3, 32, 32) and x.is_contiguous(memory_format=torch.channels_last)
    assert -3 < float(x.mean()) < 3


def test_device_decode_batches_carry_the_same_crops(prepared):
    """--decode gpu's path, on the CPU device: the threads only draw crops; the device decodes."""
    shards = shard_set(prepared, "val")
    cpu = epoch_batches(shards, 1, split="val", batch=6, size=48)[0]
    with Loader({"val": shards}, batch_size=6, image_size=48, threads=2, decode="gpu") as loader:
        encoded = next(loader.epoch(plan_args(shards, split="val", batch=6)))
    assert encoded.key_hashes.tolist() == cpu.key_hashes.tolist()
    device, kept, bad = decode_to_device(encoded.images, torch.device("cpu"), DeviceDecoder())
    reference = to_device(cpu.images, torch.device("cpu"))
    assert kept == list(range(6)) and bad == ()
    assert device.shape == reference.shape == (6, 3, 48, 48)
    assert (device - reference).abs().mean() < 0.1  # normalised units: about 6 of 255 levels


def test_device_decode_batches_are_the_same_for_any_thread_count(prepared):
    """--decode gpu: the windows, crops and flips the threads draw, and so the device's pixels,
    depend on (seed, epoch, key) alone."""
    shards = shard_set(prepared)

    def encoded(threads):
        with Loader({"train": shards}, batch_size=4, image_size=32, threads=threads, decode="gpu") as loader:
            return [b.images for b in loader.epoch(plan_args(shards, epoch=1))]

    one, many = encoded(1), encoded(5)
    assert len(one) == len(many) > 1
    for a, b in zip(one, many):
        assert np.array_equal(a.data, b.data) and np.array_equal(a.offsets, b.offsets)
        assert np.array_equal(a.windows, b.windows)
        assert torch.equal(a.boxes, b.boxes) and torch.equal(a.flips, b.flips)
    assert any(b.flips.any() for b in one) and not all(b.flips.all() for b in one)


def fake_batches(count, fail_at=None):
    for i in range(count):
        if i == fail_at:
            raise RuntimeError("a shard holds fewer samples than the manifest lists")
        yield Batch(torch.full((2, 4, 4, 3), i, dtype=torch.uint8), torch.tensor([i, i]), torch.tensor([i]))


def test_device_batches_are_to_device_of_each_batch_in_order():
    cpu = torch.device("cpu")
    with DeviceBatches(fake_batches(7), cpu) as batches:
        got = list(batches)
    assert [int(b.labels[0]) for b in got] == list(range(7))
    for b, original in zip(got, fake_batches(7)):
        assert torch.equal(b.images, to_device(original.images, cpu))


def test_device_batches_stop_their_thread_when_the_consumer_leaves_early():
    with DeviceBatches(fake_batches(1000), torch.device("cpu"), depth=2) as batches:
        for step, _ in enumerate(batches):
            if step == 3:
                break
    assert not batches.thread.is_alive()


def test_device_batches_raise_the_loaders_error_in_the_consumer():
    seen = []
    with pytest.raises(RuntimeError, match="fewer samples than the manifest"):
        with DeviceBatches(fake_batches(10, fail_at=4), torch.device("cpu")) as batches:
            for b in batches:
                seen.append(int(b.labels[0]))
    assert seen == [0, 1, 2, 3] and not batches.thread.is_alive()


def test_device_decode_leaves_out_a_jpeg_cut_short_and_names_it(tmp_path):
    """--decode gpu on the CPU device: a JPEG cut short (its header whole, so it has a size) is
    found by the threads' marker check, left out and named; nvImageCodec never sees it."""
    good = [jpeg(seed=s) for s in range(6)]
    broken = good[3][: len(good[3]) // 2]
    write_shard(tmp_path / "s.tar", [(f"k{i}", broken if i == 3 else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [6])
    with Loader({"val": shards}, batch_size=3, image_size=40, threads=2, decode="gpu") as loader, \
            DeviceBatches(loader.epoch(plan_args(shards, split="val", batch=3)), torch.device("cpu")) as batches:
        got = list(batches)
    assert [len(b.labels) for b in got] == [3, 2] and got[1].labels.tolist() == [4, 5]
    assert got[1].bad == ((f"{tmp_path / 's.tar'}: k3", "damaged JPEG data"),)
    assert got[1].images.shape == (2, 3, 40, 40)
