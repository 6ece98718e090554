"""The nodes of an srun step as one group over torch.distributed (gloo, CPU tensors), so that they
share the read of the source: one task per node joins (the one holding the node's lock), with
the step's node index as its rank and the step's first node as the rendezvous.

Every collective goes through `NodeGroup`, which turns torch's errors into `PeerFailed`, naming
the node that failed: a node that fails on its own (a full disk, a damaged source) announces its
one-line error in the next round; a node that dies outright is found by a census on the
rendezvous store (the survivors check in; whoever does not is named).
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from dataclasses import dataclass

from shards.errors import UserError
from shards.slurm import SlurmEnvError, expand_nodes, node_place, port_in_use, slurm_port

log = logging.getLogger("prepare")

DATA, DONE, FAILED = 0, 1, 2  # a node's status in a round
BEAT_S = 0.5  # how often a node's heartbeat counts up on the store
CENSUS_S = 2.0  # how long survivors watch the heartbeats after a collective failed
RENDEZVOUS_S = 600.0  # the longest wait for every node to arrive (at most --group-timeout)


class PeerFailed(UserError, RuntimeError):
    """Another node of the group failed, or the group itself did: the message names the node."""


@dataclass(frozen=True)
class NodeGroupEnv:
    """Where this node's task stands in the step, from SLURM's variables (see `node_group_env`)."""
    rank: int  # this node's index in the step
    size: int  # nodes in the step
    addr: str  # the step's first node: the rendezvous store runs in its task
    port: int
    node: str  # this node's name, for messages
    step: str  # "JOB.STEP", or "JOB.STEP restart N": this step's marks told from another's, a requeue's too
    local_task: int = 0  # this task's index on its node (SLURM_LOCALID): the first (0) joins the group,
    # the others wait for it

    @property
    def first_task(self) -> bool:
        return self.local_task == 0


def node_group_env(environ: dict) -> NodeGroupEnv | None:
    """The group this task would join, or None outside an srun step over several nodes (a batch
    script's own shell, a login node, one node: each prepares alone, as before)."""
    if "SLURM_STEP_NUM_NODES" not in environ or "SLURM_NODEID" not in environ:
        return None
    try:
        size = int(environ["SLURM_STEP_NUM_NODES"])
        if size < 2:
            return None
        nodes = expand_nodes(environ.get("SLURM_STEP_NODELIST") or environ["SLURM_JOB_NODELIST"])
        rank, job, step = int(environ["SLURM_NODEID"]), int(environ["SLURM_JOB_ID"]), int(environ["SLURM_STEP_ID"])
        local_task = int(environ.get("SLURM_LOCALID", 0))
    except (KeyError, ValueError) as exn:
        raise SlurmEnvError(f"an srun step over several nodes without usable SLURM variables ({type(exn).__name__}: "
                            f"{exn})") from None
    if len(nodes) != size or not 0 <= rank < size:
        raise SlurmEnvError(f"SLURM_NODEID={rank} and a node list of {len(nodes)} do not match "
                            f"SLURM_STEP_NUM_NODES={size}")
    rank = node_place(nodes, environ.get("SLURMD_NODENAME"), rank)  # (the first node holds the store)
    return NodeGroupEnv(rank=rank, size=size, addr=nodes[0], port=slurm_port(job, step, "prepare"),
                        node=environ.get("SLURMD_NODENAME") or nodes[rank], step=step_name(job, step, environ),
                        local_task=local_task)


def step_name(job: int, step: int, environ: dict) -> str:
    """The step, told from the same step of the job's earlier starts: a requeued job keeps its id and numbers
    its steps from 0 again, and a mark its failed start left must not pass for this start's. Pure."""
    restart = environ.get("SLURM_RESTART_COUNT", "0").strip()
    return f"{job}.{step}" if restart in ("", "0") else f"{job}.{step} restart {restart}"


class NodeGroup:
    """A joined group. `gather` exchanges small objects; `round` moves one chunk per node."""

    def __init__(self, env: NodeGroupEnv, timeout_s: float):
        import torch.distributed as dist  # here: torch takes 2 s to import, a rerun needs none of it

        self.env, self.rank, self.size, self.names = env, env.rank, env.size, [f"node {r}" for r in range(env.size)]
        self.dist, self.broken = dist, False
        rendezvous, started = min(timeout_s, RENDEZVOUS_S), time.monotonic()
        try:
            self.store = dist.TCPStore(env.addr, env.port, env.size, is_master=env.rank == 0,
                                       timeout=datetime.timedelta(seconds=rendezvous), wait_for_workers=False)
            self.check_owner()
            dist.init_process_group("gloo", store=self.store, rank=env.rank, world_size=env.size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
            dist.barrier()  # the store answers before every node has joined; one collective proves they all did
        except PeerFailed:
            raise
        except Exception as exn:  # torch raises several types here; all mean the same to the user, but one
            if port_in_use(exn):  # the first node could not listen: at once, and no node is to blame
                raise PeerFailed(
                    f"{env.node}: the nodes' rendezvous port {env.port} is in use on {env.node} by another process "
                    "(another job's group, whose job and step ids give the same port): rerun it as another srun step "
                    "or job (either takes another port), or prepare each node alone with --no-shared-read") from None
            raise PeerFailed(
                f"{env.node}: the nodes' rendezvous at {env.addr}:{env.port} failed after "
                f"{time.monotonic() - started:.0f} s (of {rendezvous:.0f} s allowed) "
                f"({type(exn).__name__}: {first_line(exn)}). A node never arrived or died before it: check the other "
                "nodes' logs, that the step's first node is reachable on that port, and that gloo uses the nodes' "
                "network (GLOO_SOCKET_IFNAME); rerun, or prepare each node alone with --no-shared-read.") from None
        self.heart = Heartbeat(env, rendezvous)

    def check_owner(self) -> None:
        """Jobs whose ids map to the same port must not join each other's group."""
        if self.rank == 0:
            self.store.set("owner", self.env.step)
        owner = self.store.get("owner").decode()
        if owner != self.env.step:
            raise PeerFailed(f"the rendezvous port {self.env.port} on {self.env.addr} belongs to another job's step "
                             f"({owner}): rerun this step (a new step id gives a new port), or use --no-shared-read")

    def close(self) -> None:
        self.heart.stop()
        if self.dist.is_initialized():
            self.dist.destroy_process_group()

    # -------------------------------------------------------------- collectives

    def gather(self, obj) -> list:
        """Every node's `obj` (small, picklable), in rank order."""
        out = [None] * self.size
        self._guarded(lambda: self.dist.all_gather_object(out, obj))
        return out

    def round(self, status: int, payload, receive: bool, send_to: list[bool]) -> list[tuple[int, memoryview | None]]:
        """One step of the exchange: every node says its status and how many bytes it has; each
        sends `payload` (a writable buffer) to the nodes in `send_to`, and receives the others'
        if `receive`. A FAILED node's payload (its error, UTF-8) goes to every node. Returns
        (status, bytes received or None) per node; raises PeerFailed if any node failed."""
        import torch

        dist = self.dist
        header = torch.tensor([status, len(payload)], dtype=torch.int64)
        headers = [torch.empty(2, dtype=torch.int64) for _ in range(self.size)]
        self._guarded(lambda: dist.all_gather(headers, header))
        try:
            return self._rest_of_round(status, payload, receive, send_to, headers)
        except PeerFailed:
            raise
        except BaseException:
            # the others are already moving this round's bytes: no announcement could match them
            self.broken = True
            raise

    def _rest_of_round(self, status, payload, receive, send_to, headers):
        import torch

        dist = self.dist
        said = [(int(h[0]), int(h[1])) for h in headers]
        # once a node has failed, only failures move: data sent to a node that is leaving would stay
        # unread in its socket, and closing that resets the connection, losing its message on the way
        failing = any(s == FAILED for s, _ in said)
        buffers = {j: torch.empty(n, dtype=torch.uint8) for j, (s, n) in enumerate(said)
                   if j != self.rank and n and (s == FAILED or (s == DATA and receive and not failing))}
        sends = len(payload) and (status == FAILED or (status == DATA and not failing))
        sending = torch.frombuffer(payload, dtype=torch.uint8) if sends else None

        def move():
            works = [dist.irecv(buffer, src=j) for j, buffer in buffers.items()]
            if sending is not None:
                works += [dist.isend(sending, dst=j) for j in range(self.size)
                          if j != self.rank and (status == FAILED or send_to[j])]
            for work in works:
                work.wait()

        self._guarded(move)
        failed = [(j, bytes(buffers[j].numpy()).decode(errors="replace")) for j, (s, _) in enumerate(said)
                  if s == FAILED and j != self.rank]
        if failed:
            j, message = failed[0]
            raise PeerFailed(f"{self.names[j]} failed: {message}")
        return [(s, memoryview(buffers[j].numpy()) if j in buffers else None) for j, (s, _) in enumerate(said)]

    def announce(self, message: str) -> None:
        """Tell the others, in the round they are waiting in, that this node failed and why."""
        if self.broken:
            return
        data = bytearray(message.encode())
        try:
            self.round(FAILED, data, receive=False, send_to=[True] * self.size)
        except PeerFailed:
            pass  # they know, or they failed too: either way this node's own error is what it reports

    # -------------------------------------------------------------- failures

    def _guarded(self, collective) -> None:
        try:
            collective()
        except Exception as exn:
            raise PeerFailed(self.describe_failure(exn)) from None

    def describe_failure(self, exn: Exception) -> str:
        gone = self.census()
        self.leaving()
        who = ", ".join(self.names[r] for r in gone) if gone else "another node"
        return (f"{who} stopped answering ({first_line(exn)}): killed, lost, or out of time "
                f"(--group-timeout). See {'its' if len(gone) <= 1 else 'their'} log; rerun the step (each node "
                "removes what this run wrote first)")

    def census(self) -> list[int]:
        """The ranks whose heartbeat stopped, but for those that left because they saw another fail
        (`leaving`). The store lives in node 0's task: if it is gone, node 0 is (it lingers for CENSUS_S
        after a failure of its own, so the others can count)."""
        try:
            before = self.heart.beats(self.store)
            time.sleep(CENSUS_S)
            after = self.heart.beats(self.store)
            left = [self.store.add(f"left/{r}", 0) for r in range(self.size)]
        except Exception:
            return [0]
        if self.rank == 0:
            time.sleep(CENSUS_S)  # the store goes with this process: the others may still be counting
        return gone_from(before, after, left, self.rank)

    def leaving(self) -> None:
        """Say on the store that this node leaves because another failed: a node that comes to a
        collective later, and waits there until --group-timeout, must not count it among the dead (its
        heartbeat stops as it exits)."""
        try:
            self.store.add(f"left/{self.rank}", 1)
        except Exception:
            pass  # the store went with node 0: the others' census names node 0 anyway


def gone_from(before: list[int], after: list[int], left: list[int], rank: int) -> list[int]:
    """The ranks a census finds gone: their heartbeat did not move, and they did not say they left
    (`NodeGroup.leaving`). Pure."""
    return [r for r in range(len(after)) if r != rank and after[r] == before[r] and not left[r]]


class Heartbeat:
    """A thread that counts up this node's key on the store every BEAT_S, through its own client:
    it beats while the main thread waits in a collective, and stops only with the process."""

    def __init__(self, env: NodeGroupEnv, timeout_s: float):
        import threading

        import torch.distributed as dist

        self.env, self.stopped = env, threading.Event()
        self.client = dist.TCPStore(env.addr, env.port, is_master=False,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        self.thread = threading.Thread(target=self.run, name="prepare-heartbeat", daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopped.wait(BEAT_S):
            try:
                self.client.add(f"beat/{self.env.rank}", 1)
            except Exception:
                return  # the store is gone: the census says who took it

    def beats(self, store) -> list[int]:
        return [store.add(f"beat/{r}", 0) for r in range(self.env.size)]

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=2 * BEAT_S)


def first_line(exn: BaseException) -> str:
    """The gist of torch's or gloo's error: its first line, less gloo's source location and advice."""
    text = str(exn).strip()
    line = text.splitlines()[0] if text else type(exn).__name__
    line = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\] ", "", line)
    return line.split(". This is typically")[0]
