"""Where a data path's time goes, stage by stage.

    python -m train.bench.stages DATA                  # DATA: shards made by python -m prepare
    python -m train.bench.stages DATA --plain PLAIN    # the CPU path, seekable and plain shards side by side

With CUDA (unless --cpu): host and device time of each stage of the GPU data path, one batch of 256
train images; host time is the call's own time, wall time is to the end of the device's work
(synchronised). Without CUDA, or with --cpu: one training crop on the CPU path, per image on one
core (train.bench.cpu_stages).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from shards.help import at_least_one
from shards.manifest import read_manifest
from train.device_batches import decode_to_device, to_device
from train.loader import Loader, PlanArgs
from train.shard_index import ShardSet
from train.device_decode import OPTIONS, DeviceDecoder, crop_resize_flip
from shards.errors import user_errors_in_one_line
from shards.paths import user_path

BATCH = 256
VARIANTS = {"GPU Huffman": OPTIONS + " nvjpeg_cuda_decoder:hybrid_huffman_threshold=0",
            "simple upsampling": ":fancy_upsampling=0"}


def first_batch(root: Path, decode: str):
    shard_set = ShardSet.of(root, read_manifest(root), "train")
    args = PlanArgs(split="train", epoch=0, seed=0, world_size=1, rank=0, batch_size=BATCH, shuffle_buffer=1000,
                    size=224)
    with Loader({"train": shard_set}, batch_size=BATCH, image_size=224, threads=4, decode=decode,
                pin_memory=True) as loader:
        batch = next(loader.epoch(args))
        return batch.images.clone() if decode == "cpu" else batch.images


def report(name: str, call, repeats: int = 10) -> None:
    call()
    torch.cuda.synchronize()
    start, host = time.perf_counter(), 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        host += time.perf_counter() - t
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / repeats
    print(f"{name:36s} host {1000 * host / repeats:7.2f} ms  wall {1000 * wall:7.2f} ms  {BATCH / wall:8.0f} img/s")


def gpu_stages(root: Path) -> None:
    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device("cuda")
    encoded, decoded = first_batch(root, "gpu"), first_batch(root, "cpu")
    pinned = decoded.pin_memory()
    decoder = DeviceDecoder()
    jpegs = encoded.jpegs
    windows = decoder.decode(jpegs, encoded.windows, device)
    whole = [torch.from_numpy(j.copy()) for j in jpegs]
    print(torch.cuda.get_device_name(device), f"batch {BATCH}", decoder.describe())
    report("torchvision decode_jpeg, whole images", lambda: decode_jpeg(whole, device=device, mode=ImageReadMode.RGB))
    report("nvImageCodec code streams (host)", lambda: decoder.code_streams(jpegs, encoded.windows))
    report("nvImageCodec region decode", lambda: decoder.decode(jpegs, encoded.windows, device))
    sizes = [decoder.module.CodeStream(np.frombuffer(j, np.uint8)) for j in jpegs]
    everything = np.array([[0, 0, s.width, s.height] for s in sizes])
    report("nvImageCodec whole images", lambda: decoder.decode(jpegs, everything, device))
    for name, options in VARIANTS.items():
        variant = DeviceDecoder(options)
        report(f"nvImageCodec region decode, {name}", lambda: variant.decode(jpegs, encoded.windows, device))
    report("crop + resize + flip, batched", lambda: crop_resize_flip(windows, encoded.boxes, encoded.flips, 224))
    report("decode_to_device, --decode gpu batch", lambda: decode_to_device(encoded, device, decoder))
    report("to_device, uint8 batch, pageable", lambda: to_device(decoded, device))
    report("to_device, uint8 batch, pinned", lambda: to_device(pinned, device))


@user_errors_in_one_line("python -m train.bench.stages")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.bench.stages", description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=user_path, help="a dataset prepared by python -m prepare (seekable: its default)")
    p.add_argument("--cpu", action="store_true", help="the CPU path's profile even where CUDA is")
    p.add_argument("--plain", type=user_path,
                   help="CPU: the same source prepared with the same seed and --restart-mcus 0")
    p.add_argument("--images", type=at_least_one, default=2000, help="CPU: the first N training images")
    p.add_argument("--rounds", type=at_least_one, default=5, help="CPU: interleaved rounds (medians)")
    p.add_argument("--perf", action="store_true",
                   help="CPU: split the decode of the rows into Huffman, IDCT, upsampling and colour conversion by "
                        "perf's samples (needs perf, and a libjpeg with its symbols first on LD_LIBRARY_PATH)")
    args = p.parse_args(argv)
    if args.cpu or not torch.cuda.is_available():
        from train.bench.cpu_stages import profile

        return profile(args.data, args.plain, args.images, args.rounds, args.perf)
    gpu_stages(args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
