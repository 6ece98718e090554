"""The crop-region JPEG decoder: a small C extension on libjpeg-turbo (train/_jpegcrop.c, built by
`pip install -e .`), and the PIL path for the images it refuses.

For a run of images lying in memory-mapped shards (`Images`), `decode_crops` decodes only each
image's crop box (libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines, with DCT scaling
when the crop is at least twice the output), resizes it to size x size with the triangle filter
PIL's resize(box=...) uses (its support widens with the downscale: antialiased), flips it where
asked and writes it straight into its slot of a batch, all with the GIL released, so that a
thread pool decodes on every core. `image_sizes` reads the headers, which the crop draws need.

Each image gets a status: DECODED; REFUSED, a JPEG this path does not take (CMYK, 12-bit,
lossless...), which `pil_decode_crop` then decodes as the previous loader did; CORRUPT or
NOT_JPEG, a damaged sample.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

try:
    from train import _jpegcrop
except ImportError as exn:  # pragma: no cover - only on an install that skipped the build
    raise ImportError(
        "the native decoder train._jpegcrop is not built (" + str(exn) + "): run `bash jobs/install.sh`, or "
        "`pip install -e .` with the libjpeg-turbo headers installed (Debian: libjpeg62-turbo-dev)") from None

DECODED, REFUSED, CORRUPT, NOT_JPEG = _jpegcrop.OK, _jpegcrop.REFUSED, _jpegcrop.CORRUPT, _jpegcrop.NOT_JPEG
NAME = f"crop-region, libjpeg-turbo {_jpegcrop.LIBJPEG_TURBO_VERSION}, {_jpegcrop.use_simd()} resize"
WHY = {REFUSED: "a JPEG the crop-region decoder does not take", CORRUPT: "damaged JPEG data",
       NOT_JPEG: "not a JPEG"}


@dataclass(frozen=True)
class Images:
    """Where n JPEGs lie: image i is bytes [offsets[i], offsets[i] + lengths[i]) of buffers[which[i]]."""
    buffers: tuple  # objects with the buffer protocol (the memory-mapped shards)
    which: np.ndarray  # int32 (n,)
    offsets: np.ndarray  # int64 (n,)
    lengths: np.ndarray  # int64 (n,)

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, part: slice) -> "Images":
        return Images(self.buffers, self.which[part], self.offsets[part], self.lengths[part])

    def data(self, i: int) -> memoryview:
        start = int(self.offsets[i])
        return memoryview(self.buffers[self.which[i]])[start:start + int(self.lengths[i])]


def image_sizes(images: Images, check_markers: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(widths and heights as int32 (n, 2), status int32 (n,)) from the JPEG headers. With
    `check_markers`, an image whose marker structure is broken (entropy data overwritten with
    markers, a file cut short) is CORRUPT too: a scan of the whole file, for decoders that would
    decode through such damage."""
    n = len(images)
    dims, status = np.zeros((n, 2), np.int32), np.zeros(n, np.int32)
    _jpegcrop.image_sizes(images.buffers, n, images.which, images.offsets, images.lengths, dims, status,
                          check_markers)
    return dims, status


def decode_crops(images: Images, boxes: np.ndarray, flips: np.ndarray, out: np.ndarray, first: int) -> np.ndarray:
    """Decode image i's box (float32 (n, 4)), resized to out's size and flipped where `flips`, into
    out[first + i] (out: uint8 (N, size, size, 3), C-contiguous). Returns the status per image."""
    n = len(images)
    status = np.zeros(n, np.int32)
    _jpegcrop.decode_crops(images.buffers, n, images.which, images.offsets, images.lengths,
                           np.ascontiguousarray(boxes, np.float32), np.ascontiguousarray(flips, np.uint8), out,
                           first, out.shape[1], status)
    return status


def gather(images: Images, out: np.ndarray, at: int = 0) -> None:
    """The images' bytes end to end into the uint8 array `out`, from byte `at`."""
    _jpegcrop.gather(images.buffers, len(images), images.which, images.offsets, images.lengths, out, at)


def tar_index(shard) -> np.ndarray:
    """int64 (samples, 6) rows of a shard in memory: key_at, key_len, jpg_at, jpg_len, cls_at, cls_len
    (-1 where a sample lacks the member). ValueError naming the byte of a damaged header."""
    return np.frombuffer(_jpegcrop.tar_index(shard), dtype=np.int64).reshape(-1, 6)


def pil_decode_crop(data, box: tuple[float, float, float, float], flip: bool, size: int) -> np.ndarray:
    """The PIL path (pillow-simd): decode at 1/2, 1/4 or 1/8 scale when the box allows, resize the
    box to size x size (bilinear with box, antialiased), flip. OSError etc. for a damaged image."""
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    width, height = image.size
    shrink = min((box[2] - box[0]) / size, (box[3] - box[1]) / size)
    if shrink >= 2 and image.format == "JPEG":
        image.draft("RGB", (math.ceil(width / shrink), math.ceil(height / shrink)))
    fx, fy = width / image.size[0], height / image.size[1]
    if image.mode != "RGB":
        image = image.convert("RGB")
    image = image.resize((size, size), Image.Resampling.BILINEAR, box=(box[0] / fx, box[1] / fy, box[2] / fx,
                                                                     box[3] / fy))
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(image, dtype=np.uint8)
