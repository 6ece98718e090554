"""MixUp and CutMix over a training batch's tensors (the loader applies it to its batches): torchvision's own
(transforms.v2), one of the two per batch where both are asked (its reference's RandomChoice), drawn from
torch's CPU generator seeded per (seed, epoch, rank, step) and given back as it was, so that a resumed run
mixes exactly as the first did and the caller's random state is untouched. The labels become soft targets."""

from __future__ import annotations

import torch

from shards.plan import layout_runs, seeded_rng
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


def mixing_groups(layout: tuple[int, int], world_size: int, rank: int, batch_size: int, n: int
                  ) -> list[tuple[int, int, int]]:
    """(start, stop, owner) of each run of rank `rank`'s batch of `n` samples that MixUp/CutMix mix within,
    `owner` the rank of the run's layout (world size, per-rank batch) whose batch the run is part of
    (shards.plan.layout_runs). The layout's per-rank batches are the groups: a world of another size (an
    elastic resume) holds whole ones where it divides the run's world, mixed as the run's own ranks mixed
    them, and parts of them otherwise, each part mixed within itself. A batch short of samples (bad ones
    left out) mixes whole. Pure."""
    runs = layout_runs(*layout, world_size, rank)
    if n != batch_size:
        return [(0, n, runs[0][0])]
    groups, at = [], 0
    for owner, slots in runs:
        groups.append((at, at + len(slots), owner))
        at += len(slots)
    return groups


def mixed_in_groups(images: torch.Tensor, labels: torch.Tensor, mixer, seeds: list[tuple[int, int, int]],
                    channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, soft targets) of a batch whose runs [start, stop) are mixed each within itself, with its own
    seed: (start, stop, seed) in `seeds`. One run: `mixed` of the whole batch."""
    parts = [mixed(images[start:stop], labels[start:stop], mixer, seed, channels_last) for start, stop, seed in seeds]
    if len(parts) == 1:
        return parts[0]
    images = torch.cat([part[0] for part in parts])
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, torch.cat([part[1] for part in parts])


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
