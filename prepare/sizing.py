"""How much disk the shards take, before anything is written, and the --resize that makes them fit.

Without --resize the shards hold the source's images (rewritten losslessly): their size is the
source's bytes. With it, or to name one where the dataset does not fit, a sample of the train images
is prepared at each size in memory (`sampled_ratios`: a few images from parts spread over the split,
the same every run) and the source's bytes scaled by what they became. The choice is pure
(`fitting_resize`); the disk's own arithmetic is prepare/space.py's.
"""

from __future__ import annotations

import itertools
from typing import Callable

from prepare.config import PrepareConfig
from prepare.images import BadImage, prepare_image
from prepare.sources.base import Source

RESIZE_CHOICES = (640, 512, 448, 384, 320, 256, 224, 192, 160, 128)  # --resize values suggested, largest first
SAMPLED_PARTS = 6  # parts a sample comes from, spread over the train split (a part may be a whole class tar)
IMAGES_PER_PART = 8


def sampled_images(source: Source, split: str = "train") -> list[bytes]:
    """The first IMAGES_PER_PART images of SAMPLED_PARTS parts spread evenly over the split. Read here,
    in the main process: what it read through a seek index is closed before the workers fork."""
    parts = source.parts(split)
    step = max(1, len(parts) // SAMPLED_PARTS)
    images = []
    try:
        for part in parts[::step][:SAMPLED_PARTS]:
            items = part.items()
            try:
                images += [item.data for item in itertools.islice(items, IMAGES_PER_PART)]
            finally:
                items.close()  # a streamed part (a gzip) stops reading here
    finally:
        source.close()
    return images


def prepared_bytes(image: bytes, resize: int | None, config: PrepareConfig) -> int:
    """What one image becomes in a shard (0 for one prepare would leave out)."""
    try:
        done = prepare_image(image, resize, config.quality, restart_mcus=config.restart_mcus)
    except BadImage:
        return 0
    return len(done.data) if done.data is not None else len(image)


def sampled_ratios(images: list[bytes], sizes: tuple[int | None, ...], config: PrepareConfig) -> dict[int | None, float]:
    """--resize -> the sample's prepared bytes over its source bytes (None: no --resize)."""
    total = sum(map(len, images)) or 1
    return {size: sum(prepared_bytes(image, size, config) for image in images) / total for size in sizes}


def fitting_resize(need_at: Callable[[int], int], free: int, choices: tuple[int, ...] = RESIZE_CHOICES) -> int | None:
    """The largest of `choices` whose need (bytes, `need_at(size)`) fits in `free`; None where none
    does. Pure.

    >>> fitting_resize(lambda size: size * 10, 3000)
    256
    """
    return next((size for size in choices if need_at(size) <= free), None)
