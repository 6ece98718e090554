"""The loader: executes the read plan of `shards.plan` with webdataset's tar reader.

Stages, each a generator over the previous one (webdataset's style):

    read_pieces   samples [start, stop) of each planned shard piece, seeking to `start`
    reorder       the planned shuffle-buffer order; drops already-consumed samples undecoded
    decode        JPEG bytes -> uint8 HWC array, label, key hash

and `PlannedShards`, an IterableDataset that asks the plan what its rank and worker read. The
DataLoader batches (uint8 NHWC), pins memory; `to_device` normalises on the device, and
`DeviceBatches` does that for the next batches in a background thread (on its own CUDA stream on a
GPU) while the current one trains.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import queue
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from webdataset.tariterators import group_by_keys, tar_file_expander

from shards.manifest import DatasetNotReady
from shards.plan import WorkerPlan, consumed_batches, train_plan, val_plan, worker_count
from train.transforms import (
    EncodedCrop, TrainCrop, TrainTransform, ValCrop, ValTransform, crop_resize_flip, decode_on_device,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def sample_offsets(path: Path) -> list[int]:
    """Byte offset of each sample's first member in a shard, from the tar headers alone."""
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


def read_pieces(plan: WorkerPlan, shard_paths: list[Path]) -> Iterator[dict]:
    for piece in plan.pieces:
        yield from read_piece(shard_paths[piece.shard], piece.start, piece.stop)


def reorder(samples: Iterable[dict], order: tuple[int, ...], skip: int) -> Iterator[dict]:
    """Emit `samples` (positions 0, 1, ...) in `order`, the first `skip` emissions left out.

    The plan guarantees that order[k] is among the first k + buffer samples read, so at most a
    buffer's worth is held. Left-out samples are dropped as they are read, never decoded.
    """
    skipped = set(order[:skip])
    held = {}
    source = enumerate(samples)
    for position in order[skip:]:
        while position not in held:
            try:
                index, sample = next(source)
            except StopIteration:
                raise DatasetNotReady("a shard holds fewer samples than the manifest lists: the dataset is "
                                      "damaged; rerun prepare with --force on this node") from None
            if index not in skipped:
                held[index] = sample
        yield held.pop(position)


KEY_HASH_BITS = 40  # sums of a batch, and all-reduced sums over ranks, stay far below 2**63


def key_hash(key: str) -> int:
    """A 40-bit hash of a sample key: summed over an epoch, it tells which samples were read."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=5).digest(), "big")


def decode(samples: Iterable[dict], transform: Callable, epoch: int) -> Iterator[tuple]:
    """(image, label, key hash): the image a uint8 HWC tensor, or an EncodedCrop for device decode."""
    for sample in samples:
        key = sample["__key__"]
        image = transform(sample["jpg"], epoch, key)
        yield (torch.from_numpy(image) if isinstance(image, np.ndarray) else image), int(sample["cls"]), key_hash(key)


class EncodedBatch(NamedTuple):
    """A batch for device decode: every image's JPEG bytes in one flat tensor (one transfer between
    processes and one pinned copy per batch, not one per image), crop boxes, flips."""
    data: torch.Tensor  # uint8, the files' bytes end to end
    offsets: torch.Tensor  # int64 (n + 1,): image i is data[offsets[i]:offsets[i + 1]]
    boxes: torch.Tensor
    flips: torch.Tensor
    size: int

    @property
    def jpegs(self) -> list[torch.Tensor]:
        bounds = self.offsets.tolist()
        return [self.data[start:stop] for start, stop in zip(bounds, bounds[1:])]


def collate(batch: list[tuple]) -> tuple:
    """(images, labels, key hashes): images stacked uint8 NHWC, or an EncodedBatch."""
    images, labels, hashes = zip(*batch)
    if isinstance(images[0], EncodedCrop):
        sizes = torch.tensor([0] + [len(i.data) for i in images])
        data = torch.frombuffer(bytearray(b"".join(i.data for i in images)), dtype=torch.uint8)  # one copy, writable
        stacked = EncodedBatch(data, sizes.cumsum(0), torch.stack([i.box for i in images]),
                               torch.tensor([i.flip for i in images]), images[0].size)
    else:
        stacked = torch.stack(images)
    return stacked, torch.tensor(labels), torch.tensor(hashes)


@dataclass(frozen=True, kw_only=True)
class PlanArgs:
    """What the read plan needs besides the worker id (see shards.plan)."""
    split: str
    shard_sizes: list[int]
    epoch: int
    seed: int
    world_size: int
    rank: int
    num_workers: int
    batch_size: int
    shuffle_buffer: int
    start_step: int = 0  # resume: batches of this epoch the rank already took


def plan_for(args: PlanArgs, worker: int) -> WorkerPlan:
    if args.split == "val":
        return val_plan(args.shard_sizes, world_size=args.world_size, rank=args.rank,
                        num_workers=args.num_workers, worker=worker)
    return train_plan(args.shard_sizes, epoch=args.epoch, seed=args.seed, world_size=args.world_size,
                      rank=args.rank, num_workers=args.num_workers, worker=worker, batch_size=args.batch_size,
                      shuffle_buffer=args.shuffle_buffer)


class PlannedShards(IterableDataset):
    """The samples this rank's DataLoader worker reads, as its plan says, decoded."""

    def __init__(self, shard_paths: list[Path], args: PlanArgs, transform: Callable):
        self.shard_paths, self.args, self.transform = shard_paths, args, transform

    def __iter__(self):
        info = get_worker_info()
        # The DataLoader asks its workers round-robin starting from worker 0; a loader resumed at
        # step k must start from plan worker k % W to hand out batches in the original order.
        worker = ((info.id if info else 0) + self.args.start_step) % worker_count(self.args.num_workers)
        plan = plan_for(self.args, worker)
        skip = consumed_batches(self.args.start_step, self.args.num_workers, worker) * self.args.batch_size
        samples = read_pieces(plan, self.shard_paths)
        return decode(reorder(samples, plan.order, skip), self.transform, self.args.epoch)


def make_transform(split: str, decode: str, image_size: int, seed: int) -> Callable:
    """Train: RandomResizedCrop + flip; val: resize + centre crop. With --decode gpu the workers
    only draw the crop (and flip) and the device decodes."""
    if split == "train":
        return (TrainCrop if decode == "gpu" else TrainTransform)(image_size, seed)
    return (ValCrop if decode == "gpu" else ValTransform)(image_size)


def planned_loader(shard_paths: list[Path], args: PlanArgs, *, image_size: int, decode: str,
                   pin_memory: bool) -> DataLoader:
    """The batches this rank reads in one epoch of `args.split`, decoded by `args.num_workers` workers."""
    transform = make_transform(args.split, decode, image_size, args.seed)
    return make_loader(PlannedShards(shard_paths, args, transform), args.batch_size, args.num_workers, pin_memory)


def make_loader(dataset: PlannedShards, batch_size: int, num_workers: int, pin_memory: bool) -> DataLoader:
    """Batches of (uint8 images NHWC, labels, key hashes). Train plans give every worker whole
    batches, so no batch is partial; validation's last batch per worker may be."""
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, pin_memory=pin_memory,
                      collate_fn=collate, prefetch_factor=4 if num_workers else None, persistent_workers=False)


@functools.lru_cache(maxsize=None)
def normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet mean and std in 0-255 units, made once per device: a tensor built from Python
    numbers every step would be a blocking host-to-device copy on the hot path."""
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
    return mean, std


def to_device(images: torch.Tensor | EncodedBatch, device: torch.device, channels_last: bool = True) -> torch.Tensor:
    """uint8 NHWC on the host -> normalised float NCHW on the device (channels_last memory: a free
    view); an EncodedBatch is decoded, cropped, resized and flipped on the device first."""
    if isinstance(images, EncodedBatch):
        decoded = decode_on_device(images.jpegs, device)
        images = crop_resize_flip(decoded, images.boxes, images.flips, images.size)
    else:
        images = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
    mean, std = normalisation(device)
    images = images.sub_(mean).div_(std)  # in place: `images` is already a float copy of the batch
    return images.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


class DeviceBatches:
    """(x, y, key hashes) on the device, `depth` batches ahead of the training step.

    A background thread takes batches from the loader and runs `to_device` on them (the copy of
    pinned uint8, or the whole --decode gpu decode) on a CUDA stream of its own, so that work
    overlaps the model's step instead of stalling it: on the model's stream a pageable or
    in-order copy makes the GPU idle while the host waits for it. The consumer's stream waits on
    an event per batch. Use as a context manager: leaving it (a finished epoch, a preemption
    break, an error) stops the thread and drops the batches read ahead.
    """

    _END = object()

    def __init__(self, batches: Iterable[tuple], device: torch.device, channels_last: bool = True, depth: int = 2):
        self.device, self.channels_last = device, channels_last
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.batches = batches

    def __enter__(self) -> "DeviceBatches":
        # iter() here, in the calling thread: a DataLoader forks its workers now, never from ours
        self.thread = threading.Thread(target=self._fill, args=(iter(self.batches),), name="device-batches",
                                       daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()

    def _put(self, item) -> bool:
        """Queue `item` unless the consumer has left; False once it has."""
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, batches: Iterator[tuple]) -> None:
        try:
            with torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext():
                for images, labels, hashes in batches:
                    x = to_device(images, self.device, self.channels_last)
                    y = labels.to(self.device, non_blocking=True)
                    ready = None
                    if self.stream:
                        ready = torch.cuda.Event()
                        ready.record(self.stream)
                    if not self._put((x, y, hashes, ready)):
                        return
        except BaseException as error:  # handed to the consumer, raised there
            self._put(error)
            return
        self._put(self._END)

    def __iter__(self) -> Iterator[tuple]:
        while True:
            item = self.queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            x, y, hashes, ready = item
            if ready is not None:
                consumer = torch.cuda.current_stream(self.device)
                consumer.wait_event(ready)
                x.record_stream(consumer)  # made on our stream, freed after the consumer's use
                y.record_stream(consumer)
            yield x, y, hashes
