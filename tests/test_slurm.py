"""Through a real SLURM: two slurmd "nodes" on this machine (jobs/local_cluster.sh), real srun,
salloc, sbatch and scancel, each node with its own SLURM_TMPDIR. CPU and gloo."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import webdataset as wds

from conftest import ARCH, BIG_SPEC, ROOT, SHARD_MB, tree_bytes, write_sample
from shards.manifest import read_complete_manifest, read_manifest
from shards.plan import steps_per_epoch, train_plan
from train.shard_index import key_hash
from train.run.metrics import read_metrics

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
CLUSTER_DIR = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/local-slurm"))
PY = sys.executable
TRAIN_CPU = f"--device cpu --arch {ARCH} --image-size 32 --log-every 1 --warmup-epochs 1 --shuffle-buffer 16"


def why_no_cluster() -> str | None:
    if os.geteuid() != 0:
        return "the local SLURM cluster needs root (slurmd runs jobs as their users)"
    missing = [c for c in ("slurmctld", "slurmd", "munged", "srun") if shutil.which(c) is None]
    if missing:
        return f"{', '.join(missing)} not installed: run `bash jobs/install.sh --dev` (Debian slurm-wlm, munge)"
    return None


@pytest.fixture(scope="session")
def slurm():
    reason = why_no_cluster()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the SLURM tests, but {reason}")
        pytest.skip(reason)
    env = {**os.environ, "SLURM_CONF": str(CLUSTER_DIR / "slurm.conf")}
    started = subprocess.run(["bash", "jobs/local_cluster.sh", "start", "--cancel-jobs"], cwd=ROOT,
                             capture_output=True, text=True)
    if started.returncode:
        pytest.fail(f"jobs/local_cluster.sh start failed:\n{started.stdout}{started.stderr}")
    return env


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(slurm):
    """A test that fails mid-job leaves the job holding both nodes for the next tests: cancel it."""
    yield
    subprocess.run(["scancel", "--full", "--quiet", "--partition=debug"], env=slurm)


def shell(slurm, script: str, timeout: float = 600, allocation: str = "") -> subprocess.CompletedProcess:
    """Run `script` in bash inside `salloc ALLOCATION`, from the repository root."""
    command = ["salloc", *allocation.split(), "bash", "-c", f"set -x; {script}"] if allocation else ["bash", "-c", script]
    return subprocess.run(command, cwd=ROOT, env=slurm, capture_output=True, text=True, timeout=timeout)


def node_dir(job_id: str, node: str) -> Path:
    return CLUSTER_DIR / "tmp" / node / f"job{job_id}"


def job_id_of(result: subprocess.CompletedProcess) -> str:
    return re.search(r"Granted job allocation (\d+)", result.stderr).group(1)


def planned_key_hash(data: Path, epoch: int, world: int, batch: int, seed: int = 0, buffer: int = 16) -> int:
    """What train_key_hash must be for an epoch, computed from the read plan and the shards' keys."""
    shards = read_manifest(data).splits["train"].shards
    keys = [[s["__key__"] for s in wds.WebDataset(str(data / shard.name), shardshuffle=False)] for shard in shards]
    total = 0
    for rank in range(world):
        plan = train_plan([s.samples for s in shards], epoch=epoch, seed=seed, world_size=world, rank=rank,
                          batch_size=batch, shuffle_buffer=buffer)
        total += sum(key_hash(keys[p.shard][i]) for p in plan.pieces for i in range(p.start, p.stop))
    return total % (1 << 40)


def test_prepare_once_per_node_then_train_four_ranks_on_two_nodes(slurm, sources, tmp_path):
    source, run = sources["official"], tmp_path / "run"
    prepare = f"{PY} -m prepare --source {source} --shard-size {SHARD_MB}"
    script = (f"srun --ntasks-per-node=1 {prepare} && "
              # the user mistake: two tasks per node, and each node must still be prepared once
              f"srun --ntasks-per-node=2 bash -c '{prepare} --dest $SLURM_TMPDIR/again' 2> {tmp_path}/mistake.log && "
              f"srun --kill-on-bad-exit=1 {PY} -m train --run-dir {run} {TRAIN_CPU} --epochs 1 --batch-size 4 --workers 1")
    result = shell(slurm, script, allocation="-N2 --ntasks-per-node=2")
    mistake_log = tmp_path / "mistake.log"
    assert result.returncode == 0, result.stderr[-5000:] + (mistake_log.read_text() if mistake_log.exists() else "")
    job = job_id_of(result)
    for node in ("node1", "node2"):
        manifests = [read_complete_manifest(node_dir(job, node) / name) for name in ("imagenet", "again")]
        assert manifests[0].splits == manifests[1].splits  # same source and seed: the same shards
    mistake = (tmp_path / "mistake.log").read_text()
    assert mistake.count("INFO done:") == 2 and mistake.count("nothing to do") == 2, mistake
    (record,) = read_metrics(run)
    assert record["world_size"] == 4 and record["val_images"] == len(sources_val(source))
    assert record["train_key_hash"] == planned_key_hash(node_dir(job, "node1") / "imagenet", 0, 4, 4)


def sources_val(source: Path) -> list:
    import tarfile
    with tarfile.open(source / "ILSVRC2012_img_val.tar") as tar:
        return tar.getnames()


def test_a_node_without_the_dataset_makes_train_fail_fast(slurm, sources, tmp_path):
    script = (f"srun -N1 -n1 -w node1 {PY} -m prepare --source {sources['official']} --shard-size {SHARD_MB} && "
              f"srun --kill-on-bad-exit=1 {PY} -m train --run-dir {tmp_path}/run {TRAIN_CPU} --epochs 1 "
              f"--batch-size 4 --dist-timeout 120")
    start = time.monotonic()
    result = shell(slurm, script, allocation="-N2 --ntasks-per-node=1")
    assert result.returncode != 0
    assert "no prepared dataset at" in result.stderr and "python -m prepare" in result.stderr
    assert time.monotonic() - start < 90  # not the 120 s rendezvous timeout, let alone 30 minutes


# ---------------------------------------------------------------- the shared read, through srun

def srun_prepare(slurm, source: Path, dests: Path, *extra: str, wrap: str = "", nodes: str = "-N2"):
    """`srun --ntasks-per-node=1 python -m prepare` with each node's --dest at dests/<node>, kept
    from one job to the next as a node's local disk is (SLURM_TMPDIR is per job)."""
    command = (f"{wrap} {PY} -m prepare --source {source} --dest {dests}/$SLURMD_NODENAME --shard-size 0.5 "
               f"--workers 1 --progress-interval 0.2 {' '.join(extra)}")
    return subprocess.Popen(["srun", *nodes.split(), "--ntasks-per-node=1", "--cpus-per-task=2", "bash", "-c", command],
                            cwd=ROOT, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def big_source(tmp_path: Path) -> Path:
    return write_sample(tmp_path / "source", "official", BIG_SPEC)


def source_bytes_read(trace: Path, source: Path) -> int:
    """Bytes that the traced processes' read calls returned from files under `source`
    (strace -f -y: each line names the file behind the descriptor)."""
    pattern = re.compile(r"\b(?:read|pread64)\(\d+<" + re.escape(str(source)) + r"/[^>]*>.*\) = (\d+)$")
    return sum(int(m.group(1)) for line in trace.read_text().splitlines() if (m := pattern.search(line)))


def test_two_nodes_each_read_half_of_the_source_and_write_a_one_node_prepares_bytes(slurm, tmp_path):
    source = big_source(tmp_path)
    reference = tmp_path / "reference"
    assert subprocess.run([PY, "-m", "prepare", "--source", source, "--dest", reference, "--shard-size", "0.5",
                           "--workers", "1"], cwd=ROOT, capture_output=True).returncode == 0
    traced = srun_prepare(slurm, source, tmp_path / "nodes",
                          wrap=f"strace -f -y -qq -e trace=read,pread64 -o {tmp_path}/trace.$SLURMD_NODENAME")
    out, err = traced.communicate(timeout=600)
    assert traced.returncode == 0, err
    archives = sum(f.stat().st_size for f in source.glob("*.tar"))
    counted = {}
    for node in ("node1", "node2"):
        dest = tmp_path / "nodes" / node
        assert tree_bytes(dest) == tree_bytes(reference)
        manifest = read_complete_manifest(dest)
        said = manifest.stats["read_from_source_bytes"]
        counted[node] = source_bytes_read(tmp_path / f"trace.{node}", source)
        # the log's figure, and the tracer's (its share, plus the archives' headers and tails that
        # every node reads to find the parts)
        assert f"{node} task" in err and "shared read: 2 of 2 nodes" in err
        assert 0.35 * archives < said < 0.65 * archives, (node, said, archives)
        assert said <= counted[node] < said + 0.05 * archives, (node, counted[node], said)
    assert sum(counted.values()) < 1.1 * archives  # today's design read 2x the archives


def test_a_node_killed_mid_exchange_stops_the_other_in_one_line_and_a_rerun_completes(slurm, tmp_path):
    source, dests = big_source(tmp_path), tmp_path / "nodes"
    step = srun_prepare(slurm, source, dests)
    deadline = time.monotonic() + 120
    while not any((dests / "node1" / ".prepare-tmp" / "train").glob("bucket-*")):
        assert time.monotonic() < deadline and step.poll() is None, step.communicate()
        time.sleep(0.005)
    task = node_task_pid("node2", str(dests))
    os.kill(task, signal.SIGKILL)
    start = time.monotonic()
    out, err = step.communicate(timeout=120)
    assert step.returncode != 0 and time.monotonic() - start < 60
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "[prepare node1 task 0]" in errors[0], err
    assert "node2 stopped answering" in errors[0] and "rerun" in errors[0]
    assert not (dests / "node1" / ".prepare-tmp").exists()  # the survivor removed its scratch
    assert (dests / "node2" / ".prepare-tmp").exists()  # killed outright: the rerun removes it
    rerun = srun_prepare(slurm, source, dests)
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert tree_bytes(dests / "node1") == tree_bytes(dests / "node2") and tree_bytes(dests / "node1")
    assert not (dests / "node2" / ".prepare-tmp").exists()


def node_task_pid(node: str, marker: str) -> int:
    """The pid of the prepare task that srun started on `node` (both "nodes" run on this machine)."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"prepare" in cmdline and cmdline[0].endswith(b"python") and f"SLURMD_NODENAME={node}".encode() in environ \
                and any(marker.encode() in arg for arg in cmdline) and parent_is_not_python(proc):
            return int(proc.name)
    raise AssertionError(f"no prepare task found on {node}")


def parent_is_not_python(proc: Path) -> bool:
    """The task itself, not one of its worker processes."""
    parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
    return b"python" not in Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")[0]


def test_a_requeue_where_one_node_holds_the_dataset_reads_shares_and_only_the_other_receives(slurm, tmp_path):
    source, dests = big_source(tmp_path), tmp_path / "nodes"
    alone = srun_prepare(slurm, source, dests, nodes="-N1 -w node1")
    assert alone.wait(timeout=600) == 0, alone.communicate()
    before = {p: p.stat().st_mtime_ns for p in (dests / "node1").rglob("*.tar")}
    both = srun_prepare(slurm, source, dests)
    _, err = both.communicate(timeout=600)
    assert both.returncode == 0, err
    assert "node2 needs the dataset" in err and "[prepare node1 task 0] INFO served: read" in err
    assert {p: p.stat().st_mtime_ns for p in (dests / "node1").rglob("*.tar")} == before
    assert tree_bytes(dests / "node2") == tree_bytes(dests / "node1")
    stats = read_complete_manifest(dests / "node2").stats
    whole = read_complete_manifest(dests / "node1").stats["read_from_source_bytes"]
    assert 0.35 * whole < stats["read_from_source_bytes"] < 0.65 * whole
    assert stats["received_from_nodes_bytes"] > 0.3 * whole


def job_state(slurm, job: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], env=slurm, capture_output=True, text=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def wait_job(slurm, job: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(slurm, job)
        if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        if state.get("Reason") in ("PartitionConfig", "BadConstraints", "PartitionNodeLimit"):
            subprocess.run(["scancel", job], env=slurm)
            raise AssertionError(f"job {job} can never start on the local cluster: {state}")
        time.sleep(1)
    subprocess.run(["scancel", job], env=slurm)
    raise AssertionError(f"job {job} did not finish in {timeout} s: {job_state(slurm, job)}")


def sbatch(slurm, script: str, tmp_path: Path, train_args: str, nodes: int = 2, more: str = "",
           options: tuple[str, ...] = ()) -> str:
    """Submit a job script in CPU test mode: the GPU and size options overridden on the command line (and
    `options`, a site's); `more`: more of the environment (",NAME=VALUE,...")."""
    cpu_mode = [f"--nodes={nodes}", "--ntasks-per-node=1", "--gpus-per-task=0", "--cpus-per-task=2",
                "--mem-per-cpu=100M", "--tmp=1G", "--time=30", f"--output={tmp_path}/job-%j.out", *options]
    export = (f"--export=ALL,IMAGENET={tmp_path / 'source'},RUN_DIR={tmp_path / 'run'},"
              f"PREPARE_ARGS=--shard-size {SHARD_MB},TRAIN_ARGS={train_args}{more}")
    result = subprocess.run(["sbatch", "--parsable", *cpu_mode, export, script], cwd=ROOT, env=slurm,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def preempted(slurm, job: str, log: Path, text: str = "epoch 0 step 3/") -> bool:
    """Once the job's log says `text`, what #SBATCH --signal=B:USR1@180 does before the time limit: signal the
    batch shell only. Whether the job is then requeued and pending within 120 s."""
    deadline = time.monotonic() + 300
    while text not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and job_state(slurm, job).get("JobState") in ("PENDING", "RUNNING"), \
            log.read_text() if log.exists() else job_state(slurm, job)
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=slurm, check=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = job_state(slurm, job)
        if int(state.get("Restarts", 0)) >= 1 and state.get("JobState") == "PENDING":
            return True
        time.sleep(0.5)
    return False


def start_requeued_now(slurm, job: str) -> None:
    """Skip the two minutes or so SLURM holds a requeued job before it may start again. Not within the second of the
    requeue: slurmd refuses a job credential made in the second it revoked the last start's (its times are whole
    seconds), and the job ends FAILED, never started ("Killing non-startable batch JobId=57: Job credential revoked"
    in slurmctld's log, once in the session that made this test's job 10 s shorter)."""
    time.sleep(1.2)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=slurm, check=True)


def test_sbatch_preempted_by_signal_checkpoints_requeues_and_resumes_exactly(slurm, sources, tmp_path):
    shutil.copytree(sources["official"], tmp_path / "source")
    job = sbatch(slurm, "jobs/imagenet.sbatch", tmp_path,
                 f"{TRAIN_CPU} --epochs 2 --batch-size 6 --workers 1", more=",STATS=1,STATS_EVERY=1")
    log = tmp_path / f"job-{job}.out"
    assert preempted(slurm, job, log), (job_state(slurm, job), log.read_text())
    start_requeued_now(slurm, job)
    state = wait_job(slurm, job)
    text = log.read_text()
    assert state["JobState"] == "COMPLETED" and int(state["Restarts"]) >= 1, (state, text)
    assert "forwarding SIGUSR1" in text and "requeueing SLURM job" in text
    # the job script always passes --resume auto: its first start says it found nothing, the requeued one what it found
    assert text.count(f"--resume auto: no checkpoint in {tmp_path / 'run'}: a new run") == 1
    assert f"resumed from {tmp_path / 'run'}/last.pt at epoch 0 step" in text
    # STATS=1: each node sampled while it trained, in both starts; neither has a GPU tool, which is said
    for node in ("node1", "node2"):
        sampled = (tmp_path / "run" / "stats" / f"vmstat-{node}.txt").read_text().splitlines()
        assert sum(line.split()[0].isdigit() for line in sampled) >= 4 and "free" in sampled[1], sampled[:3]
        assert text.count(f"sample_stats.sh: {node} has neither xpu-smi nor nvidia-smi: its GPUs are not sampled") == 2
    assert "srun: error" not in text.split("(restart 1)")[1]  # the samplers end by themselves, not killed
    # the requeued start took the run directory's lock, its earlier start's gone (train/run/run_lock.py)
    assert (tmp_path / "run" / ".train.lock").read_text().split()[3:5] == [job, state["Restarts"]]
    assert f"metrics:     {tmp_path / 'run'}/metrics.jsonl" in text
    records = read_metrics(tmp_path / "run")
    assert [r["epoch"] for r in records] == [0, 1]
    assert records[0]["resumed_at_step"] >= 3
    for node in ("node1", "node2"):  # each node staged into its own local disk
        read_complete_manifest(node_dir(job, node) / "imagenet")
    data = node_dir(job, "node1") / "imagenet"
    for record in records:
        assert record["train_key_hash"] == planned_key_hash(data, record["epoch"], 2, 6)
        assert record["val_images"] == read_manifest(data).splits["val"].samples


def test_the_job_script_runs_with_several_tasks_a_node_as_it_asks(slurm, sources, tmp_path):
    """imagenet.sbatch asks for 4 tasks a node (dawn.sbatch 8), the other tests 1: with several, srun took the job's
    task count from SLURM_NTASKS, which sbatch exports, and ignored the prepare step's --ntasks-per-node=1: it asked
    for a node's CPUs for every task and the job ended there ('Unable to create step ...: More processors requested
    than permitted'); STATS=1 started a sampler a task, two writing each node's file."""
    shutil.copytree(sources["official"], tmp_path / "source")
    job = sbatch(slurm, "jobs/imagenet.sbatch", tmp_path, f"{TRAIN_CPU} --epochs 1 --batch-size 4 --max-steps 2",
                 more=",STATS=1,STATS_EVERY=1", options=("--ntasks-per-node=2", "--cpus-per-task=1"))
    state = wait_job(slurm, job)
    text = (tmp_path / f"job-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", text
    assert "4 ranks (slurm launcher)" in text and "Ignoring --ntasks-per-node" not in text
    for node in ("node1", "node2"):
        read_complete_manifest(node_dir(job, node) / "imagenet")
        assert text.count(f"sample_stats.sh: {node} has neither xpu-smi nor nvidia-smi") == 1, text


def test_a_preemption_signal_while_the_job_prepares_requeues_it(slurm, sources, tmp_path):
    """#SBATCH --signal=B:USR1@180 that comes before training (the time limit near while prepare runs): USR1's
    default action ended the batch shell, and with it the job, not requeued. Now the job is requeued at once, and
    its next start prepares and trains."""
    shutil.copytree(sources["official"], tmp_path / "source")
    job = sbatch(slurm, "jobs/imagenet.sbatch", tmp_path, f"{TRAIN_CPU} --epochs 1 --batch-size 6 --workers 1")
    log = tmp_path / f"job-{job}.out"
    assert preempted(slurm, job, log, text="  data:"), (job_state(slurm, job), log.read_text())
    start_requeued_now(slurm, job)
    state = wait_job(slurm, job)
    text = log.read_text()
    assert state["JobState"] == "COMPLETED" and int(state["Restarts"]) == 1, (state, text)
    first_start = text.split("(restart 1)")[0]
    assert f"preemption signal before training: requeueing SLURM job {job}" in first_start
    assert "checkpoint: epoch" not in first_start
    assert [record["epoch"] for record in read_metrics(tmp_path / "run")] == [0]


def test_a_two_node_jobs_checkpoint_is_resumed_by_a_one_node_job(slurm, sources, tmp_path):
    """#52: a 2-node job preempted mid-epoch (its requeue then cancelled: the user moves the run) and a 1-node
    job given its run directory: the run's global batch of 12 on one rank, reading the epoch where the 2 ranks
    stopped, and the same samples each epoch as the run's 2-rank plan."""
    shutil.copytree(sources["official"], tmp_path / "source")
    # (64 px, not 32: steps slow enough that the signal, sent at step 3 of 15, lands within epoch 0 on a loaded
    # machine too; at 32 px a run at 9 steps a second once reached step 14 before it did)
    train_args = f"{TRAIN_CPU} --image-size 64 --epochs 2 --batch-size 6 --workers 1"
    first = sbatch(slurm, "jobs/imagenet.sbatch", tmp_path, train_args)
    log = tmp_path / f"job-{first}.out"
    assert preempted(slurm, first, log), job_state(slurm, first)
    subprocess.run(["scancel", first], env=slurm, check=True)
    assert "checkpoint: epoch 0 step" in log.read_text()

    second = sbatch(slurm, "jobs/imagenet.sbatch", tmp_path, train_args, nodes=1)
    state = wait_job(slurm, second)
    text = (tmp_path / f"job-{second}.out").read_text()
    assert state["JobState"] == "COMPLETED", text
    assert f"resumed from {tmp_path / 'run'}/last.pt at epoch 0 step" in text
    assert "resumed on 1 rank from 2: per-rank batch 6 -> 12; the same global batches of 12" in text
    assert "resumed on 1 rank from 2, the same global batches of 12: the same samples at every step, augmented the " \
           "same; not the same: BatchNorm's statistics are over 12 samples a rank (6 before)" in text
    records = read_metrics(tmp_path / "run")
    assert [(r["epoch"], r["world_size"], r["batch_size"]) for r in records] == [(0, 1, 12), (1, 1, 12)]
    assert records[0]["resumed_at_step"] >= 3
    data = node_dir(second, "node1") / "imagenet"
    for record in records:  # the run's 2-rank layout, read on one rank: the same samples
        assert record["train_key_hash"] == planned_key_hash(data, record["epoch"], 2, 6)
        assert record["steps"] == steps_per_epoch(read_manifest(data).splits["train"].samples, 2, 6)


def test_dawns_job_script_runs_on_two_nodes_with_the_cpu_and_samples_them(slurm, sources, tmp_path):
    """#51: jobs/dawn.sbatch (Intel's GPUs, eight ranks a node) in CPU test mode: its partition and GPUs overridden on
    the command line, DEVICE=cpu. Its oneCCL settings are exported to the ranks, the device reaches python -m
    train, and STATS (on by default there) samples each node's vmstat and says in one line that it has no xpu-smi."""
    shutil.copytree(sources["official"], tmp_path / "source")
    train_args = TRAIN_CPU.replace("--device cpu ", "") + " --epochs 1 --batch-size 6 --workers 1"
    job = sbatch(slurm, "jobs/dawn.sbatch", tmp_path, train_args, more=",DEVICE=cpu,STATS_EVERY=1",
                 options=("--partition=debug", "--gres=none"))
    state = wait_job(slurm, job)
    text = (tmp_path / f"job-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", text
    assert ("DAWN: 2 ranks on --device cpu, ZE_FLAT_DEVICE_HIERARCHY=FLAT, CCL_ATL_TRANSPORT=ofi FI_PROVIDER=verbs "
            "CCL_ZE_IPC_EXCHANGE=sockets") in text
    assert [r["epoch"] for r in read_metrics(tmp_path / "run")] == [0]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["settings"]["device"] == "cpu"
    for node in ("node1", "node2"):
        sampled = (tmp_path / "run" / "stats" / f"vmstat-{node}.txt").read_text().splitlines()
        assert sum(line.split()[0].isdigit() for line in sampled) >= 2, sampled[:3]
        assert text.count(f"sample_stats.sh: {node} has neither xpu-smi nor nvidia-smi: its GPUs are not sampled") == 1


def test_benchmark_job_script_runs_and_leaves_its_results(slurm, sources, tmp_path):
    shutil.copytree(sources["official"], tmp_path / "source")
    export = (f"--export=ALL,IMAGENET={tmp_path / 'source'},RUN_DIR={tmp_path / 'run'},"
              f"PREPARE_ARGS=--shard-size {SHARD_MB},"
              "BENCH_ARGS=--workers 1 --images 32 --batch-size 8 --warmup-batches 1 --modes data --no-dali "
              "--image-size 32")
    result = subprocess.run(["sbatch", "--parsable", "--gpus-per-task=0", "--cpus-per-task=2", "--mem-per-cpu=100M",
                             "--tmp=1G", "--time=30", f"--output={tmp_path}/job-%j.out", export,
                             "jobs/benchmark.sbatch"], cwd=ROOT, env=slurm, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip().split(";")[0]
    state = wait_job(slurm, job)
    log = (tmp_path / f"job-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", log
    assert f"benchmark results: {tmp_path / 'run'}/benchmark.jsonl" in log and "baseline ImageFolder" in log
    assert (tmp_path / "run" / "benchmark.png").exists()


def test_submit_runs_a_snapshot_of_the_committed_code(slurm, sources, tmp_path):
    """jobs/submit.sh, and through it the one-node job script run to completion. The source and the run directory
    as relative paths, the clone's: the run directory went inside the code's snapshot, and the next commit's job
    started the run over."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # the clone as jobs/install.sh leaves it: its build of the vendored libjpeg-turbo, which submit.sh copies into
    # the snapshot (which then builds only the native modules: 3 s, not 16)
    shutil.copytree(ROOT / "build" / "libjpeg-turbo", clone / "build" / "libjpeg-turbo", symlinks=True)
    shutil.copytree(sources["official"], tmp_path / "source")
    tracked = clone / "prepare" / "__init__.py"
    tracked.write_text(tracked.read_text() + "# an edit\n")
    env = {**slurm, "PYTHON": PY, "CODE_DIR": str(tmp_path / "code")}
    submit = ["bash", "jobs/submit.sh", "jobs/imagenet-1node.sbatch", "--parsable", "--ntasks-per-node=1",
              "--gpus-per-task=0",
              "--cpus-per-task=2", "--mem-per-cpu=100M", "--tmp=1G", "--time=30", f"--output={tmp_path}/job-%j.out",
              "--export=ALL,IMAGENET=../source,RUN_DIR=runs/mine,"
              f"PREPARE_ARGS=--shard-size {SHARD_MB},TRAIN_ARGS={TRAIN_CPU} --epochs 1 --batch-size 4 --max-steps 2"]
    refused = subprocess.run(submit, cwd=clone, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "uncommitted changes" in refused.stderr
    subprocess.run(["git", "checkout", "--", "."], cwd=clone, check=True)
    result = subprocess.run(submit, cwd=clone, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip().splitlines()[-1].split(";")[0]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    state = wait_job(slurm, job)
    log = (tmp_path / f"job-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", log
    assert f"code:        {tmp_path / 'code' / commit} (commit {commit})" in log
    assert f"metrics:     {clone / 'runs' / 'mine'}/metrics.jsonl" in log
    assert read_metrics(clone / "runs" / "mine")[0]["steps"] == 2
