"""Types of train._jpegcrop (train/native/jpegcrop.c), the crop-region JPEG decoder that
train/decoder.py wraps; the functions' docstrings hold the contract.

The arrays are typed as the numpy arrays the wrapper passes. At run time the module takes any
C-contiguous buffer whose items are of that kind and size (checked before the GIL is released:
TypeError or ValueError otherwise); `buffers` is a tuple of bytes-like objects (bytes, mmap, ...)."""

from typing import Final

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

_Flags = npt.NDArray[np.bool_] | npt.NDArray[np.uint8]  # bool or uint8, one byte an item

# Statuses per image (the same numbers as prepare._restarts: shards/native/jpeg_rules.h)
OK: Final[int]
REFUSED: Final[int]
CORRUPT: Final[int]
NOT_JPEG: Final[int]
TOO_LARGE: Final[int]
OUT_OF_MEMORY: Final[int]

MAX_SCANS: Final[int]  # scans past this many: CORRUPT
MAX_SIZE: Final[int]  # the largest output side, pixels
PIXELS_CEILING: Final[int]  # the most max_pixels a caller may ask for
SIMD: Final[list[str]]  # the resize's implementations this CPU runs, fastest first
PROFILE_STAGES: Final[list[str]]  # where decode_crops' stop_after may end each image's work (the profile's)
LIBJPEG_TURBO_VERSION: Final[str]  # "3.1.2": the libjpeg-turbo headers the module was built against


def image_sizes(buffers: tuple[Buffer, ...], which: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64],
                lengths: npt.NDArray[np.int64], dims: npt.NDArray[np.int32], status: npt.NDArray[np.int32],
                max_pixels: int, check_markers: bool = False) -> None: ...


def decode_crops(buffers: tuple[Buffer, ...], which: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64],
                 lengths: npt.NDArray[np.int64], boxes: npt.NDArray[np.float32], flips: _Flags,
                 out: npt.NDArray[np.uint8], first: int, status: npt.NDArray[np.int32], max_pixels: int,
                 simd: str | None = None, seek: bool = True, seeked: _Flags | None = None,
                 dct_scaling: bool = True, interpolation: str | None = None, fast_dct: bool = False,
                 stop_after: str | None = None, regions: npt.NDArray[np.int32] | None = None,
                 fill: npt.NDArray[np.uint8] | None = None) -> None: ...


def gather(buffers: tuple[Buffer, ...], which: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64],
           lengths: npt.NDArray[np.int64], out: npt.NDArray[np.uint8], at: int = 0) -> None: ...


def memory_bound(max_pixels: int) -> int: ...
