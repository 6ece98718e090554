"""python -m train.bench.decoders --data DIR: milliseconds per image on one core, the candidates
side by side on the same JPEGs and the same RandomResizedCrop boxes.

    ours               crop-region decode + resize + flip (train/native/jpegcrop.c), the loader's path
    today's PIL path   pillow-simd: decode (DCT-scaled by draft where the crop allows) + resize with box + flip
    full decode        the whole image to RGB, no crop, no resize: PIL, torchvision.io, and where
                       installed NVIDIA nvImageCodec's CPU backend and simplejpeg
    region decode      nvImageCodec's CPU backend decoding the crop only (no resize), where installed

The fastest full decode, run in as many threads as the loader has, is the benchmark's "decode
ceiling" (decode_ceiling): what the cores could do if they only decoded whole images.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import torch

from shards.manifest import read_complete_manifest
from train.shard_index import ShardSet
from train.decoder import Images, decode_crops, image_sizes
from train.device_decode import quiet_stderr
from train.transforms import train_crops
from shards.errors import user_errors_in_one_line
from shards.paths import user_path


def full_decoders() -> dict[str, Callable[[bytes], object]]:
    """The full-image RGB decoders installed here, by name."""
    from PIL import Image
    from torchvision.io import decode_jpeg

    decoders = {
        "PIL": lambda data: Image.open(io.BytesIO(data)).convert("RGB"),
        "torchvision.io.decode_jpeg": lambda data: decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8)),
    }
    if nvimgcodec_cpu():
        per_thread = threading.local()  # one decoder per thread: an instance is not shared safely

        def nvimgcodec_decode(data):
            if not hasattr(per_thread, "decoder"):
                per_thread.decoder = nvimgcodec_cpu()[1]
            return np.asarray(per_thread.decoder.decode(data).cpu())

        decoders["nvImageCodec CPU"] = nvimgcodec_decode
    with contextlib.suppress(ImportError):
        import simplejpeg

        decoders["simplejpeg"] = lambda data: simplejpeg.decode_jpeg(data)
    return decoders


def nvimgcodec_cpu():
    """(module, a one-thread CPU-only decoder) of NVIDIA nvImageCodec, or None where not installed."""
    try:
        with quiet_stderr():  # its import complains about the GPU codecs' missing libraries
            from nvidia import nvimgcodec

            decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                                         backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
    except ImportError:
        return None
    return nvimgcodec, decoder


def one_core(function: Callable[[], None], count: int, repeats: int = 3) -> float:
    """Best milliseconds per image of `function` (which handles `count` images per thread), with
    torch's intra-op threads at one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        function()  # warm-up
        best = min(timed(function) for _ in range(repeats))
    finally:
        torch.set_num_threads(threads)
    return 1000 * best / count


def timed(function: Callable[[], None]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def decode_ceiling(jpegs: list[bytes], threads: int = 1) -> tuple[str, float]:
    """The fastest full decode of these JPEGs: (decoder, images/s per core) with `threads` threads
    each decoding all of them at once (the decoders release the GIL), as a loader uses its cores."""
    def rate(decode) -> float:
        work = lambda: list(pool.map(lambda _: [decode(j) for j in jpegs], range(threads)))
        return 1000 / one_core(work, len(jpegs))  # per thread: each decoded every image

    with ThreadPoolExecutor(threads) as pool:
        rates = {name: rate(decode) for name, decode in full_decoders().items()}
    best = max(rates, key=rates.get)
    return best, rates[best]


def candidates(images: Images, hashes: np.ndarray, size: int) -> dict[str, float]:
    """Milliseconds per image of each candidate on the same images and crops."""
    from train.bench.pil_loader import TrainTransform

    n = len(images)
    jpegs = [bytes(images.data(i)) for i in range(n)]
    dims, _ = image_sizes(images)
    boxes, flips = train_crops(hashes, dims[:, 0], dims[:, 1], seed=0, epoch=0)
    out = np.zeros((n, size, size, 3), np.uint8)
    pil = TrainTransform(size, seed=0)
    result = {
        "ours: crop-region decode + resize + flip": one_core(lambda: decode_crops(images, boxes, flips, out, 0), n),
        "today's PIL path: decode (draft) + resize with box + flip":
            one_core(lambda: [pil(j, 0, str(i)) for i, j in enumerate(jpegs)], n),
    }
    for name, decode in full_decoders().items():
        result[f"full decode, {name}"] = one_core(lambda: [decode(j) for j in jpegs], n)
    nvimgcodec = nvimgcodec_cpu()
    if nvimgcodec:
        module, decoder = nvimgcodec
        regions = [module.CodeStream(j).get_sub_code_stream(region=module.Region(int(b[1]), int(b[0]), int(b[3]), int(b[2])))
                   for j, b in zip(jpegs, boxes)]
        result["region decode (no resize), nvImageCodec CPU"] = one_core(
            lambda: [np.asarray(decoder.decode(r).cpu()) for r in regions], n)
    return result


@user_errors_in_one_line("python -m train.bench.decoders")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.bench.decoders", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=user_path, required=True, help="a dataset prepared by python -m prepare")
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--image-size", type=int, default=224)
    args = p.parse_args(argv)
    shard_set = ShardSet.of(args.data, read_complete_manifest(args.data), "train")
    ids = np.arange(min(args.images, sum(shard_set.sizes)))
    shard_set.ensure_indexed(ids)
    result = candidates(shard_set.images(ids), shard_set.hashes[ids], args.image_size)
    from train.bench.report import cpu_model

    print(f"{len(ids)} images from {args.data}, one core of {cpu_model()}")
    for name, ms in result.items():
        print(f"{name:62s}{ms:8.3f} ms/image")
    print(json.dumps({"cpu": cpu_model(), "images": len(ids), "ms_per_image": result}))
    shard_set.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
