"""Batches onto the device: augmented and normalised there, a background thread and CUDA stream
ahead of the step.

    to_device        uint8 NHWC on the host -> normalised NCHW (channels_last) on the device, in a
                     floating dtype (float32 by default), or uint8 NCHW as it is
    decode_to_device an EncodedBatch (decode='gpu') decoded, cropped, resized and flipped on the
                     device (train/device_decode.py)
    finished         a batch's images on the device through the rest of torchvision's train
                     preset, in its order: the policy's ops on uint8, normalisation, random erasing
                     (each sample's own draws from the batch record, applied by the augmentation's
                     device stage passed in: train/augment/ops.py's DeviceOps); for uint8 output,
                     the policy's ops alone. On the CPU device the normalisation is native code's
                     (train/native/batches.c), the same bits as torch's, into reused buffers
                     (HostOutputs)
    DeviceBatches    the next batches moved (or decoded) onto the device and finished in a
                     background thread, on a CUDA stream of its own, while the current one trains
"""

from __future__ import annotations

import contextlib
import functools
import queue
import sys
import threading
from typing import Callable, Iterable, Iterator, Protocol

import numpy as np
import torch

from shards.not_built import not_built
from train.accelerators import streams_of
from train.device_decode import DeviceDecoder, crop_resize_flip
from train.loader import Batch, EncodedBatch, take
from train.transforms import IMAGENET_MEAN, IMAGENET_STD


Channels = tuple[float, float, float]


class DeviceAugment(Protocol):
    """The augmentation's device side, a stage passed in (train/augment/ops.py: DeviceOps, which
    Augment.on_device makes): the policy's ops on the uint8 batch from each sample's draws, and
    random erasing of the normalised batch, in place."""

    def apply_policy(self, images: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor: ...

    def erase(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor: ...


@functools.lru_cache(maxsize=None)
def normalisation(device: torch.device, mean: Channels = IMAGENET_MEAN, std: Channels = IMAGENET_STD
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """A mean and std given in 0-1 units (ImageNet's by default), in 0-255 units, made once per device:
    a tensor built from Python numbers every step would be a blocking host-to-device copy on the hot path."""
    mean_255 = torch.tensor(mean, device=device).view(1, 3, 1, 1) * 255
    std_255 = torch.tensor(std, device=device).view(1, 3, 1, 1) * 255
    return mean_255, std_255


def to_device(images: torch.Tensor, device: torch.device, channels_last: bool = True,
              dtype: torch.dtype = torch.float32, mean: Channels = IMAGENET_MEAN,
              std: Channels = IMAGENET_STD) -> torch.Tensor:
    """uint8 NHWC on the host -> normalised NCHW in `dtype` on the device (channels_last memory: a
    free view); uint8 NCHW, not normalised, where `dtype` is torch.uint8."""
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2)
    if dtype == torch.uint8:
        return as_uint8(x, channels_last)
    return normalise(x.float(), channels_last, dtype, mean=mean, std=std)


def decode_to_device(batch: EncodedBatch, device: torch.device, device_decoder: DeviceDecoder
                     ) -> tuple[torch.Tensor, list[int], tuple]:
    """An EncodedBatch decoded, cropped, resized and flipped on the device: (x float NCHW in 0-255,
    the images kept, (sample, why) of those no decoder took)."""
    images = device_decoder.decode(batch.jpegs, batch.windows, device)
    kept = [i for i, image in enumerate(images) if image is not None]
    bad = tuple((batch.describe(i), "damaged data (no decoder on the device or the host takes it)")
                for i, image in enumerate(images) if image is None)
    if not kept:
        return torch.empty((0, 3, *batch.size), device=device), kept, bad
    regions = None if batch.regions is None else batch.regions[kept]
    return crop_resize_flip([images[i] for i in kept], batch.boxes[kept], batch.flips[kept], batch.size,
                            interpolation=batch.interpolation, regions=regions, fill=batch.fill), kept, bad


def finished(x: torch.Tensor, batch: Batch, augment: DeviceAugment | None = None, channels_last: bool = True,
             dtype: torch.dtype = torch.float32, mean: Channels = IMAGENET_MEAN,
             std: Channels = IMAGENET_STD, outputs: "HostOutputs | None" = None) -> torch.Tensor:
    """A batch's images on the device (uint8, or float in 0-255 from the device decode; NCHW) through
    the policy's ops, normalisation and random erasing, as the batch record draws them and `augment`
    applies them: in `dtype`. uint8 output gets the policy's ops alone (erasing and mixing make
    floats: the loader refuses them). On the CPU device a uint8 batch is normalised natively
    (normalised_on_host), or copied (copied_on_host), into one of `outputs`' buffers where given."""
    drawn = [name for name in ("ops", "erase") if getattr(batch, name) is not None]
    if drawn and augment is None:
        raise ValueError(f"a batch with draws ({', '.join(drawn)}) and no augmentation to apply them")
    host = outputs or HostOutputs(limit=0)  # a CPU device's buffers: none kept where none are given
    if batch.ops is not None or dtype == torch.uint8:
        if x.is_floating_point():  # the device decode's resize, rounded as PIL's is
            x = x.round().clamp_(0, 255).to(torch.uint8)
    if batch.ops is not None:
        # the draws stay on the host, where the policy's ops plan the call: no device sync
        x = augment.apply_policy(x, batch.ops, batch.magnitudes)
    if dtype == torch.uint8:
        if batch.erase is not None:
            raise ValueError("uint8 output takes no random erasing: its images are not normalised")
        return copied_on_host(x, channels_last, host) if x.device.type == "cpu" else as_uint8(x, channels_last)
    erasing = None if batch.erase is None else functools.partial(augment.erase, boxes=batch.erase)
    if x.device.type == "cpu" and x.dtype == torch.uint8:
        return normalised_on_host(x, channels_last, dtype, erasing, mean, std, host)
    # float(): a copy, normalised in place
    return normalise(x.float(), channels_last, dtype, erasing=erasing, mean=mean, std=std)


def as_uint8(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """uint8 NCHW in the memory format asked, always a copy: on a CPU device `x` may still be the
    loader's host buffer, which the next batch overwrites."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    return x.clone(memory_format=memory_format)


def normalise(images: torch.Tensor, channels_last: bool, dtype: torch.dtype = torch.float32,
              erasing: Callable[[torch.Tensor], torch.Tensor] | None = None, mean: Channels = IMAGENET_MEAN,
              std: Channels = IMAGENET_STD) -> torch.Tensor:
    """Float NCHW in 0-255 -> normalised by `mean` and `std` (0-1 units; ImageNet's by default), in
    float32, in place (`images` is already a float copy), then erased by `erasing` (a function of the
    normalised images, where given: RandomErasing runs after normalisation), then `dtype` and the
    memory format in one copy."""
    mean_255, std_255 = normalisation(images.device, tuple(mean), tuple(std))
    images = images.sub_(mean_255).div_(std_255)
    if erasing is not None:
        images = erasing(images)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    return images.to(dtype=dtype, memory_format=memory_format)


# ---------------------------------------------------------------- the CPU device: normalised on the host

def native_batches():
    """train._batches (train/native/batches.c), imported where a batch is first normalised on the
    host: a GPU run never needs it."""
    try:
        from train import _batches
    except ImportError as exn:
        raise not_built("train._batches", "the native module", exn) from None
    return _batches


@functools.lru_cache(maxsize=None)
def host_statistics(mean: Channels, std: Channels) -> tuple[np.ndarray, np.ndarray]:
    """The mean and std in 0-255 units as the native normalisation takes them, float32 (3,): the very
    float32 products `normalisation` makes, so that both paths divide by the same numbers."""
    mean_255, std_255 = normalisation(torch.device("cpu"), mean, std)
    return mean_255.view(3).numpy(), std_255.view(3).numpy()


def normalised_on_host(x: torch.Tensor, channels_last: bool, dtype: torch.dtype,
                       erasing: Callable[[torch.Tensor], torch.Tensor] | None, mean: Channels, std: Channels,
                       outputs: "HostOutputs") -> torch.Tensor:
    """`normalise(x.float(), ...)` bit for bit, for uint8 NCHW `x` on the host: one native pass (the
    GIL released, no thread pool) from the NHWC pixels into a float32 buffer of `outputs` in the
    memory format asked, then erasing and `dtype` as `normalise` applies them."""
    pixels = x.permute(0, 2, 3, 1).contiguous()  # the loader's NHWC batch as it is; a policy's output copied
    images = outputs.take(len(x), x.shape[2], x.shape[3], channels_last, torch.float32)
    written = images.permute(0, 2, 3, 1) if channels_last else images  # C-contiguous either way
    native_batches().normalise(pixels.numpy(), written.numpy(), *host_statistics(tuple(mean), tuple(std)),
                               planar=not channels_last)
    if erasing is not None:
        images = erasing(images)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    return images.to(dtype=dtype, memory_format=memory_format)  # float32: the buffer itself


def copied_on_host(x: torch.Tensor, channels_last: bool, outputs: "HostOutputs") -> torch.Tensor:
    """as_uint8(x, channels_last)'s values, for uint8 NCHW `x` on the host, copied into a buffer of
    `outputs` by numpy (one thread: torch's copy wakes its OpenMP threads, which spin against the
    decoding threads) instead of a fresh tensor a batch."""
    images = outputs.take(len(x), x.shape[2], x.shape[3], channels_last, torch.uint8)
    as_stored = (lambda t: t.permute(0, 2, 3, 1)) if channels_last else (lambda t: t)  # C-contiguous out
    np.copyto(as_stored(images).numpy(), as_stored(x).numpy())
    return images


def storage_holders(images: torch.Tensor) -> tuple[int, int] | None:
    """How many hold `images`' memory: the tensors (views, autograd's saved tensors, numpy arrays,
    DLPack capsules all hold one) and the Python references to its storage object. None where this
    torch cannot say (its private counter gone): the buffer is then never reused."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:
        return None
    storage = images.untyped_storage()
    return use_count(storage._cdata), sys.getrefcount(storage)


class HostOutputs:
    """The batches a CPU device yields (float32 normalised, or uint8), written again once nobody holds
    them. A fresh tensor of a batch's size (38 MB at 64 x 224 px: above malloc's mmap threshold) comes
    as new pages that the kernel faults in and zeroes, which cost 0.25 ms an image, more than
    normalising it. A buffer is
    reused only when nothing but this pool holds its memory (storage_holders as it was when made:
    no tensor, view, array or autograd graph of the caller's still refers to it), so a batch the
    caller keeps is never overwritten; at most `limit` buffers are kept, and a batch beyond them is
    a new tensor, as before."""

    def __init__(self, limit: int):
        self.limit = limit
        self.buffers: list[tuple[torch.Tensor, tuple[int, int]]] = []  # (buffer, its holders when made)

    def take(self, n: int, height: int, width: int, channels_last: bool,
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """An (n, 3, height, width) tensor of `dtype` in the memory format asked, its values to be written."""
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        for buffer, holders in self.buffers:
            if (buffer.dtype == dtype and buffer.shape[0] >= n and buffer.shape[2:] == (height, width)
                    and buffer.is_contiguous(memory_format=memory_format) and storage_holders(buffer) == holders):
                return buffer[:n]  # a view: while the caller holds it, the buffer's count says so
        buffer = torch.empty((n, 3, height, width), dtype=dtype, memory_format=memory_format)
        holders = storage_holders(buffer)
        if holders is None or len(self.buffers) >= self.limit:
            return buffer
        self.buffers.append((buffer, holders))
        return buffer[:n]


class DeviceBatches:
    """Batch(x, y, key hashes, bad, pil fallbacks, seeked) on the device, x in `dtype` (normalised by
    `mean` and `std`, or uint8 as decoded), `depth` batches ahead of the training step.

    A background thread takes batches from the loader, moves each onto the device (the copy of
    pinned uint8, or the whole decode='gpu' decode) and finishes it there (`finished`: `augment`,
    the augmentation's device stage, where the batches carry draws; normalisation) on a stream
    of its own, so that work overlaps the model's step instead of stalling it: on the model's stream
    a pageable or in-order copy makes the GPU idle while the host waits for it. The thread waits for each copy
    to finish before asking the loader for the next batch, which frees the host buffer for reuse;
    the consumer's stream waits on an event per batch. Use as a context manager: leaving it (a
    finished epoch, a preemption break, an error) stops the thread and drops the batches read ahead.
    """

    _END = object()

    def __init__(self, batches: Iterable[Batch], device: torch.device, channels_last: bool = True, depth: int = 2,
                 device_decoder: DeviceDecoder | None = None, dtype: torch.dtype = torch.float32,
                 augment: DeviceAugment | None = None, mean: Channels = IMAGENET_MEAN, std: Channels = IMAGENET_STD):
        self.device, self.channels_last, self.dtype = device, channels_last, dtype
        self.mean, self.std = mean, std  # in 0-1 units; unused for uint8 output
        self.augment = augment  # applies the batches' draws (Augment.on_device); None: they carry none
        self.device_decoder = device_decoder  # for decode='gpu' batches; made at the first one if not given
        self.streams = streams_of(device)  # torch.cuda, torch.xpu: the accelerator's streams; None on the CPU
        self.stream = self.streams.Stream(device) if self.streams else None
        # a CPU device's normalised batches, reused: the caller's, those queued, the one being made, and spares
        self.outputs = HostOutputs(limit=depth + 3) if device.type == "cpu" else None
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.batches = batches

    def __enter__(self) -> "DeviceBatches":
        self.thread = threading.Thread(target=self._fill, args=(self.batches,), name="device-batches", daemon=True)
        try:
            self.thread.start()
            return self
        except BaseException:  # a Ctrl-C in start()'s wait for the thread to run: it runs, and no `with` will stop it
            self.__exit__()
            raise

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        if self.thread.ident is not None:  # (not where start() failed to start it)
            self.thread.join()
        # What was read ahead goes now, not with this object: an exception's traceback holds the frames that hold it
        # (an interactive session keeps the last one), and with them the batches queued and the reused buffers. A
        # batch the caller holds keeps its own memory.
        self.outputs = None
        while not self.queue.empty():
            self.queue.get_nowait()

    def _put(self, item) -> bool:
        """Queue `item` unless the consumer has left; False once it has."""
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, batches: Iterable[Batch]) -> None:
        iterator = iter(batches)
        try:
            with self.streams.stream(self.stream) if self.stream else contextlib.nullcontext():
                for batch in iterator:
                    if isinstance(batch.images, EncodedBatch):
                        self.device_decoder = self.device_decoder or DeviceDecoder()
                        x, kept, lost = decode_to_device(batch.images, self.device, self.device_decoder)
                        batch = take(batch, kept)._replace(bad=batch.bad + lost)
                    else:
                        x = batch.images.to(self.device, non_blocking=True).permute(0, 3, 1, 2)
                    x = finished(x, batch, self.augment, self.channels_last, self.dtype, self.mean, self.std,
                                 self.outputs)
                    y = batch.labels.to(self.device, non_blocking=True)
                    ready = None
                    if self.stream:
                        ready = self.streams.Event()
                        ready.record(self.stream)
                        ready.synchronize()  # the host buffer is read: the loader may reuse it
                    if not self._put((batch._replace(images=x, labels=y), ready)):
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
                consumer = self.streams.current_stream(self.device)
                consumer.wait_event(ready)
                batch.images.record_stream(consumer)  # made on our stream, freed after the consumer's use
                batch.labels.record_stream(consumer)
            yield batch
