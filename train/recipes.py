"""The recipes `python -m train --recipe NAME` starts from: each one's published settings, as
TrainConfig values; any flag given on the command line overrides its recipe's value.

The learning rate is per 256 images of global batch here (python -m train scales it by the global
batch), so a recipe's published rate is divided by its global batch / 256.
"""

from __future__ import annotations

RECIPES: dict[str, dict] = {
    # The 2015 recipe as this project ran it before recipes: the TrainConfig defaults.
    "classic": {},
    # torchvision's ResNet-50 IMAGENET1K_V2 (80.858% top-1): references/classification/README.md,
    # "--lr 0.5 --batch-size 128" on 8 GPUs (1024 images a step), 600 epochs, cosine after a 5-epoch
    # linear warm-up, TrivialAugmentWide with bilinear interpolation (the reference passes its
    # --interpolation), RandomErasing 0.1, MixUp 0.2, CutMix 1.0, label smoothing 0.1, weight decay
    # 2e-5 (none on norm layers), EMA every 32 steps with decay 0.99998, train crops of 176, eval
    # Resize(232) + CenterCrop(224), --ra-sampler --ra-reps 4. SGD momentum 0.9, not Nesterov.
    "torchvision-v2": {
        "epochs": 600, "lr": 0.5 * 256 / 1024, "weight_decay": 2e-5, "label_smoothing": 0.1, "warmup_epochs": 5.0,
        "lr_schedule": "cosine", "nesterov": False, "policy": "trivialaugment", "policy_interpolation": "bilinear",
        "random_erase": 0.1, "mixup_alpha": 0.2, "cutmix_alpha": 1.0, "repeats": 4, "image_size": 176,
        "val_resize": 232, "val_crop": 224, "ema": True, "ema_steps": 32, "ema_decay": 0.99998,
    },
    # FFCV's ResNet-50, rn50_88_epochs.yaml (78.4% top-1): lr 1.7 at batch_size 512 on each of 8 GPUs
    # (4096 images a step), peaking at epoch 2 from 1.7e-4 and falling linearly to 0 at the end,
    # label smoothing 0.1, weight decay 1e-4 (none on batch norm), progressive resizing 160 -> 192 px
    # between epochs 65 and 76 in steps of 32, validation at 256 px (crop ratio 224/256: Resize(293)).
    # Not here: its BlurPool layers (a model change) and test-time flip averaging.
    "ffcv-rn50": {
        "epochs": 88, "lr": 1.7 * 256 / 4096, "weight_decay": 1e-4, "label_smoothing": 0.1, "warmup_epochs": 2.0,
        "lr_schedule": "linear", "nesterov": False, "ramp": (160, 192, 65, 76), "image_size": 192,
        "val_crop": 256, "val_resize": 293,
    },
}


def recipe(name: str) -> dict:
    """The TrainConfig values of recipe `name` (a KeyError names the choices: argparse checks them first)."""
    return dict(RECIPES[name])
