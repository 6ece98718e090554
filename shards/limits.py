"""How large an image a prepared dataset may hold: one pixel count, the same for both stages.

`prepare` refuses a larger image as it refuses any image it cannot use (it stops and names it, or
leaves it out with --skip-bad), so a prepared dataset never holds one. `train` reads every header
before it decodes anything: a larger image met in a shard (damage after prepare) is a bad sample,
left out, named and counted. The limit bounds what one decoding thread may allocate for one
image, whatever the bytes claim (train/decoder.py states the bound).

The largest image in ImageNet-1k fits in 5,980 x 6,430 pixels (38.5 Mpx at most): the sizes NVIDIA
DALI's ResNet-50 example preallocates nvJPEG's buffers for, "the biggest image in the data set"
(NVIDIA/DALI, docs/examples/use_cases/pytorch/resnet50/main.py, preallocate_width_hint and
preallocate_height_hint). 2**26 (67.1 Mpx) leaves 1.75x of room above that and stays below PIL's
own decompression-bomb warning (89.5 Mpx; its error comes at twice that).
"""

from __future__ import annotations

MAX_PIXELS = 1 << 26


def too_many_pixels(width: int, height: int, limit: int = MAX_PIXELS) -> bool:
    return width * height > limit


def oversized(width: int, height: int, limit: int = MAX_PIXELS) -> str:
    """Why an image is refused, for messages: '70000 x 1000 pixels, more than the limit of 67,108,864'."""
    return f"{width} x {height} pixels, more than the limit of {limit:,} (shards.limits.MAX_PIXELS)"
