"""python -m train.bench.seek --data SEEKABLE --plain PLAIN: what seekable shards buy, on one core,
side by side on the same images and the same boxes.

SEEKABLE and PLAIN are one source prepared twice with the same seed, with restart markers (prepare's
default, or --restart-mcus N) and without (--restart-mcus 0): their samples lie in the same order.
For the first --images of them: the bytes, and the crop decode's milliseconds per image (resize and
flip included, the loader's path) of the seekable JPEGs, with and without seeking, against the
plain ones: torchvision's RandomResizedCrop boxes, by box area, and validation's centre crops.
Prepare's cost of the rewrite is measured by timing prepare itself (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from shards.manifest import read_complete_manifest
from train.bench.decoders import one_core
from train.decoder import Images, decode_crops, image_sizes
from train.shard_index import ShardSet
from train.transforms import centre_crops, default_resize, train_crops
from shards.errors import user_errors_in_one_line
from shards.paths import user_path

AREAS = ((0.0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1.01))  # bands of box area / image area


class NotComparable(ValueError):
    """The two datasets do not hold the same samples in the same order, or are not what is asked."""


def crop_ms(images: Images, boxes: np.ndarray, flips: np.ndarray, size: int, seek: bool) -> float:
    out = np.zeros((len(images), size, size, 3), np.uint8)
    return one_core(lambda: decode_crops(images, boxes, flips, out, 0, seek=seek), len(images))


def measure(plain: Images, seekable: Images, hashes: np.ndarray, size: int) -> dict:
    """ms per image of the plain JPEGs' crops and the seekable ones', by box area too."""
    dims, _ = image_sizes(plain)
    boxes, flips = train_crops(hashes, dims[:, 0], dims[:, 1], seed=0, epoch=0)
    centres = centre_crops(dims[:, 0], dims[:, 1], default_resize(size), size)
    no_flips = np.zeros(len(plain), np.bool_)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) / (dims[:, 0] * dims[:, 1])
    bands = {f"{lo:.1f}-{min(hi, 1):.1f}": np.flatnonzero((area >= lo) & (area < hi)) for lo, hi in AREAS}
    bands = {name: ids for name, ids in bands.items() if len(ids)}
    seeked = np.zeros(len(seekable), np.bool_)
    decode_crops(seekable, boxes, flips, np.zeros((len(seekable), size, size, 3), np.uint8), 0, seeked=seeked)
    plain_bytes, seekable_bytes = int(plain.lengths.sum()), int(seekable.lengths.sum())
    return {
        "band_images": {name: len(ids) for name, ids in bands.items()},
        "plain": {"train_ms": crop_ms(plain, boxes, flips, size, seek=False),
                  "val_ms": crop_ms(plain, centres, no_flips, size, seek=False),
                  "bands_ms": {name: crop_ms(plain[ids], boxes[ids], flips[ids], size, False)
                               for name, ids in bands.items()}},
        "seekable": {"bytes": seekable_bytes / plain_bytes - 1, "seeked": int(seeked.sum()),
                     "train_ms": crop_ms(seekable, boxes, flips, size, seek=True),
                     "train_ms_no_seek": crop_ms(seekable, boxes, flips, size, seek=False),
                     "val_ms": crop_ms(seekable, centres, no_flips, size, seek=True),
                     "bands_ms": {name: crop_ms(seekable[ids], boxes[ids], flips[ids], size, True)
                                  for name, ids in bands.items()}}}


def first_samples(root: Path, count: int) -> tuple[ShardSet, np.ndarray]:
    shard_set = ShardSet.of(root, read_complete_manifest(root), "train")
    ids = np.arange(min(count, sum(shard_set.sizes)))
    shard_set.ensure_indexed(ids)
    return shard_set, ids


def check_pair(plain_manifest, seekable_manifest) -> None:
    if plain_manifest.stats.get("seekable_images"):
        raise NotComparable("--plain holds seekable JPEGs: give a dataset prepared with --restart-mcus 0")
    if not seekable_manifest.stats.get("seekable_images"):
        raise NotComparable("--data holds no seekable JPEG: give a dataset prepared with restart markers")
    if plain_manifest.source != seekable_manifest.source or plain_manifest.options["seed"] != \
            seekable_manifest.options["seed"]:
        raise NotComparable("--data and --plain were prepared from other sources or with other seeds")


def report(result: dict, interval: int) -> None:
    plain, seekable = result["plain"], result["seekable"]
    bands = "  ".join(f"area {name} ({n})" for name, n in result["band_images"].items())
    print(f"{'':24s}{'bytes':>8s}{'train crop':>14s}{'no seek':>9s}{'val crop':>14s}  {bands}")
    print(f"{'plain (original bytes)':24s}{'':>8s}{plain['train_ms']:12.3f}ms{'':>9s}{plain['val_ms']:12.3f}ms  "
          + "  ".join(f"{ms:13.3f}ms" for ms in plain["bands_ms"].values()))
    gains = "  ".join(f"{plain['bands_ms'][band] / ms:14.2f}x" for band, ms in seekable["bands_ms"].items())
    print(f"{f'seekable, <= {interval} MCUs':24s}{seekable['bytes']:+8.2%}{seekable['train_ms']:7.3f}ms "
          f"{plain['train_ms'] / seekable['train_ms']:.2f}x{seekable['train_ms_no_seek']:7.3f}ms"
          f"{seekable['val_ms']:7.3f}ms {plain['val_ms'] / seekable['val_ms']:.2f}x  {gains}")


@user_errors_in_one_line("python -m train.bench.seek")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.bench.seek", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=user_path, required=True, help="a dataset prepared with restart markers")
    p.add_argument("--plain", type=user_path, required=True,
                   help="the same source prepared with the same seed and --restart-mcus 0")
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--image-size", type=int, default=224)
    args = p.parse_args(argv)
    try:
        check_pair(read_complete_manifest(args.plain), read_complete_manifest(args.data))
    except NotComparable as exn:
        p.error(str(exn))
    (plain, ids), (seekable, same_ids) = first_samples(args.plain, args.images), first_samples(args.data, args.images)
    if not np.array_equal(plain.hashes[ids], seekable.hashes[same_ids]):
        p.error("--data and --plain do not hold the same samples in the same order")
    result = measure(plain.images(ids), seekable.images(same_ids), plain.hashes[ids], args.image_size)
    interval = read_complete_manifest(args.data).options["restart_mcus"]
    plain.close(), seekable.close()
    from train.bench.report import cpu_model

    print(f"{len(ids)} images of {args.data} and {args.plain}, one core of {cpu_model()}; milliseconds per image")
    report(result, interval)
    print(json.dumps({"cpu": cpu_model(), "images": len(ids), "restart_mcus": interval, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
