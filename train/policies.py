"""Which augmentation each training sample gets besides its crop and flip: pure draws of (seed, epoch,
sample key), as its crop is (train/transforms.py), so the same for any thread count, world split,
prefetch depth or resume point. train/augment.py applies them to the batch on the device.

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
import inspect
import math
from dataclasses import dataclass

import numpy as np
from torchvision.transforms.v2 import AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide

from shards.plan import seeded_rng
from train.augment import OPS  # the ops it applies, by id; -1 is none
from train.config import ConfigError
from train.numbers import optional, real_number, whole_number
from train.transforms import splitmix64, uniforms

POLICIES = {"trivialaugment": TrivialAugmentWide, "randaugment": RandAugment, "autoaugment": AutoAugment}
INTERPOLATIONS = ("nearest", "bilinear")
AUTOAUGMENT_BINS = 10  # AutoAugment's magnitude tables have 10 bins (torchvision's forward)
ERASE_SCALE = (0.02, 0.33)  # RandomErasing's defaults
ERASE_RATIO = (0.3, 3.3)
ERASE_TRIES = 10
_REPEAT = np.uint64(0xD1B54A32D192ED03)  # mixes a repeat's index into its sample's key


@dataclass(frozen=True)
class Augment:
    """What training batches get besides RandomResizedCrop + flip, as torchvision defines it, in
    torchvision's order: the policy on the uint8 crop, normalisation, random erasing, then MixUp or
    CutMix over the batch. Validation gets none of it.

    policy:        None, "trivialaugment" (TrivialAugmentWide), "randaugment" or "autoaugment"
                   (the ImageNet policy)
    num_ops, magnitude, num_magnitude_bins: the policy's own options, only where its torchvision
                   class takes them (RandAugment all three, TrivialAugmentWide num_magnitude_bins,
                   AutoAugment none); None: the class's default (RandAugment 2, 9, 31;
                   TrivialAugmentWide 31). One given to a policy that does not take it is refused:
                   it would be ignored
    interpolation: of the geometric ops, "nearest" (torchvision's default) or "bilinear" (what
                   torchvision's classification reference passes)
    erasing:       RandomErasing's probability (its scale, ratio and value 0 are the defaults)
    mixup, cutmix: the alphas of torchvision's MixUp and CutMix (0: off); with both, one of the two per
                   batch, as the reference's RandomChoice; the labels become soft targets
    """
    policy: str | None = None
    num_ops: int | None = None
    magnitude: int | None = None
    num_magnitude_bins: int | None = None
    interpolation: str = "nearest"
    erasing: float = 0.0
    mixup: float = 0.0
    cutmix: float = 0.0

    def __post_init__(self):
        if self.policy is not None and self.policy not in POLICIES:
            raise ConfigError(f"augment policy must be one of {', '.join(POLICIES)} or None, not {self.policy!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"augment interpolation must be one of {', '.join(INTERPOLATIONS)}, not "
                              f"{self.interpolation!r}")
        # numpy strings as the plain str they equal: a state holding them fails torch.load(weights_only=True)
        object.__setattr__(self, "policy", None if self.policy is None else str(self.policy))
        object.__setattr__(self, "interpolation", str(self.interpolation))
        check_policy_takes(self.policy, {name: getattr(self, name) for name in POLICY_OPTIONS})
        for name, least in (("num_ops", 1), ("num_magnitude_bins", 2), ("magnitude", 0)):
            object.__setattr__(self, name, optional(whole_number, f"augment {name}", getattr(self, name), least=least))
        magnitude, bins = self.option("magnitude"), self.option("num_magnitude_bins")
        if magnitude is not None and magnitude >= bins:  # RandAugment's magnitude is one of its bins
            raise ConfigError(f"augment magnitude must be below the policy's {bins} magnitude bins, not {magnitude}")
        object.__setattr__(self, "erasing", real_number("augment erasing", self.erasing, least=0, most=1))
        for name in ("mixup", "cutmix"):
            object.__setattr__(self, name, real_number(f"augment {name} (an alpha, 0: off)", getattr(self, name),
                                                       least=0))

    def option(self, name: str) -> int | None:
        """num_ops, magnitude or num_magnitude_bins as the policy uses it: the value given, else its
        torchvision class's default; None where the policy does not take it."""
        given = getattr(self, name)
        return given if given is not None else policy_defaults(self.policy).get(name)

    @property
    def rounds(self) -> int:
        """Ops a sample may get: a column of the draws each."""
        num_ops = self.option("num_ops") or 0  # RandAugment's, at least 1; None for the others
        return {None: 0, "trivialaugment": 1, "randaugment": num_ops, "autoaugment": 2}[self.policy]

    @property
    def mixing(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    def to_dict(self) -> dict:
        """The fields as given (None: the policy's default), plain ints, floats, strings and None:
        Augment(**augment.to_dict()) == augment."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def effective(self) -> dict:
        """to_dict() with the policy's options as it uses them (the defaults filled in, None where it
        takes none): two Augments with equal effective() augment every sample alike."""
        return effective_augment(self.to_dict())


POLICY_OPTIONS = ("num_ops", "magnitude", "num_magnitude_bins")


@functools.lru_cache(maxsize=None)
def policy_defaults(policy: str | None) -> dict[str, int]:
    """The options of POLICY_OPTIONS that `policy`'s torchvision class takes, with its defaults (read
    from its signature: RandAugment num_ops 2, magnitude 9, num_magnitude_bins 31; TrivialAugmentWide
    num_magnitude_bins 31; AutoAugment none; None, or a name that is no policy, such as a damaged
    state's, none)."""
    if policy not in POLICIES:
        return {}
    parameters = inspect.signature(POLICIES[policy]).parameters
    return {name: parameters[name].default for name in POLICY_OPTIONS if name in parameters}


def check_policy_takes(policy: str | None, given: dict) -> None:
    """An option the policy does not take would be ignored: refused, naming the ones it does take."""
    ignored = [name for name, value in given.items() if value is not None and name not in policy_defaults(policy)]
    if ignored:
        takes = ", ".join(policy_defaults(policy)) or "none of num_ops, magnitude, num_magnitude_bins"
        raise ConfigError(f"augment {', '.join(ignored)} would be ignored by policy {policy!r} (it takes {takes}): "
                          "leave it out, or choose a policy that takes it")


def effective_augment(settings: dict) -> dict:
    """An Augment's to_dict() (or one saved before the options defaulted to None, which held 2, 9 and
    31 whatever the policy) as the policy uses it: its options filled with the policy's defaults
    where None, None where the policy does not take them."""
    defaults = policy_defaults(settings.get("policy"))
    options = {name: (settings.get(name) if settings.get(name) is not None else defaults[name]) if name in defaults
               else None for name in POLICY_OPTIONS}
    return {**settings, **options}


# ---------------------------------------------------------------- the op spaces, from torchvision

@functools.lru_cache(maxsize=64)
def op_space(policy: str, bins: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op ids (n,), magnitude table float64 (n, bins), NaN for ops without one, signed (n,)) of a
    TrivialAugmentWide or RandAugment space, in the order torchvision draws from (its dict's)."""
    space = POLICIES[policy]._AUGMENTATION_SPACE
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

def repeat_keys(key_hashes: np.ndarray, repeats: np.ndarray | None) -> np.ndarray:
    """The keys a sample's augmentation is drawn from: its key hash for its first (or only) reading,
    another for each repeat (repeated augmentation), so each repeat has its own crop and policy."""
    keys = key_hashes.astype(np.uint64)
    if repeats is None:
        return keys
    mixed = splitmix64(keys ^ (repeats.astype(np.uint64) * _REPEAT))
    return np.where(repeats == 0, keys, mixed)


def signed_magnitudes(magnitudes: np.ndarray, signed: np.ndarray, u_sign: np.ndarray) -> np.ndarray:
    """torchvision's `if signed and torch.rand(()) <= 0.5: magnitude *= -1`; 0.0 for ops without one."""
    flipped = np.where(signed & (u_sign <= 0.5), -magnitudes, magnitudes)
    return np.where(np.isnan(flipped), 0.0, flipped)


def policy_draws(keys: np.ndarray, seed: int, epoch: int, augment: Augment, height: int, width: int
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


def mixing_seed(seed: int, epoch: int, rank: int, step: int) -> int:
    """The seed of the CPU generator that torchvision's MixUp/CutMix draw from for one step of one
    rank: a resumed run mixes exactly as the first did."""
    return seeded_rng(seed, "mixing", epoch, rank, step).getrandbits(63)
