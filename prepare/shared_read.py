"""prepare on several nodes, the source read once per job (docs/clusters.md, "Several nodes").

The first task of each node (SLURM_LOCALID 0) joins the nodes' group; further tasks of a node wait
for it and verify, as with the lock alone. The group's steps, each a gather of small facts:

  1. who is here, and whether each node could set up (a refused --dest, a missing source);
  2. under the node's lock: what each node has (the dataset, or a need for it; a node that builds
     holds its readers lock alone from here and checks its room for the build, refused where a loader
     reads its dataset or the build cannot fit, before any node removes its own), whether it has room
     to read ahead, and a digest of what it would build (source, options, parts, labels), which must
     agree;
  3. every node that can reads its share of the parts (`SharedRead`) and streams it to the nodes
     that need data, which build from it what a one-node prepare builds;
  4. a last round, so that each node learns how the others ended.

A node whose dataset lacks only evaluation sets the command line adds needs no data: it reads and
sends its share as a node that holds the dataset does, then adds them from its own read of them
(about 1.2 GB a variant), after the last round, as a one-node prepare adds them.

A failure on one node after step 1 is announced in the round the others wait in (`announce`);
every node prints it, naming the node.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.builder import (
    add_eval_sets, build_and_report, check_room_to_build, dataset_estimate, identified, no_loader_reading,
    open_prepare_source, pass_parts, pass_scratch, passes_of, resize_ratio,
)
from prepare.config import PrepareConfig, PrepareError
from prepare.destination import Existing, make_dest, verified_existing, with_class_maps
from prepare.sources import Detected
from prepare.exchange import PENDING_SEGMENTS, STREAMED_AHEAD_BYTES, ExchangeStats, PartStream, exchange, read_outcomes
from shards.lock import exclusive_lock, held_by_a_live_prepare
from prepare.node_group import DONE, NodeGroup, NodeGroupEnv, PeerFailed
from prepare.scatter import PartJob, Scattered, bad_image_stops_the_run, part_jobs, scatter_items
from prepare.shares import split_shares
from prepare.sources.base import Part, Source
from prepare.space import MARGIN, free_bytes, is_out_of_space
from prepare.spills import BucketSpills, most_spills_open
from prepare.workers import WorkerPool, worker_pool
from shards.errors import UserError
from shards.paths import STEP_FILE, WORK_DIR_NAME, node_marker
from shards.manifest import Manifest
from shards.resources import log_pil_build

log = logging.getLogger("prepare")

USER_ERRORS = (UserError, OSError)  # a node's failure the others are told of, in one line


def prepare_in_group(config: PrepareConfig) -> Manifest:
    """Prepare the dataset at config.dest with the other nodes of the srun step (config.group), the
    source read once over them; or, in a further task of this node, wait for its first task."""
    log_pil_build(log)
    env = config.group
    if not env.first_task:
        return verify_after_first_task(config)
    dest = config.dest.resolve()
    detected, identity, setup_error = None, None, None
    try:
        detected, dest, identity = identified(config)
        make_dest(dest)
        with contextlib.suppress(OSError):  # a full disk may still hold a complete dataset to serve
            (dest / node_marker(env.node)).write_text(env.step)
    except USER_ERRORS as exn:
        setup_error = one_line(exn)
    # The workers are forked before the group starts its threads (the store's, gloo's, the heartbeat):
    # a worker forked beside them once waited forever for a lock one of them held at the fork
    # (CPython's thread-state lock, in PyOS_AfterFork_Child).
    with worker_pool(config.workers) as pool:
        group = None
        try:  # the rendezvous too: the node's other tasks wait for this task's mark
            group = NodeGroup(env, config.group_timeout_s)
            return prepare_with_group(group, detected, dest, config, identity, setup_error, pool)
        except BaseException as exn:
            mark_step(dest, env, "failed", one_line(exn))  # also where it failed before it held the lock
            raise
        finally:
            with contextlib.suppress(OSError):
                (dest / node_marker(env.node)).unlink()
            if group is not None:
                group.close()


def prepare_with_group(group: NodeGroup, detected: Detected | None, dest: Path, config: PrepareConfig, identity: dict | None,
                       setup_error: str | None, pool: WorkerPool | None) -> Manifest:
    here = group.gather({"node": group.env.node, "error": setup_error})
    group.names = [s["node"] for s in here]
    raise_first_error(group, [s["error"] for s in here])
    sharing = [n for n in group.names if n != group.env.node and marker_of(dest, n) == group.env.step]
    with contextlib.ExitStack() as stack:
        said, node = {"sharing": sharing}, None
        if not sharing:  # a --dest shared by nodes: the others would wait for the lock forever
            try:
                stack.enter_context(exclusive_lock(dest))
            except USER_ERRORS as exn:  # a full or read-only --dest: told to the others, who print it too
                said["error"] = one_line(exn)
            else:
                # how this task ends is marked before the lock goes: the node's other tasks take a free
                # lock and a step still "running" for a task that died (verify_after_first_task)
                stack.push(step_marker(dest, group.env))
                mark_step(dest, group.env, "running")
                node, facts = node_state(dest, config, identity, detected, stack)
                said |= facts
        statuses = group.gather(said)
        refuse_shared_dest(dest, group.names, [s["sharing"] for s in statuses])
        with saying_a_complete_dataset_stays(node, dest):
            raise_first_error(group, [s["error"] for s in statuses])
            refuse_disagreement(group.names, [s["plan"] for s in statuses], [s.get("seek_index") for s in statuses],
                                [s.get("table") for s in statuses])
            needs = [s["needs"] for s in statuses]
            if not any(needs):
                return finish_here(node, dest, config, identity, pool)
            readers = [rank for rank, s in enumerate(statuses) if s["can_read"]]
            log.info("shared read: %d of %d nodes read a share of the source each; %s need%s the dataset",
                     len(readers), group.size, ", ".join(n for n, need in zip(group.names, needs) if need),
                     "s" if sum(needs) == 1 else "")
            if group.rank in readers:
                ahead_gb = read_ahead_bytes(part_sizes(node.parts), node.ahead, config.workers) / 1e9
                log.info("shared read: this node reads up to %d parts ahead of the exchange (%.1f GB of disk at "
                         "most)", node.ahead, ahead_gb)
            shared = SharedRead(group, needs, readers, node.parts, config, node.ahead, pool)
            manifest = announcing_failures(group, lambda: receive_or_serve(shared, node, dest, config, identity))
            try:
                group.round(DONE, bytearray(), receive=False, send_to=[False] * group.size)
            except PeerFailed as exn:
                raise PeerFailed(f"{exn} (this node's own dataset in {dest} is complete)") from None
            return manifest if manifest is not None else finish_here(node, dest, config, identity, pool)


@contextlib.contextmanager
def saying_a_complete_dataset_stays(node: "NodeState | None", dest: Path):
    """Another node's failure, reported by a node whose own dataset was complete from the start (it served its
    share): said so, as the last round says it of a dataset this step completed (docs/clusters.md)."""
    try:
        yield
    except PeerFailed as exn:
        if node is None or node.found.complete is None or str(exn).endswith("is complete)"):
            raise
        raise PeerFailed(f"{exn} (this node's own dataset in {dest} is complete)") from None


def finish_here(node: "NodeState", dest: Path, config: PrepareConfig, identity: dict,
                pool: WorkerPool | None) -> Manifest:
    """What this node does once the others need nothing more of it: nothing where its dataset is
    complete (but the class_maps a dataset prepared before them lacks); else add the evaluation sets it lacks,
    from its own read of them (under its lock)."""
    if node.found.base is None:
        return with_class_maps(dest, node.found.complete, node.source.class_maps())
    return add_eval_sets(dest, config, identity, with_class_maps(dest, node.found.base, node.source.class_maps()),
                         pool)


def step_marker(dest: Path, env: NodeGroupEnv):
    """An exit callback for the ExitStack that holds the lock: marks the step done or failed."""
    def mark(exc_type, exc, traceback) -> bool:
        mark_step(dest, env, "done" if exc is None else "failed", None if exc is None else one_line(exc))
        return False
    return mark


@dataclass(frozen=True)
class NodeState:
    """What this node found before anything is read, kept here (the others get `node_state`'s facts)."""
    found: Existing  # what its --dest holds: its complete dataset, one it replaces, or one it adds evaluation sets to
    source: Source
    parts: dict[tuple[str, ...], list[Part]]  # each pass's (its splits: one, or those read together)
    ahead: int  # parts this node reads ahead of the exchange (parts_ahead)

    @property
    def needs(self) -> bool:
        """Whether it builds the dataset from the exchange."""
        return self.found.complete is None and self.found.base is None


def node_state(dest: Path, config: PrepareConfig, identity: dict, detected: Detected,
               held: contextlib.ExitStack) -> tuple[NodeState | None, dict]:
    """This node's state, and the small facts it tells the others (never the parts or the source:
    a tree's listing is 1.3 M rows). A node that builds takes its readers lock alone here, into `held` (the stack
    that holds its prepare lock, and closes the source at the end), and checks its room, before the nodes compare
    their states: a loader reading its dataset, or a --dest without room for the build, is a failure every node hears
    of before any removes its own dataset, not one refused in its build after the others had."""
    try:
        found = verified_existing(dest, identity, config)
        needs = found.complete is None and found.base is None
        if needs:
            held.enter_context(no_loader_reading(dest))
        source = held.enter_context(open_prepare_source(detected, config))  # closes what it opened to read
        parts = {splits: pass_parts(source, splits) for splits in passes_of(source)}
        budget = read_ahead_budget(dest, source, config, builds=needs)
        ahead = parts_ahead(config.workers, part_sizes(parts), budget)
        ahead_bytes = read_ahead_bytes(part_sizes(parts), ahead, config.workers)  # SharedReader.disk_ahead's
        if needs:  # a node builds what it receives and reads a share
            check_room_to_build(source, dest, config, ahead_bytes)
        room = ahead_bytes <= budget
        facts = {"error": None, "needs": needs, "can_read": needs or room, "plan": plan_digest(identity, source, parts),
                 "seek_index": source.seek_index(), "table": detected.table}
        return NodeState(found, source, parts, ahead), facts
    except USER_ERRORS as exn:
        return None, {"error": one_line(exn)}


def read_ahead_budget(dest: Path, source: Source, config: PrepareConfig, builds: bool) -> int:
    """The disk this node may fill with part streams read ahead: what is free, less the dataset
    it builds (and the build's margin) where it builds one."""
    needed = sum(dataset_estimate(source, config, resize_ratio(source, config)).values()) + MARGIN if builds else 0
    return free_bytes(dest) - needed


def receive_or_serve(shared: "SharedRead", node: NodeState, dest: Path, config: PrepareConfig,
                     identity: dict) -> Manifest | None:
    """The dataset built from the exchange; or, on a node that needs no data, its share served
    (None: finish_here then says what it holds)."""
    if node.needs:
        return build_and_report(node.source, dest, config, identity, node.found, SharedReader(shared, node.source))
    serve(shared, node.source, dest)
    return None


def announcing_failures(group: NodeGroup, work):
    """work(); if it fails here (not because another node did), the others learn why in the round
    they wait in, and print it too."""
    try:
        return work()
    except PeerFailed:
        raise
    except Exception as exn:
        group.announce(one_line(exn))
        raise


# ---------------------------------------------------------------- agreeing before reading

def raise_first_error(group: NodeGroup, errors: list[str | None]) -> None:
    if errors[group.rank] is not None:  # the others learn it from the same gather
        raise PrepareError(errors[group.rank])
    failed = [(name, error) for name, error in zip(group.names, errors) if error is not None]
    if failed:
        others = f" (and {len(failed) - 1} other node{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
        raise PeerFailed(f"{failed[0][0]} failed{others}: {failed[0][1]}")


def refuse_shared_dest(dest: Path, names: list[str], sharing: list[list[str]]) -> None:
    shared = sorted({name for name, others in zip(names, sharing) if others} | {n for s in sharing for n in s})
    if shared:
        raise PrepareError(f"--dest {dest} is one directory on nodes {', '.join(shared)}: the shared read gives each "
                           "node its own copy on node-local disk. Give a node-local --dest, or rerun with "
                           "--no-shared-read to have one node write it and the others wait for it")


def refuse_disagreement(names: list[str], plans: list[str], seek_indexes: list[str | None],
                        tables: list[str | None]) -> None:
    """Every node must plan the same read: the same source, options, parts and labels (`plan_digest`),
    the same class table (without --class-table, a node keeps the table of the dataset its --dest holds),
    and the same seek index or none (a node's own cache may hold one the others lack)."""
    if len(set(tables)) > 1:
        by_table = {table: [name for name, other in zip(names, tables) if other == table] for table in tables}
        raise PrepareError("the nodes would label the download in different class tables (" + "; ".join(
            f"{', '.join(nodes)}: {table}" for table, nodes in by_table.items()) + "): without --class-table a node "
            "keeps the table of the dataset its --dest holds from before. Give every node the same --class-table "
            "(with --force where that replaces a node's dataset)")
    index = next((index for index in seek_indexes if index is not None), None)
    if index is not None and any(other != index for other in seek_indexes):
        with_it = [name for name, other in zip(names, seek_indexes) if other == index]
        without = [name for name, other in zip(names, seek_indexes) if other != index]
        raise PrepareError(f"nodes {', '.join(with_it)} read the source through its seek index {index}, nodes "
                           f"{', '.join(without)} do not see that index (kept in a node's own cache, or written as this "
                           "job started): delete it (the next job reads the stream whole and keeps one beside the "
                           "archive where that folder is writable), or copy it to the same path on every node; then "
                           "rerun")
    differing = [name for name, plan in zip(names, plans) if plan != plans[0]]
    if differing:
        raise PrepareError(f"nodes {', '.join(differing)} see another source or other options than {names[0]} (the "
                           "archives' sizes, parts, classes or the command line differ): give every node the same "
                           "--source, as one path on shared storage, and the same options")


def plan_digest(identity: dict, source: Source, parts: dict[tuple[str, ...], list[Part]]) -> str:
    """What must be the same on every node for their streams to make one dataset."""
    facts = {"identity": identity, "classes": [c.wnid for c in source.classes],
             "parts": {" and ".join(splits): [part.size for part in pass_parts] for splits, pass_parts in parts.items()},
             "bytes": {split: source.split_bytes(split) for split in source.splits}}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def marker_of(dest: Path, node: str) -> str | None:
    try:
        return (dest / node_marker(node)).read_text()
    except OSError:
        return None


# ---------------------------------------------------------------- the other tasks of a node

def mark_step(dest: Path, env: NodeGroupEnv, state: str, error: str | None = None) -> None:
    """Tell this node's other tasks how its first task stands (they poll `verify_after_first_task`)."""
    path = dest / STEP_FILE
    try:
        path.with_suffix(".new").write_text(json.dumps({"step": env.step, "state": state, "error": error}))
        os.replace(path.with_suffix(".new"), path)
    except OSError:  # a full or read-only --dest: the other tasks time out, naming the wait
        with contextlib.suppress(OSError):
            path.with_suffix(".new").unlink()


def verify_after_first_task(config: PrepareConfig) -> Manifest:
    """A further task of a node: wait for the node's first task (which joins the group), then
    verify what it wrote, as a task that waited for the lock does."""
    env, dest = config.group, config.dest.resolve()
    identity = identified(config)[2]
    log.info("task %d of %s: the node's first task prepares %s with the other nodes; waiting for it",
             env.local_task, env.node, dest)
    deadline = time.monotonic() + config.group_timeout_s
    while True:
        step = read_step(dest)
        if step.get("step") == env.step and step["state"] in ("done", "failed"):
            break
        if step.get("step") == env.step and not held_by_a_live_prepare(dest):
            raise PrepareError(f"this node's first prepare task stopped without a word (killed?) while preparing "
                               f"{dest}: see its log, then rerun the step")
        if time.monotonic() > deadline:
            raise PrepareError(f"this node's first prepare task did not start on {dest} within "
                               f"{config.group_timeout_s:.0f} s: see its log")
        time.sleep(0.5)
    if step["state"] == "failed":
        raise PrepareError(f"this node's first prepare task failed: {step['error']}")
    with exclusive_lock(dest):
        found = verified_existing(dest, identity, config)
    if found.complete is None:
        raise PrepareError(f"this node's first prepare task ended, but {dest} holds no complete dataset: rerun")
    return found.complete


def read_step(dest: Path) -> dict:
    try:
        return json.loads((dest / STEP_FILE).read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------- reading a share

def parts_ahead(workers: int, sizes: list[int], budget: int) -> int:
    """Parts read into stream files ahead of the exchange: one more than keeps every worker busy, as
    far as the disk `budget` (bytes) holds them beside the one being sent; at least one.
    `sizes`: the parts' sizes, any order. With workers, a part's stream is sent segment by segment
    as it is read, so a part of any size holds a few of them (`part_stream_bytes`); with one, the
    part is read whole before it is sent, and the hub's gzipped archives (27 GB each) may not fit:
    fewer are then read at once."""
    ahead = min(workers + 1, max(len(sizes) - 1, 1))  # beside the one being sent
    while ahead > 1 and read_ahead_bytes(sizes, ahead, workers) > budget:
        ahead -= 1
    return ahead


def read_ahead_bytes(sizes: list[int], ahead: int, workers: int) -> int:
    """Disk a reading node needs beyond a one-node prepare's: `ahead` part streams and the one being
    sent (at most that many of the largest parts' streams)."""
    return sum(sorted((part_stream_bytes(size, workers) for size in sizes), reverse=True)[:ahead + 1])


def part_stream_bytes(size: int, workers: int) -> int:
    """The most of --dest one part's stream holds at once: a few percent above the part's size, or,
    where a worker streams it while it is sent, the segments it may write ahead of the sender."""
    whole = int(1.05 * size)
    return whole if workers <= 1 else min(whole, STREAMED_AHEAD_BYTES)


def part_sizes(parts: dict[tuple[str, ...], list[Part]]) -> list[int]:
    return [part.size for pass_parts in parts.values() for part in pass_parts]


class SharedRead:
    """This node's part in the exchange: its share of each pass's parts (none if it cannot read
    ahead), streamed to the nodes in `needs`; what it received, if it needs data."""

    def __init__(self, group: NodeGroup, needs: list[bool], readers: list[int], parts: dict[tuple[str, ...], list[Part]],
                 config: PrepareConfig, ahead: int, pool: WorkerPool | None):
        self.group, self.needs, self.parts, self.config, self.ahead = group, needs, parts, config, ahead
        self.pool = pool  # forked before the group's threads (prepare_in_group)
        shares = split_shares({splits: [part.size for part in pass_parts] for splits, pass_parts in parts.items()},
                              len(readers))
        mine = readers.index(group.rank) if group.rank in readers else None
        self.shares = {splits: shares[splits][mine] if mine is not None else [] for splits in parts}
        self.stats = ExchangeStats()

    def read_ahead_bytes(self) -> int:
        return read_ahead_bytes(part_sizes(self.parts), self.ahead, self.config.workers)

    def exchange_pass(self, source: Source, into: dict[str, tuple[int, Path]], pool) -> Iterator[Scattered]:
        """This node's share of the pass over the splits of `into` (split -> its bucket count and scratch),
        read and spilled by the workers into part streams and sent, segment by segment; if this node
        needs data, every node's samples spilled to each split's buckets. Returns the outcomes of every
        image of the pass, in source order (once all have come), each naming its split where the pass
        has several."""
        config, splits = self.config, tuple(into)
        parts, share, (_, work) = self.parts[splits], self.shares[splits], into[splits[0]]
        streams, outcomes = work / "parts", work / "outcomes"
        streams.mkdir()
        outcomes.mkdir()
        at_once = min(len(share), self.ahead)  # the parts read at the same time: their threads share the workers
        part_of = part_jobs([parts[i] for i in share], source.class_index(), into, config, at_once)
        jobs = [StreamJob(job, i, str(streams / f"{i:06d}.stream"), config.skip_bad, pool is not None)
                for i, job in zip(share, part_of)]
        produced = ((Path(job.path), job.job.part.size, written) for job, written in streamed(pool, jobs, self.ahead))
        receive = self.needs[self.group.rank]
        with contextlib.ExitStack() as stack:
            most_open = most_spills_open(sharing=len(into))
            spills = [stack.enter_context(BucketSpills(split_work, "x", most_open)) for _, split_work in into.values()]
            stats = exchange(self.group, produced, self.needs,
                             lambda bucket, pickled, split: spills[split].write_pickled(bucket, pickled), outcomes,
                             " and ".join(splits), config.progress_interval)
        self.stats.add(stats)
        log.info("%s: read %.1f MB of the source (%d of %d parts), sent %.1f MB to other nodes, received %.1f MB; "
                 "%.1f s waiting for this node's parts, %.1f s in exchange rounds, %.1f s spilling", " and ".join(splits),
                 stats.read_bytes / 1e6, len(share), len(parts), stats.sent_bytes / 1e6, stats.received_bytes / 1e6,
                 stats.waiting_for_parts_s, stats.in_rounds_s, stats.spilling_s)
        return read_outcomes(outcomes, len(parts)) if receive else iter(())


def streamed(pool: WorkerPool | None, jobs: list["StreamJob"], ahead: int) -> Iterator[tuple["StreamJob", Future]]:
    """Each job with its task, in order: in the workers, `ahead` at a time, each sent while its worker
    streams it; or, without workers, streamed here whole before it is sent."""
    if pool is not None:
        yield from pool.submit_ahead(stream_part, jobs, ahead)
        return
    for job in jobs:
        done: Future = Future()
        done.set_result(stream_part(job))
        yield job, done


class SharedReader:
    """The build's reader (scatter.Reader) on a node that needs the dataset: each split's images
    come from the exchange (this node's share read and sent, every node's samples received)."""

    def __init__(self, shared: SharedRead, source: Source):
        self.shared, self.source = shared, source

    def disk_ahead(self) -> int:
        return self.shared.read_ahead_bytes()

    def split_images(self, split: str, num_buckets: int, work: Path, pool) -> Iterator[Scattered]:
        return self.shared.exchange_pass(self.source, {split: (num_buckets, work)}, pool)

    def read_together(self) -> tuple[str, ...]:
        """As a one-node read: winter21's stream before its index is one pass for val and train, read by one
        node, which sends both splits' samples as it inflates them."""
        return self.source.read_together()

    def pass_images(self, into: dict[str, tuple[int, Path]], pool) -> Iterator[Scattered]:
        return self.shared.exchange_pass(self.source, into, pool)

    def workers(self) -> contextlib.AbstractContextManager[WorkerPool | None]:
        return contextlib.nullcontext(self.shared.pool)

    def stats(self) -> dict:
        return {"nodes": self.shared.group.size, "read_from_source_bytes": self.shared.stats.read_bytes,
                "received_from_nodes_bytes": self.shared.stats.received_bytes}


def serve(shared: SharedRead, source: Source, dest: Path) -> None:
    """A node that holds the dataset still reads and sends its share (one holder serving every other
    node would be the bottleneck); it receives and writes nothing. Its scratch goes when it ends."""
    config = shared.config
    work_root = dest / WORK_DIR_NAME
    shutil.rmtree(work_root, ignore_errors=True)  # a killed run's scratch, next to the complete dataset
    try:
        for splits in shared.parts:  # the passes, as the building nodes read them
            shared.exchange_pass(source, pass_scratch(source, splits, work_root, config), shared.pool)
    except OSError as exn:
        if is_out_of_space(exn):
            raise PrepareError(f"{dest} ran out of space while reading this node's share for the others (its "
                               "dataset is complete and untouched): free space on it, then rerun") from None
        raise
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    log.info("served: read %.1f MB of the source for the nodes that needed the dataset; this node needed none of it",
             shared.stats.read_bytes / 1e6)


@dataclass(frozen=True)
class StreamJob:
    """Scatter one part into a stream to send (its segment files), instead of into this node's spills."""
    job: PartJob
    index: int  # the part's index in its pass
    path: str
    skip_bad: bool
    sent_meanwhile: bool  # by the main process as a worker streams it: the worker then waits for room


def stream_part(stream: StreamJob) -> None:
    with PartStream(Path(stream.path), PENDING_SEGMENTS if stream.sent_meanwhile else None) as out:
        writers = {None: out.for_split(0)} | {split: out.for_split(i) for i, (split, _, _) in enumerate(stream.job.joint)}
        outcomes = scatter_items(stream.job, writers)
        out.finish(stream.index, outcomes)
    bad = [image for image in outcomes if image.error is not None and not image.left_out]
    if bad and not stream.skip_bad:  # stop now, not after the exchange (the receivers would stop there too)
        raise bad_image_stops_the_run(bad[0])


def one_line(exn: BaseException) -> str:
    """What another node prints of this node's failure."""
    if isinstance(exn, UserError):
        return str(exn)
    if isinstance(exn, OSError) and exn.filename:
        return f"{exn.filename}: {exn.strerror or exn}"
    return f"{type(exn).__name__}: {exn}" if str(exn) else type(exn).__name__
