"""The measurements: one timing function for loaders and training steps alike, each mode's
measurement, and the sum over ranks."""

from __future__ import annotations

import contextlib
import itertools
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.distributed as dist

from shards.manifest import Manifest
from shards.resources import evict_from_page_cache
from train.accelerators import autotunes_convolutions, streams_of
from train.bench.decoders import decode_ceiling
from train.bench.loaders import (Ours, baseline_loader, dali_available, dali_batches, dali_loader, library_passes,
                                 normalise_ms_per_image, worker_rss_mb)
from train.bench.pil_loader import pil_batches
from train.device_batches import DeviceBatches, to_device
from train.run.loop import amp_dtype_for, build_optimizer, model_on, step_module, train_step

log = logging.getLogger("benchmark")


@dataclass(frozen=True)
class Rate:
    images: int
    seconds: float

    @property
    def per_sec(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0


def time_batches(batches: Iterable, images: int, warmup: int, consume: Callable | None = None,
                 sync: Callable[[], None] = lambda: None) -> Rate:
    """Images/s over `images` images after `warmup` batches (start-up and first fetches excluded).

    Each batch (images or x, then labels, ...) is handed to `consume` (a training step) when given;
    the clock starts once batch `warmup` has arrived and been consumed, and `sync` (the device's
    synchronize) runs at both ends so that queued device work is inside the window.
    """
    counted, start = 0, None
    for index, batch in enumerate(batches):
        if consume is not None:
            consume(batch)
        if index == warmup:
            sync()
            start = time.perf_counter()
        elif index > warmup:
            counted += len(batch[1])  # the labels: every kind of batch has them
            if counted >= images:
                break
    if start is None:
        raise ValueError("fewer batches than the warm-up: use more --images or a smaller --batch-size")
    sync()
    return Rate(counted, time.perf_counter() - start)


def device_sync(device: torch.device) -> Callable[[], None]:
    streams = streams_of(device)
    return (lambda: streams.synchronize(device)) if streams else (lambda: None)


# ---------------------------------------------------------------- data mode

@contextlib.contextmanager
def streaming(ours: Ours):
    """Our loader's batches; afterwards the loader's threads, buffers and maps are released."""
    batches = iter(ours)
    try:
        yield batches
    finally:
        batches.close()
        ours.close()


def measure_data(args, manifest, root: Path, env, workers_list: list[int], folder: Path, jpegs: list[bytes],
                 peers: tuple[Manifest, Path]) -> dict:
    """`args.rounds` interleaved rounds, each measuring at every worker (or thread) count, warm, one
    row: the public ImageNetLoader (onto the CPU device, normalised), ours (the Loader it wraps),
    the decode ceiling (the fastest full decode of `jpegs`, in w threads), ours on the peers' shards
    where they are other shards (`peers`, a manifest and its root: plain shards beside seekable
    ones), today's PIL path, the ImageFolder baseline (on `folder`) and DALI when installed (on the
    peers' shards); plus one cold pass each of ours and the baseline at the largest count, first. Rounds rather than one long pass each: these shared VMs change speed from minute to
    minute, and a ratio within one round sees one speed (report.summarise takes the medians).
    Memory: ours is what the loader holds (ring of batch buffers and sample table: no workers);
    the others' is the largest resident size of their worker processes."""
    shards = [root / s.name for s in manifest.splits["train"].shards]
    baseline_files = sorted(folder.rglob("*.JPEG"))
    ours_of = lambda w, where=(manifest, root): Ours(*where, w, args.batch_size, args.image_size, rank=env.rank,
                                                     world_size=env.world_size)
    base_of = lambda w: baseline_loader(folder, w, args.batch_size, args.image_size, args.images)
    rate = lambda batches: time_batches(batches, args.images, args.warmup_batches).per_sec
    result = {"cold": {}, "sweep": [], "rounds": args.rounds}
    evict_from_page_cache(shards)
    with streaming(ours_of(max(workers_list))) as batches:
        result["cold"]["ours"] = rate(batches)
    evict_from_page_cache(baseline_files)
    result["cold"]["baseline"] = rate(base_of(max(workers_list)))
    for round_ in range(args.rounds):
        for w in workers_list:
            row = {"workers": w, "round": round_}
            # ours between the two measurements it is divided by or divides: these shared VMs change speed
            # from minute to minute
            library, passes = library_passes(root, w, args.batch_size, args.image_size)
            with library, contextlib.closing(passes):
                row["library"] = rate(passes)
            ours = ours_of(w)
            with streaming(ours) as batches:
                row["ours"], row["ours_memory_mb"] = rate(batches), ours.memory_mb()
            row["ceiling_decoder"], row["ceiling_per_core"] = decode_ceiling(jpegs, threads=w)
            row["normalise_ms_per_image"] = normalise_ms_per_image(args.batch_size, args.image_size)
            if peers[1].resolve() != root.resolve():
                with streaming(ours_of(w, peers)) as batches:
                    row["ours_on_peers"] = rate(batches)
            for name, loader in (("pil", pil_batches(manifest, root, w, args.batch_size, args.image_size)),
                                 ("baseline", base_of(w))):
                batches = iter(loader)
                row[name] = rate(batches)
                row[f"{name}_worker_rss_mb"] = max(worker_rss_mb(), default=0.0)
                del batches  # its workers stop
            if dali_available() and not args.no_dali:
                with tempfile.TemporaryDirectory() as index_dir:
                    dali = dali_loader(*peers, Path(index_dir), w, args.batch_size, args.image_size)
                    row["dali"] = rate(dali_batches(dali))
            result["sweep"].append(row)
            log.info("data, round %d, %d workers: ours %.0f img/s (ImageNetLoader %.0f%s), PIL path %.0f, baseline "
                     "%.0f%s", round_ + 1, w, row["ours"], row["library"],
                     f", ours on the peers' shards {row['ours_on_peers']:.0f}" if "ours_on_peers" in row else "",
                     row["pil"], row["baseline"], f", DALI {row['dali']:.0f}" if "dali" in row else "")
    return result


# ---------------------------------------------------------------- model, feed and full modes

def training_step(args, num_classes: int, env, device: torch.device) -> Callable[[tuple], None]:
    """train.run.loop's step on a model and optimiser of the benchmark's own (python -m train's
    defaults: SGD with Nesterov momentum, --amp auto's autocast on a GPU, channels_last, DDP across ranks)."""
    torch.manual_seed(0)
    if autotunes_convolutions(device):
        torch.backends.cudnn.benchmark = True
    model = model_on(args.arch, num_classes, device, channels_last=True)
    optimizer = build_optimizer(model, lr=0.1, momentum=0.9, weight_decay=1e-4)
    stepped = step_module(model, env.world_size, device, compile=False)
    stepped.train()
    criterion = torch.nn.CrossEntropyLoss()
    amp_dtype = amp_dtype_for("auto", device)
    return lambda batch: train_step(stepped, optimizer, criterion, batch[0], batch[1], amp_dtype=amp_dtype)


def measure_model(args, num_classes: int, env, device: torch.device) -> float:
    """Images/s of the training step on one synthetic batch already on the device: the ceiling."""
    step = training_step(args, num_classes, env, device)
    images = torch.randint(0, 256, (args.model_batch_size, args.image_size, args.image_size, 3), dtype=torch.uint8)
    batch = (to_device(images, device), torch.randint(0, num_classes, (args.model_batch_size,), device=device))
    return time_batches(itertools.repeat(batch), args.steps * args.model_batch_size, args.warmup_batches, step,
                        device_sync(device)).per_sec


def measure_full(args, num_classes: int, env, device: torch.device, ours: Ours) -> float:
    """Images/s of the training step fed by our loader through DeviceBatches, end to end."""
    step = training_step(args, num_classes, env, device)
    with streaming(ours) as batches, DeviceBatches(batches, device, augment=ours.augment.on_device()) as on_device:
        return time_batches(on_device, args.steps * args.model_batch_size, args.warmup_batches, step,
                            device_sync(device)).per_sec


def measure_feed(args, device: torch.device, ours: Ours) -> float:
    """Images/s of our loader onto the device (the copy, or with --decode gpu the device decode),
    no model: how fast the data path could feed the training step."""
    with streaming(ours) as batches, DeviceBatches(batches, device, augment=ours.augment.on_device()) as on_device:
        return time_batches(on_device, args.steps * args.model_batch_size, args.warmup_batches, lambda b: None,
                            device_sync(device)).per_sec


def global_rate(value: float, env, host_group) -> float:
    """Sum of a per-rank images/s over ranks, through `host_group`, a gloo group: the default group's NCCL (XCCL on
    Intel's GPUs) refuses a host tensor."""
    if env.world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, group=host_group)
    return float(tensor.item())
