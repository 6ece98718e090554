"""Seekable shards: prepare's lossless rewrite with restart markers (prepare/native/restarts.c), the
decoder's seek through them (train/native/seek.c), and the loader over seekable shards. Asserted:
the rewrite keeps every pixel of every JPEG kind prepare keeps; a seek decodes exactly the pixels
of the whole image's decode, at every box, edge, scale and flip; batches from seekable shards equal
those from plain shards for any thread count. Hostile restart markers are in test_native_fuzz.py."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, config, run_module
from jpegs import (as_images, broken_grids, cjpeg, hostile_restarts, jpeg, many_scans, photo, restart_intervals,
                   restart_markers, segments, with_intervals, with_size)
from prepare import _restarts
from prepare.builder import prepare
from prepare.images import MCU_SIZE, prepare_image, restart_interval, with_restarts
from shards.limits import MAX_PIXELS
from train import ImageNetLoader
from train.decoder import CORRUPT, DECODED, decode_crops

DRI, SOF0, SOF2 = 0xDD, 0xC0, 0xC2


def kinds() -> dict[str, bytes]:
    """Every kind of JPEG prepare keeps (and a few it converts, which the rewrite takes too)."""
    picture = photo(250, 170, seed=5)
    return {"baseline 4:2:0": jpeg(250, 170), "4:2:2": jpeg(250, 170, subsampling=1),
            "4:4:4": jpeg(250, 170, subsampling=0), "progressive": jpeg(250, 170, progressive=True),
            "grey": jpeg(250, 170, mode="L"), "odd size": jpeg(333, 217), "one pixel": jpeg(1, 1),
            "one MCU row": jpeg(250, 9), "EXIF": jpeg(250, 170, exif=True), "optimised": jpeg(250, 170, optimize=True),
            "arithmetic": cjpeg(picture, "-arithmetic"), "4x2 sampling": cjpeg(picture, "-sample", "4x2,1x1,1x1"),
            "markers that straddle rows": jpeg(250, 170, restart=5), "prime MCUs per row": jpeg(16 * 13, 40),
            "a last MCU column 4 px wide": jpeg(484, 300)}


def marker_payloads(data: bytes) -> dict[int, list[bytes]]:
    """Each marker's segments' bytes, by marker, up to the first scan."""
    found: dict[int, list[bytes]] = {}
    for marker, start, end in segments(data):
        found.setdefault(marker, []).append(data[start:end])
    return found


def declared_interval(data: bytes) -> int:
    (payload,) = marker_payloads(data)[DRI]
    return int.from_bytes(payload[-2:], "big")


def mcus_per_row(data: bytes) -> int:
    image = Image.open(io.BytesIO(data))
    layers = image.layer if image.mode != "L" else [("", 1, 1, 0)]
    widest = max(h for _, h, _, _ in layers) if len(layers) > 1 else 1
    return -(-image.size[0] // (8 * widest))


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


@pytest.mark.parametrize("mcus, most, expected", [(32, 2, 2), (32, 1, 1), (31, 2, 1), (21, 4, 3), (1, 4, 1),
                                                  (12, 5, 4), (7, 65535, 7), (64, 65535, 64)])
def test_the_interval_is_the_largest_divisor_of_a_rows_mcus_up_to_the_most(mcus, most, expected):
    assert restart_interval(mcus, most) == expected


def test_the_interval_rule_the_rewrite_and_the_re_encode_share_against_its_definition():
    """restart_interval is the native rule (shards/native/jpeg_rules.h) that add_restarts writes
    with: against the definition, spelled out, at every small row and limit; arguments outside
    its range are a ValueError, as the rewrite's are."""
    for mcus in range(1, 260):
        for most in range(1, 70):
            assert restart_interval(mcus, most) == max(n for n in range(1, min(most, mcus) + 1) if mcus % n == 0)
    assert restart_interval(4096, 65535) == 4096 and restart_interval(65521, 65520) == 1  # (a prime)
    for mcus, most in [(0, 2), (-3, 2), (32, 0), (32, 65536), (1 << 32, 2)]:
        with pytest.raises(ValueError, match="mcus_per_row must be 1 to"):
            restart_interval(mcus, most)


@pytest.mark.parametrize("kind", list(kinds()))
@pytest.mark.parametrize("most", [1, 2, 4])
def test_the_rewrite_keeps_every_pixel_and_makes_a_baseline_grid_of_intervals(kind, most):
    original = kinds()[kind]
    rewritten, interval = with_restarts(original, most, MAX_PIXELS)
    assert np.array_equal(pixels(rewritten), pixels(original))
    assert declared_interval(rewritten) == interval == restart_interval(mcus_per_row(rewritten), most)
    found = marker_payloads(rewritten)
    assert SOF0 in found and SOF2 not in found  # baseline Huffman: the only kind that seeks
    assert Image.open(io.BytesIO(rewritten)).info.get("exif") == Image.open(io.BytesIO(original)).info.get("exif")


def test_a_jpeg_the_rewrite_cannot_take_cleanly_is_left_as_it_is():
    good = jpeg(250, 170)
    assert with_restarts(good[:len(good) // 2], 2, MAX_PIXELS) is None  # truncated: libjpeg warns
    assert with_restarts(b"not a jpeg", 2, MAX_PIXELS) is None
    assert with_restarts(good, 2, 250 * 170 - 1) is None  # over the pixel limit
    # progressive, its scans stopping short of some coefficients: decoders estimate those (block
    # smoothing), a rewrite would store zeros
    assert with_restarts(many_scans(photo(64, 48), 10), 2, MAX_PIXELS) is None
    assert prepare_image(many_scans(photo(64, 48), 10)).data is None
    # arithmetic-coded data that runs out (it claims more pixels than it holds) leaves coefficients
    # that 8-bit baseline Huffman tables cannot code
    assert with_restarts(with_size(cjpeg(photo(96, 72), "-arithmetic"), 1000, 1000), 2, MAX_PIXELS) is None
    with pytest.raises(ValueError, match="most must be 1 to 65535"):
        with_restarts(good, 0, MAX_PIXELS)


def test_prepare_stores_good_jpegs_rewritten_and_re_encodes_with_markers_at_no_extra_pass():
    kept = prepare_image(jpeg(250, 170))
    assert kept.restart_interval == 2 and np.array_equal(pixels(kept.data), pixels(jpeg(250, 170)))
    shrunk = prepare_image(jpeg(1000, 700), max_side=500)  # 500 px wide: 32 MCUs of 16 px
    assert (shrunk.width, shrunk.height) == (500, 350)
    assert declared_interval(shrunk.data) == shrunk.restart_interval == restart_interval(-(-500 // MCU_SIZE), 2) == 2
    converted = prepare_image(jpeg(250, 170, mode="L"))  # grey: re-encoded as RGB, with markers
    assert converted.note == "L JPEG -> RGB JPEG" and declared_interval(converted.data) == converted.restart_interval
    assert prepare_image(jpeg(250, 170), restart_mcus=0).data is None


def boxes(width: int, height: int, count: int, seed: int) -> np.ndarray:
    """Random boxes, and boxes at every edge and corner, tiny and whole."""
    rng = np.random.default_rng(seed)
    w, h = rng.uniform(1, width, count), rng.uniform(1, height, count)
    left, top = rng.uniform(0, 1, count) * (width - w), rng.uniform(0, 1, count) * (height - h)
    random = np.stack([left, top, left + w, top + h], axis=1)
    edges = [[0, 0, width, height], [width - 3, height - 3, width, height], [0, 0, 2, 2], [width / 2, 0, width, 5],
             [0, height / 2, 7, height], [width - 40, height - 30, width, height], [0.5, 0.5, width - 0.5, height - 0.5],
             [width - 1.5, height / 2, width, height / 2 + 1.5]]
    return np.concatenate([random, np.clip(edges, 0, [width, height, width, height])]).astype(np.float32)


@pytest.mark.parametrize("kind", ["baseline 4:2:0", "4:2:2", "4:4:4", "progressive", "grey", "odd size",
                                  "one MCU row", "4x2 sampling", "prime MCUs per row", "a last MCU column 4 px wide"])
@pytest.mark.parametrize("most", [1, 2, 4])
def test_a_seek_decodes_exactly_the_pixels_of_the_whole_images_decode(kind, most):
    original = kinds()[kind]
    rewritten, _ = with_restarts(original, most, MAX_PIXELS)
    width, height = Image.open(io.BytesIO(original)).size
    crops = boxes(width, height, 60, seed=most)
    flips = np.arange(len(crops)) % 2 == 1
    for size in (8, 24, 112):
        seeked = np.zeros(len(crops), np.bool_)
        sought, whole = (np.zeros((len(crops), size, size, 3), np.uint8) for _ in range(2))
        status = decode_crops(as_images([rewritten] * len(crops)), crops, flips, sought, 0, seeked=seeked)
        assert (status == DECODED).all()
        assert (decode_crops(as_images([original] * len(crops)), crops, flips, whole, 0, seek=False) == DECODED).all()
        differ = [i for i in range(len(crops)) if not np.array_equal(sought[i], whole[i])]
        assert not differ, (size, crops[differ[:3]])
        assert seeked[:60].sum() > 30 or height <= 16  # most random boxes seek (one MCU row: nothing to skip)
        assert not seeked[60]  # the whole image: nothing to gain
    # a window whose chroma would be 2 samples wide: libjpeg-turbo would upsample it plainly, not
    # smoothly as in the whole image, so it does not seek
    if kind == "a last MCU column 4 px wide" and most == 1:
        assert not seeked[-1]


def test_without_seek_or_without_a_grid_the_usual_path_decodes():
    straddling = kinds()["markers that straddle rows"]  # intervals of 5 MCUs, 16 a row: no grid
    crops = np.array([[10, 10, 60, 60]] * 2, np.float32)
    out, seeked = np.zeros((2, 24, 24, 3), np.uint8), np.ones(2, np.bool_)
    assert (decode_crops(as_images([straddling, jpeg(250, 170)]), crops, np.zeros(2, bool), out, 0, seeked=seeked)
            == DECODED).all()
    assert not seeked.any()
    rewritten, _ = with_restarts(jpeg(250, 170), 2, MAX_PIXELS)
    decode_crops(as_images([rewritten] * 2), crops, np.zeros(2, bool), out, 0, seek=False, seeked=seeked)
    assert not seeked.any()


@pytest.mark.parametrize("damage", list(hostile_restarts(with_restarts(jpeg(96, 72), 1, MAX_PIXELS)[0])))
def test_a_grid_of_intervals_that_lies_is_damage_or_decodes_as_usual(damage):
    """Markers swapped, dropped, added, replaced, intervals that lie: CORRUPT, whether the box would
    seek (the bottom right, after the damage; the damaged interval's own) or covers the whole image.
    Megabytes of extraneous bytes (libjpeg reads past them) or of header decode; a window holding
    them does not seek: its small JPEG would pass the memory bound."""
    data = hostile_restarts(with_restarts(jpeg(96, 72), 1, MAX_PIXELS)[0])[damage]
    crops = np.array([[56, 40, 96, 72], [16, 16, 40, 40], [0, 0, 96, 72]], np.float32)  # interval 7: x, y 16-32
    out, seeked = np.zeros((3, 24, 24, 3), np.uint8), np.zeros(3, np.bool_)
    status = decode_crops(as_images([data] * 3), crops, np.zeros(3, bool), out, 0, seeked=seeked)
    if damage in ("2 MiB of data between two markers", "a megabyte of header"):
        assert (status == DECODED).all() and not seeked[1:].any()
    else:
        assert (status == CORRUPT).all() and not seeked[2]


# Seekable JPEGs (intervals of 2 MCUs) and an interval in a middle row to damage: 4:2:0, 16 x 16 px
# MCUs, 8 intervals a row, 12 rows, interval 41 at x 32-64, y 80-96; grey, 8 x 8 px MCUs, 6 intervals
# a row, 9 rows, interval 25 at x 16-32, y 32-40.
GRIDS = {"4:2:0": (lambda: jpeg(256, 192), 41), "grey": (lambda: jpeg(96, 72, mode="L"), 25)}
# Boxes as shares of the image, each of which seeks in the intact file: above the damage (the first
# rows), the middle rows, over the damage, below it, the last rows short of the last column.
GRID_BOXES = {"first rows": (0.05, 0.0, 0.45, 0.2), "top left corner": (0.0, 0.0, 0.15, 0.15),
              "middle rows, left": (0.0, 0.25, 0.25, 0.45), "over the damage": (0.1, 0.35, 0.5, 0.6),
              "below the damage": (0.3, 0.6, 0.7, 0.85), "last rows, left": (0.0, 0.8, 0.4, 1.0)}


@pytest.mark.parametrize("damage", list(broken_grids(with_restarts(jpeg(96, 72, mode="L"), 2, MAX_PIXELS)[0], 25)))
@pytest.mark.parametrize("grid", list(GRIDS))
def test_a_grid_that_is_not_the_one_its_header_promises_decodes_as_the_whole_image_does(grid, damage):
    """An interval emptied, lost or added (the later markers renumbered: their order still looks
    right), two markers swapped, a DRI that halves the interval: the seek checks the whole scan's
    markers, so such a file never seeks, whichever intervals the crop covers, and each crop is the
    whole image path's: its pixels, or its status. (libjpeg decodes some of these without a
    warning, into shifted MCUs; a seek would miss damage outside its window.)"""
    make, at = GRIDS[grid]
    seekable, _ = with_restarts(make(), 2, MAX_PIXELS)
    data = broken_grids(seekable, at)[damage]
    width, height = Image.open(io.BytesIO(seekable)).size
    names = [name for name in GRID_BOXES for _ in range(2)]  # each box unflipped and flipped
    crops = np.array([GRID_BOXES[name] for name in names], np.float32) * [width, height, width, height]
    flips, n = np.arange(len(names)) % 2 == 1, len(names)
    for size in (8, 32):
        sought, usual = np.zeros((n, size, size, 3), np.uint8), np.zeros((n, size, size, 3), np.uint8)
        seeked = np.zeros(n, np.bool_)
        assert (decode_crops(as_images([seekable] * n), crops, flips, sought, 0, seeked=seeked) == DECODED).all()
        assert seeked.all()
        status = decode_crops(as_images([data] * n), crops, flips, sought, 0, seeked=seeked)
        expected = decode_crops(as_images([data] * n), crops, flips, usual, 0, seek=False)
        wrong = {names[i]: (int(status[i]), int(expected[i]), bool(seeked[i])) for i in range(n)
                 if status[i] != expected[i] or status[i] == DECODED and (seeked[i] or
                                                                           not np.array_equal(sought[i], usual[i]))}
        assert not wrong, f"{size} px: box: (status, whole image path's status, seeked) {wrong}"


def test_what_libjpeg_reads_alike_still_seeks():
    """Fill bytes before every marker (libjpeg skips them) and bytes after EOI (it never reads them)
    leave the grid whole: the crops still seek, with the whole image path's pixels."""
    seekable, _ = with_restarts(jpeg(256, 192), 2, MAX_PIXELS)
    header, intervals = restart_intervals(seekable)
    filled = with_intervals(header, [interval + b"\xff\xff" for interval in intervals])
    crops = np.array(list(GRID_BOXES.values()), np.float32) * [256, 192, 256, 192]
    n = len(crops)
    flips, usual = np.zeros(n, bool), np.zeros((n, 32, 32, 3), np.uint8)
    assert (decode_crops(as_images([seekable] * n), crops, flips, usual, 0, seek=False) == DECODED).all()
    for data in (filled, seekable + b"\x00\xff\xd8 trailing bytes \xff"):
        sought, seeked = np.zeros((n, 32, 32, 3), np.uint8), np.zeros(n, np.bool_)
        assert (decode_crops(as_images([data] * n), crops, flips, sought, 0, seeked=seeked) == DECODED).all()
        assert seeked.all() and np.array_equal(sought, usual)


def test_a_header_libjpeg_reads_is_walked_as_libjpeg_walks_it():
    """TEM after SOI (parameterless), then an APP1 whose length lands a naive walk on an FF C0 pair
    of quantisation values: the window's size must be written into the frame header libjpeg read,
    never into the tables. The seek gives the whole decode's pixels (and falls back if its header
    were not the frame libjpeg read)."""
    q = [0xC0] * 64
    q[0] = 0xFF  # the luma table's bytes begin FF C0 C0 ...
    out = io.BytesIO()
    photo(256, 256).save(out, "JPEG", qtables=[q, [17] * 64], subsampling=2)
    base, _ = with_restarts(out.getvalue(), 1, MAX_PIXELS)
    pair = base.index(b"\xff\xc0", next(start for marker, start, _ in segments(base) if marker == 0xDB))
    padding = 65509 - pair - 4  # after TEM and this APP1, the pair sits where a walk from SOI would jump
    data = base[:2] + b"\xff\x01" + b"\xff\xe1" + padding.to_bytes(2, "big") + bytes(padding - 2) + base[2:]
    assert data[65509:65511] == b"\xff\xc0"
    crops = np.array([[100, 100, 140, 140], [180, 30, 250, 90], [0, 100, 256, 160], [0, 0, 256, 256]], np.float32)
    sought, whole = np.zeros((4, 32, 32, 3), np.uint8), np.zeros((4, 32, 32, 3), np.uint8)
    seeked = np.zeros(4, np.bool_)
    assert (decode_crops(as_images([data] * 4), crops, np.zeros(4, bool), sought, 0, seeked=seeked) == DECODED).all()
    decode_crops(as_images([base] * 4), crops, np.zeros(4, bool), whole, 0, seek=False)
    assert np.array_equal(sought, whole) and seeked[:3].all()


def test_an_end_marker_before_the_last_interval_is_damage_for_a_seek_too():
    """A file cut in an MCU row with EOI appended: the window's intervals all lie before the cut,
    but the grid the header promises does not: the seek does not take it, and the status is the
    usual path's."""
    rewritten, _ = with_restarts(jpeg(256, 256), 1, MAX_PIXELS)  # 16 intervals a row, 16 px each
    cut = rewritten[:restart_markers(rewritten)[16 * 9 + 6]] + b"\xff\xd9"  # after interval 150
    crop = np.array([[30, 120, 100, 150]], np.float32)  # columns 1-6, rows 7-9
    out, seeked = np.zeros((2, 16, 16, 3), np.uint8), np.zeros(1, np.bool_)
    sought = decode_crops(as_images([cut]), crop, np.zeros(1, bool), out, 0, seeked=seeked)
    usual = decode_crops(as_images([cut]), crop, np.zeros(1, bool), out, 1, seek=False)
    assert sought == usual == CORRUPT and not seeked[0]


@pytest.mark.slow
def test_out_of_memory_in_the_rewrite_is_a_status_never_a_crash(tmp_path):
    """Under address-space limits from tight to ample, the rewrite of a large noisy JPEG fails in
    libjpeg's allocations or in the output's growth: OUT_OF_MEMORY, its buffers freed once
    (jpeg_mem_dest would have left a freed pointer behind: a double free), or it succeeds."""
    script = tmp_path / "oom.py"
    script.write_text(
        "import io, resource, sys\n"
        "import numpy as np\n"
        "from PIL import Image\n"
        "from prepare import _restarts\n"
        "noise = np.random.default_rng(0).integers(0, 256, (3072, 3072, 3), np.uint8)\n"
        "out = io.BytesIO(); Image.fromarray(noise).save(out, 'JPEG', quality=100, subsampling=0)\n"
        "data = out.getvalue(); del noise, out\n"
        "used = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
        "limit = used + int(sys.argv[1]) * 2**20\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "print(_restarts.add_restarts(data, 2, 1 << 26)[0])\n")
    statuses = []
    for mib in (60, 80, 100, 120, 300):
        result = subprocess.run([sys.executable, str(script), str(mib)], capture_output=True, text=True, cwd=ROOT,
                                timeout=120)
        assert result.returncode == 0, (mib, result.stderr[-2000:])
        statuses.append(int(result.stdout.strip()))
    assert set(statuses) <= {_restarts.OK, _restarts.OUT_OF_MEMORY} and _restarts.OUT_OF_MEMORY in statuses
    assert statuses[-1] == _restarts.OK


def batches_of(root, split: str, workers: int) -> tuple[list, int]:
    with ImageNetLoader(root, split, batch_size=8, image_size=48, device="cpu", workers=workers) as data:
        data.set_epoch(1)
        got = [(b.images.clone(), b.labels.clone(), b.key_hashes.clone()) for b in data.batches()]
        return got, data.counters.seeked_images


@pytest.fixture(scope="module")
def plain(sources, tmp_path_factory):
    """The official sample prepared without restart markers."""
    dest = tmp_path_factory.mktemp("plain") / "imagenet"
    prepare(config(sources["official"], dest, restart_mcus=0))
    return dest


@pytest.mark.parametrize("split", ["train", "val"])
def test_batches_from_seekable_shards_equal_those_from_plain_shards_for_any_thread_count(prepared, plain, split,
                                                                                         caplog):
    caplog.set_level(logging.INFO, logger="train")
    reference, none_seeked = batches_of(plain, split, workers=1)
    assert none_seeked == 0
    assert "no image of the first batch was decoded from its crop's restart intervals alone" in caplog.text
    for workers in (1, 3):
        got, seeked = batches_of(prepared, split, workers)
        assert len(got) == len(reference) and seeked > 0
        for (x, y, k), (rx, ry, rk) in zip(got, reference):
            assert torch.equal(x, rx) and torch.equal(y, ry) and torch.equal(k, rk)
    assert "images of the first batch decoded from only the restart intervals their crops cover" in caplog.text


@pytest.mark.slow
def test_the_seek_benchmark_compares_a_seekable_dataset_with_its_plain_twin(plain, prepared, sources, tmp_path):
    result = run_module("train.bench.seek", "--data", prepared, "--plain", plain, "--images", 24, "--image-size", 32)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[-1])
    assert record["restart_mcus"] == 2 and sum(record["band_images"].values()) == 24
    seekable = record["seekable"]
    assert seekable["seeked"] > 0 and -0.1 < seekable["bytes"] < 0.2 and seekable["train_ms"] > 0
    assert seekable["val_ms"] > 0 and set(seekable["bands_ms"]) == set(record["plain"]["bands_ms"])
    refusals = {"holds seekable JPEGs": ("--data", prepared, "--plain", prepared),
                "holds no seekable JPEG": ("--data", plain, "--plain", plain)}
    prepare(config(sources["official"], tmp_path / "seed1", seed=1))
    refusals["other sources or with other seeds"] = ("--data", tmp_path / "seed1", "--plain", plain)
    for message, arguments in refusals.items():
        refused = run_module("train.bench.seek", *arguments)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
