"""The crop-region decoder (train/_jpegcrop.c) against PIL's full decode and resize, on every kind
of JPEG; its refusals; many threads at once; the shard index."""

from __future__ import annotations

import io
import platform
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import webdataset as wds
from PIL import Image

from jpegs import as_images, jpeg
from shards.manifest import read_manifest
from train import decoder
from train.decoder import decode_crops, image_sizes, pil_decode_crop, tar_index

KINDS = {
    "baseline 4:2:0": {}, "4:2:2": {"subsampling": 1}, "4:4:4": {"subsampling": 0},
    "progressive": {"progressive": True}, "grayscale": {"mode": "L"}, "restart markers": {"restart": 3},
    "EXIF": {"exif": True}, "odd size": {"width": 101, "height": 67},
    "large (decoded at 1/2 to 1/8 scale)": {"width": 1201, "height": 901},
}


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


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [96, 224])
def test_region_decode_matches_full_decode_crop_and_resize(kind, size):
    data = jpeg(**KINDS[kind])
    width, height = Image.open(io.BytesIO(data)).size
    boxes = boxes_of(width, height)
    flips = np.arange(len(boxes)) % 2 == 1
    out = np.zeros((len(boxes), size, size, 3), np.uint8)
    status = decode_crops(as_images([data] * len(boxes)), boxes, flips, out, 0)
    assert (status == decoder.DECODED).all()
    for i, box in enumerate(boxes):
        reference = pil_decode_crop(data, tuple(box.tolist()), bool(flips[i]), size).astype(int)
        diff = np.abs(out[i].astype(int) - reference)
        assert diff.max() <= 2 and diff.mean() < 0.1, (i, diff.max(), diff.mean())


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


def cmyk_jpeg() -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg())).convert("CMYK").save(out, "JPEG")
    return out.getvalue()


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
    blobs = [cmyk_jpeg(), png(), good[: len(good) // 2], damaged(good), b"\xff\xd8 garbage", good]
    out = np.zeros((len(blobs), 32, 32, 3), np.uint8)
    status = decode_crops(as_images(blobs), np.array([[0, 0, 333, 217]] * len(blobs), np.float32),
                          np.zeros(len(blobs), bool), out, 0)
    assert status.tolist() == [decoder.REFUSED, decoder.NOT_JPEG, decoder.CORRUPT, decoder.CORRUPT, decoder.CORRUPT,
                               decoder.DECODED]


def bogus_markers(data: bytes) -> bytes:
    """The first 200 bytes of entropy-coded data overwritten with reserved markers (0xFF05)."""
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    return data[:start + 8] + b"\xff\x05" * 100 + data[start + 208:]


def test_the_marker_check_finds_markers_in_entropy_data_and_files_cut_short():
    """--decode gpu's check (its decoders may decode through such damage). An early EOI is
    structurally whole and passes: only a decode finds it (or prepare --verify)."""
    good = [jpeg(), jpeg(progressive=True), jpeg(restart=2), jpeg(mode="L"), jpeg(exif=True), jpeg(subsampling=0),
            cmyk_jpeg(), jpeg() + b"trailing bytes after EOI"]
    bad = [bogus_markers(good[0]), bogus_markers(good[1]), good[1][: len(good[1]) * 2 // 3], good[2][:-2]]
    images = as_images(good + bad + [damaged(good[0])])
    _, plain = image_sizes(images)
    _, checked = image_sizes(images, check_markers=True)
    assert plain.tolist() == [decoder.DECODED] * 13
    assert checked.tolist() == [decoder.DECODED] * 8 + [decoder.CORRUPT] * 4 + [decoder.DECODED]


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="SSE2 and AVX2 are x86's")
def test_the_sse2_and_avx2_resizers_give_the_same_bytes():
    from train import _jpegcrop

    blobs = [jpeg(seed=s, width=300 + 7 * s, height=200 + 3 * s) for s in range(6)]
    boxes = np.array([[s, 2 * s, 200 + s, 150 + s] for s in range(6)], np.float32)
    outs = {}
    for simd in ("SSE2", "AVX2"):
        try:
            _jpegcrop.use_simd(simd)
        except ValueError:
            pytest.skip(f"{simd} is not available on this CPU")
        outs[simd] = np.zeros((6, 61, 61, 3), np.uint8)  # an odd size: the vector loops' tails too
        decode_crops(as_images(blobs), boxes, np.arange(6) % 2 == 0, outs[simd], 0)
    _jpegcrop.use_simd(None)
    assert np.array_equal(outs["SSE2"], outs["AVX2"])


def test_many_threads_at_once_decode_the_same_pixels():
    blobs = [jpeg(seed=s % 5, width=250 + s, height=200) for s in range(64)]
    images = as_images(blobs)
    boxes = np.array([[s % 30, s % 20, 200, 190] for s in range(64)], np.float32)
    flips = np.arange(64) % 3 == 0
    alone = np.zeros((64, 48, 48, 3), np.uint8)
    decode_crops(images, boxes, flips, alone, 0)
    together = np.zeros_like(alone)
    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            list(pool.map(lambda i: decode_crops(images[i:i + 4], boxes[i:i + 4], flips[i:i + 4], together, i),
                          range(0, 64, 4)))
            assert np.array_equal(together, alone)


def test_the_shard_index_finds_every_sample_as_webdataset_reads_it(prepared):
    shard = prepared / read_manifest(prepared).splits["train"].shards[0].name
    data = shard.read_bytes()
    rows = tar_index(data)
    samples = list(wds.WebDataset(str(shard), shardshuffle=False))
    assert len(rows) == len(samples)
    for (key_at, key_len, jpg_at, jpg_len, cls_at, cls_len), sample in zip(rows.tolist(), samples):
        assert data[key_at:key_at + key_len].decode() == sample["__key__"]
        assert data[jpg_at:jpg_at + jpg_len] == sample["jpg"] and data[cls_at:cls_at + cls_len] == sample["cls"]


def test_a_damaged_header_is_reported_with_its_offset(prepared):
    data = bytearray((prepared / read_manifest(prepared).splits["train"].shards[0].name).read_bytes())
    second = int(tar_index(bytes(data))[1, 0])  # the second sample's first header
    data[second + 10] ^= 0xFF
    with pytest.raises(ValueError, match=f"a tar header fails its checksum \\(at byte {second}\\)"):
        tar_index(bytes(data))
    with pytest.raises(ValueError, match="without the end-of-archive blocks"):
        tar_index(bytes(data[:second]))


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
               "import train.data\n")
    result = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0
    assert "the native decoder train._jpegcrop is not built" in result.stderr and "jobs/install.sh" in result.stderr
