"""Which crop and which flip: pure functions of (seed, epoch, sample key), drawn for a whole batch.

Train: torchvision's RandomResizedCrop (scale 0.08-1, aspect ratio 3/4-4/3, ten tries, then the
centre crop) and a horizontal flip with probability 1/2, vectorised over the batch with numpy. The
random numbers come from a counter-based generator (splitmix64) keyed by the sample's 64-bit key
hash and a per-epoch seed, so a sample's augmentation does not depend on which thread decodes it,
on the batch it falls in, or on a resume.

Validation: resize the shorter side to size * 256 / 224 and centre-crop `size` (torchvision's
Resize(256) + CenterCrop(224)): the box in source pixels, resized to size x size in one step.

Boxes are (left, top, right, bottom) in source pixels, float32; the decoder (train/decoder.py)
or the device (`crop_resize_flip`) resizes each box to size x size.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
import torch.nn.functional as F

from shards.plan import seeded_rng

log = logging.getLogger("train")

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
RESIZE_FOR_CROP = 256 / 224
TRIES = 10  # RandomResizedCrop's attempts before the centre-crop fallback
DRAWS = 2 * TRIES + 3  # uniforms per sample: (area, log ratio) per try, top, left, flip

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Vigna's splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def epoch_key(seed: int, epoch: int) -> np.uint64:
    """The augmentation stream of an epoch (independent of the read plan's streams)."""
    return np.uint64(seeded_rng(seed, "augment", epoch).getrandbits(64))


def uniforms(key_hashes: np.ndarray, seed: int, epoch: int, count: int) -> np.ndarray:
    """(n, count) float64 in [0, 1): draw j of sample i depends only on (seed, epoch, its key, j)."""
    streams = splitmix64(key_hashes.astype(np.uint64) ^ epoch_key(seed, epoch))
    counters = np.arange(count, dtype=np.uint64) * _GOLDEN
    bits = splitmix64(streams[:, None] ^ counters[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def random_resized_crops(widths: np.ndarray, heights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """torchvision's RandomResizedCrop.get_params for a batch, from u = uniforms(..., DRAWS).

    Returns float32 (n, 4) boxes (left, top, right, bottom) with integer corners, as torchvision's.
    """
    w, h = widths.astype(np.float64)[:, None], heights.astype(np.float64)[:, None]
    area = w * h * (SCALE[0] + (SCALE[1] - SCALE[0]) * u[:, :TRIES])
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[:, TRIES:2 * TRIES])
    cw, ch = np.rint(np.sqrt(area * aspect)), np.rint(np.sqrt(area / aspect))  # round half to even, as round()
    fits = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = fits.argmax(axis=1)
    rows = np.arange(len(u))
    found = fits[rows, first]
    cw, ch = cw[rows, first], ch[rows, first]
    w, h = w[:, 0], h[:, 0]
    top = np.floor(u[:, 2 * TRIES] * (h - ch + 1))
    left = np.floor(u[:, 2 * TRIES + 1] * (w - cw + 1))
    # none of the ten fit: the centre crop, clamped to the aspect ratios
    in_ratio = w / h
    fw = np.where(in_ratio > RATIO[1], np.rint(h * RATIO[1]), w)
    fh = np.where(in_ratio < RATIO[0], np.rint(w / RATIO[0]), h)
    cw, ch = np.where(found, cw, fw), np.where(found, ch, fh)
    top = np.where(found, top, (h - ch) // 2)
    left = np.where(found, left, (w - cw) // 2)
    return np.stack([left, top, left + cw, top + ch], axis=1).astype(np.float32)


def train_crops(key_hashes: np.ndarray, widths: np.ndarray, heights: np.ndarray, seed: int,
                epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """RandomResizedCrop boxes (float32 (n, 4)) and horizontal flips (bool (n,)) for a batch."""
    u = uniforms(key_hashes, seed, epoch, DRAWS)
    return random_resized_crops(widths, heights, u), u[:, 2 * TRIES + 2] < 0.5


def crops(key_hashes: np.ndarray, widths: np.ndarray, heights: np.ndarray,
          augment: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """(boxes, flips) for a batch: train_crops with augment = (seed, epoch), else the validation
    centre crop and no flips."""
    if augment is None:
        return centre_crops(widths, heights), np.zeros(len(widths), bool)
    return train_crops(key_hashes, widths, heights, *augment)


def centre_crops(widths: np.ndarray, heights: np.ndarray) -> np.ndarray:
    """The centre crop, in source pixels, that Resize(size*256/224) + CenterCrop(size) keeps."""
    w, h = widths.astype(np.float64), heights.astype(np.float64)
    side = np.minimum(w, h) / RESIZE_FOR_CROP
    left, top = (w - side) / 2, (h - side) / 2
    return np.stack([left, top, left + side, top + side], axis=1).astype(np.float32)


# ---------------------------------------------------------------- --decode gpu: the device decodes

class DeviceDecoder:
    """--decode gpu's decoder for a run: batched (nvJPEG on a GPU). Where the batched call fails
    (an image it refuses, CUDA out of memory: any RuntimeError) it decodes image by image, and on
    the CPU where the device refuses one; the first time is logged, the images decoded on the CPU
    are counted (`fallbacks`). An image no decoder takes comes back as None: damaged."""

    def __init__(self):
        self.fallbacks = 0
        self.logged = False

    def decode(self, jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            return decode_jpeg(jpegs, device=device, mode=ImageReadMode.RGB)
        except RuntimeError as exn:
            self._note(exn)
        images = []
        for data in jpegs:
            try:
                images.append(decode_jpeg(data, device=device, mode=ImageReadMode.RGB))
                continue
            except RuntimeError:
                pass
            try:
                images.append(decode_jpeg(data, mode=ImageReadMode.RGB).to(device))
                self.fallbacks += 1
            except RuntimeError:
                images.append(None)
        return images

    def _note(self, exn: RuntimeError) -> None:
        if not self.logged:
            self.logged = True
            log.warning("--decode gpu: the batched decode failed (%s); decoding that batch image by image, on the "
                        "CPU where the device refuses one. Logged once; images decoded on the CPU are counted in "
                        "metrics.jsonl (device_decode_fallbacks)", str(exn).splitlines()[0] if str(exn) else exn)


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
