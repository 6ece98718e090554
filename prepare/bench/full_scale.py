"""ImageNet-22k's shape at a fraction of its bytes: a synthetic fall11_whole.tar with the real 21,841 synsets
and about a million tiny images, prepared on one node, its time and memory measured.

    python -m prepare.bench.full_scale SCRATCH [--images 1000000] [--workers N]

What it sizes is what grows with classes and samples, not with bytes: the class table and 21,841 parts,
the held-out rule, the shuffle's buckets and key lists, the manifest. Classes are uneven as the real
release's are: HELD_OUT_CLASSES classes hold more than imagenet_full.HELD_OUT_FROM images (so they give val
its 50 each), the rest share what is left. The images are a few hundred distinct 40 x 40 JPEGs (about
1 KB), each stored under many keys: their decode is not what this measures.

Memory is the sum of the resident sets of prepare and its workers, sampled every SAMPLE_S seconds
(/proc); the peak is reported with the elapsed time and the manifest's counts, as one JSON line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from PIL import Image

from prepare.labels import builtin_class_names
from prepare.sources.imagenet_full import FALL11, HELD_OUT_FROM
from shards.paths import user_path

HELD_OUT_CLASSES = 1000
DISTINCT_IMAGES = 256
SAMPLE_S = 0.5


def tiny_jpegs(count: int) -> list[bytes]:
    out = []
    for i in range(count):
        image = Image.new("RGB", (40, 40), ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
        image.putpixel((i % 40, (i // 40) % 40), (255, 255, 255))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def class_counts(wnids: list[str], images: int) -> dict[str, int]:
    """HELD_OUT_CLASSES classes (spread over the table; fewer for a small --images) just over the held-out
    threshold, the rest even."""
    large = max(1, min(HELD_OUT_CLASSES, images // (HELD_OUT_FROM + 20)))
    big = set(wnids[::len(wnids) // large][:large])
    rest = max(0, images - len(big) * (HELD_OUT_FROM + 20)) // (len(wnids) - len(big))
    return {wnid: HELD_OUT_FROM + 20 if wnid in big else rest for wnid in wnids}


def write_release(path: Path, images: int) -> int:
    """The synthetic fall11_whole.tar; returns how many images it holds."""
    jpegs = tiny_jpegs(DISTINCT_IMAGES)
    counts = class_counts(list(builtin_class_names("imagenet-22k")), images)
    n = 0
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as outer:
        for wnid, count in counts.items():
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                for i in range(count):
                    data = jpegs[n % len(jpegs)]
                    info = tarfile.TarInfo(f"{wnid}_{i + 1}.JPEG")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    n += 1
            info = tarfile.TarInfo(f"{wnid}.tar")
            info.size = inner.tell()
            inner.seek(0)
            outer.addfile(info, inner)
    return n


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants (from /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def prepare_measured(source: Path, dest: Path, workers: int) -> dict:
    command = [sys.executable, "-m", "prepare", "--source", str(source), "--dest", str(dest), "--workers",
               str(workers), "--no-shared-read", "--force"]
    start, peak = time.monotonic(), 0
    with subprocess.Popen(command) as run:
        while run.poll() is None:
            peak = max(peak, tree_rss(run.pid))
            time.sleep(SAMPLE_S)
    if run.returncode:
        raise SystemExit(f"prepare failed ({run.returncode})")
    manifest = json.loads((dest / "manifest.json").read_text())
    return {"elapsed_s": round(time.monotonic() - start, 1), "peak_rss_mb": round(peak / 2**20),
            "manifest_mb": round((dest / "manifest.json").stat().st_size / 2**20, 1),
            "classes": len(manifest["classes"]), "train": manifest["splits"]["train"]["samples"],
            "val": manifest["splits"]["val"]["samples"], "workers": workers}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m prepare.bench.full_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("scratch", type=user_path)
    p.add_argument("--images", type=int, default=1_000_000)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args(argv)
    source = args.scratch / "source"
    source.mkdir(parents=True, exist_ok=True)
    if not (source / FALL11).is_file():
        start = time.monotonic()
        written = write_release(source / FALL11, args.images)
        print(f"wrote {written} images in {time.monotonic() - start:.0f} s", file=sys.stderr)
    print(json.dumps({"cpu": cpu_model(), **prepare_measured(source, args.scratch / "dest", args.workers)}))


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
