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


# ---------------------------------------------------------------- mixing on another world size (#52)

def test_the_groups_mixed_within_are_the_run_layouts_per_rank_batches():
    from train.augment.mixing import mixing_groups

    assert mixing_groups((2, 4), 2, 1, 4, 4) == [(0, 4, 1)]  # the run's own world: the whole batch, its own rank's
    assert mixing_groups((2, 4), 1, 0, 8, 8) == [(0, 4, 0), (4, 8, 1)]  # a world that divides: whole groups
    assert [mixing_groups((2, 4), 4, rank, 2, 2) for rank in range(4)] == \
        [[(0, 2, 0)], [(0, 2, 0)], [(0, 2, 1)], [(0, 2, 1)]]  # a multiple: parts of one
    assert mixing_groups((4, 3), 3, 1, 4, 4) == [(0, 2, 3), (2, 4, 1)]  # neither: parts, cut where they meet
    assert mixing_groups((2, 4), 1, 0, 8, 7) == [(0, 7, 0)]  # a batch short of a bad sample mixes whole
    for layout, world in (((2, 4), 1), ((2, 4), 4), ((4, 3), 3), ((8, 2), 2), ((3, 4), 6)):
        batch = layout[0] * layout[1] // world
        groups = [mixing_groups(layout, world, rank, batch, batch) for rank in range(world)]
        assert all(g[0][0] == 0 and g[-1][1] == batch and all(a[1] == b[0] for a, b in zip(g, g[1:]))
                   for g in groups)  # each batch covered, in order, without a gap
        assert sum(stop - start for g in groups for start, stop, _ in g) == layout[0] * layout[1]


def test_a_two_rank_runs_mixing_is_the_same_on_one_rank_and_split_on_four(prepared):
    """A smaller world holds the run's per-rank batches whole: its MixUp/CutMix pixels and targets equal the
    2-rank run's. A larger world holds halves of them: the same samples, each half mixed within itself."""
    from test_library import global_batches

    mixing = Augment(mixup=0.2, cutmix=1.0)
    with loader(prepared, augment=mixing, batch_size=4, rank=0, world_size=2) as data:
        data.set_epoch(1)
        state = data.state_dict()  # the 2-rank run's at the start of epoch 1
    runs = {}
    for world in (2, 1, 4):
        ranks = []
        for rank in range(world):
            with loader(prepared, augment=mixing, batch_size=8 // world, rank=rank, world_size=world) as data:
                data.load_state_dict(state)
                ranks.append(records(data.batches()))
        runs[world] = global_batches(ranks)
    assert same(runs[1], runs[2]) and len(runs[2]) > 1
    assert [sorted(b[2]) for b in runs[4]] == [sorted(b[2]) for b in runs[2]]  # the same samples at every step
    assert not same(runs[4], runs[2])  # mixed within halves: other partners
