"""JPEGs of every kind the decoders meet, made with PIL, for the decoder and loader tests."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from train.decoder import Images


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth shading with edges and some grain: interpolation differences stay small but real."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([128 + 100 * np.sin(x / (7 + seed)), 128 + 100 * np.cos(y / 11), (x + y) % 256], axis=-1)
    base[(x // 37 + y // 29) % 2 == 0] *= 0.6  # hard edges
    noisy = base + rng.normal(0, 6, base.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def jpeg(width: int = 333, height: int = 217, *, mode: str = "RGB", subsampling: int = 2, progressive: bool = False,
         restart: int = 0, exif: bool = False, quality: int = 92, seed: int = 0) -> bytes:
    """subsampling: 0 is 4:4:4, 1 is 4:2:2, 2 is 4:2:0; restart: restart marker every N MCU blocks."""
    image = photo(width, height, seed).convert(mode)
    options = {"quality": quality, "progressive": progressive}
    if mode != "L":
        options["subsampling"] = subsampling
    if restart:
        options["restart_marker_blocks"] = restart
    if exif:
        data = Image.Exif()
        data[0x0112] = 1  # orientation: as stored
        data[0x010F] = "a camera maker"
        options["exif"] = data.tobytes()
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def as_images(blobs: list[bytes]) -> Images:
    """The blobs end to end in one buffer, as the decoder reads them from a shard."""
    lengths = np.array([len(b) for b in blobs], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return Images((b"".join(blobs),), np.zeros(len(blobs), np.int32), offsets, lengths)
