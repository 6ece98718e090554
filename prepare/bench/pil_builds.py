"""python -m prepare.bench.pil_builds PYTHON [PYTHON ...] [--images 300] [--rounds 5]

What stock Pillow costs against pillow-simd (the line `python -m shards.pillow_simd` says where no
pillow-simd wheel fits): the PIL work of prepare's re-encodes and of the ImageFolder baseline
(prepare/bench/pil_work.py) timed in each PYTHON, e.g. a venv with pillow-simd and one with stock
Pillow, side by side: interleaved rounds, the interpreters' order turned round each round, the median
round. The images are the sample's photo-like JPEGs at ImageNet's size (500 x 375), written to a
temporary folder. Prints images/s of each and its ratio to the first, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from prepare.sample import SampleSpec, sample_images

WORK = Path(__file__).with_name("pil_work.py")


def write_images(folder: Path, count: int) -> None:
    spec = SampleSpec(classes=10, train_per_class=-(-count // 10), val_per_class=0)
    for i, (_, _, data) in enumerate(sample_images(spec, workers=2).train[:count]):
        if data[:2] == b"\xff\xd8":  # the sample's PNGs and CMYK quirks aside: JPEGs, as ImageNet's are
            (folder / f"{i:05d}.JPEG").write_bytes(data)


def one_round(python: str, folder: Path, work: str) -> tuple[str, float]:
    done = subprocess.run([python, str(WORK), str(folder), work, "1"], capture_output=True, text=True, check=True)
    shown = json.loads(done.stdout)
    return shown["pil"], shown["seconds"][0] / shown["images"]


def measure(pythons: list[str], folder: Path, work: str, rounds: int) -> dict[str, dict]:
    times: dict[str, list[float]] = {python: [] for python in pythons}
    pils = {}
    for r in range(rounds):
        for python in pythons[r % len(pythons):] + pythons[: r % len(pythons)]:
            pils[python], per_image = one_round(python, folder, work)
            times[python].append(per_image)
    return {python: {"pil": pils[python], "images_per_s": 1 / statistics.median(times[python])} for python in pythons}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prepare.bench.pil_builds", description=__doc__.split("\n\n")[0])
    parser.add_argument("pythons", nargs="+", help="interpreters to compare, the first the baseline of the ratios")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="pil-builds-") as scratch:
        write_images(Path(scratch), args.images)
        for work in ("reencode", "crop"):
            results[work] = measure(args.pythons, Path(scratch), work, args.rounds)
            base = results[work][args.pythons[0]]["images_per_s"]
            for python, got in results[work].items():
                print(f"{work:9s} {got['pil']:42s} {got['images_per_s']:8.1f} images/s  {got['images_per_s'] / base:5.2f}x"
                      f"  ({python})")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
