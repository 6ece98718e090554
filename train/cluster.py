"""The distributed environment, read once: SLURM (srun, no torchrun needed), torchrun, or a plain
single process. `dist_env` is pure (it takes the environment as a dict); `init_distributed` does
the rendezvous with a short timeout and an error that names the address and port.
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from shards.errors import UserError
from shards.slurm import SlurmEnvError, expand_nodes, node_place, port_in_use, slurm_port, tasks_per_node

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class ClusterError(UserError, RuntimeError):
    """The environment describes no consistent distributed job."""


@dataclass(frozen=True, kw_only=True)
class DistEnv:
    """Everything training reads from its environment, read once (by `dist_env`)."""
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: str  # "slurm", "torchrun" or "single"
    node: str  # this node's name, for messages
    local_world_size: int = 1  # tasks on this node
    job_id: str | None = None  # the SLURM job, for requeueing it
    job_tasks: int = 1  # tasks of the SLURM job (more than world_size: python -m train run without srun)
    cpus_per_task: bool = False  # SLURM gave each rank its own CPUs (srun --cpus-per-task, one task a rank)
    cpus_asked: int = 0  # srun's task: SLURM_CPUS_PER_TASK, where said (a batch script's export, or srun's own)
    job_cpus_here: int = 0  # srun's task: the job's CPUs on this node (SLURM_JOB_CPUS_PER_NODE's), where said
    job_cpus_a_task: int = 0  # srun's task: the fewest of them a task of the step has on any of its nodes, where said
    one_thread_a_core: bool = False  # srun's task: --threads-per-core or --hint=nomultithread (job or step)
    tasks_on_its_cpus: int = 0  # srun's task: the node's tasks bound to the very CPUs it is (SLURM_CPU_BIND_LIST)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_env(environ: dict) -> DistEnv:
    """Rank, world size, local rank and rendezvous address from the launcher's variables.

    torchrun's variables win (and MASTER_ADDR/MASTER_PORT override SLURM's derived ones); under
    srun, SLURM_PROCID etc.; otherwise a single process. Half a torchrun set is an error, not a guess (in an srun
    step, where a job script exported it, it must say what srun says);
    so is a rank outside its world, or a variable that is no number (exported by hand: WORLD_SIZE=$SLURM_NNODES).
    """
    try:
        env = launcher_env(environ)
    except ValueError as exn:  # int() of a variable that is no number
        raise ClusterError(f"a launcher's variable is not a whole number ({exn}): let torchrun or srun set "
                           "RANK, WORLD_SIZE, LOCAL_RANK (or SLURM_PROCID, ...), not a script") from None
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:  # else: an IndexError deep in the read plan
        said = ("RANK and WORLD_SIZE", " (WORLD_SIZE counts ranks, not nodes)") if env.launcher == "torchrun" else (
            "SLURM_PROCID and SLURM_STEP_NUM_TASKS", "")
        raise ClusterError(f"{said[0]} say rank {env.rank} of {env.world_size}, no place in a job of "
                           f"{env.world_size} ranks (0 to the world size less one): let torchrun or srun set them, "
                           f"not a script{said[1]}")
    return env


def launcher_env(environ: dict) -> DistEnv:
    """dist_env's reading of the variables, before its check that they make a place."""
    job = {"node": environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
           "job_id": environ.get("SLURM_JOB_ID"), "job_tasks": int(environ.get("SLURM_NTASKS", 1)),
           "cpus_per_task": "SLURM_CPUS_PER_TASK" in environ}
    present = [v for v in TORCHRUN_VARS[:3] if v in environ]
    srun_step = "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ
    if present and len(present) < 3 and srun_step:
        # a job script's exports (SLURM's DDP recipes: WORLD_SIZE=$SLURM_NTASKS before srun): srun's own variables
        # place each rank, and what the script said is held to them
        return srun_agreed(environ, job, present)
    if present:
        if len(present) < 3:
            missing = [v for v in TORCHRUN_VARS[:3] if v not in environ]
            raise ClusterError(f"{', '.join(present)} set but not {', '.join(missing)}: "
                               "launch with torchrun, srun, or neither")
        # torchrun (or accelerate launch) inside an srun task: SLURM_CPUS_PER_TASK is that one task's,
        # shared by the node's ranks, not each rank's own
        return DistEnv(rank=int(environ["RANK"]), world_size=int(environ["WORLD_SIZE"]),
                       local_rank=int(environ["LOCAL_RANK"]), master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
                       master_port=int(environ.get("MASTER_PORT", 29500)), launcher="torchrun",
                       local_world_size=int(environ.get("LOCAL_WORLD_SIZE", environ["WORLD_SIZE"])),
                       **{**job, "cpus_per_task": False})
    if "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ:
        return slurm_env(environ, job)
    return DistEnv(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="single",
                   **job)


def srun_agreed(environ: dict, job: dict, present: list[str]) -> DistEnv:
    """srun's place for this task, where the torchrun variables a job script exported (some, not all) say the same."""
    env = slurm_env(environ, job)
    srun_says = {"RANK": env.rank, "WORLD_SIZE": env.world_size, "LOCAL_RANK": env.local_rank}
    wrong = [v for v in present if environ[v].strip() != str(srun_says[v])]
    if wrong:
        raise ClusterError(
            f"{', '.join(f'{v}={environ[v]}' for v in wrong)} in an srun step whose task is rank {env.rank} of "
            f"{env.world_size} (local rank {env.local_rank}): unset {' '.join(wrong)} in the job script (srun's own "
            "variables place each rank; WORLD_SIZE counts ranks, not nodes)")
    return env


def slurm_env(environ: dict, job: dict) -> DistEnv:
    """One rank per srun task; the rendezvous at the step's first node, on the step's own port."""
    try:
        world = int(environ.get("SLURM_STEP_NUM_TASKS") or environ["SLURM_NTASKS"])
        nodelist = environ.get("SLURM_STEP_NODELIST") or environ["SLURM_JOB_NODELIST"]
        nodes = expand_nodes(nodelist)
        port = int(environ.get("MASTER_PORT")
                   or slurm_port(int(environ["SLURM_JOB_ID"]), int(environ["SLURM_STEP_ID"])))
        per_node = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE", "1"))
    except SlurmEnvError as exn:
        raise ClusterError(str(exn)) from None
    rank, node, addr = int(environ["SLURM_PROCID"]), job["node"], environ.get("MASTER_ADDR") or nodes[0]
    # Every rank meets at the node list's first node, where rank 0's store is under block and cyclic distributions;
    # a heterogeneous job numbers its tasks component by component, and --distribution=arbitrary as SLURM_HOSTFILE
    # lists them, both over a node list sorted by name. Only rank 0 can tell: at once, not after the rendezvous timeout.
    if rank == 0 and not environ.get("MASTER_ADDR") and node in nodes and node != addr:
        raise ClusterError(
            f"rank 0 runs on {node}, but the ranks meet on {addr}, the first node of the step's {nodelist} (a "
            "heterogeneous job or srun --distribution=arbitrary puts rank 0 elsewhere): export MASTER_ADDR with rank "
            "0's node to every task (a heterogeneous job's: the first of `scontrol show hostnames "
            "$SLURM_JOB_NODELIST_HET_GROUP_0`; an arbitrary distribution's: the first line of $SLURM_HOSTFILE)")
    here = node_place(nodes, node, int(environ.get("SLURM_NODEID", 0)))  # (SLURM_STEP_TASKS_PER_NODE follows it)
    local_world = per_node[here] if here < len(per_node) else 1
    asked = environ.get("SLURM_CPUS_PER_TASK", "")
    job_cpus = job_cpus_by_node(environ)
    shares = [job_cpus.get(name, 0) // max(1, tasks) for name, tasks in zip(nodes, per_node)]
    return DistEnv(rank=rank, world_size=world, local_rank=int(environ.get("SLURM_LOCALID", 0)), master_addr=addr,
                   master_port=port, launcher="slurm", local_world_size=local_world,
                   cpus_asked=int(asked) if asked.isdigit() else 0, job_cpus_here=job_cpus.get(node, 0),
                   job_cpus_a_task=min(shares) if len(shares) == len(nodes) and all(shares) else 0,
                   one_thread_a_core="SLURM_THREADS_PER_CORE" in environ
                   or "nomultithread" in environ.get("SLURM_HINT", ""),
                   tasks_on_its_cpus=tasks_bound_alike(environ, int(environ.get("SLURM_LOCALID", 0)), local_world),
                   **job)


def tasks_bound_alike(environ: dict, local_rank: int, local_world: int) -> int:
    """How many of the node's tasks srun bound to this task's CPUs, from its SLURM_CPU_BIND_LIST (a mask or a CPU for
    each local task, taken round again where fewer); 0 where not said. Without --cpus-per-task, srun (task/affinity)
    binds each task to a core or socket of its own where the step holds as many as it has tasks, and otherwise gives
    every task the one mask of the step's CPUs: an affinity that is the task's own is not to be divided again."""
    # Slurm writes the unit a mask was made for before it ("ldoms,mask_cpu:": task/affinity's masks clear only the
    # threads, cores and sockets units), and "mask_cpu:" or "map_cpu:" last
    kind = environ.get("SLURM_CPU_BIND_TYPE", "").rsplit(",", 1)[-1]
    if kind not in ("mask_cpu:", "map_cpu:"):
        return 0  # none, or a binding by rank or locality domain: not said as CPUs
    try:
        bound = [int(cpus, 16) if kind.startswith("mask") or cpus.lower().startswith("0x") else int(cpus)
                 for cpus in environ.get("SLURM_CPU_BIND_LIST", "").split(",")]
    except ValueError:  # an empty list, or not as srun writes it
        return 0
    mine = bound[local_rank % len(bound)]
    return sum(bound[task % len(bound)] == mine for task in range(max(local_world, local_rank + 1)))


def job_cpus_by_node(environ: dict) -> dict[str, int]:
    """The job's CPUs on each of its nodes, from SLURM_JOB_CPUS_PER_NODE ('72(x2),36', over SLURM_JOB_NODELIST);
    none where not said, or not as SLURM says it (nothing to weigh a task's CPUs against)."""
    try:
        nodes = expand_nodes(environ["SLURM_JOB_NODELIST"])
        counts = tasks_per_node(environ["SLURM_JOB_CPUS_PER_NODE"])  # (the same syntax as the tasks a node)
    except (KeyError, SlurmEnvError):
        return {}
    # Not another node's count: `srun --het-group=1` in a heterogeneous job's batch script leaves both variables
    # component 0's (the batch script's; srun sets only the _HET_GROUP_1 ones), whose list does not hold its nodes
    return dict(zip(nodes, counts)) if len(counts) == len(nodes) else {}


def process_env(environ: dict) -> DistEnv:
    """This process's place as the public loader sees it, in one value: the launcher's (dist_env),
    with torch.distributed's rank and world size where a group is initialised, however it was made
    (mp.spawn sets no variable). A group with no launcher behind it shares the node's CPUs among
    LOCAL_WORLD_SIZE ranks if that is set, else the whole world (an upper bound of this node's)."""
    if not (dist.is_available() and dist.is_initialized()):
        return dist_env(environ)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        env = dist_env(environ)
    except ClusterError:  # half a launcher's variables, which the group does not need
        env = dist_env({})
    if env.launcher != "single":
        return replace(env, rank=rank, world_size=world)
    local = int(environ.get("LOCAL_WORLD_SIZE") or world)
    return replace(env, rank=rank, world_size=world, local_rank=rank % local, local_world_size=local)


def cpu_threads(env: DistEnv, cpus: int) -> int:
    """Intra-op threads per rank: its CPUs, shared with the other ranks of the node unless SLURM
    already gave each task its own (--cpus-per-task, or srun's binding of each task to its own CPUs)."""
    if env.cpus_per_task:
        return cpus
    return max(1, cpus // (env.tasks_on_its_cpus or env.local_world_size))


def cpus_short(env: DistEnv, affinity: int) -> str | None:
    """What to say where srun pinned this task to fewer CPUs than the job holds for it (`affinity`: the CPUs its
    mask allows), so that its loader decodes on one or two threads and its GPU waits; None otherwise. Slurm 22.05
    to 23.02's srun inside a batch script does not take the job's --cpus-per-task (SLURM_CPUS_PER_TASK, exported,
    still says it; 23.11 reads it again, and no longer SRUN_CPUS_PER_TASK), and srun pins each task to 1 CPU unless
    told. Where no --cpus-per-task was given at all, the job's CPUs on this node shared by its tasks are what a task
    could have. Pure."""
    if env.launcher != "slurm":
        return None
    threads = default_workers(env, affinity)  # (its share of them where none are said to be its own: the loader's)
    decodes = f"its loader decodes on {threads} thread{'s' if threads > 1 else ''}, and a GPU waits on it"
    if env.cpus_asked:
        if affinity >= env.cpus_asked:
            return None
        return (f"this task may use {affinity} CPU{'s' if affinity > 1 else ''} (its affinity), not the "
                f"{env.cpus_asked} of SLURM_CPUS_PER_TASK: Slurm 22.05 to 23.02's srun does not take the job's "
                f"--cpus-per-task: {decodes}. Give srun --cpus-per-task={env.cpus_asked} (or, on those versions, "
                "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK before srun)")
    if env.one_thread_a_core:  # SLURM_JOB_CPUS_PER_NODE may count every thread of the job's cores (CR_Core), each
        return None  # task may use one of a core's: its half of a hyperthreaded node's share is all it could have
    share = env.job_cpus_here // env.local_world_size
    if affinity * 2 > share:  # (also where the job's CPUs are not said: share 0)
        return None
    # srun gives every task of the step as many: what the step's node of the fewest a task can give (72(x2),36)
    give = min(share, env.job_cpus_a_task or share)
    return (f"this task may use {affinity} of the {env.job_cpus_here} CPUs the job has on {env.node}, which its "
            f"{env.local_world_size} task{'s' if env.local_world_size > 1 else ''} there share: srun pins each task "
            f"to --cpus-per-task CPUs, 1 unless asked: {decodes}. Give srun --cpus-per-task={give}"
            + (" (what the step's every node has for each of its tasks)" if give < share else ""))


def default_workers(env: DistEnv, cpus: int) -> int:
    """Decoding threads per rank when none are asked for: the rank's share of the CPUs it may use
    (cpu_threads), less one for the thread that runs the training step; at least one."""
    return max(1, cpu_threads(env, cpus) - 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(env: DistEnv, device: torch.device, timeout_s: float) -> None:
    """Join the process group (torch's backend for the device: NCCL, or RCCL under ROCm, on GPUs, XCCL on Intel's,
    gloo on the CPU); fail within `timeout_s` if a peer never comes."""
    from train.accelerators import backend_for

    backend = backend_for(device)
    port = env.master_port or free_port()
    try:
        dist.init_process_group(backend, init_method=f"tcp://{env.master_addr}:{port}", rank=env.rank,
                                world_size=env.world_size, timeout=datetime.timedelta(seconds=timeout_s),
                                **({"device_id": device} if device.type != "cpu" else {}))
        # The store answers before every rank has joined; one collective proves they all did.
        dist.barrier()
    except Exception as exn:  # torch raises several types here; all mean the same to the user, but one
        if port_in_use(exn):  # rank 0 could not listen: at once, and no peer is to blame
            raise ClusterError(
                f"rank {env.rank}/{env.world_size} on {env.node}: the rendezvous port {port} is in use on {env.node} "
                "by another process (another job's rendezvous, whose job id gives the same port, or a MASTER_PORT "
                "set to a port in use): rerun it as another srun step or job (either takes another port), or export "
                "MASTER_PORT with a free port to every task") from None
        raise ClusterError(
            f"rank {env.rank}/{env.world_size} on {env.node}: rendezvous at {env.master_addr}:{port} failed "
            f"within {timeout_s:.0f} s ({type(exn).__name__}: {str(exn).splitlines()[0] if str(exn) else ''}). "
            "A peer never arrived or died: check the other tasks' logs (did one fail its dataset check?), "
            "and that the first node of the job is reachable on that port.") from None
