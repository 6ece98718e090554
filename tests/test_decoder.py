"""The crop-region decoder (train/native/jpegcrop.c) against PIL's full decode and resize, on every
kind of JPEG; its refusals; the pixel limit; nothing carried from one image to the next; its
checked arguments; many threads at once. (tests/test_native_fuzz.py throws hostile bytes at it.)"""

from __future__ import annotations

import ast
import io
import platform
import re
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from jpegs import (DHT, DQT, as_images, cjpeg, cmyk, jpeg, many_scans, photo, two_components, with_sampling, with_size,
                   without, ycck)
from prepare import _restarts
from train import _jpegcrop, _tarindex, decoder
from train.decoder import decode_crops, image_sizes, pil_decode_crop

KINDS = {
    "baseline 4:2:0": {}, "4:2:2": {"subsampling": 1}, "4:4:4": {"subsampling": 0},
    "progressive": {"progressive": True}, "grayscale": {"mode": "L"}, "restart markers": {"restart": 3},
    "EXIF": {"exif": True}, "odd size": {"width": 101, "height": 67},
    "large (decoded at 1/2 to 1/8 scale)": {"width": 1201, "height": 901},
    "optimised Huffman tables": {"optimize": True},
}
# What PIL does not write: libjpeg-turbo's cjpeg makes them.
CJPEG_KINDS = {"arithmetic coding": ["-arithmetic"], "4x2 sampling": ["-sample", "4x2,1x1,1x1"],
               "4x1 sampling": ["-sample", "4x1,1x1,1x1"], "1x4 sampling": ["-sample", "1x4,1x1,1x1"],
               "progressive 4x2, arithmetic": ["-progressive", "-sample", "4x2,1x1,1x1", "-arithmetic"]}


UNSCALED = {"4x2 sampling", "4x1 sampling", "1x4 sampling", "progressive 4x2, arithmetic"}  # see dct_shrink


def full_decode_crop(data: bytes, box, flip: bool, size: int) -> np.ndarray:
    """PIL's decode at full scale, then the box resized: the reference where our decoder does not
    scale in the DCT (4x2, 4x1, 1x4 sampling, which libjpeg-turbo 2.x crops wrongly when scaled)."""
    image = Image.open(io.BytesIO(data)).convert("RGB").resize((size, size), Image.Resampling.BILINEAR, box=box)
    return np.asarray(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else image)


# Four-component JPEGs, read as PIL reads them (Adobe's inverted samples, PIL's CMYK -> RGB).
CMYK_KINDS = {"CMYK": lambda: cmyk(jpeg()), "CMYK progressive": lambda: cmyk(jpeg(progressive=True)),
              "YCCK": lambda: ycck(cmyk(jpeg()))}


def kind_jpeg(kind: str) -> bytes:
    if kind in CJPEG_KINDS:
        return cjpeg(photo(333, 217), "-quality", "92", *CJPEG_KINDS[kind])
    if kind in CMYK_KINDS:
        return CMYK_KINDS[kind]()
    return jpeg(**KINDS[kind])


def boxes_of(width: int, height: int) -> np.ndarray:
    """Crops inside, touching each edge, the whole image, a tiny one (upscaled), a thin band."""
    return np.array([
        [width * 0.12, height * 0.09, width * 0.75, height * 0.88],
        [0, height * 0.2, width * 0.4, height * 0.6],  # left edge
        [width * 0.3, 0, width * 0.7, height * 0.5],  # top edge
        [width * 0.5, height * 0.3, width, height * 0.8],  # right edge
        [width * 0.2, height * 0.6, width * 0.6, height],  # bottom edge
        [0, 0, width, height],
        [width / 2, height / 2, width / 2 + 9, height / 2 + 7],
        [0, height * 0.45, width, height * 0.55],
    ], np.float32)


@pytest.mark.parametrize("kind", [*KINDS, *CJPEG_KINDS, *CMYK_KINDS])
@pytest.mark.parametrize("size", [96, 224])
def test_region_decode_matches_full_decode_crop_and_resize(kind, size):
    data = kind_jpeg(kind)
    width, height = Image.open(io.BytesIO(data)).size
    boxes = boxes_of(width, height)
    flips = np.arange(len(boxes)) % 2 == 1
    out = np.zeros((len(boxes), size, size, 3), np.uint8)
    status = decode_crops(as_images([data] * len(boxes)), boxes, flips, out, 0)
    assert (status == decoder.DECODED).all()
    for i, box in enumerate(boxes):
        crop = full_decode_crop if kind in UNSCALED else pil_decode_crop
        reference = crop(data, tuple(box.tolist()), bool(flips[i]), size).astype(int)
        diff = np.abs(out[i].astype(int) - reference)
        assert diff.max() <= 2 and diff.mean() < 0.1, (i, diff.max(), diff.mean())


def area_reference(data: bytes, box, flip: bool, size: int) -> np.ndarray:
    """PIL's decode at full scale, the (whole-pixel) box resized by OpenCV's INTER_AREA, FFCV's resize."""
    cv2 = pytest.importorskip("cv2")
    left, top, right, bottom = (int(v) for v in box)
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[top:bottom, left:right]
    resized = cv2.resize(np.ascontiguousarray(pixels), (size, size), interpolation=cv2.INTER_AREA)
    return resized[:, ::-1] if flip else resized


@pytest.mark.parametrize("kind", [*KINDS, *CJPEG_KINDS, *CMYK_KINDS])
@pytest.mark.parametrize("interpolation", ["bicubic", "area"])
def test_validations_other_filters_match_their_references_on_every_kind(kind, interpolation):
    """Bicubic against PIL's resize(box=...) of the whole image (its taps reach past the box, also at
    the image's edges), area against OpenCV's INTER_AREA of the box's pixels where both sides shrink
    or both enlarge (FFCV's square crops: OpenCV resizes a box shrunk one way and enlarged the other
    otherwise); unscaled, as validation decodes; enlarged (the small box) and shrunk, flipped and not."""
    data = kind_jpeg(kind)
    width, height = Image.open(io.BytesIO(data)).size
    boxes = boxes_of(width, height)
    if interpolation == "area":
        boxes = np.floor(boxes)
        boxes = boxes[((boxes[:, 2] - boxes[:, 0]) >= 96) == ((boxes[:, 3] - boxes[:, 1]) >= 96)]
    flips = np.arange(len(boxes)) % 2 == 1
    out = np.zeros((len(boxes), 96, 96, 3), np.uint8)
    status = decode_crops(as_images([data] * len(boxes)), boxes, flips, out, 0, dct_scaling=False,
                          interpolation=interpolation)
    assert (status == decoder.DECODED).all()
    for i, box in enumerate(boxes):
        if interpolation == "area":
            reference = area_reference(data, box, bool(flips[i]), 96)
        else:
            reference = pil_decode_crop(data, tuple(box.tolist()), bool(flips[i]), 96, False, "bicubic")
        diff = np.abs(out[i].astype(int) - reference)
        assert diff.max() <= 2 and diff.mean() < 0.3, (i, diff.max(), diff.mean())


def test_a_flip_mirrors_the_same_crop_exactly():
    data = jpeg()
    box = np.array([[30.5, 10.25, 200.0, 180.0]] * 2, np.float32)
    out = np.zeros((2, 64, 64, 3), np.uint8)
    decode_crops(as_images([data, data]), box, np.array([False, True]), out, 0)
    assert np.array_equal(out[1], out[0][:, ::-1])


def test_images_go_to_their_slots_and_nowhere_else():
    blobs = [jpeg(seed=s) for s in range(3)]
    out = np.full((6, 32, 32, 3), 7, np.uint8)
    decode_crops(as_images(blobs), np.array([[0, 0, 100, 100]] * 3, np.float32), np.zeros(3, bool), out, first=2)
    assert (out[:2] == 7).all() and (out[5] == 7).all() and not (out[2:5] == 7).all()


def test_sizes_come_from_the_headers():
    dims, status = image_sizes(as_images([jpeg(333, 217), jpeg(101, 67, mode="L"), b"not a jpeg"]))
    assert dims[:2].tolist() == [[333, 217], [101, 67]] and status.tolist() == [0, 0, decoder.NOT_JPEG]


def png() -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg())).save(out, "PNG")
    return out.getvalue()


def damaged(data: bytes) -> bytes:
    """A JPEG whose entropy-coded data holds a marker halfway (libjpeg: "premature end of data
    segment"). Garbage without markers can decode to wrong pixels without a word, with any JPEG
    decoder; shard checksums (prepare --verify) are what finds that."""
    middle = len(data) // 2
    return data[:middle] + b"\xff\xd9" + data[middle + 2:]


def test_what_it_does_not_take_is_refused_and_damage_is_reported():
    """Damage is found where the crop's rows are decoded: the whole image here (a crop that ends
    above the damage decodes correct pixels)."""
    good = jpeg()
    blobs = [two_components(good), png(), good[: len(good) // 2], damaged(good), b"\xff\xd8 garbage", cmyk(good), good]
    out = np.zeros((len(blobs), 32, 32, 3), np.uint8)
    status = decode_crops(as_images(blobs), np.array([[0, 0, 333, 217]] * len(blobs), np.float32),
                          np.zeros(len(blobs), bool), out, 0)
    assert status.tolist() == [decoder.REFUSED, decoder.NOT_JPEG, decoder.CORRUPT, decoder.CORRUPT, decoder.CORRUPT,
                               decoder.DECODED, decoder.DECODED]


def test_a_progressive_jpeg_of_more_than_max_scans_scans_is_damage():
    """Each scan is a pass over the whole image's coefficients: thousands of legal scans would cost
    minutes an image. Up to MAX_SCANS (100, libjpeg-turbo's fuzzers' limit) decode; more do not."""
    picture = photo(96, 72)
    at_limit, over = many_scans(picture, _jpegcrop.MAX_SCANS), many_scans(picture, _jpegcrop.MAX_SCANS + 1)
    box, out = np.array([[0, 0, 96, 72]] * 3, np.float32), np.zeros((3, 32, 32, 3), np.uint8)
    status = decode_crops(as_images([at_limit, over, many_scans(picture, 190)]), box, np.zeros(3, bool), out, 0)
    assert status.tolist() == [decoder.DECODED, decoder.CORRUPT, decoder.CORRUPT]
    reference = pil_decode_crop(at_limit, (0, 0, 96, 72), False, 32).astype(int)
    assert np.abs(out[0].astype(int) - reference).max() <= 2


def test_a_header_claiming_more_pixels_than_allowed_is_refused_before_any_decode():
    """The 65,500 x 65,500 claims once made the decoder ask for 17 GB (4x2 sampling: no DCT scaling
    for a whole-image box) or libjpeg for 1 GB blocks (progressive). Now they cost a header read."""
    good = jpeg()
    lying = [with_size(good, 65500, 65500), with_sampling(with_size(good, 65500, 65500), [(4, 2), (1, 1), (1, 1)]),
             with_size(jpeg(progressive=True), 65500, 65500), with_size(good, 8200, 8200)]  # 67.2 Mpx: just over
    images = as_images(lying + [good])
    dims, status = image_sizes(images)
    assert status.tolist() == [decoder.TOO_LARGE] * 4 + [decoder.DECODED]
    assert dims[0].tolist() == [65500, 65500] and dims[3].tolist() == [8200, 8200]
    out = np.full((5, 32, 32, 3), 7, np.uint8)
    whole = np.array([[0, 0, 333, 217]] * 5, np.float32)
    decoded = decode_crops(images, whole, np.zeros(5, bool), out, 0)
    assert decoded.tolist() == [decoder.TOO_LARGE] * 4 + [decoder.DECODED]
    assert (out[:4] == 0).all() and not (out[4] == 0).all()  # a slot whose image fails is zeroed


@pytest.mark.parametrize("progressive", [False, True])
def test_the_limit_is_inclusive_and_a_progressive_jpeg_at_the_limit_decodes(progressive):
    """At max_pixels, libjpeg's budget (6 bytes a pixel for a progressive JPEG's coefficients) suffices."""
    data = jpeg(333, 217, progressive=progressive, subsampling=0)
    box, out = np.array([[0, 0, 333, 217]], np.float32), np.zeros((1, 64, 64, 3), np.uint8)
    at_limit = decode_crops(as_images([data]), box, np.zeros(1, bool), out, 0, max_pixels=333 * 217)
    assert at_limit.tolist() == [decoder.DECODED]
    over = decode_crops(as_images([data]), box, np.zeros(1, bool), out, 0, max_pixels=333 * 217 - 1)
    assert over.tolist() == [decoder.TOO_LARGE]
    assert image_sizes(as_images([data]), max_pixels=333 * 217 - 1)[1].tolist() == [decoder.TOO_LARGE]


def test_the_memory_figures_the_readme_states_are_the_codes():
    """448 MiB for any JPEG, 768 MiB for the PIL path, at the dataset's limit (docs/reliability.md, decoder.py).
    That they are kept is tests/test_native_fuzz.py's to show, with the process's peak memory."""
    from shards.limits import MAX_PIXELS

    assert _jpegcrop.memory_bound(MAX_PIXELS) == 448 << 20
    assert decoder.THREAD_MEMORY == decoder.PIL_BYTES_PER_PIXEL * MAX_PIXELS == 768 << 20
    assert _jpegcrop.memory_bound(1) < _jpegcrop.memory_bound(1 << 20) < _jpegcrop.memory_bound(1 << 28)


def abbreviated_corpus() -> list[bytes]:
    """JPEGs without their own tables next to JPEGs whose tables differ: a decoder that kept one
    image's tables for the next decoded these differently inside a chunk than alone."""
    standard = jpeg(seed=3)  # libjpeg's standard Huffman tables
    return [jpeg(seed=1, optimize=True, quality=80), without(standard, DHT), jpeg(seed=2, optimize=True, quality=60),
            without(standard, DQT), jpeg(seed=4, progressive=True), without(jpeg(seed=5, optimize=True), DHT),
            without(without(standard, DQT), DHT), standard, cjpeg(photo(200, 150, 6), "-arithmetic"),
            without(jpeg(seed=7, progressive=True), DHT), jpeg(seed=8, mode="L", optimize=True)]


def test_an_abbreviated_jpeg_decodes_as_it_would_alone():
    """Without DQT it fails; without DHT it takes libjpeg's standard tables: the same pixels as with
    them, if it was written with them."""
    corpus = abbreviated_corpus()
    alone = [decode_crops(as_images([data]), np.array([[0, 0, 40, 40]], np.float32), np.zeros(1, bool),
                          np.zeros((1, 24, 24, 3), np.uint8), 0)[0] for data in corpus]
    assert alone[3] == alone[6] == decoder.CORRUPT  # no quantisation tables
    assert alone[1] == alone[7] == decoder.DECODED  # standard Huffman tables
    box, pixels = np.array([[5, 5, 300, 200]] * 2, np.float32), np.zeros((2, 48, 48, 3), np.uint8)
    decode_crops(as_images([corpus[1], corpus[7]]), box, np.zeros(2, bool), pixels, 0)
    assert np.array_equal(pixels[0], pixels[1])


def test_every_image_decodes_as_it_would_alone_in_chunks_of_every_size():
    corpus = abbreviated_corpus()
    n = len(corpus)
    images = as_images(corpus)
    boxes = np.array([[4 + i, 3, 150 + 5 * i, 140] for i in range(n)], np.float32)
    flips = np.arange(n) % 2 == 1
    results = {}
    for chunk in range(1, n + 1):
        out, status = np.full((n, 40, 40, 3), 99, np.uint8), np.zeros(n, np.int32)
        for first in range(0, n, chunk):
            status[first:first + chunk] = decode_crops(images[first:first + chunk], boxes[first:first + chunk],
                                                       flips[first:first + chunk], out, first)
        results[chunk] = (status, out)
    alone_status, alone_pixels = results[1]
    assert (alone_status == decoder.DECODED).sum() >= 6 and (alone_status != decoder.DECODED).sum() >= 2
    for chunk, (status, out) in results.items():
        assert np.array_equal(status, alone_status), chunk
        assert np.array_equal(out, alone_pixels), chunk


def hostile_arguments(data: bytes) -> dict:
    """Calls of the native functions with one argument wrong each: every one must raise, none may
    read or write outside what it was given."""
    n, size = 2, 16
    buffers = (data,)
    which, offsets, lengths = np.zeros(n, np.int32), np.zeros(n, np.int64), np.full(n, len(data), np.int64)
    boxes, flips = np.array([[0, 0, 10, 10]] * n, np.float32), np.zeros(n, bool)
    out, status, dims = np.zeros((n, size, size, 3), np.uint8), np.zeros(n, np.int32), np.zeros((n, 2), np.int32)
    images = dict(buffers=buffers, which=which, offsets=offsets, lengths=lengths)
    crops = dict(images, boxes=boxes, flips=flips, out=out, first=0, status=status, max_pixels=1 << 26)
    sizes = dict(images, dims=dims, status=status, max_pixels=1 << 26)
    read_only = out.copy()
    read_only.flags.writeable = False
    return {
        "which int64": dict(crops, which=np.zeros(n, np.int64)),
        "which out of range": dict(crops, which=np.array([0, 1], np.int32)),
        "which negative": dict(crops, which=np.array([0, -1], np.int32)),
        "offsets float": dict(crops, offsets=np.zeros(n, np.float64)),
        "offsets too short": dict(crops, offsets=np.zeros(n - 1, np.int64)),
        "offsets 2-d": dict(crops, offsets=np.zeros((n, 1), np.int64)),
        "negative length": dict(crops, lengths=np.array([len(data), -1], np.int64)),
        "offset + length overflows": dict(crops, offsets=np.full(n, 2**62, np.int64), lengths=np.full(n, 2**62, np.int64)),
        "past the buffer": dict(crops, offsets=np.array([0, 1], np.int64)),
        "buffers not a tuple": dict(crops, buffers=[data]),
        "a buffer that is not one": dict(crops, buffers=(12,)),
        "boxes float64": dict(crops, boxes=boxes.astype(np.float64)),
        "boxes (n, 3)": dict(crops, boxes=boxes[:, :3].copy()),
        "flips int32": dict(crops, flips=np.zeros(n, np.int32)),
        "out float32": dict(crops, out=np.zeros((n, size, size, 3), np.float32)),
        "out (n, 8, 0, 3)": dict(crops, out=np.zeros((n, 8, 0, 3), np.uint8)),
        "out width beyond MAX_SIZE": dict(crops, out=np.zeros((0, 8, 2**20, 3), np.uint8)),
        "regions int64": dict(crops, regions=np.zeros((n, 4), np.int64)),
        "regions (n, 3)": dict(crops, regions=np.zeros((n, 3), np.int32)),
        "regions too short": dict(crops, regions=np.zeros((n - 1, 4), np.int32)),
        "a region of no pixel": dict(crops, regions=np.array([[0, 0, size, size], [0, 0, 0, size]], np.int32)),
        "a region past the slot": dict(crops, regions=np.array([[0, 0, size, size], [1, 0, size, size]], np.int32)),
        "a region left of the slot": dict(crops, regions=np.array([[0, -1, size, 4], [0, 0, 4, 4]], np.int32)),
        "a region whose sum overflows int32": dict(crops, regions=np.array([[2**31 - 1, 0, 2**31 - 1, 1]] * n,
                                                                           np.int32)),
        "fill of 4": dict(crops, regions=np.array([[0, 0, 4, 4]] * n, np.int32), fill=np.zeros(4, np.uint8)),
        "fill int32": dict(crops, regions=np.array([[0, 0, 4, 4]] * n, np.int32), fill=np.zeros(3, np.int32)),
        "out (n, size, size, 4)": dict(crops, out=np.zeros((n, size, size, 4), np.uint8)),
        "out not contiguous": dict(crops, out=np.zeros((2 * n, size, size, 3), np.uint8)[::2]),
        "out read-only": dict(crops, out=read_only),
        "out bytes": dict(crops, out=bytes(n * size * size * 3)),
        "out size 0": dict(crops, out=np.zeros((n, 0, 0, 3), np.uint8)),
        "out size 2**20 (beyond MAX_SIZE)": dict(crops, out=np.zeros((0, 2**20, 2**20, 3), np.uint8)),
        "first negative": dict(crops, first=-1),
        "first past the slots": dict(crops, first=1),
        "first huge": dict(crops, first=2**62),
        "status int64": dict(crops, status=np.zeros(n, np.int64)),
        "status too short": dict(crops, status=np.zeros(n - 1, np.int32)),
        "max_pixels 0": dict(crops, max_pixels=0),
        "max_pixels huge": dict(crops, max_pixels=2**40),
        "simd unknown": dict(crops, simd="AVX-512 someday"),
        "sizes: dims (n, 3)": ("image_sizes", dict(sizes, dims=np.zeros((n, 3), np.int32))),
        "sizes: dims int64": ("image_sizes", dict(sizes, dims=np.zeros((n, 2), np.int64))),
        "sizes: max_pixels -1": ("image_sizes", dict(sizes, max_pixels=-1)),
        "gather: out too small": ("gather", dict(images, out=np.zeros(2 * len(data) - 1, np.uint8))),
        "gather: at negative": ("gather", dict(images, out=np.zeros(2 * len(data), np.uint8), at=-1)),
        "gather: at past the end": ("gather", dict(images, out=np.zeros(2 * len(data), np.uint8), at=2**62)),
        "gather: out int16": ("gather", dict(images, out=np.zeros(2 * len(data), np.int16))),
        "status missing": dict(crops, status=None),
    }


@pytest.mark.parametrize("case", list(hostile_arguments(bytes(64))))
def test_a_wrong_argument_is_an_exception_never_a_write(case):
    data = jpeg(64, 48)
    call = hostile_arguments(data)[case]
    name, kwargs = call if isinstance(call, tuple) else ("decode_crops", call)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    outs = [v for k, v in kwargs.items() if k in ("out", "dims", "status") and isinstance(v, np.ndarray)]
    before = [o.copy() for o in outs]
    with pytest.raises((TypeError, ValueError, IndexError)):
        getattr(_jpegcrop, name)(**kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(outs, before))


def bogus_markers(data: bytes) -> bytes:
    """The first 200 bytes of entropy-coded data overwritten with reserved markers (0xFF05)."""
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    return data[:start + 8] + b"\xff\x05" * 100 + data[start + 208:]


def test_the_marker_check_finds_markers_in_entropy_data_and_files_cut_short():
    """--decode gpu's check (its decoders may decode through such damage). An early EOI is
    structurally whole and passes: only a decode finds it (or prepare --verify)."""
    good = [jpeg(), jpeg(progressive=True), jpeg(restart=2), jpeg(mode="L"), jpeg(exif=True), jpeg(subsampling=0),
            cmyk(jpeg()), jpeg() + b"trailing bytes after EOI"]
    bad = [bogus_markers(good[0]), bogus_markers(good[1]), good[1][: len(good[1]) * 2 // 3], good[2][:-2]]
    images = as_images(good + bad + [damaged(good[0])])
    _, plain = image_sizes(images)
    _, checked = image_sizes(images, check_markers=True)
    assert plain.tolist() == [decoder.DECODED] * 13
    assert checked.tolist() == [decoder.DECODED] * 8 + [decoder.CORRUPT] * 4 + [decoder.DECODED]


def test_the_resizes_offered_are_those_this_cpu_runs():
    """Asked of the CPU (cpuid, xgetbv: train/native/cpu_features.h), as /proc/cpuinfo says it: zig cc's
    __builtin_cpu_supports, which the release wheels were built with, answered no to every feature. (The release
    tier checks the wheel's own list in each bare system: jobs/release/check_bare_install.sh.)"""
    if platform.machine() != "x86_64":
        pytest.skip("x86-64's vector resizes")
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    avx512 = all(flag in flags for flag in ("avx512f", "avx512bw", "avx512vl"))
    assert list(decoder.SIMD) == ["AVX512"] * avx512 + ["AVX2"] * ("avx2" in flags) + ["SSE2", "C"]


@pytest.mark.parametrize("interpolation", decoder.INTERPOLATIONS)
def test_every_resize_implementation_gives_the_same_bytes(interpolation):
    """Plain C, SSE2 and AVX2 (those this CPU runs), each chosen per call: nothing process-wide;
    with every filter (bicubic's weights are negative in places)."""
    blobs = [jpeg(seed=s, width=300 + 7 * s, height=200 + 3 * s) for s in range(6)]
    boxes = np.array([[s, 2 * s, 200 + s, 150 + s] for s in range(6)], np.float32)
    outs = {}
    for simd in decoder.SIMD:
        outs[simd] = np.zeros((6, 61, 61, 3), np.uint8)  # an odd size: the vector loops' tails too
        decode_crops(as_images(blobs), boxes, np.arange(6) % 2 == 0, outs[simd], 0, simd=simd,
                     interpolation=interpolation)
    assert "C" in outs and (platform.machine() not in ("x86_64", "AMD64") or "SSE2" in outs)
    for simd, out in outs.items():
        assert np.array_equal(out, outs["C"]), simd
    with pytest.raises(ValueError, match="not available"):
        decode_crops(as_images(blobs), boxes, np.zeros(6, bool), outs["C"], 0, simd="NEON9000")


def test_many_threads_at_once_decode_the_same_pixels():
    blobs = [jpeg(seed=s % 5, width=250 + s, height=200) for s in range(64)]
    images = as_images(blobs)
    boxes = np.array([[s % 30, s % 20, 200, 190] for s in range(64)], np.float32)
    flips = np.arange(64) % 3 == 0
    alone = np.zeros((64, 48, 48, 3), np.uint8)
    decode_crops(images, boxes, flips, alone, 0)
    with ThreadPoolExecutor(8) as pool:
        for round in range(3):
            together = np.full_like(alone, round)  # a slot left unwritten would keep this
            simd = [decoder.SIMD[(round + i) % len(decoder.SIMD)] for i in range(16)]  # each call its own
            list(pool.map(lambda i: decode_crops(images[i:i + 4], boxes[i:i + 4], flips[i:i + 4], together, i,
                                                 simd=simd[i // 4]), range(0, 64, 4)))
            assert np.array_equal(together, alone)


@pytest.mark.slow
def test_a_missing_native_build_is_a_clear_error_not_a_slow_fallback():
    """Without the compiled module the loader does not quietly decode with PIL: importing says
    what to run."""
    import subprocess
    import sys

    from conftest import ROOT

    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'train._jpegcrop': raise ImportError('no module named train._jpegcrop')\n"
               "sys.meta_path.insert(0, Block())\n"
               "import train.loader\n")
    result = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0
    assert "the native decoder train._jpegcrop is not built" in result.stderr and "jobs/install.sh" in result.stderr


def docstring_signature(function) -> list[tuple[str, object]]:
    """(name, default or ...) of each argument, from the `name(a, b=1)` that opens a native
    function's docstring (the C functions carry no other signature)."""
    found = re.match(rf"{function.__name__}\((.*?)\)", function.__doc__, re.S)
    assert found, function.__doc__
    parts = [part.split("=") for part in re.split(r",\s*", found.group(1)) if part]  # (none for `f()`)
    return [(part[0], ast.literal_eval(part[1]) if len(part) > 1 else ...) for part in parts]


@pytest.mark.parametrize("module", [_jpegcrop, _tarindex, _restarts], ids=lambda m: m.__name__)
def test_the_stubs_beside_the_native_modules_name_what_they_hold_and_every_argument(module):
    """The .pyi beside each extension (what mypy reads) against the module: the same public names,
    constants of the stated types, and each function's arguments, in order with their defaults, as
    its docstring states them."""
    tree = ast.parse(Path(module.__file__).with_name(module.__name__.rpartition(".")[2] + ".pyi").read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    constants = {node.target.id: node.annotation for node in tree.body
                 if isinstance(node, ast.AnnAssign) and not node.target.id.startswith("_")}
    public = {name for name in dir(module) if not name.startswith("_")}
    assert public == set(functions) | set(constants)
    for name, annotation in constants.items():  # Final[int], Final[str], Final[list[str]]
        kind = ast.unparse(annotation).removeprefix("Final[").removesuffix("]").partition("[")[0]
        assert type(getattr(module, name)).__name__ == kind, name
    for name, node in functions.items():
        arguments = node.args.args
        defaults = [...] * (len(arguments) - len(node.args.defaults)) + [
            ast.literal_eval(default) if not isinstance(default, ast.Constant) or default.value is not ... else ...
            for default in node.args.defaults]
        assert [(a.arg, d) for a, d in zip(arguments, defaults)] == docstring_signature(getattr(module, name)), name
        assert all(a.annotation is not None for a in arguments) and node.returns is not None, name


# ---------------------------------------------------------------- regions of a slot, other output shapes (#53)

def decoded(data: bytes, box, out: np.ndarray, **options) -> np.ndarray:
    status = np.zeros(1, np.int32)
    _jpegcrop.decode_crops((data,), np.zeros(1, np.int32), np.zeros(1, np.int64), np.array([len(data)], np.int64),
                           boxes=np.array([box], np.float32), flips=np.zeros(1, bool), out=out, first=0, status=status,
                           max_pixels=1 << 26, dct_scaling=False, **options)
    assert status.tolist() == [0]
    return out[0]


@pytest.mark.parametrize("height,width", [(24, 40), (40, 24), (1, 33), (33, 1), (17, 17)])
def test_an_output_of_any_height_and_width_is_the_boxs_resize_to_it(height, width):
    data = jpeg(333, 217)
    box = (10.5, 7.0, 300.0, 200.25)
    ours = decoded(data, box, np.zeros((1, height, width, 3), np.uint8)).astype(np.float32)
    pil = Image.open(io.BytesIO(data)).convert("RGB").resize((width, height), Image.Resampling.BILINEAR, box=box)
    assert np.abs(ours - np.asarray(pil, np.float32)).mean() < 0.05


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "area"])
def test_a_region_of_a_slot_holds_the_same_pixels_as_a_slot_of_its_size_and_the_rest_is_the_fill(interpolation):
    data = jpeg(333, 217)
    box = (0.0, 0.0, 333.0, 217.0)
    alone = decoded(data, box, np.zeros((1, 19, 29, 3), np.uint8), interpolation=interpolation)
    fill = np.array([124, 116, 104], np.uint8)
    slot = decoded(data, box, np.full((1, 32, 32, 3), 7, np.uint8), interpolation=interpolation,
                   regions=np.array([[6, 2, 19, 29]], np.int32), fill=fill)
    assert np.array_equal(slot[6:25, 2:31], alone)
    outside = np.ones((32, 32), bool)
    outside[6:25, 2:31] = False
    assert (slot[outside] == fill).all()
    black = decoded(data, box, np.full((1, 32, 32, 3), 7, np.uint8), interpolation=interpolation,
                    regions=np.array([[0, 0, 32, 20]], np.int32))
    assert (black[:, 20:] == 0).all()  # no fill: black, as torchvision's CenterCrop pads


def test_a_failed_image_zeroes_its_whole_slot_fill_and_all():
    out = np.full((1, 8, 8, 3), 7, np.uint8)
    status = np.zeros(1, np.int32)
    bad = b"\xff\xd8" + bytes(40)
    _jpegcrop.decode_crops((bad,), np.zeros(1, np.int32), np.zeros(1, np.int64), np.array([len(bad)], np.int64),
                           boxes=np.array([[0, 0, 4, 4]], np.float32), flips=np.zeros(1, bool), out=out, first=0,
                           status=status, max_pixels=1 << 26, regions=np.array([[1, 1, 4, 4]], np.int32),
                           fill=np.array([1, 2, 3], np.uint8))
    assert status[0] != 0 and not out.any()
