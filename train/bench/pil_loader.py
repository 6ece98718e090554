"""Today's PIL path, kept as a benchmark peer: the loader as it was before the crop-region decoder.

DataLoader worker processes, each reading its own run of the epoch's batches (`worker_plan`) with
webdataset's tar reader, a shuffle buffer of encoded samples, torchvision's RandomResizedCrop
parameters drawn per sample from a seeded torch generator, a full JPEG decode with pillow-simd
(DCT-scaled by `draft` when the crop allows) and a resize with box; decoded images are pickled
back to the training process and stacked there. The benchmark runs it beside the new loader on
the same shards; the product does not use it.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchvision.transforms import RandomResizedCrop
from webdataset.tariterators import group_by_keys, tar_file_expander

from shards.manifest import Manifest
from shards.plan import ReadPlan, run_plan, seeded_rng, shard_permutation, steps_per_epoch
from train.shard_index import key_hash
from train.decoder import pil_decode_crop
from train.transforms import RATIO, SCALE


def batches_of_worker(steps: int, workers: int, worker: int) -> int:
    """Batches worker `worker` yields in an epoch of `steps` batches: the DataLoader takes batches
    from its workers round-robin, so batch j comes from worker j % workers (0 workers: the main
    process, one stream)."""
    w = max(1, workers)
    return steps // w + (worker < steps % w)


def worker_plan(shard_sizes: list[int], *, epoch: int, seed: int, workers: int, worker: int, batch_size: int,
                shuffle_buffer: int) -> ReadPlan:
    """What DataLoader worker `worker` of a one-rank run reads: a contiguous run of whole batches of
    the epoch's samples (the shards permuted as shards.plan.train_plan permutes them), emitted
    through a shuffle buffer of its own."""
    steps = steps_per_epoch(sum(shard_sizes), 1, batch_size)
    start = sum(batches_of_worker(steps, workers, v) for v in range(worker)) * batch_size
    count = batches_of_worker(steps, workers, worker) * batch_size
    return run_plan(shard_sizes, shard_permutation(len(shard_sizes), seed, epoch), start, count, shuffle_buffer,
                    seeded_rng(seed, epoch, 0, worker))


def sample_offsets(path: Path) -> list[int]:
    """Byte offset of each sample's first member in a shard, from the tar headers alone."""
    import tarfile

    offsets, last = [], None
    with tarfile.open(path, "r:") as tar:  # random-access mode: seeks over member data
        for member in tar:
            key = member.name.split(".", 1)[0]
            if key != last:
                offsets.append(member.offset)
                last = key
    return offsets


def read_piece(path: Path, start: int, stop: int) -> Iterator[dict]:
    """Samples [start, stop) of one shard, via webdataset's tar reader, seeking to `start`."""
    with open(path, "rb") as stream:
        if start > 0:
            stream.seek(sample_offsets(path)[start])
        files = tar_file_expander([{"url": str(path), "stream": stream}])
        for index, sample in enumerate(group_by_keys(files), start=start):
            if index >= stop:
                return
            yield sample


def reorder(samples: Iterable[dict], order: tuple[int, ...]) -> Iterator[dict]:
    """Emit `samples` (positions 0, 1, ...) in `order`; the plan guarantees that order[k] is among
    the first k + buffer samples read."""
    held = {}
    source = enumerate(samples)
    for position in order:
        while position not in held:
            index, sample = next(source)
            held[index] = sample
        yield held.pop(position)


@contextmanager
def seeded_cpu_rng(seed: int):
    """Seed torch's CPU generator for a block, then restore it."""
    generator = torch.default_generator
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)


class TrainTransform:
    """JPEG bytes -> (size, size, 3) uint8: RandomResizedCrop(size) + horizontal flip, with PIL."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed

    def crop_and_flip(self, image: Image.Image, epoch: int, key: str) -> tuple[tuple[int, int, int, int], bool]:
        generator_seed = seeded_rng(self.seed, "augment", epoch, key).getrandbits(63)
        with seeded_cpu_rng(generator_seed):
            top, left, h, w = RandomResizedCrop.get_params(image, list(SCALE), list(RATIO))
            flip = bool(torch.rand(1) < 0.5)
        return (left, top, left + w, top + h), flip

    def __call__(self, data: bytes, epoch: int, key: str) -> np.ndarray:
        box, flip = self.crop_and_flip(Image.open(io.BytesIO(data)), epoch, key)  # reads the header only
        return pil_decode_crop(data, box, flip, self.size).copy()  # writable, owned: safe to hand to torch


class PlannedShards(IterableDataset):
    """The samples one DataLoader worker of epoch `epoch` reads, as its plan says, decoded."""

    def __init__(self, shard_paths: list[Path], sizes: list[int], epoch: int, workers: int, batch: int,
                 transform: TrainTransform, shuffle_buffer: int = 1000):
        self.shard_paths, self.sizes, self.epoch, self.workers = shard_paths, sizes, epoch, workers
        self.batch, self.transform, self.shuffle_buffer = batch, transform, shuffle_buffer

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info else 0
        plan = worker_plan(self.sizes, epoch=self.epoch, seed=0, workers=self.workers, worker=worker,
                           batch_size=self.batch, shuffle_buffer=self.shuffle_buffer)
        samples = (s for p in plan.pieces for s in read_piece(self.shard_paths[p.shard], p.start, p.stop))
        for sample in reorder(samples, plan.order):
            key = sample["__key__"]
            yield torch.from_numpy(self.transform(sample["jpg"], self.epoch, key)), int(sample["cls"]), key_hash(key)


class Epochs(IterableDataset):
    """Consecutive epochs in one DataLoader, so that its workers start once."""

    def __init__(self, epochs: Iterable[PlannedShards]):
        self.epochs = epochs

    def __iter__(self):
        for epoch in self.epochs:
            yield from epoch


def pil_batches(manifest: Manifest, root: Path, workers: int, batch: int, size: int, epochs: int = 1000) -> DataLoader:
    """Batches (uint8 NHWC, labels, key hashes) of the previous loader, epoch after epoch."""
    shards = manifest.splits["train"].shards
    paths, sizes = [root / s.name for s in shards], [s.samples for s in shards]
    dataset = Epochs([PlannedShards(paths, sizes, e, max(1, workers), batch, TrainTransform(size, seed=0))
                      for e in range(epochs)])
    return DataLoader(dataset, batch_size=batch, num_workers=workers, prefetch_factor=4 if workers else None)
