"""python -m train.bench.recipes --data DIR: what a recipe's augmentation costs the data path, on the CPU.

Images/s, warm, alternated in one process on the same cores, of:
  classic      the public ImageNetLoader on the CPU device (RandomResizedCrop + flip, normalised)
  recipe       the same with torchvision-v2's TrivialAugmentWide (bilinear) + RandomErasing 0.1
               (+ MixUp/CutMix with --mixing): drawn in the decoding threads, applied in the
               loader's background thread
  baseline     torchvision's reference preset in DataLoader workers on an extracted ImageFolder,
               classic and with the same TrivialAugmentWide + RandomErasing: what users run today

On a GPU the policy runs on the device; here the CPU device does it on the same cores as the
decode, the worst case. Prints one line per measurement and the ratios; appends a JSON line to
RUN_DIR/recipes.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch
from torchvision import transforms as T

from shards.help import at_least_one
from shards.manifest import read_complete_manifest
from shards.resources import available_cpus
from train import Augment
from train.bench.loaders import baseline_loader, extract_image_folder, library_passes
from train.bench.measure import time_batches
from shards.errors import user_errors_in_one_line
from shards.paths import user_path


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train.bench.recipes", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=user_path, required=True, help="a dataset prepared by python -m prepare")
    p.add_argument("--run-dir", type=user_path, default="runs/benchmark")
    p.add_argument("--workers", type=int, default=available_cpus(), help="decoding threads / DataLoader workers")
    p.add_argument("--images", type=at_least_one, default=2000, help="images timed per measurement, after warm-up")
    p.add_argument("--warmup-batches", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=176, help="torchvision-v2's train crop")
    p.add_argument("--repeats", type=at_least_one, default=3, help="alternations of the whole set")
    p.add_argument("--mixing", action="store_true", help="add MixUp 0.2 / CutMix 1.0 to ours")
    p.add_argument("--no-baseline", action="store_true", help="ours only (no ImageFolder extraction)")
    return p


def measure(args, root: Path, folder: Path | None) -> dict[str, float]:
    """One alternation: images/s of each configuration."""
    recipe = Augment(policy="trivialaugment", policy_interpolation="bilinear", erasing=0.1,
                     mixup=0.2 if args.mixing else 0.0, cutmix=1.0 if args.mixing else 0.0)
    rate = lambda batches: time_batches(batches, args.images, args.warmup_batches).per_sec
    result = {}
    for name, options in (("classic", {}), ("recipe", {"augment": recipe})):
        loader, passes = library_passes(root, args.workers, args.batch_size, args.image_size, **options)
        with loader, contextlib.closing(passes):
            result[name] = rate(passes)
    if folder is not None:
        for name, options in (("baseline classic", {}),
                              ("baseline recipe", {"policy": T.TrivialAugmentWide(
                                  interpolation=T.InterpolationMode.BILINEAR), "erasing": 0.1})):
            result[name] = rate(iter(baseline_loader(folder, args.workers, args.batch_size, args.image_size,
                                                     args.images, **options)))
    return result


@user_errors_in_one_line("python -m train.bench.recipes")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(args.data)
    manifest = read_complete_manifest(root)
    torch.set_num_threads(1)  # the training thread's own share; the loader's threads decode
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        folder = None if args.no_baseline else extract_image_folder(manifest, root, Path(tmp) / "imagefolder")
        runs = []
        for repeat in range(args.repeats):
            runs.append(measure(args, root, folder))
            print(f"alternation {repeat + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in runs[-1].items()), flush=True)
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    ratios = {"recipe / classic": medians["recipe"] / medians["classic"]}
    if folder is not None:
        ratios["recipe / baseline recipe"] = medians["recipe"] / medians["baseline recipe"]
        ratios["baseline recipe / baseline classic"] = medians["baseline recipe"] / medians["baseline classic"]
    print("median images/s: " + ", ".join(f"{k} {v:.0f}" for k, v in medians.items()))
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    record = {"cpu": cpu_model(), "workers": args.workers, "batch_size": args.batch_size, "size": args.image_size,
              "mixing": args.mixing, "runs": runs, "median": medians, "ratios": ratios}
    Path(args.run_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(args.run_dir) / "recipes.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
