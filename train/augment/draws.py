"""Which augmentation each training sample gets besides its crop and flip: the pure draws of (seed,
epoch, sample key) that an `Augment` (train/augment/choices.py: the choices and their checks, which
imports this module where its draws run) asks for, as its crop is (train/transforms.py), so the same for any thread count, world split,
prefetch depth or resume point. The loader's decode threads make them (`Augment.draws`, handed to the
loader as a stage); train/augment/ops.py applies them to the batch on the device (`Augment.on_device`).

The policies are torchvision's (transforms.v2): TrivialAugmentWide, RandAugment(num_ops, magnitude)
and AutoAugment's ImageNet policy, their op spaces and magnitude tables read from torchvision's own
classes, so the ops, bins and signs are torchvision's by construction; each sample draws as those
classes draw per image (op uniformly, bin uniformly, sign with probability 1/2; AutoAugment a
sub-policy, then each of its two ops with its probability). RandomErasing's box is drawn as its
make_params draws it (ten tries of area and log aspect ratio, then the position). The draws come from
streams of their own ("policy", "erasing"): turning them on changes no sample's crop or flip.

Each sample's draw is a row: ops (int64, -1 where no op) and magnitudes (float64: exactly the
`magnitude` torchvision's _apply_image_or_video_transform receives, signed, 0.0 for ops without one).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from torchvision.transforms.v2 import AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide

from train.augment import POLICIES
from train.augment.ops import OPS  # the ops it applies, by id; -1 is none
from train.transforms import uniforms

POLICY_CLASSES = dict(zip(POLICIES, (TrivialAugmentWide, RandAugment, AutoAugment)))  # torchvision's
AUTOAUGMENT_BINS = 10  # AutoAugment's magnitude tables have 10 bins (torchvision's forward)
ERASE_SCALE = (0.02, 0.33)  # RandomErasing's defaults
ERASE_RATIO = (0.3, 3.3)
ERASE_TRIES = 10




# ---------------------------------------------------------------- the op spaces, from torchvision

@functools.lru_cache(maxsize=64)
def op_space(policy: str, bins: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op ids (n,), magnitude table float64 (n, bins), NaN for ops without one, signed (n,)) of a
    TrivialAugmentWide or RandAugment space, in the order torchvision draws from (its dict's)."""
    space = POLICY_CLASSES[policy]._AUGMENTATION_SPACE
    ids, table, signed = [], np.full((len(space), bins), np.nan), []
    for row, (name, (magnitudes_fn, is_signed)) in enumerate(space.items()):
        ids.append(OPS.index(name))
        magnitudes = magnitudes_fn(bins, height, width)
        if magnitudes is not None:
            table[row] = [float(m) for m in magnitudes]  # torchvision's float32 values, as float() gives them
        signed.append(is_signed)
    return np.array(ids, np.int64), table, np.array(signed)


@functools.lru_cache(maxsize=64)
def autoaugment_space(height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """AutoAugment's ImageNet sub-policies: (op ids (25, 2), probabilities (25, 2), magnitudes (25, 2),
    NaN for ops without one, signed (25, 2))."""
    policies = AutoAugment(AutoAugmentPolicy.IMAGENET)._policies
    ids = np.array([[OPS.index(name) for name, _, _ in pair] for pair in policies], np.int64)
    probabilities = np.array([[p for _, p, _ in pair] for pair in policies], np.float64)
    magnitudes, signed = np.full(ids.shape, np.nan), np.zeros(ids.shape, bool)
    for i, pair in enumerate(policies):
        for j, (name, _, bin_) in enumerate(pair):
            magnitudes_fn, is_signed = AutoAugment._AUGMENTATION_SPACE[name]
            table = magnitudes_fn(AUTOAUGMENT_BINS, height, width)
            if table is not None:
                magnitudes[i, j] = float(table[bin_])
            signed[i, j] = is_signed
    return ids, probabilities, magnitudes, signed


# ---------------------------------------------------------------- the draws

def signed_magnitudes(magnitudes: np.ndarray, signed: np.ndarray, u_sign: np.ndarray) -> np.ndarray:
    """torchvision's `if signed and torch.rand(()) <= 0.5: magnitude *= -1`; 0.0 for ops without one."""
    flipped = np.where(signed & (u_sign <= 0.5), -magnitudes, magnitudes)
    return np.where(np.isnan(flipped), 0.0, flipped)


def policy_draws(keys: np.ndarray, seed: int, epoch: int, augment: "Augment", height: int, width: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(ops int64 (n, rounds), magnitudes float64 (n, rounds)) for a batch of keys and an output of
    height x width (RandAugment's and AutoAugment's translations scale with the width and height)."""
    n, rounds = len(keys), augment.rounds
    if augment.policy == "autoaugment":
        return autoaugment_draws(uniforms(keys, seed, epoch, 5, "policy"), height, width)
    u = uniforms(keys, seed, epoch, 3 * rounds, "policy")
    bins = augment.option("num_magnitude_bins")
    assert bins is not None  # TrivialAugmentWide and RandAugment both take it
    ids, table, signed = op_space(augment.policy, bins, height, width)
    ops, magnitudes = np.empty((n, rounds), np.int64), np.empty((n, rounds), np.float64)
    for r in range(rounds):
        row = np.minimum((u[:, 3 * r] * len(ids)).astype(np.int64), len(ids) - 1)
        if augment.policy == "trivialaugment":
            bin_ = np.minimum((u[:, 3 * r + 1] * bins).astype(np.int64), bins - 1)
        else:
            bin_ = np.full(n, augment.option("magnitude"))
        ops[:, r] = ids[row]
        magnitudes[:, r] = signed_magnitudes(table[row, bin_], signed[row], u[:, 3 * r + 2])
    return ops, magnitudes


def autoaugment_draws(u: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A sub-policy each (u[:, 0]), then each of its two ops kept with its probability (u[:, 1:3],
    torchvision's `torch.rand(()) <= probability`) with a sign (u[:, 3:5])."""
    ids, probabilities, table, signed = autoaugment_space(height, width)
    policy = np.minimum((u[:, 0] * len(ids)).astype(np.int64), len(ids) - 1)
    kept = u[:, 1:3] <= probabilities[policy]
    ops = np.where(kept, ids[policy], -1)
    magnitudes = np.where(kept, signed_magnitudes(table[policy], signed[policy], u[:, 3:5]), 0.0)
    return ops, magnitudes


def erasing_boxes(keys: np.ndarray, seed: int, epoch: int, p: float, height: int, width: int) -> np.ndarray:
    """RandomErasing's box per sample: int32 (n, 4) as (top, left, height, width), height 0 where
    nothing is erased (probability 1 - p, or no try of the ten fitting), drawn as its make_params."""
    u = uniforms(keys, seed, epoch, 3 + 2 * ERASE_TRIES, "erasing")
    area = float(height * width)
    erase_area = area * (ERASE_SCALE[0] + (ERASE_SCALE[1] - ERASE_SCALE[0]) * u[:, 1:1 + ERASE_TRIES])
    log_lo, log_hi = math.log(ERASE_RATIO[0]), math.log(ERASE_RATIO[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[:, 1 + ERASE_TRIES:1 + 2 * ERASE_TRIES])
    h, w = np.rint(np.sqrt(erase_area * aspect)), np.rint(np.sqrt(erase_area / aspect))  # round(), half to even
    fits = (h < height) & (w < width)
    first, rows = fits.argmax(axis=1), np.arange(len(keys))
    h, w = h[rows, first], w[rows, first]
    top = np.floor(u[:, -2] * (height - h + 1))
    left = np.floor(u[:, -1] * (width - w + 1))
    erased = (u[:, 0] < p) & fits[rows, first]  # torchvision skips when torch.rand(1) >= p
    boxes = np.stack([top, left, h, w], axis=1)
    return np.where(erased[:, None], boxes, 0).astype(np.int32)
