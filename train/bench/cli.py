"""The command line of `python -m train.bench` (the modes are described in the package's docstring)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

import train.bench
from shards.manifest import read_complete_manifest
from shards.resources import available_cpus, log_pil_build
from train.accelerators import pins_memory
from train.bench.loaders import AUGMENTS, Ours, extract_image_folder
from train.bench.measure import global_rate, measure_data, measure_feed, measure_full, measure_model
from train.bench.report import plot, summarise, table
from train.cluster import dist_env, init_distributed
from train.device_types import DEVICE_TYPES
from train.run.devices import device_for
from shards.errors import user_errors_in_one_line
from shards.paths import user_path

log = logging.getLogger("benchmark")
MODES = ("data", "model", "feed", "full")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train.bench", description=train.bench.__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", type=user_path, required=True, help="a dataset prepared by python -m prepare")
    p.add_argument("--baseline-data", type=user_path, default=None,
                   help="the dataset whose images the peers read, the baseline, DALI and the decode ceiling "
                        "(default --data): the images users have today. Give shards made with --restart-mcus 0 "
                        "(the original JPEGs' bytes) when --data is seekable, or the full-size shards when --data "
                        "was made with --resize")
    p.add_argument("--run-dir", type=user_path, default="runs/benchmark",
                   help="benchmark.jsonl and benchmark.png go here")
    p.add_argument("--modes", default=None,
                   help="default: data,model,feed,full on a GPU; data alone on the CPU, where ResNet-50 at "
                        "batch 256 would take many minutes (ask for the others with a small --arch)")
    p.add_argument("--workers", default=None,
                   help="comma-separated worker counts to sweep (default: 1 up to the task's CPUs)")
    p.add_argument("--images", type=int, default=2000, help="images timed per measurement, after warm-up")
    p.add_argument("--rounds", type=int, default=3,
                   help="data mode: interleaved rounds of every loader at every worker count; the summary's ratios "
                        "are the medians of each round's")
    p.add_argument("--warmup-batches", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="loader batch size (per rank)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--arch", default="resnet50", help="model for the model and full modes")
    p.add_argument("--model-batch-size", type=int, default=256, help="batch for the model and full modes")
    p.add_argument("--steps", type=int, default=20, help="timed steps in the model, feed and full modes")
    p.add_argument("--device", choices=DEVICE_TYPES, default=None)
    p.add_argument("--decode", choices=["cpu", "gpu"], default="cpu",
                   help="decode path of the feed and full modes (as train --decode); data mode always decodes on the CPU")
    p.add_argument("--no-dali", action="store_true", help="skip DALI even when installed")
    p.add_argument("--augment", choices=sorted(AUGMENTS), default="none",
                   help="feed and full modes: the training batches' augmentation beyond the crop and flip "
                        "(torchvision-v2: TrivialAugmentWide, bilinear, and RandomErasing 0.1, on the device)")
    return p


def chosen_modes(spec: str | None, device: torch.device) -> set[str]:
    """--modes, or by default all of them on an accelerator and `data` alone on the CPU."""
    modes = set((spec or (",".join(MODES) if device.type != "cpu" else "data")).split(","))
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


@user_errors_in_one_line("python -m train.bench")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [benchmark] %(message)s", datefmt="%H:%M:%S")
    log_pil_build(log)
    env = dist_env(os.environ)
    root = Path(args.data)
    manifest = read_complete_manifest(root)
    device = device_for(env, args.device)
    modes = chosen_modes(args.modes, device)
    host_group = None  # the ranks' rates are summed on the host, through gloo: NCCL and XCCL take device tensors only
    if env.world_size > 1:
        init_distributed(env, device, 120)
        host_group = dist.new_group(backend="gloo")
    stats, _ = image_statistics(manifest, root)
    extra = {"arch": args.arch, "device": str(device), "decode": args.decode, "world_size": env.world_size,
             "augment": args.augment,
             "data": str(root), "baseline_data": str(args.baseline_data or root),
             "data_restart_mcus": manifest.options.get("restart_mcus")}
    data = None
    if "data" in modes:
        if args.rounds < 1:
            raise SystemExit("--rounds: at least 1")
        baseline_root = Path(args.baseline_data or args.data)
        baseline_manifest = read_complete_manifest(baseline_root)
        extra["baseline_restart_mcus"] = baseline_manifest.options.get("restart_mcus")
        if extra["baseline_restart_mcus"]:
            log.warning("the peers (the baseline, DALI, the fastest full decode) read seekable shards (%s), not the "
                        "original JPEGs: their restart markers slow DALI's and the full decoders' libjpeg-turbo, so "
                        "ours / DALI and ours per core read high; give --baseline-data the same source prepared with "
                        "--restart-mcus 0", baseline_root)
        peer_jpegs = image_statistics(baseline_manifest, baseline_root, limit=300)[1]
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            folder = extract_image_folder(baseline_manifest, baseline_root, Path(tmp) / "imagefolder")
            data = measure_data(args, manifest, root, env, worker_counts(args.workers), folder, peer_jpegs,
                                (baseline_manifest, baseline_root))
        for row in data["sweep"]:
            for key in ("ours", "library", "ours_on_peers", "pil", "baseline", "dali"):
                if key in row:
                    row[key] = global_rate(row[key], env, host_group)
        data["cold"] = {k: global_rate(v, env, host_group) for k, v in data["cold"].items()}
    num_classes = manifest.num_classes
    if "model" in modes:
        extra["model_images_per_sec"] = global_rate(measure_model(args, num_classes, env, device), env, host_group)
    feed = lambda: Ours(manifest, root, max(worker_counts(args.workers)), args.model_batch_size, args.image_size,
                        rank=env.rank, world_size=env.world_size, decode=args.decode, pin_memory=pins_memory(device),
                        augment=AUGMENTS[args.augment])
    if "feed" in modes:
        extra["feed_images_per_sec"] = global_rate(measure_feed(args, device, feed()), env, host_group)
    if "full" in modes:
        extra["full_images_per_sec"] = global_rate(measure_full(args, num_classes, env, device, feed()), env,
                                                   host_group)
    record = summarise(data, stats, extra)
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
