"""The loader: executes the read plan of `shards.plan` over memory-mapped shards, in threads.

    ShardSet       a split's shards, memory-mapped; where each sample's JPEG and label lie and its
                   key's hash, read once per shard from its tar headers (natively) when first needed
    Loader         per epoch, the plan's samples in the plan's order, cut into batches; a thread
                   pool takes each batch in chunks (one per thread): reads the headers, draws every
                   crop and flip of the chunk in a few numpy calls, and decodes it with the
                   crop-region decoder (train/decoder.py, GIL released) straight into a ring of
                   pinned batch buffers. No worker processes, no pickling of images.
    DeviceBatches  the next batches copied (or, with --decode gpu, decoded: train/device_decode.py)
                   onto the device in a background thread, on a CUDA stream of its own, while the
                   current one trains

Every rank reads its plan as one stream (worker 0 of 1), so the pixels of every batch depend only
on (seed, epoch, rank, world size, batch size), never on the thread count, and a resume at step k
starts at sample k x batch size of the same order.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import io
import logging
import mmap
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np
import torch

from shards.manifest import DatasetNotReady, Manifest
from shards.plan import WorkerPlan, train_plan, val_plan
from shards.resources import raise_open_file_limit
from train import decoder
from train.decoder import Images
from train.device_decode import DeviceDecoder, crop_resize_flip
from train.transforms import crops, decode_windows

log = logging.getLogger("train")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
KEY_HASH_BITS = 40  # sums of a batch, and all-reduced sums over ranks, stay far below 2**63
CHUNK = (4, 32)  # images per decode task, at least and at most: see chunk_size


def key_hash64(key: bytes | str) -> int:
    """A 64-bit hash of a sample key: the seed of its augmentation."""
    data = key.encode() if isinstance(key, str) else bytes(key)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def key_hash(key: bytes | str) -> int:
    """A 40-bit hash of a sample key: summed over an epoch, it tells which samples were read."""
    return key_hash64(key) >> (64 - KEY_HASH_BITS)


# ---------------------------------------------------------------- the shards, indexed once

class ShardSet:
    """A split's shards, memory-mapped, with a table of every sample (global id = the shard's first
    id + the sample's position in it): where its JPEG lies, its label, its key's hash. A shard is
    indexed when a batch first needs it: the first epoch spreads the cost (about 10 us a sample)."""

    def __init__(self, paths: list[Path], sizes: list[int]):
        self.paths, self.sizes = list(paths), list(sizes)
        self.first = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        total = int(self.first[-1])
        self.shard = np.repeat(np.arange(len(paths), dtype=np.int32), sizes)
        self.key_at, self.jpg_at, self.jpg_len = (np.zeros(total, np.int64) for _ in range(3))
        self.labels = np.zeros(total, np.int64)
        self.hashes = np.zeros(total, np.uint64)
        self.maps: list[mmap.mmap | None] = [None] * len(paths)
        self.indexed = np.zeros(len(paths), bool)
        raise_open_file_limit()  # a map keeps its file open: one per shard

    @classmethod
    def of(cls, root: Path, manifest: Manifest, split: str) -> "ShardSet":
        """The shards of `split` of the dataset at `root`, as its manifest lists them."""
        shards = manifest.splits[split].shards
        return cls([Path(root) / s.name for s in shards], [s.samples for s in shards])

    def ids(self, plan: WorkerPlan) -> np.ndarray:
        """Global sample ids of a plan, in its emission order."""
        runs = [np.arange(p.start, p.stop, dtype=np.int64) + self.first[p.shard] for p in plan.pieces]
        read = np.concatenate(runs) if runs else np.zeros(0, np.int64)
        return read[np.asarray(plan.order, dtype=np.int64)]

    def ensure_indexed(self, ids: np.ndarray) -> None:
        shards = self.shard[ids]
        if self.indexed[shards].all():
            return
        for shard in np.unique(shards[~self.indexed[shards]]).tolist():
            self.index(shard)

    def index(self, shard: int) -> None:
        path, count = self.paths[shard], self.sizes[shard]
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            rows = decoder.tar_index(data)
        except ValueError as exn:
            raise DatasetNotReady(f"shard {path} is damaged: {exn}. Rerun prepare with --verify on this node: it "
                                  "rebuilds damaged shards") from None
        if len(rows) != count or (rows[:, 2] < 0).any() or (rows[:, 4] < 0).any():
            raise DatasetNotReady(f"shard {path} holds {len(rows)} samples (some without .jpg or .cls), the "
                                  f"manifest lists {count}: the dataset is damaged; rerun prepare with --verify "
                                  "on this node: it rebuilds damaged shards")
        at = slice(self.first[shard], self.first[shard] + count)
        self.key_at[at], self.jpg_at[at], self.jpg_len[at] = rows[:, 0], rows[:, 2], rows[:, 3]
        self.labels[at] = [int(data[a:a + n]) for a, n in zip(rows[:, 4].tolist(), rows[:, 5].tolist())]
        self.hashes[at] = [key_hash64(data[a:a + n]) for a, n in zip(rows[:, 0].tolist(), rows[:, 1].tolist())]
        self.maps[shard] = data
        self.indexed[shard] = True

    def images(self, ids: np.ndarray) -> Images:
        return Images(tuple(self.maps), self.shard[ids], self.jpg_at[ids], self.jpg_len[ids])

    def describe(self, sample: int) -> str:
        """'train/train-000003.tar: n01440764_10026', for messages."""
        shard = int(self.shard[sample])
        at = int(self.key_at[sample])
        key = bytes(self.maps[shard][at:at + 100]).split(b"\0", 1)[0].decode(errors="replace").split(".", 1)[0]
        return f"{self.paths[shard]}: {key}"

    def close(self) -> None:
        for data in self.maps:
            if data is not None:
                data.close()
        self.maps = [None] * len(self.paths)
        self.indexed[:] = False


# ---------------------------------------------------------------- what the read plan asks for

@dataclass(frozen=True, kw_only=True)
class PlanArgs:
    """What the read plan needs besides the shard sizes (see shards.plan); the rank reads it as one stream."""
    split: str
    epoch: int
    seed: int
    world_size: int
    rank: int
    batch_size: int
    shuffle_buffer: int
    start_step: int = 0  # resume: batches of this epoch the rank already took


def plan_for(args: PlanArgs, shard_sizes: list[int]) -> WorkerPlan:
    if args.split == "val":
        return val_plan(shard_sizes, world_size=args.world_size, rank=args.rank, num_workers=1, worker=0)
    return train_plan(shard_sizes, epoch=args.epoch, seed=args.seed, world_size=args.world_size, rank=args.rank,
                      num_workers=1, worker=0, batch_size=args.batch_size, shuffle_buffer=args.shuffle_buffer)


def chunk_size(batch_size: int, threads: int) -> int:
    """Images per decode task: each batch spread over every thread. Tasks in flight are capped by
    the ring (its batches x tasks per batch), and threads beyond them idle: fixed chunks of 32 in
    batches of 64 kept 8 of 15 threads busy. At least CHUNK[0] images keep a task's own cost (a
    header pass and a few numpy calls, tens of microseconds) small against its decodes."""
    return max(CHUNK[0], min(CHUNK[1], -(-batch_size // threads)))


# ---------------------------------------------------------------- batches

class EncodedBatch(NamedTuple):
    """A batch for --decode gpu: every image's bytes end to end in one array, the window of each
    to decode (transforms.decode_windows), its crop box inside that window, and its flip."""
    data: np.ndarray  # uint8, the files' bytes end to end
    offsets: np.ndarray  # int64 (n + 1,): image i is data[offsets[i]:offsets[i + 1]]
    windows: np.ndarray  # int32 (n, 4): left, top, right, bottom in the image
    boxes: torch.Tensor  # float32 (n, 4): the crop, in the window's pixels
    flips: torch.Tensor  # bool (n,)
    size: int
    describe: Callable[[int], str]  # image i's shard and key, for messages

    @property
    def jpegs(self) -> list[np.ndarray]:
        bounds = self.offsets.tolist()
        return [self.data[start:stop] for start, stop in zip(bounds, bounds[1:])]


class Batch(NamedTuple):
    """What the loader yields: images (uint8 NHWC, a view of a pinned ring buffer, valid until the
    next batch is asked for; or an EncodedBatch), labels, key hashes, and the samples left out."""
    images: torch.Tensor | EncodedBatch
    labels: torch.Tensor  # int64
    key_hashes: torch.Tensor  # int64, KEY_HASH_BITS bits
    bad: tuple = ()  # (sample, why) of the samples that failed to decode, left out of this batch


class InFlight(NamedTuple):
    """A batch whose decode is queued: its samples, chunks, their futures, its ring slot."""
    shards: ShardSet
    ids: np.ndarray
    chunks: list
    futures: list
    slot: int


@dataclass
class Chunk:
    """Up to chunk_size images of a batch, one task, for slots [first, first + n): the task reads their
    headers, draws their crops and, with --decode cpu, decodes them."""
    first: int
    images: Images
    hashes: np.ndarray
    dims: np.ndarray | None = None  # int32 (n, 2): width, height
    boxes: np.ndarray | None = None  # float32 (n, 4)
    flips: np.ndarray | None = None  # bool (n,)
    status: np.ndarray | None = None  # per image: decoder.DECODED (or, before the decode, fine so far) or why not
    fallbacks: int = 0  # decoded by the PIL path


class Loader:
    """Batches of the splits' shards for this rank, decoded by `threads` threads (see the module doc).

    `epoch()` returns an epoch's batches of one split. The thread pool and the pinned ring of
    `ring` batch buffers serve every split (one epoch at a time) and live as long as the Loader:
    `close()` it (or use it as a context manager); it closes the shard sets too."""

    def __init__(self, splits: dict[str, ShardSet], *, batch_size: int, image_size: int, threads: int,
                 decode: str = "cpu", pin_memory: bool = False, ring: int = 4):
        self.splits, self.batch_size, self.size, self.decode = splits, batch_size, image_size, decode
        self.threads, self.pin_memory, self.ring_size = max(1, threads), pin_memory, ring
        self.chunk = chunk_size(batch_size, self.threads)
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="decode")
        self.ring: list[torch.Tensor] = []
        self.fallbacks = 0  # images decoded by the PIL path, over the Loader's life

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for shards in self.splits.values():
            shards.close()

    def describe(self) -> str:
        return f"decoder: {decoder.NAME}, {self.threads} threads" if self.decode == "cpu" else \
            f"decoder: on the device (--decode gpu); headers, marker checks and crops by {self.threads} threads"

    def memory_bytes(self) -> int:
        """What the loader holds: its ring of batch buffers and the splits' sample tables."""
        tables = sum(a.nbytes for s in self.splits.values()
                     for a in (s.shard, s.key_at, s.jpg_at, s.jpg_len, s.labels, s.hashes))
        return sum(t.numel() for t in self.ring) + tables

    def epoch(self, args: PlanArgs) -> Iterator[Batch]:
        """The rank's batches of an epoch from `args.start_step` on: whole batches in training,
        and a last partial one in validation."""
        shards = self.splits[args.split]
        ids = shards.ids(plan_for(args, shards.sizes))[args.start_step * args.batch_size:]
        batches = [ids[i:i + self.batch_size] for i in range(0, len(ids), self.batch_size)]
        augment = (args.seed, args.epoch) if args.split == "train" else None
        return self._decoded(shards, batches, augment)

    def _decoded(self, shards: ShardSet, batches: list[np.ndarray], augment: tuple[int, int] | None
                 ) -> Iterator[Batch]:
        """Batch k decodes into ring slot k mod R; R - 1 batches decode ahead of the one the caller
        holds, and a slot is reused only once the caller has asked for the batch after it."""
        if not self.ring and self.decode == "cpu":
            self.ring = [torch.empty((self.batch_size, self.size, self.size, 3), dtype=torch.uint8,
                                     pin_memory=self.pin_memory) for _ in range(self.ring_size)]
        in_flight: collections.deque[InFlight] = collections.deque()
        submitted = 0
        try:
            for k in range(len(batches)):
                while submitted < len(batches) and submitted < k + self.ring_size:
                    in_flight.append(self._submit(shards, batches[submitted], submitted % self.ring_size, augment))
                    submitted += 1
                yield self._finish(in_flight.popleft())
        finally:
            for batch in in_flight:  # the caller left early: stop what is queued
                for f in batch.futures:
                    f.cancel()
            for batch in in_flight:
                for f in batch.futures:
                    if not f.cancelled():
                        f.exception()  # wait: a running task still writes into its ring slot

    def _submit(self, shards: ShardSet, ids: np.ndarray, slot: int, augment) -> InFlight:
        """Queue the batch's tasks, a chunk each: headers, crops drawn for the chunk at once (a few
        numpy calls), and with --decode cpu the decode into the batch's ring slot."""
        shards.ensure_indexed(ids)
        images, hashes = shards.images(ids), shards.hashes[ids]
        chunks = [Chunk(first, images[first:first + self.chunk], hashes[first:first + self.chunk])
                  for first in range(0, len(ids), self.chunk)]
        if self.decode == "cpu":
            futures = [self.pool.submit(self._decode_chunk, c, self.ring[slot].numpy(), augment) for c in chunks]
        else:
            futures = [self.pool.submit(self._draw_crops, c, augment, True) for c in chunks]
        return InFlight(shards, ids, chunks, futures, slot)

    def _draw_crops(self, chunk: Chunk, augment, check_markers: bool = False) -> None:
        """Sizes from the headers (PIL's for what is not a JPEG), then every crop of the chunk.
        With `check_markers` (--decode gpu) a JPEG whose marker structure is broken is CORRUPT."""
        chunk.dims, chunk.status = decoder.image_sizes(chunk.images, check_markers)
        for i in np.flatnonzero(chunk.status == decoder.NOT_JPEG).tolist():
            chunk.status[i] = self._pil_size(chunk, i)
        chunk.boxes, chunk.flips = crops(chunk.hashes, chunk.dims[:, 0], chunk.dims[:, 1], augment)

    def _pil_size(self, chunk: Chunk, i: int) -> int:
        """The size of an image that is not a JPEG, from PIL: NOT_JPEG (PIL decodes it), or CORRUPT."""
        from PIL import Image

        try:
            chunk.dims[i] = Image.open(io.BytesIO(chunk.images.data(i))).size
        except (OSError, ValueError, SyntaxError):
            return decoder.CORRUPT
        return decoder.NOT_JPEG

    def _decode_chunk(self, chunk: Chunk, out: np.ndarray, augment) -> None:
        self._draw_crops(chunk, augment)
        fine = chunk.status == decoder.DECODED
        decoded = decoder.decode_crops(chunk.images, chunk.boxes, chunk.flips, out, chunk.first)
        chunk.status = np.where(fine, decoded, chunk.status)
        for i in np.flatnonzero(np.isin(chunk.status, (decoder.REFUSED, decoder.NOT_JPEG))).tolist():
            chunk.status[i] = self._pil_fallback(chunk, i, out)

    def _pil_fallback(self, chunk: Chunk, i: int, out: np.ndarray) -> int:
        """The PIL path for an image the native decoder refuses: same crop, same slot."""
        try:
            out[chunk.first + i] = decoder.pil_decode_crop(chunk.images.data(i), tuple(chunk.boxes[i].tolist()),
                                                           bool(chunk.flips[i]), self.size)
        except (OSError, ValueError, SyntaxError):
            return decoder.CORRUPT
        chunk.fallbacks += 1
        return decoder.DECODED

    def _finish(self, batch: InFlight) -> Batch:
        shards, ids, chunks, futures, slot = batch
        for f in futures:
            f.result()  # a task's exception (a bug) is raised here, in the caller
        status = np.concatenate([c.status for c in chunks])
        if self.decode == "gpu":  # what is not a JPEG goes to the device decoder too (or its PIL fallback)
            status = np.where(status == decoder.NOT_JPEG, decoder.DECODED, status)
        fallbacks = sum(c.fallbacks for c in chunks)
        if fallbacks:
            if not self.fallbacks:
                log.warning("decoder: %d image(s) of this batch decoded by the PIL path (a JPEG the crop-region "
                            "decoder refuses: CMYK, 12-bit, ...); further ones are only counted", fallbacks)
            self.fallbacks += fallbacks
        good = status == decoder.DECODED
        keep = np.flatnonzero(good)
        bad = tuple((shards.describe(int(ids[i])), decoder.WHY.get(int(status[i]), "undecodable"))
                    for i in np.flatnonzero(~good).tolist())
        labels = torch.from_numpy(shards.labels[ids[keep]])
        hashes = torch.from_numpy((shards.hashes[ids[keep]] >> np.uint64(64 - KEY_HASH_BITS)).astype(np.int64))
        if self.decode == "gpu":
            return Batch(self._encoded(shards, ids[keep], chunks, keep), labels, hashes, bad)
        images = self.ring[slot]
        if len(keep) < len(ids):  # close the gaps, in order: the batch stays one view of its slot
            images[:len(keep)] = images[torch.from_numpy(keep)]
        return Batch(images[:len(keep)], labels, hashes, bad)

    def _encoded(self, shards: ShardSet, kept: np.ndarray, chunks: list[Chunk], keep: np.ndarray) -> EncodedBatch:
        """The kept samples' bytes end to end in one array, with their windows and crops."""
        images = shards.images(kept)
        data = np.empty(int(images.lengths.sum()), np.uint8)
        decoder.gather(images, data)
        dims = np.concatenate([c.dims for c in chunks])[keep]
        boxes = np.concatenate([c.boxes for c in chunks])[keep]
        windows, inside = decode_windows(boxes, dims[:, 0], dims[:, 1], self.size)
        flips = torch.from_numpy(np.concatenate([c.flips for c in chunks])[keep])
        return EncodedBatch(data, np.concatenate([[0], np.cumsum(images.lengths)]), windows, torch.from_numpy(inside),
                            flips, self.size, lambda i: shards.describe(int(kept[i])))


# ---------------------------------------------------------------- onto the device

@functools.lru_cache(maxsize=None)
def normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet mean and std in 0-255 units, made once per device: a tensor built from Python
    numbers every step would be a blocking host-to-device copy on the hot path."""
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
    return mean, std


def to_device(images: torch.Tensor, device: torch.device, channels_last: bool = True) -> torch.Tensor:
    """uint8 NHWC on the host -> normalised float NCHW on the device (channels_last memory: a free view)."""
    return normalise(images.to(device, non_blocking=True).permute(0, 3, 1, 2).float(), channels_last)


def decode_to_device(batch: EncodedBatch, device: torch.device, decoder: DeviceDecoder,
                     channels_last: bool = True) -> tuple[torch.Tensor, list[int], tuple]:
    """An EncodedBatch decoded, cropped, resized and flipped on the device, normalised: (x, the
    images kept, (sample, why) of those no decoder took)."""
    images = decoder.decode(batch.jpegs, batch.windows, device)
    kept = [i for i, image in enumerate(images) if image is not None]
    bad = tuple((batch.describe(i), "damaged JPEG data (no decoder takes it)") for i, image in enumerate(images)
                if image is None)
    if not kept:
        return torch.empty((0, 3, batch.size, batch.size), device=device), kept, bad
    x = crop_resize_flip([images[i] for i in kept], batch.boxes[kept], batch.flips[kept], batch.size)
    return normalise(x, channels_last), kept, bad


def normalise(images: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """Float NCHW in 0-255 -> ImageNet-normalised, in place (`images` is already a float copy)."""
    mean, std = normalisation(images.device)
    images = images.sub_(mean).div_(std)
    return images.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


class DeviceBatches:
    """Batch(x, y, key hashes, bad) on the device, `depth` batches ahead of the training step.

    A background thread takes batches from the loader and runs `to_device` on them (the copy of
    pinned uint8, or the whole --decode gpu decode) on a CUDA stream of its own, so that work
    overlaps the model's step instead of stalling it: on the model's stream a pageable or
    in-order copy makes the GPU idle while the host waits for it. The thread waits for each copy
    to finish before asking the loader for the next batch, which frees the host buffer for reuse;
    the consumer's stream waits on an event per batch. Use as a context manager: leaving it (a
    finished epoch, a preemption break, an error) stops the thread and drops the batches read ahead.
    """

    _END = object()

    def __init__(self, batches: Iterable[tuple], device: torch.device, channels_last: bool = True, depth: int = 2,
                 decoder: DeviceDecoder | None = None):
        self.device, self.channels_last = device, channels_last
        self.decoder = decoder  # for --decode gpu batches; made at the first one if not given
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.batches = batches

    def __enter__(self) -> "DeviceBatches":
        self.thread = threading.Thread(target=self._fill, args=(self.batches,), name="device-batches", daemon=True)
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

    def _fill(self, batches: Iterable[tuple]) -> None:
        iterator = iter(batches)
        try:
            with torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext():
                for images, labels, hashes, *bad in iterator:
                    bad = tuple(bad[0]) if bad else ()
                    if isinstance(images, EncodedBatch):
                        self.decoder = self.decoder or DeviceDecoder()
                        x, kept, lost = decode_to_device(images, self.device, self.decoder, self.channels_last)
                        labels, hashes, bad = labels[kept], hashes[kept], bad + lost
                    else:
                        x = to_device(images, self.device, self.channels_last)
                    y = labels.to(self.device, non_blocking=True)
                    ready = None
                    if self.stream:
                        ready = torch.cuda.Event()
                        ready.record(self.stream)
                        ready.synchronize()  # the host buffer is read: the loader may reuse it
                    if not self._put((Batch(x, y, hashes, bad), ready)):
                        return
        except BaseException as error:  # handed to the consumer, raised there
            self._put(error)
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # a generator's cleanup (the loader's queued work) runs in this thread
        self._put(self._END)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            item = self.queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            batch, ready = item
            if ready is not None:
                consumer = torch.cuda.current_stream(self.device)
                consumer.wait_event(ready)
                batch.images.record_stream(consumer)  # made on our stream, freed after the consumer's use
                batch.labels.record_stream(consumer)
            yield batch
