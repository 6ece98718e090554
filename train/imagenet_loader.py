"""The data path as a library, for your own model, loop and launcher: `from train import ImageNetLoader`.

    loader = ImageNetLoader("/local/imagenet", "train", batch_size=256, image_size=224, device=device)
    val = loader.with_split("val")  # the same threads and buffers
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:  # normalised, (B, 3, S, S), channels_last, on `device`
            ...

It is what `python -m train` reads its data with: the read plan of shards.plan (the same number of
whole batches on every rank, every validation sample exactly once over the ranks), the crop-region
decode in threads (train/loader.py), and the batches normalised on the device a background thread
and CUDA stream ahead (train/device_batches.py). It issues no collectives of its own: the rank and
world size come from torch.distributed when it is initialised, else from the launcher's variables
(srun, torchrun, accelerate launch), as `python -m train` reads them. The README's library section
is its manual.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from shards.layout import SPLITS
from shards.manifest import DamagedData, read_complete_manifest
from shards.plan import even_split, steps_per_epoch
from shards.resources import available_cpus
from train.checkpoint import ResumeError
from train.cluster import ClusterError, default_workers, dist_env
from train.config import ConfigError
from train.decoder import MAX_IMAGE_SIZE
from train.device_batches import DeviceBatches
from train.loader import DECODES, Batch, Loader, PlanArgs
from train.shard_index import ShardSet

log = logging.getLogger("train")

STATE_FORMAT = "imagenet-loader/1"
# What a saved position is only valid for: another value reads other samples in another order.
STATE_IDENTITY = ("format", "dataset_id", "split", "seed", "batch_size", "world_size", "shuffle_buffer")


@dataclass
class Counters:
    """What a loader has done since it was made, for your logs (this rank only)."""
    images: int = 0  # images yielded
    bad_samples: int = 0  # left out (damaged, over the pixel limit, labelled with no class)
    pil_fallbacks: int = 0  # decoded by the PIL path (an image the crop-region decoder does not take)
    seeked_images: int = 0  # decoded from only the restart intervals their crops cover (seekable shards)
    data_wait_s: float = 0.0  # seconds the caller waited for a batch


def process_place(environ=os.environ) -> tuple[int, int]:
    """(rank, world size): torch.distributed's when it is initialised (however it was launched),
    else the launcher's variables (dist_env: srun, torchrun, accelerate launch, or one process)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    env = dist_env(environ)
    return env.rank, env.world_size


def workers_for(environ=os.environ) -> int:
    """This rank's share of the CPUs it may use, less one (cluster.default_workers). Where only
    torch.distributed knows the ranks (mp.spawn, say), LOCAL_WORLD_SIZE if set, else the world size,
    an upper bound of the ranks on this node, share them."""
    try:
        env = dist_env(environ)
    except ClusterError:
        env = None
    if env is None or (env.launcher == "single" and dist.is_available() and dist.is_initialized()):
        ranks = int(environ.get("LOCAL_WORLD_SIZE") or (dist.get_world_size() if dist.is_initialized() else 1))
        return max(1, available_cpus() // ranks - 1)
    return default_workers(env, available_cpus())


class _Shared:
    """What a train and a val loader of one process share: the Loader (its threads, its rings of
    pinned buffers, the splits' shard sets), the device decoder of --decode gpu, the passes open
    (the last close() ends them), and how many loaders still use them."""

    def __init__(self, loader: Loader, device_decoder, dataset_id: str, num_classes: int):
        self.loader, self.device_decoder = loader, device_decoder
        self.dataset_id, self.num_classes = dataset_id, num_classes
        self.users = 1
        self.passes: weakref.WeakSet = weakref.WeakSet()  # the generators of the passes not yet finished
        self.lock = threading.Lock()


class ImageNetLoader:
    """Batches of a prepared ImageNet for this rank: `for images, labels in loader`.

    root:            the dataset `python -m prepare` wrote on this node
    split:           "train" (RandomResizedCrop + flip, shuffled, whole batches, the same count on
                     every rank) or "val" (resize + centre crop, every sample once over the ranks)
    batch_size:      per rank
    image_size:      the crop's side; validation resizes to size x 256/224 and crops the centre
    device:          any torch device; with CUDA, pinned buffers and a copy on a side stream
    seed:            the shuffle and the augmentation
    workers:         decoding threads; None: this rank's share of the CPUs it may use, less one
    decode:          "cpu" (crop-region decode in the threads) or "gpu" (nvImageCodec on the device)
    dtype:           of the images yielded (normalised in float32 first)
    channels_last:   the images' memory format
    shuffle_buffer:  the read plan's shuffle window, in samples
    max_bad_samples: bad samples this rank may leave out in one epoch (a resumed epoch: since its
                     resume) before DamagedData stops it; None: no limit (python -m train agrees
                     on it over the ranks instead)
    fixed_shape:     train only: fill a batch whose bad samples were left out back to batch_size
                     with copies of its other samples, so that every batch has one shape
    prefetch:        batches moved onto the device ahead of the one the caller holds
    rank, world_size: both or neither; the data-parallel place of this process where it is not
                     torch.distributed's (tensor or pipeline parallelism), as DistributedSampler's
    """

    def __init__(self, root: str | Path, split: str = "train", *, batch_size: int, image_size: int,
                 device: torch.device | str, seed: int = 0, workers: int | None = None, decode: str = "cpu",
                 dtype: torch.dtype = torch.float32, channels_last: bool = True, shuffle_buffer: int = 1000,
                 max_bad_samples: int | None = 100, fixed_shape: bool = False, prefetch: int = 2,
                 rank: int | None = None, world_size: int | None = None):
        check_settings(split, batch_size, image_size, workers, decode, dtype, shuffle_buffer, max_bad_samples,
                       prefetch, rank, world_size)
        self.root, self.device = Path(root), torch.device(device)
        self.batch_size, self.image_size, self.seed = batch_size, image_size, seed
        self.dtype, self.channels_last, self.shuffle_buffer = dtype, channels_last, shuffle_buffer
        self.max_bad_samples, self.fixed_shape, self.prefetch = max_bad_samples, fixed_shape, prefetch
        self.rank, self.world_size = (rank, world_size) if rank is not None else process_place()
        manifest = read_complete_manifest(self.root)  # a missing or damaged dataset: one line, what to run
        device_decoder = device_decoder_for(decode)  # before the threads: a missing package leaves none running
        loader = Loader({s: ShardSet.of(self.root, manifest, s) for s in SPLITS}, batch_size=batch_size,
                        image_size=image_size, threads=workers or workers_for(), decode=decode,
                        pin_memory=self.device.type == "cuda")
        self._shared = _Shared(loader, device_decoder, manifest.dataset_id(), manifest.num_classes)
        self._begin(split)

    def _begin(self, split: str) -> None:
        """This loader's own state: its split, its place in the epochs, its counters."""
        self.split, self.counters, self.closed = split, Counters(), False
        self._epoch, self._position = 0, 0  # the epoch of the pass under way (or next), batches of it taken
        self._chosen, self._started, self._resumable = False, False, None
        self._bad_this_epoch, self._pass_open = 0, False

    def with_split(self, split: str) -> "ImageNetLoader":
        """A loader of `split` with this one's settings, sharing its threads and pinned buffers (a
        train and a val loader made so do not double them). Close both; the last one to close
        stops the threads."""
        check_split(split)
        self._check_open()
        other = copy.copy(self)
        other._begin(split)
        with self._shared.lock:
            self._shared.users += 1
        return other

    @property
    def num_classes(self) -> int:
        return self._shared.num_classes

    @property
    def threads(self) -> int:
        return self._shared.loader.threads

    def __len__(self) -> int:
        """Batches this rank yields in a whole epoch: the same on every rank for train (the last
        partial global batch is dropped); for val, this rank's share, its last batch partial."""
        samples = len(self._shared.loader.splits[self.split])
        if self.split == "train":
            return steps_per_epoch(samples, self.world_size, self.batch_size)
        start, stop = even_split(samples, self.world_size, self.rank)
        return -(-(stop - start) // self.batch_size)

    # ------------------------------------------------------------ epochs and position

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads, as DistributedSampler.set_epoch: its own order and
        augmentation. After load_state_dict, the state's epoch continues where the state stopped;
        any other starts at its first batch. A pass without set_epoch reads the epoch after the last."""
        if self._resumable != epoch:
            self._position = 0
        self._epoch, self._chosen, self._started, self._resumable = epoch, True, False, None

    def _begin_pass(self) -> tuple[int, int]:
        finished_state = self._resumable is not None and self._position >= len(self)  # loaded at an epoch's end
        if (self._started and not self._chosen) or finished_state:  # no set_epoch since: the next epoch
            self._epoch, self._position = self._epoch + 1, 0
        if self._position == 0:
            self._bad_this_epoch = 0
        self._chosen, self._started, self._resumable = False, True, None
        return self._epoch, self._position

    def state_dict(self) -> dict:
        """Where this loader is: the epoch and the batches of it taken, and what that position is
        valid for. The same on every rank at the same step: rank 0 may save it alone."""
        return {"format": STATE_FORMAT, "dataset_id": self._shared.dataset_id, "split": self.split, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size, "shuffle_buffer": self.shuffle_buffer,
                "epoch": self._epoch, "position": self._position}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a state_dict(): the next pass (or set_epoch with the state's epoch) yields
        exactly the batches after the ones taken, the same pixels and labels. ResumeError where the
        state belongs to another dataset, seed, batch size, world size or split."""
        mine = self.state_dict()
        wrong = [f"{name}: the state's {state.get(name)!r}, this loader's {mine[name]!r}" for name in STATE_IDENTITY
                 if state.get(name) != mine[name]]
        if wrong:
            raise ResumeError(f"this loader state was saved by another loader ({'; '.join(wrong)}): make the loader "
                              "as the state's was made, or start without it")
        epoch, position = state["epoch"], state["position"]
        if self.split == "val":  # a finished val pass: a rank may have one batch more than this one
            position = min(position, len(self)) if isinstance(position, int) else position
        if not (isinstance(position, int) and 0 <= position <= len(self)):
            raise ResumeError(f"the loader state's position {position!r} is outside its epoch of {len(self)} batches")
        self._epoch, self._position = epoch, position
        self._chosen, self._started, self._resumable = True, False, epoch

    # ------------------------------------------------------------ batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(images, labels) of the next pass: images in `dtype`, normalised, (B, 3, S, S), on the
        device; labels int64 on the device. A batch with bad samples left out is that much smaller."""
        for batch in self.batches():
            yield batch.images, batch.labels

    def batches(self) -> Iterator[Batch]:
        """The next pass as full batch records: images and labels on the device, the samples' key
        hashes (summed over an epoch, they tell which samples were read), the samples left out as
        (sample, why), how many images the PIL path decoded and how many were decoded from only the
        restart intervals their crops cover. One pass of a loader at a time."""
        self._check_open()
        if self._pass_open:
            raise RuntimeError(f"a pass of this {self.split} loader is still open: finish it, or leave it (break out "
                               "of its loop, or close() its iterator), before starting another")
        this_pass = self._pass()
        self._shared.passes.add(this_pass)
        return this_pass

    def _pass(self) -> Iterator[Batch]:
        self._pass_open = True
        try:
            epoch, start = self._begin_pass()
            args = PlanArgs(split=self.split, epoch=epoch, seed=self.seed, world_size=self.world_size, rank=self.rank,
                            batch_size=self.batch_size, shuffle_buffer=self.shuffle_buffer, start_step=start)
            with DeviceBatches(self._shared.loader.epoch(args), self.device, self.channels_last, depth=self.prefetch,
                               device_decoder=self._shared.device_decoder, dtype=self.dtype) as on_device:
                arriving = iter(on_device)
                while True:
                    asked = time.perf_counter()
                    batch = next(arriving, None)
                    self.counters.data_wait_s += time.perf_counter() - asked
                    if batch is None:
                        return
                    self._leave_out(batch.bad)
                    self.counters.images += len(batch.labels)
                    self.counters.pil_fallbacks += batch.pil_fallbacks
                    self.counters.seeked_images += batch.seeked
                    if self.fixed_shape and self.split == "train":
                        batch = filled(batch, self.batch_size, self.channels_last)
                    self._position += 1  # the caller has it: a state taken now resumes after it
                    yield batch
        finally:
            self._pass_open = False

    def _leave_out(self, bad: tuple) -> None:
        """Name each bad sample; past max_bad_samples this epoch, stop in one line."""
        self.counters.bad_samples += len(bad)
        self._bad_this_epoch += len(bad)
        this_epoch = self._bad_this_epoch
        for sample, why in bad:
            log.warning("left out %s (%s; %d this epoch on this rank). Its shard may be damaged: check the dataset "
                        "with `python -m prepare --source ... --dest %s --verify`", sample, why, this_epoch, self.root)
        if bad and self.max_bad_samples is not None and this_epoch > self.max_bad_samples:
            sample, why = bad[-1]
            raise DamagedData(f"{this_epoch} bad {self.split} samples this epoch on this rank, more than "
                              f"max_bad_samples {self.max_bad_samples}; the last: {sample} ({why}). The node's disk "
                              f"or dataset is damaged: run `python -m prepare --source ... --dest {self.root} --verify` "
                              "on this node (it finds and rebuilds damaged shards), or raise max_bad_samples")

    @property
    def device_decode_fallbacks(self) -> int:
        """--decode gpu: images the device decoder left to PIL on the host (train and val together)."""
        decoder = self._shared.device_decoder
        return decoder.fallbacks if decoder is not None else 0

    def describe(self) -> str:
        text = self._shared.loader.describe()
        decoder = self._shared.device_decoder
        return f"{text}, {decoder.describe()}" if decoder is not None else text

    def memory_bytes(self) -> int:
        return self._shared.loader.memory_bytes()

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop this loader; the threads and buffers go with the last loader sharing them, after the
        passes still open are ended. (A pass left by `break` has already let go of its own: CPython
        closes the loop's iterator as the loop drops it.)"""
        if self.closed:
            return
        self.closed = True
        with self._shared.lock:
            self._shared.users -= 1
            last = self._shared.users == 0
        if last:
            for open_pass in list(self._shared.passes):
                try:
                    open_pass.close()  # its background copier stops, its ring goes back
                except ValueError:  # running in another thread: it stops with the pool below
                    pass
            self._shared.loader.close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"this {self.split} ImageNetLoader is closed")

    def __enter__(self) -> "ImageNetLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def filled(batch: Batch, size: int, channels_last: bool) -> Batch:
    """A batch smaller than `size` (samples left out) filled back with copies of its own samples, in
    order; the key hashes and the samples left out stay as they were."""
    kept = len(batch.labels)
    if kept == size or kept == 0:
        return batch
    index = torch.arange(size, device=batch.labels.device) % kept
    images = batch.images[index]
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return batch._replace(images=images, labels=batch.labels[index])


def device_decoder_for(decode: str):
    """--decode gpu's decoder; ConfigError naming what to install where nvImageCodec is missing."""
    if decode != "gpu":
        return None
    from train.device_decode import DeviceDecoder

    try:
        return DeviceDecoder()
    except ImportError as exn:
        raise ConfigError(str(exn)) from None


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")


def check_settings(split: str, batch_size: int, image_size: int, workers: int | None, decode: str, dtype,
                   shuffle_buffer: int, max_bad_samples: int | None, prefetch: int, rank: int | None,
                   world_size: int | None) -> None:
    """Each setting that cannot work is a ConfigError saying which and why."""
    check_split(split)
    for name, value in (("batch_size", batch_size), ("image_size", image_size), ("shuffle_buffer", shuffle_buffer),
                        ("prefetch", prefetch)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a whole number of at least 1, not {value!r}")
    if image_size > MAX_IMAGE_SIZE:
        raise ConfigError(f"image_size must be at most {MAX_IMAGE_SIZE}, not {image_size}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be at least 1, or None for this rank's share of the CPUs, not {workers!r}")
    if decode not in DECODES:
        raise ConfigError(f"decode must be one of {', '.join(DECODES)}, not {decode!r}")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ConfigError(f"dtype must be a floating-point torch dtype (torch.float32, torch.bfloat16, ...), "
                          f"not {dtype!r}")
    if max_bad_samples is not None and (not isinstance(max_bad_samples, int) or max_bad_samples < 0):
        raise ConfigError(f"max_bad_samples must be 0 or more, or None, not {max_bad_samples!r}")
    if (rank is None) != (world_size is None) or (rank is not None and not 0 <= rank < world_size):
        raise ConfigError(f"rank and world_size go together, 0 <= rank < world_size (or neither: torch.distributed's, "
                          f"or the launcher's), not rank={rank!r}, world_size={world_size!r}")
