"""The shared read's exchange: every node streams what it read and spilled (its share of the
source's parts) to the nodes that need data, in rounds of one chunk per node.

A node's stream is its part streams, in its share's order: records of (kind, number, length)
followed by `length` bytes, written by the workers that read the parts:

    SAMPLE   number = the sample's spill bucket, bytes = the pickled sample, as a spill file holds it
    OUTCOME  number = the part's index in its pass, bytes = the pickled outcomes of its images
    SPLIT    number = the index, among its pass's splits, of the split the samples after it belong to
             (a pass of several splits: winter21's stream before its index, val and train from one
             inflation); a stream starts in its pass's first split; no bytes

A part's stream is written in segments of about SEGMENT_BYTES, each renamed into place when whole,
and sent (then removed) while its worker reads on: a worker waits while PENDING_SEGMENTS of its
segments are unsent, so a part of any size (winter21's 1.1 TB stream is one) holds at most that
many segments of --dest, never a second copy of what it yields.

A receiving node appends each sample to its own bucket spill file of the sample's split (so what
follows, dealing and writing shards, is exactly a one-node prepare's), and keeps each part's outcomes
in a small file of its own, read back in source order. Memory: a chunk per node, and one sample per
node that a chunk has cut in two; nothing grows with the dataset.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from prepare.node_group import DATA, DONE, NodeGroup
from prepare.workers import worker_died_is_named
from shards.progress import Progress
from shards.resources import MB

log = logging.getLogger("prepare")

RECORD = struct.Struct("<BIQ")  # kind, number, length of what follows
SAMPLE, OUTCOME, SPLIT = 1, 2, 3
SEGMENT_BYTES = 64 << 20  # a part stream's file: sent and removed as a whole
PENDING_SEGMENTS = 4  # a part's segments written and not yet sent, at most: a worker waits beyond that
# a part's stream on disk at most: the unsent segments, the one being written, and a margin (a segment's last
# record may pass its size)
STREAMED_AHEAD_BYTES = (PENDING_SEGMENTS + 2) * SEGMENT_BYTES
POLL_S = 0.01  # how often the sender looks for a part's next segment, and a waiting worker for room


def chunk_bytes(nodes: int) -> int:
    """Bytes a node sends in one round: 4 MiB, less with many nodes so that a round's receive
    buffers stay within 64 MiB (at least 256 KiB: rounds cost a collective each)."""
    return max(256 << 10, min(4 << 20, (64 << 20) // max(nodes - 1, 1)))


def segment_path(stream: Path, number: int) -> Path:
    """The file of a part stream's `number`th segment (its worker renames it into place when whole)."""
    return stream.with_name(f"{stream.name}.{number:06d}")


class PartStream:
    """A worker's output for one part, in the stream format above: segment files beside `path`, each
    renamed into place when whole. `pending`: the segments written and unsent after which the worker
    waits for the sender to remove one (None: never waits, where the part is streamed in the process
    that sends it, before it sends)."""

    def __init__(self, path: Path, pending: int | None = PENDING_SEGMENTS, segment_bytes: int = SEGMENT_BYTES):
        self.path, self.pending, self.segment_bytes = path, pending, segment_bytes
        self.number, self.split, self.file = 0, 0, None
        self.open_segment()

    def for_split(self, split: int) -> "SplitWriter":
        """A writer of the samples of the pass's `split`th split (as a spill file takes them)."""
        return SplitWriter(self, split)

    def write(self, bucket: int, sample: dict, split: int = 0) -> None:
        if split != self.split:
            self._record(SPLIT, split, b"")
            self.split = split
        self._record(SAMPLE, bucket, pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL))

    def finish(self, part: int, outcomes: list) -> None:
        self._record(OUTCOME, part, pickle.dumps(outcomes, protocol=pickle.HIGHEST_PROTOCOL))

    def _record(self, kind: int, number: int, data: bytes) -> None:
        self.file.write(RECORD.pack(kind, number, len(data)))
        self.file.write(data)
        if self.file.tell() >= self.segment_bytes:
            self.close_segment()
            self.open_segment()

    def open_segment(self) -> None:
        if self.pending is not None and self.number >= self.pending:
            self.wait_for_room(segment_path(self.path, self.number - self.pending))
        self.file = open(self.partial(), "wb")

    def close_segment(self) -> None:
        self.file.close()
        os.rename(self.partial(), segment_path(self.path, self.number))
        self.number += 1

    def wait_for_room(self, unsent: Path) -> None:
        """Until the sender removed `unsent`. Its folder gone means the run failed and cleaned up: stop."""
        while unsent.exists():
            if not self.path.parent.is_dir():
                raise FileNotFoundError(f"{self.path.parent} went while this part was streamed (the run failed)")
            time.sleep(POLL_S)

    def partial(self) -> Path:
        return self.path.with_name(f"{segment_path(self.path, self.number).name}.partial")

    def __enter__(self) -> "PartStream":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close_segment()
        else:
            self.file.close()


@dataclass(frozen=True)
class SplitWriter:
    """A PartStream's writer of one split's samples (the scatter writes a split's samples through it)."""
    stream: PartStream
    split: int

    def write(self, bucket: int, sample: dict) -> None:
        self.stream.write(bucket, sample, self.split)


def part_segments(stream: Path, written: Future) -> Iterator[Path]:
    """A part stream's segments, in order, as its worker renames each into place; they end once the
    worker's task (`written`) has finished and no segment is left (its failure is raised here)."""
    number = 0
    while True:
        segment = segment_path(stream, number)
        if segment.exists():
            yield segment
            number += 1
        elif written.done():
            with worker_died_is_named():
                written.result()  # the worker's failure, if it failed
            if not segment.exists():  # renamed between the look and the task's end: one more
                return
        else:
            time.sleep(POLL_S)


class Demux:
    """Cuts one node's stream, arriving in chunks, back into records."""

    def __init__(self, node: str, on_sample: Callable[[int, memoryview, int], None],
                 on_outcome: Callable[[int, memoryview], None]):
        self.node, self.on_sample, self.on_outcome = node, on_sample, on_outcome
        self.pending, self.split = bytearray(), 0

    def feed(self, data) -> None:
        self.pending += data
        pos = 0
        with memoryview(self.pending) as view:
            while len(view) - pos >= RECORD.size:
                kind, number, length = RECORD.unpack_from(view, pos)
                end = pos + RECORD.size + length
                if end > len(view):
                    break
                if kind not in (SAMPLE, OUTCOME, SPLIT):
                    raise RuntimeError(f"the stream from {self.node} is corrupt (record kind {kind})")
                if kind == SPLIT:
                    self.split = number
                with view[pos + RECORD.size:end] as body:  # released here: the buffer must shrink below
                    if kind == SAMPLE:
                        self.on_sample(number, body, self.split)
                    elif kind == OUTCOME:
                        self.on_outcome(number, body)
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


def stream_chunks(produced: Iterator[tuple[Path, int, Future]], size: int, stats: ExchangeStats) -> Iterator[memoryview]:
    """The chunks of this node's part streams, in order, each segment as it comes and removed once read."""
    for path, read, written in produced:
        stats.read_bytes += read
        for segment in part_segments(path, written):
            with open(segment, "rb") as f:
                while True:
                    buffer = bytearray(size)
                    n = f.readinto(buffer)
                    if not n:
                        break
                    yield memoryview(buffer)[:n]
            segment.unlink()


def exchange(group: NodeGroup, produced: Iterator[tuple[Path, int, Future]], needs: list[bool], spill: Callable,
             outcomes_dir: Path | None, desc: str, progress_interval: float) -> ExchangeStats:
    """Send this node's part streams (`produced`: (stream, source bytes read, its worker's task), in its
    share's order) to the nodes that need data; if this node needs data, spill every node's samples
    (its own included) through `spill(bucket, pickled, split)` (the split's index in the pass) and keep
    every part's outcomes in `outcomes_dir`.
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
