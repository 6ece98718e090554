"""The public loader on a device, for jobs/gpu_check.sh: one line of figures per dataset and decode.

    PYTHONPATH=. python jobs/gpu_check.py --data DIR [DIR ...] --device cuda --decode cpu gpu --size 176

For each dataset (plain and seekable shards) and each --decode: an epoch of training batches through
ImageNetLoader with torchvision-v2's augmentation (TrivialAugmentWide, RandomErasing, MixUp/CutMix,
repeats 4), and a validation pass at Resize(232) + CenterCrop(224); it checks what the caller gets
(device, shape, dtype, soft targets that sum to one) and that every validation image is read once,
and prints images/s with the loader's counters. A failed check ends it with status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from shards.manifest import read_manifest
from train import Augment, ImageNetLoader

RECIPE = Augment(policy="trivialaugment", policy_interpolation="bilinear", erasing=0.1, mixup=0.2, cutmix=1.0)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_case(root: Path, device: torch.device, decode: str, batch: int, size: int, workers: int | None) -> str:
    expected_val = read_manifest(root).splits["val"].samples
    with ImageNetLoader(root, batch_size=batch, image_size=size, device=device, decode=decode, workers=workers,
                        augment=RECIPE, repeats=4, val_crop=224, val_resize=232, dtype=torch.bfloat16) as data, \
            data.with_split("val") as val:
        images = 0
        start = time.perf_counter()
        for x, targets in data:
            if x.device.type != device.type or tuple(x.shape[1:]) != (3, size, size) or x.dtype != torch.bfloat16:
                raise AssertionError(f"a training batch of {tuple(x.shape)} {x.dtype} on {x.device}")
            if targets.shape != (len(x), data.num_classes) or not torch.allclose(targets.sum(1).float(),
                                                                                torch.ones(len(x), device=device)):
                raise AssertionError(f"training targets of {tuple(targets.shape)} that do not sum to one")
            images += len(x)
        synchronize(device)
        train_rate = images / (time.perf_counter() - start)
        seen, start = 0, time.perf_counter()
        for x, labels in val:
            if tuple(x.shape[1:]) != (3, 224, 224) or labels.dtype != torch.int64:
                raise AssertionError(f"a validation batch of {tuple(x.shape)}, labels {labels.dtype}")
            seen += len(labels)
        synchronize(device)
        val_rate = seen / (time.perf_counter() - start)
        if seen + val.counters.bad_samples != expected_val:
            raise AssertionError(f"validation read {seen} images and left out {val.counters.bad_samples}, the manifest "
                                 f"lists {expected_val}")
        counters = data.counters
        return (f"loader {root.name} --decode {decode} on {device}: train {train_rate:.0f} img/s ({images} images, "
                f"{counters.seeked_images} seeked, {counters.pil_fallbacks} PIL, {counters.bad_samples} bad, "
                f"{data.device_decode_fallbacks} device-decode fallbacks), val {val_rate:.0f} img/s, every one of "
                f"its {expected_val} images once; {data.describe()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python jobs/gpu_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", nargs="+", required=True, help="prepared datasets (plain and seekable shards)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--decode", nargs="+", default=["cpu", "gpu"])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--workers", type=int, default=None)
    args = p.parse_args(argv)
    failed = 0
    for root in map(Path, args.data):
        for decode in args.decode:
            try:
                print(one_case(root, torch.device(args.device), decode, args.batch_size, args.size, args.workers),
                      flush=True)
            except Exception as exn:  # noqa: BLE001 - each case reports and the next runs
                print(f"FAILED loader {root.name} --decode {decode}: {type(exn).__name__}: {exn}", flush=True)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
