"""Lossless JPEGs (SOF3): valid files that the pinned libjpeg-turbo 3 and PIL decode, but not at a reduced
scale (no DCT). PIL's draft() of one aborted the process (a heap overflow: libjpeg-turbo writes full-size rows
into the smaller image the draft made), in prepare's --resize and in training's PIL path."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
from PIL import Image

from conftest import ROOT
from jpegs import lossless_jpeg
from shards.jpeg import lossless

DRAFTS = """
import sys
import numpy as np
from prepare.images import prepare_image
from train.decoder import pil_decode_crop
data = open(sys.argv[1], "rb").read()
for side in (24, 12, 6):
    prepared = prepare_image(data, max_side=side)
    print("prepare", side, prepared.width, prepared.height, flush=True)
for size in ((10, 12), (5, 6)):
    crop = pil_decode_crop(data, (0, 0, 48, 40), False, size, dct_scaling=True)
    exact = pil_decode_crop(data, (0, 0, 48, 40), False, size, dct_scaling=False)
    print("crop", size, np.array_equal(crop, exact), flush=True)
"""


def test_a_lossless_jpeg_is_never_drafted_by_pil(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    data = lossless_jpeg(pixels)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), pixels)  # a valid file, PIL decodes it
    path = tmp_path / "lossless.jpg"
    path.write_bytes(data)
    result = subprocess.run([sys.executable, "-c", DRAFTS, str(path)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[:5] == ["prepare 24 24 20", "prepare 12 12 10", "prepare 6 6 5",
                                             "crop (10, 12) True", "crop (5, 6) True"]


def test_lossless_reads_the_frame_header_as_libjpeg_finds_it():
    data = lossless_jpeg(np.zeros((8, 8), np.uint8))
    assert lossless(data)
    assert lossless(data[:2] + b"junk\xff\xff" + data[2:])  # bytes before a marker, fill bytes
    assert lossless(data[:2] + b"\xff\xe1\x00\x06\xff\xc0\x00\x00" + data[2:])  # an SOF0's bytes inside an APP1
    assert not lossless(data.replace(b"\xff\xc3", b"\xff\xc0", 1))
    assert not lossless(b"\xff\xd8\xff\xda\x00\x08") and not lossless(b"\xff\xd8") and not lossless(b"")


def test_a_lossless_jpeg_is_refused_by_the_native_modules_never_called_damaged():
    """libjpeg-turbo 3 reads a lossless JPEG's header but fails on its coefficients and on a region's decode as on
    damage: prepare listed a valid image's damage as "Requested features are incompatible", and training's decoder
    called a crop CORRUPT (the sample left out) or OK depending on the box. REFUSED: PIL decodes it."""
    from prepare import _restarts
    from train import decoder
    from jpegs import as_images

    pixels = np.random.default_rng(1).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    data = lossless_jpeg(pixels)
    status, rewritten, interval, reason = _restarts.add_restarts_with_reason(data, 2, 1 << 20)
    assert (status, rewritten, interval, reason) == (_restarts.REFUSED, None, 0, "a lossless JPEG (no DCT "
                                                                                 "coefficients to rewrite)")
    boxes = np.array([[0, 0, 48, 40], [8, 8, 40, 32], [0, 0, 48, 40]], np.float32)
    for dct_scaling in (False, True):
        out = np.zeros((3, 20, 24, 3), np.uint8)
        statuses = decoder.decode_crops(as_images([data] * 3), boxes, np.zeros(3, bool), out, 0,
                                        dct_scaling=dct_scaling)
        assert statuses.tolist() == [decoder.REFUSED] * 3
    exact = np.asarray(Image.fromarray(pixels).resize((24, 20), Image.Resampling.BILINEAR, box=(8, 8, 40, 32)))
    assert np.array_equal(decoder.pil_decode_crop(data, (8, 8, 40, 32), False, (20, 24)), exact)
