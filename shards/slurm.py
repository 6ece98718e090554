"""What both stages read from SLURM's environment the same way: node lists, tasks per node, and
rendezvous ports that two concurrent steps of a job never share.

`train` forms one group of ranks per step (one per GPU); `prepare` forms one group of nodes per
step (the task holding each node's lock). Each takes its ports from its own range, so a prepare
step and a train step of the same job (or of jobs sharing a first node) cannot collide.
"""

from __future__ import annotations

import hostlist

from shards.errors import UserError

# [start, start + PORT_SPAN) per stage, below the usual ephemeral range's start (32768). The span
# is odd (7 x 857), so job * 64 + step takes every value of it: jobs 5,999 ids apart share a port.
PORT_RANGES = {"train": 20000, "prepare": 26000}
PORT_SPAN = 5999


class SlurmEnvError(UserError, RuntimeError):
    """SLURM's variables describe no consistent step."""


def slurm_port(job_id: int, step_id: int, stage: str = "train") -> int:
    """A rendezvous port from the job and step ids: concurrent steps of a job, and jobs whose ids
    are close, get different ports; `stage` picks a range that the other stage never uses."""
    return PORT_RANGES[stage] + (job_id * 64 + step_id) % PORT_SPAN


def port_in_use(exn: BaseException) -> bool:
    """Whether a rendezvous failed because its port was taken on the store's node (torch's DistNetworkError
    says EADDRINUSE; an OSError says errno 98's text): not a peer that never came, and no wait made."""
    text = str(exn)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def expand_nodes(nodelist: str) -> list[str]:
    """'gpu[07-09],cpu1' -> ['gpu07', 'gpu08', 'gpu09', 'cpu1'], in SLURM's node order."""
    try:
        hosts = hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exn:  # (a variable exported by hand, not SLURM's)
        raise SlurmEnvError(f"SLURM node list {nodelist!r} does not read ({exn})") from None
    if not hosts:
        raise SlurmEnvError(f"empty SLURM node list {nodelist!r}")
    return hosts


def node_place(nodes: list[str], node: str | None, node_id: int) -> int:
    """This node's place in the step's node list, which puts the rendezvous' store on the first node and which
    SLURM_STEP_TASKS_PER_NODE follows: where `node` (SLURMD_NODENAME) is listed, else `node_id` (SLURM_NODEID), the
    same place under block, cyclic and arbitrary distributions, but which follows a heterogeneous job's components
    instead (its node2 first). Pure."""
    return nodes.index(node) if node in nodes else node_id


def tasks_per_node(spec: str) -> list[int]:
    """SLURM_TASKS_PER_NODE ('2(x3),1') as a list per node ([2, 2, 2, 1])."""
    try:
        return hostlist.parse_slurm_tasks_per_node(spec)
    except hostlist.BadHostlist:
        raise SlurmEnvError(f"SLURM count a node {spec!r} does not read (SLURM writes them as '2(x3),1')") from None
