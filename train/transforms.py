"""CPU decode and augmentation to uint8 HWC arrays; normalisation happens later, on the device.

Train: torchvision's RandomResizedCrop parameters and a horizontal flip, drawn from a random
stream seeded by (seed, epoch, sample key), so a sample's augmentation does not depend on which
worker decodes it or on whether the run was resumed. The JPEG is decoded with PIL's `draft`
(DCT-domain downscale by 2, 4 or 8) whenever the crop is at least twice the output size, and
crop + resize is one `resize(box=...)` call on pillow-simd.

Validation: resize the shorter side to size * 256 / 224, centre crop `size` (torchvision's
Resize(256) + CenterCrop(224)), in the same single resize.
"""

from __future__ import annotations

import io
import math
from contextlib import contextmanager

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import RandomResizedCrop

from shards.plan import seeded_rng

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
RESIZE_FOR_CROP = 256 / 224


def decode_for_crop(image: Image.Image, box: tuple[float, float, float, float], size: int) -> tuple[Image.Image, tuple]:
    """Decode the (lazily opened) image as small as the crop `box` allows while keeping the crop
    at least `size` px, and return it with the box in its pixels."""
    width, height = image.size
    shrink = min((box[2] - box[0]) / size, (box[3] - box[1]) / size)
    if shrink >= 2 and image.format == "JPEG":
        image.draft("RGB", (math.ceil(width / shrink), math.ceil(height / shrink)))
    fx, fy = width / image.size[0], height / image.size[1]
    if image.mode != "RGB":
        image = image.convert("RGB")
    return image, (box[0] / fx, box[1] / fy, box[2] / fx, box[3] / fy)


def to_array(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.uint8).copy()  # writable, owned: safe to hand to torch


@contextmanager
def seeded_cpu_rng(seed: int):
    """Seed torch's CPU generator for a block, then restore it (torch.random.fork_rng does the same
    at 30x the cost, about 200 us per sample, as it also saves every accelerator's state)."""
    generator = torch.default_generator
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)


class TrainTransform:
    """JPEG bytes -> (size, size, 3) uint8: RandomResizedCrop(size) + horizontal flip."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed

    def crop_and_flip(self, image: Image.Image, epoch: int, key: str) -> tuple[tuple[int, int, int, int], bool]:
        """torchvision's RandomResizedCrop.get_params (it reads only the size), seeded per sample."""
        generator_seed = seeded_rng(self.seed, "augment", epoch, key).getrandbits(63)
        with seeded_cpu_rng(generator_seed):
            top, left, h, w = RandomResizedCrop.get_params(image, list(SCALE), list(RATIO))
            flip = bool(torch.rand(1) < 0.5)
        return (left, top, left + w, top + h), flip

    def __call__(self, data: bytes, epoch: int, key: str) -> np.ndarray:
        image = Image.open(io.BytesIO(data))  # reads the header only
        box, flip = self.crop_and_flip(image, epoch, key)
        image, box = decode_for_crop(image, box, self.size)
        image = image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        if flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return to_array(image)


class ValTransform:
    """JPEG bytes -> (size, size, 3) uint8: Resize(size * 256/224) + CenterCrop(size)."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, data: bytes, epoch: int = 0, key: str = "") -> np.ndarray:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        side = min(width, height) / RESIZE_FOR_CROP  # the crop, in source pixels
        left, top = (width - side) / 2, (height - side) / 2
        image, box = decode_for_crop(image, (left, top, left + side, top + side), self.size)
        return to_array(image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box))
