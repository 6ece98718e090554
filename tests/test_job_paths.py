"""The job scripts' path handling, without SLURM: each script runs as sbatch would start it, with `srun`,
`sbatch` and `scontrol` stand-ins on PATH that record the command lines they were given. Paths as users have
them: spaces, unicode, `~`, relative to the folder the job was submitted from."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # (bash processes)

# The stand-in for python writes its arguments, one a line, then a line "--", to $CALLS; srun runs the command
# after its options (the task's shell and python), sbatch and scontrol nothing.
RECORDER = '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a" >> "$CALLS"; done\necho -- >> "$CALLS"\n'
SRUN = '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n'


def stand_ins(folder: Path) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("sbatch", ""), ("scontrol", ""), ("python", RECORDER)):
        (bin_dir / name).write_text(text or "#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def calls(folder: Path) -> list[list[str]]:
    """The command lines python was started with, in order."""
    text = (folder / "calls").read_text() if (folder / "calls").exists() else ""
    return [block.strip("\n").split("\n") for block in text.split("--\n") if block.strip("\n")]


def job_env(tmp_path: Path, **more: str) -> dict:
    home = tmp_path / "home dir"
    home.mkdir(exist_ok=True)
    bin_dir = stand_ins(tmp_path)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
            "HOME": str(home), "PYTHON": str(bin_dir / "python"), "SLURM_SUBMIT_DIR": str(ROOT), "SLURM_JOB_ID": "7",
            "SLURM_JOB_NAME": "t", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "n1",
            "SLURM_CPUS_PER_TASK": "1", "SLURM_TMPDIR": str(tmp_path / "node tmp"), **more}


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_stage_and_train_takes_a_leading_tilde_as_the_home_and_keeps_spaces(tmp_path):
    """sbatch --export=ALL,RUN_DIR=~/runs/r hands the script `~` as typed (bash expands it only at a word's start):
    it is the home, not a folder named `~` made in the submit directory."""
    submitted_from = tmp_path / "submitted from ü"
    submitted_from.mkdir()
    env = job_env(tmp_path, IMAGENET="~/image net", RUN_DIR="~/runs/my run", LOCAL_DISK="local disk")
    done = subprocess.run(["bash", str(ROOT / "jobs" / "stage_and_train.sh")], cwd=submitted_from, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    home = Path(env["HOME"])
    prepare, train = calls(tmp_path)
    assert option(prepare, "--source") == f"{home}/image net"
    assert option(prepare, "--dest") == f"{submitted_from}/local disk/imagenet"
    assert option(train, "--run-dir") == f"{home}/runs/my run"
    assert option(train, "--data") == f"{submitted_from}/local disk/imagenet"
    assert (home / "runs" / "my run").is_dir()
    assert not (submitted_from / "~").exists()


def test_benchmark_job_takes_a_clone_run_directory_and_node_disk_whose_paths_hold_spaces(tmp_path):
    """benchmark.sbatch split its python, its --run-dir and $SLURM_TMPDIR at spaces, and read a relative IMAGENET
    from the clone rather than from where the job was submitted; a `[` in the clone's path hid its built modules,
    and the job ran the installed package (python -P)."""
    clone = tmp_path / "my clone [1]"  # (its python the stand-in, its scripts and built modules this tree's)
    (clone / ".venv" / "bin").mkdir(parents=True)
    for name in ("jobs", "train"):
        (clone / name).symlink_to(ROOT / name)
    submitted_from = tmp_path / "submitted from"
    submitted_from.mkdir()
    env = job_env(tmp_path, IMAGENET="image net", RUN_DIR="~/bench run", REPO=str(clone))
    (clone / ".venv" / "bin" / "python").symlink_to(env.pop("PYTHON"))
    done = subprocess.run(["bash", str(ROOT / "jobs" / "benchmark.sbatch")], cwd=submitted_from, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    prepare, bench = calls(tmp_path)
    assert option(prepare, "--source") == f"{submitted_from}/image net"
    assert prepare[:2] == ["-m", "prepare"] and bench[:2] == ["-m", "train.bench"]  # (no -P: the clone's code)
    assert option(bench, "--run-dir") == f"{env['HOME']}/bench run"
    assert option(bench, "--data") == f"{tmp_path}/node tmp/imagenet"


@pytest.fixture
def committed_clone(tmp_path) -> Path:
    """A clone of this repository with this tree's submit.sh (and the paths.sh it sources) committed (it snapshots the
    commit), in a folder whose path holds a space."""
    clone = tmp_path / "my clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for name in ("submit.sh", "paths.sh"):
        shutil.copy(ROOT / "jobs" / name, clone / "jobs" / name)
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-q", "-a",
                    "-m", "this tree's submit.sh", "--allow-empty"], cwd=clone, check=True)
    return clone


@pytest.mark.parametrize("named", ["absolute", "from its folder", "from the clone's root"])
def test_submit_takes_the_job_script_as_named_from_any_folder(committed_clone, tmp_path, named):
    """submit.sh joined JOB_SCRIPT to the snapshot's path as given: an absolute one, or one relative to the folder
    it was called from, named no file, and sbatch refused it."""
    script = committed_clone / "jobs" / "imagenet-1node.sbatch"
    cwd, given = {"absolute": (tmp_path, str(script)), "from its folder": (script.parent, script.name),
                  "from the clone's root": (tmp_path, "jobs/imagenet-1node.sbatch")}[named]
    env = job_env(tmp_path, CODE_DIR=str(tmp_path / "code"))  # (its python the stand-in: nothing is built)
    (tmp_path / "bin" / "sbatch").write_text(RECORDER)
    done = subprocess.run(["bash", str(committed_clone / "jobs" / "submit.sh"), given, "--parsable"], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    sbatch = calls(tmp_path)[-1]
    assert Path(sbatch[-1]).read_bytes() == script.read_bytes() and sbatch[-1].startswith(str(tmp_path / "code"))


def test_submit_refuses_a_job_script_outside_the_clone_or_its_commit(committed_clone, tmp_path):
    env = job_env(tmp_path, CODE_DIR=str(tmp_path / "code"))
    mine = tmp_path / "mine.sbatch"
    mine.write_text("#!/bin/bash\n")
    done = subprocess.run(["bash", "jobs/submit.sh", str(mine)], cwd=committed_clone, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith(f"submit.sh: {mine} is not in this clone"), done.stderr
    (committed_clone / "jobs" / "new.sbatch").write_text("#!/bin/bash\n")  # (untracked: submit.sh lets it be)
    done = subprocess.run(["bash", "jobs/submit.sh", "jobs/new.sbatch"], cwd=committed_clone, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "jobs/new.sbatch is not in commit" in done.stderr, done.stderr


@pytest.mark.slow
def test_two_submits_at_once_on_one_commit_each_sbatch_a_whole_snapshot(committed_clone, tmp_path):
    """Two submit.sh on one commit at once (two jobs submitted from two shells): the second removed the snapshot the
    first was building (one `$code.partial` for both), the first moved the second's half-built one into place, and the
    second failed. Their PYTHON and CODE_DIR relative, from the folder they are called from (they were the clone's)."""
    env = job_env(tmp_path, CODE_DIR="code", PYTHON="bin/slow-python")
    (tmp_path / "bin" / "slow-python").write_text(RECORDER.replace("#!/bin/sh\n", "#!/bin/sh\nsleep 2\n"))
    (tmp_path / "bin" / "slow-python").chmod(0o755)
    submit = ["bash", str(committed_clone / "jobs" / "submit.sh"), "jobs/imagenet-1node.sbatch"]
    first = subprocess.Popen(submit, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    second = subprocess.run(submit, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    said = first.communicate(timeout=60)[0]
    assert first.returncode == 0 and second.returncode == 0, said + second.stdout + second.stderr
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=committed_clone, capture_output=True, text=True).stdout
    snapshot = tmp_path / "code" / commit.strip()
    assert [path.name for path in (tmp_path / "code").iterdir()] == [snapshot.name]  # no half-built folder left
    assert (snapshot / "COMMIT").read_text().strip() == snapshot.name and (snapshot / "prepare" / "builder.py").exists()
    assert [call[-4:] for call in calls(tmp_path)] == [["setup.py", "-q", "build_ext", "--inplace"]] * 2


@pytest.mark.parametrize("script", ["stage_and_train.sh", "benchmark.sbatch", "gpu_benchmark.sh"])
def test_a_relative_python_is_from_the_folder_the_job_is_called_from(tmp_path, script):
    """PYTHON=venv/bin/python, typed where the job is submitted (or the script called): the scripts cd to the clone,
    where no such python is, and the job failed at its first step."""
    called_from = tmp_path / "called from"
    (called_from / "venv" / "bin").mkdir(parents=True)
    env = job_env(tmp_path, IMAGENET="images", DATA="shards", OUT="out", SCRATCH="scratch", BUDGET="60")
    (called_from / "venv" / "bin" / "python").symlink_to(env["PYTHON"])
    env["PYTHON"] = "venv/bin/python"
    done = subprocess.run(["bash", str(ROOT / "jobs" / script)], cwd=called_from, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert script != "gpu_benchmark.sh" or "failed: none" in done.stdout, done.stdout  # (it goes on past a failure)
    assert any(call[:2] == ["-m", "prepare"] or call[:2] == ["-m", "train.bench"] for call in calls(tmp_path))


def test_the_demo_runs_from_any_folder_in_a_demo_dir_relative_to_it_whose_path_holds_a_space(tmp_path):
    """`DEMO_DIR=my-demo bash /path/to/jobs/demo.sh` made my-demo inside the clone (the script's cd), not in the
    folder it was called from."""
    clone = tmp_path / "my clone"
    (clone / "jobs").mkdir(parents=True)
    (clone / ".venv" / "bin").mkdir(parents=True)
    for name in ("demo.sh", "paths.sh"):
        (clone / "jobs" / name).symlink_to(ROOT / "jobs" / name)
    (clone / "jobs" / "install.sh").write_text("")  # (the set-up: nothing to do here)
    env = job_env(tmp_path, DEMO_DIR="my demo")
    (clone / ".venv" / "bin" / "python").symlink_to(env.pop("PYTHON"))
    called_from = tmp_path / "called from"
    called_from.mkdir()
    done = subprocess.run(["bash", str(clone / "jobs" / "demo.sh")], cwd=called_from, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    sample, prepare, train, report = calls(tmp_path)
    assert sample[:3] == ["-m", "prepare.sample", f"{called_from}/my demo/source"]
    assert option(prepare, "--dest") == option(train, "--data") == f"{called_from}/my demo/imagenet"
    assert option(train, "--run-dir") == report[-1] == f"{called_from}/my demo/run"
    del env["DEMO_DIR"]  # the default: the clone's demo/, as the README says
    done = subprocess.run(["bash", str(clone / "jobs" / "demo.sh")], cwd=called_from, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and calls(tmp_path)[-1][-1] == "demo/run", done.stdout + done.stderr


def test_the_gpu_benchmark_takes_its_relative_folders_from_where_it_is_called(tmp_path):
    """`OUT=results bash /path/to/jobs/gpu_benchmark.sh` wrote its results inside the clone (the script's cd), and a
    relative DATA or SCRATCH named a folder there."""
    clone = tmp_path / "my clone"
    clone.mkdir()
    (clone / "jobs").symlink_to(ROOT / "jobs")
    called_from = tmp_path / "called from"
    called_from.mkdir()
    env = job_env(tmp_path, OUT="out dir", SCRATCH="scratch dir", DATA="my shards", BUDGET="60")
    done = subprocess.run(["bash", str(clone / "jobs" / "gpu_benchmark.sh")], cwd=called_from, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "failed: none" in done.stdout, done.stdout + done.stderr
    benches = [command for command in calls(tmp_path) if command[:2] == ["-m", "train.bench"]]
    train = next(command for command in calls(tmp_path) if command[:2] == ["-m", "train"])
    assert benches and all(option(bench, "--data") == f"{called_from}/my shards" for bench in benches)
    assert all(option(bench, "--run-dir") == f"{called_from}/out dir" for bench in benches)
    assert option(train, "--run-dir") == f"{called_from}/scratch dir/train"
    assert (called_from / "out dir").is_dir() and not (clone / "out dir").exists()


def test_the_local_cluster_takes_a_relative_folder_whose_path_holds_a_space_or_a_quote(tmp_path):
    """LOCAL_SLURM_DIR went into slurm.conf and the TaskProlog unquoted (a space ended the value: the prolog ran
    `tmp=/tmp/my` and then a command named after the rest) and relative, though the daemons do not run in the folder
    it was called from. Its config only (no daemons): as slurm.conf's parser reads each line, one value a key."""
    import re

    called_from = tmp_path / "called from"
    called_from.mkdir()
    env = {**os.environ, "LOCAL_SLURM_DIR": "slurm dir it's [1]"}
    done = subprocess.run(["bash", str(ROOT / "jobs" / "local_cluster.sh"), "config"], cwd=called_from, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = called_from / "slurm dir it's [1]"
    # parse_config.c's keyvalue_pattern: a value in double quotes may hold spaces; unquoted, it ends at one
    pair = re.compile(r'\s*([\w.]+)\s*[-*+/]?=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
    conf = {}
    for line in (folder / "slurm.conf").read_text().splitlines():
        at = 0
        while found := pair.match(line, at):
            conf.setdefault(found[1], found[2] if found[2] is not None else found[3])
            at = found.end()
        assert line[at:].strip() == "", line
    assert conf["StateSaveLocation"] == f"{folder}/state" and conf["TaskProlog"] == f"{folder}/task_prolog.sh"
    prolog = subprocess.run(["sh", conf["TaskProlog"]], env={**env, "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "5"},
                            capture_output=True, text=True, timeout=60)
    assert prolog.stdout == f"export SLURM_TMPDIR={folder}/tmp/node1/job5\n", prolog.stderr
    assert (folder / "tmp" / "node1" / "job5").is_dir()
    env["LOCAL_SLURM_DIR"] = 'a "quoted" folder'
    done = subprocess.run(["bash", str(ROOT / "jobs" / "local_cluster.sh"), "config"], cwd=called_from, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "slurm.conf cannot take: give another folder" in done.stderr
    assert not (called_from / 'a "quoted" folder').exists()
