"""Host and device time of each stage of the GPU data path, one batch of 256 train images.

    python -m train.bench.stages DATA      # DATA: shards made by python -m prepare

Host time is the call's own time; wall time is to the end of the device's work (synchronised).
"""

import sys
import time
from pathlib import Path

import torch

from shards.manifest import read_manifest
from train.data import Loader, PlanArgs, ShardSet, decode_to_device, to_device
from train.transforms import DeviceDecoder, crop_resize_flip

BATCH = 256


def first_batch(root: Path, decode: str):
    shard_set = ShardSet.of(root, read_manifest(root), "train")
    args = PlanArgs(split="train", epoch=0, seed=0, world_size=1, rank=0, batch_size=BATCH, shuffle_buffer=1000)
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


def main(root: Path) -> None:
    device = torch.device("cuda")
    encoded, decoded = first_batch(root, "gpu"), first_batch(root, "cpu")
    pinned = decoded.pin_memory()
    decoder = DeviceDecoder()
    on_device = decoder.decode(encoded.jpegs, device)
    print(torch.cuda.get_device_name(device), f"batch {BATCH}")
    report("nvJPEG batched decode", lambda: decoder.decode(encoded.jpegs, device))
    report("crop + resize + flip", lambda: crop_resize_flip(on_device, encoded.boxes, encoded.flips, 224))
    report("decode_to_device, --decode gpu batch", lambda: decode_to_device(encoded, device, decoder))
    report("to_device, uint8 batch, pageable", lambda: to_device(decoded, device))
    report("to_device, uint8 batch, pinned", lambda: to_device(pinned, device))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
