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
from train.run.metrics import read_metrics
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


# ---------------------------------------------------------------- no early writes (issue 41)
#
# nvJPEG's hardware engine has been seen writing its outputs before earlier work on the stream it was given had run:
# torchcodec fixed it with a host synchronisation before nvjpegDecodeBatched (meta-pytorch/torchcodec#1634: a
# device-side cudaStreamWaitEvent was out of order 100 times in 100 on an H100), torchvision's decode_jpeg had the
# same fault (pytorch/vision#9606). nvImageCodec's hardware backend decodes on its own stream after such an event
# wait (extensions/nvjpeg/hw_decoder.cpp), into memory from CUDA's stream-ordered pool. In each test a kernel that
# reads the decode's destination is queued behind a long sleep; what it read must be what was there before.

SLEEP_CYCLES = 2_000_000_000  # torch.cuda._sleep: about a second of the GPU's clock, far longer than the decode
EARLIER = 7  # what the destinations hold before the decode


def photos(count: int, seed: int) -> list[bytes]:
    """Baseline 4:2:0 JPEGs of 256 x 192, which the hardware decoder takes."""
    from tests.jpegs import jpeg

    return [jpeg(256, 192, seed=seed + n) for n in range(count)]


def raw_decoder(kind: str):
    """nvImageCodec itself, one backend: the hardware engine or the CUDA decoder."""
    from train.device_decode import OPTIONS, nvimgcodec

    m = nvimgcodec()
    backend = {"hardware": m.BackendKind.HW_GPU_ONLY, "cuda": m.BackendKind.GPU_ONLY}[kind]
    decoder = m.Decoder(device_id=torch.cuda.current_device(), backends=[m.Backend(backend)], options=OPTIONS)
    params = m.DecodeParams(apply_exif_orientation=False, color_spec=m.ColorSpec.SRGB,
                            sample_format=m.SampleFormat.I_RGB)
    return m, decoder, params


def on_stream(which: str) -> torch.cuda.Stream:
    """The default stream (the legacy one: other blocking streams wait for it) or a stream of one's own, as a
    training loop that overlaps its data with its step has: the second is where an event wait alone is relied on."""
    return torch.cuda.default_stream() if which == "default" else torch.cuda.Stream()


@pytest.mark.parametrize("stream_kind", ["default", "own"])
@pytest.mark.parametrize("kind", ["hardware", "cuda"])
def test_a_decode_into_buffers_waits_for_the_earlier_reads_of_them_on_its_stream(kind, stream_kind):
    import numpy as np

    m, decoder, params = raw_decoder(kind)
    blobs = photos(16, seed=0)
    stream = on_stream(stream_kind)
    with torch.cuda.stream(stream):
        buffers = [torch.full((192, 256, 3), EARLIER, dtype=torch.uint8, device=CUDA) for _ in blobs]
        torch.cuda._sleep(SLEEP_CYCLES)
        seen = torch.stack(buffers)  # queued behind the sleep: reads the buffers a second from now
        # the buffers' stream given as the decode's: else nvImageCodec synchronises the host with theirs first
        images = decoder.decode([m.CodeStream(np.frombuffer(b, np.uint8)) for b in blobs],
                                images=[m.as_image(b, cuda_stream=stream.cuda_stream) for b in buffers],
                                params=params, cuda_stream=stream.cuda_stream)
    torch.cuda.synchronize()
    if kind == "hardware" and not any(image is not None for image in images):
        pytest.skip("this GPU's nvImageCodec has no hardware JPEG decoder for these images")
    assert all(image is not None for image in images)
    written = torch.stack(buffers)
    assert (written != EARLIER).float().mean() > 0.5  # the decode did write them
    early = int((seen != EARLIER).any(dim=(1, 2, 3)).sum())
    assert early == 0, f"{kind} decoder on the {stream_kind} stream wrote {early} of {len(blobs)} buffers early"


@pytest.mark.parametrize("stream_kind", ["default", "own"])
def test_device_decoder_never_overwrites_what_earlier_work_still_reads(stream_kind):
    """--decode gpu's own path (every backend nvImageCodec picks, region decodes): a batch's outputs are read by a
    queued kernel, then let go (back to the stream-ordered pool), then the next batch is decoded on the same
    stream, where it may get that memory. What the kernel read must be the first batch's pixels."""
    import numpy as np

    decoder = DeviceDecoder()
    first, second = photos(16, seed=0), photos(16, seed=100)
    windows = np.array([[1, 1, 255, 191]] * 16)
    stream = on_stream(stream_kind)
    with torch.cuda.stream(stream):
        expected = torch.stack([t.clone() for t in decoder.decode(first, windows, CUDA)])
        stream.synchronize()
        outputs = decoder.decode(first, windows, CUDA)
        torch.cuda._sleep(SLEEP_CYCLES)
        seen = torch.stack(outputs)  # a second from now
        del outputs  # their memory goes back to the pool, in the stream's order
        later = decoder.decode(second, windows, CUDA)
    torch.cuda.synchronize()
    assert decoder.fallbacks == 0 and len(later) == 16
    differing = int((seen != expected).any(dim=(1, 2, 3)).sum())
    assert differing == 0, f"{differing} of 16 outputs were overwritten before the kernel reading them ran"
