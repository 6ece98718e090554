"""What the benchmark runs side by side on the same images: our loader (and the public
ImageNetLoader that wraps it), the usual baseline
(torchvision ImageFolder over extracted JPEGs with the standard transforms), NVIDIA DALI's CPU
pipeline when installed, and the decode-only ceiling; plus the workers' memory probe."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Iterator

import torch
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets
from torchvision import transforms as T

from shards.manifest import Manifest
from shards.plan import steps_per_epoch
from train import Augment, ImageNetLoader
from train.errors import ConfigError
from train.device_batches import IMAGENET_MEAN, IMAGENET_STD, HostOutputs, normalised_on_host
from train.loader import Loader, PlanArgs
from train.shard_index import ShardSet


def worker_rss_mb() -> list[float]:
    """Resident memory of this process's children (the DataLoader workers), in MB."""
    me, sizes = os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                pages = int(Path(entry.path, "statm").read_text().split()[1])
                sizes.append(pages * os.sysconf("SC_PAGE_SIZE") / 2**20)
        except (OSError, ValueError, IndexError):
            continue
    return sizes


# ---------------------------------------------------------------- ours

# --augment: the training batches' augmentation beyond the crop and flip (the loader draws it, the device
# applies it: DeviceBatches); MixUp/CutMix, which the public loader adds on the caller's side, not included
AUGMENTS = {"none": Augment(),
            "torchvision-v2": Augment(policy="trivialaugment", policy_interpolation="bilinear", erasing=0.1)}


class Ours:
    """Our training loader (train.loader.Loader), epoch after epoch (seed 0), as python -m train reads
    it; iterate it for batches, `close()` it after."""

    def __init__(self, manifest: Manifest, root: Path, threads: int, batch: int, size: int, *, rank: int = 0,
                 world_size: int = 1, decode: str = "cpu", pin_memory: bool = False, shuffle_buffer: int = 1000,
                 augment: Augment = Augment()):
        samples = manifest.splits["train"].samples
        if steps_per_epoch(samples, world_size, batch) == 0:
            raise ConfigError(f"{samples} training samples make no batch of {batch} per rank: lower --batch-size")
        self.loader = Loader({"train": ShardSet.of(root, manifest, "train")}, batch_size=batch, image_size=size,
                             threads=threads, decode=decode, pin_memory=pin_memory)
        self.rank, self.world_size, self.batch, self.shuffle_buffer = rank, world_size, batch, shuffle_buffer
        self.size, self.augment = size, augment

    def __iter__(self) -> Iterator[tuple]:
        for epoch in itertools.count():
            yield from self.loader.epoch(PlanArgs(
                split="train", epoch=epoch, seed=0, world_size=self.world_size,
                rank=self.rank, batch_size=self.batch, shuffle_buffer=self.shuffle_buffer, size=self.size,
                draws=self.augment.draws))

    def memory_mb(self) -> float:
        return self.loader.memory_bytes() / 2**20

    def close(self) -> None:
        self.loader.close()


def library_passes(root: Path, threads: int, batch: int, size: int, **options
                   ) -> tuple[ImageNetLoader, Iterator[tuple]]:
    """The public ImageNetLoader on the CPU device, epoch after epoch as a user's loop reads it:
    (loader, its (images, labels) batches, normalised). Ours above, with the copy onto the device
    and the normalisation that the library adds (on a CPU device, in its background thread), and
    whatever else `options` ask of it (augment=, repeats=)."""
    loader = ImageNetLoader(root, "train", batch_size=batch, image_size=size, device="cpu", workers=threads,
                            **options)

    def passes():
        for epoch in itertools.count():
            loader.set_epoch(epoch)
            yield from loader

    return loader, passes()


def normalise_ms_per_image(batch: int, size: int, repeats: int = 10) -> float:
    """What normalising a uint8 batch costs on the CPU device, per image, as the library does it
    (device_batches.normalised_on_host: the native pass into a reused float32 buffer, channels_last):
    the part of the library's cost that a GPU device moves off the CPU."""
    images = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    outputs = HostOutputs(limit=1)
    normalise = lambda: normalised_on_host(images, True, torch.float32, None, IMAGENET_MEAN, IMAGENET_STD, outputs)
    normalise()
    start = time.perf_counter()
    for _ in range(repeats):
        normalise()
    return (time.perf_counter() - start) * 1000 / (repeats * batch)


# ---------------------------------------------------------------- the baseline users run today

def extract_image_folder(manifest: Manifest, root: Path, out: Path) -> Path:
    """The train shards as train/<wnid>/<key>.JPEG files, as users extract ImageNet today."""
    import webdataset as wds

    wnid = {c.index: c.wnid for c in manifest.classes}
    for shard in manifest.splits["train"].shards:
        for sample in wds.WebDataset(str(root / shard.name), shardshuffle=False):
            folder = out / wnid[int(sample["cls"])]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{sample['__key__']}.JPEG").write_bytes(sample["jpg"])
    return out


def baseline_loader(folder: Path, workers: int, batch: int, size: int, images: int,
                    policy: torch.nn.Module | None = None, erasing: float = 0.0) -> DataLoader:
    """torchvision's ImageFolder + RandomResizedCrop, flip, (a policy,) ToTensor, Normalize (, RandomErasing)
    in a DataLoader: its classification reference's train preset."""
    transform = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *([policy] if policy else []),
                           T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                           *([T.RandomErasing(erasing)] if erasing else [])])
    dataset = datasets.ImageFolder(str(folder), transform=transform)
    sampler = RandomSampler(dataset, num_samples=images + 64 * batch)
    return DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers,
                      prefetch_factor=4 if workers else None)


# ---------------------------------------------------------------- NVIDIA DALI, the strongest CPU peer

def dali_available() -> bool:
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def dali_loader(manifest: Manifest, root: Path, index_dir: Path, threads: int, batch: int, size: int):
    """DALI reading the same shards: fn.readers.webdataset, image_random_crop on the CPU, resize, flip."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    paths = [str(root / s.name) for s in manifest.splits["train"].shards]
    index_paths = [str(index_dir / (Path(p).name + ".idx")) for p in paths]
    for path, index in zip(paths, index_paths):
        if not Path(index).exists():
            write_dali_index(Path(path), Path(index))

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, prefetch_queue_depth=2)
    def pipeline():
        jpegs, labels = fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=["jpg", "cls"],
                                              random_shuffle=True, initial_fill=1000, name="reader",
                                              missing_component_behavior="error")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        # .cls is decimal ASCII of 1 to 3 digits (shards.format): padded with zeros to the batch's longest, or
        # the batch is no tensor and DALI's iterator refuses it; dali_batches reads the numbers back
        return images, fn.pad(labels, fill_value=0)

    pipe = pipeline()
    pipe.build()
    # whole batches, as ours, and every batch the pipeline decodes handed over and counted: an epoch's last batch
    # filled from the next epoch's samples (FILL), not decoded and dropped (DROP: on a small dataset a batch in
    # several decoded uncounted); the iterator starts its next epoch by itself
    return DALIGenericIterator([pipe], ["images", "labels"], reader_name="reader", auto_reset=True,
                               last_batch_policy=LastBatchPolicy.FILL)


def write_dali_index(shard: Path, index: Path) -> None:
    """DALI's index of a webdataset tar, written by its own wds2idx tool."""
    from wds2idx import IndexCreator  # installed with nvidia-dali as the wds2idx command

    with IndexCreator(str(shard), str(index), verbose=False) as creator:
        creator.create_index()


def dali_batches(iterator):
    """DALI's [{'images': ..., 'labels': ...}] per batch as (images, class indices), epoch after epoch (the
    iterator resets itself at each epoch's end: auto_reset). next() rather than a for loop each epoch: iter() of
    an iterator whose epoch began with the samples FILL read ahead asks for another reset, which it refuses
    with a warning."""
    while True:
        try:
            outputs = next(iterator)
        except StopIteration:  # an epoch's end, already reset
            continue
        yield outputs[0]["images"], padded_labels(outputs[0]["labels"])


def padded_labels(digits: torch.Tensor) -> torch.Tensor:
    """The class indices of a batch of .cls contents, ASCII digits padded with zeros (dali_loader): (B, L) uint8
    -> (B,) int64, as our loader yields them."""
    values = torch.zeros(len(digits), dtype=torch.int64)
    for column in digits.to(torch.int64).T:
        values = torch.where(column > 0, values * 10 + column - ord("0"), values)
    return values
