"""Which crop and which flip: torchvision's RandomResizedCrop rule, vectorised, as a pure function
of (seed, epoch, key); the validation centre crop."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from PIL import Image
from torchvision import transforms as T

from jpegs import as_images
from train.decoder import decode_crops
from train.transforms import (
    DRAWS, RATIO, SCALE, TRIES, centre_crops, random_resized_crops, resized_sizes, train_crops, uniforms,
)


def get_params_reference(width: int, height: int, u: np.ndarray) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params, line for line, with its random draws replaced by u."""
    area = height * width
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for attempt in range(TRIES):
        target_area = area * (SCALE[0] + (SCALE[1] - SCALE[0]) * u[attempt])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[TRIES + attempt])
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(u[2 * TRIES] * (height - h + 1))
            j = int(u[2 * TRIES + 1] * (width - w + 1))
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(RATIO):
        w = width
        h = int(round(w / min(RATIO)))
    elif in_ratio > max(RATIO):
        h = height
        w = int(round(h * max(RATIO)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


@pytest.mark.parametrize("width,height", [(500, 375), (375, 500), (64, 64), (3000, 40), (40, 3000), (1, 1)])
def test_the_batch_rule_is_torchvisions_get_params(width, height):
    hashes = np.arange(2000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    u = uniforms(hashes, seed=3, epoch=1, count=DRAWS)
    boxes = random_resized_crops(np.full(2000, width), np.full(2000, height), u)
    for box, draws in zip(boxes, u):
        i, j, h, w = get_params_reference(width, height, draws)
        assert box.tolist() == [j, i, j + w, i + h]


def test_crops_are_a_function_of_seed_epoch_and_key_only():
    hashes = np.array([11, 22, 33, 44], np.uint64)
    widths, heights = np.array([500, 400, 300, 200]), np.array([375, 300, 450, 200])
    boxes, flips = train_crops(hashes, widths, heights, seed=0, epoch=0)
    # in another batch, in another order, alone: the same crop for the same key
    one_box, one_flip = train_crops(hashes[2:3], widths[2:3], heights[2:3], seed=0, epoch=0)
    assert np.array_equal(one_box[0], boxes[2]) and one_flip[0] == flips[2]
    shuffled, _ = train_crops(hashes[::-1], widths[::-1], heights[::-1], seed=0, epoch=0)
    assert np.array_equal(shuffled[::-1], boxes)
    assert not np.array_equal(train_crops(hashes, widths, heights, seed=0, epoch=1)[0], boxes)
    assert not np.array_equal(train_crops(hashes, widths, heights, seed=1, epoch=0)[0], boxes)


def test_crops_cover_the_scales_and_ratios_and_flip_half_the_time():
    n = 20000
    hashes = np.arange(n, dtype=np.uint64) * np.uint64(2654435761)
    boxes, flips = train_crops(hashes, np.full(n, 500), np.full(n, 375), seed=0, epoch=0)
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all() and (boxes[:, 2] <= 500).all() and (boxes[:, 3] <= 375).all()
    area = w * h / (500 * 375)
    assert area.min() >= 0.079 and area.max() <= 1.0 and 0.35 < np.median(area) < 0.5
    assert (w / h).min() >= 0.74 and (w / h).max() <= 1.34
    assert 0.48 < flips.mean() < 0.52


def smooth_jpeg(size: tuple[int, int]) -> bytes:
    """Smooth content: two resampling grids (one resize, or a resize and then a crop) agree on it."""
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).resize(size, Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=95)
    return out.getvalue()


@pytest.mark.parametrize("width, height", [(500, 375), (375, 500), (150, 113), (233, 232), (1200, 900),
                                           (2500, 1700), (640, 333)])
@pytest.mark.parametrize("resize, crop", [(256, 224), (232, 224), (293, 256)])
def test_validation_pixels_are_torchvisions_resize_then_centre_crop(width, height, resize, crop):
    """torchvision's evaluation preset on the PIL image (Resize, antialiased bilinear, then an integer
    CenterCrop) and the loader's one-step crop of the same JPEG agree to the rounding of a level, for
    images smaller and larger than the output (no DCT scaling for validation)."""
    from jpegs import photo

    out = io.BytesIO()
    photo(width, height, seed=width).save(out, "JPEG", quality=90)
    data = out.getvalue()
    box = centre_crops(np.array([width]), np.array([height]), resize, crop)
    ours = np.zeros((1, crop, crop, 3), np.uint8)
    status = decode_crops(as_images([data]), box, np.zeros(1, bool), ours, 0, dct_scaling=False)
    assert status.tolist() == [0]
    reference = T.Compose([T.Resize(resize), T.CenterCrop(crop)])(Image.open(io.BytesIO(data)).convert("RGB"))
    difference = np.abs(ours[0].astype(np.float32) - np.asarray(reference, dtype=np.float32))
    assert difference.mean() < 0.05 and difference.max() <= 1, (difference.mean(), difference.max())  # rounding


def test_validation_sizes_follow_torchvisions_resize_rule():
    """The longer side is int(resize * long / short), and CenterCrop's offset rounds half to even."""
    from torchvision.transforms.functional import _compute_resized_output_size

    widths, heights = np.array([500, 375, 333, 1000, 224, 7]), np.array([375, 500, 500, 999, 224, 3000])
    new_w, new_h = resized_sizes(widths, heights, 232)
    for w, h, nw, nh in zip(widths, heights, new_w, new_h):
        assert [nh, nw] == _compute_resized_output_size((int(h), int(w)), [232])