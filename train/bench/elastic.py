"""python -m train.bench.elastic --data DIR: a resumed epoch's images/s on another world size (#52)
against an ordinary epoch's, side by side.

An elastic resume reads the run's layout on the ranks there are now (shards.plan.elastic_train_plan):
a rank of a smaller world reads several of the run's per-rank streams interleaved (more shards open at
once), a rank of a larger one every m-th sample of one stream (skipping the others' between). Each case
times rank 0 of the new world through the public ImageNetLoader two ways, with the same per-rank batch:
reading its own layout (an ordinary epoch), and reading the run's layout (a state of the run's world
loaded: a resumed epoch). Rounds alternate the two; the ratio is the median of each round's. One rank's
share of the work is what each rank does, so rank 0 alone on this machine measures it.

    python -m train.bench.elastic --data demo/imagenet [--workers 2] [--rounds 5] [--epochs 10]

Prints one line per round and a JSON line of the medians. Never imported by the product.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

from shards.help import at_least_one
from train import ImageNetLoader
from shards.errors import user_errors_in_one_line
from shards.paths import user_path

log = logging.getLogger("benchmark")
# (the run's world, its per-rank batch, the world it resumes on): a shrink to one rank and a growth to 4x, at a
# global batch of 32 (the demo's 400 images make 12 steps an epoch)
CASES = ((8, 4, 1), (2, 16, 8))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train.bench.elastic", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=user_path, required=True, help="a dataset prepared by python -m prepare")
    p.add_argument("--workers", type=int, default=2, help="decode threads")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--rounds", type=at_least_one, default=5, help="alternated rounds of the two reads, each case")
    p.add_argument("--epochs", type=at_least_one, default=10, help="epochs a timed pass reads (rank 0's share of each)")
    p.add_argument("--cases", default=None,
                   help="RUN_WORLD:RUN_BATCH:WORLD,... (default 8:4:1,2:16:8: a shrink to one rank, a growth to 4x)")
    return p


def cases_of(spec: str | None) -> list[tuple[int, int, int]]:
    if not spec:
        return list(CASES)
    return [tuple(int(n) for n in case.split(":")) for case in spec.split(",")]


def run_state(root: Path, world: int, batch: int, epoch: int, size: int) -> dict:
    """The state of the run's loader at the start of `epoch` (rank 0's: the same on every rank)."""
    with ImageNetLoader(root, "train", batch_size=batch, image_size=size, device="cpu", workers=1, rank=0,
                        world_size=world) as loader:
        loader.set_epoch(epoch)
        return loader.state_dict()


def timed_pass(root: Path, world: int, batch: int, args, state: dict | None, epoch: int) -> float:
    """Images/s of rank 0 of `world` over --epochs epochs from `epoch`, its own layout or, given `state`, the
    run's (kept from one epoch to the next). The loader is made before the clock starts: reading is timed."""
    with ImageNetLoader(root, "train", batch_size=batch, image_size=args.image_size, device="cpu",
                        workers=args.workers, rank=0, world_size=world) as loader:
        if state is not None:
            loader.load_state_dict(state)
        images, start = 0, time.perf_counter()
        for this in range(epoch, epoch + args.epochs):
            loader.set_epoch(this)
            images += sum(len(x) for x, _ in loader)
        return images / (time.perf_counter() - start)


def measure_case(root: Path, case: tuple[int, int, int], args) -> dict:
    run_world, run_batch, world = case
    batch = run_world * run_batch // world
    ratios, own, resumed = [], [], []
    for round_ in range(args.rounds):
        epoch = 100 * (round_ + 1)  # other epochs each round: other orders of the shards
        state = run_state(root, run_world, run_batch, epoch, args.image_size)
        rate = {}
        for which in ("own", "resumed") if round_ % 2 == 0 else ("resumed", "own"):  # alternate which goes first
            rate[which] = timed_pass(root, world, batch, args, state if which == "resumed" else None, epoch)
        own.append(rate["own"])
        resumed.append(rate["resumed"])
        ratios.append(resumed[-1] / own[-1])
        log.info("%d x %d resumed on %d (batch %d), round %d: resumed %.0f img/s, ordinary %.0f img/s: %.3fx",
                 run_world, run_batch, world, batch, round_, resumed[-1], own[-1], ratios[-1])
    return {"run_world": run_world, "run_batch": run_batch, "world": world, "batch": batch,
            "resumed_images_per_sec": statistics.median(resumed), "ordinary_images_per_sec": statistics.median(own),
            "ratio": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios]}


@user_errors_in_one_line("python -m train.bench.elastic")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [benchmark] %(message)s", datefmt="%H:%M:%S")
    root = Path(args.data)
    results = [measure_case(root, case, args) for case in cases_of(args.cases)]
    print(json.dumps({"workers": args.workers, "image_size": args.image_size, "rounds": args.rounds,
                      "epochs": args.epochs, "cases": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
