"""Per-image work of prepare: check, normalise odd images to RGB JPEG, optionally shrink.

Good RGB JPEGs keep their original bytes and cost only a header parse. Everything else (CMYK,
grayscale, PNG named .JPEG, or every image with --resize) is decoded and re-encoded.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from dataclasses import dataclass

from PIL import Image

from shards.limits import MAX_PIXELS, oversized, too_many_pixels

# Trailing bytes a complete JPEG may carry after its end-of-image marker (seen in ImageNet).
_TRAILING = b"\0\r\n \xff"


class BadImage(ValueError):
    """An image that cannot be decoded: skipped with --skip-bad, fatal otherwise."""


@dataclass(frozen=True)
class Prepared:
    data: bytes | None  # new bytes; None keeps the original bytes
    width: int  # of the stored image
    height: int
    source_width: int
    source_height: int
    note: str | None = None  # what was done, for the manifest's `converted` list


def shrunk_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """(w, h) with the longer side at most `max_side`, aspect kept, never enlarged (FFCV's rule)."""
    longer = max(width, height)
    if not max_side or longer <= max_side:
        return width, height
    scale = max_side / longer
    return max(1, round(width * scale)), max(1, round(height * scale))


def looks_complete(data: bytes) -> bool:
    """A JPEG normally ends with its EOI marker FF D9; one that does not may be truncated."""
    return data.rstrip(_TRAILING).endswith(b"\xff\xd9")


@contextmanager
def pil_errors_are_bad_images():
    """Around PIL's reading of an image: PIL's plugins raise many exception types on bytes they do
    not understand, and every one means the image is bad. Out of memory is the machine's, not the
    image's: it propagates (a skipped image would change the shards)."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as exn:
        raise BadImage(f"does not decode as an image ({type(exn).__name__}: {exn})") from None


def prepare_image(data: bytes, max_side: int | None = None, quality: int = 90, max_pixels: int = MAX_PIXELS
                  ) -> Prepared:
    """Check one image and return what to store (see `Prepared`); BadImage if it does not decode,
    or if it has more than `max_pixels` pixels (the contract's limit: checked from the header, before
    anything is decoded)."""
    with pil_errors_are_bad_images():
        image = Image.open(io.BytesIO(data))
    width, height = image.size
    if too_many_pixels(width, height, max_pixels):
        raise BadImage(f"has {oversized(width, height, max_pixels)}")
    kind = f"{image.mode} {image.format}"
    target = shrunk_size(width, height, max_side)
    if image.format == "JPEG" and image.mode == "RGB" and target == (width, height):
        if not looks_complete(data):
            with pil_errors_are_bad_images():
                image.load()  # decode fully: only a real decode error makes it bad
        return Prepared(None, width, height, width, height)
    with pil_errors_are_bad_images():
        if target != (width, height):
            image.draft("RGB", target)  # DCT-domain downscale by up to 8x: much less to decode
        image = image.convert("RGB")
        if image.size != target:
            image = image.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    note = None if kind == "RGB JPEG" else f"{kind} -> RGB JPEG"
    return Prepared(out.getvalue(), *target, width, height, note)
