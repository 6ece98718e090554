"""The loader on real shards: the planned order, resume, any thread count, the PIL fallback, and
bad samples of every kind (damaged, oversized, unreadable by PIL, labels that are no class index)
left out and named, for both decode strategies."""

from __future__ import annotations

import io
import itertools
import logging

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image

from conftest import shard_set, write_shard
from jpegs import bmp_claiming, cmyk, jpeg, png_claiming, with_sampling, with_size
from shards.plan import steps_per_epoch
from train import decoder
from train.decoder import pil_decode_crop
from train.loader import Batch, Loader, PlanArgs, chunk_size
from train.shard_index import ShardSet, key_hash
from train.transforms import centre_crops, default_resize


def plan_args(shards: ShardSet, split="train", batch=4, epoch=0, start_step=0, world_size=1, rank=0, size=32
              ) -> PlanArgs:
    return PlanArgs(split=split, epoch=epoch, seed=0, world_size=world_size, rank=rank,
                    batch_size=batch, shuffle_buffer=8, size=size, start_step=start_step)


def epoch_batches(shards: ShardSet, threads: int, size=32, **plan) -> list[Batch]:
    """Every batch of an epoch, copied out of the ring buffers (a batch is valid until the next)."""
    batch = plan.get("batch", 4)
    with Loader({plan.get("split", "train"): shards}, batch_size=batch, image_size=size, threads=threads) as loader:
        return [Batch(b.images.clone(), b.labels, b.key_hashes, b.bad)
                for b in loader.epoch(plan_args(shards, size=size, **plan))]


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
        box = centre_crops(np.array([width]), np.array([height]), default_resize(48), 48)[0]
        reference = pil_decode_crop(data, tuple(box.tolist()), False, 48, dct_scaling=False)
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


def resident_bytes(shards: ShardSet) -> int:
    """The bytes of the shards' maps in this process's resident set (/proc/self/smaps' Rss of each map)."""
    import ctypes

    starts = {ctypes.addressof(view.obj) for view in shards.maps if view is not None}
    resident, counted = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):  # a map's first line: start-end perms offset ...
                counted = int(head.split("-")[0], 16) in starts
            elif counted and line.startswith("Rss:"):
                resident += int(line.split()[1]) * 1024
    return resident


@pytest.mark.parametrize("taken", [None, 2])  # whole epochs, or a loop that leaves each after 2 of its 5 batches
def test_a_long_run_keeps_no_more_shard_pages_resident_than_one_epoch_reads(prepared, taken):
    """Each epoch a rank reads other shards: a map that kept every page it had read made a rank's resident set grow,
    epoch after epoch, towards the whole split (rank 0 of 8 here: 13% of the shards after one epoch, 88% after
    twelve; ImageNet's 145 GB in each rank of a node, which top, Slurm's accounting and seff add up), though no
    memory was in use but the shared page cache. A pass lets go of a shard's pages once it has read it, and of
    all it read as it is left."""
    shards = shard_set(prepared)
    largest = max(path.stat().st_size for path in shards.paths)
    resident = []
    with Loader({"train": shards}, batch_size=4, image_size=32, threads=2) as loader:
        for epoch in range(12):
            batches = loader.epoch(plan_args(shards, epoch=epoch, world_size=8))
            assert sum(len(b.labels) for b in itertools.islice(batches, taken)) > 0
            batches.close()
            resident.append(resident_bytes(shards))
        assert shards.indexed.mean() > 0.75  # the rank read most shards over the epochs
    assert max(resident) <= largest, resident


def png(data: bytes) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(data)).save(out, "PNG")
    return out.getvalue()


def test_cmyk_decodes_natively_and_other_formats_go_through_pil_counted_and_logged_once(tmp_path, caplog):
    """CMYK JPEGs (the real archive has 22; prepare converts them, damage could bring them back)
    decode in the native path, read as PIL reads them; a PNG goes through PIL, counted."""
    good = [jpeg(seed=s) for s in range(6)]
    odd = {1: cmyk, 3: png, 4: png}
    write_shard(tmp_path / "s.tar", [(f"k{i}", odd[i](d) if i in odd else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [6], classes=10)
    with caplog.at_level(logging.WARNING, logger="train"), \
            Loader({"val": shards}, batch_size=3, image_size=40, threads=2) as loader:
        batches = [b.images.clone() for b in loader.epoch(plan_args(shards, split="val", batch=3, size=40))]
        assert loader.fallbacks == 2
    assert caplog.text.count("decoded by the PIL path") == 1
    pixels = torch.cat(batches)
    for i, make in odd.items():
        width, height = Image.open(io.BytesIO(good[i])).size
        box = centre_crops(np.array([width]), np.array([height]), default_resize(40), 40)[0]
        reference = pil_decode_crop(make(good[i]), tuple(box.tolist()), False, 40, dct_scaling=False)
        assert np.abs(pixels[i].numpy().astype(int) - reference).max() <= 2


def test_a_damaged_sample_is_left_out_and_named(tmp_path):
    good = [jpeg(seed=s) for s in range(6)]
    middle = len(good[2]) // 3  # inside the rows the centre crop decodes
    broken = good[2][:middle] + b"\xff\xd9" + good[2][middle + 2:]
    write_shard(tmp_path / "s.tar", [(f"k{i}", broken if i == 2 else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [6], classes=10)
    with Loader({"val": shards}, batch_size=3, image_size=40, threads=2) as loader:
        batches = list(loader.epoch(plan_args(shards, split="val", batch=3, size=40)))
    assert [len(b.labels) for b in batches] == [2, 3]
    assert batches[0].labels.tolist() == [0, 1] and batches[0].bad == ((f"{tmp_path / 's.tar'}: k2", "damaged JPEG data"),)




def hostile_samples() -> tuple[list[tuple[str, bytes, int | bytes]], dict[str, str]]:
    """Good JPEGs among images no decoder may take, and labels that are no class index (10
    classes): (samples, {key: the start of why it is left out})."""
    good = [jpeg(seed=s) for s in range(4)]
    too_large = "more pixels than shards.limits.MAX_PIXELS allows"
    bad = {
        "bomb-png": (png_claiming(30000, 8000), 1, "decompression bomb"),  # past PIL's own limit: its error
        "bomb-bmp": (bmp_claiming(30000, 8000), 1, "decompression bomb"),
        "big-png": (png_claiming(9000, 9000), 1, "9000 x 9000 pixels, more than the limit"),  # under PIL's, over ours
        "big-cmyk": (with_size(cmyk(good[0]), 30000, 8000), 1, too_large),  # the decoder once refused it to PIL
        "lying-4x2": (with_sampling(with_size(good[1], 65500, 65500), [(4, 2), (1, 1), (1, 1)]), 1, too_large),
        "cut-png": (png_claiming(64, 48), 1, "PIL does not decode it"),  # a valid header, its pixels missing
        "word-label": (good[2], b"seven", "its .cls is not a class index from 0 to 9"),
        "no-class": (good[3], 12, "its .cls is not a class index from 0 to 9"),
    }
    samples = [(f"good{i}", data, i) for i, data in enumerate(good)]
    samples[2:2] = [(key, data, label) for key, (data, label, _) in bad.items()]
    return samples, {key: why for key, (_, _, why) in bad.items()}


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_images_no_decoder_may_take_and_bad_labels_are_left_out_and_named(tmp_path, decode):
    """Decompression bombs, images over the pixel limit (found in the headers, before any decode),
    what PIL cannot decode, and labels that are no class index: bad samples, not a dead epoch."""
    samples, why = hostile_samples()
    if decode == "gpu":  # PIL is the device decoder's own fallback there: a PNG cut short is its to find
        samples = [s for s in samples if s[0] != "cut-png"]
        why.pop("cut-png")
    write_shard(tmp_path / "s.tar", samples)
    shards = ShardSet([tmp_path / "s.tar"], [len(samples)], classes=10)
    with Loader({"val": shards}, batch_size=5, image_size=32, threads=2, decode=decode) as loader:
        batches = list(loader.epoch(plan_args(shards, split="val", batch=5)))
    assert sum(len(b.labels) for b in batches) == 4
    assert [y for b in batches for y in b.labels.tolist()] == [0, 1, 2, 3]
    left_out = {sample.rsplit(": ", 1)[1]: reason for b in batches for sample, reason in b.bad}
    assert set(left_out) == set(why)
    for key, start in why.items():
        assert start in left_out[key], (key, left_out[key])


def test_close_after_a_failure_raises_only_the_failure(prepared, monkeypatch):
    """A bug in a decode task reaches the caller as itself, even while its traceback holds a view of
    a shard's memory map; close() adds nothing of its own (it once raised BufferError, hiding the
    error it was cleaning up after)."""
    from train import loader as loader_module

    def broken(chunk, augment, check_markers=False):
        view = memoryview(chunk.images.buffers[int(chunk.images.which[0])])  # noqa: F841 - held by the traceback
        raise RuntimeError("a bug in a decode task")

    monkeypatch.setattr(loader_module, "draw_crops", broken)
    shards = shard_set(prepared, "val")
    with pytest.raises(RuntimeError, match="a bug in a decode task") as raised:
        with Loader({"val": shards}, batch_size=4, image_size=32, threads=2) as loader:
            next(loader.epoch(plan_args(shards, split="val", batch=4)))
    assert raised.value.__context__ is None
    assert shards.maps == [None] * len(shards.paths)


def test_out_of_memory_is_the_machines_not_a_bad_sample(prepared, monkeypatch):
    """malloc failing in the native decoder stops the epoch with MemoryError naming the sample:
    skipping it would hide a node short of memory, and change what the run reads."""
    from train import loader as loader_module

    real = decoder.decode_crops

    def short_of_memory(images, boxes, flips, out, first, **kwargs):
        status = real(images, boxes, flips, out, first, **kwargs)
        status[-1] = decoder.OUT_OF_MEMORY
        return status

    monkeypatch.setattr(loader_module.decoder, "decode_crops", short_of_memory)
    shards = shard_set(prepared, "val")
    with Loader({"val": shards}, batch_size=4, image_size=32, threads=1) as loader:
        with pytest.raises(MemoryError, match=f"out of memory while decoding {shards.paths[0]}: "):
            next(loader.epoch(plan_args(shards, split="val", batch=4)))


@pytest.mark.parametrize("mode,fraction", [("border", 1.0), ("center", 1.15)])
def test_padded_validation_through_the_loader_is_timms_on_jpegs_and_on_what_pil_decodes(tmp_path, mode, fraction):
    """#53: timm's crop_mode "border" (letterboxed in the mean's colour) and a crop_pct above 1 (padded in
    black), wide, tall and small images, natively and through the PIL path (a PNG), against timm's own
    eval transform of the same bytes."""
    pytest.importorskip("timm")
    from timm.data import create_transform

    from train.loader_arguments import checked_validation

    good = [jpeg(*size, seed=s) for s, size in enumerate([(90, 40), (40, 90), (25, 30), (64, 64)])]
    made = {2: png}
    write_shard(tmp_path / "s.tar", [(f"k{i}", made[i](d) if i in made else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [len(good)], classes=10)
    validation = checked_validation(40, 40, None, fraction, mode, "bicubic")
    args = PlanArgs(split="val", epoch=0, seed=0, world_size=1, rank=0, batch_size=4, shuffle_buffer=8, size=40,
                    validation=validation)
    with Loader({"val": shards}, batch_size=4, image_size=40, threads=2) as loader:
        (batch,) = [b.images.clone() for b in loader.epoch(args)]
        assert loader.fallbacks == 1
    timm = create_transform(input_size=(3, 40, 40), crop_pct=fraction, crop_mode=mode, interpolation="bicubic",
                            is_training=False, normalize=False)
    for i, data in enumerate(good):
        reference = np.asarray(timm(Image.open(io.BytesIO(made.get(i, bytes)(data))).convert("RGB"))).astype(int)
        if reference.shape[0] == 3:
            reference = reference.transpose(1, 2, 0)
        assert np.abs(batch[i].numpy().astype(int) - reference).max() <= 2, i
    assert validation.placements(np.array([90]), np.array([40]))[1] is not None  # each case pads something
