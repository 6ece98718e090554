"""The read plan: which samples each rank and loader worker reads in an epoch, in which order.

Pure functions of (shard sizes, epoch, seed, world size, rank, workers, batch size); no I/O, so
they are tested exhaustively. The training stage only executes what they return.

Train, per epoch:
  1. The shards are permuted with (seed, epoch): every node holds every shard, so any rank may
     read any shard, and the permutation changes which samples fall where each epoch.
  2. The permuted shards, laid end to end, are cut into `world_size` equal contiguous chunks of
     `steps * batch_size` samples, where steps = N // (world_size * batch_size). What is left at
     the end (less than one global batch) is dropped: the tail of a different permutation each
     epoch, so a different remainder. No sample is read twice, none is padded in.
  3. Each rank's chunk is cut into contiguous per-worker runs of whole batches: worker w gets
     steps // W batches, plus one if w < steps % W. PyTorch's DataLoader takes batches from its
     workers round-robin, so batch j of the epoch comes from worker j % W.
  4. Each worker emits its run through a bounded shuffle buffer whose emission order is also
     planned here (`buffered_order`), so a resumed run can drop exactly the samples already
     consumed without decoding them.

Validation: the shards in order, cut into `world_size` contiguous chunks differing by at most one
sample, then into per-worker runs likewise; every sample is read exactly once.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """Samples [start, stop) of shard `shard`, in shard order."""
    shard: int
    start: int
    stop: int


@dataclass(frozen=True)
class WorkerPlan:
    pieces: tuple[Piece, ...]  # read in this order: `positions` 0..n-1 run through them
    order: tuple[int, ...]  # emission order, as positions; order[k] is among the first k + buffer read

    @property
    def num_samples(self) -> int:
        return len(self.order)


def seeded_rng(seed: int, *purpose: object) -> random.Random:
    """An independent, reproducible random stream per purpose (stable across Python versions).

    Shared by both stages: prepare's shuffle and train's read plan.
    """
    digest = hashlib.blake2b(repr((seed,) + purpose).encode(), digest_size=16).digest()
    return random.Random(int.from_bytes(digest, "big"))


def steps_per_epoch(total: int, world_size: int, batch_size: int) -> int:
    """Optimizer steps per epoch, the same on every rank: whole global batches only."""
    return total // (world_size * batch_size)


def worker_count(num_workers: int) -> int:
    """DataLoader workers; 0 means the main process, which reads like a single worker."""
    return max(1, num_workers)


def batches_of_worker(steps: int, num_workers: int, worker: int) -> int:
    """Batches worker `worker` yields in an epoch of `steps` batches (j-th batch from worker j % W)."""
    w = worker_count(num_workers)
    return steps // w + (worker < steps % w)


def consumed_batches(step: int, num_workers: int, worker: int) -> int:
    """Batches worker `worker` had yielded when the rank had taken `step` batches (for resume)."""
    w = worker_count(num_workers)
    return max(0, -(-(step - worker) // w))


def shard_permutation(num_shards: int, seed: int, epoch: int) -> list[int]:
    order = list(range(num_shards))
    seeded_rng(seed, epoch).shuffle(order)
    return order


def pieces_of_range(shard_sizes: list[int], shard_order: list[int], start: int, stop: int) -> tuple[Piece, ...]:
    """Samples [start, stop) of the shards laid end to end in `shard_order`, as per-shard pieces."""
    pieces, offset = [], 0
    for shard in shard_order:
        size = shard_sizes[shard]
        lo, hi = max(start, offset), min(stop, offset + size)
        if lo < hi:
            pieces.append(Piece(shard, lo - offset, hi - offset))
        offset += size
        if offset >= stop:
            break
    return tuple(pieces)


def buffered_order(n: int, buffer: int, rng: random.Random) -> tuple[int, ...]:
    """The order a shuffle buffer of `buffer` samples emits positions 0..n-1 in.

    Fill the buffer; once full, each newly read sample makes one random sample leave; at the end
    the rest leave in random order. So at most `buffer` samples are ever held, and emission k
    needs only the first min(n, k + buffer) samples read.
    """
    held, out = [], []
    for position in range(n):
        held.append(position)
        if len(held) >= buffer:
            j = rng.randrange(len(held))
            held[j], held[-1] = held[-1], held[j]
            out.append(held.pop())
    rng.shuffle(held)
    out.extend(held)
    return tuple(out)


def train_plan(shard_sizes: list[int], *, epoch: int, seed: int, world_size: int, rank: int, num_workers: int,
               worker: int, batch_size: int, shuffle_buffer: int) -> WorkerPlan:
    """What worker `worker` of rank `rank` reads in training epoch `epoch` (see the module doc).

    Returns a WorkerPlan of batches_of_worker(steps, ...) * batch_size samples.
    """
    steps = steps_per_epoch(sum(shard_sizes), world_size, batch_size)
    per_rank = steps * batch_size
    before = sum(batches_of_worker(steps, num_workers, v) for v in range(worker)) * batch_size
    count = batches_of_worker(steps, num_workers, worker) * batch_size
    start = rank * per_rank + before
    shard_order = shard_permutation(len(shard_sizes), seed, epoch)
    pieces = pieces_of_range(shard_sizes, shard_order, start, start + count)
    order = buffered_order(count, shuffle_buffer, seeded_rng(seed, epoch, rank, worker))
    return WorkerPlan(pieces, order)


def even_split(total: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of part `index` when `total` items are cut into `parts` runs differing by at most one."""
    base, extra = divmod(total, parts)
    start = index * base + min(index, extra)
    return start, start + base + (index < extra)


def val_plan(shard_sizes: list[int], *, world_size: int, rank: int, num_workers: int, worker: int) -> WorkerPlan:
    """What worker `worker` of rank `rank` evaluates: every sample exactly once across all of them."""
    rank_start, rank_stop = even_split(sum(shard_sizes), world_size, rank)
    lo, hi = even_split(rank_stop - rank_start, worker_count(num_workers), worker)
    pieces = pieces_of_range(shard_sizes, list(range(len(shard_sizes))), rank_start + lo, rank_start + hi)
    return WorkerPlan(pieces, tuple(range(hi - lo)))
