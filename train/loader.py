"""The loader: executes the read plan of `shards.plan` over memory-mapped shards, in threads.

Per epoch, the plan's samples in the plan's order, cut into batches. A thread pool takes each batch
in chunks (`chunk_size`, one task each): the task reads the chunk's headers (natively; PIL's for
what is not a JPEG), draws every crop and flip of the chunk in a few numpy calls, and hands the
chunk to the decode strategy of `decode`:

    CpuDecode   decodes the crops with the crop-region decoder (train/decoder.py, GIL released)
                straight into a ring of pinned batch buffers: batches of uint8 NHWC images
    GpuDecode   checks each JPEG's marker structure; a batch carries its JPEGs' bytes, the window
                of each to decode, its crop and flip, for the device (train/device_decode.py)

No worker processes, no pickling of images. Every rank reads its plan as one stream, so the pixels
of every batch depend only on (seed, epoch, rank, world size, batch size), never on the thread
count, and a resume at step k starts at sample k x batch size of the same order.

A sample no decoder takes (damaged JPEG data, not an image, more than shards.limits.MAX_PIXELS
pixels) or whose label is no class index is left out of its batch, with (sample, why) in
`Batch.bad`: the batch is that much smaller, the number of batches does not change.
"""

from __future__ import annotations

import collections
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple

import numpy as np
import torch

from shards.plan import ReadPlan, elastic_train_plan, val_plan
from train import decoder
from train.decoder import Images, PilFailure
from train.shard_index import ShardSet
from train.transforms import ValTransform, crops, decode_windows, default_resize, repeat_keys

log = logging.getLogger("train")

CHUNK = (4, 32)  # images per decode task, at least and at most: see chunk_size
# The status of an image its batch keeps: decoded into its slot (decode='cpu'), or fine to hand to
# the device (decode='gpu', where what is not a JPEG goes to the device decoder's PIL fallback).
KEPT = decoder.DECODED
# Why the others are left out; the PIL path's failures say more (Chunk.notes).
WHY = {decoder.CORRUPT: "damaged JPEG data", decoder.TOO_LARGE: "more pixels than shards.limits.MAX_PIXELS allows"}

# What a training sample draws besides its crop and flip, a stage passed in (train/augment/draws.py:
# Augment.draws): (keys, seed, epoch, size) -> the batch record's fields by name ("ops", "magnitudes",
# "erase"), a row per key. Run in the decode threads with the crops; pure, so the same for any thread count.
Draws = Callable[[np.ndarray, int, int, int], dict[str, np.ndarray]]


# ---------------------------------------------------------------- what the read plan asks for

@dataclass(frozen=True, kw_only=True)
class PlanArgs:
    """What an epoch's batches depend on besides the shards: the read plan's arguments (see
    shards.plan), the output size, and what training samples get besides their crop and flip."""
    split: str
    epoch: int
    seed: int
    world_size: int
    rank: int
    batch_size: int
    shuffle_buffer: int
    size: int  # the output side of this epoch's images
    # validation's transform (its crop is `size`); None: Resize(size x 256/224) + CenterCrop(size), bilinear
    validation: ValTransform | None = None
    start_step: int = 0  # resume: batches of this epoch the rank already took
    repeats: int = 1  # readings of each sample per epoch (repeated augmentation)
    draws: Draws | None = None  # training's draws beyond the crop and flip; None: none
    # the run's layout, (world size, per-rank batch) as it started, which this world reads (an elastic resume:
    # shards.plan.elastic_train_plan); None: this world's own
    canonical: tuple[int, int] | None = None

    def crops(self) -> "Crops":
        if self.split == "train":
            return Crops(self.size, train=(self.seed, self.epoch), draws=self.draws)
        return Crops(self.size, validation=self.validation or ValTransform(self.size, default_resize(self.size)))


@dataclass(frozen=True)
class Crops:
    """What an epoch's crops (and augmentation) are a pure function of, besides each sample's key
    (and repeat): training's (seed, epoch) and draws, or validation's transform; and the size."""
    size: int
    train: tuple[int, int] | None = None
    draws: Draws | None = None
    validation: ValTransform | None = None

    @property
    def dct_scaling(self) -> bool:
        """Training crops may decode at 1/2-1/8 scale in the DCT (0.7-1.6 grey levels from the exact
        resize, for a fraction of the decode); validation matches its reference's pixels, so never."""
        return self.train is not None

    @property
    def fast_dct(self) -> bool:
        """libjpeg's fast integer IDCT, where validation reproduces FFCV's decoder (decode='cpu' only)."""
        return self.validation is not None and self.validation.fast_dct

    @property
    def interpolation(self) -> str:
        """The resize's filter: training's is bilinear (RandomResizedCrop's default), validation's its own."""
        return "bilinear" if self.validation is None else self.validation.interpolation

    @property
    def shape(self) -> tuple[int, int]:
        """The output's (height, width): size x size, but where validation's is not square."""
        return (self.size, self.size) if self.validation is None else self.validation.shape

    @property
    def fill(self) -> tuple[int, int, int]:
        """The padding's colour, where validation's resized image is smaller than its crop."""
        return (0, 0, 0) if self.validation is None else self.validation.fill


def plan_for(args: PlanArgs, shard_sizes: list[int]) -> ReadPlan:
    if args.split != "train":  # val and the evaluation sets: every sample once over the ranks
        return val_plan(shard_sizes, world_size=args.world_size, rank=args.rank)
    world, batch = args.canonical or (args.world_size, args.batch_size)  # on its own layout: repeated_train_plan's
    return elastic_train_plan(shard_sizes, epoch=args.epoch, seed=args.seed, canonical_world=world, canonical_batch=batch,
                              world_size=args.world_size, rank=args.rank, shuffle_buffer=args.shuffle_buffer,
                              repeats=args.repeats)


def last_read(shard_of: np.ndarray, batch_size: int) -> dict[int, list[int]]:
    """For an epoch whose samples lie in shards `shard_of` (in its order), the shards each batch reads for the last
    time in it, by the batch's index. Pure."""
    shards, from_end = np.unique(shard_of[::-1], return_index=True)
    last = collections.defaultdict(list)
    for shard, batch in zip(shards.tolist(), ((len(shard_of) - 1 - from_end) // batch_size).tolist()):
        last[batch].append(shard)
    return dict(last)


def chunk_size(batch_size: int, threads: int) -> int:
    """Images per decode task: each batch spread over every thread. Tasks in flight are capped by
    the ring (its batches x tasks per batch), and threads beyond them idle: fixed chunks of 32 in
    batches of 64 kept 8 of 15 threads busy. At least CHUNK[0] images keep a task's own cost (a
    header pass and a few numpy calls, tens of microseconds) small against its decodes."""
    return max(CHUNK[0], min(CHUNK[1], -(-batch_size // threads)))


# ---------------------------------------------------------------- batches

class EncodedBatch(NamedTuple):
    """A batch for decode='gpu': every image's bytes end to end in one array, the window of each
    to decode (transforms.decode_windows), its crop box inside that window, and its flip."""
    data: np.ndarray  # uint8, the files' bytes end to end
    offsets: np.ndarray  # int64 (n + 1,): image i is data[offsets[i]:offsets[i + 1]]
    windows: np.ndarray  # int32 (n, 4): left, top, right, bottom in the image
    boxes: torch.Tensor  # float32 (n, 4): the crop, in the window's pixels
    flips: torch.Tensor  # bool (n,)
    size: tuple[int, int]  # the output's (height, width)
    describe: Callable[[int], str]  # image i's shard and key, for messages
    interpolation: str = "bilinear"  # the resize's filter (transforms.ValTransform's)
    regions: torch.Tensor | None = None  # int32 (n, 4): where each box goes in its output, the rest `fill`; None: all
    fill: tuple[int, int, int] = (0, 0, 0)  # the padding's colour (transforms.ValTransform's)

    @property
    def jpegs(self) -> list[np.ndarray]:
        bounds = self.offsets.tolist()
        return [self.data[start:stop] for start, stop in zip(bounds, bounds[1:])]


class Batch(NamedTuple):
    """What the loader yields: images (uint8 NHWC, a view of a pinned ring buffer, valid until the
    next batch is asked for; or an EncodedBatch), labels, key hashes, the samples left out, how
    many images the PIL path decoded, how many were decoded from only the restart intervals
    their crops cover (seekable shards), and each training sample's augmentation beyond its crop
    (train/augment/): its policy's ops and magnitudes, its erasing box, which reading of it this
    is (repeated augmentation), and, after MixUp or CutMix, the soft targets."""
    images: torch.Tensor | EncodedBatch
    labels: torch.Tensor  # int64
    key_hashes: torch.Tensor  # int64, shard_index.KEY_HASH_BITS bits
    bad: tuple = ()  # (sample, why) of the samples left out of this batch
    pil_fallbacks: int = 0
    seeked: int = 0
    ops: torch.Tensor | None = None  # int64 (n, rounds): augment.ops.OPS ids, -1 none; None: no policy
    magnitudes: torch.Tensor | None = None  # float64 (n, rounds): as torchvision's op receives them
    erase: torch.Tensor | None = None  # int32 (n, 4): top, left, height, width; height 0 none; None: no erasing
    repeats: torch.Tensor | None = None  # int64 (n,): the reading of each sample; None: no repeats
    targets: torch.Tensor | None = None  # float (n, classes) after MixUp/CutMix; None: the labels are the targets


@dataclass
class Chunk:
    """Up to chunk_size images of a batch, one task, for slots [first, first + n): the task reads
    their headers, draws their crops (and augmentation) and hands them to the decode strategy."""
    first: int
    images: Images
    keys: np.ndarray  # what each sample's augmentation is drawn from: its key hash, mixed with its repeat
    dims: np.ndarray | None = None  # int32 (n, 2): width, height
    boxes: np.ndarray | None = None  # float32 (n, 4)
    flips: np.ndarray | None = None  # bool (n,)
    regions: np.ndarray | None = None  # int32 (n, 4): where each box goes in its slot, the rest padding; None: whole
    status: np.ndarray | None = None  # per image: KEPT (or, before the decode, fine so far) or why not
    notes: dict[int, str] = field(default_factory=dict)  # image -> why, where PIL said more than the status
    fallbacks: int = 0  # decoded by the PIL path
    seeked: int = 0  # decoded from only the restart intervals their crops cover
    draws: dict[str, np.ndarray] = field(default_factory=dict)  # the training draws (Draws), by Batch field


class InFlight(NamedTuple):
    """A batch whose decode is queued: its samples (and their repeats), chunks, their futures, its
    ring and slot."""
    shards: ShardSet
    ids: np.ndarray
    repeats: np.ndarray | None
    chunks: list[Chunk]
    futures: list[Future]
    ring: int
    slot: int


def label_problem(classes: int) -> str:
    return f"its .cls is not a class index from 0 to {classes - 1}"


def draw_crops(chunk: Chunk, spec: Crops, check_markers: bool = False) -> None:
    """Sizes from the headers (PIL's for what is not a JPEG), then every crop of the chunk (and,
    in training, the rest of its augmentation). With `check_markers` (decode='gpu') a JPEG whose
    marker structure is broken is CORRUPT. An image whose header fails is drawn a crop of a 1 x 1
    image: it is left out, and the others' crops do not depend on it."""
    chunk.dims, chunk.status = decoder.image_sizes(chunk.images, check_markers)
    for i in np.flatnonzero(chunk.status == decoder.NOT_JPEG).tolist():
        try:
            chunk.dims[i] = decoder.pil_size(chunk.images.data(i))
        except PilFailure as failure:
            chunk.status[i], chunk.notes[i] = failure.status, failure.why
    fine = (chunk.status == KEPT) | (chunk.status == decoder.NOT_JPEG)
    dims = np.where(fine[:, None], chunk.dims, 1)
    chunk.boxes, chunk.flips, chunk.regions = crops(chunk.keys, dims[:, 0], dims[:, 1], spec.train, spec.validation)
    if spec.train is not None and spec.draws is not None:
        chunk.draws = spec.draws(chunk.keys, *spec.train, spec.size)


# ---------------------------------------------------------------- the decode strategies

class DecodeStrategy:
    """What the loader asks of a decode path. In a decode thread, `decode` readies a chunk (draws
    its crops; decodes it into `out`, a slot of one of the strategy's batch buffers, if it keeps
    any); `images` makes a finished batch's images. A strategy with buffers keeps them in rings, one
    per open epoch (`acquire`, `release`); the base keeps none."""
    seeks = False  # its decoder may seek through restart intervals (the first batch's seeks are logged)

    def describe(self, threads: int) -> str:
        raise NotImplementedError

    def memory_bytes(self) -> int:
        return 0

    def acquire(self) -> int:
        return 0

    def release(self, ring: int) -> None:
        pass

    def close(self) -> None:
        """Let go of the buffers: the loader is closed."""

    def buffer(self, ring: int, slot: int, shape: tuple[int, int]) -> np.ndarray | None:
        return None

    def decode(self, chunk: Chunk, out: np.ndarray | None, spec: "Crops") -> None:
        raise NotImplementedError

    def images(self, shards: ShardSet, ids: np.ndarray, chunks: list[Chunk], keep: np.ndarray, ring: int,
               slot: int, spec: Crops) -> torch.Tensor | EncodedBatch:
        raise NotImplementedError


class CpuDecode(DecodeStrategy):
    """decode='cpu': each chunk decoded by the crop-region decoder into its batch's slot of a ring
    of (pinned, where the device is a GPU) uint8 batch buffers; what it does not take (other image
    formats, JPEGs in other colour spaces) by PIL into the same slots, counted.

    Each open epoch takes a ring of its own: one ring serves a run whose epochs follow each other,
    and a second is made only when two are open at once (a validation pass in the middle of a
    training epoch), then kept for the next time."""
    seeks = True

    def __init__(self, *, batch_size: int, image_size: int, ring: int, pin_memory: bool):
        # A slot holds a batch of the largest size; an epoch of a smaller one views its first bytes.
        self.batch_size, self.slot_bytes = batch_size, batch_size * image_size * image_size * 3
        self.ring_size, self.pin_memory = ring, pin_memory
        self.rings: list[list[torch.Tensor]] = []
        self.free: list[int] = []
        self.lock = threading.Lock()  # epochs open and close in several threads (each DeviceBatches' own)

    def describe(self, threads: int) -> str:
        return f"decoder: {decoder.NAME}, {threads} threads"

    def memory_bytes(self) -> int:
        return sum(t.numel() for ring in self.rings for t in ring)

    def acquire(self) -> int:
        """A ring for an epoch being opened: a free one, or a new one."""
        with self.lock:
            if self.free:
                return self.free.pop()
            self.rings.append([torch.empty(self.slot_bytes, dtype=torch.uint8, pin_memory=self.pin_memory)
                               for _ in range(self.ring_size)])
            return len(self.rings) - 1

    def release(self, ring: int) -> None:
        with self.lock:
            self.free.append(ring)

    def close(self) -> None:
        """The rings freed now, not when the loader is collected: a closed loader may be held long after (a
        notebook's Out[], a list of the loaders made), and a ring is 4 batches of pinned memory. A batch still held
        keeps its own buffer."""
        with self.lock:
            self.rings, self.free = [], []

    def view(self, ring: int, slot: int, shape: tuple[int, int]) -> torch.Tensor:
        """The slot as a batch of height x width images, uint8 (B, height, width, 3), C-contiguous."""
        height, width = shape
        return self.rings[ring][slot][:self.batch_size * height * width * 3].view(self.batch_size, height, width, 3)

    def buffer(self, ring: int, slot: int, shape: tuple[int, int]) -> np.ndarray:
        return self.view(ring, slot, shape).numpy()

    def decode(self, chunk: Chunk, out: np.ndarray, spec: Crops) -> None:
        """In a decode thread: the chunk's crops into out[chunk.first:]."""
        draw_crops(chunk, spec)
        seeked = np.zeros(len(chunk.images), np.bool_)
        decoded = decoder.decode_crops(chunk.images, chunk.boxes, chunk.flips, out, chunk.first, seeked=seeked,
                                       dct_scaling=spec.dct_scaling, interpolation=spec.interpolation,
                                       fast_dct=spec.fast_dct, regions=chunk.regions, fill=spec.fill)
        chunk.status = np.where(chunk.status == KEPT, decoded, chunk.status)
        chunk.seeked = int((seeked & (chunk.status == KEPT)).sum())
        for i in np.flatnonzero(np.isin(chunk.status, (decoder.REFUSED, decoder.NOT_JPEG))).tolist():
            self.pil_fallback(chunk, i, out, spec)

    def pil_fallback(self, chunk: Chunk, i: int, out: np.ndarray, spec: Crops) -> None:
        """The PIL path for an image the native decoder does not take: same crop, same slot (same region,
        same padding)."""
        top, left, height, width = (0, 0, *out.shape[1:3]) if chunk.regions is None else chunk.regions[i].tolist()
        try:
            pixels = decoder.pil_decode_crop(chunk.images.data(i), tuple(chunk.boxes[i].tolist()),
                                             bool(chunk.flips[i]), (height, width), spec.dct_scaling,
                                             spec.interpolation)
        except PilFailure as failure:
            chunk.status[i], chunk.notes[i] = failure.status, failure.why
            return
        if chunk.regions is not None:
            out[chunk.first + i] = spec.fill
        out[chunk.first + i, top:top + height, left:left + width] = pixels
        chunk.status[i] = KEPT
        chunk.fallbacks += 1

    def images(self, shards: ShardSet, ids: np.ndarray, chunks: list[Chunk], keep: np.ndarray, ring: int,
               slot: int, spec: Crops) -> torch.Tensor:
        """The kept images of a finished batch: a view of its ring slot, gaps closed in order."""
        images = self.view(ring, slot, spec.shape)
        if len(keep) < len(ids):
            images[:len(keep)] = images[torch.from_numpy(keep)]
        return images[:len(keep)]


class GpuDecode(DecodeStrategy):
    """decode='gpu': the threads read headers, check marker structures and draw crops; each batch
    carries its kept JPEGs' bytes, windows, crops and flips for the device's decoder (nothing to
    allocate ahead). What is not a JPEG goes to the device decoder too (its PIL fallback decodes it)."""

    def describe(self, threads: int) -> str:
        return f"decoder: on the device (decode='gpu'); headers, marker checks and crops by {threads} threads"

    def decode(self, chunk: Chunk, out: None, spec: Crops) -> None:
        draw_crops(chunk, spec, check_markers=True)
        chunk.status[chunk.status == decoder.NOT_JPEG] = KEPT  # PIL read its size: the device's fallback decodes it

    def images(self, shards: ShardSet, ids: np.ndarray, chunks: list[Chunk], keep: np.ndarray, ring: int,
               slot: int, spec: Crops) -> EncodedBatch:
        """The kept samples' bytes end to end in one array, with their windows and crops."""
        kept = ids[keep]
        images = shards.images(kept)
        data = np.empty(int(images.lengths.sum()), np.uint8)
        decoder.gather(images, data)
        dims = np.concatenate([c.dims for c in chunks])[keep]
        boxes = np.concatenate([c.boxes for c in chunks])[keep]
        windows, inside = decode_windows(boxes, dims[:, 0], dims[:, 1], min(spec.shape), spec.interpolation)
        flips = torch.from_numpy(np.concatenate([c.flips for c in chunks])[keep])
        regions = batch_regions(chunks, spec.shape)
        regions = None if regions is None else torch.from_numpy(regions[keep])
        return EncodedBatch(data, np.concatenate([[0], np.cumsum(images.lengths)]), windows, torch.from_numpy(inside),
                            flips, spec.shape, lambda i: shards.describe(int(kept[i])), spec.interpolation, regions,
                            spec.fill)


def batch_regions(chunks: list[Chunk], shape: tuple[int, int]) -> np.ndarray | None:
    """The regions of a batch's images, chunk after chunk (a chunk that pads nothing: each its whole
    height x width output); None where no chunk pads any."""
    if all(chunk.regions is None for chunk in chunks):
        return None
    whole = np.array([0, 0, *shape], np.int32)
    return np.concatenate([np.tile(whole, (len(c.boxes), 1)) if c.regions is None else c.regions for c in chunks])


DECODES = ("cpu", "gpu")


RING = 4  # batches a ring of buffers holds: an open epoch's batches decoded ahead of, and held by, its caller


def slot_images(batch_size: int, split_sizes: list[int]) -> int:
    """The images a batch buffer holds: batch_size, or the largest split's samples where that is fewer. A batch
    holds at most a split's samples (validation's one batch of a batch_size past its split): buffers for batch_size
    images allocated terabytes for a val loader of batch_size 10**9, or pinned them. Pure."""
    return min(batch_size, max(split_sizes, default=batch_size))


def strategy_for(decode: str, *, batch_size: int, image_size: int, ring: int, pin_memory: bool) -> DecodeStrategy:
    if decode == "gpu":
        return GpuDecode()
    return CpuDecode(batch_size=batch_size, image_size=image_size, ring=ring, pin_memory=pin_memory)

PER_SAMPLE = ("labels", "key_hashes", "ops", "magnitudes", "erase", "repeats", "targets")  # Batch's rows


def take(batch: Batch, index: torch.Tensor | list[int]) -> Batch:
    """The batch's per-sample fields (all but the images) at `index`, in its order."""
    fields = {}
    for name in PER_SAMPLE:
        value = getattr(batch, name)
        if value is not None:
            fields[name] = value[torch.as_tensor(index, dtype=torch.long, device=value.device)]
    return batch._replace(**fields)


def augmentation_of(chunks: list[Chunk], keep: np.ndarray, repeats: np.ndarray | None) -> dict:
    """The kept samples' augmentation draws, as Batch fields (those drawn at all)."""
    fields = {name: torch.from_numpy(np.concatenate([c.draws[name] for c in chunks])[keep])
              for name in chunks[0].draws}
    if repeats is not None:
        fields["repeats"] = torch.from_numpy(repeats[keep])
    return fields


# ---------------------------------------------------------------- the loader

class Loader:
    """Batches of the splits' shards for this rank, decoded by `threads` threads (see the module doc).

    `epoch()` returns an epoch's batches of one split. The thread pool and the decode strategy's
    buffers serve every split and live as long as the Loader; several epochs may be open at once
    (each takes a ring of buffers of its own). `close()` it (or use it as a context manager); it
    closes the shard sets too."""

    def __init__(self, splits: dict[str, ShardSet], *, batch_size: int, image_size: int, threads: int,
                 decode: str = "cpu", pin_memory: bool = False, ring: int = RING):
        """image_size: the largest output side any epoch asks for (the buffers' size)."""
        if decode not in DECODES:
            raise ValueError(f"decode must be one of {', '.join(DECODES)}, not {decode!r}")
        self.splits, self.batch_size, self.ring_size, self.max_size = splits, batch_size, ring, image_size
        self.threads = max(1, threads)
        most = slot_images(batch_size, [len(shards) for shards in splits.values()])
        self.strategy = strategy_for(decode, batch_size=most, image_size=image_size, ring=ring, pin_memory=pin_memory)
        self.chunk = chunk_size(batch_size, self.threads)
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="decode")
        self.fallbacks = 0  # images decoded by the PIL path, over the Loader's life
        self.first_batch_logged = False  # the decode path of the first batch, logged once

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.strategy.close()
        for shards in self.splits.values():
            shards.close()

    def describe(self) -> str:
        return self.strategy.describe(self.threads)

    def memory_bytes(self) -> int:
        """What the loader holds: its batch buffers and the splits' sample tables."""
        return self.strategy.memory_bytes() + sum(s.table_bytes() for s in self.splits.values())

    def epoch(self, args: PlanArgs) -> Iterator[Batch]:
        """The rank's batches of an epoch from `args.start_step` on: whole batches in training,
        and a last partial one in validation."""
        if not 1 <= args.size <= self.max_size:
            raise ValueError(f"an epoch of {args.size} px images from a loader made for at most {self.max_size}")
        shards = self.splits[args.split]
        plan, start = plan_for(args, shards.sizes), args.start_step * args.batch_size
        ids = shards.ids(plan)[start:]
        repeats = np.asarray(plan.repeats, np.int64)[start:] if plan.repeats else None
        batches = [(ids[i:i + self.batch_size], None if repeats is None else repeats[i:i + self.batch_size])
                   for i in range(0, len(ids), self.batch_size)]
        return self._decoded(shards, batches, args.crops(), last_read(shards.shard[ids], self.batch_size))

    def _decoded(self, shards: ShardSet, batches: list[tuple[np.ndarray, np.ndarray | None]], spec: Crops,
                 last: dict[int, list[int]]) -> Iterator[Batch]:
        """Batch k decodes into slot k mod R of the epoch's ring; R - 1 batches decode ahead of the one
        the caller holds, and a slot is reused only once the caller has asked for the batch after it.
        The shards batch k reads for the last time (`last`) are let go of once it is finished (a batch
        yielded holds its pixels, or its JPEGs' bytes copied, not the maps); where the caller leaves
        early, those it had not finished with too."""
        in_flight: collections.deque[InFlight] = collections.deque()
        submitted = finished = 0
        ring = self.strategy.acquire()
        try:
            for k in range(len(batches)):
                while submitted < len(batches) and submitted < k + self.ring_size:
                    slot = submitted % self.ring_size
                    in_flight.append(self._submit(shards, *batches[submitted], ring, slot, spec))
                    submitted += 1
                batch = self._finish(in_flight.popleft(), spec)
                shards.let_go(last.get(k, ()))
                finished = k + 1
                yield batch
        finally:
            for batch in in_flight:  # the caller left early: stop what is queued
                for f in batch.futures:
                    f.cancel()
            for batch in in_flight:
                for f in batch.futures:
                    if not f.cancelled():
                        f.exception()  # wait: a running task still writes into its ring slot
            shards.let_go([shard for k, read in last.items() if k >= finished for shard in read])
            self.strategy.release(ring)

    def _submit(self, shards: ShardSet, ids: np.ndarray, repeats: np.ndarray | None, ring: int, slot: int,
                spec: Crops) -> InFlight:
        """Queue the batch's tasks, a chunk each."""
        shards.ensure_indexed(ids)
        images, out = shards.images(ids), self.strategy.buffer(ring, slot, spec.shape)
        keys = repeat_keys(shards.hashes[ids], repeats)
        chunks = [Chunk(first, images[first:first + self.chunk], keys[first:first + self.chunk])
                  for first in range(0, len(ids), self.chunk)]
        futures = [self.pool.submit(self.strategy.decode, c, out, spec) for c in chunks]
        return InFlight(shards, ids, repeats, chunks, futures, ring, slot)

    def _finish(self, batch: InFlight, spec: Crops) -> Batch:
        shards, ids, repeats, chunks, futures, ring, slot = batch
        for f in futures:
            f.result()  # a task's exception (a bug) is raised here, in the caller
        status = np.concatenate([c.status for c in chunks])
        if (status == decoder.OUT_OF_MEMORY).any():  # the machine's memory, not the sample: no skipping it
            sample = shards.describe(int(ids[np.argmax(status == decoder.OUT_OF_MEMORY)]))
            raise MemoryError(f"out of memory while decoding {sample}: the node's memory is short")
        notes = {c.first + i: why for c in chunks for i, why in c.notes.items()}
        bad_label = shards.bad_labels(ids)
        good = (status == KEPT) & ~bad_label
        keep = np.flatnonzero(good)
        bad = tuple((shards.describe(int(ids[i])), notes.get(i) or WHY.get(int(status[i])) or
                     label_problem(shards.classes)) for i in np.flatnonzero(~good).tolist())
        fallbacks, seeked = sum(c.fallbacks for c in chunks), sum(c.seeked for c in chunks)
        self._count_fallbacks(fallbacks)
        self._log_first_seeks(seeked, len(keep))
        labels = torch.from_numpy(shards.labels[ids[keep]])
        hashes = torch.from_numpy(shards.key_hashes(ids[keep]))
        images = self.strategy.images(shards, ids, chunks, keep, ring, slot, spec)  # (read from the maps: last)
        shards.check_readable()  # a shard truncated under its map: read as zeros, said here, never given out
        return Batch(images, labels, hashes, bad, fallbacks, seeked, **augmentation_of(chunks, keep, repeats))

    def _log_first_seeks(self, seeked: int, images: int) -> None:
        """Which decode path the first batch took: seeking pays about 1.3x (docs/prepare.md: seekable JPEGs)."""
        if self.first_batch_logged or not self.strategy.seeks:
            return
        self.first_batch_logged = True
        if seeked:
            log.info("decoder: %d of %d images of the first batch decoded from only the restart intervals their crops "
                     "cover (seekable shards)", seeked, images)
        else:
            # (not proof of shards without restart markers: small images' crops may need no seek)
            log.info("decoder: no image of the first batch was decoded from its crop's restart intervals alone: each "
                     "was Huffman-decoded down to its crop's last row (where the manifest's options say restart_mcus "
                     "0, or none, prepare the shards again for about 1.3x faster decoding)")

    def _count_fallbacks(self, fallbacks: int) -> None:
        if fallbacks and not self.fallbacks:
            log.warning("decoder: %d image(s) of this batch decoded by the PIL path (not a JPEG, or a JPEG in a colour "
                        "space the crop-region decoder does not take); further ones are only counted", fallbacks)
        self.fallbacks += fallbacks
