"""python -m train.bench.huffman --data SEEKABLE [SEEKABLE ...]: the fast Huffman path in restart intervals (our patch of
libjpeg-turbo, third_party/libjpeg-turbo/patches) against the release as it is, on one core, side by side in
one process.

For the first --images training samples of each SEEKABLE (one source prepared with --restart-mcus 2, 4, 8, say:
the bench reads shards, it does not rewrite them, as train never imports prepare): their bytes, and the crop decode's milliseconds per image (torchvision's RandomResizedCrop boxes, or
validation's centre crops; the seek, resize and flip included: the loader's path), of the decoder on the
patched library and of the same decoder on the unpatched one (train/bench/reference_build.py, built on first
use), and the Huffman decode alone of the rows each crop reads (the floor: stop_after="entropy"), in CPU time
of the calling thread. --rounds interleaved rounds; the medians, and the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from shards.limits import MAX_PIXELS
from shards.manifest import read_complete_manifest
from train import _jpegcrop
from train.bench.seek import first_samples
from train.decoder import Images, image_sizes
from train.transforms import centre_crops, default_resize, train_crops
from shards.errors import user_errors_in_one_line
from shards.paths import user_path

def decode_seconds(module, images: Images, boxes: np.ndarray, flips: np.ndarray, out: np.ndarray,
                   stop_after: str | None) -> float:
    """CPU seconds of this thread (the decode runs in it), so that waiting for a core is not counted."""
    status = np.zeros(len(images), np.int32)
    start = time.thread_time()
    module.decode_crops(**images.arrays(), boxes=boxes, flips=flips, out=out, first=0, status=status,
                        max_pixels=MAX_PIXELS, simd=None, seek=True, seeked=None, dct_scaling=True,
                        interpolation="bilinear", fast_dct=False, stop_after=stop_after)
    return time.thread_time() - start


def measure(images: Images, hashes: np.ndarray, size: int, rounds: int, reference) -> dict:
    """The crops and their Huffman floor, patched and release, in interleaved rounds: CPU ms per image."""
    dims, _ = image_sizes(images)
    boxes, flips = train_crops(hashes, dims[:, 0], dims[:, 1], seed=0, epoch=0)
    crops = {"train": (np.ascontiguousarray(boxes, np.float32), np.ascontiguousarray(flips, np.bool_)),
             "val": (np.ascontiguousarray(centre_crops(dims[:, 0], dims[:, 1], default_resize(size), size), np.float32),
                     np.zeros(len(images), np.bool_))}
    out = np.zeros((len(images), size, size, 3), np.uint8)
    row = {"bytes": int(images.lengths.sum())}
    for kind, (kind_boxes, kind_flips) in crops.items():
        for stop, label in ((None, kind), ("entropy", kind + " huffman")):
            times = {"patched": [], "release": []}
            for module in (_jpegcrop, reference):  # warm-up
                decode_seconds(module, images, kind_boxes, kind_flips, out, stop)
            for _ in range(rounds):
                for name, module in (("patched", _jpegcrop), ("release", reference)):
                    seconds = decode_seconds(module, images, kind_boxes, kind_flips, out, stop)
                    times[name].append(1000 * seconds / len(images))
            ratios = [r / p for p, r in zip(times["patched"], times["release"])]
            row[label] = {"patched_ms": statistics.median(times["patched"]),
                          "release_ms": statistics.median(times["release"]),
                          "speedup": statistics.median(ratios), "speedups": [round(r, 3) for r in ratios]}
    return row


def report(result: dict, count: int, cpu: str) -> None:
    print(f"{count} images, one core of {cpu}; CPU milliseconds per image, medians of interleaved rounds "
          "(patched / release = speed-up); 'huffman': the Huffman decode alone of the rows a crop reads")
    labels = ["train", "train huffman", "val", "val huffman"]
    print(f"{'interval':>10s}{'bytes':>9s}" + "".join(f"{label:>26s}" for label in labels))
    first = next(iter(result.values()))["bytes"]
    for most, row in result.items():
        cells = "".join(f"{row[l]['patched_ms']:9.3f} /{row[l]['release_ms']:6.3f} ={row[l]['speedup']:5.2f}x"
                        for l in labels)
        print(f"{f'<= {most} MCUs':>10s}{row['bytes'] / first - 1:+9.2%}{cells}")


@user_errors_in_one_line("python -m train.bench.huffman")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.bench.huffman", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=user_path, nargs="+", required=True,
                   help="prepared datasets, one source with one seed at several --restart-mcus (training samples read)")
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    from train.bench.reference_build import reference_jpegcrop
    from train.bench.report import cpu_model

    samples = [(read_complete_manifest(data).options["restart_mcus"], *first_samples(data, args.images))
               for data in args.data]
    reference = reference_jpegcrop()  # a build of a minute, once: only after every --data is found prepared
    result = {}
    for interval, shard_set, ids in samples:
        result[interval] = measure(shard_set.images(ids), shard_set.hashes[ids], args.image_size, args.rounds, reference)
        shard_set.close()
    report(result, len(ids), cpu_model())
    print(json.dumps({"cpu": cpu_model(), "images": len(ids), "rounds": args.rounds, "intervals": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
