"""The shard index: tar headers to a table of samples, as webdataset reads the same shards; damaged
headers; labels that are no class index."""

from __future__ import annotations

import os

import numpy as np
import pytest
import webdataset as wds

from conftest import shard_set, write_shard
from jpegs import jpeg
from shards.manifest import read_manifest
from shards.format import BAD_LABEL, parse_label
from train.shard_index import ShardSet, key_hash, tar_index


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
    with pytest.raises(TypeError):
        tar_index(12)


def test_the_sample_table_matches_what_webdataset_reads(prepared):
    shards = shard_set(prepared)
    shards.ensure_indexed(np.arange(sum(shards.sizes)))
    samples = [s for path in shards.paths for s in wds.WebDataset(str(path), shardshuffle=False)]
    assert shards.labels.tolist() == [int(s["cls"]) for s in samples]
    assert [int(h) >> 24 for h in shards.hashes] == [key_hash(s["__key__"]) for s in samples]
    assert shards.key_hashes(np.arange(3)).tolist() == [key_hash(s["__key__"]) for s in samples[:3]]
    images = shards.images(np.arange(len(samples)))
    assert all(images.data(i) == s["jpg"] for i, s in enumerate(samples))
    assert shards.describe(5) == f"{shards.paths[0]}: {samples[5]['__key__']}"
    assert not shards.bad_labels(np.arange(len(samples))).any()


@pytest.mark.parametrize("raw, label", [(b"7", 7), (b" 12\n", 12), (b"0", 0), (b"", BAD_LABEL), (b"-3", BAD_LABEL),
                                        (b"+5", BAD_LABEL), (b"1_000", BAD_LABEL), (b"3.0", BAD_LABEL),
                                        (b"\xff\xfe", BAD_LABEL), (b"1" * 10, BAD_LABEL), ("٣".encode(), BAD_LABEL)])
def test_a_label_is_a_decimal_class_index_or_bad(raw, label):
    assert parse_label(raw) == label


def test_labels_that_are_no_class_index_are_marked_bad(tmp_path):
    labels = [b"0", b"five", b"-1", b"2", b"3", b"99999"]  # three classes: 3 and 99999 lie outside
    write_shard(tmp_path / "s.tar", [(f"k{i}", jpeg(seed=i), label) for i, label in enumerate(labels)])
    shards = ShardSet([tmp_path / "s.tar"], [6], classes=3)
    shards.ensure_indexed(np.arange(6))
    assert shards.bad_labels(np.arange(6)).tolist() == [False, True, True, False, True, True]
    shards.close()


def test_close_raises_nothing_while_a_view_of_a_shard_is_held(prepared):
    """A view of a memory map (in a traceback, say) once made close() raise BufferError, hiding the
    error it was cleaning up after."""
    shards = shard_set(prepared)
    shards.ensure_indexed(np.arange(3))
    view = memoryview(shards.maps[0])
    shards.close()
    assert shards.maps == [None] * len(shards.paths)
    view.release()


def test_the_native_index_reads_what_the_format_module_writes(tmp_path):
    """train's fast reader and prepare's writer agree through shards/format.py: the index finds each
    sample's members where the writer put them, and parse_label reads the writer's labels."""
    from shards.format import sample_record, write_tar

    from shards.format import MAX_KEY_LENGTH

    samples = [sample_record(f"k{i}", bytes([i]) * (700 * i + 1), i * 37, {"width": i, "height": 2})
               for i in range(5)] + [sample_record("x" * MAX_KEY_LENGTH, b"\xff\xd8", 999, {})]
    path = tmp_path / "train-000000.tar"
    write_tar(path, samples)
    data = path.read_bytes()
    rows = tar_index(data)
    assert len(rows) == len(samples)
    for row, sample in zip(rows.tolist(), samples):
        key_at, key_len, jpg_at, jpg_len, cls_at, cls_len = row
        assert data[key_at:key_at + key_len].decode() == sample["__key__"]
        assert data[jpg_at:jpg_at + jpg_len] == sample["jpg"]
        assert parse_label(data[cls_at:cls_at + cls_len]) == int(sample["cls"])


# ---------------------------------------------------------------- the maps

@pytest.mark.slow
def test_a_loader_reads_more_shards_than_the_process_may_open_files(sources, tmp_path):
    """A map holds no file descriptor: a run over more shards than the hard `ulimit -n` (ImageNet-21k's 6,500
    under a cluster's 4,096) failed with "Too many open files" at the first shard past it (Python's mmap keeps a
    duplicate of its file's descriptor). Here 60 open files for two epochs of a hundred shards."""
    import resource
    import subprocess
    import sys

    from conftest import ROOT, config
    from prepare.builder import prepare

    prepare(config(sources["official"], tmp_path / "imagenet", shard_size_mb=0.02))
    shards = len(read_manifest(tmp_path / "imagenet").splits["train"].shards)
    limit = 60
    assert shards > 1.5 * limit
    script = ("import sys; from train import ImageNetLoader\n"
              "data = ImageNetLoader(sys.argv[1], 'train', batch_size=8, image_size=32, device='cpu', workers=1)\n"
              "print(sum(len(labels) for epoch in (0, 1) if data.set_epoch(epoch) is None for _, labels in data))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "imagenet")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 2 * (read_manifest(tmp_path / "imagenet").splits["train"].samples // 8 * 8)


# A process whose address space is full but for 8 MiB (`ulimit -v`, as the kernel's map table full does to mmap:
# ENOMEM) maps a whole 64 MiB shard.
NO_ROOM_TO_MAP = """
import resource, sys
from pathlib import Path
from shards.manifest import DatasetNotReady
from train.shard_index import mapped
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
size = int(status["VmSize"].split()[0]) * 1024 + (8 << 20)
resource.setrlimit(resource.RLIMIT_AS, (size, resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    mapped(Path(sys.argv[1]), None)
except DatasetNotReady as refused:
    print(refused)
"""


@pytest.mark.slow
def test_a_process_without_room_for_another_map_says_so_not_that_the_shard_is_damaged(tmp_path):
    """ENOMEM from mmap (the kernel's vm.max_map_count reached, 65,530 by default: a shard a map, ImageNet-21k at a
    small --shard-size; or `ulimit -v`) was said as "shard ... is damaged: it cannot be mapped (Cannot allocate
    memory). Rerun prepare with --verify", which finds every shard whole and the run fails again."""
    import warm

    shard = tmp_path / "train-000000.tar"
    shard.write_bytes(bytes(64 << 20))
    script = tmp_path / "no_room_to_map.py"
    script.write_text(NO_ROOM_TO_MAP)
    done = warm.run(str(script), shard, timeout=120)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith(f"shard {shard} cannot be mapped: this process has no room for another memory map ("), said
    assert "vm.max_map_count" in said and "ulimit -v" in said and "damaged" not in said and "--verify" not in said


@pytest.mark.slow
def test_a_shard_replaced_under_a_live_loader_is_refused_not_read(prepared, tmp_path):
    """A prepare --force on the --dest of a running loader: a shard first read after it was the new dataset's,
    mixed into the epoch without a word (or "damaged: it holds 16 samples, the manifest lists 17"), one removed a
    FileNotFoundError. A shard is read only where it is still the file the loader was made with."""
    from conftest import copy_dataset
    from shards.manifest import DatasetNotReady
    from train import ImageNetLoader

    root = copy_dataset(prepared, tmp_path / "imagenet")
    with ImageNetLoader(root, "train", batch_size=4, image_size=32, device="cpu", workers=1) as data:
        batches = data.batches()
        next(batches)
        for shard in (root / "train").iterdir():  # what prepare --force writes: new files in the old names
            shard.rename(shard.with_suffix(".old"))
            shard.write_bytes(shard.with_suffix(".old").read_bytes())
        with pytest.raises(DatasetNotReady, match="changed after this loader was made: another file is there now"):
            list(batches)
    with ImageNetLoader(root, "train", batch_size=4, image_size=32, device="cpu", workers=1) as data:
        (root / "train" / read_manifest(root).splits["train"].shards[0].name.split("/")[-1]).unlink()
        with pytest.raises(DatasetNotReady, match="changed after this loader was made: it cannot be opened now"):
            list(data)


# A loader's first batch read, then every shard it has mapped cut to 1 KiB in place, as `truncate -s 1K` (or a copy
# with `cp` over it) does on the node: the rest of the pass reads the maps past their files' new ends.
TRUNCATED_UNDER_A_LOADER = """
import os, sys
from train import ImageNetLoader
data = ImageNetLoader(sys.argv[1], 'train', batch_size=4, image_size=32, device='cpu', workers=1)
batches = data.batches()
next(batches)
shards = data._shared.loader.splits['train']
for path, view in zip(shards.paths, shards.maps):
    if view is not None:
        os.truncate(path, 1024)
""" + "{read}"


def truncated_under_a_loader(root, read: str):
    import subprocess
    import sys

    from conftest import ROOT

    script = TRUNCATED_UNDER_A_LOADER.format(read=read)
    return subprocess.run([sys.executable, "-c", script, str(root)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_a_shard_truncated_under_a_live_loader_is_its_one_line_error_not_a_silent_death(prepared, tmp_path):
    """A shard truncated in place under its map made the next read past its new end a SIGBUS: the process died
    with no word (the shell's "Bus error", a rank's signal 7), in a decode thread or wherever Python sliced the map.
    Now the read finds zeros, and the batch that read them is never given out: the loader raises its one line."""
    from conftest import copy_dataset

    done = truncated_under_a_loader(copy_dataset(prepared, tmp_path / "imagenet"), "print(sum(1 for _ in batches))")
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shards.manifest.DatasetNotReady: shard ") and "shrank while this process read it" in last
    assert "rerun prepare with --verify" in last and done.stdout == ""


@pytest.mark.slow
def test_a_sigbus_outside_the_shards_maps_still_ends_the_process(prepared, tmp_path):
    """The loader's SIGBUS handler answers only for its own maps: a bus error anywhere else (another map of a
    truncated file; torch's shared memory on a full /dev/shm) ends the process as before, not read as zeros."""
    from conftest import copy_dataset

    root = copy_dataset(prepared, tmp_path / "imagenet")
    other = tmp_path / "other"
    other.write_bytes(b"x" * 65536)
    read = (f"import mmap\nf = open({str(other)!r}, 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
            f"os.truncate({str(other)!r}, 0)\nprint(m[60000])\n")
    done = truncated_under_a_loader(root, read)
    assert done.returncode == -7, (done.returncode, done.stderr[-2000:])


def test_a_shard_cut_short_as_it_is_indexed_or_before_is_said_to_have_shrunk_not_to_be_another_or_damaged(
        prepared, tmp_path, monkeypatch):
    """Cut short in place between its map and its index, a shard's headers read as zeros past its new end: the
    index said "it holds 1 samples, the manifest lists 17" (rebuild it, as if damaged on disk); cut short before it
    was mapped, "another file is there now (the dataset prepared again...?)". Both are the shrunk shard's line."""
    import os

    from conftest import copy_dataset
    from shards.manifest import DatasetNotReady
    from train import shard_index

    root = copy_dataset(prepared, tmp_path / "imagenet")
    real_mapped = shard_index.mapped

    def mapped_then_cut_short(path, identity):
        view = real_mapped(path, identity)
        os.truncate(path, 1024)
        return view

    shards = shard_set(root)
    monkeypatch.setattr(shard_index, "mapped", mapped_then_cut_short)
    with pytest.raises(DatasetNotReady, match=r"train-000000.tar shrank while this process read it: something "
                                              r"truncated or rewrote it in place"):
        shards.index(0)
    monkeypatch.undo()
    os.truncate(shards.paths[1], 1024)
    with pytest.raises(DatasetNotReady, match=r"train-000001.tar shrank while this process read it"):
        shards.index(1)
    shards.close()


@pytest.mark.slow
def test_a_shard_index_built_before_the_maps_were_watched_is_one_line_saying_to_rebuild():
    """A git pull of the watched maps without jobs/install.sh left the old train._tarindex: the first shard mapped
    was an AttributeError traceback mid-run. Now the import says, in one line, that the module is older than its
    source and what to run."""
    import subprocess
    import sys

    from conftest import ROOT

    script = ("import train._tarindex as built\ndel built.map_shard\n"
              "try:\n    import train.shard_index\nexcept ImportError as exn:\n    print(type(exn).__name__, exn)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("NotBuilt the shard index train._tarindex is not built (a build older than its "
                                  "source, without map_shard): run `bash jobs/install.sh`"), done.stdout


def test_the_map_functions_answer_any_argument_with_a_status_never_a_crash(tmp_path):
    """Native code is fuzzed: unmap_shard unmaps only a map map_shard made (of its address and size): an address
    of anything else (Python's own heap) is a ValueError, not a munmap under the interpreter; map_shard of what
    cannot be mapped is an OSError."""
    import errno

    import train._tarindex as native

    path = tmp_path / "shard.tar"
    path.write_bytes(b"x" * 10_000)
    with open(path, "rb") as file:
        address = native.map_shard(file.fileno(), 10_000)
        for at, size in [(id(path), 64), (address, 9_999), (address + 4096, 4096), (0, 1), (-1, 1), (address, 0),
                         (address, -1), (2 ** 64 - 4096, 4096)]:
            with pytest.raises((ValueError, OverflowError)):
                native.unmap_shard(at, size)
        assert not native.was_unreadable(address) and native.unreadable() == 0
        native.unmap_shard(address, 10_000)
        with pytest.raises(ValueError):
            native.unmap_shard(address, 10_000)  # once
        for size in (0, -1):
            with pytest.raises(ValueError):
                native.map_shard(file.fileno(), size)
        with pytest.raises(OSError):
            native.map_shard(file.fileno(), 2 ** 62)
    for fd in (-1, 10 ** 6):
        with pytest.raises(OSError) as refused:
            native.map_shard(fd, 4096)
        assert refused.value.errno == errno.EBADF
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            native.map_shard(folder, 4096)
    finally:
        os.close(folder)
