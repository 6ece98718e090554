"""MixUp and CutMix (train/augment/mixing.py) through the public loader: soft targets, the same for any
thread count, reproducible per step (so a resume mixes as the first run did: tests/test_augment_loader.py),
validation untouched, and the caller's random state left as it was."""

from __future__ import annotations

import torch

from test_augment_loader import loader, records, same
from train import Augment
from train.augment.mixing import mixing_seed


def test_mixup_and_cutmix_give_soft_targets_the_same_for_any_thread_count(prepared):
    runs = []
    for workers in (1, 2):
        with loader(prepared, augment=Augment(mixup=0.2, cutmix=1.0), workers=workers) as data:
            data.set_epoch(0)
            runs.append(records(data.batches()))
            classes = data.num_classes
    assert same(*runs)
    targets = torch.cat([r[1] for r in runs[0]])
    assert targets.shape[1] == classes and torch.allclose(targets.sum(1), torch.ones(len(targets)))
    assert (targets.max(1).values < 1).float().mean() > 0.5  # mixed
    with loader(prepared, augment=Augment(mixup=0.2), workers=1) as data, data.with_split("val") as val:
        images, labels = next(iter(val))
        assert labels.dtype == torch.int64 and labels.ndim == 1  # validation is untouched


def test_mixing_leaves_the_callers_random_state_as_it_was(prepared):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with loader(prepared, augment=Augment(mixup=0.2, cutmix=1.0)) as data:
        list(data)
    assert torch.equal(torch.rand(3), expected)


def test_each_step_of_each_rank_mixes_from_a_seed_of_its_own():
    seeds = {mixing_seed(0, epoch, rank, step) for epoch in range(3) for rank in range(4) for step in range(50)}
    assert len(seeds) == 3 * 4 * 50 and mixing_seed(0, 1, 2, 3) == mixing_seed(0, 1, 2, 3)
    assert mixing_seed(1, 1, 2, 3) != mixing_seed(0, 1, 2, 3)
