"""The public loader, `from train import ImageNetLoader`, in one process: what it yields, its epochs
and length, exact resume from a state_dict, a val loader sharing the train loader's threads and
buffers, its counters and damaged samples, and its lifetime. tests/test_launchers.py runs it, and
the example of docs/library.md, under real launchers."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import pickle
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import copy_dataset, damage_jpeg, shard_set
from shards.manifest import DamagedData, read_manifest
from shards.plan import steps_per_epoch
from train import ImageNetLoader
from train.errors import ResumeError
from train.errors import ConfigError
from train.shard_index import key_hash

SIZE = 32


def loader(prepared, split="train", **options) -> ImageNetLoader:
    options = {"batch_size": 4, "image_size": SIZE, "device": "cpu", "workers": 2, **options}
    return ImageNetLoader(prepared, split, **options)


def records(batches) -> list[tuple]:
    """(images, labels, key hashes) of each batch, copied."""
    return [(b.images.clone(), b.labels.clone(), b.key_hashes.tolist()) for b in batches]


def same(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) and x[2] == y[2]
                                    for x, y in zip(a, b))


def as_world(monkeypatch, world: int, rank: int) -> None:
    """The variables torchrun sets, without a process group: the loader reads its place from them."""
    for name, value in {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world}.items():
        monkeypatch.setenv(name, str(value))


def test_batches_are_normalised_channels_last_on_the_device_in_the_dtype_asked(prepared):
    with loader(prepared) as data:
        images, labels = next(iter(data))
        assert images.shape == (4, 3, SIZE, SIZE) and images.dtype == torch.float32 and labels.dtype == torch.int64
        assert images.is_contiguous(memory_format=torch.channels_last) and images.device.type == "cpu"
        assert -3 < float(images.mean()) < 3  # normalised, not 0-255
    with loader(prepared, dtype=torch.bfloat16, channels_last=False) as data:
        images, _ = next(iter(data))
        assert images.dtype == torch.bfloat16 and images.is_contiguous()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_train_gives_every_rank_the_same_whole_batches_and_val_every_sample_once(prepared, monkeypatch, world):
    manifest = read_manifest(prepared)
    train_seen, val_seen, lengths = [], [], []
    for rank in range(world):
        as_world(monkeypatch, world, rank)
        with loader(prepared) as data, data.with_split("val") as val:
            batches = list(data.batches())
            assert len(batches) == len(data) == steps_per_epoch(manifest.splits["train"].samples, world, 4)
            assert all(len(b.labels) == 4 for b in batches)
            train_seen += [h for b in batches for h in b.key_hashes.tolist()]
            val_batches = list(val.batches())
            assert len(val_batches) == len(val) and all(len(b.labels) == 4 for b in val_batches[:-1])
            val_seen += [h for b in val_batches for h in b.key_hashes.tolist()]
            lengths.append(len(data))
    assert len(set(lengths)) == 1 and len(train_seen) == len(set(train_seen))
    val_keys = [key_hash(s.split(": ")[1]) for s in val_keys_of(prepared)]
    assert sorted(val_seen) == sorted(val_keys)


def val_keys_of(prepared) -> list[str]:
    shards = shard_set(prepared, "val")
    shards.ensure_indexed(np.arange(len(shards)))
    keys = [shards.describe(i) for i in range(len(shards))]
    shards.close()
    return keys


def test_a_pass_without_set_epoch_is_the_next_epoch_and_set_epoch_repeats_one(prepared):
    with loader(prepared) as data:
        epochs = [records(data.batches()) for _ in range(3)]  # epochs 0, 1, 2
        data.set_epoch(1)
        again = records(data.batches())
        assert same(again, epochs[1]) and not same(epochs[0], epochs[1]) and not same(epochs[1], epochs[2])
        assert data.state_dict()["epoch"] == 1
        assert same(records(data.batches()), epochs[2])  # and on from there


def epoch_and_state_after(prepared, epoch: int, taken: int) -> tuple[list, list, dict]:
    """(the records of `epoch` whole, those of its first `taken` batches, the state after them)."""
    with loader(prepared) as data:
        data.set_epoch(epoch)
        whole = records(data.batches())
    with loader(prepared) as data:
        data.set_epoch(epoch)
        batches = data.batches()
        first = records(next(batches) for _ in range(taken))
        state = data.state_dict()
        batches.close()
    return whole, first, state


@pytest.mark.parametrize("taken", [0, 1, 5])
def test_a_state_dict_taken_mid_epoch_resumes_to_exactly_the_batches_not_yet_taken(prepared, taken):
    whole, first, state = epoch_and_state_after(prepared, 3, taken)
    assert state["epoch"] == 3 and state["position"] == taken and same(first, whole[:taken])
    with loader(prepared, workers=1) as resumed:  # any thread count resumes
        resumed.load_state_dict(state)
        resumed.set_epoch(3)  # the usual resume loop: the state's own epoch keeps its position
        assert same(records(resumed.batches()), whole[taken:])
        resumed.set_epoch(4)
        assert len(records(resumed.batches())) == len(resumed)  # any other epoch starts at its first batch


def test_a_state_at_an_epochs_end_resumes_into_the_next_epoch(prepared):
    """Without set_epoch, the next pass is the next epoch; set_epoch with the state's own epoch keeps
    its position (the epoch's end: nothing), any other starts afresh."""
    with loader(prepared) as data:
        data.set_epoch(0)
        list(data.batches())
        state = data.state_dict()
        data.set_epoch(1)
        next_epoch = records(data.batches())
    with loader(prepared) as resumed:
        resumed.load_state_dict(state)
        assert same(records(resumed.batches()), next_epoch) and resumed.state_dict()["epoch"] == 1
    with loader(prepared) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(0)
        assert list(resumed.batches()) == []
        resumed.set_epoch(1)
        assert same(records(resumed.batches()), next_epoch)


def test_a_finished_val_pass_loads_on_a_rank_with_one_batch_fewer(prepared, monkeypatch):
    """The 30 val samples over 7 ranks are 5, 5, 4, 4, 4, 4, 4: two batches of 4 on rank 0, one on
    rank 6. Rank 0's state at the end of its pass is the end of rank 6's too."""
    as_world(monkeypatch, 7, 0)
    with loader(prepared, "val", batch_size=4) as first:
        list(first)
        state = first.state_dict()
    as_world(monkeypatch, 7, 6)
    with loader(prepared, "val", batch_size=4) as last:
        assert state["position"] == len(last) + 1
        last.load_state_dict(state)
        last.set_epoch(state["epoch"])
        assert list(last) == []


@pytest.mark.parametrize("set_epoch", [True, False])
def test_a_val_state_saved_mid_pass_gives_every_rank_only_the_samples_it_had_left(prepared, monkeypatch, set_epoch):
    """Rank 0's state after one of its two val batches, on the 7 ranks of 5, 5, 4, 4, 4, 4, 4 samples: the
    ranks of one batch have read theirs, so the rest of the pass is ranks 0 and 1's fifth samples, every
    sample of the pass read once in all, and the next pass is the next epoch on every rank, with or
    without set_epoch (a rank of one batch once took the state for another epoch's start and read its
    four again)."""
    as_world(monkeypatch, 7, 0)
    with loader(prepared, "val", batch_size=4) as first:
        passes = iter(first.batches())
        taken = next(passes).key_hashes.tolist()
        state = first.state_dict()
    read, epochs = {}, set()
    for rank in range(7):
        as_world(monkeypatch, 7, rank)
        with loader(prepared, "val", batch_size=4) as data:
            whole = [key for batch in data.batches() for key in batch.key_hashes.tolist()]
            data.load_state_dict(state)
            if set_epoch:
                data.set_epoch(state["epoch"])
            read[rank] = [key for batch in data.batches() for key in batch.key_hashes.tolist()]
            epochs.add(data.state_dict()["epoch"])
            assert read[rank] == (whole[4:] if rank < 2 else [])  # what the rank's second batch holds, or nothing
    assert [len(keys) for keys in read.values()] == [1, 1, 0, 0, 0, 0, 0] and epochs == {state["epoch"]}
    assert not set(taken) & set(read[0])


@pytest.mark.parametrize("change", ["seed", "batch_size", "shuffle_buffer", "world_size", "split", "dataset"])
def test_a_state_of_another_loader_is_refused_by_name(prepared, tmp_path, monkeypatch, change):
    with loader(prepared) as data:
        state = data.state_dict()
    root, options, split = prepared, {}, "train"
    if change in ("seed", "batch_size", "shuffle_buffer"):
        options[change] = {"seed": 1, "batch_size": 5, "shuffle_buffer": 7}[change]
    elif change == "world_size":
        as_world(monkeypatch, 2, 0)
    elif change == "split":
        split = "val"
    else:
        root = copy_dataset(prepared, tmp_path / "other")
        manifest = root / "manifest.json"
        manifest.write_text(manifest.read_text().replace('"seed": 0', '"seed": 9'))
    with loader(root, split, **options) as other, pytest.raises(ResumeError, match=change.split("_")[0]):
        other.load_state_dict(state)


def test_a_val_loader_made_from_the_train_loader_shares_its_threads_and_buffers(prepared):
    """Even a validation pass opened in the middle of a training epoch: it takes a second ring, made
    once, and both give the batches they give alone."""
    with loader(prepared) as alone:
        train_alone = records(alone.batches())
    with loader(prepared, "val") as alone:
        val_alone = records(alone.batches())
    with loader(prepared) as data:
        val = data.with_split("val")
        assert val._shared.loader is data._shared.loader and val.threads == data.threads
        train_batches = data.batches()
        head = records(next(train_batches) for _ in range(3))
        one_ring = data.memory_bytes()
        assert same(records(val.batches()), val_alone)  # inside the training epoch
        two_rings = data.memory_bytes()
        assert same(head + records(train_batches), train_alone)
        assert same(records(val.batches()), val_alone) and data.memory_bytes() == two_rings > one_ring
        val.close()
        assert not data.closed
        next(iter(data))  # still serves: the threads stop with the last loader sharing them


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_loader_is_not_copied_or_pickled_and_the_refusal_says_what_to_do(prepared, copier):
    """A copy.copy shared the threads without counting as their user: closing it stopped the original's
    (`cannot schedule new futures after shutdown`); deepcopy and pickle failed inside the copy machinery."""
    with loader(prepared) as data:
        with pytest.raises(TypeError, match="does not copy or pickle.*state_dict") as refused:
            copier(data)
        assert "\n" not in str(refused.value)
        with data.with_split("val") as val:  # with_split still makes its loader, sharing the threads
            assert len(list(val)) == len(val)
        assert sum(1 for _ in data) == len(data)


def _first_batch_in_a_forked_child(data: ImageNetLoader, open_pass=None) -> str:
    """What a forked child (a DataLoader worker over the loader) gets of its first batch (of `open_pass`, a pass the
    parent opened, where given): a shape, an error, or "no answer" where it waited 20 s (it is then killed)."""
    import multiprocessing

    def child(answers):
        try:
            answers.put(str(tuple(next(open_pass or iter(data))[0].shape)))
        except Exception as exn:
            answers.put(f"{type(exn).__name__}: {exn}")

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    process = context.Process(target=child, args=(answers,))
    process.start()
    try:
        return answers.get(timeout=20)
    except Exception:
        return "no answer"
    finally:
        process.kill()
        process.join()


def test_a_loader_used_in_a_forked_child_is_refused_saying_where_it_decodes(prepared):
    """A DataLoader over the loader with workers forks it: after a pass in the parent, the child waited forever for
    decoding threads it does not have; before one, each worker read the whole epoch (two workers: every batch
    twice). Refused in one line in the child; the loader goes on in the process that made it."""
    said = (r"RuntimeError: this train ImageNetLoader was made in process \d+, not this one \(\d+, forked from it: a "
            r"DataLoader worker\?\), which has none of its decoding threads: iterate it in the process that made it")
    with loader(prepared) as data:
        assert re.match(said, _first_batch_in_a_forked_child(data))  # no pass yet: no thread yet
        next(iter(data))
        assert re.match(said, _first_batch_in_a_forked_child(data))
        assert sum(1 for _ in data) == len(data)


@pytest.mark.slow
def test_a_pass_opened_before_a_fork_is_refused_in_the_child(prepared):
    """A pass the parent had opened (an iterator a fork-started Pool's task or a DataLoader worker inherits) waited
    forever in the child for batches from a background thread the child does not have."""
    said = r"RuntimeError: this train ImageNetLoader was made in process \d+, not this one \(\d+, forked from it"
    with loader(prepared) as data:
        open_pass = iter(data)
        next(open_pass)
        assert re.match(said, _first_batch_in_a_forked_child(data, open_pass))
        assert sum(1 for _ in open_pass) == len(data) - 1  # the parent's pass goes on


def test_leaving_a_pass_early_leaves_no_thread_busy_and_no_buffer_held(prepared):
    with loader(prepared) as data:
        before = threading.active_count()
        for step, _ in enumerate(data):
            if step == 2:
                break
        strategy = data._shared.loader.strategy
        assert len(strategy.free) == len(strategy.rings) == 1  # the pass gave its ring back
        assert threading.active_count() <= before + data.threads  # the background copier is gone
        assert not any(t.name == "device-batches" for t in threading.enumerate())
    assert data.closed
    with pytest.raises(RuntimeError, match="closed"):
        next(iter(data))


# A fresh process, in which torchvision is imported first by the loader (as where the user imports no torchvision of
# their own): a loader dropped without close() leaves no decoding thread and no shard mapped once collected.
FIRST_LOADER_DROPPED = """
import gc, sys, threading
from train import ImageNetLoader
assert "torchvision" not in sys.modules
data = ImageNetLoader(sys.argv[1], "train", batch_size=4, image_size=32, device="cpu", workers=2)
next(iter(data))
del data
gc.collect()
for thread in threading.enumerate():
    if thread.name.startswith("decode"):
        thread.join(timeout=5)  # a dropped pool's threads end as they wake
print([t.name for t in threading.enumerate() if t.name.startswith("decode")],
      sum(sys.argv[1] in line for line in open("/proc/self/maps")))
"""


@pytest.mark.slow
def test_the_first_loader_of_a_process_dropped_without_close_is_freed(prepared):
    """PIL built without FreeType (pillow-simd, as jobs/install.sh builds it) keeps the ImportError its ImageFont
    raised, traceback and all, and with it every frame above the import: the first loader of a process, whose
    __init__ imported torchvision, was never freed (its threads, its maps, its buffers, after `del` or a notebook's
    `loader = ImageNetLoader(...)` again)."""
    import subprocess
    import sys

    from conftest import ROOT

    result = subprocess.run([sys.executable, "-c", FIRST_LOADER_DROPPED, str(prepared)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.split("\n")[-2:] == ["[] 0", ""], result.stdout + result.stderr


def test_a_closed_loader_that_is_still_referenced_holds_no_batch_buffers(prepared):
    """close() says the threads and buffers go with the last loader sharing them: the rings of pinned batch
    buffers (4 x 38 MB a split at 256 x 224 px) stayed while anything held the closed loader (a notebook's Out[],
    a list of the loaders made)."""
    import gc
    import weakref

    data = loader(prepared)
    val = data.with_split("val")
    train_pass = iter(data)
    next(train_pass)
    next(iter(val))  # inside the training epoch: a second ring
    strategy = data._shared.loader.strategy
    buffers = [weakref.ref(buffer) for ring in strategy.rings for buffer in ring]
    assert len(buffers) == 8
    val.close()
    gc.collect()
    assert all(buffer() is not None for buffer in buffers)  # the train loader still reads them
    train_pass.close()
    data.close()
    gc.collect()
    assert [buffer() for buffer in buffers] == [None] * 8 and data.memory_bytes() == sum(
        shards.table_bytes() for shards in data._shared.loader.splits.values())


def test_counters_count_images_bad_samples_fallbacks_and_the_wait(tmp_path):
    import io

    from PIL import Image

    from conftest import write_shard
    from jpegs import jpeg
    from shards.manifest import ClassInfo, Manifest, ShardInfo, SplitInfo, write_manifest

    good = [jpeg(seed=s) for s in range(8)]
    png = io.BytesIO()
    Image.open(io.BytesIO(good[2])).save(png, "PNG")
    blobs = good[:2] + [png.getvalue(), good[3][:500]] + good[4:]  # one for PIL, one cut short
    root = tmp_path / "data"
    (root / "val").mkdir(parents=True)
    write_shard(root / "val" / "val-000000.tar", [(f"k{i}", data, i % 2) for i, data in enumerate(blobs)])
    size = (root / "val" / "val-000000.tar").stat().st_size
    split = SplitInfo(8, size, [ShardInfo("val/val-000000.tar", 8, size)])
    write_manifest(root, Manifest(source={}, options={}, classes=[ClassInfo(0, "n0", "a"), ClassInfo(1, "n1", "b")],
                                  splits={"val": split, "train": SplitInfo(0, 0, [])}))
    with loader(root, "val", batch_size=3) as val:
        list(val)
        counters = val.counters
    assert (counters.images, counters.bad_samples, counters.pil_fallbacks) == (7, 1, 1)
    assert counters.data_wait_s > 0


def test_more_bad_samples_than_allowed_on_this_rank_stop_it_in_one_line(prepared, tmp_path):
    data_dir = copy_dataset(prepared, tmp_path / "data")
    shard = data_dir / read_manifest(data_dir).splits["val"].shards[0].name
    key = damage_jpeg(shard, 1)
    with loader(data_dir, "val", max_bad_samples=0) as val, pytest.raises(DamagedData) as stopped:
        list(val)
    assert f"{key} (damaged JPEG data)" in str(stopped.value) and "--verify" in str(stopped.value)
    assert "\n" not in str(stopped.value)


def test_fixed_shape_fills_a_batch_with_samples_left_out_back_to_its_size(prepared, tmp_path):
    data_dir = copy_dataset(prepared, tmp_path / "data")
    shard = data_dir / read_manifest(data_dir).splits["train"].shards[0].name
    damage_jpeg(shard, 0), damage_jpeg(shard, 1)
    with loader(data_dir) as plain:
        sizes = [len(b.labels) for b in plain.batches()]
    with loader(data_dir, fixed_shape=True) as fixed:
        batches = list(fixed.batches())
    assert min(sizes) < 4 and all(len(b.labels) == 4 and b.images.shape[0] == 4 for b in batches)
    short = next(i for i, n in enumerate(sizes) if n < 4)
    assert len(batches[short].key_hashes) == sizes[short]  # the copies are not counted as read
    assert fixed.counters.images == sum(sizes)  # nor as images


@pytest.mark.parametrize("options, message", [({"batch_size": 0}, "batch_size"), ({"image_size": 9000}, "image_size"),
                                              ({"workers": 0}, "workers"), ({"decode": "tpu"}, "decode"),
                                              ({"dtype": torch.int8}, "dtype"), ({"max_bad_samples": -1}, "max_bad"),
                                              ({"shuffle_buffer": 0}, "shuffle_buffer")])
def test_a_setting_that_cannot_work_is_refused_by_name(prepared, options, message):
    with pytest.raises(ConfigError, match=message):
        loader(prepared, **options)
    with pytest.raises(ConfigError, match="split"):
        loader(prepared, "test")


def test_a_missing_dataset_says_what_to_run(tmp_path):
    from shards.manifest import DatasetNotReady

    with pytest.raises(DatasetNotReady, match="python -m prepare"):
        loader(tmp_path)


def test_a_root_inside_a_dataset_names_the_dataset_not_prepare(prepared):
    """The dataset's train/ given as root (as an ImageFolder's root would be): the refusal said to run prepare with
    --dest at that folder, which reads the whole source again (hours) for a dataset already there."""
    from shards.manifest import DatasetNotReady

    for inside in (prepared / "train", prepared / "val"):
        with pytest.raises(DatasetNotReady) as refused:
            loader(inside)
        assert str(refused.value) == (f"no prepared dataset at {inside}: it is a folder of the dataset at {prepared}, "
                                      "which is the folder to give")


@pytest.mark.parametrize("environ, threads", [
    ({}, 15), ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, 3),
    ({"RANK": "0", "WORLD_SIZE": "8", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "SLURM_CPUS_PER_TASK": "16"}, 7),
])
def test_workers_default_to_this_ranks_share_of_the_cpus_less_one(prepared, monkeypatch, environ, threads):
    """16 CPUs: one process, 4 torchrun ranks on the node, torchrun inside an srun task of 16 CPUs."""
    from train import imagenet_loader

    monkeypatch.setattr(imagenet_loader, "available_cpus", lambda: 16)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with ImageNetLoader(prepared, batch_size=4, image_size=SIZE, device="cpu") as data:
        assert data.threads == threads


def test_the_rank_comes_from_torch_distributed_first_then_from_what_it_is_told(prepared, monkeypatch, tmp_path):
    """A process group of one, where the launcher's variables say rank 1 of 2: the group wins, and
    explicit rank and world_size (data parallelism inside a larger group) win over both."""
    import torch.distributed as dist

    as_world(monkeypatch, 2, 1)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        with loader(prepared) as data:
            assert (data.rank, data.world_size) == (0, 1)
            assert len(data) == steps_per_epoch(read_manifest(prepared).splits["train"].samples, 1, 4)
        with loader(prepared, rank=2, world_size=3) as data:
            assert (data.rank, data.world_size) == (2, 3) and data.state_dict()["world_size"] == 3
    finally:
        dist.destroy_process_group()
    with pytest.raises(ConfigError, match="rank and world_size go together"):
        loader(prepared, rank=3, world_size=3)


def test_one_pass_of_a_loader_at_a_time(prepared):
    with loader(prepared) as data:
        first = data.batches()
        next(first)
        with pytest.raises(RuntimeError, match="still open"):
            next(iter(data))
        first.close()
        next(iter(data))


def test_a_pass_kept_by_a_traceback_says_how_to_go_on_without_it(prepared):
    """A function that raised while it held a pass's iterator, in an interactive session (Python's own, IPython's,
    Jupyter's), which keeps the last exception's traceback and with it the function's locals: the pass stays open,
    and the refusal of the next one said only to finish it or close() its iterator, which the user no longer holds."""
    def steps(data):
        batches = iter(data)
        for step in range(5):
            next(batches)
            if step == 2:
                raise ValueError("a bug in the step")

    data = loader(prepared)
    try:
        steps(data)
    except ValueError as exn:
        kept = exn.__traceback__  # as sys.last_traceback keeps it
    with pytest.raises(RuntimeError, match=r"still open.*no longer hold.*close\(\) the loader") as refused:
        next(iter(data))
    assert "\n" not in str(refused.value)
    state = data.state_dict()  # what the message says to do
    data.close()
    with loader(prepared) as again:
        again.load_state_dict(state)
        assert sum(1 for _ in again) == len(again) - 3
    del kept


def test_close_ends_the_passes_still_open(prepared):
    data = loader(prepared)
    val = data.with_split("val")
    open_pass = data.batches()
    next(open_pass)
    val.close()
    assert any(t.name == "device-batches" for t in threading.enumerate())
    data.close()
    assert not any(t.name == "device-batches" for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="closed during a pass"):  # not waiting for batches that will never come
        next(open_pass)


def test_a_pass_in_another_thread_closed_under_it_says_so(prepared):
    """A loop in a thread of its own (a notebook training in the background) whose loader the main thread closes:
    the loop got the generator's `ValueError: generator already executing` (close() ending the pass in the main
    thread as the loop asked it for its next batch), or ended quietly, as an epoch ends, mid-epoch."""
    for holding in (0.01, 0.02, 0.03):  # the loop's body (45 batches: longer than the wait for the close)
        data = loader(prepared)
        ended = []

        def loop():
            try:
                for _ in data:
                    time.sleep(holding)
                ended.append("quietly")
            except Exception as exn:
                ended.append(f"{type(exn).__name__}: {exn}")

        thread = threading.Thread(target=loop)
        thread.start()
        time.sleep(0.2)
        data.close()
        thread.join(timeout=30)
        assert len(ended) == 1 and ended[0].startswith("RuntimeError: this train ImageNetLoader was closed during a "
                                                       "pass of it"), (holding, ended)


@pytest.mark.slow
def test_a_loader_closed_by_a_signal_handler_mid_pass_says_it_was_closed(prepared, monkeypatch):
    """A SIGTERM handler that closes the loader runs in the main thread, inside the pass waiting for its next
    batch: the pass stops with that, not with what its stopped threads raise (the thread pool's "cannot schedule
    new futures after shutdown")."""
    import os
    import signal

    from train import loader as loader_module

    real = loader_module.draw_crops

    def slowly(chunk, augment, check_markers=False):
        time.sleep(0.3)  # the pass is waiting for this batch when the signal comes
        return real(chunk, augment, check_markers)

    monkeypatch.setattr(loader_module, "draw_crops", slowly)
    data = loader(prepared, workers=1)
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: data.close())
    try:
        with pytest.raises(RuntimeError, match="this train ImageNetLoader was closed during a pass of it"):
            for i, _ in enumerate(data):
                if i == 0:
                    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    finally:
        signal.signal(signal.SIGUSR1, before)
        data.close()


@pytest.mark.slow
def test_ctrl_c_while_a_pass_waits_leaves_no_batch_read_ahead_to_its_traceback(prepared, monkeypatch, ctrl_c_delivered):
    """Ctrl-C (a KeyboardInterrupt in the main thread) while the loop waits for a batch: the traceback, which an
    interactive session keeps, holds the pass's frames, and they held the batches read ahead and the CPU device's
    reused output buffers (on the CPU at batch 256 of 224 px, 154 MB each, five of them) until the next exception.
    Then the same loader goes on: its state names the batches taken, and the next pass starts where set."""
    import _thread
    import gc

    from train import loader as loader_module
    from train.device_batches import DeviceBatches

    real = loader_module.draw_crops

    def slowly(chunk, augment, check_markers=False):
        time.sleep(0.1)  # the loop waits for each batch: the interrupt comes while it does
        return real(chunk, augment, check_markers)

    monkeypatch.setattr(loader_module, "draw_crops", slowly)
    data = loader(prepared, workers=1, prefetch=3)
    taken = 0
    timer = threading.Timer(1.0, _thread.interrupt_main)
    try:
        timer.start()
        for _ in data:
            taken += 1
    except KeyboardInterrupt as interrupted:
        kept = interrupted.__traceback__  # as sys.last_traceback keeps it
    timer.join()
    assert 0 < taken < len(data) and data.state_dict()["position"] == taken
    gc.collect()
    read_ahead = [(copier.queue.qsize(), copier.outputs) for copier in gc.get_objects()
                  if type(copier) is DeviceBatches]  # (isinstance warns of torch's deprecated objects)
    assert read_ahead in ([], [(0, None)])
    monkeypatch.setattr(loader_module, "draw_crops", real)
    data.set_epoch(1)
    assert sum(1 for _ in data) == len(data)
    data.close()
    del kept


def test_a_pass_that_fails_gives_its_ring_and_thread_back(prepared, monkeypatch):
    from train import loader as loader_module

    real, calls = loader_module.draw_crops, []

    def fails_at_the_third_chunk(chunk, augment, check_markers=False):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a bug in a decode task")
        return real(chunk, augment, check_markers)

    monkeypatch.setattr(loader_module, "draw_crops", fails_at_the_third_chunk)
    with loader(prepared, workers=1) as data:
        with pytest.raises(RuntimeError, match="a bug in a decode task"):
            list(data)
        strategy = data._shared.loader.strategy
        assert len(strategy.free) == len(strategy.rings) == 1
        assert not any(t.name == "device-batches" for t in threading.enumerate())
        monkeypatch.setattr(loader_module, "draw_crops", real)
        assert len(list(data)) == len(data)  # and the loader still serves


def test_the_errors_it_raises_are_importable_from_train():
    import shards.manifest
    import train
    import train.run.checkpoint
    import train.errors

    assert (train.DamagedData, train.DatasetNotReady) == (shards.manifest.DamagedData, shards.manifest.DatasetNotReady)
    assert (train.ResumeError, train.ConfigError) == (train.errors.ResumeError, train.errors.ConfigError)
    assert train.run.checkpoint.ResumeError is train.ResumeError
    with pytest.raises(AttributeError):
        train.Nothing


# ---------------------------------------------------------------- ordinary inputs: the right data or one clear error

@pytest.mark.parametrize("seed", [np.int64(0), np.int32(0), torch.tensor(0)])
def test_a_seed_that_is_an_integer_of_another_type_is_the_same_seed(prepared, seed):
    with loader(prepared, seed=0) as data:
        reference = records(data.batches())
    with loader(prepared, seed=seed) as data:
        assert same(records(data.batches()), reference)
        assert type(data.state_dict()["seed"]) is int


@pytest.mark.parametrize("epoch", [np.int64(2), np.arange(3)[2], torch.tensor(2)])
def test_an_epoch_that_is_an_integer_of_another_type_is_the_same_epoch(prepared, epoch):
    with loader(prepared) as data:
        data.set_epoch(2)
        reference = records(data.batches())
        data.set_epoch(epoch)
        assert same(records(data.batches()), reference)
        assert type(data.state_dict()["epoch"]) is int


@pytest.mark.parametrize("seed", [0.0, 1.5, None, "abc", np.float64(0)])
def test_a_seed_that_is_not_a_whole_number_is_refused(prepared, seed):
    with pytest.raises(ConfigError, match="seed must be a whole number"):
        loader(prepared, seed=seed)


@pytest.mark.parametrize("epoch, message", [(1.0, "whole number"), (None, "whole number"), ("1", "whole number"),
                                            (-1, "at least 0")])
def test_an_epoch_that_is_not_a_whole_number_of_0_or_more_is_refused(prepared, epoch, message):
    with loader(prepared) as data, pytest.raises(ConfigError, match=f"epoch must be.*{message}"):
        data.set_epoch(epoch)


def test_a_state_is_plain_data_for_json_and_torch_load_weights_only(prepared, tmp_path):

    with loader(prepared, seed=np.int64(3), batch_size=np.int64(4)) as data:
        data.set_epoch(np.int64(1))
        batches = data.batches()
        next(batches)
        state = data.state_dict()
        batches.close()
    leaves = [v for value in state.values() for v in (value.values() if isinstance(value, dict) else [value])]
    assert all(type(leaf) in (int, str, float, bool, type(None)) for leaf in leaves)
    assert type(state["seed"]) is type(state["epoch"]) is type(state["batch_size"]) is int
    assert json.loads(json.dumps(state)) == state
    torch.save({"loader": state}, tmp_path / "checkpoint.pt")
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["loader"] == state


def without_epoch(state: dict) -> dict:
    return {name: value for name, value in state.items() if name != "epoch"}


@pytest.mark.parametrize("malformed, message", [
    (lambda state: None, "not NoneType"), (lambda state: [1, 2], "not list"),
    (lambda state: {"position": 0}, "lacks format, dataset_id"), (without_epoch, "lacks epoch"),
    (lambda state: {**state, "epoch": "x"}, "epoch is 'x'"), (lambda state: {**state, "epoch": None}, "epoch is None"),
    (lambda state: {**state, "epoch": -5}, "epoch is -5"),
    (lambda state: {**state, "position": 1.0}, "position is 1.0"),
    (lambda state: {**state, "position": -1}, "position is -1"),
])
def test_a_malformed_state_is_refused_in_one_line(prepared, malformed, message):
    with loader(prepared) as data, pytest.raises(ResumeError, match=message):
        data.load_state_dict(malformed(data.state_dict()))


def test_a_state_at_an_epochs_end_loads_into_another_world_size_and_mid_epoch_does_not(prepared, monkeypatch):
    """An elastic restart between epochs (fewer nodes after a requeue): nothing of the finished epoch
    is left to resume, so the new world starts the next epoch whole. Mid-epoch, it is refused."""
    as_world(monkeypatch, 2, 0)
    with loader(prepared) as two:
        two.set_epoch(4)
        batches = two.batches()
        next(batches)
        mid_epoch = two.state_dict()
        list(batches)
        at_end = two.state_dict()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name)
    with loader(prepared) as one:
        one.set_epoch(5)
        epoch_5 = records(one.batches())
    with loader(prepared) as one:
        with pytest.raises(ResumeError, match="world_size: the state's 2, this loader's 1"):
            one.load_state_dict(mid_epoch)
        one.load_state_dict(at_end)
        assert same(records(one.batches()), epoch_5) and one.state_dict()["epoch"] == 5
    with loader(prepared) as one:
        one.load_state_dict(at_end)
        one.set_epoch(4)  # the usual resume loop: the state's own epoch is over
        assert list(one.batches()) == []


def test_set_epoch_with_the_states_epoch_keeps_its_position_however_often_it_is_called(prepared):
    """A restore helper and the epoch loop may both call set_epoch with the state's epoch: the second call threw
    the position away, and the epoch's first batches were trained on twice."""
    whole, _, state = epoch_and_state_after(prepared, 2, 3)
    with loader(prepared) as data:
        data.load_state_dict(state)
        data.set_epoch(2)
        data.set_epoch(2)
        assert same(records(data.batches()), whole[3:])
        data.set_epoch(2)  # after the pass: the epoch again, whole
        assert same(records(data.batches()), whole)
    with loader(prepared) as data:
        data.load_state_dict(state)
        data.set_epoch(3)
        data.set_epoch(2)  # another epoch in between: the state's position is gone
        assert same(records(data.batches()), whole)


def test_the_epoch_and_the_state_cannot_change_under_an_open_pass(prepared):
    """The pass reads the epoch and position it began with: set_epoch or load_state_dict during it made
    state_dict() describe batches it never yielded (a checkpoint then resumed at the wrong place)."""
    with loader(prepared) as data:
        data.set_epoch(1)
        state = data.state_dict()
        batches = data.batches()
        next(batches)
        for change in (lambda: data.set_epoch(2), lambda: data.load_state_dict(state)):
            with pytest.raises(RuntimeError, match="while a pass of this train loader is open: finish the pass, or "
                                                   "leave it"):
                change()
        next(batches)
        assert data.state_dict()["epoch"] == 1 and data.state_dict()["position"] == 2
        batches.close()
        data.set_epoch(2)
        data.load_state_dict(state)


def test_a_relative_root_is_the_folder_checked_after_a_chdir(prepared, tmp_path, monkeypatch):
    monkeypatch.chdir(prepared.parent)
    with loader(prepared.name) as data:
        monkeypatch.chdir(tmp_path)
        assert data.root == prepared and len(records(data.batches())) == len(data)


class BytesPath(os.PathLike):
    """A path of bytes, as os.fsencode makes them: pathlib takes no bytes."""

    def __fspath__(self) -> bytes:
        return b"/data"

    def __repr__(self) -> str:
        return "BytesPath()"


@pytest.mark.parametrize("options, message", [
    ({"root": None}, "root must be the folder `python -m prepare` wrote .*not None"),
    ({"root": 5}, "root must be the folder"), ({"root": b"/data"}, r"root must be the folder .*not b'/data'$"),
    ({"root": BytesPath()}, "root must be the folder .*a str or a path, not BytesPath"),
    ({"channels_last": "no"}, r"channels_last must be True or False, not 'no' \(str\)"),
    ({"fixed_shape": "yes"}, "fixed_shape must be True or False"),
    ({"device": None}, r"device None is not a torch device \(device\(\) received an invalid combination of "
                       r"arguments - got \(NoneType\), but expected one of:\): give"),
])
def test_arguments_of_the_wrong_kind_are_one_line_naming_them(prepared, options, message):
    """A string "no" is true to Python (it turned channels_last on); None as the root was pathlib's TypeError,
    as the device torch's listing of its overloads over a dozen lines."""
    root = options.pop("root", prepared)
    with pytest.raises(ConfigError, match=message) as refusal:
        ImageNetLoader(root, "train", **{"batch_size": 4, "image_size": SIZE, "device": "cpu", **options})
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("options, names", [
    ({"split": "tran"}, {"split"}), ({"dtype": torch.int8}, {"dtype"}), ({"device": "meta"}, {"device"}),
    ({"device": "nodevice"}, {"device"}), ({"rank": 1}, {"rank", "world_size"}),
    ({"rank": 2, "world_size": 2}, {"rank", "world_size"}), ({"dtype": torch.uint8, "mean": (0.5,) * 3},
                                                             {"mean", "std", "dtype"}),
    ({"augment": "flip"}, {"augment"}), ({"root": None}, {"root"}),
])
def test_a_config_error_carries_the_arguments_it_names(prepared, options, names):
    """docs/library.md: the arguments travel with the error as data, so that a caller says them in its own words
    (python -m train's flags): these said the library's words only, and said_with could rename nothing."""
    root = options.pop("root", prepared)
    with pytest.raises(ConfigError) as refusal:
        ImageNetLoader(root, options.pop("split", "train"), **{"batch_size": 4, "image_size": SIZE, "device": "cpu",
                                                               **options})
    assert set(refusal.value.arguments) == names
    renamed = refusal.value.said_with({name: f"--{name}" for name in names})
    assert all(f"--{name}" in renamed for name in names) and renamed != str(refusal.value)


def test_a_non_square_val_crop_is_its_height_and_width_in_the_loader_and_its_state(prepared):
    """val_crop=(32, 48) showed as 48 in loader.val_crop and in a mid-pass state, which then loaded into a
    val_crop=48 loader reading (48, 48) batches (a review's finding)."""
    with loader(prepared, "val", val_crop=(32, 48)) as wide:
        assert wide.val_crop == (32, 48)
        batches = wide.batches()
        assert tuple(next(batches).images.shape[2:]) == (32, 48)
        state = wide.state_dict()
        batches.close()
    assert state["size"] == [32, 48] and json.loads(json.dumps(state)) == state
    with loader(prepared, "val", val_crop=48) as square, pytest.raises(ResumeError, match="size: the state's"):
        square.load_state_dict(state)
    with loader(prepared, "val", val_crop=(32, 48)) as same:
        same.load_state_dict(json.loads(json.dumps(state)))
        assert tuple(next(iter(same))[0].shape[2:]) == (32, 48)


def test_a_place_given_is_taken_whatever_half_a_launchers_variables_say(prepared, monkeypatch):
    """RANK and WORLD_SIZE without LOCAL_RANK (a Kubeflow pod, say) with rank= and world_size= given: the loader
    read the environment for its CPU share anyway and raised a ClusterError, no documented error of its (a review's
    finding). Without a place given, it is still refused, the place cannot be known, as a ConfigError that names
    the arguments that give it: it was that ClusterError, which `from train import` has not, so a loop catching the
    library's errors let it through (a later review's finding)."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with loader(prepared, rank=1, world_size=2, workers=None) as data:
        assert (data.rank, data.world_size) == (1, 2)
    for workers in (None, 2):
        with pytest.raises(ConfigError) as refused:
            loader(prepared, workers=workers)
        assert str(refused.value) == ("RANK, WORLD_SIZE set but not LOCAL_RANK: launch with torchrun, srun, or "
                                      "neither; or give the loader this process's data-parallel place, rank and "
                                      "world_size")
        assert refused.value.arguments == {"rank": "rank", "world_size": "world_size"}


def test_a_manifest_of_a_later_version_says_to_upgrade_not_to_prepare_again(prepared, tmp_path):
    """Preparing it again with this version would undo the later version's work."""
    from conftest import copy_dataset

    from shards.manifest import FORMAT, ManifestUnreadable

    copy = copy_dataset(prepared, tmp_path / "later")
    text = (copy / "manifest.json").read_text()
    (copy / "manifest.json").write_text(text.replace(f'"{FORMAT}"', f'"{FORMAT[:-1]}{int(FORMAT[-1]) + 1}"'))
    with pytest.raises(ManifestUnreadable, match="was written by a later version of this package .*: upgrade the "
                                                 "package where this runs"):
        loader(copy)
    (copy / "manifest.json").write_text(text.replace(f'"{FORMAT}"', '"imagenet-wds/0"'))
    with pytest.raises(ManifestUnreadable, match="rerun prepare with --force"):
        loader(copy)


def test_a_batch_larger_than_a_ranks_share_is_refused_at_construction(prepared):
    train_samples = read_manifest(prepared).splits["train"].samples
    with pytest.raises(ConfigError, match=f"{train_samples} train samples over 2 rank.*no batch of {train_samples}.*"
                                          f"at most {train_samples // 2}"):
        loader(prepared, batch_size=train_samples, rank=0, world_size=2)
    with pytest.raises(ConfigError, match=f"{train_samples} train samples over {train_samples + 1} rank.*: use at "
                                          f"most {train_samples} ranks$"):  # (not "lower batch_size to at most 0")
        loader(prepared, batch_size=1, rank=0, world_size=train_samples + 1)
    # a sample each
    with pytest.raises(ConfigError, match=f"over {train_samples} rank.*: lower batch_size to at most 1 "):
        loader(prepared, batch_size=2, rank=0, world_size=train_samples)
    val_samples = read_manifest(prepared).splits["val"].samples
    # every rank refuses, not only the one left without a sample: a rank refusing alone leaves the others
    # waiting for it in their first all-reduce
    for rank in (0, val_samples):
        with pytest.raises(ConfigError, match=f"{val_samples} val samples over {val_samples + 1} ranks leave rank "
                                              f"{val_samples} none"):
            loader(prepared, "val", rank=rank, world_size=val_samples + 1)
        with loader(prepared, batch_size=1, rank=rank, world_size=val_samples + 1) as train:
            with pytest.raises(ConfigError, match=f"leave rank {val_samples} none"):
                train.with_split("val")
    with pytest.raises(ConfigError, match=f"leave ranks {val_samples} to {val_samples + 2} none"):
        loader(prepared, "val", rank=1, world_size=val_samples + 3)
    with loader(prepared, "val", rank=val_samples - 1, world_size=val_samples) as last:  # a sample each rank: taken
        assert [len(labels) for _, labels in last] == [1]


@pytest.mark.parametrize("device, message", [
    ("meta", "holds no data"), ("gpu", "not a torch device"), ("cuda", "no CUDA GPU"), ("cuda:7", "no CUDA GPU"),
])
def test_a_device_that_cannot_work_is_refused_at_construction(prepared, device, message):
    if torch.cuda.is_available() and device.startswith("cuda"):
        device, message = f"cuda:{torch.cuda.device_count()}", "sees .* GPU"
    with pytest.raises(ConfigError, match=message):
        loader(prepared, device=device)


def test_a_gpu_index_past_those_seen_says_which_to_use_where_each_process_has_its_own(prepared, monkeypatch):
    """srun --gpus-per-task=1 shows each task its own GPU as cuda:0; a loop using cuda:LOCAL_RANK was told to "use
    cuda:LOCAL_RANK", what it did. Where the process sees several, LOCAL_RANK is the advice (not the job's RANK)."""
    from train import loader_arguments

    for seen, asked, said in (
            (1, "cuda:1", "device 'cuda:1', but this process sees one GPU alone, cuda:0 (CUDA_VISIBLE_DEVICES "
                          "renumbers them: each process given a GPU of its own sees it as index 0): use 'cuda:0'"),
            (4, "cuda:5", "device 'cuda:5', but this process sees 4 GPUs, cuda:0 to cuda:3 (CUDA_VISIBLE_DEVICES "
                          "renumbers them): use cuda:LOCAL_RANK, this node's rank (not RANK, the job's)")):
        monkeypatch.setattr(loader_arguments, "device_count", lambda kind, seen=seen: seen if kind == "cuda" else 0)
        with pytest.raises(ConfigError) as refused:
            loader(prepared, device=asked)
        assert str(refused.value) == said


def test_a_root_that_is_a_file_is_not_a_dataset(tmp_path):
    from shards.manifest import DatasetNotReady

    (tmp_path / "imagenet").write_text("not a folder")
    with pytest.raises(DatasetNotReady, match="is not a directory"):
        loader(tmp_path / "imagenet")


def test_more_workers_than_cpus_decode_with_the_cpus_and_say_so(prepared, caplog):
    from shards.resources import available_cpus

    with caplog.at_level("WARNING", logger="train"), loader(prepared, workers=1000) as data:
        assert data.threads == available_cpus()
    assert f"workers=1000 is more than the {available_cpus()} CPUs" in caplog.text


def spawned_rank(rank: int, world: int, rendezvous: str, root: str, results) -> None:
    """mp.spawn's target: a loader made before joining the group, read; then one made after it, read (one spawn
    for both: each of its processes imports torch)."""
    import torch.distributed as dist

    def read(order: str) -> None:
        try:
            with ImageNetLoader(root, batch_size=4, image_size=SIZE, device="cpu", workers=1) as data:
                if order == "before":
                    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
                    # every rank's side of gloo's mesh up before any goes on: a rank refused at once that went on
                    # (or exited) while its peer still connected made the peer's init fail ("Connection closed by
                    # peer")
                    dist.barrier()
                results.put(((order, rank), sorted(h for b in data.batches() for h in b.key_hashes.tolist())))
        except ConfigError as error:
            results.put(((order, rank), str(error)))

    try:
        read("before")
        read("after")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.slow
def test_under_mp_spawn_a_loader_made_before_the_group_is_refused_and_after_it_reads_its_share(prepared, tmp_path,
                                                                                               monkeypatch):
    import torch.multiprocessing as mp

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    results = mp.get_context("spawn").Queue()
    mp.spawn(spawned_rank, args=(2, str(tmp_path / "rendezvous"), str(prepared), results), nprocs=2)
    got = dict(results.get(timeout=60) for _ in range(4))
    for rank in (0, 1):
        assert got["before", rank] == (f"this loader was made as rank 0 of 1, but torch.distributed now says rank "
                                       f"{rank} of 2: make the loader after init_process_group (or pass rank= and "
                                       "world_size=)")
    assert not set(got["after", 0]) & set(got["after", 1])
    assert len(got["after", 0]) == len(got["after", 1]) == steps_per_epoch(
        read_manifest(prepared).splits["train"].samples, 2, 4) * 4


# ---------------------------------------------------------------- elastic: a mid-epoch state on another world size

def global_batches(per_rank: list[list[tuple]]) -> list[tuple]:
    """The ranks' batches of each step joined in rank order: (images, labels, key hashes) of the global batch."""
    return [(torch.cat([b[0] for b in step]), torch.cat([b[1] for b in step]), [h for b in step for h in b[2]])
            for step in zip(*per_rank)]


def same_samples(a: list[tuple], b: list[tuple]) -> bool:
    """Whether two runs' global batches hold, step by step, the same samples with the same pixels and labels,
    whichever rank read each (another world deals the run's batches its own way: shards.plan.layout_runs)."""
    def by_key(batch):
        return {key: (batch[0][i], batch[1][i]) for i, key in enumerate(batch[2])}
    return len(a) == len(b) and all(
        by_key(x).keys() == by_key(y).keys() and len(x[2]) == len(y[2]) and
        all(torch.equal(by_key(x)[k][0], by_key(y)[k][0]) and torch.equal(by_key(x)[k][1], by_key(y)[k][1])
            for k in x[2]) for x, y in zip(a, b))


@pytest.mark.parametrize("world", [1, 4, 2])
def test_a_mid_epoch_state_of_two_ranks_resumes_on_any_world_size_that_keeps_the_global_batch(prepared, world,
                                                                                            caplog):
    """#52: a 2-rank run's state taken mid-epoch, loaded by loaders of 1, 4 or 2 ranks that keep the global
    batch (8): at every remaining global step the same samples, pixels and labels as the uninterrupted
    2-rank run's, each once over the ranks, in this epoch and the next (the run's layout persists)."""
    taken, uninterrupted = 2, []
    for rank in range(2):
        with loader(prepared, batch_size=4, rank=rank, world_size=2) as data:
            data.set_epoch(3)
            this_epoch = records(data.batches())
            data.set_epoch(4)
            uninterrupted.append((this_epoch, records(data.batches())))
    with loader(prepared, batch_size=4, rank=0, world_size=2) as data:
        data.set_epoch(3)
        batches = data.batches()
        for _ in range(taken):
            next(batches)
        state = data.state_dict()
        batches.close()
    resumed = []
    for rank in range(world):
        with loader(prepared, batch_size=8 // world, rank=rank, world_size=world) as data:
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="train"):
                data.load_state_dict(state)
            said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed on")]
            ranks = f"{world} rank{'s' * (world > 1)}"
            assert said == ([f"resumed on {ranks} from 2: per-rank batch 4 -> {8 // world}; the same global batches of "
                             "8 (the run's layout, 2 x 4, read on this world)"] if world != 2 and rank == 0 else [])
            data.set_epoch(3)
            this_epoch = records(data.batches())
            assert (data.state_dict()["canonical_world_size"], data.state_dict()["canonical_batch_size"]) == (2, 4)
            data.set_epoch(4)
            resumed.append((this_epoch, records(data.batches())))
    for epoch in (0, 1):
        want = global_batches([run[epoch] for run in uninterrupted])[taken if epoch == 0 else 0:]
        got = global_batches([run[epoch] for run in resumed])
        assert len(got) == len(want) > 0 and same_samples(got, want)
        keys = [h for batch in got for h in batch[2]]
        assert len(keys) == len(set(keys))


def test_a_mid_epoch_state_on_a_world_that_cannot_keep_the_global_batch_is_refused_naming_those_that_can(prepared):
    with loader(prepared, batch_size=8, rank=0, world_size=4) as data:
        data.set_epoch(1)
        batches = data.batches()
        next(batches)
        state = data.state_dict()
        batches.close()
    with loader(prepared, batch_size=8, rank=0, world_size=3) as three, pytest.raises(
            ResumeError, match=r"world_size: the state's 4, this loader's 3.*\(3 ranks cannot share the run's global "
                               r"batch of 32 equally: resume it on 1, 2, 4, 8, 16, 32 ranks\)"):
        three.load_state_dict(state)
    with loader(prepared, batch_size=8, rank=0, world_size=2) as two, pytest.raises(
            ResumeError, match=r"\(on 2 ranks, batch_size=16 keeps the state's global batch of 32"):
        two.load_state_dict(state)


def test_a_val_loader_in_timms_border_mode_letterboxes_in_its_means_colour(prepared):
    """#53: the library's val_crop_mode="border" pads with round(255 x mean): the loader's own mean."""
    with loader(prepared, "val", val_crop_mode="border", val_crop_fraction=1.0, mean=(0.5, 0.5, 0.5),
                std=(0.5, 0.5, 0.5)) as data:
        assert data.validation.fill == (128, 128, 128) and "CenterCropOrPad" in data.validation.describe()
        images = torch.cat([x for x, _ in data])
    assert images.shape[1:] == (3, SIZE, SIZE)
    padding = (128 / 255 - 0.5) / 0.5
    assert ((images - padding).abs() < 1e-6).all(dim=1).any()  # the sample's photos are not square: padded


def test_a_non_square_validation_size_gives_batches_of_that_height_and_width(prepared):
    """#53: val_crop=(height, width), as timm's input_size (3, 1024, 768) ends: (B, 3, height, width)."""
    with loader(prepared, "val", val_crop=(40, 24), val_crop_fraction=0.875, val_interpolation="bicubic") as data:
        assert data.validation.shape == (40, 24) and data.validation.resize_height == 45
        shapes = {tuple(x.shape[1:]) for x, _ in data}
    assert shapes == {(3, 40, 24)}
    with pytest.raises(ConfigError, match=r"val_crop=\(40, 24\), not square, with val_resize=48"):
        loader(prepared, "val", val_crop=(40, 24), val_resize=48)


def test_an_srun_task_pinned_to_fewer_cpus_than_it_was_given_is_told_once(prepared, monkeypatch, caplog):
    """A batch script's --cpus-per-task=2 that its srun did not pass on (Slurm 22.05 to 23.02): srun pinned the
    task to 1 CPU, and the loader decoded on one thread without a word. A real affinity mask (this thread's, as
    srun's pinning sets a task's), SLURM's variables as srun sets them: rank 0 is told once, for both its
    loaders, what to give srun; given the CPUs, nothing is said."""
    import os

    from conftest import as_one_srun_task
    from train.imagenet_loader import say_once

    as_one_srun_task(monkeypatch, SLURM_CPUS_PER_TASK="2")
    say_once.cache_clear()
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mask)})  # (this thread's: the loaders' threads it starts inherit it)
        with caplog.at_level(logging.WARNING, logger="train"):
            for split in ("train", "val"):
                with ImageNetLoader(prepared, split, batch_size=4, image_size=SIZE, device="cpu") as data:
                    assert data.threads == 1
    finally:
        os.sched_setaffinity(0, mask)
    told = [r.getMessage() for r in caplog.records if "SLURM_CPUS_PER_TASK" in r.getMessage()]
    assert told == ["this task may use 1 CPU (its affinity), not the 2 of SLURM_CPUS_PER_TASK: Slurm 22.05 to 23.02's "
                    "srun does not take the job's --cpus-per-task: its loader decodes on 1 thread, and a GPU waits on "
                    "it. Give srun --cpus-per-task=2 (or, on those versions, export "
                    "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK before srun)"]
    if len(mask) >= 2:  # srun --cpus-per-task=2: its two CPUs
        caplog.clear()
        say_once.cache_clear()
        os.sched_setaffinity(0, set(sorted(mask)[:2]))
        try:
            with caplog.at_level(logging.WARNING, logger="train"):
                ImageNetLoader(prepared, "val", batch_size=4, image_size=SIZE, device="cpu").close()
        finally:
            os.sched_setaffinity(0, mask)
        assert not [r for r in caplog.records if "SLURM_CPUS_PER_TASK" in r.getMessage()]


@pytest.mark.slow  # a prepare
def test_ranks_can_tell_by_the_states_dataset_id_whether_they_read_one_dataset(prepared, sources, tmp_path):
    """docs/library.md: the library makes no collective of its own to check that every rank reads the same dataset
    (python -m train does); the state's dataset_id is what ranks compare. A node's copy is the same dataset; one
    prepared with another seed, whose epochs ranks would not share out between them, is not."""
    from conftest import config
    from prepare.builder import prepare

    other_seed = tmp_path / "seed-1"
    prepare(config(sources["official"], other_seed, seed=1))
    ids = {}
    for name, root in (("prepared", prepared), ("copy", copy_dataset(prepared, tmp_path / "copy")),
                       ("seed 1", other_seed)):
        with ImageNetLoader(root, batch_size=4, image_size=SIZE, device="cpu") as data:
            ids[name] = data.state_dict()["dataset_id"]
    assert ids["copy"] == ids["prepared"] != ids["seed 1"]


# ---------------------------------------------------------------- batch buffers against the memory left

def test_batch_buffers_past_the_memory_left_are_refused_with_the_batch_that_fits():
    """A ring of 4 batches a rank, every rank of the node: refused one byte past the node's memory (or the job's
    limit), with the largest batch_size that fits; not checked where the memory is not known."""
    from train.loader_arguments import check_buffers_fit

    image = 224 * 224 * 3
    check_buffers_fit(256, 224, 4, 8, 4 * 256 * image * 8)  # exactly fits
    check_buffers_fit(10**9, 224, 4, 8, None)
    with pytest.raises(ConfigError) as refused:
        check_buffers_fit(256, 224, 4, 8, 4 * 256 * image * 8 - 1)
    assert str(refused.value).startswith("batch_size 256 of 224 px images needs 1.2 GB of batch buffers (4 batches "
                                         "a rank, 8 ranks on this node), more than the 1.2 GB of memory the node lets "
                                         "this job hold")
    assert str(refused.value).endswith(": lower batch_size to at most 255 or run fewer ranks a node")
    with pytest.raises(ConfigError) as refused:
        check_buffers_fit(2, 8192, 4, 1, 4 * 8192 * 8192 * 3 - 1)
    assert str(refused.value).endswith("(4 batches a rank, 1 rank on this node), more than the 0.8 GB of memory "
                                       "the node lets this job hold: lower image_size")


def test_python_m_train_says_the_buffers_refusal_with_its_flags():
    from train.loader_arguments import check_buffers_fit
    from train.run.flags import in_flags

    with pytest.raises(ConfigError) as refused:
        check_buffers_fit(512, 224, 4, 4, 10**9)
    assert in_flags(refused.value).startswith("--batch-size 512 of 224 px images needs 1.2 GB")
    assert in_flags(refused.value).endswith("lower --batch-size to at most 415 or run fewer ranks a node")


def test_the_memory_limit_is_the_nodes_and_the_cgroups_of_this_process_from_its_own_up():
    from shards.resources import cgroup_folders, mem_total

    assert mem_total("MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   21157020 kB\n") == 24000000 * 1024
    assert mem_total("MemFree: 1 kB\nMemTotal:\n") is None
    root = Path("/sys/fs/cgroup")
    v1 = "12:pids:/slurm/uid_1/job_7\n4:memory:/slurm/uid_1/job_7/step_0/task_0\n0::/\n"
    assert cgroup_folders(v1, root)[:5] == [root / "memory/slurm/uid_1/job_7/step_0/task_0",
                                            root / "memory/slurm/uid_1/job_7/step_0", root / "memory/slurm/uid_1/job_7",
                                            root / "memory/slurm/uid_1", root / "memory/slurm"]
    assert cgroup_folders("0::/system.slice/slurmstepd.scope/job_7\n", root) == [
        root / "system.slice/slurmstepd.scope/job_7", root / "unified/system.slice/slurmstepd.scope/job_7",
        root / "system.slice/slurmstepd.scope", root / "unified/system.slice/slurmstepd.scope",
        root / "system.slice", root / "unified/system.slice", root, root / "unified"]
    assert cgroup_folders("5:cpu,memory:/a\n", root) == [root / "memory/a", root / "memory"]


IN_A_CGROUP = """
import json, os, sys
from pathlib import Path
Path(sys.argv[1], "cgroup.procs").write_text(str(os.getpid()))  # this process, from now on under its limit
from shards.resources import memory_limit
from train import ConfigError, ImageNetLoader
said = {"limit": memory_limit()}
with ImageNetLoader(sys.argv[2], "train", batch_size=8, image_size=64, device="cpu", workers=1) as data:
    said["small"] = len(next(iter(data))[1])  # (images, labels)
try:
    ImageNetLoader(sys.argv[2], "train", batch_size=16, image_size=4096, device="cpu", workers=1).close()
except ConfigError as refused:
    said["large"] = str(refused)
print(json.dumps(said))
"""


@contextlib.contextmanager
def a_memory_limit(limit: int):
    """A real memory cgroup (v1 or v2, beside this process's own) limited to `limit` bytes, for a process to put
    itself in, as a SLURM job's --mem under TaskPlugin=task/cgroup does; skipped where none can be made."""
    from shards.resources import cgroup_folders

    folders = [f for f in cgroup_folders(Path("/proc/self/cgroup").read_text(), Path("/sys/fs/cgroup"))
               if (f / "memory.max").exists() or (f / "memory.limit_in_bytes").exists()]
    if os.geteuid() != 0 or not folders:
        pytest.skip("needs root and a memory cgroup to make a limited one")
    folder = folders[0] / f"pytest-{os.getpid()}-{time.monotonic_ns()}"
    folder.mkdir()
    try:
        v2 = (folder / "memory.max").exists()
        (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit))
        yield folder
    finally:
        folder.rmdir()


@pytest.mark.slow
def test_a_loader_whose_buffers_pass_the_jobs_memory_limit_is_refused_naming_the_batch_that_fits(prepared, tmp_path):
    """In a real cgroup of 1 GiB (a job's --mem): batch_size 16 of 4096 px images wants 3.2 GB of buffers. They were
    made (their pages untouched until decoded into), and the kernel killed the process at its first batches. A
    small batch in the same process is made and read."""
    import warm

    script = tmp_path / "in_a_cgroup.py"
    script.write_text(IN_A_CGROUP)
    with a_memory_limit(1 << 30) as folder:
        done = warm.run(str(script), folder, prepared, timeout=120)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["limit"] == 1 << 30 and said["small"] == 8
    fits = (1 << 30) // (4 * 4096 * 4096 * 3)
    assert said["large"].startswith("batch_size 16 of 4096 px images needs 3.2 GB of batch buffers (4 batches a rank, "
                                    "1 rank on this node), more than the ")
    assert said["large"].endswith(f"more than the 1.1 GB of memory the node lets this job hold: lower batch_size to "
                                  f"at most {fits}")
