"""The read plan, exhaustively: equal steps, each sample at most once, exact validation, resume."""

import pytest

from shards.plan import buffered_order, seeded_rng, steps_per_epoch, train_plan, val_plan

SHARD_LAYOUTS = [[7, 6, 6], [3], [10] * 7, [5, 4, 4, 4, 4], [1, 1]]


def samples_of(plan):
    """(shard, index) of every sample a rank reads, in reading order."""
    return [(p.shard, i) for p in plan.pieces for i in range(p.start, p.stop)]


def epoch_reads(sizes, epoch, seed, world, batch, buffer=4):
    """{rank: [(shard, index) in emission order]} for one epoch."""
    reads = {}
    for rank in range(world):
        plan = train_plan(sizes, epoch=epoch, seed=seed, world_size=world, rank=rank, batch_size=batch,
                          shuffle_buffer=buffer)
        read = samples_of(plan)
        assert len(read) == plan.num_samples
        reads[rank] = [read[p] for p in plan.order]
    return reads


@pytest.mark.parametrize("sizes", SHARD_LAYOUTS)
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("batch", [1, 2, 3])
def test_every_rank_gets_the_same_whole_batches_and_no_sample_twice(sizes, world, batch):
    total = sum(sizes)
    steps = steps_per_epoch(total, world, batch)
    reads = epoch_reads(sizes, epoch=0, seed=0, world=world, batch=batch)
    assert [len(read) for read in reads.values()] == [steps * batch] * world  # the same step count on every rank
    everything = [s for read in reads.values() for s in read]
    assert len(everything) == len(set(everything)) == steps * world * batch
    assert total - len(everything) < world * batch  # less than one global batch dropped


def test_orders_differ_across_epochs_and_repeat_for_a_seed():
    args = dict(sizes=[10] * 7, world=2, batch=3)
    e0 = epoch_reads(epoch=0, seed=1, **args)
    assert epoch_reads(epoch=0, seed=1, **args) == e0
    assert epoch_reads(epoch=1, seed=1, **args) != e0
    assert epoch_reads(epoch=0, seed=2, **args) != e0


def test_the_dropped_remainder_changes_between_epochs():
    sizes = [7, 6, 6, 4]  # 23 samples, global batch 2 x 4: 16 read, 7 dropped
    everything = {(s, i) for s, n in enumerate(sizes) for i in range(n)}
    dropped = []
    for epoch in range(6):
        reads = epoch_reads(sizes, epoch, seed=0, world=2, batch=4)
        dropped.append(frozenset(everything - {s for r in reads.values() for s in r}))
    assert all(len(d) == 7 for d in dropped)
    assert len(set(dropped)) > 1


def test_plans_are_those_mid_epoch_checkpoints_were_made_with():
    """The plan the code before the DataLoader-worker split left shards/ made (commit 827d946,
    num_workers=1, worker=0) for these arguments: a checkpoint it took mid-epoch resumes on the
    same order."""
    plan = train_plan([10] * 7, epoch=3, seed=5, world_size=2, rank=1, batch_size=4, shuffle_buffer=6)
    assert plan.order[:12] == (3, 2, 0, 7, 5, 1, 4, 12, 10, 13, 6, 15)
    assert [(p.shard, p.start, p.stop) for p in plan.pieces] == [(2, 2, 10), (4, 0, 10), (6, 0, 10), (0, 0, 4)]


@pytest.mark.parametrize("sizes", SHARD_LAYOUTS + [[2, 9, 1]])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 40])
def test_validation_reads_every_sample_exactly_once(sizes, world):
    seen = []
    for rank in range(world):
        seen += samples_of(val_plan(sizes, world_size=world, rank=rank))
    assert sorted(seen) == sorted((s, i) for s, n in enumerate(sizes) for i in range(n))


@pytest.mark.parametrize("n,buffer", [(0, 5), (1, 5), (10, 1), (10, 3), (50, 50), (50, 200)])
def test_buffered_order_is_a_bounded_permutation(n, buffer):
    order = buffered_order(n, buffer, seeded_rng(0))
    assert sorted(order) == list(range(n))
    assert all(position < k + max(buffer, 1) for k, position in enumerate(order))
    if buffer <= 1:
        assert order == tuple(range(n))
