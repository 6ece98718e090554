"""The crop-region JPEG decoder: a small C extension on libjpeg-turbo (train/native/jpegcrop.c, built
by `pip install -e .`), and the PIL path for the images it does not take.

For a run of images lying in memory-mapped shards (`Images`), `decode_crops` decodes only each
image's crop box (libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines, with DCT scaling
when the crop is at least twice the output), resizes it to size x size with the triangle filter
PIL's resize(box=...) uses (its support widens with the downscale: antialiased), or PIL's bicubic
one, or OpenCV's INTER_AREA (INTERPOLATIONS), flips it where asked and writes it straight into
its slot of a batch, all with the GIL released, so that a
thread pool decodes on every core. In a seekable JPEG (a restart marker every few MCUs, in a grid:
what prepare writes by default) only the restart intervals that cover the crop's window are
decoded, from a small JPEG of them (train/native/seek.c), with the same pixels and statuses. A
file whose restart markers, walked to its end, are not the grid its header promises (an interval
lost, added or empty, markers out of order, a restart interval that lies) does not seek: it decodes
as usual. A seek Huffman-decodes only its window's intervals, so damage inside another interval's
data goes unseen by that crop. `image_sizes` reads the headers, which the crop draws need.

Each image gets a status: DECODED; CORRUPT (damaged data, or more than MAX_SCANS scans) or
TOO_LARGE (more than shards.limits.MAX_PIXELS pixels), a bad sample; NOT_JPEG or REFUSED (a JPEG
in a colour space the native path does not take, or a lossless one), which `pil_decode_crop` then tries as the
previous loader did; OUT_OF_MEMORY, when malloc fails (the machine's fault, not the image's: the
loader raises MemoryError). CMYK and YCCK JPEGs decode natively, read as PIL reads them. Every
image decodes exactly as it would alone: the same pixels and statuses for any chunking and any
thread count.

Memory. One decoding thread allocates at most THREAD_MEMORY bytes for one image, whatever its
bytes claim (a budget, not a typical figure: an ImageNet image needs a few MB):
- every JPEG, memory_bound(MAX_PIXELS) = 448 MiB: a progressive or multi-scan JPEG at the pixel
  limit holds its DCT coefficients, 6 bytes a pixel (libjpeg's max_memory_to_use caps them), plus
  libjpeg's row buffers and a few of our rows of the crop, which streams through the resize;
- the PIL path (images that are not JPEGs: prepare re-encodes those, so only damage brings them),
  after the header's size is checked against the limit: one copy of the file, and PIL's own
  buffers, up to PIL_BYTES_PER_PIXEL a pixel (its decode, 4 bytes a pixel, an intermediate mode and
  the RGB copy): 768 MiB at the limit.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

from shards.jpeg import lossless
from shards.limits import MAX_PIXELS, oversized, too_many_pixels
from shards.not_built import not_built

try:
    from train import _jpegcrop
except ImportError as exn:  # pragma: no cover - only on an install that skipped the build
    raise not_built("train._jpegcrop", "the native decoder", exn) from None

DECODED, REFUSED, CORRUPT = _jpegcrop.OK, _jpegcrop.REFUSED, _jpegcrop.CORRUPT
NOT_JPEG, TOO_LARGE, OUT_OF_MEMORY = _jpegcrop.NOT_JPEG, _jpegcrop.TOO_LARGE, _jpegcrop.OUT_OF_MEMORY
MAX_IMAGE_SIZE = _jpegcrop.MAX_SIZE  # the largest output side
SIMD = tuple(_jpegcrop.SIMD)  # the resize's implementations this CPU runs, fastest first: the same bytes
NAME = f"crop-region, libjpeg-turbo {_jpegcrop.LIBJPEG_TURBO_VERSION}, {SIMD[0]} resize"
# The resize's filters: PIL's antialiased bilinear and bicubic (a = -0.5), whose taps reach past the
# box into the image as PIL's resize(box=...) does, and OpenCV's INTER_AREA (each output pixel the
# mean of its cell of the box: FFCV's resize; OpenCV's own where both sides shrink or both enlarge,
# as FFCV's square crops do, not where one shrinks and the other enlarges). The PIL path's stand-in
# for area is its BOX filter.
INTERPOLATIONS = ("bilinear", "bicubic", "area")
PIL_BYTES_PER_PIXEL = 12  # PIL's buffers for one image: its decode (4 bytes a pixel), a conversion, the RGB copy
THREAD_MEMORY = max(_jpegcrop.memory_bound(MAX_PIXELS), PIL_BYTES_PER_PIXEL * MAX_PIXELS)
# Where a crop's work may stop, for the stage-by-stage profile (train.bench.stages): each stage does
# the work of those before it; "entropy" is the floor beside them (the Huffman decode alone of the
# rows the crop reads), "all" the whole crop.
PROFILE_STAGES = tuple(_jpegcrop.PROFILE_STAGES)


@dataclass(frozen=True)
class Images:
    """Where n JPEGs lie: image i is bytes [offsets[i], offsets[i] + lengths[i]) of buffers[which[i]]."""
    buffers: tuple  # objects with the buffer protocol (the memory-mapped shards)
    which: np.ndarray  # int32 (n,)
    offsets: np.ndarray  # int64 (n,)
    lengths: np.ndarray  # int64 (n,)

    @classmethod
    def from_blobs(cls, blobs: list[bytes]) -> "Images":
        """JPEGs held in memory, laid end to end in one buffer as a shard holds them."""
        lengths = np.array([len(b) for b in blobs], np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return cls((b"".join(blobs),), np.zeros(len(blobs), np.int32), offsets, lengths)

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, part: slice | np.ndarray) -> "Images":
        """The images of a slice, or of an array of indices."""
        return Images(self.buffers, self.which[part], self.offsets[part], self.lengths[part])

    def data(self, i: int) -> bytes:
        """Image i's bytes, copied: a view would keep its shard's memory map from closing for as
        long as anything (a traceback, say) holds it."""
        start = int(self.offsets[i])
        with memoryview(self.buffers[self.which[i]]) as view:
            return bytes(view[start:start + int(self.lengths[i])])

    def arrays(self) -> dict:
        """The arguments that locate the images, as the native functions take them."""
        return {"buffers": self.buffers, "which": np.ascontiguousarray(self.which, np.int32),
                "offsets": np.ascontiguousarray(self.offsets, np.int64),
                "lengths": np.ascontiguousarray(self.lengths, np.int64)}


def image_sizes(images: Images, check_markers: bool = False, max_pixels: int = MAX_PIXELS
                ) -> tuple[np.ndarray, np.ndarray]:
    """(widths and heights as int32 (n, 2), status int32 (n,)) from the JPEG headers: TOO_LARGE past
    `max_pixels`. With `check_markers`, an image whose marker structure is broken (entropy data
    overwritten with markers, a file cut short) is CORRUPT too: a scan of the whole file, for
    decoders that would decode through such damage."""
    n = len(images)
    dims, status = np.zeros((n, 2), np.int32), np.zeros(n, np.int32)
    _jpegcrop.image_sizes(**images.arrays(), dims=dims, status=status, max_pixels=max_pixels,
                          check_markers=check_markers)
    return dims, status


def decode_crops(images: Images, boxes: np.ndarray, flips: np.ndarray, out: np.ndarray, first: int, *,
                 max_pixels: int = MAX_PIXELS, simd: str | None = None, seek: bool = True,
                 seeked: np.ndarray | None = None, dct_scaling: bool = True, interpolation: str = "bilinear",
                 fast_dct: bool = False, stop_after: str | None = None, regions: np.ndarray | None = None,
                 fill: tuple[int, int, int] | None = None) -> np.ndarray:
    """Decode image i's box (float32 (n, 4)), resized to out's height and width and flipped where
    `flips`, into out[first + i] (out: uint8 (N, height, width, 3), C-contiguous); with `regions`
    (int32 (n, 4): top, left, height, width), into that region of the slot, the rest `fill` (RGB;
    None: black): a letterbox's or a padded crop's padding. A slot whose image fails is zeroed. `simd`
    picks the resize's implementation (SIMD; None: the fastest). With `seek`, a JPEG
    with restart markers decodes only the restart intervals its box covers where that pays (the same
    pixels); `seeked` (bool (n,)), if given, is set where that happened. With `dct_scaling`, a box at
    least twice the output decodes at 1/2-1/8 scale in the DCT (0.7-1.6 grey levels from the exact
    resize); validation asks for none. `interpolation`: the resize's filter, one of INTERPOLATIONS.
    `fast_dct`: libjpeg's fast integer IDCT (FFCV's decode; about a grey level from the accurate one,
    up to 10 on a pixel), not the accurate one. `stop_after`, the profile's: one of PROFILE_STAGES,
    where each image's work stops (the slots then hold garbage). Returns the status per image."""
    status = np.zeros(len(images), np.int32)
    _jpegcrop.decode_crops(**images.arrays(), boxes=np.ascontiguousarray(boxes, np.float32),
                           flips=np.ascontiguousarray(flips, np.bool_), out=out, first=first, status=status,
                           max_pixels=max_pixels, simd=simd, seek=seek, seeked=seeked, dct_scaling=dct_scaling,
                           interpolation=interpolation, fast_dct=fast_dct, stop_after=stop_after,
                           regions=None if regions is None else np.ascontiguousarray(regions, np.int32),
                           fill=None if fill is None else np.array(fill, np.uint8))
    return status


def gather(images: Images, out: np.ndarray, at: int = 0) -> None:
    """The images' bytes end to end into the uint8 array `out`, from byte `at`."""
    _jpegcrop.gather(**images.arrays(), out=out, at=at)


# ---------------------------------------------------------------- the PIL path

class PilFailure(Exception):
    """PIL could not read an image: a bad sample. `status` is CORRUPT or TOO_LARGE, `why` says why."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


def pil_open(data: bytes, max_pixels: int = MAX_PIXELS):
    """PIL's view of an image, its header read and its size checked against the pixel limit before
    anything is decoded. PilFailure where PIL does not know it, or it is too large."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
    except MemoryError:
        raise
    except Image.DecompressionBombError as exn:
        raise PilFailure(TOO_LARGE, f"{exn}") from None
    except Exception as exn:  # PIL's plugins raise many types on bytes they do not understand
        raise PilFailure(CORRUPT, f"PIL does not read it ({type(exn).__name__}: {exn})") from None
    if too_many_pixels(*image.size, max_pixels):
        raise PilFailure(TOO_LARGE, oversized(*image.size, max_pixels))
    return image


def pil_size(data: bytes) -> tuple[int, int]:
    """(width, height) of an image that is not a JPEG, from PIL; PilFailure for a bad one."""
    return pil_open(data).size


# PIL's filter for each of INTERPOLATIONS: area has no equal in PIL; its BOX filter weighs each
# source pixel whole or not at all where OpenCV's weighs the part a cell covers (the PIL path takes
# only images that prepare never leaves in a dataset: not JPEGs, odd colour spaces).
PIL_FILTERS = {"bilinear": "BILINEAR", "bicubic": "BICUBIC", "area": "BOX"}


def pil_decode_crop(data: bytes, box: tuple[float, float, float, float], flip: bool, size: int | tuple[int, int],
                    dct_scaling: bool = True, interpolation: str = "bilinear") -> np.ndarray:
    """The PIL path (pillow-simd): decode at 1/2, 1/4 or 1/8 scale when the box allows (and
    `dct_scaling`), resize the box to size x size, or (height, width) (antialiased, PIL's filter for
    `interpolation`: PIL_FILTERS), flip. PilFailure for a bad image (damaged, unknown, too large): PIL
    raises many exception types on such bytes, all of them mean that."""
    from PIL import Image

    out_height, out_width = (size, size) if isinstance(size, int) else size
    image = pil_open(data)
    try:
        width, height = image.size
        shrink = min((box[2] - box[0]) / out_width, (box[3] - box[1]) / out_height)
        if dct_scaling and shrink >= 2 and image.format == "JPEG" and not lossless(data):  # (see shards/jpeg.py)
            image.draft("RGB", (math.ceil(width / shrink), math.ceil(height / shrink)))
        fx, fy = width / image.size[0], height / image.size[1]
        if image.mode != "RGB":
            image = image.convert("RGB")
        image = image.resize((out_width, out_height), Image.Resampling[PIL_FILTERS[interpolation]],
                             box=(box[0] / fx, box[1] / fy, box[2] / fx, box[3] / fy))
    except MemoryError:
        raise
    except Exception as exn:  # the decode of hostile bytes: any other error PIL raises is about them
        raise PilFailure(CORRUPT, f"PIL does not decode it ({type(exn).__name__}: {exn})") from None
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(image, dtype=np.uint8)
