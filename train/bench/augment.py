"""The cost per image of the augmentation policies on the CPU: torchvision's transform per image (on PIL
images, as a DataLoader worker runs it, and on uint8 tensors) against train.augment.ops' batched ops on a
whole batch (what the CPU device pays), with ops and magnitudes drawn as the loader draws them
(train/augment/draws.py), and against those draws alone (what a GPU device costs the host's cores: the ops
run on the device); and RandomErasing.

    python -m train.bench.augment [--sizes 176,224] [--threads 1,all] [--repeats 5] [--json out.jsonl]

Each repetition times every method on the same images in turn (alternated), and the table gives each
method's median over the repetitions: microseconds of wall time per image, and of CPU time (all threads
of the process) per image, which is what the method costs the machine when the cores are shared out
(a DataLoader's workers run the per-image transforms side by side). The ratio is torchvision's per-image
cost over ours.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from shards.help import at_least_one
from train.augment import POLICIES
from train.augment.choices import Augment
from train.augment.draws import erasing_boxes, policy_draws
from train.augment.ops import apply_policy_rounds, erase
from shards.errors import user_errors_in_one_line



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train.bench.augment", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sizes", default="176,224", help="image sizes (square), comma-separated")
    p.add_argument("--batch-size", type=int, default=256, help="images per batch for ours; as many per "
                   "repetition for torchvision's per-image transforms")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"from {', '.join(POLICIES)}")
    p.add_argument("--interpolation", choices=["nearest", "bilinear"], default="nearest",
                   help="the policies' interpolation (torchvision's default is nearest; its references use "
                        "bilinear)")
    p.add_argument("--threads", default="1,all", help="torch thread counts to run with ('all': every CPU)")
    p.add_argument("--repeats", type=at_least_one, default=5, help="alternated repetitions; the median is reported")
    p.add_argument("--erasing-p", type=float, default=0.1, help="RandomErasing's probability")
    p.add_argument("--channels-last", action="store_true",
                   help="our batch in channels_last (the layout of the loader's NHWC batches)")
    p.add_argument("--no-tensor", action="store_true", help="skip torchvision's per-image transform on tensors")
    p.add_argument("--json", default=None, help="append the rows to this JSON-lines file")
    p.add_argument("--seed", type=int, default=0)
    return p


@dataclass
class Row:
    what: str
    size: int
    threads: int
    method: str
    wall_us: float  # per image, median over repetitions
    cpu_us: float


def cpu_model() -> str:
    """`lscpu | grep 'Model name'`, or what /proc/cpuinfo or platform says."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def photos(count: int, size: int, seed: int) -> list[Image.Image]:
    """Photo-like RGB images: smooth shading, hard edges, grain (what the policies' ops see in practice:
    uniform noise would make the table lookups and the grid's gathers look slower than they are)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    out = []
    for i in range(count):
        period = 5 + (i % 11)
        base = np.stack([128 + 100 * np.sin(x / period + i), 128 + 100 * np.cos(y / (period + 3)),
                         (x + y + 7 * i) % 256], axis=-1)
        base[((x + i) // 37 + y // 29) % 2 == 0] *= 0.6
        noisy = base + rng.normal(0, 6, base.shape)
        out.append(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)))
    return out


def our_policy(name: str, interpolation: str) -> Augment:
    """The policy with torchvision's defaults (RandAugment's num_ops 2, magnitude 9), as torchvision_policy's."""
    return Augment(policy=name, policy_interpolation=interpolation)


def torchvision_policy(name: str, interpolation: str) -> v2.Transform:
    if name == "trivialaugment":
        return v2.TrivialAugmentWide(interpolation=interpolation)
    if name == "randaugment":
        return v2.RandAugment(num_ops=2, magnitude=9, interpolation=interpolation)
    return v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET, interpolation=interpolation)


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process) of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(args, size: int, threads: int) -> list[Row]:
    torch.set_num_threads(threads)
    n = args.batch_size
    keys = np.random.default_rng(args.seed).integers(0, 2**63, n, dtype=np.uint64)  # the samples' key hashes
    pils = photos(n, size, args.seed)
    tensors = [F.pil_to_tensor(p) for p in pils]
    batch = torch.stack(tensors)
    if args.channels_last:
        batch = batch.contiguous(memory_format=torch.channels_last)
    methods = {}
    for name in args.policies.split(","):
        policy, ours = torchvision_policy(name, args.interpolation), our_policy(name, args.interpolation)
        draws = lambda ours=ours: policy_draws(keys, args.seed, 0, ours, size, size)
        ops, mags = (torch.from_numpy(a) for a in draws())
        methods[(name, "torchvision PIL")] = lambda policy=policy: [policy(p) for p in pils]
        if not args.no_tensor:
            methods[(name, "torchvision tensor")] = lambda policy=policy: [policy(t) for t in tensors]
        methods[(name, "ours")] = lambda ops=ops, mags=mags: apply_policy_rounds(
            batch, ops, mags, interpolation=args.interpolation)
        methods[(name, "ours, draws")] = draws  # what a GPU run costs the host: the ops then run on the device
    # RandomErasing on the normalised float batch, as torchvision's presets run it (after the policy)
    normalised = batch.float().div_(255).sub_(0.45).div_(0.225)
    singles = list(normalised.clone().unbind(0))
    erasing = v2.RandomErasing(p=args.erasing_p, value=0)
    erasing_draws = lambda: erasing_boxes(keys, args.seed, 0, args.erasing_p, size, size)
    boxes = torch.from_numpy(erasing_draws())
    methods[("erasing", "torchvision tensor")] = lambda: [erasing(t) for t in singles]
    methods[("erasing", "ours")] = lambda: erase(normalised, boxes)
    methods[("erasing", "ours, draws")] = erasing_draws

    for fn in methods.values():  # warm-up: tables, caches, first calls
        fn()
    samples = {key: [] for key in methods}
    for _ in range(args.repeats):
        for key, fn in methods.items():  # alternated: every method in each repetition
            samples[key].append(timed(fn))
    rows = []
    for (what, method), values in samples.items():
        wall = statistics.median(v[0] for v in values) / n * 1e6
        cpu = statistics.median(v[1] for v in values) / n * 1e6
        rows.append(Row(what, size, threads, method, wall, cpu))
    return rows


def table(rows: list[Row]) -> str:
    """One line per (what, size, threads): microseconds per image, wall and CPU, and torchvision / ours."""
    lines = [f"{'policy':15s} {'size':>4s} {'thr':>3s}  {'tv PIL wall/cpu':>17s}  {'tv tensor wall/cpu':>18s}  "
             f"{'ours wall/cpu':>15s}  {'PIL/ours':>9s}  {'tensor/ours':>11s}  {'draws cpu':>9s}  {'PIL/draws':>9s}"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.what, r.size, r.threads), {})[r.method] = r
    for (what, size, threads), by in groups.items():
        ours = by["ours"]

        def cell(method, width):
            r = by.get(method)
            return f"{r.wall_us:8.1f}/{r.cpu_us:<8.1f}".rjust(width) if r else "-".rjust(width)

        def ratio(method):
            r = by.get(method)
            return f"{r.wall_us / ours.wall_us:4.1f}/{r.cpu_us / ours.cpu_us:<4.1f}" if r else "-"

        draws, reference = by.get("ours, draws"), by.get("torchvision PIL") or by.get("torchvision tensor")
        lines.append(f"{what:15s} {size:4d} {threads:3d}  {cell('torchvision PIL', 17)}  "
                     f"{cell('torchvision tensor', 18)}  {cell('ours', 15)}  {ratio('torchvision PIL'):>9s}  "
                     f"{ratio('torchvision tensor'):>11s}  {draws.cpu_us if draws else 0:9.2f}  "
                     f"{reference.cpu_us / draws.cpu_us if draws and reference else 0:9.0f}")
    return "\n".join(lines)


@user_errors_in_one_line("python -m train.bench.augment")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unknown = set(args.policies.split(",")) - set(POLICIES)
    if unknown:
        raise SystemExit(f"--policies: unknown {sorted(unknown)}; choose from {', '.join(POLICIES)}")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = sorted({cpus if t == "all" else int(t) for t in args.threads.split(",")})
    print(f"CPU: {cpu_model()}; {cpus} CPUs; torch {torch.__version__}, capability "
          f"{torch.backends.cpu.get_cpu_capability()}; interpolation {args.interpolation}; batch {args.batch_size}"
          f"{', channels_last' if args.channels_last else ''}; {args.repeats} alternated repetitions, median")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for count in threads:
            rows += measure(args, size, count)
            print(table([r for r in rows if r.size == size and r.threads == count]), flush=True)
    print("\nmicroseconds per image (wall / CPU of all threads); ratio: torchvision's per image over ours")
    print(table(rows))
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps({**asdict(r), "cpu_model": cpu_model()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
