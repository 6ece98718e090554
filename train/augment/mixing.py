"""MixUp and CutMix over a training batch's tensors (the loader applies it to its batches): torchvision's own
(transforms.v2), one of the two per batch where both are asked (its reference's RandomChoice), drawn from
torch's CPU generator seeded per (seed, epoch, rank, step) and given back as it was, so that a resumed run
mixes exactly as the first did and the caller's random state is untouched. The labels become soft targets."""

from __future__ import annotations

import torch

from shards.plan import seeded_rng
from train.augment.choices import Augment


def mixer_for(augment: Augment, num_classes: int):
    """torchvision's MixUp and CutMix, one of them per batch where both are asked (its reference's
    RandomChoice); None where neither is."""
    from torchvision.transforms import v2

    chosen = [mix(alpha=alpha, num_classes=num_classes)
              for mix, alpha in ((v2.MixUp, augment.mixup), (v2.CutMix, augment.cutmix)) if alpha > 0]
    return v2.RandomChoice(chosen) if chosen else None


def mixing_seed(seed: int, epoch: int, rank: int, step: int) -> int:
    """The seed of the CPU generator that torchvision's MixUp/CutMix draw from for one step of one
    rank: a resumed run mixes exactly as the first did."""
    return seeded_rng(seed, "mixing", epoch, rank, step).getrandbits(63)


def mixed(images: torch.Tensor, labels: torch.Tensor, mixer, seed: int,
          channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, soft targets): the batch's images and labels through MixUp/CutMix with torch's CPU
    generator seeded for this step (and given back as it was): a resumed run mixes exactly as the
    first did."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        images, targets = mixer(images, labels)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)  # MixUp's roll makes it contiguous
    return images, targets
