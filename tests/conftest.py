"""Shared fixtures: the sample ImageNet in every layout, prepared once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prepare.builder import prepare
from prepare.config import PrepareConfig
from prepare.sample import SampleSpec, sample_images, write_imagefolder, write_kaggle, write_official

ROOT = Path(__file__).resolve().parents[1]
# Small images keep the suite fast; the quirks (CMYK, grayscale, PNG named .JPEG) are all there.
SPEC = SampleSpec(classes=6, train_per_class=30, val_per_class=5, max_width=160)
SHARD_MB = 0.12  # a few shards per split from the small sample


# The files that take longest, started first: with a file a worker at a time (pyproject's addopts), the two
# workers then finish together instead of one running test_train.py alone at the end.
LONGEST_FIRST = ("test_install.py", "test_train.py", "test_slurm.py", "test_shared_read.py", "test_native_fuzz.py", "test_launchers.py",
                 "test_gpu_check.py", "test_prepare.py")


# What a whole run holds at once in the temporary folder, rounded up (measured 2026-11-28: 0.5 GB of tmp_path,
# passed tests' deleted as they end (pyproject.toml), and about 1 GB of SLURM state, prepared datasets and logs).
NEEDS_FREE_GB = 3


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to start on a nearly full disk, in one line: a run that fills it fails in a hundred places, each
    with an OSError that hides why."""
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller checked
        return
    import shutil
    import tempfile

    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free / 1e9
    if free < NEEDS_FREE_GB:
        pytest.exit(f"the test suite needs about {NEEDS_FREE_GB} GB free in {folder} and there are {free:.1f}: "
                    "free some (old pytest-of-* folders are safe to delete), or set TMPDIR to a larger disk",
                    returncode=3)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: in-file order kept


@pytest.fixture(scope="session")
def images():
    return sample_images(SPEC)


@pytest.fixture(scope="session")
def sources(tmp_path_factory, images) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    writers = {"official": write_official, "imagefolder": write_imagefolder, "kaggle": write_kaggle}
    for layout, write in writers.items():
        write(root / layout, images)
    return {layout: root / layout for layout in writers}


def config(source: Path, dest: Path, **options) -> PrepareConfig:
    return PrepareConfig(source=source, dest=dest, shard_size_mb=options.pop("shard_size_mb", SHARD_MB),
                         progress_interval=options.pop("progress_interval", 60), **options)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, sources) -> Path:
    """The official sample, prepared with default options: shared read-only by many tests."""
    dest = tmp_path_factory.mktemp("prepared") / "imagenet"
    prepare(config(sources["official"], dest))
    return dest


def shard_set(prepared: Path, split: str = "train"):
    """The prepared sample dataset's ShardSet of `split`."""
    from shards.manifest import read_manifest
    from train.shard_index import ShardSet

    return ShardSet.of(prepared, read_manifest(prepared), split)


def write_shard(path: Path, samples: list[tuple[str, bytes, int | bytes]]) -> None:
    """A shard of (key, image bytes, label) samples, as prepare lays them out (KEY.jpg, KEY.cls,
    KEY.json); a label given as bytes is written as it is."""
    import webdataset as wds

    with wds.TarWriter(str(path), encoder=False) as writer:
        for key, data, label in samples:
            cls = label if isinstance(label, bytes) else str(label).encode()
            writer.write({"__key__": key, "jpg": data, "cls": cls, "json": b"{}"})


def run_module(*args, env=None, timeout=300, **kwargs) -> subprocess.CompletedProcess:
    """Run `python -m ...` as a user would, from the repository root."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", *map(str, args)], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every shard of a prepared dataset, for byte-for-byte comparison."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("*/*.tar"))}


def damage_jpeg(shard: Path, sample: int) -> str:
    """Overwrite 200 bytes at the start of the entropy-coded data of sample `sample`'s JPEG with
    bogus markers, in place (the shard keeps its size, so a stat-only check passes): every crop's
    decode reads through them, and libjpeg (ours, and torchvision's for --decode gpu) reports the
    damage. Returns the sample's key."""
    from train.shard_index import tar_index

    data = bytearray(shard.read_bytes())
    key_at, key_len, jpg_at, jpg_len, _, _ = tar_index(bytes(data))[sample].tolist()
    jpeg = bytes(data[jpg_at:jpg_at + jpg_len])
    sos = jpeg.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")  # first byte of the entropy-coded data
    data[jpg_at + start + 8:jpg_at + start + 208] = b"\xff\x05" * 100
    shard.write_bytes(bytes(data))
    return data[key_at:key_at + key_len].decode()


def member(shard: Path, sample: int, field: int) -> tuple[bytearray, int, int, str]:
    """(the shard's bytes, where member `field` of sample `sample` lies and how long it is, its key);
    field 2 is the .jpg, 4 the .cls (shard_index.tar_index's columns)."""
    from train.shard_index import tar_index

    data = bytearray(shard.read_bytes())
    row = tar_index(bytes(data))[sample].tolist()
    return data, row[field], row[field + 1], data[row[0]:row[0] + row[1]].decode()


def oversize_jpeg(shard: Path, sample: int, width: int = 9000, height: int = 9000) -> str:
    """Make sample `sample`'s JPEG header claim width x height (81 Mpx: more than shards.limits
    allows), in place and at the same size. Returns its key."""
    from jpegs import with_size

    data, at, length, key = member(shard, sample, 2)
    data[at:at + length] = with_size(bytes(data[at:at + length]), width, height)
    shard.write_bytes(bytes(data))
    return key


def relabel(shard: Path, sample: int, text: bytes) -> str:
    """Overwrite sample `sample`'s .cls in place with `text`, padded with spaces to the same length.
    Returns its key."""
    data, at, length, key = member(shard, sample, 4)
    data[at:at + length] = text[:length].ljust(length)
    shard.write_bytes(bytes(data))
    return key


def copy_dataset(prepared: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(prepared, to)
    return to
