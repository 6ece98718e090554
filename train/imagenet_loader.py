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
(srun, torchrun, accelerate launch), as `python -m train` reads them. docs/library.md is its
manual.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import operator
import os
import shlex
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Generator, Iterator, Mapping, NamedTuple, Sequence

import torch
import torch.distributed as dist

from shards.lock import release, release_taken_by
from shards.manifest import DamagedData, read_complete_manifest, read_lock
from shards.plan import per_rank_batch
from shards.resources import available_cpus, memory_limit
from train.accelerators import pins_memory
from train.augment.choices import Augment
from train.augment.mixing import mixed_in_groups, mixer_for, mixing_groups, mixing_seed
from train.cluster import ClusterError, DistEnv, cpus_short, default_workers, process_env
from train.device_batches import DeviceBatches
from train.errors import ConfigError, ResumeError
from train.loader import RING, Batch, Loader, PlanArgs, slot_images, take
from train.loader_arguments import (check_buffers_fit, check_decode, check_device_decode, check_dtype,
                                    check_has_batches, check_only_train_augments, check_repeats, check_split,
                                    checked_augment, checked_device, checked_image_size, checked_normalisation,
                                    checked_root, checked_validation,
                                    PLACE, epoch_length, largest_size, place_of)
from train.numbers import Real, Whole, flag, optional, whole_number
from train.shard_index import ShardSet
from train.transforms import IMAGENET_MEAN, IMAGENET_STD, ResolutionRamp

log = logging.getLogger("train")

# The states this version reads: states of earlier versions are refused (checked_state), not converted.
STATE_FORMAT = "imagenet-loader/2"
# What a saved position is only valid for: another value reads other samples in another order.
STATE_IDENTITY = ("format", "dataset_id", "split", "seed", "batch_size", "shuffle_buffer")
# What a position inside an epoch is valid for besides: the rest of the epoch would be read or augmented
# otherwise. At an epoch's end nothing of it is left: the next epoch may differ in these.
MID_EPOCH_IDENTITY = ("world_size", "repeats", "size", "augment")
# The run's layout a training state carries (the world size and per-rank batch it started on): a loader of another
# world size that keeps the global batch reads it (an elastic resume, #52). A state without them is its own.
CANONICAL = ("canonical_world_size", "canonical_batch_size")


class ImageNetClass(NamedTuple):
    """A class of the dataset, as its manifest names it: `loader.classes[label]`."""
    wnid: str  # WordNet's id, "n01440764"
    name: str  # its words, "tench, Tinca tinca" (the wnid again where the source named none)


@dataclass
class Counters:
    """What a loader has done since it was made, for your logs (this rank only)."""
    images: int = 0  # images yielded
    bad_samples: int = 0  # left out (damaged, over the pixel limit, labelled with no class)
    pil_fallbacks: int = 0  # decoded by the PIL path (an image the crop-region decoder does not take)
    seeked_images: int = 0  # decoded from only the restart intervals their crops cover (seekable shards)
    data_wait_s: float = 0.0  # seconds the caller waited for a batch


class _Shared:
    """What a train and a val loader of one process share: the Loader (its threads, its rings of
    pinned buffers, the splits' shard sets), the device decoder of decode='gpu', the passes open
    (the last close() ends them), and how many loaders still use them."""

    def __init__(self, loader: Loader, device_decoder, dataset_id: str, classes: tuple[ImageNetClass, ...],
                 class_subsets: dict[str, tuple[int, ...]], class_maps: dict[str, tuple[int, ...]], held: int | None):
        self.loader, self.device_decoder = loader, device_decoder
        # the dataset's readers lock (shards.lock.shared_read_lock): let go with the last close(), or as this is
        # collected (a loader dropped without close()); by this process alone, not a child forked with this object
        self.held = held
        self.let_go = weakref.finalize(self, release_taken_by, os.getpid(), held) if held is not None else None
        self.dataset_id, self.classes, self.class_subsets = dataset_id, classes, class_subsets
        self.class_maps = class_maps
        self.users = 1
        self.passes: weakref.WeakSet = weakref.WeakSet()  # the generators of the passes not yet finished
        self.lock = threading.Lock()
        self.pid = os.getpid()  # the process whose threads decode: a forked child has none of them


class ImageNetLoader:
    """Batches of a prepared ImageNet for this rank: `for images, labels in loader`.

    root:            the dataset `python -m prepare` wrote on this node
    split:           "train" (RandomResizedCrop + flip, shuffled, whole batches, the same count on
                     every rank) or "val" (resize + centre crop, every sample once over the ranks), or
                     an evaluation set the dataset was prepared with ("v2", "v2-threshold",
                     "v2-top-images": ImageNetV2), read as val is
    batch_size:      per rank
    image_size:      the training crop's side, or a ResolutionRamp (a side that changes with the
                     epoch, as FFCV's progressive resizing)
    device:          any torch device; with CUDA, pinned buffers and a copy on a side stream
    seed:            the shuffle and the augmentation
    workers:         decoding threads; None: this rank's share of the CPUs it may use, less one
    decode:          "cpu" (crop-region decode in the threads) or "gpu" (nvImageCodec on the device)
    dtype:           of the images yielded: a floating dtype (normalised in float32 first), or
                     torch.uint8 (0-255 as decoded, not normalised: for a model that normalises
                     itself; no random erasing nor MixUp/CutMix, which make floats)
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
    augment:         train only: an Augment, torchvision's per-sample policies, random erasing and
                     MixUp/CutMix (train/augment/); None: RandomResizedCrop + flip alone
    repeats:         train only: readings of each sample per epoch, each with its own augmentation
                     (repeated augmentation, torchvision's RASampler); the epoch keeps its length
    val_crop:        validation's output side, or (height, width) (timm's input_size (3, H, W):
                     batches of (B, 3, H, W)) (None: the training size, a ramp's last)
    val_resize:      validation's Resize before CenterCrop(val_crop), as torchvision's evaluation
                     preset (None: val_crop x 256/224, or what val_crop_fraction makes it); smaller
                     than val_crop, the crop pads with black, as CenterCrop pads
    val_crop_fraction: the crop's share of the resized image, timm's crop_pct: Resize(floor(val_crop /
                     val_crop_fraction)), padded where above 1; with val_crop_mode "ffcv", FFCV's ratio
                     (default 224/256, at most 1)
    val_crop_mode:   "center" (Resize's short side, then CenterCrop: torchvision's, and timm's
                     crop_mode "center"), "squash" (timm's: Resize to a square, then CenterCrop),
                     "border" (timm's: the long side resized, the ratio kept, padded in round(255 x
                     mean)) or "ffcv" (FFCV's CenterCropRGBImageDecoder: the centre square of
                     val_crop_fraction x the short side, resized to val_crop; no val_resize). A published
                     model's: train.eval_transform_arguments(its timm config or torchvision preset)
    val_interpolation: validation's resize filter: "bilinear" (PIL's, antialiased: torchvision's
                     default), "bicubic" (PIL's, a = -0.5: timm's default, torchvision's for some
                     weights) or "area" (OpenCV's INTER_AREA: FFCV's)
    mean, std:       the normalisation, three numbers each (R, G, B) in 0-1 units, as torchvision's
                     Normalize after ToTensor; None: ImageNet's, (0.485, 0.456, 0.406) and
                     (0.229, 0.224, 0.225). Not with uint8 output

    Every number may be Python's, numpy's or a 0-d tensor, and is kept as the plain int or float it
    equals; a bool, NaN, an infinity, a float where a whole number is meant, or a setting that
    would be ignored (augment, repeats or fixed_shape on a split other than train) is a ConfigError naming it.
    """

    def __init__(self, root: str | Path, split: str = "train", *, batch_size: Whole, image_size: Whole | ResolutionRamp,
                 device: torch.device | str, seed: Whole = 0, workers: Whole | None = None, decode: str = "cpu",
                 dtype: torch.dtype = torch.float32, channels_last: bool = True, shuffle_buffer: Whole = 1000,
                 max_bad_samples: Whole | None = 100, fixed_shape: bool = False, prefetch: Whole = 2,
                 rank: Whole | None = None, world_size: Whole | None = None, augment: Augment | None = None,
                 repeats: Whole = 1, val_crop: Whole | tuple[Whole, Whole] | None = None,
                 val_resize: Whole | None = None, val_crop_fraction: Real | None = None, val_crop_mode: str = "center",
                 val_interpolation: str = "bilinear", mean: Sequence[Real] | None = None,
                 std: Sequence[Real] | None = None):
        imported_apart("torchvision")  # before this loader holds anything: see imported_apart
        # Every setting checked, and every number made a plain int or float, before a thread starts.
        self.batch_size = whole_number("batch_size", batch_size, least=1)
        self.image_size = checked_image_size(image_size)
        self.augment, self.repeats = checked_augment(augment), whole_number("repeats", repeats, least=1)
        self.fixed_shape = flag("fixed_shape", fixed_shape)
        check_only_train_augments(split, self.augment, self.repeats, self.fixed_shape)
        self.seed = whole_number("seed", seed)
        self.shuffle_buffer = whole_number("shuffle_buffer", shuffle_buffer, least=1)
        self.prefetch = whole_number("prefetch", prefetch, least=1)
        self.max_bad_samples = optional(whole_number, "max_bad_samples", max_bad_samples, least=0)
        threads = optional(whole_number, "workers", workers, least=1)
        check_decode(decode)
        check_dtype(dtype, self.augment)
        self.mean, self.std = checked_normalisation(dtype, mean, std)
        self.validation = checked_validation(self.image_size, val_crop, val_resize, val_crop_fraction, val_crop_mode,
                                             val_interpolation, self.mean)  # "border" pads in the mean's colour
        # validation's output side, and its Resize (None with val_crop_mode "ffcv", which has none)
        self.val_crop = self.validation.crop if self.validation.square else self.validation.shape  # (height, width)
        self.val_resize = self.validation.resize
        self.device, self.root = checked_device(device), checked_root(root)
        check_device_decode(decode, self.device, torch.version.hip)
        self.dtype, self.channels_last = dtype, flag("channels_last", channels_last)
        # the launcher's environment, read once: this process's place and its share of the CPUs
        env = self_place(rank, world_size, workers)
        self.rank, self.world_size, self._place_given = place_of(rank, world_size, env)
        held = read_lock(self.root)  # first: a prepare replacing the dataset from now on is refused
        try:
            self._open(split, held, threads, env, decode)
        except BaseException:
            if hasattr(self, "_shared"):
                self._shared.loader.close()
                if self._shared.let_go is not None:
                    self._shared.let_go()
            elif held is not None:
                release(held)
            raise

    def _open(self, split: str, held: int | None, threads: int | None, env: DistEnv | None, decode: str) -> None:
        """The dataset read, the threads and buffers made (__init__'s second half, under the readers lock `held`)."""
        manifest = read_complete_manifest(self.root)  # a missing or damaged dataset: one line, what to run
        say_what_is_missing(manifest, self.root, self.rank)
        split = check_split(split, manifest.splits)
        self._check_batches(split, manifest.splits[split].samples)
        device_decoder = device_decoder_for(decode)  # before the threads: a missing package leaves none running
        largest = max(*self.validation.shape, largest_size(self.image_size))  # a batch slot's side
        if decode == "cpu":  # its buffers in this process's memory (decode='gpu' decodes into the device's)
            check_buffers_fit(slot_images(self.batch_size, [info.samples for info in manifest.splits.values()]),
                              largest, RING, env.local_world_size if env is not None else 1, memory_limit())
        loader = Loader({s: ShardSet.of(self.root, manifest, s) for s in manifest.splits}, batch_size=self.batch_size,
                        image_size=largest, threads=decode_threads(threads, env), decode=decode,
                        pin_memory=pins_memory(self.device))
        self._shared = _Shared(loader, device_decoder, manifest.dataset_id(), classes_of(manifest),
                               {name: tuple(indices) for name, indices in manifest.class_subsets.items()},
                               {table: tuple(mapping["index"]) for table, mapping in manifest.class_maps.items()}, held)
        self._mixer = mixer_for(self.augment, manifest.num_classes)
        self._begin(split)

    def _begin(self, split: str) -> None:
        """This loader's own state: its split, its place in the epochs, its counters."""
        self.split, self.counters, self.closed = split, Counters(), False
        self._epoch, self._position = 0, 0  # the epoch of the pass under way (or next), batches of it taken
        self._chosen, self._started, self._resumable = False, False, None
        self._loaded_finished = False  # the state loaded is at its epoch's end (rank 0's: val's ranks differ)
        # the run's layout (world size, per-rank batch) its training passes read: its own, or a state's of another
        # world size that keeps the global batch (an elastic load_state_dict: shards.plan.elastic_train_plan)
        self._layout = (self.world_size, self.batch_size)
        self._bad_this_epoch, self._pass_open = 0, False

    def with_split(self, split: str) -> "ImageNetLoader":
        """A loader of `split` with this one's settings, sharing its threads and pinned buffers (a
        train and a val loader made so do not double them). Close both; the last one to close
        stops the threads. `augment`, `repeats` and `fixed_shape` come along and act on train passes only: the val
        loader of an augmented train loader reads val plainly, and its own with_split("train")
        augments again."""
        split = check_split(split, self._shared.loader.splits)
        self._check_open()
        self._check_batches(split, len(self._shared.loader.splits[split]))
        other = object.__new__(type(self))  # not copy.copy: a copy of its own is refused (__reduce_ex__)
        other.__dict__.update(self.__dict__)
        other._begin(split)
        with self._shared.lock:
            self._shared.users += 1
        return other

    def __reduce_ex__(self, protocol):
        """Refused: pickle, copy.copy and copy.deepcopy all ask this. A copy would share the threads without
        counting as their user (closing it would stop the original's), and threads and memory maps do not pickle."""
        raise TypeError("an ImageNetLoader does not copy or pickle (it holds decoding threads and memory-mapped "
                        "shards): make one in each process with the same arguments, use with_split() for another "
                        "split sharing its threads, and save state_dict() to carry its position")

    def _check_batches(self, split: str, samples: int) -> None:
        """A batch on every rank; with repeats, at least as many samples a rank as readings of one."""
        check_has_batches(split, samples, self.world_size, self.batch_size)
        if split == "train":
            check_repeats(self.repeats, samples, self.world_size, self.batch_size)

    @property
    def num_classes(self) -> int:
        return len(self._shared.classes)

    @property
    def classes(self) -> tuple[ImageNetClass, ...]:
        """The dataset's classes in label order, from its manifest: `classes[label].wnid` and
        `.name` (each a named tuple, so `for wnid, name in loader.classes` works too)."""
        return self._shared.classes

    @property
    def class_subsets(self) -> dict[str, tuple[int, ...]]:
        """Named subsets of the classes to score on their own, from the manifest: for ImageNet-22k
        (timm/imagenet-22k-wds, whose val is ImageNet-12k's), {"12k": the labels of the 12k classes, in 12k's
        order}: `logits[:, subset].argmax(1)` is a prediction among them. Empty for most datasets."""
        return dict(self._shared.class_subsets)

    @property
    def class_maps(self) -> dict[str, tuple[int, ...]]:
        """Where the classes lie in another class table they nest with, from the manifest: winter21
        (winter21_whole.tar.gz, timm/imagenet-w21-wds) labelled in its own 19,167 classes gives
        {"imagenet-22k": each label's index among ImageNet-22k's 21,841}; labelled in 22k's, {"imagenet-w21":
        each label's index among winter21's, -1 for the 2,674 it lacks}. A model of the other table is scored on
        these labels with `logits[:, torch.tensor(maps["imagenet-22k"])]` (a 22k model, its outputs on w21's
        labels) or on `torch.tensor(maps["imagenet-w21"])[labels]` (a w21 model, 22k's labels as its own). Empty
        for most datasets."""
        return dict(self._shared.class_maps)

    @property
    def threads(self) -> int:
        return self._shared.loader.threads

    def __len__(self) -> int:
        """Batches this rank yields in a whole epoch: the same on every rank for train (the last
        partial global batch is dropped); for val, this rank's share, its last batch partial."""
        self._check_place()
        return epoch_length(self.split, len(self._shared.loader.splits[self.split]), self.world_size,
                            self.batch_size, self.rank)

    def state_size(self, epoch: int) -> int | list[int]:
        """What a state's `size` holds: the output side of `epoch`'s images, [height, width] where not square
        (the rest of the epoch is read at it; a list: the state passes through JSON)."""
        if self.split != "train" and not self.validation.square:
            return list(self.validation.shape)
        return self.size_of(epoch)

    def size_of(self, epoch: int) -> int:
        """The output side of this loader's images in `epoch` (val's width where not square: the plan's)."""
        if self.split != "train":
            return self.validation.crop
        return self.image_size if isinstance(self.image_size, int) else self.image_size.size(epoch)

    def _check_place(self) -> None:
        """A loader made before init_process_group (mp.spawn's usual order) read its place from the
        environment, rank 0 of 1 where nothing is set: on every rank it would read the whole dataset."""
        if self._place_given or not (dist.is_available() and dist.is_initialized()):
            return
        group = dist.get_rank(), dist.get_world_size()
        if group != (self.rank, self.world_size):
            raise ConfigError(f"this loader was made as rank {self.rank} of {self.world_size}, but torch.distributed "
                              f"now says rank {group[0]} of {group[1]}: make the loader after "
                              "init_process_group (or pass rank= and world_size=)")

    # ------------------------------------------------------------ epochs and position

    def set_epoch(self, epoch: Whole) -> None:
        """The epoch the next pass reads, as DistributedSampler.set_epoch: its own order and
        augmentation. After load_state_dict, the state's epoch continues where the state stopped;
        any other starts at its first batch. A pass without set_epoch reads the epoch after the last.
        Any whole number of 0 or more: numpy integers and 0-d tensors are the same epoch as the int."""
        epoch = whole_number("epoch", epoch, least=0)
        self._check_no_pass_open("set_epoch()")
        if self._resumable == epoch:  # again and again until a pass: the state's position stays
            self._loaded_finished = False  # asked for by name: a state at its end reads the rest, nothing
        else:
            self._position, self._resumable = 0, None
        self._epoch, self._chosen, self._started = epoch, True, False

    def _begin_pass(self) -> tuple[int, int]:
        finished_state = self._resumable is not None and self._loaded_finished  # loaded at an epoch's end
        if (self._started and not self._chosen) or finished_state:  # no set_epoch since: the next epoch
            self._epoch, self._position = self._epoch + 1, 0
        if self._position == 0:
            self._bad_this_epoch = 0
        self._chosen, self._started, self._resumable = False, True, None
        return self._epoch, self._position

    def state_dict(self) -> dict:
        """Where this loader is: the epoch and the batches of it taken, and what that position is
        valid for. The same on every rank at the same step (but a val pass's last: a rank with one batch
        fewer has ended one before), and rank 0's loads on every rank: rank 0 may save it alone. Plain
        ints and strings: it passes json.dumps and torch.load(weights_only=True). Its augment is the one the
        batches get (Augment.effective(): the policy's defaults filled in)."""
        self._check_place()
        return {"format": STATE_FORMAT, "dataset_id": self._shared.dataset_id, "split": self.split, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size, "shuffle_buffer": self.shuffle_buffer,
                "repeats": self.repeats, "size": self.state_size(self._epoch),
                "augment": self.augment.effective() if self.split == "train" else None,
                "epoch": self._epoch, "position": self._position,
                **dict(zip(CANONICAL, self._layout))}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a state_dict(): the next pass (or set_epoch with the state's epoch) yields
        exactly the batches after the ones taken, the same pixels and labels. ResumeError where the
        state is malformed or belongs to another dataset, seed, batch size, split or (mid-epoch)
        world size. A state at an epoch's end loads into any world size: the next epoch is whole.
        A state saved by an earlier version of this loader (another format) is refused."""
        self._check_no_pass_open("load_state_dict()")
        epoch, position = checked_state(state)
        mine = {**self.state_dict(), "size": self.state_size(epoch)}
        finished = position >= longest_epoch(state, len(self._shared.loader.splits[self.split]))
        # the global batch kept: another world size reads the run's layout
        keeps_layout = self.split == "train" and global_batch(state) == self.world_size * self.batch_size
        names = STATE_IDENTITY + (() if finished else MID_EPOCH_IDENTITY)
        wrong = [f"{name}: the state's {state[name]!r}, this loader's {mine[name]!r}" for name in names
                 if state[name] != mine[name] and not (keeps_layout and name in ("world_size", "batch_size"))]
        if wrong:
            raise ResumeError(f"this loader state was saved by another loader ({'; '.join(wrong)}): make the loader "
                              f"as the state's was made, or start without it{elastic_hint(state, self.world_size)}")
        if finished:
            position = len(self)  # nothing of the epoch is left, whatever this world's length
        elif self.split != "train":  # a val pass: a rank may have one batch more than this one
            position = min(position, len(self))
        if position > len(self):
            raise ResumeError(f"the loader state's position {position} is outside its epoch of {len(self)} batches")
        self._epoch, self._position, self._loaded_finished = epoch, position, finished
        self._chosen, self._started, self._resumable = True, False, epoch
        self._layout = canonical_of(state) if keeps_layout else (self.world_size, self.batch_size)
        if keeps_layout and state["world_size"] != self.world_size and self.rank == 0:
            log.info("resumed on %d rank%s from %d: per-rank batch %d -> %d; the same global batches of %d (the run's "
                     "layout, %d x %d, read on this world)", self.world_size, "s"[:self.world_size != 1],
                     state["world_size"], state["batch_size"],
                     self.batch_size, self.world_size * self.batch_size, *self._layout)

    # ------------------------------------------------------------ batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(images, labels) of the next pass: images in `dtype`, normalised, (B, 3, S, S), on the
        device; labels int64 on the device, or with MixUp/CutMix soft targets, float (B, classes).
        A batch with bad samples left out is that much smaller."""
        for batch in self.batches():
            yield batch.images, batch.labels if batch.targets is None else batch.targets

    def batches(self) -> Iterator[Batch]:
        """The next pass as full batch records: images and labels on the device, the samples' key
        hashes (summed over an epoch, they tell which samples were read), the samples left out as
        (sample, why), how many images the PIL path decoded and how many were decoded from only the
        restart intervals their crops cover. One pass of a loader at a time."""
        self._check_open()
        if self._pass_open:
            raise RuntimeError(f"a pass of this {self.split} loader is still open: finish it, or leave it (break out "
                               "of its loop, or close() its iterator), before starting another; one you no longer hold "
                               "(a local of a function that raised, kept by an interactive session's last traceback) "
                               "ends as you close() the loader: make another, and load_state_dict() this one's "
                               "state_dict() to go on where it stopped")
        this_pass = self._pass()
        self._shared.passes.add(this_pass)
        return self._said_if_closed(this_pass)

    def _said_if_closed(self, this_pass: Generator[Batch, None, bool]) -> Iterator[Batch]:
        """The pass's batches; where close() ends it under the caller (from another thread, or while the caller holds
        a batch), the RuntimeError that says so: not the generator's `ValueError: generator already executing` (close()
        ending it in another thread as the caller asks for a batch), nor a quiet end mid-epoch, as an epoch ends."""
        try:
            while True:
                try:
                    batch = next(this_pass)
                except StopIteration as end:
                    if end.value is not True:  # ended by close(), not by its epoch
                        self._check_open_during_pass()
                    return
                except ValueError:
                    self._check_open_during_pass()
                    raise
                yield batch
        finally:
            with contextlib.suppress(ValueError):  # being ended by close() in another thread: it ends there
                this_pass.close()  # left early (break): its copier stops and its buffers go back now

    def _pass(self) -> Generator[Batch, None, bool]:
        """The pass; True as it ends with its epoch."""
        self._pass_open = True
        try:
            self._check_place()
            epoch, start = self._begin_pass()
            train = self.split == "train"
            args = PlanArgs(split=self.split, epoch=epoch, seed=self.seed, world_size=self.world_size, rank=self.rank,
                            batch_size=self.batch_size, shuffle_buffer=self.shuffle_buffer, size=self.size_of(epoch),
                            validation=None if train else self.validation, start_step=start,
                            repeats=self.repeats if train else 1, draws=self.augment.draws if train else None,
                            canonical=self._layout if train else None)
            # the augmentation as stages of the data path: its draws in the decode threads, its ops on the device
            with DeviceBatches(self._shared.loader.epoch(args), self.device, self.channels_last, depth=self.prefetch,
                               device_decoder=self._shared.device_decoder, dtype=self.dtype,
                               augment=self.augment.on_device(), mean=self.mean or IMAGENET_MEAN,
                               std=self.std or IMAGENET_STD) as on_device:
                arriving = iter(on_device)
                while True:
                    self._check_process()  # a pass opened before a fork: the child has no thread to wait for
                    asked = time.perf_counter()
                    try:
                        batch = next(arriving, None)
                    except Exception:
                        self._check_open_during_pass()  # closed under it (a signal handler's close()): said so
                        raise
                    self.counters.data_wait_s += time.perf_counter() - asked
                    if batch is None:
                        return True
                    self._leave_out(batch.bad)
                    self.counters.images += len(batch.labels)
                    self.counters.pil_fallbacks += batch.pil_fallbacks
                    self.counters.seeked_images += batch.seeked
                    if self.fixed_shape and train:
                        batch = filled(batch, self.batch_size, self.channels_last)
                    if self._mixer is not None and train and len(batch.labels):
                        # within the run's per-rank batches: another world size mixes as the run's own did
                        groups = mixing_groups(self._layout, self.world_size, self.rank, self.batch_size,
                                               len(batch.labels))
                        seeds = [(start, stop, mixing_seed(self.seed, epoch, owner, self._position))
                                 for start, stop, owner in groups]
                        images, targets = mixed_in_groups(batch.images, batch.labels, self._mixer, seeds,
                                                          self.channels_last)
                        batch = batch._replace(images=images, targets=targets)
                    self._position += 1  # the caller has it: a state taken now resumes after it
                    yield batch
        finally:
            self._pass_open = False

    def _leave_out(self, bad: tuple) -> None:
        """Name each bad sample; past max_bad_samples this epoch, stop in one line."""
        self.counters.bad_samples += len(bad)
        self._bad_this_epoch += len(bad)
        this_epoch = self._bad_this_epoch
        dest = shlex.quote(str(self.root))  # (a command to paste: a path with a space stays one word)
        for sample, why in bad:
            log.warning("left out %s (%s; %d this epoch on this rank). Its shard may be damaged: check the dataset "
                        "with `python -m prepare --source ... --dest %s --verify`", sample, why, this_epoch, dest)
        if bad and self.max_bad_samples is not None and this_epoch > self.max_bad_samples:
            sample, why = bad[-1]
            raise DamagedData(f"{this_epoch} bad {self.split} samples this epoch on this rank, more than "
                              f"max_bad_samples {self.max_bad_samples}; the last: {sample} ({why}). The node's disk "
                              f"or dataset is damaged: run `python -m prepare --source ... --dest {dest} --verify` "
                              "on this node (it finds and rebuilds damaged shards), or raise max_bad_samples")

    @property
    def device_decode_fallbacks(self) -> int:
        """decode='gpu': images the device decoder left to PIL on the host (train and val together)."""
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
            if self._shared.let_go is not None:
                self._shared.let_go()  # a prepare may replace the dataset now

    def _check_no_pass_open(self, doing: str) -> None:
        """A pass reads the epoch and position it began with: changing them under it would make its
        state_dict() describe batches it never yielded."""
        if self._pass_open:
            raise RuntimeError(f"{doing} while a pass of this {self.split} loader is open: finish the pass, or leave "
                               "it (break out of its loop, or close() its iterator), first")

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"this {self.split} ImageNetLoader is closed")
        self._check_process()

    def _check_process(self) -> None:
        if os.getpid() != self._shared.pid:
            # A forked child (a DataLoader worker over it, a fork-started Pool) inherits the loader but not its
            # threads: after a pass in the parent it waited for them forever; before one, each worker read the
            # whole epoch, every batch once a worker.
            raise RuntimeError(f"this {self.split} ImageNetLoader was made in process {self._shared.pid}, not this "
                               f"one ({os.getpid()}, forked from it: a DataLoader worker?), which has none of its "
                               "decoding threads: iterate it in the process that made it (a DataLoader over it with "
                               "num_workers=0: it decodes in threads of its own), or make one in this process")

    def _check_open_during_pass(self) -> None:
        """A pass whose loader was closed under it stops with that, not with what its stopped threads raise."""
        if self.closed:
            raise RuntimeError(f"this {self.split} ImageNetLoader was closed during a pass of it: the pass ends there; "
                               "close() a loader after its loop") from None

    def __enter__(self) -> "ImageNetLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def imported_apart(name: str) -> None:
    """Import `name` (where it is not yet) in a thread of its own, not under a loader's frames. torchvision is imported
    where a loader first needs it (1.8 s), and PIL built without FreeType (pillow-simd, as jobs/install.sh builds it)
    keeps the ImportError its ImageFont raised as torchvision imports it, traceback and all, and with it every frame
    above the import for the life of the process: the first loader's __init__, and so that loader, its threads, maps
    and buffers, never freed. In a thread of its own, only that thread's frames are kept."""
    if name in sys.modules:
        return

    def run() -> None:
        with contextlib.suppress(Exception):  # said by the import below, in the caller's thread
            importlib.import_module(name)

    thread = threading.Thread(target=run, name=f"import {name}")
    thread.start()
    thread.join()
    importlib.import_module(name)  # imported: at once; not importable: its error, here


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
    return take(batch, index)._replace(images=images, key_hashes=batch.key_hashes)


def device_decoder_for(decode: str):
    """The decoder of decode='gpu'; ConfigError naming what to install where nvImageCodec is missing."""
    if decode != "gpu":
        return None
    from train.device_decode import DeviceDecoder

    try:
        return DeviceDecoder()
    except ImportError as exn:
        raise ConfigError("{decode} gpu: " + str(exn) + ", or use {decode} cpu", {"decode": "decode"}) from None


def say_what_is_missing(manifest, root: Path, rank: int) -> None:
    """A dataset prepared from an incomplete download (--allow-partial), or whose counts are not
    ImageNet-1k's where nothing declared them: said once, by rank 0, as a run starts on it."""
    if rank != 0:
        return
    for split, line in manifest.partial.items():
        log.warning("%s was prepared with --allow-partial: %s", root, line)
    for split, line in manifest.warnings.items():
        log.warning("%s: %s", root, line)


def classes_of(manifest) -> tuple[ImageNetClass, ...]:
    """The manifest's classes in label order."""
    return tuple(ImageNetClass(c.wnid, c.name) for c in sorted(manifest.classes, key=lambda c: c.index))


def self_place(rank, world_size, workers) -> DistEnv | None:
    """The launcher's environment, read once, where the loader needs it: its place where rank and world_size are
    not given, its share of the CPUs where workers is not. Given its place, a launcher's half-set variables (RANK
    without LOCAL_RANK: a Kubeflow pod, say) are not its business: the CPUs are then shared as by no launcher. Not
    given, a place such variables cannot make is a ConfigError naming rank and world_size."""
    if rank is None and world_size is None:
        try:
            return process_env(os.environ)
        except ClusterError as exn:  # one of the library's own errors, with the library's way out too
            raise ConfigError(f"{exn}; or give the loader this process's data-parallel place, {{rank}} and "
                              "{world_size}", PLACE) from None
    if workers is not None:
        return None
    try:
        return process_env(os.environ)
    except ClusterError:
        return process_env({})


def decode_threads(workers: int | None, env: DistEnv | None) -> int:
    """`workers`, at most the CPUs this process may use: more threads only contend for them (the
    batches are the same for any count). None: this rank's share of them (`env`: cluster.process_env),
    less one (cluster.default_workers); where srun pinned the task to fewer CPUs than the job holds for it
    (cluster.cpus_short), rank 0 says so, once a process."""
    if workers is None:
        assert env is not None
        if env.is_main and (short := cpus_short(env, len(os.sched_getaffinity(0)))):
            say_once(short)
        return default_workers(env, available_cpus())
    cpus = available_cpus()
    if workers > cpus:
        log.warning("workers=%d is more than the %d CPUs this process may use: decoding with %d threads", workers,
                    cpus, cpus)
        return cpus
    return workers


@functools.cache  # (a train loader and a val loader: one line)
def say_once(warning: str) -> None:
    log.warning("%s", warning)


def checked_state(state) -> tuple[int, int]:
    """(epoch, position) of a state_dict() as saved; ResumeError for anything else."""
    if not isinstance(state, Mapping):
        raise ResumeError(f"a loader state is the dict that state_dict() returned, not {type(state).__name__}")
    # the format first: an earlier version's state lacks what this one added, and its refusal is what to say
    if "format" in state and state["format"] != STATE_FORMAT:
        raise ResumeError(f"this loader state is of format {state['format']!r}, an earlier version's; this version "
                          f"reads {STATE_FORMAT!r} alone: states from before it are refused, start the run again")
    missing = [name for name in (*STATE_IDENTITY, *MID_EPOCH_IDENTITY, "epoch", "position") if name not in state]
    if missing:
        raise ResumeError(f"this loader state lacks {', '.join(missing)}: pass the whole dict that state_dict() "
                          "returned")
    numbers = []
    for name in ("epoch", "position"):
        try:
            numbers.append(operator.index(state[name]))
        except TypeError:
            numbers.append(-1)
        if numbers[-1] < 0:
            raise ResumeError(f"the loader state's {name} is {state[name]!r}, not a whole number of 0 or more: "
                              "pass the dict that state_dict() returned")
    return int(numbers[0]), int(numbers[1])


def canonical_of(state: Mapping) -> tuple[int, int]:
    """The run's layout a state carries: (world size, per-rank batch) as the run started."""
    return (int(state.get(CANONICAL[0], state["world_size"])), int(state.get(CANONICAL[1], state["batch_size"])))


def global_batch(state: Mapping) -> int | None:
    """The global batch a state was taken with (its world size x per-rank batch); None where those are not
    whole numbers (a malformed state, refused by name)."""
    try:
        return operator.index(state["world_size"]) * operator.index(state["batch_size"])
    except TypeError:
        return None


def elastic_hint(state: Mapping, world_size: int) -> str:
    """What the refusal adds where a training state of another world size could be read on this one: the
    per-rank batch that keeps its global batch, or the world sizes that divide it."""
    total = global_batch(state)
    if state.get("split") != "train" or state["world_size"] == world_size or total is None:
        return ""
    try:
        batch = per_rank_batch(total, world_size)
    except ValueError as exn:
        return f" ({exn})"
    return (f" (on {world_size} rank{'s' * (world_size != 1)}, batch_size={batch} keeps the state's global batch "
            f"of {total}, and reads its epoch where it stopped)")


def longest_epoch(state: Mapping, samples: int) -> int:
    """The most batches a rank of the state's world had in its epoch (rank 0's: val's longest);
    a position there is the epoch's end. No end where the state's numbers are not numbers."""
    try:
        world_size, batch_size = operator.index(state["world_size"]), operator.index(state["batch_size"])
    except TypeError:
        return 1 << 62
    if world_size < 1 or batch_size < 1:
        return 1 << 62
    return epoch_length(state["split"], samples, world_size, batch_size, 0)
