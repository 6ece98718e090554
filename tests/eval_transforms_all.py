"""Every distinct published evaluation transform against validation's pixels (#53): each timm pretrained
data config (`resolve_data_config` of every `timm.list_pretrained()` name, distinct by input size, crop_pct,
crop_mode, interpolation and mean; no weights are downloaded) and each torchvision weight's `transforms()`
(distinct by crop, resize, interpolation, mean and std: 28), on wide, tall and small photo-like JPEGs, taking the loader's
arguments as docs/library.md shows a user taking them (`train.eval_transform_arguments`). A transform passes
where every image is within tests/test_val_transforms.py's bounds (a mean of MEAN_BOUND grey levels a
pixel, 2 at most); one the loader cannot be asked for is counted as refused, by name.

    .venv/bin/python tests/eval_transforms_all.py [--images 3]

Prints one line per failure or refusal and the count; exit status 1 unless every one passes. The behaviour
tier runs it (tests/test_eval_transforms_all.py).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_val_transforms import MEAN_BOUND, grey_levels, ours, sample_jpeg  # noqa: E402

from train import eval_transform_arguments  # noqa: E402
from train.errors import ConfigError  # noqa: E402

SIZES = [(500, 375), (375, 500), (150, 113), (1200, 900)]  # wide, tall, smaller than any output, large


def timm_transforms() -> dict[str, tuple]:
    """{name: (data config, transform)}: the first pretrained name of each distinct data config."""
    import timm
    from timm.data import create_transform, resolve_data_config
    from timm.models import get_pretrained_cfg

    distinct = {}
    for name in timm.list_pretrained():
        cfg = resolve_data_config({}, pretrained_cfg=get_pretrained_cfg(name).to_dict())
        key = (tuple(cfg["input_size"]), cfg["crop_pct"], cfg["crop_mode"], cfg["interpolation"], tuple(cfg["mean"]))
        distinct.setdefault(key, (f"timm {name}", cfg))
    return {name: (cfg, create_transform(**cfg)) for name, cfg in distinct.values()}


def torchvision_transforms() -> dict[str, tuple]:
    """{name: (preset, preset)}: the first weight of each distinct ImageClassification preset."""
    import torchvision
    from torchvision.models import get_model_weights, list_models

    distinct = {}
    for model in list_models(module=torchvision.models):
        for weight in get_model_weights(model):
            preset = weight.transforms()
            # the normalisation too: VGG16's IMAGENET1K_FEATURES shares its sizes with others, not its mean and std
            key = (tuple(preset.crop_size), tuple(preset.resize_size or ()), preset.interpolation.value,
                   tuple(preset.mean), tuple(preset.std))
            distinct.setdefault(key, (f"torchvision {weight}", preset))
    return {name: (preset, preset) for name, preset in distinct.values()}


def check(name: str, config, transform, images: int) -> str | None:
    """None where the loader gives the reference's pixels on every image; else why not."""
    try:
        arguments = eval_transform_arguments(config)
    except ConfigError as refused:
        return f"refused: {refused}"
    loader_arguments = {key: value for key, value in arguments.items() if key != "std"}
    worst = (0.0, 0.0)
    for width, height in SIZES[:images]:
        data = sample_jpeg(width, height)
        mine = ours(data, **loader_arguments).astype(np.float32)
        theirs = grey_levels(transform(Image.open(io.BytesIO(data)).convert("RGB")), arguments["mean"],
                             arguments["std"])
        if mine.shape != theirs.shape:
            return f"shape {mine.shape} against {theirs.shape}"
        difference = np.abs(mine - theirs)
        worst = max(worst[0], float(difference.mean())), max(worst[1], float(difference.max()))
    # 2 levels at most, up to float32's error in the reference's normalise and its undoing (grey_levels)
    if worst[0] >= MEAN_BOUND[arguments["val_interpolation"]] or worst[1] > 2 + 1e-3:
        return f"mean {worst[0]:.3f}, max {worst[1]:.3f} grey levels"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=3, help="JPEGs each transform is checked on (at most 4)")
    args = parser.parse_args(argv)
    transforms = {**torchvision_transforms(), **timm_transforms()}
    failed = {}
    for name, (config, transform) in transforms.items():
        why = check(name, config, transform, args.images)
        if why:
            failed[name] = why
            print(f"{name}: {why}")
    print(f"{len(transforms) - len(failed)} of {len(transforms)} evaluation transforms give the reference pixels "
          f"({len(torchvision_transforms())} torchvision presets, {len(transforms) - len(torchvision_transforms())} "
          "timm data configs)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
