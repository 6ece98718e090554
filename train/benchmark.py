"""python -m train.benchmark --data DIR: images/s of our data path against what users run today.

Modes (--modes, comma-separated):
  data   the loader alone (decode + augment + batch, no model): ours, the ImageFolder baseline and,
         when installed, NVIDIA DALI's CPU pipeline, on the same images and the same worker counts;
         a cold pass (the shards evicted from the page cache first) and warm passes; per-worker RSS;
         and the decode-only ceiling (full-resolution decode, fastest decoder, one core).
  model  synthetic uint8 batches already on the device through the training step: the ceiling
         of the accelerator (or CPU).
  feed   our loader onto the device with no model (the host-to-device copy, or with --decode gpu
         the device decode, in DeviceBatches' background thread): what the data path could feed.
  full   our loader feeding the training step, end to end, as python -m train runs it.

Prints a table, appends one JSON line to RUN_DIR/benchmark.jsonl and draws RUN_DIR/benchmark.png
(images/s against worker count, ours and the baseline). Under srun each rank measures its own
share and images/s are summed over ranks.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterable

import torch
import torch.distributed as dist

from shards.manifest import read_complete_manifest
from shards.resources import available_cpus, log_pil_build, pil_build
from shards.resources import evict_from_page_cache
from train.bench_loaders import (
    baseline_loader, dali_available, dali_batches, dali_loader, decode_ceiling, extract_image_folder, our_loader,
    time_batches, worker_rss_mb,
)
from train.cluster import device_for, dist_env, init_distributed
from train.config import TrainConfig
from train.data import DeviceBatches, to_device
from train.loop import Preemption, build_run, train_step

log = logging.getLogger("benchmark")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train.benchmark", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="a dataset prepared by python -m prepare")
    p.add_argument("--baseline-data", default=None,
                   help="the dataset whose images the baseline reads (default --data); give the full-size "
                        "shards here to compare shards made with prepare --resize against the original images")
    p.add_argument("--run-dir", default="runs/benchmark", help="benchmark.jsonl and benchmark.png go here")
    p.add_argument("--modes", default=None,
                   help="default: data,model,feed,full on a GPU; data alone on the CPU, where ResNet-50 at "
                        "batch 256 would take many minutes (ask for the others with a small --arch)")
    p.add_argument("--workers", default=None,
                   help="comma-separated worker counts to sweep (default: 1 up to the task's CPUs)")
    p.add_argument("--images", type=int, default=2000, help="images timed per measurement, after warm-up")
    p.add_argument("--warmup-batches", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="loader batch size (per rank)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--arch", default="resnet50", help="model for the model and full modes")
    p.add_argument("--model-batch-size", type=int, default=256, help="batch for the model and full modes")
    p.add_argument("--steps", type=int, default=20, help="timed steps in the model, feed and full modes")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None)
    p.add_argument("--decode", choices=["cpu", "gpu"], default="cpu",
                   help="decode path of the full mode (as train --decode); data mode always decodes on the CPU")
    p.add_argument("--no-dali", action="store_true", help="skip DALI even when installed")
    return p


MODES = ("data", "model", "feed", "full")


def chosen_modes(spec: str | None, device: torch.device) -> set[str]:
    """--modes, or by default all of them on a GPU and `data` alone on the CPU."""
    modes = set((spec or (",".join(MODES) if device.type == "cuda" else "data")).split(","))
    if modes - set(MODES):
        raise SystemExit(f"--modes: unknown {sorted(modes - set(MODES))}; choose from {', '.join(MODES)}")
    return modes


def worker_counts(spec: str | None) -> list[int]:
    if spec:
        return sorted({int(w) for w in spec.split(",")})
    return list(range(1, available_cpus() + 1))


def image_statistics(manifest, root: Path, limit: int = 2000) -> tuple[dict, list[bytes]]:
    import webdataset as wds

    jpegs, sizes = [], []
    for shard in manifest.splits["train"].shards:
        for sample in wds.WebDataset(str(root / shard.name), shardshuffle=False):
            meta = json.loads(sample["json"])
            jpegs.append(sample["jpg"])
            sizes.append((meta["width"], meta["height"]))
            if len(jpegs) >= limit:
                break
        if len(jpegs) >= limit:
            break
    return {"images_sampled": len(jpegs), "mean_kib": round(statistics.mean(map(len, jpegs)) / 1024, 1),
            "mean_width": round(statistics.mean(w for w, _ in sizes)), "mean_height": round(statistics.mean(h for _, h in sizes)),
            "train_images": manifest.splits["train"].samples}, jpegs


def measure_data(args, manifest, root: Path, env, workers_list: list[int], folder: Path) -> dict:
    """Ours and the baseline at each worker count (warm), plus one cold pass each at the largest."""
    shards = [root / s.name for s in manifest.splits["train"].shards]
    baseline_files = sorted(folder.rglob("*.JPEG"))
    ours_of = lambda w: our_loader(manifest, root, w, args.batch_size, args.image_size, args.images,
                                   rank=env.rank, world_size=env.world_size)
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


def timed_steps(batches: Iterable[tuple], step, warmup: int, steps: int, device: torch.device) -> float:
    """Images/s of `step(x, y)` over `steps` batches after `warmup` (device work finished in both)."""
    start, counted = None, 0
    for index, (x, y) in enumerate(batches):
        if index == warmup:
            synchronize(device)
            start = time.perf_counter()
        step(x, y)
        if start is not None:
            counted += len(y)
        if index + 1 >= warmup + steps:
            break
    synchronize(device)
    if start is None:
        raise ValueError("fewer batches than the warm-up: lower --warmup-batches")
    return counted / (time.perf_counter() - start)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_model(args, manifest, env, device, loader=None) -> float:
    """Images/s of the training step on one synthetic batch already on the device (loader None:
    the ceiling), or fed by our loader through DeviceBatches (end to end)."""
    config = TrainConfig(data=args.data, run_dir=args.run_dir, arch=args.arch, batch_size=args.model_batch_size,
                         image_size=args.image_size, device=device.type, epochs=1, warmup_epochs=0)
    run = build_run(config, env, manifest, device, None if env.world_size == 1 else dist.group.WORLD,
                    Preemption(config.signal))
    run = replace(run, steps=10**9)
    run.step_model.train()
    criterion = torch.nn.CrossEntropyLoss()
    step = lambda x, y: train_step(run, criterion, x, y)
    if loader is None:
        images = torch.randint(0, 256, (args.model_batch_size, args.image_size, args.image_size, 3), dtype=torch.uint8)
        x = to_device(images, device)
        y = torch.randint(0, manifest.num_classes, (args.model_batch_size,), device=device)
        return timed_steps(itertools.repeat((x, y)), step, args.warmup_batches, args.steps, device)
    with DeviceBatches(loader, device) as batches:
        return timed_steps(((x, y) for x, y, _ in batches), step, args.warmup_batches, args.steps, device)


def measure_feed(args, device, loader) -> float:
    """Images/s of our loader onto the device (the copy, or with --decode gpu the device decode),
    no model: how fast the data path could feed the training step."""
    with DeviceBatches(loader, device) as batches:
        return timed_steps(((x, y) for x, y, _ in batches), lambda x, y: None, args.warmup_batches, args.steps, device)


def global_rate(value: float, env) -> float:
    """Sum of a per-rank images/s over ranks."""
    if env.world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item())


def summarise(data: dict | None, ceiling: tuple[str, float] | None, stats: dict, extra: dict) -> dict:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": available_cpus(),
              "pil": pil_build()[0], "image_stats": stats, **extra}
    if data:
        top = data["sweep"][-1]
        w = top["workers"]
        record |= {"workers": w, "images_per_sec": top["ours"], "baseline_images_per_sec": top["baseline"],
                   "speedup_vs_baseline": top["ours"] / top["baseline"],
                   "cold_images_per_sec": data["cold"]["ours"], "baseline_cold_images_per_sec": data["cold"]["baseline"],
                   "worker_rss_mb": top["ours_worker_rss_mb"], "baseline_worker_rss_mb": top["baseline_worker_rss_mb"],
                   "sweep": data["sweep"]}
        if "dali" in top:
            record |= {"dali_images_per_sec": top["dali"], "ratio_to_dali": top["ours"] / top["dali"]}
    if ceiling:
        record |= {"decoder": ceiling[0], "decode_ceiling_per_core": ceiling[1]}
        if data:
            record |= {"decode_ceiling_images_per_sec": ceiling[1] * record["workers"],
                       "ratio_to_ceiling": record["images_per_sec"] / (ceiling[1] * record["workers"])}
    return record


def table(record: dict) -> str:
    lines = [f"{'':28s}{'images/s':>12s}{'ratio':>10s}"]
    if "images_per_sec" in record:
        w = record["workers"]
        lines += [f"{'ours (' + str(w) + ' workers, warm)':28s}{record['images_per_sec']:12.0f}{1:10.2f}",
                  f"{'baseline ImageFolder':28s}{record['baseline_images_per_sec']:12.0f}"
                  f"{record['baseline_images_per_sec'] / record['images_per_sec']:10.2f}"]
        if "dali_images_per_sec" in record:
            lines.append(f"{'DALI CPU':28s}{record['dali_images_per_sec']:12.0f}"
                         f"{record['dali_images_per_sec'] / record['images_per_sec']:10.2f}")
        lines += [f"{'decode ceiling (' + str(w) + ' cores)':28s}{record['decode_ceiling_images_per_sec']:12.0f}"
                  f"{record['decode_ceiling_images_per_sec'] / record['images_per_sec']:10.2f}",
                  f"{'ours cold / baseline cold':28s}{record['cold_images_per_sec']:12.0f}"
                  f"{record['baseline_cold_images_per_sec']:>10.0f}",
                  f"ours {record['speedup_vs_baseline']:.2f}x the baseline, {record['ratio_to_ceiling']:.2f}x the "
                  f"decode ceiling ({record['decoder']})"
                  + (f", {record['ratio_to_dali']:.2f}x DALI" if "ratio_to_dali" in record else "")
                  + f"; worker RSS {record['worker_rss_mb']:.0f} MB (baseline {record['baseline_worker_rss_mb']:.0f} MB)"]
    labels = {"model_images_per_sec": f"model ({record['arch']})", "feed_images_per_sec": f"feed (--decode {record['decode']})",
              "full_images_per_sec": f"full ({record['arch']}, --decode {record['decode']})"}
    for key, label in labels.items():
        if key in record:
            lines.append(f"{label:28s}{record[key]:12.0f}")
    if "full_images_per_sec" in record and "model_images_per_sec" in record:
        lines.append(f"full / model = {record['full_images_per_sec'] / record['model_images_per_sec']:.2f}")
    return "\n".join(lines)


def plot(record: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = record["sweep"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["workers"] for r in sweep], [r["ours"] for r in sweep], "o-", label="ours")
    ax.plot([r["workers"] for r in sweep], [r["baseline"] for r in sweep], "o-", label="ImageFolder baseline")
    if all("dali" in r for r in sweep):
        ax.plot([r["workers"] for r in sweep], [r["dali"] for r in sweep], "o-", label="DALI CPU")
    ax.plot([r["workers"] for r in sweep], [record["decode_ceiling_per_core"] * r["workers"] for r in sweep], "k--",
            label=f"decode ceiling ({record['decoder']})")
    ax.set(xlabel="loader workers (processes or threads)", ylabel="images/s", title="data loader throughput")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [benchmark] %(message)s", datefmt="%H:%M:%S")
    log_pil_build(log)
    env = dist_env(os.environ)
    root = Path(args.data)
    manifest = read_complete_manifest(root)
    device = device_for(env, args.device)
    modes = chosen_modes(args.modes, device)
    if env.world_size > 1:
        init_distributed(env, device, 120)
    stats, jpegs = image_statistics(manifest, root)
    extra = {"arch": args.arch, "device": str(device), "decode": args.decode, "world_size": env.world_size,
             "data": str(root),
             "baseline_data": args.baseline_data or str(root)}
    data, ceiling = None, None
    if "data" in modes:
        baseline_root = Path(args.baseline_data or args.data)
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            folder = extract_image_folder(read_complete_manifest(baseline_root), baseline_root, Path(tmp) / "imagefolder")
            data = measure_data(args, manifest, root, env, worker_counts(args.workers), folder)
        for row in data["sweep"]:
            for key in ("ours", "baseline", "dali"):
                if key in row:
                    row[key] = global_rate(row[key], env)
        data["cold"] = {k: global_rate(v, env) for k, v in data["cold"].items()}
        ceiling = decode_ceiling(jpegs[:500])
    if "model" in modes:
        extra["model_images_per_sec"] = global_rate(measure_model(args, manifest, env, device), env)
    feed_loader = lambda: our_loader(manifest, root, max(worker_counts(args.workers)), args.model_batch_size,
                                     args.image_size, args.model_batch_size * (args.steps + args.warmup_batches + 2),
                                     rank=env.rank, world_size=env.world_size, decode=args.decode,
                                     pin_memory=device.type == "cuda")
    if "feed" in modes:
        extra["feed_images_per_sec"] = global_rate(measure_feed(args, device, feed_loader()), env)
    if "full" in modes:
        extra["full_images_per_sec"] = global_rate(measure_model(args, manifest, env, device, feed_loader()), env)
    record = summarise(data, ceiling, stats, extra)
    if env.is_main:
        run_dir = Path(args.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "benchmark.jsonl", "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        print(table(record))
        if data:
            plot(record, run_dir / "benchmark.png")
            print(f"plot: {run_dir / 'benchmark.png'}")
        print(json.dumps(record, sort_keys=True))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
