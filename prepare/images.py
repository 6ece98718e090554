"""Per-image work of prepare: check, normalise odd images to RGB JPEG, optionally shrink, and make
JPEGs seekable.

Good RGB JPEGs keep their pixels: their DCT coefficients are rewritten losslessly with restart
markers (prepare/native/restarts.c, about 1 ms an image), or, with restart_mcus=0, their original
bytes are kept (a header parse). Everything else (CMYK, grayscale, PNG named .JPEG, or every image
with --resize) is decoded and re-encoded, its markers written by the encoder at no extra cost.

The rewrite reads every coefficient, so it is also where damage in a JPEG's entropy-coded data shows:
libjpeg warns (or fails) on what it notices, and the image's `Prepared.damage` says so in libjpeg's
words. A JPEG the rewrite refuses (it cannot be kept exactly, but decodes as it is) is not damaged.

Seekable: a baseline JPEG with a restart marker every few MCUs (8x8 to 16x16 pixel blocks), an
interval that divides the MCUs of a row, so that the intervals form a grid. The loader's decoder
then Huffman-decodes only the intervals a crop covers instead of everything above and beside it.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from dataclasses import dataclass

from PIL import Image

from shards.jpeg import lossless
from shards.limits import MAX_PIXELS, oversized, too_many_pixels
from shards.not_built import not_built

try:
    from prepare import _restarts
except ImportError as exn:  # pragma: no cover - only on an install that skipped the build
    raise not_built("prepare._restarts", "the native transcoder", exn) from None

# The most MCUs between restart markers, by default: measured in BENCHMARKS.md (seekable shards),
# 1 MCU decodes crops 1.6% faster than 2 for 0.9% more bytes, 4 MCUs 1-4% slower for 0.6% fewer.
RESTART_MCUS = 2
MAX_RESTART_MCUS = 65535  # the restart interval's field in a JPEG is 16 bits
MCU_SIZE = 16  # pixels: the re-encode writes 4:2:0

# Trailing bytes a complete JPEG may carry after its end-of-image marker (seen in ImageNet).
_TRAILING = b"\0\r\n \xff"


class TooSmall(ValueError):
    """An image under its layout's smallest side (`Item.min_side`): left out, counted and named, never an error."""


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
    restart_interval: int = 0  # MCUs between restart markers: 0 where the stored JPEG has none
    damage: str | None = None  # libjpeg's words on damaged entropy-coded data (the original bytes are kept)


@dataclass(frozen=True)
class Rewrite:
    """What the lossless rewrite with restart markers made of a JPEG: the new bytes, or why not."""
    data: bytes | None  # the rewritten JPEG; None where the original is kept
    interval: int = 0  # MCUs between its restart markers
    damage: str | None = None  # damaged data: libjpeg's warning or error, e.g. "Corrupt JPEG data: bad Huffman code"
    refusal: str | None = None  # a JPEG that decodes as it is but cannot be rewritten exactly: why


def shrunk_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """(w, h) with the longer side at most `max_side`, aspect kept, never enlarged (FFCV's rule)."""
    longer = max(width, height)
    if not max_side or longer <= max_side:
        return width, height
    scale = max_side / longer
    return max(1, round(width * scale)), max(1, round(height * scale))


def restart_interval(mcus_per_row: int, most: int) -> int:
    """The largest interval of at most `most` MCUs that divides a row's MCUs: restart intervals
    that form a grid, so that a crop's columns are whole intervals. The rule's one definition is
    the native one (shards/native/jpeg_rules.h), which the rewrite with restart markers uses too;
    ValueError unless 1 <= most <= 65535 and mcus_per_row >= 1."""
    return _restarts.restart_interval(mcus_per_row, most)


def rewrite_with_restarts(data: bytes, most: int, max_pixels: int) -> Rewrite:
    """The JPEG rewritten losslessly (same coefficients, standard Huffman tables) with restart
    markers every at most `most` MCUs, or why it was not (the original is then stored and decoded
    as before):

    - damage: libjpeg warned about or failed on the data (a bad Huffman code, a marker where data
      should be, the file ending early, more scans than the training decoder reads), in its words;
    - refusal: the JPEG decodes as it is but cannot be kept exactly (progressive scans that leave
      coefficient bits unsent, coefficients past 8-bit baseline's range, a header oddity libjpeg
      decodes past, samples of other than 8 bits, a lossless JPEG, more than `max_pixels`, not a JPEG).

    Out of memory is the machine's and raises."""
    status, rewritten, interval, reason = _restarts.add_restarts_with_reason(data, most, max_pixels)
    if status == _restarts.OUT_OF_MEMORY:
        raise MemoryError("out of memory adding restart markers to a JPEG")
    if status == _restarts.OK:
        return Rewrite(rewritten, interval)
    if status == _restarts.CORRUPT:
        return Rewrite(None, damage=reason or "libjpeg could not decode its data")
    return Rewrite(None, refusal=reason or "cannot be rewritten exactly")


def with_restarts(data: bytes, most: int, max_pixels: int) -> tuple[bytes, int] | None:
    """The JPEG rewritten losslessly with restart markers every `interval` MCUs: (bytes, interval);
    None where it is not (damaged or refused: `rewrite_with_restarts` says which and why)."""
    rewrite = rewrite_with_restarts(data, most, max_pixels)
    return (rewrite.data, rewrite.interval) if rewrite.data is not None else None


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


def prepare_image(data: bytes, max_side: int | None = None, quality: int = 90, max_pixels: int = MAX_PIXELS,
                  restart_mcus: int = RESTART_MCUS, min_side: int = 0) -> Prepared:
    """Check one image and return what to store (see `Prepared`), seekable with restart markers
    every at most `restart_mcus` MCUs (0: none, original bytes kept where they can be); BadImage if
    it does not decode, or if it has more than `max_pixels` pixels (the contract's limit: checked
    from the header, before anything is decoded). A good RGB JPEG whose entropy-coded data libjpeg
    finds damaged while rewriting it is kept as it is, with `damage` saying what libjpeg found (the
    caller decides whether to store it), unless PIL cannot decode it either (BadImage); with
    restart_mcus=0 its data is not decoded, so not checked. TooSmall, from the header, where its shorter
    side is under `min_side`."""
    with pil_errors_are_bad_images():
        image = Image.open(io.BytesIO(data))
    width, height = image.size
    if too_many_pixels(width, height, max_pixels):
        raise BadImage(f"has {oversized(width, height, max_pixels)}")
    if min(width, height) < min_side:
        raise TooSmall(f"is {width} x {height} px, under the {min_side} px its layout takes")
    kind = f"{image.mode} {image.format}"
    target = shrunk_size(width, height, max_side)
    if image.format == "JPEG" and image.mode == "RGB" and target == (width, height):
        if not looks_complete(data):
            with pil_errors_are_bad_images():
                image.load()  # decode fully: only a real decode error makes it bad
        if not restart_mcus:
            return Prepared(None, width, height, width, height)
        rewrite = rewrite_with_restarts(data, restart_mcus, max_pixels)
        if rewrite.damage is not None:  # damage that leaves nothing to decode (no tables, say) is a bad image
            try:
                with pil_errors_are_bad_images():
                    image.load()
            except BadImage:
                raise BadImage(f"does not decode as an image (libjpeg: {rewrite.damage})") from None
        return Prepared(rewrite.data, width, height, width, height, restart_interval=rewrite.interval,
                        damage=rewrite.damage)
    with pil_errors_are_bad_images():
        if target != (width, height) and not (image.format == "JPEG" and lossless(data)):
            image.draft("RGB", target)  # DCT-domain downscale by up to 8x: much less to decode
        image = image.convert("RGB")
        if image.size != target:
            image = image.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
    interval = restart_interval(-(-target[0] // MCU_SIZE), restart_mcus) if restart_mcus else 0
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality, subsampling="4:2:0", restart_marker_blocks=interval)
    note = None if kind == "RGB JPEG" else f"{kind} -> RGB JPEG"
    return Prepared(out.getvalue(), *target, width, height, note, interval)
