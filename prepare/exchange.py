"""The shared read's exchange: every node streams what it read and spilled (its share of the
source's parts) to the nodes that need data, in rounds of one chunk per node.

A node's stream is its part streams, in its share's order: records of (kind, number, length)
followed by `length` bytes, written by the workers that read the parts:

    SAMPLE   number = the sample's spill bucket, bytes = the pickled sample, as a spill file holds it
    OUTCOME  number = the part's index in the split, bytes = the pickled outcomes of its images

A receiving node appends each sample to its own bucket spill file (so what follows, dealing and
writing shards, is exactly a one-node prepare's), and keeps each part's outcomes in a small file
of its own, read back in source order. Memory: a chunk per node, and one sample per node that a
chunk has cut in two; nothing grows with the dataset.
"""

from __future__ import annotations

import logging
import pickle
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from prepare.node_group import DATA, DONE, NodeGroup
from shards.progress import Progress
from shards.resources import MB

log = logging.getLogger("prepare")

RECORD = struct.Struct("<BIQ")  # kind, number, length of what follows
SAMPLE, OUTCOME = 1, 2


def chunk_bytes(nodes: int) -> int:
    """Bytes a node sends in one round: 4 MiB, less with many nodes so that a round's receive
    buffers stay within 64 MiB (at least 256 KiB: rounds cost a collective each)."""
    return max(256 << 10, min(4 << 20, (64 << 20) // max(nodes - 1, 1)))


class PartStream:
    """A worker's output for one part, in the stream format above (a file in the work folder)."""

    def __init__(self, path: Path):
        self.path, self.file = path, open(path, "wb")

    def write(self, bucket: int, sample: dict) -> None:
        self._record(SAMPLE, bucket, pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL))

    def finish(self, part: int, outcomes: list) -> None:
        self._record(OUTCOME, part, pickle.dumps(outcomes, protocol=pickle.HIGHEST_PROTOCOL))

    def _record(self, kind: int, number: int, data: bytes) -> None:
        self.file.write(RECORD.pack(kind, number, len(data)))
        self.file.write(data)

    def __enter__(self) -> "PartStream":
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


class Demux:
    """Cuts one node's stream, arriving in chunks, back into records."""

    def __init__(self, node: str, on_sample: Callable[[int, memoryview], None],
                 on_outcome: Callable[[int, memoryview], None]):
        self.node, self.on_sample, self.on_outcome = node, on_sample, on_outcome
        self.pending = bytearray()

    def feed(self, data) -> None:
        self.pending += data
        pos = 0
        with memoryview(self.pending) as view:
            while len(view) - pos >= RECORD.size:
                kind, number, length = RECORD.unpack_from(view, pos)
                end = pos + RECORD.size + length
                if end > len(view):
                    break
                if kind not in (SAMPLE, OUTCOME):
                    raise RuntimeError(f"the stream from {self.node} is corrupt (record kind {kind})")
                with view[pos + RECORD.size:end] as body:  # released here: the buffer must shrink below
                    (self.on_sample if kind == SAMPLE else self.on_outcome)(number, body)
                pos = end
        del self.pending[:pos]  # once a chunk: deleting record by record would move megabytes each time

    def finish(self) -> None:
        if self.pending:
            raise RuntimeError(f"the stream from {self.node} ended inside a record ({len(self.pending)} bytes)")


@dataclass
class ExchangeStats:
    read_bytes: int = 0  # of the source, by this node
    received_bytes: int = 0  # from the other nodes
    sent_bytes: int = 0  # to the other nodes (each copy counted)
    # where the main process spent the exchange, in seconds: waiting for this node's workers to
    # finish its next part, in the rounds (waiting for the slowest node, moving bytes), and
    # spilling what came; the workers read and check the parts ahead meanwhile
    waiting_for_parts_s: float = 0.0
    in_rounds_s: float = 0.0
    spilling_s: float = 0.0

    def add(self, other: "ExchangeStats") -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


def stream_chunks(produced: Iterator[tuple[Path, int]], size: int, stats: ExchangeStats) -> Iterator[memoryview]:
    """The chunks of this node's part streams, in order; each file removed once read."""
    for path, read in produced:
        stats.read_bytes += read
        with open(path, "rb") as f:
            while True:
                buffer = bytearray(size)
                n = f.readinto(buffer)
                if not n:
                    break
                yield memoryview(buffer)[:n]
        path.unlink()


def exchange(group: NodeGroup, produced: Iterator[tuple[Path, int]], needs: list[bool], spill: Callable,
             outcomes_dir: Path | None, desc: str, progress_interval: float) -> ExchangeStats:
    """Send this node's part streams (`produced`: (file, source bytes read), in its share's order)
    to the nodes that need data; if this node needs data, spill every node's samples (its own
    included) through `spill(bucket, pickled)` and keep every part's outcomes in `outcomes_dir`.
    Returns when every node's stream has ended: all nodes leave in the same round."""
    stats = ExchangeStats()
    receive = needs[group.rank]
    chunks = stream_chunks(produced, chunk_bytes(group.size), stats)
    demuxes = [Demux(group.names[j], spill, lambda part, body: (outcomes_dir / f"{part:06d}").write_bytes(body))
               for j in range(group.size)] if receive else []
    send_to = [need and j != group.rank for j, need in enumerate(needs)]
    done = False
    with Progress(f"{desc}: exchange", None, "MB", scale=1 / MB, interval=progress_interval) as bar:
        while True:
            t0 = time.monotonic()
            chunk = None if done else next(chunks, None)
            done = chunk is None
            t1 = time.monotonic()
            said = group.round(DONE if done else DATA, chunk if chunk is not None else bytearray(), receive, send_to)
            t2 = time.monotonic()
            if chunk is not None:
                stats.sent_bytes += len(chunk) * sum(send_to)
            for j, (_, data) in enumerate(said):
                data = chunk if j == group.rank else data
                if receive and data is not None:
                    demuxes[j].feed(data)
                    bar.update(len(data))
                    stats.received_bytes += len(data) if j != group.rank else 0
            stats.waiting_for_parts_s += t1 - t0
            stats.in_rounds_s += t2 - t1
            stats.spilling_s += time.monotonic() - t2
            if all(status == DONE for status, _ in said):
                break
    for demux in demuxes:
        demux.finish()
    return stats


def read_outcomes(outcomes_dir: Path, parts: int) -> Iterator:
    """Every part's outcomes, in source order (each part's file, written by `exchange`)."""
    for part in range(parts):
        path = outcomes_dir / f"{part:06d}"
        if not path.exists():
            raise RuntimeError(f"no outcome of part {part} arrived: the exchange lost it")
        yield from pickle.loads(path.read_bytes())  # written by a node of this job: trusted
        path.unlink()
