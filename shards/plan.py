"""The read plan: which samples each rank reads in an epoch, in which order.

Pure functions of (shard sizes, epoch, seed, world size, rank, batch size, shuffle buffer); no
I/O, so they are tested exhaustively. The loader executes what they return as one stream per
rank, whatever its thread count; a resume at step k starts at sample k x batch size of that stream.

Train, per epoch:
  1. The shards are permuted with (seed, epoch): every node holds every shard, so any rank may
     read any shard, and the permutation changes which samples fall where each epoch.
  2. The permuted shards, laid end to end, are cut into `world_size` equal contiguous chunks of
     `steps * batch_size` samples, where steps = N // (world_size * batch_size). What is left at
     the end (less than one global batch) is dropped: the stored tail of the shard the epoch's
     permutation puts last, so a different remainder each epoch where there are several shards
     (with one, the same). No sample is read twice, none is padded in.
  3. Each rank emits its chunk in the order of a bounded shuffle buffer, planned here
     (`buffered_order`): sample k of the stream is among the first k + buffer of the chunk, so
     reads stay near-sequential, nothing is held, and a resumed run skips exactly the samples
     already consumed without decoding them.

Train with repeated augmentation (repeats r > 1, torchvision's RASampler, DeiT's): the epoch keeps
its length (the same steps), and each of its ceil(steps x batch x world / r) distinct samples is
read r times, each time with its own augmentation. As in RASampler, the distinct samples' order is
one for all ranks, repeated r times in place, and rank k takes every world-th of that list from k:
the r readings of a sample fall on r different ranks where the world has that many (on one rank r /
world times where it has fewer), at about the same step. The distinct samples are the first of the
epoch's permuted shards, emitted through one shuffle buffer, so each rank's reads still run forward
through them.

Validation: the shards in order, cut into `world_size` contiguous runs differing by at most one
sample; every sample is read exactly once.

Elastic (`elastic_train_plan`, #52): a run's epoch laid out for the world it started on (its canonical
world and per-rank batch) read on another world size: at each global step the canonical global batch,
its canonical ranks' batches dealt to the ranks there are now (`layout_runs`), each canonical rank's
stream read forward. A world size that does not divide the global batch is refused (`per_rank_batch`).
"""

from __future__ import annotations

import functools
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
class ReadPlan:
    pieces: tuple[Piece, ...]  # read in this order: `positions` 0..n-1 run through them
    order: tuple[int, ...]  # emission order, as positions; order[k] is among the first k + buffer read
    repeats: tuple[int, ...] = ()  # with repeated augmentation: which reading of its sample each emission is

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


def run_plan(shard_sizes: list[int], shard_order: list[int], start: int, count: int, buffer: int,
             rng: random.Random) -> ReadPlan:
    """Samples [start, start + count) of the shards laid end to end in `shard_order`, emitted
    through a shuffle buffer of `buffer` samples drawn from `rng`."""
    return ReadPlan(pieces_of_range(shard_sizes, shard_order, start, start + count), buffered_order(count, buffer, rng))


def train_plan(shard_sizes: list[int], *, epoch: int, seed: int, world_size: int, rank: int, batch_size: int,
               shuffle_buffer: int) -> ReadPlan:
    """What rank `rank` reads in training epoch `epoch` (see the module doc).

    Returns a ReadPlan of steps_per_epoch(...) * batch_size samples.
    """
    per_rank = steps_per_epoch(sum(shard_sizes), world_size, batch_size) * batch_size
    order = shard_permutation(len(shard_sizes), seed, epoch)
    # The 0 names the stream as the plan did when ranks were split among DataLoader workers (this
    # was worker 0 of 1): orders, and mid-epoch checkpoints, made before stay valid.
    rng = seeded_rng(seed, epoch, rank, 0)
    return run_plan(shard_sizes, order, rank * per_rank, per_rank, shuffle_buffer, rng)


def repeated_train_plan(shard_sizes: list[int], *, epoch: int, seed: int, world_size: int, rank: int,
                        batch_size: int, shuffle_buffer: int, repeats: int) -> ReadPlan:
    """What rank `rank` reads in training epoch `epoch` with `repeats` readings of each sample (see
    the module doc). Returns a ReadPlan of steps_per_epoch(...) * batch_size emissions, with the
    reading index (0 to repeats - 1) of each; repeats=1 is train_plan's plan."""
    return repeated_train_plans(shard_sizes, epoch=epoch, seed=seed, world_size=world_size, ranks=[rank],
                                batch_size=batch_size, shuffle_buffer=shuffle_buffer, repeats=repeats)[0]


def repeated_train_plans(shard_sizes: list[int], *, epoch: int, seed: int, world_size: int, ranks: list[int],
                         batch_size: int, shuffle_buffer: int, repeats: int) -> list[ReadPlan]:
    """repeated_train_plan's plan of each of `ranks`. With repeats, the distinct samples' order is one for all
    ranks, so it is drawn once here however many ranks' plans are asked for: a Python loop over every distinct
    sample of the epoch (4.7 M at ImageNet-21k's 14 M and 3 readings: seconds), which an elastic resume's rank
    holding k of the run's ranks (elastic_train_plan) drew k times, every epoch."""
    if repeats == 1:
        return [train_plan(shard_sizes, epoch=epoch, seed=seed, world_size=world_size, rank=rank,
                           batch_size=batch_size, shuffle_buffer=shuffle_buffer) for rank in ranks]
    emitted = steps_per_epoch(sum(shard_sizes), world_size, batch_size) * batch_size  # by each rank
    distinct = -(-emitted * world_size // repeats)
    order = shard_permutation(len(shard_sizes), seed, epoch)
    pieces = pieces_of_range(shard_sizes, order, 0, distinct)
    shared = buffered_order(distinct, shuffle_buffer, seeded_rng(seed, epoch, "repeated"))  # one for all ranks
    plans = []
    for rank in ranks:
        places = range(rank, emitted * world_size, world_size)  # this rank's places in the repeated list
        plans.append(ReadPlan(pieces, tuple(shared[i // repeats] for i in places), tuple(i % repeats for i in places)))
    return plans


def per_rank_batch(global_batch: int, world_size: int) -> int:
    """Each rank's share of a run's global batch on `world_size` ranks (a resume on another world size
    keeps the global batch, and with it the learning rate's schedule); a ValueError naming the world
    sizes that divide it where this one does not."""
    if world_size < 1 or global_batch % world_size:
        fitting = ", ".join(str(n) for n in range(1, global_batch + 1) if global_batch % n == 0)
        raise ValueError(f"{world_size} ranks cannot share the run's global batch of {global_batch} equally: "
                         f"resume it on {fitting} ranks")
    return global_batch // world_size


def elastic_train_plan(shard_sizes: list[int], *, epoch: int, seed: int, canonical_world: int, canonical_batch: int,
                       world_size: int, rank: int, shuffle_buffer: int, repeats: int = 1) -> ReadPlan:
    """What rank `rank` of `world_size` reads in epoch `epoch` of a run laid out for `canonical_world`
    ranks of `canonical_batch` samples (the world it started on): at every global step, the canonical
    layout's global batch, its canonical ranks' batches dealt to this world as `layout_runs` says. So any
    world size reads the same samples at the same step, each reading once, and a sample's augmentation,
    keyed by (seed, epoch, key), is the same. Each canonical rank's stream is read forward as its own plan
    reads it: a rank of a smaller world reads several of them, interleaved, a rank of a larger one a part
    of one. On the canonical world, repeated_train_plan's plan."""
    canonical = functools.partial(repeated_train_plans, shard_sizes, epoch=epoch, seed=seed, world_size=canonical_world,
                                  batch_size=canonical_batch, shuffle_buffer=shuffle_buffer, repeats=repeats)
    if world_size == canonical_world:
        return canonical(ranks=[rank])[0]
    runs = layout_runs(canonical_world, canonical_batch, world_size, rank)
    held = sorted({owner for owner, _ in runs})
    streams = canonical(ranks=held)
    pieces, offsets = joined_pieces(streams)
    stream_of = {owner: (stream, offset) for owner, stream, offset in zip(held, streams, offsets)}
    order, readings = [], []
    for step in range(streams[0].num_samples // canonical_batch):
        for owner, slots in runs:
            stream, offset = stream_of[owner]
            for k in (step * canonical_batch + j for j in slots):
                order.append(offset + stream.order[k])
                readings.append(stream.repeats[k] if stream.repeats else 0)
    return ReadPlan(pieces, tuple(order), tuple(readings) if repeats > 1 else ())


def layout_runs(canonical_world: int, canonical_batch: int, world_size: int, rank: int) -> list[tuple[int, range]]:
    """(canonical rank, slots of its batch) of each part of the canonical ranks' batches that rank `rank` of
    `world_size` holds at every step, in its batch's order. Repeated augmentation puts the readings of a
    sample on consecutive canonical ranks, or on consecutive slots of one where the canonical world is
    smaller than the readings, so: a world that is a multiple of the canonical one holds every m-th slot of
    one canonical batch (m = world_size / canonical_world; m = 1: the canonical world, each rank its own),
    and any other deals the canonical batches in the order of their rank modulo the world size (0, W', 2W',
    ..., then 1, 1 + W', ...), cut into equal runs: a world that divides the canonical one holds whole
    canonical batches of ranks W' apart. Either way the readings of a sample stay on as many ranks as the
    canonical run put them on, or as there are. ValueError where `world_size` does not divide the global
    batch (`per_rank_batch`). Pure."""
    batch = per_rank_batch(canonical_world * canonical_batch, world_size)
    if world_size % canonical_world == 0:
        m = world_size // canonical_world
        return [(rank // m, range(rank % m, canonical_batch, m))]
    dealt = sorted(range(canonical_world), key=lambda r: (r % world_size, r // world_size))
    runs, first = [], rank * batch
    for place in range(first // canonical_batch, (first + batch - 1) // canonical_batch + 1):
        start = max(first, place * canonical_batch) - place * canonical_batch
        stop = min(first + batch, (place + 1) * canonical_batch) - place * canonical_batch
        runs.append((dealt[place], range(start, stop)))
    return runs


def joined_pieces(plans: list[ReadPlan]) -> tuple[tuple[Piece, ...], list[int]]:
    """The pieces several canonical ranks' plans read, and where each plan's positions start among them:
    one copy where they read the same (repeated augmentation: every rank reads the distinct samples),
    else one after another (their chunks of the epoch, disjoint)."""
    if all(plan.pieces == plans[0].pieces for plan in plans):
        return plans[0].pieces, [0] * len(plans)
    offsets, total = [], 0
    for plan in plans:
        offsets.append(total)
        total += sum(piece.stop - piece.start for piece in plan.pieces)
    return tuple(piece for plan in plans for piece in plan.pieces), offsets


def even_split(total: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of part `index` when `total` items are cut into `parts` runs differing by at most one."""
    base, extra = divmod(total, parts)
    start = index * base + min(index, extra)
    return start, start + base + (index < extra)


def val_plan(shard_sizes: list[int], *, world_size: int, rank: int) -> ReadPlan:
    """What rank `rank` evaluates: every sample exactly once across the ranks, in shard order."""
    start, stop = even_split(sum(shard_sizes), world_size, rank)
    pieces = pieces_of_range(shard_sizes, list(range(len(shard_sizes))), start, stop)
    return ReadPlan(pieces, tuple(range(stop - start)))
