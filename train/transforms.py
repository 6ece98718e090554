"""CPU decode and augmentation to uint8 HWC arrays; normalisation happens later, on the device.

Train: torchvision's RandomResizedCrop parameters and a horizontal flip, drawn from a random
stream seeded by (seed, epoch, sample key), so a sample's augmentation does not depend on which
worker decodes it or on whether the run was resumed. The JPEG is decoded with PIL's `draft`
(DCT-domain downscale by 2, 4 or 8) whenever the crop is at least twice the output size, and
crop + resize is one `resize(box=...)` call on pillow-simd.

Validation: resize the shorter side to size * 256 / 224, centre crop `size` (torchvision's
Resize(256) + CenterCrop(224)), in the same single resize.

With --decode gpu the workers only draw the same crop and flip (`TrainCrop`, `ValCrop`); the
batch is decoded on the device with torchvision's batched `decode_jpeg` (nvJPEG) and cropped,
resized and flipped there (`decode_on_device`, `crop_resize_flip`).
"""

from __future__ import annotations

import io
import math
from contextlib import contextmanager

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg
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

    @staticmethod
    def centre_box(width: int, height: int) -> tuple[float, float, float, float]:
        """The centre crop, in source pixels, that Resize(size*256/224) + CenterCrop(size) keeps."""
        side = min(width, height) / RESIZE_FOR_CROP
        left, top = (width - side) / 2, (height - side) / 2
        return left, top, left + side, top + side

    def __call__(self, data: bytes, epoch: int = 0, key: str = "") -> np.ndarray:
        image = Image.open(io.BytesIO(data))
        image, box = decode_for_crop(image, self.centre_box(*image.size), self.size)
        return to_array(image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box))


# ---------------------------------------------------------------- --decode gpu: workers crop, the device decodes

class EncodedCrop(NamedTuple):
    """What a loader worker hands over for device decode: the JPEG bytes, the crop box in source
    pixels (left, top, right, bottom) and the flip; the device does the decoding and resizing."""
    data: bytes  # the file, as read: collate joins a batch's files into one tensor
    box: torch.Tensor  # float32 (4,)
    flip: bool
    size: int  # output side in pixels


class TrainCrop(TrainTransform):
    """TrainTransform's crop and flip (same seeded draw per sample), without decoding."""

    def __call__(self, data: bytes, epoch: int, key: str) -> EncodedCrop:
        box, flip = self.crop_and_flip(Image.open(io.BytesIO(data)), epoch, key)
        return EncodedCrop(data, torch.tensor(box, dtype=torch.float32), flip, self.size)


class ValCrop(ValTransform):
    """ValTransform's centre crop, without decoding."""

    def __call__(self, data: bytes, epoch: int = 0, key: str = "") -> EncodedCrop:
        box = self.centre_box(*Image.open(io.BytesIO(data)).size)
        return EncodedCrop(data, torch.tensor(box, dtype=torch.float32), False, self.size)


def decode_on_device(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Batched decode (nvJPEG on a GPU) to CHW uint8 on `device`; an image the batched decoder
    refuses is decoded alone, and on the CPU if the device refuses it too."""
    try:
        return decode_jpeg(jpegs, device=device, mode=ImageReadMode.RGB)
    except RuntimeError:
        images = []
        for data in jpegs:
            try:
                images.append(decode_jpeg(data, device=device, mode=ImageReadMode.RGB))
            except RuntimeError:
                images.append(decode_jpeg(data, mode=ImageReadMode.RGB).to(device))
        return images


def crop_resize_flip(images: list[torch.Tensor], boxes: torch.Tensor, flips: torch.Tensor, size: int) -> torch.Tensor:
    """Crop each CHW uint8 image to its box, resize to size x size (bilinear, antialiased, as PIL
    does), flip where asked: a float NCHW batch in 0-255 on the images' device."""
    device = images[0].device
    out = torch.empty((len(images), 3, size, size), dtype=torch.float32, device=device)
    for i, (image, box) in enumerate(zip(images, boxes.tolist())):
        left, top, right, bottom = (round(v) for v in box)
        crop = image[:, top:max(bottom, top + 1), left:max(right, left + 1)].unsqueeze(0).float()
        out[i] = F.interpolate(crop, size=(size, size), mode="bilinear", antialias=True, align_corners=False)[0]
    flip = flips.view(-1, 1, 1, 1).to(device, non_blocking=True)
    return torch.where(flip, out.flip(-1), out)  # one pass for the batch, not one per flipped image
