"""`Augment`, the single value of every augmentation choice a training sample gets besides its crop and
flip, and its checks. Imports no torch: the run's configuration holds one (train/run/config.py), and the
command line builds it as it parses. What it draws and applies is train/augment/draws.py's (numpy and
torchvision's tables) and train/augment/ops.py's (torch), imported where those stages run.

Its policies' own options default as torchvision's classes do (`POLICY_DEFAULTS`, a table:
tests/test_augment_draws.py holds it to the installed torchvision's signatures)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from train.augment import POLICIES, POLICY_INTERPOLATIONS
from train.errors import ConfigError, about
from train.numbers import optional, real_number, whole_number

if TYPE_CHECKING:
    import numpy as np

    from train.augment.ops import DeviceOps

POLICY_OPTIONS = ("num_ops", "magnitude", "num_magnitude_bins")
# The options of POLICY_OPTIONS each policy's torchvision class takes, with their defaults (RandAugment's,
# TrivialAugmentWide's and AutoAugment's signatures); no policy takes none
POLICY_DEFAULTS = {"trivialaugment": {"num_magnitude_bins": 31},
                   "randaugment": {"num_ops": 2, "magnitude": 9, "num_magnitude_bins": 31},
                   "autoaugment": {}}

# Far past any recipe's (torchvision's defaults: 2 ops, 31 bins), and bounded: the draws hold num_ops columns a sample
# and the op space a table of num_magnitude_bins a policy op: 10**9 bins asked 104 GB in the first batch (a
# MemoryError in a decode thread), and 10**6 ops ran a batch for minutes
MAX_NUM_OPS = 100
MAX_MAGNITUDE_BINS = 10_000
# MixUp's and CutMix's alphas as torch's Beta (float32) draws them right: below 0.01 a share of its draws are
# exactly 0.5 (0.09% at 0.005, 25% at 0.001), below 1e-38 it raises mid-run; above float32's largest it is
# infinite, and the weight drawn about 0 where it should be 0.5
MIN_ALPHA = 0.01
MAX_ALPHA = 3.4e38


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
        for name, least, most in (("num_ops", 1, MAX_NUM_OPS), ("num_magnitude_bins", 2, MAX_MAGNITUDE_BINS),
                                  ("magnitude", 0, None)):
            object.__setattr__(self, name, optional(whole_number, name, getattr(self, name), least=least, most=most,
                                                    said=f"augment {name}"))
        magnitude, bins = self.option("magnitude"), self.option("num_magnitude_bins")
        if magnitude is not None and magnitude >= bins:  # RandAugment's magnitude is one of its bins
            raise about("magnitude", "augment magnitude",
                        f"must be below the policy's {bins} magnitude bins, not {magnitude}")
        object.__setattr__(self, "erasing", real_number("erasing", self.erasing, least=0, most=1,
                                                        said="augment erasing"))
        for name in ("mixup", "cutmix"):
            alpha = real_number(name, getattr(self, name), least=0, most=MAX_ALPHA, said=f"augment {name}",
                                note=" (an alpha, 0: off)")
            if 0 < alpha < MIN_ALPHA:
                raise about(name, f"augment {name}", f"must be 0 (off) or at least {MIN_ALPHA}, not {alpha}: torch's "
                            "Beta draws a smaller alpha's mixing weight as exactly 0.5 for a share of batches (its "
                            "float32 gammas underflow), and fails mid-run below 1e-38")
            object.__setattr__(self, name, alpha)

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
        from train.augment.draws import erasing_boxes, policy_draws  # numpy and torchvision's tables

        drawn = {}
        if self.policy is not None:
            drawn["ops"], drawn["magnitudes"] = policy_draws(keys, seed, epoch, self, size, size)
        if self.erasing > 0:
            drawn["erase"] = erasing_boxes(keys, seed, epoch, self.erasing, size, size)
        return drawn

    def on_device(self) -> "DeviceOps":
        """On the device, in DeviceBatches' thread and stream: the draws applied (train/augment/ops.py)."""
        from train.augment.ops import DeviceOps  # torch

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


def policy_defaults(policy: str | None) -> dict[str, int]:
    """The options of POLICY_OPTIONS that `policy`'s torchvision class takes, with its defaults."""
    return dict(POLICY_DEFAULTS.get(policy, {}))


def check_policy_takes(policy: str | None, given: dict) -> None:
    """An option the policy does not take would be ignored: refused, naming the ones it does take."""
    ignored = [name for name, value in given.items() if value is not None and name not in policy_defaults(policy)]
    if ignored:
        takes = ", ".join("{" + name + "}" for name in policy_defaults(policy)) or "none"
        said = {name: name for name in POLICY_OPTIONS} | {ignored[0]: f"augment {ignored[0]}"}
        raise ConfigError(", ".join("{" + name + "}" for name in ignored) + f" would be ignored by policy {policy!r} "
                          f"(it takes {takes}): leave it out, or choose a policy that takes it", said)
