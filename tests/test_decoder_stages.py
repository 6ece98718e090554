"""The crop decoder's profile stages (decode_crops' stop_after, for train.bench.stages) and its AVX-512
horizontal pass: a stage does the work of those before it and no more, whatever the bytes; the
AVX-512 pass (four output pixels a register, where no output has more than 4 taps) gives the bytes
of plain C on crops between 1x and 2x the output, odd sizes, flips, rows and columns at the edges,
and images a pixel or a few wide (it reads up to 3 pixels past a last tap)."""

from __future__ import annotations

import numpy as np
import pytest

from jpegs import as_images, broken_grids, hostile_restarts, jpeg, many_scans, photo
from prepare.images import RESTART_MCUS, with_restarts
from shards.limits import MAX_PIXELS
from train import decoder
from train.decoder import PROFILE_STAGES, decode_crops


def seekable(width: int = 333, height: int = 217, seed: int = 0) -> bytes:
    """prepare's rewrite: a restart marker every RESTART_MCUS MCUs."""
    return with_restarts(jpeg(width, height, seed=seed), RESTART_MCUS, MAX_PIXELS)[0]


def test_the_stages_are_named_in_order_and_all_is_the_whole_crop():
    assert PROFILE_STAGES == ("header", "filters", "seek", "entropy", "pixels", "rows", "all")
    blobs = [seekable(), jpeg(), jpeg(progressive=True)]
    boxes = np.array([[20, 10, 250, 200]] * 3, np.float32)
    whole, staged = (np.zeros((3, 64, 64, 3), np.uint8) for _ in range(2))
    decode_crops(as_images(blobs), boxes, np.array([0, 1, 0], bool), whole, 0)
    status = decode_crops(as_images(blobs), boxes, np.array([0, 1, 0], bool), staged, 0, stop_after="all")
    assert (status == decoder.DECODED).all() and np.array_equal(whole, staged)
    with pytest.raises(ValueError, match="stop_after"):
        decode_crops(as_images(blobs), boxes, np.zeros(3, bool), staged, 0, stop_after="idct")


@pytest.mark.parametrize("stop", PROFILE_STAGES)
def test_every_stage_takes_hostile_bytes(stop):
    """Damaged, cut short, lying grids, many scans: a status per image, never a crash."""
    good = seekable()
    cases = [good, good[: len(good) // 2], good[:300], jpeg(progressive=True), many_scans(photo(64, 48), 40),
             b"\xff\xd8\xff" + bytes(200), *broken_grids(good, 5).values(), *hostile_restarts(good).values()]
    cases = [c for c in cases if len(c) < 1 << 20]  # (hostile_restarts' 2 MiB between markers: slow, not needed)
    damaged = bytearray(good)
    damaged[len(good) // 2: len(good) // 2 + 64] = bytes(range(64))
    cases.append(bytes(damaged))
    boxes = np.array([[30, 20, 200, 180]] * len(cases), np.float32)
    out = np.zeros((len(cases), 48, 48, 3), np.uint8)
    status = decode_crops(as_images(cases), boxes, np.zeros(len(cases), bool), out, 0, stop_after=stop)
    assert status[0] == decoder.DECODED
    assert set(status.tolist()) <= {decoder.DECODED, decoder.CORRUPT, decoder.NOT_JPEG, decoder.TOO_LARGE}


def test_the_entropy_floor_decodes_no_pixels_and_less_than_the_rows():
    """'entropy' (the Huffman decode alone) leaves the slots as they were; where the crop sits high in
    a plain JPEG it decodes only the rows down to it."""
    blobs = [jpeg(900, 700, seed=s) for s in range(4)]
    out = np.full((4, 32, 32, 3), 7, np.uint8)
    boxes = np.array([[100, 10, 400, 250]] * 4, np.float32)
    status = decode_crops(as_images(blobs), boxes, np.zeros(4, bool), out, 0, stop_after="entropy")
    assert (status == decoder.DECODED).all() and (out == 7).all()


def crops_between_1x_and_2x(width: int, height: int, size: int, count: int, seed: int) -> np.ndarray:
    """Boxes whose sides are 1x to 1.95x `size` (or the image's, where smaller), anywhere in the image."""
    rng = np.random.default_rng(seed)
    sides = rng.uniform(1.0, 1.95, (count, 2)) * size
    sides = np.minimum(sides, [width, height])
    left = rng.uniform(0, 1, count) * (width - sides[:, 0])
    top = rng.uniform(0, 1, count) * (height - sides[:, 1])
    return np.stack([left, top, left + sides[:, 0], top + sides[:, 1]], 1).astype(np.float32)


@pytest.mark.skipif("AVX512" not in decoder.SIMD, reason="this CPU has no AVX-512")
@pytest.mark.parametrize("interpolation", decoder.INTERPOLATIONS)
@pytest.mark.parametrize("size", [1, 5, 61, 64, 97])
def test_the_avx512_pass_gives_the_bytes_of_plain_c(size, interpolation):
    """Output sides that are and are not multiples of 4 (the last out % 4 pixels go to the AVX2 code),
    boxes touching every edge, images 1 to 3 pixels wide (the pass reads past the last tap)."""
    blobs = [jpeg(300 + 7 * s, 200 + 3 * s, seed=s) for s in range(4)] + [seekable(seed=5)]
    boxes = np.concatenate([crops_between_1x_and_2x(300, 200, size, 4, seed=size),
                            [[0, 0, min(300, 1.5 * size), min(200, 1.3 * size)]]]).astype(np.float32)
    blobs += [jpeg(w, 40, seed=w) for w in (1, 2, 3)]
    boxes = np.concatenate([boxes, [[0, 0, 1, 40], [0, 5, 2, 30], [1, 0, 3, 40]]]).astype(np.float32)
    flips = np.arange(len(blobs)) % 2 == 1
    outs = {}
    for simd in ("C", "AVX512"):
        outs[simd] = np.zeros((len(blobs), size, size, 3), np.uint8)
        status = decode_crops(as_images(blobs), boxes, flips, outs[simd], 0, simd=simd, interpolation=interpolation)
        assert (status == decoder.DECODED).all()
    assert np.array_equal(outs["AVX512"], outs["C"])


def test_the_cpu_profile_prints_every_row_the_floor_and_the_ratio(prepared, capsys):
    """python -m train.bench.stages without CUDA, on a few images of seekable shards, one round."""
    from train.bench.cpu_stages import DECODER_ROWS, profile

    assert profile(prepared, None, 24, 1, False) == 0
    out = capsys.readouterr().out
    for row in [row for row, _, _ in DECODER_ROWS] + ["floor: Huffman decode alone", "full decode / the crop"]:
        assert row in out, row
