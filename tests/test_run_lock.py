"""One training a run directory (train/run/run_lock.py on shards/lock.py): who may write it, decided
in-process; the lock held and waited for across real processes; and real trainings, a second one
refused on one rank and on two, a holder killed by SIGKILL, a resume while the run is live."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

import warm
from conftest import ROOT
from shards.lock import guard, held_by_another
from train.run.metrics import read_metrics
from train.run.run_lock import LOCK_NAME, REQUEUE_WAIT_S, Holder, let_go, rendezvous_wait, take, verdict
from test_train import train_args

IN_JOB_77_AGAIN = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"}  # a requeued job's second start


def holder_record(run_dir: Path) -> str | None:
    with guard(run_dir):
        return held_by_another(run_dir / LOCK_NAME)


# ---------------------------------------------------------------- who may write it: decisions

def test_a_held_run_directory_is_taken_over_waited_for_or_refused_by_who_holds_it():
    me = Holder.me(IN_JOB_77_AGAIN)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert verdict(replace(me, pid=str(gone.pid), start="1").record(), me) == "take over"  # dead, this host
    assert verdict(replace(me, restart=0).record(), me) == "wait"  # this job's earlier start, still ending
    assert verdict(replace(me, restart=0, host="node7").record(), me) == "wait"  # (a requeue may change nodes)
    assert verdict(me.record(), me) == "refuse"  # the same start: a second srun step of one job
    assert verdict(replace(me, job="78", restart=0).record(), me) == "refuse"  # another job
    outside = Holder.me({})
    assert outside.job == "-" and outside.restart == 0
    assert verdict(outside.record(), outside) == "refuse"  # a second terminal
    for record in ("", "garbage", "1 2 host", " ".join(["x"] * 6)):  # another program's file, or a prepare's
        assert verdict(record, me) == "refuse"
    assert Holder.parse(me.record()) == me


def test_the_holder_is_named_with_its_host_pid_slurm_job_and_start():
    held = Holder("4242", "99", "node3", "77", 1, "2026-12-06T09:00:00Z")
    assert held.describe() == "pid 4242 on node3, SLURM job 77 (start 2), since 2026-12-06T09:00:00Z"
    assert replace(held, restart=0).describe() == "pid 4242 on node3, SLURM job 77, since 2026-12-06T09:00:00Z"
    assert replace(held, job="-", restart=0).describe() == "pid 4242 on node3, since 2026-12-06T09:00:00Z"


def test_a_second_writer_is_refused_in_one_line_that_names_the_holder_and_what_to_do(tmp_path):
    run_dir = tmp_path / "run"
    first = take(run_dir, Holder.me({"SLURM_JOB_ID": "41"}))
    assert first.fd is not None and first.refused == "" and first.made_dir
    try:
        second = take(run_dir, Holder.me({}))
        why = second.refused
        assert second.fd is None and "\n" not in why
        assert why.startswith(f"{run_dir} is being written by another training (pid {os.getpid()} on "
                              f"{socket.gethostname()}, SLURM job 41, since ")
        assert "another --run-dir" in why and "--resume auto" in why and f"remove {run_dir / LOCK_NAME}" in why
    finally:
        let_go(first, run_dir)
    assert not run_dir.exists()  # it made the folder and wrote nothing else in it: gone with the lock
    again = take(run_dir, Holder.me({}))  # free for the next
    assert again.fd is not None
    (run_dir / "config.json").write_text("{}")  # a run that wrote something keeps its folder
    let_go(again, run_dir)
    assert holder_record(run_dir) is None and (run_dir / "config.json").exists()


# ---------------------------------------------------------------- the lock across real processes

HOLDER = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    from train.run.run_lock import Holder, take
    fd = take(Path(sys.argv[1]), Holder.me()).fd
    if sys.argv[2] == "leave":  # a process it started keeps the descriptor, and the holder dies
        subprocess.Popen(["sleep", "120"], pass_fds=[fd], start_new_session=True)
        print("held", flush=True)
        os._exit(0)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
""")


def hold(run_dir: Path, how: str, env: dict | None = None) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir), how], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, env={**os.environ, **(env or {})})
    assert holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.slow  # it waits out its bounds
def test_a_run_directory_that_cannot_be_written_is_refused_as_a_held_one_is(tmp_path):
    """Its parent read-only (no folder made), or its disk full (the lock file's record does not fit): a
    refusal rank 0 broadcasts, as a held lock's, so that every rank says it at once; no folder left."""
    from test_prepare import small_tmpfs

    mount = tmp_path / "small"
    reason = small_tmpfs(mount, 1)
    if reason:
        pytest.skip(reason)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'other-job.bin'}", "bs=64k"], capture_output=True)
        full = take(mount / "run", Holder.me({}))
        assert full.fd is None and full.refused == (f"cannot write the lock file {mount / 'run' / LOCK_NAME} (No space "
                                                    "left on device): its folder must be writable by this user, "
                                                    "with free space")
        let_go(full, mount / "run")
        assert not (mount / "run").exists()
        subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
        read_only = take(mount / "runs" / "run", Holder.me({}))
        assert read_only.fd is None and not read_only.made_dir
        assert read_only.refused == (f"cannot make --run-dir {mount / 'runs' / 'run'} (Read-only file system): give a "
                                     "writable one")
    finally:
        subprocess.run(["umount", mount]).returncode == 0 or subprocess.run(["umount", "-l", mount], check=True)


def test_a_run_directory_this_user_may_not_open_is_refused_as_a_held_one_is():
    """A colleague's private run directory (made under umask 077) given to --run-dir, or to --resume auto: opening it
    for the lock's guard was a PermissionError's traceback on rank 0. Real: asked as uid 12345 of a folder of root's,
    mode 0700 (outside pytest's folder, which root's 0700 closes to other users)."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    top = Path(tempfile.mkdtemp(prefix="run-dirs-"))
    try:
        top.chmod(0o755)
        (top / "run").mkdir(mode=0o700)
        code = ("import sys; from pathlib import Path; from train.run.run_lock import take; "
                "print(take(Path(sys.argv[1])).refused)")
        shown = subprocess.run(["setpriv", "--reuid", "12345", "--regid", "12345", "--clear-groups", sys.executable,
                                "-c", code, str(top / "run")], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == (f"cannot open {top / 'run'} (Permission denied): it must be a folder this user may "
                                "write\n")
    finally:
        shutil.rmtree(top)


@pytest.mark.slow  # it waits out its bounds (2.6 s)
def test_a_requeued_job_waits_for_its_earlier_start_to_end_and_only_so_long(tmp_path, caplog):
    run_dir = tmp_path / "run"
    earlier = hold(run_dir, "1", env={"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "0"})
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="train"):
        claim = take(run_dir, Holder.me(IN_JOB_77_AGAIN), wait_s=60)
    assert claim.fd is not None and claim.refused == "", claim.refused
    assert time.monotonic() - started > 0.5  # it waited, then took it as the earlier start ended
    assert f"{run_dir} is held by this SLURM job's earlier start (pid {earlier.pid} on" in caplog.text
    assert "waiting up to 60 s" in caplog.text
    let_go(claim, run_dir)
    earlier.wait()

    stuck = hold(run_dir, "60", env={"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "0"})
    try:
        claim = take(run_dir, Holder.me(IN_JOB_77_AGAIN), wait_s=1)
        assert claim.fd is None and f"(pid {stuck.pid} on " in claim.refused
        assert "(waited 1 s for this job's earlier start to end)" in claim.refused
    finally:
        stuck.kill()
        stuck.wait()


def test_a_lock_kept_by_a_dead_trainings_leftover_process_is_taken_over(tmp_path, caplog):
    run_dir = tmp_path / "run"
    dead = hold(run_dir, "leave")
    dead.wait()
    leftover = holder_record(run_dir)
    assert leftover is not None and leftover.startswith(f"{dead.pid} ")  # held still, by the process it left
    leftovers = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/cmdline") if p.read_bytes() == b"sleep\x00120\x00"]
    try:
        with caplog.at_level(logging.WARNING, logger="train"):
            claim = take(run_dir, Holder.me({}))
        assert claim.fd is not None and claim.refused == "" and not claim.made_dir
        assert f"the training that held {run_dir} (pid {dead.pid} " in caplog.text and "taking the lock over" in caplog.text
        assert (run_dir / LOCK_NAME).read_text().startswith(f"{os.getpid()} ")
        let_go(claim, run_dir)
    finally:
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- real trainings

@pytest.mark.slow
def test_a_second_training_and_a_resume_into_a_live_run_directory_are_refused_and_the_run_is_untouched(
        prepared, tmp_path):
    run = tmp_path / "run"
    args = train_args(prepared, run, "--epochs", 2, "--workers", 1, "--batch-size", 12)
    live = warm.Ranks(1, args, tmp_path / "live")
    live.wait_for("epoch 0 step 1/")
    live.procs[0].send_signal(signal.SIGSTOP)  # alive, holding the run directory, for as long as this test asks
    try:
        holder = f"(pid {live.procs[0].pid} on {socket.gethostname()}, since "
        second = warm.Ranks(2, args, tmp_path / "second")  # a copy of the command, two ranks: both hear rank 0
        assert second.wait(timeout=120) == [2, 2], second.text()
        for log in second.logs:
            assert f"{run} is being written by another training {holder}" in log.read_text(), second.text()
        resumed = warm.run("train", *args, "--resume", "auto")
        assert resumed.returncode == 2 and f"is being written by another training {holder}" in resumed.stderr
    finally:
        live.procs[0].send_signal(signal.SIGCONT)
    assert live.wait() == [0], live.text()
    assert [r["epoch"] for r in read_metrics(run)] == [0, 1]  # the live run's records, each once
    after = warm.run("train", *args, "--resume", "auto")  # once it has ended, the directory is free
    assert after.returncode == 0 and "already finished 2 epochs" in after.stderr, after.stderr[-3000:]


@pytest.mark.slow
def test_a_requeued_start_of_two_ranks_waits_for_its_earlier_start_while_rank_1_waits_in_the_rendezvous(
        prepared, tmp_path):
    """Rank 0 waits for the earlier start's lock before it joins the rendezvous; rank 1 waits there meanwhile, and
    gave up after --dist-timeout, every rank ending in 'a peer never arrived' (exit 1) and not in the lock's line.
    The rendezvous of a requeued start waits the lock's wait longer."""
    assert rendezvous_wait(20.0, {}) == 20.0 == rendezvous_wait(20.0, {"SLURM_RESTART_COUNT": "0"})
    assert rendezvous_wait(20.0, IN_JOB_77_AGAIN) == 20.0 + REQUEUE_WAIT_S
    run = tmp_path / "run"
    earlier = hold(run, "8", env={"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "0"})
    args = train_args(prepared, run, "--epochs", 1, "--workers", 1, "--batch-size", 12, "--dist-timeout", 3)
    requeued = warm.Ranks(2, args, tmp_path / "requeued", env=IN_JOB_77_AGAIN)
    assert requeued.wait(timeout=240) == [0, 0], requeued.text()
    assert earlier.wait() == 0
    assert "held by this SLURM job's earlier start" in requeued.logs[0].read_text()
    assert [r["epoch"] for r in read_metrics(run)] == [0]


@pytest.mark.slow
def test_a_training_killed_by_sigkill_leaves_its_run_directory_free_for_the_resume(prepared, tmp_path):
    run = tmp_path / "run"
    args = train_args(prepared, run, "--epochs", 2, "--workers", 1, "--batch-size", 12)
    killed = warm.Ranks(1, args, tmp_path / "killed")
    killed.wait_for("epoch 1 step 1/")  # after epoch 0's checkpoint
    killed.procs[0].send_signal(signal.SIGKILL)
    assert killed.wait() == [-signal.SIGKILL]
    assert holder_record(run) is None  # the kernel let go with the process
    resumed = warm.run("train", *args, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "is being written" not in resumed.stderr
    assert [r["epoch"] for r in read_metrics(run)] == [0, 1]


def test_a_run_directory_that_is_a_link_to_a_folder_not_made_yet_is_made_there(tmp_path):
    """`ln -s /scratch/me/runs/r1 runs/r1` before the first start: the link's target is made, not refused with
    mkdir's "File exists"; a start that writes nothing leaves the link as it was."""
    link, target = tmp_path / "r1", tmp_path / "other disk" / "runs" / "r1"
    link.symlink_to(target)
    claim = take(link, Holder.me({}))
    assert claim.refused == "" and (target / LOCK_NAME).is_file()
    let_go(claim, link)
    assert link.is_symlink() and not target.exists()


def test_a_run_directory_whose_name_is_too_long_is_refused_in_one_line(tmp_path):
    """A name past the file system's 255 bytes (a sweep's run named by its settings): its `exists()` raised, a
    traceback before the refusal."""
    run_dir = tmp_path / ("r" * 300)
    claim = take(run_dir, Holder.me({}))
    assert claim.fd is None
    assert claim.refused == f"cannot make --run-dir {run_dir} (File name too long): give a writable one"
