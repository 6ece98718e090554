"""Batches onto the device: normalised there, --decode gpu's device decode (on the CPU device here:
tests/test_gpu.py runs the same on CUDA), and DeviceBatches' background thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from jpegs import jpeg
from conftest import shard_set, write_shard
from test_loader import epoch_batches, plan_args
from train.device_batches import DeviceBatches, decode_to_device, finished, normalise, to_device
from train.device_decode import DeviceDecoder
from train.loader import Batch, Loader
from train.shard_index import ShardSet

JOIN_TIMEOUT_S = 10  # a thread that outlives its DeviceBatches fails the test, it does not hang it


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
        encoded = next(loader.epoch(plan_args(shards, split="val", batch=6, size=48)))
    assert encoded.key_hashes.tolist() == cpu.key_hashes.tolist()
    device, kept, bad = decode_to_device(encoded.images, torch.device("cpu"), DeviceDecoder())
    device = normalise(device, channels_last=True)
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


def within(seconds: float, work) -> object:
    """`work()`'s result, run in a thread of its own: a hang fails the test instead of hanging it,
    and an exception is raised here, as itself."""
    result = {}

    def run():
        try:
            result["value"] = work()
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_device_batches_stop_their_thread_when_the_consumer_leaves_early():
    def leave_early():
        with DeviceBatches(fake_batches(1000), torch.device("cpu"), depth=2) as batches:
            for step, _ in enumerate(batches):
                if step == 3:
                    break
        return batches

    assert not within(JOIN_TIMEOUT_S, leave_early).thread.is_alive()


def test_a_ctrl_c_inside_enter_stops_the_thread_it_started_and_closes_the_loaders_epoch(monkeypatch):
    """A KeyboardInterrupt in __enter__ once its thread ran (Thread.start waits for it to run, and a signal ends
    that wait) reached no __exit__: the thread kept reading the loader's epoch, then waited to queue its batches
    for good, and the epoch (its decode work, its pinned buffers) stayed open in a process that lived on."""
    import types

    closed = threading.Event()

    def epoch():
        try:
            yield from fake_batches(1000)
        finally:
            closed.set()

    class InterruptedStart(threading.Thread):
        def start(self):
            super().start()
            raise KeyboardInterrupt

    monkeypatch.setattr("train.device_batches.threading", types.SimpleNamespace(Thread=InterruptedStart,
                                                                                Event=threading.Event))
    batches = DeviceBatches(epoch(), torch.device("cpu"), depth=2)
    with pytest.raises(KeyboardInterrupt):
        with batches:
            pytest.fail("the body ran")
    batches.thread.join(JOIN_TIMEOUT_S)
    assert not batches.thread.is_alive() and closed.is_set() and batches.queue.empty() and batches.outputs is None


def test_device_batches_raise_the_loaders_error_in_the_consumer():
    def consume():
        seen = []
        try:
            with DeviceBatches(fake_batches(10, fail_at=4), torch.device("cpu")) as batches:
                for b in batches:
                    seen.append(int(b.labels[0]))
        except RuntimeError as error:
            return seen, error, batches
        return seen, None, batches

    seen, error, batches = within(JOIN_TIMEOUT_S, consume)
    assert "fewer samples than the manifest" in str(error)
    assert seen == [0, 1, 2, 3] and not batches.thread.is_alive()


def test_device_decode_leaves_out_a_jpeg_cut_short_and_names_it(tmp_path):
    """--decode gpu on the CPU device: a JPEG cut short (its header whole, so it has a size) is
    found by the threads' marker check, left out and named; nvImageCodec never sees it."""
    good = [jpeg(seed=s) for s in range(6)]
    broken = good[3][: len(good[3]) // 2]
    write_shard(tmp_path / "s.tar", [(f"k{i}", broken if i == 3 else d, i) for i, d in enumerate(good)])
    shards = ShardSet([tmp_path / "s.tar"], [6], classes=10)
    with Loader({"val": shards}, batch_size=3, image_size=40, threads=2, decode="gpu") as loader, \
            DeviceBatches(loader.epoch(plan_args(shards, split="val", batch=3, size=40)), torch.device("cpu")) as batches:
        got = list(batches)
    assert [len(b.labels) for b in got] == [3, 2] and got[1].labels.tolist() == [4, 5]
    assert got[1].bad == ((f"{tmp_path / 's.tar'}: k3", "damaged JPEG data"),)
    assert got[1].images.shape == (2, 3, 40, 40)


# ---------------------------------------------------------------- uint8 output, and a normalisation of one's own

def test_uint8_output_is_a_copy_of_the_pixels_nchw_in_the_memory_format_asked():
    """On the CPU device the host batch is the loader's buffer, which the next batch overwrites: the
    uint8 output is always a copy."""
    host = torch.randint(0, 256, (2, 5, 5, 3), dtype=torch.uint8)
    for channels_last in (True, False):
        x = to_device(host, torch.device("cpu"), channels_last, dtype=torch.uint8)
        assert x.dtype == torch.uint8 and torch.equal(x, host.permute(0, 3, 1, 2))
        assert x.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        assert x.data_ptr() != host.data_ptr()


def test_uint8_output_of_the_device_decodes_floats_is_rounded_as_the_policy_path_rounds_them():
    decoded = torch.tensor([0.4, 0.5, 1.5, 254.6, 255.4, -0.3]).repeat(1, 3, 1, 1)  # float NCHW, 0-255
    batch = Batch(decoded, torch.tensor([0]), torch.tensor([0]))
    x = finished(decoded.clone(), batch, channels_last=False, dtype=torch.uint8)
    assert x.dtype == torch.uint8 and x[0, 0, 0].tolist() == [0, 0, 2, 255, 255, 0]


def test_a_mean_and_std_of_ones_own_normalise_in_0_1_units():
    host = torch.randint(0, 256, (2, 4, 4, 3), dtype=torch.uint8)
    x = to_device(host, torch.device("cpu"), mean=(0.5, 0.25, 0.0), std=(0.5, 0.5, 1.0))
    expected = (host.permute(0, 3, 1, 2).float() - torch.tensor([127.5, 63.75, 0.0]).view(1, 3, 1, 1)) \
        / torch.tensor([127.5, 127.5, 255.0]).view(1, 3, 1, 1)
    assert torch.allclose(x, expected, atol=1e-6)
    imagenets = to_device(host, torch.device("cpu"), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    assert torch.equal(to_device(host, torch.device("cpu")), imagenets)  # the default


def validation_on_both_paths(tmp_path, sizes: list[tuple[int, int]], size: int, image_size: int, *validation):
    """The first val batch of JPEGs of `sizes` (width, height) under checked_validation(size, *validation), from
    the CPU path (uint8 NHWC) and from --decode gpu's device path on the CPU device (float NCHW in 0-255)."""
    from train.loader import PlanArgs
    from train.loader_arguments import checked_validation

    blobs = [jpeg(w, h, seed=w + h) for w, h in sizes]
    write_shard(tmp_path / "s.tar", [(f"k{i}", blob, i) for i, blob in enumerate(blobs)])
    shards = ShardSet([tmp_path / "s.tar"], [len(blobs)], classes=10)
    args = PlanArgs(split="val", epoch=0, seed=0, world_size=1, rank=0, batch_size=len(blobs), shuffle_buffer=8,
                    size=size, validation=checked_validation(size, *validation))
    got = {}
    for decode in ("cpu", "gpu"):
        with Loader({"val": shards}, batch_size=len(blobs), image_size=image_size, threads=2, decode=decode) as loader:
            batch = next(loader.epoch(args))
            got[decode] = batch.images.clone() if decode == "cpu" else \
                decode_to_device(batch.images, torch.device("cpu"), DeviceDecoder())[0]
    return got["cpu"], got["gpu"]


def test_device_decode_of_padded_validation_is_the_cpu_paths(tmp_path):
    """#53: --decode gpu with timm's border mode, images of several shapes in two chunks of the batch (the
    first all squares, padding nothing; chunk_size: 4 images): the regions and the fill reach the device,
    which gives the CPU path's pixels."""
    cpu, gpu = validation_on_both_paths(tmp_path, [(64, 64), (48, 48), (50, 50), (40, 40), (90, 40), (30, 45)], 40, 40,
                                        40, None, 1.0, "border", "bicubic")
    assert gpu.shape == (6, 3, 40, 40)
    difference = (gpu.round() - cpu.permute(0, 3, 1, 2).float()).abs()
    assert difference.mean() < 0.3 and difference.max() <= 2
    assert (cpu[4, 0] == torch.tensor([124, 116, 104], dtype=torch.uint8)).all()  # padded: the fill


def test_device_decode_of_a_non_square_validation_size_is_the_cpu_paths(tmp_path):
    """#53: --decode gpu with a (height, width) output (timm's center mode: ResizeKeepRatio, CenterCrop)."""
    cpu, gpu = validation_on_both_paths(tmp_path, [(64, 64), (90, 40), (40, 90), (30, 45)], 24, 40,
                                        (40, 24), None, 0.9, "center", "bicubic")
    assert cpu.shape == (4, 40, 24, 3) and gpu.shape == (4, 3, 40, 24)
    difference = (gpu.round() - cpu.permute(0, 3, 1, 2).float()).abs()
    assert difference.mean() < 0.3 and difference.max() <= 2
