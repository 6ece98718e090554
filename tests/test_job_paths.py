"""The job scripts' path handling, without SLURM: each script runs as sbatch would start it, with `srun`,
`sbatch` and `scontrol` stand-ins on PATH that record the command lines they were given. Paths as users have
them: spaces, unicode, `~`, relative to the folder the job was submitted from."""

from __future__ import annotations

import os
import shutil
import subprocess
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
    """A clone of this repository with this tree's submit.sh committed (it snapshots the commit), in a folder whose
    path holds a space."""
    clone = tmp_path / "my clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    shutil.copy(ROOT / "jobs" / "submit.sh", clone / "jobs" / "submit.sh")
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
