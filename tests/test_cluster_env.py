"""The distributed environment from SLURM, torchrun or nothing: pure, from dicts."""

import pytest

from conftest import ROOT
from shards.slurm import PORT_RANGES, PORT_SPAN, expand_nodes, slurm_port, tasks_per_node
from train.cluster import ClusterError, cpu_threads, default_workers, dist_env

SRUN = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "7",
        "SLURM_NTASKS": "8", "SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "node[01-04,7]", "SLURM_NODEID": "2",
        "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURMD_NODENAME": "node03"}


def test_srun_gives_rank_world_local_rank_and_the_first_node():
    env = dist_env(SRUN)
    assert (env.rank, env.world_size, env.local_rank, env.launcher) == (5, 7, 1, "slurm")
    assert env.master_addr == "node01" and env.master_port == slurm_port(4242, 0)
    assert env.local_world_size == 2 and env.node == "node03"


def test_ports_differ_between_steps_and_jobs():
    ports = {slurm_port(job, step) for job in (4242, 4243) for step in (0, 1, 2)}
    assert len(ports) == 6 and all(20000 <= p < 32768 for p in ports)


@pytest.mark.parametrize("job", [0, 93, 4242, 10**7 + 3])
def test_a_prepare_step_never_takes_a_train_step_port(job):
    """prepare's node group and train's ranks may run as concurrent steps of one job."""
    train = {slurm_port(job, step, "train") for step in range(PORT_SPAN)}
    prepare = {slurm_port(job, step, "prepare") for step in range(PORT_SPAN)}
    assert not train & prepare and len(train) == len(prepare) == PORT_SPAN
    jobs = {slurm_port(j, 0, "prepare") for j in range(job, job + PORT_SPAN)}  # every port of the range in use
    assert len(jobs) == PORT_SPAN
    starts = sorted(PORT_RANGES.values())
    assert all(b - a >= PORT_SPAN for a, b in zip(starts, starts[1:])) and starts[-1] + PORT_SPAN <= 32768


def test_hostlists_and_tasks_per_node_expand_properly():
    assert expand_nodes("gpu[07-09],cpu1") == ["gpu07", "gpu08", "gpu09", "cpu1"]
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_torchrun_and_explicit_master_override_slurm():
    env = dist_env({**SRUN, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.1.2.3",
                    "MASTER_PORT": "12345"})
    assert (env.rank, env.world_size, env.master_addr, env.master_port, env.launcher) == (1, 2, "10.1.2.3", 12345,
                                                                                         "torchrun")
    env = dist_env({**SRUN, "MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "1999"})
    assert (env.launcher, env.master_addr, env.master_port) == ("slurm", "10.9.9.9", 1999)


def test_half_a_torchrun_environment_is_an_error():
    with pytest.raises(ClusterError, match="RANK set but not WORLD_SIZE, LOCAL_RANK"):
        dist_env({"RANK": "0"})


@pytest.mark.parametrize("variables, message", [
    ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK and WORLD_SIZE say rank 3 of 2, no place"),  # WORLD_SIZE=$SLURM_NNODES
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "rank -1 of 2"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "rank 0 of 0"),
    ({"RANK": "0", "WORLD_SIZE": ""}, "not a whole number"),
    ({"RANK": "one", "WORLD_SIZE": "2"}, "not a whole number"),
    ({**SRUN, "SLURM_PROCID": "7"}, "SLURM_PROCID and SLURM_STEP_NUM_TASKS say rank 7 of 7"),
])
def test_variables_that_make_no_place_in_the_job_are_one_line_not_an_error_deep_in_the_read_plan(variables, message):
    """RANK=3 with WORLD_SIZE=2 was rank 3 of 2: the loader then failed with an IndexError in its read plan, and
    WORLD_SIZE=0 with a ZeroDivisionError; a variable that is no number with int()'s ValueError."""
    launcher = {"LOCAL_RANK": "0"} if "RANK" in variables else {}
    with pytest.raises(ClusterError, match=message) as refused:
        dist_env({**launcher, **variables})
    assert "\n" not in str(refused.value) and "torchrun or srun" in str(refused.value)


def test_a_plain_process_is_rank_zero_of_one():
    env = dist_env({})
    assert (env.rank, env.world_size, env.launcher) == (0, 1, "single")


def test_cpu_threads_are_shared_unless_slurm_gave_each_task_its_own():
    assert cpu_threads(dist_env(SRUN), 16) == 8
    assert cpu_threads(dist_env({**SRUN, "SLURM_CPUS_PER_TASK": "16"}), 16) == 16


@pytest.mark.parametrize("kind, bound, threads", [
    ("mask_cpu:", "0x0000FFFF,0xFFFF0000", 16),  # srun's auto binding, a socket a task: its own 16
    ("mask_cpu:", "0x3,0xC", 16),  # a core a task (as srun writes it)
    ("ldoms,mask_cpu:", "0x0000FFFF,0xFFFF0000", 16),  # --cpu-bind=ldoms: its unit named before (Slurm's env.c)
    ("ldoms,mask_cpu:", "0xFFFFFFFF,0xFFFFFFFF", 8),  # both tasks in one locality domain: shared
    ("map_cpu:", "3,7", 16),  # --cpu-bind=map_cpu: a CPU of its own
    ("mask_cpu:", "0xFFFFFFFF", 8),  # auto binding off: every task the step's one mask, shared
    ("mask_cpu:", "0xF,0xF", 8),  # the same mask twice: shared
    ("none", "", 8),  # --cpu-bind=none: the step's CPUs, shared
])
def test_cpu_threads_are_a_bound_tasks_own_cpus_without_cpus_per_task(kind, bound, threads):
    """srun without --cpus-per-task binds each task to a core or socket of its own where the step holds as many as
    it has tasks (task/affinity's auto binding): that affinity, already the task's share, was divided by the node's 2
    tasks again, and a task of a socket of 16 CPUs ran 8 threads."""
    environ = {**SRUN, "SLURM_CPU_BIND_TYPE": kind, "SLURM_CPU_BIND_LIST": bound}
    assert cpu_threads(dist_env(environ), 16) == threads
    assert default_workers(dist_env(environ), 16) == threads - 1


def test_the_job_is_read_with_the_ranks():
    env = dist_env(SRUN)
    assert (env.job_id, env.job_tasks, env.cpus_per_task) == ("4242", 8, False)
    alone = dist_env({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURMD_NODENAME": "gpu3"})
    assert (alone.launcher, alone.job_tasks, alone.node) == ("single", 4, "gpu3")


@pytest.mark.parametrize("environ, cpus, workers", [
    ({}, 16, 15),  # one process: all but the training thread's
    ({**SRUN, "SLURM_CPUS_PER_TASK": "4"}, 4, 3),  # srun --cpus-per-task: the task's own
    (SRUN, 16, 7),  # srun without it: the node's CPUs shared by its 2 tasks
    ({"RANK": "1", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "SLURM_CPUS_PER_TASK": "32"}, 32, 7),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 2, 1),  # never none
])
def test_default_workers_are_the_ranks_share_of_its_cpus_less_one(environ, cpus, workers):
    """torchrun inside an srun task: SLURM_CPUS_PER_TASK is the task's, shared by the node's 4 ranks."""
    assert default_workers(dist_env(environ), cpus) == workers


def test_every_one_line_error_is_a_user_error_caught_in_one_place():
    """The house rule: errors of the user's making derive from shards.errors.UserError, which each
    command line catches once (prepare/cli.py, train/run/cli.py) to print one line without a traceback."""
    from prepare.config import PrepareError
    from prepare.labels import LabelError
    from prepare.node_group import PeerFailed
    from prepare.sources.base import SourceError
    from prepare.workers import WorkerDied
    from shards.errors import UserError
    from shards.manifest import DamagedData, DatasetNotReady
    from shards.slurm import SlurmEnvError
    from train import ConfigError, ResumeError
    from train.cluster import ClusterError

    for error in (PrepareError, LabelError, PeerFailed, SourceError, WorkerDied, DamagedData, DatasetNotReady,
                  SlurmEnvError, ConfigError, ResumeError, ClusterError):
        assert issubclass(error, UserError), error
    for cli in ("prepare/cli.py", "train/run/cli.py"):
        assert (ROOT / cli).read_text().count("except UserError") == 1, cli


def test_a_rendezvous_port_another_process_holds_is_said_so_with_what_to_do():
    """Rank 0 could not listen on the job's port (another job's rendezvous on the node, whose job id maps to the same
    port, or a MASTER_PORT in use): it was told as a peer that never arrived, after a wait it never made."""
    import socket

    import torch

    from train.cluster import DistEnv, init_distributed

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = DistEnv(rank=0, world_size=2, local_rank=0, master_addr="127.0.0.1", master_port=port,
                      launcher="slurm", node="gpu07")
        with pytest.raises(ClusterError) as refused:
            init_distributed(env, torch.device("cpu"), 5)
    said = str(refused.value)
    assert f"port {port} is in use on gpu07" in said and "MASTER_PORT" in said and "never arrived" not in said


# A heterogeneous job's step as SLURM 22.05 gives it (`srun --het-group=0,1`: component 0 one task on node2,
# component 1 two on node1): the step's node list is sorted by name, its tasks a node in that order, but the
# tasks are numbered component by component, so rank 0 is on node2, and SLURM_NODEID follows the components.
HET_STEP = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "3", "SLURM_NTASKS": "3", "SLURM_JOB_ID": "268",
            "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_HET_SIZE": "2"}
HET_TASKS = [{"SLURM_PROCID": "0", "SLURMD_NODENAME": "node2", "SLURM_NODEID": "0", "SLURM_LOCALID": "0"},
             {"SLURM_PROCID": "1", "SLURMD_NODENAME": "node1", "SLURM_NODEID": "1", "SLURM_LOCALID": "0"},
             {"SLURM_PROCID": "2", "SLURMD_NODENAME": "node1", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"}]


def test_rank_0_off_the_steps_first_node_is_refused_at_once_with_what_to_do():
    """A heterogeneous job (or srun --distribution=arbitrary, whose SLURM_NODEID is right but rank 0 is wherever
    SLURM_HOSTFILE's first line says) put rank 0 on node2 while every rank met at node1, the node list's first: on
    a cluster rank 0's store was on one node and the ranks knocked at another until --dist-timeout, told as a peer
    that never arrived. Rank 0 knows where it is: it says so at once; MASTER_ADDR, given, is taken as it is."""
    with pytest.raises(ClusterError, match="rank 0 runs on node2, but the ranks meet on node1") as refused:
        dist_env({**HET_STEP, **HET_TASKS[0]})
    assert "MASTER_ADDR" in str(refused.value) and "\n" not in str(refused.value)
    arbitrary = {**HET_STEP, **HET_TASKS[0], "SLURM_NODEID": "1"}
    with pytest.raises(ClusterError, match="rank 0 runs on node2"):
        dist_env(arbitrary)
    assert dist_env({**arbitrary, "MASTER_ADDR": "node2"}).master_addr == "node2"
    assert dist_env({**HET_STEP, **HET_TASKS[1]}).master_addr == "node1"  # only rank 0 can tell


def test_a_nodes_tasks_are_read_by_its_name_where_the_node_ids_follow_a_heterogeneous_jobs_components():
    """SLURM_NODEID 0 on node2 read the node list's first entry (node1's 2 tasks): its one rank took half its CPUs."""
    sizes = [dist_env({**HET_STEP, **task, "MASTER_ADDR": "node2"}).local_world_size for task in HET_TASKS]
    assert sizes == [1, 2, 2]


def test_a_job_scripts_world_size_under_srun_is_taken_where_it_agrees_with_srun_and_refused_where_it_does_not():
    """SLURM's DDP recipes export MASTER_ADDR, MASTER_PORT and WORLD_SIZE=$SLURM_NTASKS in the job script, then srun:
    every task was refused with 'WORLD_SIZE set but not RANK, LOCAL_RANK: launch with torchrun, srun, or neither',
    launched with srun. srun's own variables place each rank; what the script exported is held to them."""
    exported = {**SRUN, "WORLD_SIZE": "7", "MASTER_ADDR": "node01", "MASTER_PORT": "23456"}
    env = dist_env(exported)
    assert (env.launcher, env.rank, env.world_size, env.local_rank, env.master_port) == ("slurm", 5, 7, 1, 23456)
    assert dist_env({**SRUN, "LOCAL_RANK": "1"}).launcher == "slurm"
    with pytest.raises(ClusterError) as refused:  # WORLD_SIZE=$SLURM_NNODES
        dist_env({**exported, "WORLD_SIZE": "4"})
    said = str(refused.value)
    assert "WORLD_SIZE=4" in said and "rank 5 of 7" in said and "unset WORLD_SIZE" in said and "\n" not in said
    with pytest.raises(ClusterError, match="RANK set but not WORLD_SIZE, LOCAL_RANK"):  # outside srun, as before
        dist_env({"RANK": "0"})


def test_a_task_srun_pinned_to_fewer_cpus_than_the_job_holds_for_it_is_named_with_what_to_give_srun():
    """Slurm 22.05 to 23.02's srun inside a batch script does not take the job's --cpus-per-task (23.11 reads
    SLURM_CPUS_PER_TASK again, and SRUN_CPUS_PER_TASK no more: the advice names its versions), and pins each task
    to 1 CPU: the loader decoded on one thread and the GPU waited, without a word. Pure: the decision, from the
    variables srun sets and the task's affinity."""
    from train.cluster import cpus_short

    exported = dist_env({**SRUN, "SLURM_CPUS_PER_TASK": "8"})  # the batch script's --cpus-per-task=8, exported
    assert (exported.cpus_asked, exported.job_cpus_here) == (8, 0)
    assert cpus_short(exported, 1) == (
        "this task may use 1 CPU (its affinity), not the 8 of SLURM_CPUS_PER_TASK: Slurm 22.05 to 23.02's srun "
        "does not take the job's --cpus-per-task: its loader decodes on 1 thread, and a GPU waits on it. Give srun "
        "--cpus-per-task=8 (or, on those versions, export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK before srun)")
    assert cpus_short(exported, 8) is None  # srun --cpus-per-task=8
    assert cpus_short(exported, 64) is None  # SLURM pins nothing (TaskPlugin=task/none): the node's every CPU
    # no --cpus-per-task anywhere: node03's 64 CPUs of the job, shared by its 2 tasks of this step
    unasked = dist_env({**SRUN, "SLURM_JOB_NODELIST": "node[01-04,7]", "SLURM_JOB_CPUS_PER_NODE": "48(x2),64,48(x2)"})
    assert (unasked.cpus_asked, unasked.job_cpus_here, unasked.local_world_size) == (0, 64, 2)
    assert cpus_short(unasked, 2) == (
        "this task may use 2 of the 64 CPUs the job has on node03, which its 2 tasks there share: srun pins each "
        "task to --cpus-per-task CPUs, 1 unless asked: its loader decodes on 1 thread, and a GPU waits on it. Give "
        "srun --cpus-per-task=32")
    assert cpus_short(unasked, 16).startswith("this task may use 16 of the 64 CPUs")  # half its share: said
    # the threads its loader decodes on, as the loader counts them: 16 CPUs shared by the node's 2 tasks, less one
    assert "its loader decodes on 7 threads" in cpus_short(unasked, 16)
    assert cpus_short(unasked, 17) is None and cpus_short(unasked, 64) is None
    for said in ({"SLURM_JOB_NODELIST": "node[01-04,7]", "SLURM_JOB_CPUS_PER_NODE": "lots"},
                 {"SLURM_JOB_NODELIST": "node[01-", "SLURM_JOB_CPUS_PER_NODE": "64(x5)"},
                 {"SLURM_JOB_NODELIST": "node[01-04,7]", "SLURM_JOB_CPUS_PER_NODE": "64"}, {}):
        env = dist_env({**SRUN, **said})
        assert env.job_cpus_here == 0 and cpus_short(env, 1) is None  # nothing to weigh it against
    # torchrun's ranks (in an srun task or not) and a lone process share what they were given: not srun's pinning
    torchrun = dist_env({**SRUN, "SLURM_CPUS_PER_TASK": "8", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert cpus_short(torchrun, 1) is None and cpus_short(dist_env({"SLURM_CPUS_PER_TASK": "8"}), 1) is None


@pytest.mark.parametrize("one_thread", [{"SLURM_HINT": "nomultithread"}, {"SLURM_THREADS_PER_CORE": "1"}])
def test_a_task_of_one_thread_a_core_is_not_told_to_ask_for_the_threads_it_may_not_use(one_thread):
    """sbatch --hint=nomultithread (or --threads-per-core=1) --ntasks-per-node=2 on a node of 2 threads a core:
    SelectTypeParameters=CR_Core gives the job 2 whole cores, and SLURM_JOB_CPUS_PER_NODE counts their 4 threads
    (srun(1): "the job allocation will include four CPUs"); srun binds each task to one thread of its core. Its
    affinity of 1 is all it may use: "Give srun --cpus-per-task=2" was a false alarm, asking srun for 2 cores a task
    where the job holds 1."""
    from train.cluster import cpus_short

    job = {"SLURM_JOB_NODELIST": "node[01-04,7]", "SLURM_JOB_CPUS_PER_NODE": "4(x5)"}
    assert cpus_short(dist_env({**SRUN, **job, **one_thread}), 1) is None
    assert cpus_short(dist_env({**SRUN, **job}), 1).endswith("Give srun --cpus-per-task=2")  # a thread a task: said


def test_a_heterogeneous_jobs_second_component_is_not_weighed_against_the_firsts_cpus():
    """`srun --het-group=1` in a heterogeneous job's batch script: SLURM_JOB_NODELIST and SLURM_JOB_CPUS_PER_NODE
    stay component 0's (the batch script's node, cpu01 with 128 CPUs of the job; srun sets only the _HET_GROUP_1
    ones). The task on gpu01 was weighed against cpu01's 128, as the first node's count stood in for a node not
    listed: "Give srun --cpus-per-task=32" on a node where the job holds 8 CPUs. So are counts that do not match the
    node list (a hand's export)."""
    from train.cluster import cpus_short

    step = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "8",
            "SLURM_JOB_ID": "91", "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_NODEID": "0",
            "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURMD_NODENAME": "gpu01", "SLURM_JOB_NODELIST": "cpu01",
            "SLURM_JOB_CPUS_PER_NODE": "128", "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[01-02]",
            "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "8(x2)"}
    env = dist_env(step)
    assert env.job_cpus_here == 0 and cpus_short(env, 1) is None
    for listed in ({"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_CPUS_PER_NODE": "128"},  # one count, two nodes
                   {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_CPUS_PER_NODE": "128(x3)"}):
        assert dist_env({**step, **listed}).job_cpus_here == 0
    assert dist_env({**step, "SLURM_JOB_NODELIST": "cpu01,gpu[01-02]", "SLURM_JOB_CPUS_PER_NODE": "128,8(x2)"}
                    ).job_cpus_here == 8  # srun --het-group=0,1: the job's lists, joined, as srun sets them


def test_one_srun_task_as_the_tests_set_it_has_none_of_the_job_the_tests_run_in(monkeypatch):
    """The tests of the CPUs srun pinned a task to (tests/test_library.py, tests/test_settings.py) set one task's
    variables: run in a SLURM job (`srun -c8 pytest`), its SLURM_CPUS_PER_TASK, SLURM_HINT and SLURM_JOB_CPUS_PER_NODE
    were taken for that task's, and those tests failed on another message or none."""
    import os

    from conftest import as_one_srun_task

    for name, value in {"SLURM_CPUS_PER_TASK": "8", "SLURM_HINT": "nomultithread", "SLURM_JOB_CPUS_PER_NODE": "64",
                        "SRUN_CPUS_PER_TASK": "8", "SLURM_THREADS_PER_CORE": "1"}.items():
        monkeypatch.setenv(name, value)
    as_one_srun_task(monkeypatch, SLURM_JOB_CPUS_PER_NODE="2")
    env = dist_env(dict(os.environ))
    assert (env.cpus_asked, env.job_cpus_here, env.one_thread_a_core, env.launcher) == (0, 2, False, "slurm")
    assert not [name for name in os.environ if name.startswith("SRUN_")]


def test_the_cpus_per_task_to_give_srun_is_one_every_node_of_the_step_can_give():
    """--exclusive on nodes of 72 and 36 CPUs, 2 tasks each, srun not told: rank 0 on a node of 72 said "Give srun
    --cpus-per-task=36", which the node of 36 cannot give its 2 tasks (srun: More processors requested than
    permitted). The fewest a task has on any node of the step is what to give."""
    from train.cluster import cpus_short

    step = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "6",
            "SLURM_JOB_ID": "92", "SLURM_STEP_NODELIST": "gpu[01-03]", "SLURM_NODEID": "0",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURMD_NODENAME": "gpu01", "SLURM_JOB_NODELIST": "gpu[01-03]",
            "SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}
    env = dist_env(step)
    assert (env.job_cpus_here, env.job_cpus_a_task) == (72, 18)
    assert cpus_short(env, 1).endswith(
        "Give srun --cpus-per-task=18 (what the step's every node has for each of its tasks)")
    # a step on the two nodes of 72 alone (srun --nodes=2 in that job): each of its tasks can have 36
    alone = dist_env({**step, "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "gpu[01-02]",
                      "SLURM_STEP_TASKS_PER_NODE": "2(x2)"})
    assert alone.job_cpus_a_task == 36 and cpus_short(alone, 1).endswith("Give srun --cpus-per-task=36")
