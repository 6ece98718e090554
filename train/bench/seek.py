"""python -m train.bench.seek --data DIR: what seekable shards buy, on one core, side by side on the
same JPEGs and the same boxes.

The first --images JPEGs of a dataset prepared without restart markers (`prepare --restart-mcus 0`)
are rewritten here, in memory, as prepare would at each interval (prepare.images.with_restarts).
For each interval: the rewrite's milliseconds per image, its bytes against the originals, and the
crop decode's milliseconds per image (resize and flip included, the loader's path) with and
without seeking, against the originals: torchvision's RandomResizedCrop boxes, by box area, and
validation's centre crops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from prepare.images import with_restarts
from shards.limits import MAX_PIXELS
from shards.manifest import read_complete_manifest
from train.bench.decoders import one_core
from train.decoder import Images, decode_crops, image_sizes
from train.shard_index import ShardSet
from train.transforms import centre_crops, train_crops

INTERVALS = (1, 2, 4, 8)  # the most MCUs between markers; prepare's default is 2
AREAS = ((0.0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1.01))  # bands of box area / image area


def crop_ms(images: Images, boxes: np.ndarray, flips: np.ndarray, size: int, seek: bool) -> float:
    out = np.zeros((len(images), size, size, 3), np.uint8)
    return one_core(lambda: decode_crops(images, boxes, flips, out, 0, seek=seek), len(images))


def measure(jpegs: list[bytes], hashes: np.ndarray, size: int) -> dict:
    original = Images.from_blobs(jpegs)
    dims, _ = image_sizes(original)
    boxes, flips = train_crops(hashes, dims[:, 0], dims[:, 1], seed=0, epoch=0)
    centres, no_flips = centre_crops(dims[:, 0], dims[:, 1]), np.zeros(len(jpegs), np.bool_)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) / (dims[:, 0] * dims[:, 1])
    bands = {f"{lo:.1f}-{min(hi, 1):.1f}": np.flatnonzero((area >= lo) & (area < hi)) for lo, hi in AREAS}
    result = {"original": {"train_ms": crop_ms(original, boxes, flips, size, seek=False),
                           "val_ms": crop_ms(original, centres, no_flips, size, seek=False),
                           "bands_ms": {name: crop_ms(original[ids], boxes[ids], flips[ids], size, False)
                                        for name, ids in bands.items() if len(ids)}},
              "band_images": {name: len(ids) for name, ids in bands.items()}}
    for most in INTERVALS:
        rewrite_ms = one_core(lambda: [with_restarts(j, most, MAX_PIXELS) for j in jpegs], len(jpegs), repeats=1)
        rewritten = [with_restarts(j, most, MAX_PIXELS) for j in jpegs]
        blobs = [r[0] if r else j for r, j in zip(rewritten, jpegs)]
        images = Images.from_blobs(blobs)
        seeked = np.zeros(len(blobs), np.bool_)
        decode_crops(images, boxes, flips, np.zeros((len(blobs), size, size, 3), np.uint8), 0, seeked=seeked)
        result[f"at most {most} MCUs"] = {
            "rewrite_ms": rewrite_ms, "bytes": sum(map(len, blobs)) / sum(map(len, jpegs)) - 1,
            "rewritten": sum(r is not None for r in rewritten), "seeked": int(seeked.sum()),
            "train_ms": crop_ms(images, boxes, flips, size, seek=True),
            "train_ms_no_seek": crop_ms(images, boxes, flips, size, seek=False),
            "val_ms": crop_ms(images, centres, no_flips, size, seek=True),
            "bands_ms": {name: crop_ms(images[ids], boxes[ids], flips[ids], size, True)
                         for name, ids in bands.items() if len(ids)}}
    return result


def report(result: dict) -> None:
    base = result["original"]
    print(f"{'':22s}{'rewrite':>9s}{'bytes':>8s}{'train crop':>12s}{'no seek':>9s}{'val crop':>10s}  "
          + "  ".join(f"area {name} ({n})" for name, n in result["band_images"].items()))
    print(f"{'original':22s}{'':>9s}{'':>8s}{base['train_ms']:10.3f}ms{'':>9s}{base['val_ms']:8.3f}ms  "
          + "  ".join(f"{ms:13.3f}ms" for ms in base["bands_ms"].values()))
    for name, r in result.items():
        if name.startswith("at most"):
            gains = "  ".join(f"{base['bands_ms'][band] / ms:14.2f}x" for band, ms in r["bands_ms"].items())
            print(f"{name:22s}{r['rewrite_ms']:7.2f}ms{r['bytes']:+8.2%}{r['train_ms']:7.3f}ms "
                  f"{base['train_ms'] / r['train_ms']:.2f}x{r['train_ms_no_seek']:7.3f}ms"
                  f"{r['val_ms']:7.3f}ms {base['val_ms'] / r['val_ms']:.2f}x  {gains}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.bench.seek", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="a dataset prepared with --restart-mcus 0")
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--image-size", type=int, default=224)
    args = p.parse_args(argv)
    manifest = read_complete_manifest(args.data)
    if manifest.stats.get("seekable_images"):
        p.error(f"{args.data} is seekable already: give a dataset prepared with --restart-mcus 0")
    shard_set = ShardSet.of(args.data, manifest, "train")
    ids = np.arange(min(args.images, sum(shard_set.sizes)))
    shard_set.ensure_indexed(ids)
    images = shard_set.images(ids)
    result = measure([images.data(i) for i in range(len(ids))], shard_set.hashes[ids], args.image_size)
    shard_set.close()
    from train.bench.report import cpu_model

    print(f"{len(ids)} images from {args.data}, one core of {cpu_model()}; milliseconds per image")
    report(result)
    print(json.dumps({"cpu": cpu_model(), "images": len(ids), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
