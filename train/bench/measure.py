"""The measurements: one timing function for loaders and training steps alike, each mode's
measurement, and the sum over ranks."""

from __future__ import annotations

import itertools
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.distributed as dist

from shards.resources import evict_from_page_cache
from train.bench.loaders import (
    baseline_loader, dali_available, dali_batches, dali_loader, our_batches, worker_rss_mb,
)
from train.data import DeviceBatches, to_device
from train.loop import amp_dtype_for, build_model, build_optimizer, step_module, train_step

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
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


# ---------------------------------------------------------------- data mode

def measure_data(args, manifest, root: Path, env, workers_list: list[int], folder: Path) -> dict:
    """Ours and the baseline at each worker count (warm), plus one cold pass each at the largest."""
    shards = [root / s.name for s in manifest.splits["train"].shards]
    baseline_files = sorted(folder.rglob("*.JPEG"))
    ours_of = lambda w: our_batches(manifest, root, w, args.batch_size, args.image_size, rank=env.rank,
                                    world_size=env.world_size)
    base_of = lambda w: baseline_loader(folder, w, args.batch_size, args.image_size, args.images)
    top = max(workers_list)
    result = {"cold": {}, "sweep": []}
    evict_from_page_cache(shards)
    result["cold"]["ours"] = time_batches(ours_of(top), args.images, args.warmup_batches).per_sec
    evict_from_page_cache(baseline_files)
    result["cold"]["baseline"] = time_batches(base_of(top), args.images, args.warmup_batches).per_sec
    for w in workers_list:
        ours_iter = iter(ours_of(w))
        ours = time_batches(ours_iter, args.images, args.warmup_batches)
        ours_rss = worker_rss_mb()
        del ours_iter
        base_iter = iter(base_of(w))
        base = time_batches(base_iter, args.images, args.warmup_batches)
        base_rss = worker_rss_mb()
        del base_iter
        row = {"workers": w, "ours": ours.per_sec, "baseline": base.per_sec,
               "ours_worker_rss_mb": max(ours_rss, default=0.0), "baseline_worker_rss_mb": max(base_rss, default=0.0)}
        if dali_available() and not args.no_dali:
            with tempfile.TemporaryDirectory() as index_dir:
                dali = dali_loader(manifest, root, Path(index_dir), w, args.batch_size, args.image_size)
                row["dali"] = time_batches(dali_batches(dali), args.images, args.warmup_batches).per_sec
        result["sweep"].append(row)
        log.info("data, %d workers: ours %.0f img/s, baseline %.0f%s", w, row["ours"], row["baseline"],
                 f", DALI {row['dali']:.0f}" if "dali" in row else "")
    return result


# ---------------------------------------------------------------- model, feed and full modes

def training_step(args, num_classes: int, env, device: torch.device) -> Callable[[tuple], None]:
    """train.loop's step on a model and optimiser of the benchmark's own (python -m train's
    defaults: SGD with Nesterov momentum, bf16 autocast on a GPU, channels_last, DDP across ranks)."""
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    model = build_model(args.arch, num_classes, device, channels_last=True)
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


def measure_full(args, num_classes: int, env, device: torch.device, batches: Iterable[tuple]) -> float:
    """Images/s of the training step fed by our loader through DeviceBatches, end to end."""
    step = training_step(args, num_classes, env, device)
    with DeviceBatches(batches, device) as on_device:
        return time_batches(on_device, args.steps * args.model_batch_size, args.warmup_batches, step,
                            device_sync(device)).per_sec


def measure_feed(args, device: torch.device, batches: Iterable[tuple]) -> float:
    """Images/s of our loader onto the device (the copy, or with --decode gpu the device decode),
    no model: how fast the data path could feed the training step."""
    with DeviceBatches(batches, device) as on_device:
        return time_batches(on_device, args.steps * args.model_batch_size, args.warmup_batches, lambda b: None,
                            device_sync(device)).per_sec


def global_rate(value: float, env) -> float:
    """Sum of a per-rank images/s over ranks."""
    if env.world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item())
