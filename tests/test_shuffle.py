"""The global shuffle's pure parts: equal shards, every key once, uniform and reproducible."""

from collections import Counter
from itertools import chain

import pytest

from prepare.shuffle import bucket_of, deal_into_shards, equal_targets, shard_count


def buckets_for(keys, seed, count):
    buckets = [[] for _ in range(count)]
    for key in keys:
        buckets[bucket_of(key, seed, count)].append(key)
    return buckets


@pytest.mark.parametrize("n,count", [(0, 1), (1, 3), (7, 3), (100, 7), (1000, 13), (5, 9)])
def test_shards_are_equal_and_hold_every_key_once(n, count):
    keys = [f"k{i}" for i in range(n)]
    shards = deal_into_shards(buckets_for(keys, 0, count), seed=0)
    sizes = [len(s) for _, s in shards]
    assert sorted(chain.from_iterable(s for _, s in shards)) == sorted(keys)
    assert not sizes or max(sizes) - min(sizes) <= 1
    assert len(shards) == min(n, count)


def test_the_result_depends_on_the_seed_and_not_on_arrival_order():
    keys = [f"n0_{i}" for i in range(500)]
    one = deal_into_shards(buckets_for(keys, 3, 5), seed=3)
    assert deal_into_shards(buckets_for(reversed(keys), 3, 5), seed=3) == one
    assert deal_into_shards(buckets_for(keys, 4, 5), seed=4) != one


def test_each_key_lands_in_each_shard_and_position_equally_often():
    """Over many seeds a key is as likely to be in any shard: the partition is uniform."""
    keys = [f"k{i}" for i in range(12)]
    where, first = Counter(), Counter()
    seeds = 3000
    for seed in range(seeds):
        shards = deal_into_shards(buckets_for(keys, seed, 3), seed)
        for index, (_, shard) in enumerate(shards):
            if "k0" in shard:
                where[index] += 1
        first[shards[0][1][0]] += 1
    for index in range(3):  # expected 1000 each; 5 standard deviations is about 130
        assert abs(where[index] - seeds / 3) < 130, where
    assert len(first) == 12 and max(first.values()) < 2 * seeds / 12, first


def test_targets_and_shard_count():
    assert equal_targets([5, 1, 3]) == [3, 3, 3]
    assert equal_targets([5, 1, 2]) == [3, 2, 3]
    assert shard_count(1000, 300) == 3
    assert shard_count(10, 300) == 1
