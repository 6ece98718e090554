"""A published model's evaluation transform as ImageNetLoader's arguments (#53): timm's data config
(`resolve_data_config`'s dict, a model's `pretrained_cfg`, or its `PretrainedCfg`) or a torchvision weight's
`transforms()` (its ImageClassification preset).

    from train import ImageNetLoader, eval_transform_arguments
    device = torch.accelerator.current_accelerator()  # NVIDIA's, AMD's or Intel's GPU
    val = ImageNetLoader(root, "val", batch_size=256, image_size=224, device=device,
                         **eval_transform_arguments(timm.data.resolve_data_config({}, model=model)))

Pure, and torch-free: it reads the config's fields (or the preset's attributes) and names what the loader
cannot give.
"""

from __future__ import annotations

from collections.abc import Mapping

from train.errors import ConfigError
from train.transforms import IMAGENET_MEAN, IMAGENET_STD

TIMM_DEFAULT_CROP_PCT = 0.875  # timm.data.constants.DEFAULT_CROP_PCT, where a config leaves crop_pct out


def eval_transform_arguments(transform) -> dict:
    """{val_crop, val_resize or val_crop_fraction, val_crop_mode, val_interpolation, mean, std}: the loader's
    arguments that give `transform`'s pixels (a timm data config or pretrained_cfg, or a torchvision
    ImageClassification preset). ConfigError for one it cannot be asked for, saying which."""
    if hasattr(transform, "crop_size") and hasattr(transform, "resize_size"):
        return torchvision_arguments(transform)
    config = transform.to_dict() if hasattr(transform, "to_dict") else transform
    if not isinstance(config, Mapping) or "input_size" not in config:
        raise ConfigError(f"eval_transform_arguments takes a timm data config (resolve_data_config's dict, or a "
                          f"pretrained_cfg) or a torchvision weight's transforms(), not {type(transform).__name__}")
    return timm_arguments(config)


def timm_arguments(config: Mapping) -> dict:
    """timm's transforms_imagenet_eval, from its data config's input_size, crop_pct, crop_mode, interpolation,
    mean and std (crop_pct and crop_mode defaulted as it defaults them)."""
    _, height, width = config["input_size"]
    interpolation = config.get("interpolation") or "bilinear"
    crop = int(width) if height == width else (int(height), int(width))
    return {"val_crop": crop, "val_crop_fraction": float(config.get("crop_pct") or TIMM_DEFAULT_CROP_PCT),
            "val_crop_mode": config.get("crop_mode") or "center", "val_interpolation": interpolation,
            "mean": tuple(config.get("mean", IMAGENET_MEAN)), "std": tuple(config.get("std", IMAGENET_STD))}


def torchvision_arguments(preset) -> dict:
    """torchvision's ImageClassification preset: Resize(resize_size) + CenterCrop(crop_size), its interpolation,
    mean and std."""
    crop, resize = preset.crop_size, preset.resize_size
    interpolation = getattr(preset.interpolation, "value", preset.interpolation)
    return {"val_crop": int(crop[0]), "val_resize": int(resize[0]) if resize else int(crop[0]),
            "val_crop_mode": "center", "val_interpolation": str(interpolation), "mean": tuple(preset.mean),
            "std": tuple(preset.std)}
