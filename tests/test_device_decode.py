"""--decode gpu's pieces on the CPU: the windows it decodes, nvImageCodec's region decode (its CPU
backend here), the batched crop-resize-flip against PIL's resize(box=...), and the PIL fallback.
tests/test_gpu.py runs the same path on a CUDA device."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from jpegs import as_images, jpeg, photo
from train import decoder
from train.device_decode import GROUP_BYTES, DeviceDecoder, crop_resize_flip, resize_groups, resize_weights
from train.loader_arguments import checked_validation
from train.transforms import ValTransform, centre_crops, decode_windows, default_resize, train_crops

CPU = torch.device("cpu")

KINDS = {
    "4:2:0": dict(), "4:2:2": dict(subsampling=1), "4:4:4": dict(subsampling=0), "progressive": dict(progressive=True),
    "grayscale": dict(mode="L"), "restart markers": dict(restart=3), "exif": dict(exif=True),
    "odd size": dict(width=97, height=131), "large": dict(width=900, height=640), "tiny": dict(width=23, height=17),
}


def pil_reference(blob: bytes, box, flip: bool, size: int) -> np.ndarray:
    """The whole image decoded by PIL, the box resized (bilinear, antialiased), flipped."""
    image = Image.open(io.BytesIO(blob)).convert("RGB")
    image = image.resize((size, size), Image.Resampling.BILINEAR, box=tuple(float(v) for v in box))
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(image)


def device_path(blobs: list[bytes], boxes: np.ndarray, flips: np.ndarray, size: int,
                group_bytes: int = GROUP_BYTES, interpolation: str = "bilinear", regions: np.ndarray | None = None,
                fill: tuple[int, int, int] = (0, 0, 0)) -> np.ndarray:
    """The --decode gpu path on the CPU device: windows, region decode, batched resize; NHWC float."""
    dims, status = decoder.image_sizes(as_images(blobs), check_markers=True)
    assert (status == decoder.DECODED).all()
    windows, inside = decode_windows(boxes, dims[:, 0], dims[:, 1], size, interpolation)
    images = DeviceDecoder().decode(blobs, windows, CPU)
    x = crop_resize_flip(images, torch.from_numpy(inside), torch.from_numpy(flips), size, group_bytes, interpolation,
                         None if regions is None else torch.from_numpy(regions), fill)
    assert x.shape == (len(blobs), 3, size, size) and x.is_contiguous(memory_format=torch.channels_last)
    return x.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("size", [32, 224])
@pytest.mark.parametrize("split", ["train", "val"])
def test_region_decode_and_batched_resize_match_pils_resize_of_the_whole_image(size, split):
    """Every kind of JPEG, crops (and flips) as training and validation draw them: within a grey
    level of PIL decoding the whole image and resizing the box, so the windows' margins suffice."""
    blobs = [jpeg(**{"width": 333, "height": 217, **kind}, seed=i) for i, kind in enumerate(KINDS.values())]
    dims, _ = decoder.image_sizes(as_images(blobs))
    if split == "train":
        boxes, flips = train_crops(np.arange(len(blobs), dtype=np.uint64) * 7919, dims[:, 0], dims[:, 1], 3, 1)
    else:
        boxes, flips = centre_crops(dims[:, 0], dims[:, 1], default_resize(size), size), np.zeros(len(blobs), bool)
    got = device_path(blobs, boxes, flips, size)
    for name, blob, box, flip, image in zip(KINDS, blobs, boxes, flips, got):
        difference = np.abs(image - pil_reference(blob, box, flip, size))
        assert difference.max() <= 1.01, name  # PIL rounds to whole levels; we keep the fraction


@pytest.mark.parametrize("mode, interpolation", [("center", "bicubic"), ("squash", "bicubic"), ("ffcv", "area"),
                                                 ("center", "area")])
@pytest.mark.parametrize("size", [32, 224])
def test_the_other_filters_match_the_cpu_decoders(mode, interpolation, size):
    """Validation's bicubic and area resizes on the device, against the crop-region decoder's (PIL's
    bicubic to a level: tests/test_val_transforms.py; OpenCV's area) on every kind of JPEG, its
    windows grown by the filter's reach (bicubic's is twice bilinear's). The device keeps each
    pass's fraction where the CPU rounds it: rounded, a fraction of a level on average, and a level
    or two on a pixel (the sawtooth channel of jpegs.photo, 255 next to 0, where bicubic overshoots
    and each pass is clipped). It decodes with the accurate IDCT, as the CPU decoder does outside
    FFCV's mode."""
    blobs = [jpeg(**{"width": 333, "height": 217, **kind}, seed=i) for i, kind in enumerate(KINDS.values())]
    dims, _ = decoder.image_sizes(as_images(blobs))
    validation = ValTransform(size, None if mode == "ffcv" else round(size * 1.1), 0.875 if mode == "ffcv" else None,
                              mode, interpolation)
    boxes, flips = validation.boxes(dims[:, 0], dims[:, 1]), np.zeros(len(blobs), bool)
    got = device_path(blobs, boxes, flips, size, interpolation=interpolation)
    cpu = np.zeros((len(blobs), size, size, 3), np.uint8)
    decoder.decode_crops(as_images(blobs), boxes, flips, cpu, 0, dct_scaling=False, interpolation=interpolation)
    for name, image, theirs in zip(KINDS, got, cpu):
        difference = np.abs(np.round(image) - theirs)
        assert difference.mean() < 0.3 and difference.max() <= 2, (name, difference.mean(), difference.max())


@pytest.mark.parametrize("mode, fraction", [("border", 1.0), ("center", 1.15), ("squash", 1.15)])
@pytest.mark.parametrize("group_bytes", [1, GROUP_BYTES])
def test_padded_validation_on_the_device_is_the_cpu_decoders(mode, fraction, group_bytes):
    """#53: a letterbox (border) and a resize smaller than the crop, wide, tall, small and square images,
    groups of one and of all: each box resized into its region, the padding in the fill, as the crop-region
    decoder writes them."""
    blobs = [jpeg(w, h, seed=w) for w, h in [(333, 217), (217, 333), (40, 30), (64, 64), (500, 120)]]
    dims, _ = decoder.image_sizes(as_images(blobs))
    validation = checked_validation(48, 48, None, fraction, mode, "bicubic")
    boxes, regions = validation.placements(dims[:, 0], dims[:, 1])
    flips = np.zeros(len(blobs), bool)
    got = device_path(blobs, boxes, flips, 48, group_bytes, "bicubic", regions, validation.fill)
    cpu = np.zeros((len(blobs), 48, 48, 3), np.uint8)
    decoder.decode_crops(as_images(blobs), boxes, flips, cpu, 0, dct_scaling=False, interpolation="bicubic",
                         regions=regions, fill=validation.fill)
    for image, theirs in zip(got, cpu):
        difference = np.abs(np.round(image) - theirs)
        assert difference.mean() < 0.3 and difference.max() <= 2, (difference.mean(), difference.max())


def test_a_flip_inside_a_region_mirrors_the_region_alone():
    blob = jpeg(333, 217, seed=3)
    boxes = np.array([[0, 0, 333, 217]] * 2, np.float32)
    regions = np.array([[5, 3, 30, 40], [5, 3, 30, 40]], np.int32)
    got = device_path([blob, blob], boxes, np.array([False, True]), 48, regions=regions, fill=(9, 8, 7))
    assert np.allclose(got[1][5:35, 3:43], got[0][5:35, 3:43][:, ::-1], atol=1e-3)
    assert (got[1][:5] == [9, 8, 7]).all() and (got[1][:, 43:] == [9, 8, 7]).all()


@pytest.mark.parametrize("box", [(0, 0, 50, 40), (283, 0, 333, 30), (0, 177, 40, 217), (300, 190, 333, 217),
                                 (0, 0, 333, 217), (100.5, 50.25, 110.75, 58.5)], ids=str)
def test_crops_touching_each_edge_and_smaller_than_the_output_match_pil(box):
    blob = jpeg(333, 217, seed=5)
    boxes = np.array([box, box], np.float32)
    got = device_path([blob, blob], boxes, np.array([False, True]), 48)
    for image, flip in zip(got, (False, True)):
        assert np.abs(image - pil_reference(blob, box, flip, 48)).max() <= 1.01


def test_groups_padded_to_one_size_give_the_same_pixels_as_one_group():
    blobs = [jpeg(w, h, seed=w) for w, h in [(333, 217), (97, 131), (640, 480), (50, 400), (400, 50), (217, 333)]]
    dims, _ = decoder.image_sizes(as_images(blobs))
    boxes, flips = train_crops(np.arange(6, dtype=np.uint64), dims[:, 0], dims[:, 1], 0, 0)
    one = device_path(blobs, boxes, flips, 64)
    many = device_path(blobs, boxes, flips, 64, group_bytes=1)  # every image a group of its own
    assert np.abs(one - many).max() < 1e-3


@pytest.mark.parametrize("budget", [1, 10**5, 10**6, 10**9])
def test_resize_groups_cover_every_image_once_within_the_budget(budget):
    rng = np.random.default_rng(0)
    heights, widths = rng.integers(10, 600, 100), rng.integers(10, 600, 100)
    groups = resize_groups(heights, widths, budget)
    assert sorted(np.concatenate(groups).tolist()) == list(range(100))
    for group in groups:
        padded = len(group) * heights[group].max() * widths[group].max() * 3 * 2
        assert len(group) == 1 or padded <= budget


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "area"])
def test_resize_weights_rows_sum_to_one_and_stay_inside_the_line(interpolation):
    start, stop = torch.tensor([0.0, 10.0, 3.5]), torch.tensor([100.0, 12.0, 60.0])
    length = torch.tensor([100, 40, 61])
    w = resize_weights(start, stop, length, 16, 128, interpolation)
    assert w.shape == (3, 16, 128)
    assert torch.allclose(w.sum(-1), torch.ones(3, 16))
    for i, n in enumerate(length.tolist()):
        assert (w[i, :, n:] == 0).all()
    assert (w[1].nonzero()[:, 1] < 14).all()  # an upscaled 2-pixel box reads only its neighbours
    if interpolation == "area":  # a cell's pixels, weighed by how much of each it covers
        assert torch.allclose(w[0, 0, :7], torch.tensor([1, 1, 1, 1, 1, 1, 0.25]) / 6.25)


def test_windows_hold_their_box_and_stay_inside_the_image():
    rng = np.random.default_rng(1)
    widths, heights = rng.integers(20, 2000, 500), rng.integers(20, 2000, 500)
    boxes, _ = train_crops(rng.integers(0, 2**63, 500).astype(np.uint64), widths, heights, 0, 0)
    windows, inside = decode_windows(boxes, widths, heights, 224)
    assert (windows[:, :2] >= 0).all() and (windows[:, 2] <= widths).all() and (windows[:, 3] <= heights).all()
    assert np.allclose(inside + np.tile(windows[:, :2], 2), boxes)
    assert (inside[:, :2] >= 0).all()
    assert (inside[:, 2] <= windows[:, 2] - windows[:, 0]).all() and (inside[:, 3] <= windows[:, 3] - windows[:, 1]).all()


def test_what_nvimgcodec_refuses_goes_through_pil_counted_and_logged_once(caplog):
    good = jpeg(seed=1)
    out = io.BytesIO()
    photo(60, 40).save(out, "GIF")
    gif = out.getvalue()
    cut = good[: len(good) // 2]
    windows = np.array([[10, 20, 200, 150], [0, 0, 60, 40], [0, 0, 333, 217], [5, 5, 30, 30]])
    device_decoder = DeviceDecoder()
    with caplog.at_level(logging.WARNING, logger="train"):
        images = device_decoder.decode([good, gif, cut, gif], windows, CPU)
    whole = np.asarray(Image.open(io.BytesIO(good)).convert("RGB"))
    assert np.abs(images[0].numpy().astype(int) - whole[20:150, 10:200]).mean() < 1
    assert np.array_equal(images[1].numpy(), np.asarray(Image.open(io.BytesIO(gif)).convert("RGB")))
    assert images[2] is None  # neither decodes a JPEG cut in half
    assert images[3].shape == (25, 25, 3)
    assert device_decoder.fallbacks == 2 and caplog.text.count("went through PIL") == 1


def test_many_threads_decode_at_once_with_one_decoder_each():
    """DeviceBatches runs one decoder per run, but the benchmark and tests may share a process:
    decoders in several threads at once give each its own right answer."""
    from concurrent.futures import ThreadPoolExecutor

    blobs = [jpeg(seed=s) for s in range(8)]
    windows = np.array([[s, s, 200 + s, 150 + s] for s in range(8)])

    def decode(_):
        return [image.numpy() for image in DeviceDecoder().decode(blobs, windows, CPU)]

    first = decode(0)
    with ThreadPoolExecutor(4) as pool:
        for result in pool.map(decode, range(8)):
            assert all(np.array_equal(a, b) for a, b in zip(result, first))
