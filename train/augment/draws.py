"""Which augmentation each training sample gets besides its crop and flip: `Augment`, the single value
of every augmentation choice and its checks, and the pure draws of (seed, epoch, sample key), as its
crop is (train/transforms.py), so the same for any thread count, world split, prefetch depth or resume
point. The loader's decode threads make them (`Augment.draws`, handed to the loader as a stage);
train/augment/ops.py applies them to the batch on the device (`Augment.on_device`).

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
from dataclasses import dataclass, fields

import numpy as np
from torchvision.transforms.v2 import AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide

from train.augment import POLICIES, POLICY_INTERPOLATIONS
from train.augment.ops import OPS, DeviceOps  # the ops it applies, by id; -1 is none
from train.errors import ConfigError, about
from train.numbers import optional, real_number, whole_number
from train.transforms import uniforms

POLICY_CLASSES = dict(zip(POLICIES, (TrivialAugmentWide, RandAugment, AutoAugment)))  # torchvision's
AUTOAUGMENT_BINS = 10  # AutoAugment's magnitude tables have 10 bins (torchvision's forward)
ERASE_SCALE = (0.02, 0.33)  # RandomErasing's defaults
ERASE_RATIO = (0.3, 3.3)
ERASE_TRIES = 10


@dataclass(frozen=True)
class Augment:
    """What training batches get besides RandomResizedCrop + flip, as torchvision defines it, in
    torchvision's order: the policy on the uint8 crop, normalisation, random erasing, then MixUp or
    CutMix over the batch. Validation gets none of it. The command line's settings of the same names
    build it as they are (its flags are these fields' names, dashed).

    policy:        None, "trivialaugment" (TrivialAugmentWide), "randaugment" or "autoaugment"
                   (the ImageNet policy)
    num_ops, magnitude, num_magnitude_bins: the policy's own options, only where its torchvision
                   class takes them (RandAugment all three, TrivialAugmentWide num_magnitude_bins,
                   AutoAugment none); None: the class's default (RandAugment 2, 9, 31;
                   TrivialAugmentWide 31). One given to a policy that does not take it is refused:
                   it would be ignored
    policy_interpolation: of the policy's geometric ops, "nearest" (torchvision's default) or
                   "bilinear" (what torchvision's classification reference passes)
    erasing:       RandomErasing's probability (its scale, ratio and value 0 are the defaults)
    mixup, cutmix: the alphas of torchvision's MixUp and CutMix (0: off); with both, one of the two per
                   batch, as the reference's RandomChoice; the labels become soft targets
    """
    policy: str | None = None
    num_ops: int | None = None
    magnitude: int | None = None
    num_magnitude_bins: int | None = None
    policy_interpolation: str = "nearest"
    erasing: float = 0.0
    mixup: float = 0.0
    cutmix: float = 0.0

    def __post_init__(self):
        if self.policy is not None and self.policy not in POLICIES:
            raise about("policy", "augment policy", f"must be one of {', '.join(POLICIES)} or None, not {self.policy!r}")
        if self.policy_interpolation not in POLICY_INTERPOLATIONS:
            raise about("policy_interpolation", "augment policy_interpolation",
                        f"must be one of {', '.join(POLICY_INTERPOLATIONS)}, not {self.policy_interpolation!r}")
        # numpy strings as the plain str they equal: a state holding them fails torch.load(weights_only=True)
        object.__setattr__(self, "policy", None if self.policy is None else str(self.policy))
        object.__setattr__(self, "policy_interpolation", str(self.policy_interpolation))
        check_policy_takes(self.policy, {name: getattr(self, name) for name in POLICY_OPTIONS})
        for name, least in (("num_ops", 1), ("num_magnitude_bins", 2), ("magnitude", 0)):
            object.__setattr__(self, name, optional(whole_number, name, getattr(self, name), least=least,
                                                    said=f"augment {name}"))
        magnitude, bins = self.option("magnitude"), self.option("num_magnitude_bins")
        if magnitude is not None and magnitude >= bins:  # RandAugment's magnitude is one of its bins
            raise about("magnitude", "augment magnitude",
                        f"must be below the policy's {bins} magnitude bins, not {magnitude}")
        object.__setattr__(self, "erasing", real_number("erasing", self.erasing, least=0, most=1,
                                                        said="augment erasing"))
        for name in ("mixup", "cutmix"):
            object.__setattr__(self, name, real_number(name, getattr(self, name), least=0, said=f"augment {name}",
                                                       note=" (an alpha, 0: off)"))

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

    @property
    def changes_batches(self) -> bool:
        """Whether it changes a training batch at all (Augment() and an interpolation alone do not)."""
        return self.policy is not None or self.erasing > 0 or self.mixing

    def to_dict(self) -> dict:
        """The fields as given (None: the policy's default), plain ints, floats, strings and None:
        Augment(**augment.to_dict()) == augment."""
        return {name: getattr(self, name) for name in AUGMENT_FIELDS}

    def effective(self) -> dict:
        """to_dict() with the policy's options as it uses them (its defaults filled in where None): two
        Augments with equal effective() augment every sample alike, and Augment(**effective()) is one."""
        return {**self.to_dict(), **{name: self.option(name) for name in POLICY_OPTIONS}}

    # ------------------------------------------------------------ the stages the data path runs

    def draws(self, keys: np.ndarray, seed: int, epoch: int, size: int) -> dict[str, np.ndarray]:
        """In the loader's decode threads: each sample's policy ops and magnitudes and its erasing box,
        where asked, as the batch record's fields (train/loader.py's Batch: "ops", "magnitudes",
        "erase"), a row per key. Pure: a function of (seed, epoch, key) alone."""
        drawn = {}
        if self.policy is not None:
            drawn["ops"], drawn["magnitudes"] = policy_draws(keys, seed, epoch, self, size, size)
        if self.erasing > 0:
            drawn["erase"] = erasing_boxes(keys, seed, epoch, self.erasing, size, size)
        return drawn

    def on_device(self) -> DeviceOps:
        """On the device, in DeviceBatches' thread and stream: the draws applied (train/augment/ops.py)."""
        return DeviceOps(self.policy_interpolation)


AUGMENT_FIELDS = tuple(f.name for f in fields(Augment))  # the command line's fields of the same names too
# Keywords renamed since Augment was published -> their names now
RENAMED_KEYWORDS = {"interpolation": "policy_interpolation"}


def _answer_renamed_keywords(init):
    """Augment's __init__, answering a keyword by its old name with its new one (a TypeError, as any
    keyword Augment does not take), not a bare "unexpected keyword argument"."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        old = next((name for name in kwargs if name in RENAMED_KEYWORDS), None)
        if old is not None:
            raise TypeError(f"Augment() got an unexpected keyword argument {old!r}: it is now "
                            f"{RENAMED_KEYWORDS[old]}= (the same setting, renamed)")
        init(self, *args, **kwargs)
    return __init__


Augment.__init__ = _answer_renamed_keywords(Augment.__init__)  # type: ignore[method-assign]
POLICY_OPTIONS = ("num_ops", "magnitude", "num_magnitude_bins")


@functools.lru_cache(maxsize=None)
def policy_defaults(policy: str | None) -> dict[str, int]:
    """The options of POLICY_OPTIONS that `policy`'s torchvision class takes, with its defaults (read
    from its signature: RandAugment num_ops 2, magnitude 9, num_magnitude_bins 31; TrivialAugmentWide
    num_magnitude_bins 31; AutoAugment none; None none)."""
    if policy not in POLICY_CLASSES:
        return {}
    parameters = inspect.signature(POLICY_CLASSES[policy]).parameters
    return {name: parameters[name].default for name in POLICY_OPTIONS if name in parameters}


def check_policy_takes(policy: str | None, given: dict) -> None:
    """An option the policy does not take would be ignored: refused, naming the ones it does take."""
    ignored = [name for name, value in given.items() if value is not None and name not in policy_defaults(policy)]
    if ignored:
        takes = ", ".join("{" + name + "}" for name in policy_defaults(policy)) or "none"
        said = {name: name for name in POLICY_OPTIONS} | {ignored[0]: f"augment {ignored[0]}"}
        raise ConfigError(", ".join("{" + name + "}" for name in ignored) + f" would be ignored by policy {policy!r} "
                          f"(it takes {takes}): leave it out, or choose a policy that takes it", said)


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
