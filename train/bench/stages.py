"""Host and device time of each stage of the GPU data path, one batch of 256 train images.

    python -m train.bench.stages DATA      # DATA: shards made by python -m prepare

Host time is the call's own time; wall time is to the end of the device's work (synchronised).
"""

import sys
import time
from pathlib import Path

import torch
import webdataset as wds

from shards.manifest import read_manifest
from train.data import collate, to_device
from train.transforms import TrainCrop, TrainTransform, crop_resize_flip, decode_on_device

BATCH = 256


def first_samples(root: Path, count: int) -> list[dict]:
    samples = []
    for shard in read_manifest(root).splits["train"].shards:
        for sample in wds.WebDataset(str(root / shard.name), shardshuffle=False):
            samples.append(sample)
            if len(samples) == count:
                return samples
    return samples


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
    samples = first_samples(root, BATCH)
    encoded, _, _ = collate([(TrainCrop(224, 0)(s["jpg"], 0, s["__key__"]), 0, 0) for s in samples])
    decoded = collate([(torch.from_numpy(TrainTransform(224, 0)(s["jpg"], 0, s["__key__"])), 0, 0) for s in samples])[0]
    pinned = decoded.pin_memory()
    on_device = decode_on_device(encoded.jpegs, device)
    print(torch.cuda.get_device_name(device), f"batch {BATCH}")
    report("nvJPEG batched decode", lambda: decode_on_device(encoded.jpegs, device))
    report("crop + resize + flip", lambda: crop_resize_flip(on_device, encoded.boxes, encoded.flips, 224))
    report("to_device, --decode gpu batch", lambda: to_device(encoded, device))
    report("to_device, uint8 batch, pageable", lambda: to_device(decoded, device))
    report("to_device, uint8 batch, pinned", lambda: to_device(pinned, device))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
