"""Augmentation, in one place: what a training sample gets besides its crop and flip, as torchvision
defines it (its policies, RandomErasing, MixUp/CutMix). The weights' EMA of its recipes is the run's
(train/run/ema.py).

    choices.py `Augment`, the single value of every augmentation choice and its checks (no torch: the
               run's configuration holds one)
    draws.py   which policy ops, magnitudes and erasing box each sample draws (pure, in the loader's
               threads)
    ops.py     those draws applied to the whole uint8 batch on the device, equal to torchvision's ops
    mixing.py  MixUp/CutMix over a batch, reproducible per step

This module holds only the names of the choices, so that the command line's help offers them without
importing torch.
"""

POLICIES = ("trivialaugment", "randaugment", "autoaugment")  # TrivialAugmentWide, RandAugment, AutoAugment
POLICY_INTERPOLATIONS = ("nearest", "bilinear")  # of the policy's geometric ops
