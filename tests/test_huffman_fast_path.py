"""Our patch of libjpeg-turbo (third_party/libjpeg-turbo/patches/0001-fast-huffman-path-in-restart-intervals)
changes no output: the crop decoder on the patched library and the same decoder on the release as it is
(train/bench/reference_build.py) give the same pixels and the same status (which carries the warnings the
decoder acts on) for every input here:

- photo-like images of ImageNet's sizes and larger;
- the test suite's JPEG kinds at restart intervals of 1, 2, 4 and 8 MCUs and of one MCU row;
- the decoder fuzz test's corpus (truncations, mutants, restart markers swapped, dropped or renumbered,
  broken grids), and damage aimed at the entropy-coded data of seekable JPEGs with longer intervals;
- many random crops, decoded with the seek (only the intervals a box covers) and whole.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from jpegs import cjpeg, jpeg, photo
from prepare.images import with_restarts
from shards.limits import MAX_PIXELS
from train import _jpegcrop
from train.decoder import Images

pytestmark = pytest.mark.slow  # builds the unpatched library once (about 30 s), then compares


@pytest.fixture(scope="module")
def reference():
    from train.bench.reference_build import reference_jpegcrop

    return reference_jpegcrop()


def crops_both(reference, blobs: list[bytes], boxes: np.ndarray, flips: np.ndarray, size: int, **options):
    """(pixels, status) from the patched decoder and from the reference, the same call."""
    images = Images.from_blobs(blobs)
    results = []
    for module in (_jpegcrop, reference):
        out = np.full((len(blobs), size, size, 3), 7, np.uint8)
        status = np.zeros(len(blobs), np.int32)
        module.decode_crops(**images.arrays(), boxes=np.ascontiguousarray(boxes, np.float32),
                            flips=np.ascontiguousarray(flips, np.bool_), out=out, first=0, status=status,
                            max_pixels=MAX_PIXELS, simd=None, seek=options.get("seek", True), seeked=None,
                            dct_scaling=options.get("dct_scaling", False), interpolation="bilinear",
                            fast_dct=False, stop_after=None)
        results.append((out, status))
    return results


def assert_same(reference, blobs: list[bytes], names: list[str], seed: int, crops: int = 3, size: int = 48):
    """Whole images and `crops` random boxes each, seeking and not: the same bytes and statuses."""
    rng = np.random.default_rng(seed)
    many = [b for b in blobs for _ in range(crops + 1)]
    labels = [n for n in names for _ in range(crops + 1)]
    sizes = np.array([Image.open(io.BytesIO(b)).size if looks_sized(b) else (64, 64) for b in many], np.float32)
    x0 = rng.uniform(0, 0.9, len(many)) * sizes[:, 0]
    y0 = rng.uniform(0, 0.9, len(many)) * sizes[:, 1]
    x1 = x0 + rng.uniform(0.05, 1, len(many)) * (sizes[:, 0] - x0)
    y1 = y0 + rng.uniform(0.05, 1, len(many)) * (sizes[:, 1] - y0)
    boxes = np.stack([x0, y0, x1, y1], axis=1)
    boxes[:: crops + 1] = np.stack([0 * sizes[:, 0], 0 * sizes[:, 1], sizes[:, 0], sizes[:, 1]], 1)[:: crops + 1]
    flips = rng.random(len(many)) < 0.5
    for seek in (True, False):
        (ours, our_status), (theirs, their_status) = crops_both(reference, many, boxes, flips, size, seek=seek)
        differ = np.flatnonzero((our_status != their_status) | (ours != theirs).reshape(len(many), -1).any(1))
        assert not len(differ), [(labels[i], int(our_status[i]), int(their_status[i])) for i in differ[:10]]


def looks_sized(data: bytes) -> bool:
    try:
        Image.open(io.BytesIO(data)).size
        return True
    except Exception:
        return False


def with_interval(image: Image.Image, mcus: int = 0, rows: int = 0, **options) -> bytes:
    """PIL's encoder (the pinned libjpeg-turbo) with a restart marker every `mcus` MCUs or `rows` MCU rows."""
    out = io.BytesIO()
    image.save(out, "JPEG", quality=options.pop("quality", 90),
               **({"restart_marker_blocks": mcus} if mcus else {"restart_marker_rows": rows}), **options)
    return out.getvalue()


def test_photos_of_imagenets_sizes_and_larger(reference):
    blobs, names = [], []
    for k, (w, h) in enumerate([(500, 375), (375, 500), (500, 333), (640, 480), (1024, 768), (2048, 1536)]):
        picture = photo(w, h, seed=k)
        seekable, interval = with_restarts(jpeg(w, h, seed=k), 2, MAX_PIXELS)  # as prepare writes them
        blobs += [seekable, with_interval(picture, 4), with_interval(picture, 8, subsampling="4:4:4")]
        names += [f"{w}x{h} prepare's (interval {interval})", f"{w}x{h} every 4", f"{w}x{h} 4:4:4 every 8"]
    assert_same(reference, blobs, names, seed=1, crops=6)


@pytest.mark.parametrize("interval", ["1", "2", "4", "8", "1 row"])
def test_the_suites_jpeg_kinds_at_every_restart_interval(reference, interval):
    picture = photo(333, 217, seed=3)
    mcus, rows = (0, 1) if interval == "1 row" else (int(interval), 0)
    kinds = {"4:2:0": {"subsampling": 2}, "4:2:2": {"subsampling": 1}, "4:4:4": {"subsampling": 0},
             "optimised tables": {"optimize": True}, "quality 50": {"quality": 50}, "quality 100": {"quality": 100}}
    blobs = [with_interval(picture, mcus, rows, **options) for options in kinds.values()]
    blobs.append(with_interval(picture.convert("L"), mcus, rows))
    names = [*kinds, "grey"]
    cj = ["-restart", f"{interval.split()[0]}{'' if rows else 'b'}"]
    blobs += [cjpeg(picture, *cj, "-sample", "4x2,1x1,1x1"), cjpeg(picture, *cj, "-sample", "1x4,1x1,1x1"),
              cjpeg(picture, *cj, "-sample", "4x1,1x1,1x1")]
    names += ["4x2 (cjpeg)", "1x4 (cjpeg)", "4x1 (cjpeg)"]
    assert_same(reference, blobs, names, seed=2, crops=8)


def test_the_decoder_fuzz_corpus(reference):
    from test_native_fuzz import build_corpus

    corpus = build_corpus(full=False)
    assert len(corpus.blobs) > 1000
    assert_same(reference, corpus.blobs, [str(i) for i in range(len(corpus.blobs))], seed=3, crops=1, size=24)


@pytest.mark.parametrize("mcus", [2, 4, 8])
def test_damage_in_the_entropy_coded_data_of_seekable_jpegs(reference, mcus):
    """Bit flips, byte sets, cut files, markers dropped, swapped or renumbered, and stray bytes before a
    marker, where the patch acts: inside the restart segments of images with intervals of 2, 4 and 8 MCUs."""
    rng = np.random.default_rng(mcus)
    good = [with_interval(photo(w, h, seed=mcus + w), mcus) for w, h in [(400, 300), (256, 512)]]
    blobs, names = [], []
    for n, data in enumerate(good):
        start = data.index(b"\xff\xda") + 2 + int.from_bytes(data[data.index(b"\xff\xda") + 2:][:2], "big")
        markers = [i for i in range(start, len(data) - 2) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
        for k in range(175):
            damaged = bytearray(data)
            at = int(rng.integers(start, len(data) - 2))
            kind = k % 7
            if kind == 0:
                damaged[at] ^= 1 << int(rng.integers(8))
            elif kind == 1:
                damaged[at] = int(rng.integers(256))
            elif kind == 2:
                damaged = damaged[:at]
            elif kind == 3:  # a marker dropped
                m = markers[int(rng.integers(len(markers)))]
                del damaged[m:m + 2]
            elif kind == 4:  # two markers swapped
                a, b = sorted(int(m) for m in rng.choice(markers, 2, replace=False))
                damaged[a + 1], damaged[b + 1] = damaged[b + 1], damaged[a + 1]
            elif kind == 5:  # a marker renumbered
                m = markers[int(rng.integers(len(markers)))]
                damaged[m + 1] = 0xD0 + (damaged[m + 1] - 0xD0 + 1 + int(rng.integers(7))) % 8
            else:  # bytes that belong to no MCU between a segment's data and its marker (libjpeg warns of them)
                m = markers[int(rng.integers(len(markers)))]
                damaged[m:m] = bytes(int(b) for b in rng.integers(0, 0xFF, int(rng.integers(1, 6))))
            blobs.append(bytes(damaged))
            names.append(f"image {n}, damage {kind} at {at}")
    assert_same(reference, blobs, names, seed=4, crops=2)


def test_many_random_crops(reference):
    blobs = [with_restarts(jpeg(w, h, seed=s), mcus, MAX_PIXELS)[0]
             for s, (w, h, mcus) in enumerate([(500, 375, 2), (480, 640, 4), (1000, 750, 8), (320, 240, 2)])]
    assert_same(reference, blobs * 25, [f"image {i % 4}" for i in range(100)], seed=5, crops=20, size=64)


def test_the_benchmark_times_both_decoders_at_the_datasets_interval(reference, prepared, capsys):
    """python -m train.bench.huffman (BENCHMARKS.md's rows of #39), which no test had run: a row for the dataset's
    restart interval, each crop kind's patched and release medians over the rounds and their ratio."""
    import json
    import statistics

    from shards.manifest import read_complete_manifest
    from train.bench.huffman import main

    assert main(["--data", str(prepared), "--images", "6", "--rounds", "3", "--image-size", "64"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["images"] == 6 and result["rounds"] == 3
    [(interval, row)] = result["intervals"].items()
    assert interval == str(read_complete_manifest(prepared).options["restart_mcus"]) and row["bytes"] > 0
    for label in ["train", "train huffman", "val", "val huffman"]:
        timed = row[label]
        assert timed["patched_ms"] > 0 and timed["release_ms"] > 0 and len(timed["speedups"]) == 3
        assert timed["speedup"] == pytest.approx(statistics.median(timed["speedups"]), abs=1e-3)
