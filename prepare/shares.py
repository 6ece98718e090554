"""Which node reads which parts of the source, when several nodes share the read: a pure function
of the parts' sizes and the node count, so every node computes the same answer on its own."""

from __future__ import annotations

import heapq
from typing import Sequence


def assign_shares(sizes: Sequence[int], nodes: int, loads: Sequence[int] | None = None) -> list[list[int]]:
    """Part indices per node: disjoint, together every part, balanced by bytes.

    Returns `nodes` lists of indices into `sizes`, each in ascending (source) order. Largest part
    first to the node with the fewest bytes so far (ties: the lower node, then the lower part),
    the classic greedy whose largest share is within 4/3 of the best possible. `loads`: bytes
    each node already reads (another split's share), so that the splits balance together.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, not {nodes}")
    if any(size < 0 for size in sizes):
        raise ValueError("part sizes must not be negative")
    if loads is not None and len(loads) != nodes:
        raise ValueError(f"{len(loads)} loads for {nodes} nodes")
    heap = [(load, node) for node, load in enumerate(loads or [0] * nodes)]
    heapq.heapify(heap)
    shares: list[list[int]] = [[] for _ in range(nodes)]
    for part in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, node = heapq.heappop(heap)
        shares[node].append(part)
        heapq.heappush(heap, (load + sizes[part], node))
    return [sorted(share) for share in shares]


def split_shares(sizes_by_split: dict[str, Sequence[int]], nodes: int) -> dict[str, list[list[int]]]:
    """`assign_shares` for each split in turn (in the dict's order), the loads carried over."""
    loads, out = [0] * nodes, {}
    for split, sizes in sizes_by_split.items():
        out[split] = assign_shares(sizes, nodes, loads)
        loads = [load + sum(sizes[i] for i in share) for load, share in zip(loads, out[split])]
    return out
