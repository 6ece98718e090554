"""The CUDA paths, run only where a GPU is present (jobs/gpu_benchmark.sh runs them on a GPU node).

On a machine without CUDA these are reported as skipped, not passed; the CPU tests in
test_train_data.py and test_train.py cover the same code with the device calls on the CPU.
"""

from __future__ import annotations

import pytest
import torch
import webdataset as wds

from conftest import run_module
from shards.manifest import read_manifest
from train.device_batches import decode_to_device, normalise, to_device
from train.loader import Loader, PlanArgs
from train.shard_index import ShardSet
from train.metrics import read_metrics
from train.device_decode import DeviceDecoder, crop_resize_flip

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda")


def val_samples(prepared, count):
    shards = read_manifest(prepared).splits["val"].shards
    samples = [s for shard in shards for s in wds.WebDataset(str(prepared / shard.name), shardshuffle=False)]
    return samples[:count]


def test_nvimgcodec_decodes_every_sample_images_window_like_pil(prepared):
    """Batched region decode on the GPU of every val image (the CMYK and grayscale quirks
    included): the window's pixels as PIL decodes them, nearly (IDCT and upsampling rounding)."""
    import io

    import numpy as np
    from PIL import Image

    samples = val_samples(prepared, 10**6)
    blobs = [s["jpg"] for s in samples]
    sizes = [Image.open(io.BytesIO(b)).size for b in blobs]
    windows = np.array([[w // 5, h // 7, w - w // 9, h - h // 3] for w, h in sizes])
    decoder = DeviceDecoder()
    on_gpu = decoder.decode(blobs, windows, CUDA)
    assert len(on_gpu) == len(samples) and decoder.fallbacks == 0
    for image, blob, (left, top, right, bottom) in zip(on_gpu, blobs, windows.tolist()):
        reference = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"))[top:bottom, left:right]
        assert image.device.type == "cuda" and tuple(image.shape) == reference.shape
        assert np.abs(image.cpu().numpy().astype(int) - reference).mean() < 3  # of 255 levels


def test_batched_resize_on_the_gpu_matches_the_cpu():
    """fp16 matrix products on the GPU against float32 on the CPU: the same pixels, nearly."""
    generator = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=generator)
              for h, w in [(217, 333), (480, 640), (31, 17), (300, 200)]]
    boxes = torch.tensor([[10.5, 3, 300, 200], [0, 0, 640, 480], [2, 2, 15, 30], [50, 60, 51, 61]])
    flips = torch.tensor([False, True, True, False])
    cpu = crop_resize_flip(images, boxes, flips, 224)
    gpu = crop_resize_flip([i.to(CUDA) for i in images], boxes, flips, 224).cpu()
    assert (gpu - cpu).abs().max() < 0.6


def first_batch(prepared, split: str, size: int, decode: str):
    shard_set = ShardSet.of(prepared, read_manifest(prepared), split)
    args = PlanArgs(split=split, epoch=0, seed=1, world_size=1, rank=0, batch_size=16,
                    shuffle_buffer=8, size=size)
    with Loader({split: shard_set}, batch_size=16, image_size=size, threads=2, decode=decode, pin_memory=True) as loader:
        batch = next(loader.epoch(args))
        if decode == "gpu":
            return normalise(decode_to_device(batch.images, CUDA, DeviceDecoder())[0], channels_last=True)
        return to_device(batch.images, CUDA)


@pytest.mark.parametrize("size", [48, 224])
@pytest.mark.parametrize("split", ["train", "val"])
def test_device_crops_match_the_cpu_decoder(prepared, size, split):
    on_gpu, on_cpu = first_batch(prepared, split, size, "gpu"), first_batch(prepared, split, size, "cpu")
    assert (on_gpu - on_cpu).abs().mean() < 0.1  # normalised units


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_training_on_cuda_evaluates_exactly_and_resumes(prepared, tmp_path, decode):
    run = tmp_path / "run"
    args = ["train", "--data", prepared, "--run-dir", run, "--arch", "resnet18", "--image-size", "64",
            "--batch-size", "16", "--workers", "2", "--device", "cuda", "--amp", "bf16", "--decode", decode]
    first = run_module(*args, "--epochs", "1")
    assert first.returncode == 0, first.stderr
    second = run_module(*args, "--epochs", "2", "--resume", "auto")
    assert second.returncode == 0, second.stderr
    records = read_metrics(run)
    manifest = read_manifest(prepared)
    assert [r["epoch"] for r in records] == [0, 1]
    assert all(r["val_images"] == manifest.splits["val"].samples for r in records)
    assert all(r["train_images"] == r["steps"] * 16 for r in records)
