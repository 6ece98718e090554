"""The global shuffle, as pure functions: which spill bucket a sample goes to while the source
streams past, and how buckets become equal, internally shuffled shards.

Why buckets: ImageNet's train archive is sorted by class and too big for memory, so prepare
streams it once, scattering each sample to one of S spill files by a seeded hash of its key. The
bucket sizes then differ by a few percent; `deal_into_shards` moves a uniformly chosen surplus
from over-full to under-full buckets and shuffles each. Every random choice is uniform and blind
to the keys, so the resulting shards are a uniformly random partition of the split into sizes
that differ by at most one, which is what shuffling all keys and dealing them out would give,
with one sequential read of the source and disk use of one dataset, not two.

Everything depends only on (keys, seed), never on the order samples arrived in, so the same
source and seed give the same shards whatever the number of workers.
"""

from __future__ import annotations

import hashlib

from shards.plan import seeded_rng


def bucket_of(key: str, seed: int, buckets: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % buckets


def equal_targets(sizes: list[int]) -> list[int]:
    """Target size per bucket: sum(sizes) split into counts that differ by at most one.

    The larger buckets get the larger targets, so that as few samples as possible move.
    """
    total, count = sum(sizes), len(sizes)
    by_size = sorted(range(count), key=lambda b: (-sizes[b], b))
    targets = [total // count] * count
    for rank in range(total % count):
        targets[by_size[rank]] += 1
    return targets


def deal_into_shards(buckets: list[list[str]], seed: int) -> list[tuple[int, list[str]]]:
    """Turn hash buckets into equal, shuffled shards.

    Returns one (bucket, keys in shard order) per non-empty shard, in shard order: shard j is
    written from bucket `b_j`, keeping part of it and receiving others' surplus. Sizes differ by
    at most one and every key appears in exactly one shard.
    """
    sizes = [len(keys) for keys in buckets]
    targets = equal_targets(sizes)
    kept, surplus = [], []
    for b, keys in enumerate(buckets):
        ordered = sorted(keys)
        extra = max(0, sizes[b] - targets[b])
        leaving = set(seeded_rng(seed, "surplus", b).sample(ordered, extra))
        kept.append([k for k in ordered if k not in leaving])
        surplus.extend(leaving)
    surplus.sort()
    seeded_rng(seed, "surplus-pool").shuffle(surplus)
    shards = []
    for b in range(len(buckets)):
        received = [surplus.pop() for _ in range(targets[b] - len(kept[b]))]
        keys = sorted(kept[b] + received)
        seeded_rng(seed, "order", b).shuffle(keys)
        if keys:
            shards.append((b, keys))
    assert not surplus
    return shards


def shard_count(split_bytes: int, shard_bytes: float) -> int:
    """How many shards of about `shard_bytes` hold `split_bytes` (at least one)."""
    return max(1, round(split_bytes / shard_bytes))
