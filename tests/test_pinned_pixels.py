"""The pixels are the pinned libjpeg-turbo's, on every machine and every install.

The native modules link the vendored libjpeg-turbo (third_party/libjpeg-turbo) statically, never the
system's; pillow-simd, from jobs/install.sh or the wheels, is built on the same archive. The hashes
below pin what they make of a fixed set of JPEGs (tests/data/pinned: ImageNet-like sizes, 4:2:0, 4:2:2,
4:4:4, greyscale, progressive, and restart markers as prepare writes them). They hold on any x86-64
or aarch64 CPU, with or without SIMD: a hash that changes means the decoder's output changed, which
only a deliberate change of the pinned version (third_party/libjpeg-turbo/README.md) may do, and
never a patch of ours to its speed (its output must equal the unpatched library's).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prepare import _restarts
from prepare.images import rewrite_with_restarts
from shards.limits import MAX_PIXELS
from train import _jpegcrop
from train.decoder import INTERPOLATIONS, SIMD, Images, decode_crops, image_sizes

ROOT = Path(__file__).resolve().parents[1]
PINNED = sorted((ROOT / "tests" / "data" / "pinned").glob("*.jpg"))
VENDORED = ROOT / "third_party" / "libjpeg-turbo"

# sha256 of every crop below, the set's images in name order; then of the lossless rewrites with restart
# markers (prepare's); then of PIL's decodes and one encode (pillow-simd on the pinned library).
CROPS = "ab732c73c3ee439d2441e1e5feca884d7d847cd5f3f15d4f5874aa23adc913c7"
REWRITES = "f4b3a7cfecb9f29b0233e34b75ae06178bb747421dccecc2a72fa9bf13efb2b3"
PIL_PIXELS = "b2aad87abb6fc840867aaf36191275515740e5a5568320d28f1cdc24b16a9f1b"


def pinned_version() -> str:
    """The version third_party/libjpeg-turbo/README.md names (its first line says 'libjpeg-turbo X.Y.Z')."""
    return re.search(r"libjpeg-turbo (\d+\.\d+\.\d+)", (VENDORED / "README.md").read_text()).group(1)


def crop_boxes(width: int, height: int, count: int, seed: int) -> np.ndarray:
    """`count` boxes (x0, y0, x1, y1) in pixels: RandomResizedCrop-like, some small, some whole."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.08, 1.0, count) * width
    h = np.clip(w * rng.uniform(0.75, 1.33, count), 8, height)
    x0, y0 = rng.uniform(0, 1, count) * (width - w), rng.uniform(0, 1, count) * (height - h)
    boxes = np.stack([x0, y0, x0 + w, y0 + h], axis=1)
    boxes[0] = (0, 0, width, height)
    return boxes.astype(np.float32)


def crops_digest(simd: str | None) -> str:
    digest = hashlib.sha256()
    for n, path in enumerate(PINNED):
        data = path.read_bytes()
        images = Images.from_blobs([data] * 12)
        dims, status = image_sizes(images)
        assert (status == 0).all()
        boxes = crop_boxes(int(dims[0, 0]), int(dims[0, 1]), 12, seed=n)
        flips = np.arange(12) % 2 == 1
        for interpolation in INTERPOLATIONS:
            for dct_scaling in (False, True):
                out = np.zeros((12, 96, 96, 3), np.uint8)
                status = decode_crops(images, boxes, flips, out, 0, interpolation=interpolation,
                                      dct_scaling=dct_scaling, simd=simd)
                assert (status == 0).all(), (path.name, interpolation, status)
                digest.update(out.tobytes())
    return digest.hexdigest()


def test_the_fixed_set_is_there():
    assert len(PINNED) == 6


def linked_libraries(path: str) -> list[str]:
    """The shared libraries a module loads, as glibc's ldd lists them (on every glibc system, bare ones too)."""
    listed = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def test_the_native_modules_are_built_on_the_vendored_libjpeg_turbo():
    assert _jpegcrop.LIBJPEG_TURBO_VERSION == pinned_version()
    for module in (_jpegcrop, _restarts):
        libraries = linked_libraries(module.__file__)
        assert any("libc.so" in name for name in libraries), libraries
        assert not [name for name in libraries if "jpeg" in name], (module.__file__, libraries)


@pytest.mark.slow  # every resize path this CPU runs, each over every crop (1.5 s)
def test_decoded_crops_are_the_pinned_ones_with_every_resize_this_cpu_runs():
    digests = {simd: crops_digest(simd) for simd in SIMD}
    assert set(digests.values()) == {CROPS}, digests


def test_libjpeg_turbos_simd_changes_no_pixel():
    """JSIMD_FORCENONE: libjpeg-turbo's own switch to its plain C code, as on a CPU without SIMD."""
    script = ("import sys; sys.path.insert(0, 'tests'); import test_pinned_pixels as t; "
              "print(t.crops_digest('C'), t.rewrites_digest())")
    env = {**os.environ, "JSIMD_FORCENONE": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [CROPS, REWRITES]


def rewrites_digest() -> str:
    digest = hashlib.sha256()
    for path in PINNED:
        rewrite = rewrite_with_restarts(path.read_bytes(), 2, MAX_PIXELS)
        digest.update(rewrite.data or b"kept")
    return digest.hexdigest()


def test_the_lossless_rewrite_with_restart_markers_is_pinned():
    assert rewrites_digest() == REWRITES


def test_pil_decodes_and_encodes_on_the_pinned_library():
    from PIL import Image, features

    if features.version("libjpeg_turbo") != pinned_version():
        pytest.skip(f"PIL is built on libjpeg-turbo {features.version('libjpeg_turbo')}, not the pinned "
                    f"{pinned_version()} (stock Pillow: aarch64, or an install that kept it)")
    digest = hashlib.sha256()
    for path in PINNED:
        digest.update(np.asarray(Image.open(path).convert("RGB")).tobytes())
    out = io.BytesIO()
    Image.open(PINNED[0]).save(out, "JPEG", quality=90, subsampling="4:2:0", restart_marker_blocks=2)
    digest.update(out.getvalue())
    assert digest.hexdigest() == PIL_PIXELS


def test_pil_links_no_system_libjpeg():
    from PIL import _imaging, features

    if features.version("libjpeg_turbo") != pinned_version():
        pytest.skip("PIL is not pillow-simd on the pinned library here")
    assert not [name for name in linked_libraries(_imaging.__file__) if "jpeg" in name]
