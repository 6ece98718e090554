"""The recipes `python -m train --recipe NAME` starts from: each one's published settings, as
TrainConfig values; any flag given on the command line overrides its recipe's value.

The learning rate is per 256 images of global batch here (python -m train scales it by the global
batch), so a recipe's published rate is divided by its global batch / 256.
"""

from __future__ import annotations

# The choices of the settings each recipe states for its schedule and weight decay (train/run/loop.py:
# lr_factor, exempt_from_decay).
WARMUP_AT = ("start", "end")  # --warmup-at: a warm-up step (or epoch) runs at the ramp's value at its start or end
LR_UPDATES = ("step", "epoch")  # --lr-update: the rate changes every step, or once an epoch
NO_DECAY_RULES = ("norm-and-bias", "norm", "bn-names")  # --no-decay: which parameters weight decay spares


def ffcv_ramp(epochs: int) -> tuple[int, int, int, int]:
    """FFCV's progressive resizing for a run of `epochs`: 160 px up to epoch 3E/4 - 1, 192 px from epoch
    7E/8 - 1. Every rn50_{16,24,32,40,56,88}_epochs.yaml follows this rule exactly (start_ramp 11, 17, 23,
    29, 41, 65; end_ramp 13, 20, 27, 34, 48, 76); for lengths that are not a multiple of 8 the quarters
    and eighths are rounded down, and an epoch before the first counts as the first."""
    return 160, 192, max(0, epochs * 3 // 4 - 1), max(0, epochs * 7 // 8 - 1)


RECIPES: dict[str, dict] = {
    # The recipe this project ran before recipes (He et al. 2019's "bag of tricks"): the TrainConfig
    # defaults, its schedule and weight decay stated here.
    "classic": {
        "lr_schedule": "cosine", "warmup_start_factor": 0.0, "warmup_at": "end", "lr_update": "step",
        "no_decay": "norm-and-bias",
    },
    # torchvision's ResNet-50 IMAGENET1K_V2 (80.858% top-1): references/classification/README.md,
    # "--lr 0.5 --batch-size 128" on 8 GPUs (1024 images a step), 600 epochs; its train.py builds
    # SequentialLR(LinearLR(start_factor=--lr-warmup-decay 0.01, total_iters=5), CosineAnnealingLR(T_max=
    # epochs - 5)) and steps it once an epoch; TrivialAugmentWide with bilinear interpolation (the
    # reference passes its --interpolation), RandomErasing 0.1, MixUp 0.2, CutMix 1.0, label smoothing
    # 0.1, weight decay 2e-5 with --norm-weight-decay 0.0 (set_weight_decay: norm layers' parameters
    # spared, the fc bias decayed), EMA every 32 steps with decay 0.99998, train crops of 176, eval
    # Resize(232) + CenterCrop(224), --ra-sampler --ra-reps 4. SGD momentum 0.9, not Nesterov.
    "torchvision-v2": {
        "epochs": 600, "lr": 0.5 * 256 / 1024, "weight_decay": 2e-5, "label_smoothing": 0.1, "warmup_epochs": 5.0,
        "lr_schedule": "cosine", "warmup_start_factor": 0.01, "warmup_at": "start", "lr_update": "epoch",
        "no_decay": "norm", "nesterov": False, "policy": "trivialaugment", "policy_interpolation": "bilinear",
        "erasing": 0.1, "mixup": 0.2, "cutmix": 1.0, "repeats": 4, "image_size": 176,
        "val_resize": 232, "val_crop": 224, "ema": True, "ema_steps": 32, "ema_decay": 0.99998,
    },
    # FFCV's ResNet-50, rn50_88_epochs.yaml (78.4% top-1): lr 1.7 at batch_size 512 on each of 8 GPUs
    # (4096 images a step); its get_lr (lr_schedule_type cyclic, lr_peak_epoch 2) rises from 1e-4 x lr at
    # epoch 0 to lr at epoch 2 and falls to 0 at the end, interpolated per step; label smoothing 0.1,
    # weight decay 1e-4 except on parameters named "bn" (its create_optimizer), progressive resizing
    # 160 -> 192 px (ffcv_ramp: scaled to --epochs as its other lengths' configs are), validation at
    # 256 px with crop ratio 224/256 (its CenterCropRGBImageDecoder((256, 256), ratio=224/256): the
    # centre 224/256 of the short side, resized with OpenCV's INTER_AREA). Not here: its BlurPool
    # layers (a model change) and test-time flip averaging.
    "ffcv-rn50": {
        "epochs": 88, "lr": 1.7 * 256 / 4096, "weight_decay": 1e-4, "label_smoothing": 0.1, "warmup_epochs": 2.0,
        "lr_schedule": "linear", "warmup_start_factor": 1e-4, "warmup_at": "start", "lr_update": "step",
        "no_decay": "bn-names", "nesterov": False, "ramp": ffcv_ramp(88), "image_size": 192,
        "val_crop": 256, "val_crop_fraction": 224 / 256, "val_crop_mode": "ffcv", "val_interpolation": "area",
    },
}

# Settings that follow --epochs, as the recipe's own configurations of other lengths set them.
SCALED_WITH_EPOCHS = {"ffcv-rn50": lambda epochs: {"ramp": ffcv_ramp(epochs)}}


def recipe(name: str, epochs: int | None = None) -> dict:
    """The TrainConfig values of recipe `name` (a KeyError names the choices: argparse checks them first)
    for a run of `epochs` (None: the recipe's own length): its settings that scale with the length
    (SCALED_WITH_EPOCHS) follow it."""
    values = dict(RECIPES[name])
    if name in SCALED_WITH_EPOCHS and epochs is not None:
        values |= SCALED_WITH_EPOCHS[name](epochs)
    return values
