"""One training a run directory: rank 0 holds `RUN_DIR/.train.lock` (shards/lock.py's flock) from before
the checkpoint is read until the run ends, and the other ranks hear its verdict at the rendezvous.

Two trainings in one run directory interleave its metrics.jsonl and overwrite each other's last.pt, and a
resume started while the run is live trains its last epoch twice: on a cluster it happens (a job
submitted twice, a command pasted in a second terminal, a requeue that starts while the old job's ranks
are still ending). What a held lock means, by its holder (the record: "pid start-time host job restart
since"):
  - a process of this host no longer running (processes it left hold the lock): taken over, said;
  - the same SLURM job, started fewer times (the job requeued, its previous start still ending): waited
    for, up to REQUEUE_WAIT_S, then refused;
  - any other: refused at once, in one line naming the holder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from shards.errors import UserError
from shards.lock import LockUnwritable, guard, holder_is_dead, identity, read_identity, release, take_over, try_lock

log = logging.getLogger("train")

LOCK_NAME = ".train.lock"
REQUEUE_WAIT_S = 120.0  # how long a requeued job waits for its previous start's ranks to end
POLL_S = 0.5


class RunDirInUse(UserError):
    """This training cannot write its run directory: another is writing it, or it cannot be written."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or asks for) a run directory's lock."""
    pid: str
    start: str
    host: str
    job: str  # SLURM_JOB_ID, "-" outside SLURM
    restart: int  # SLURM_RESTART_COUNT: how many times SLURM has started this job again
    since: str  # when it took the lock (UTC)

    @classmethod
    def me(cls, environ=os.environ) -> Holder:
        pid, start, host = identity().split()
        return cls(pid, start, host, environ.get("SLURM_JOB_ID") or "-", int(environ.get("SLURM_RESTART_COUNT") or 0),
                   datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))

    @classmethod
    def parse(cls, record: str) -> Holder | None:
        parts = record.split()
        if len(parts) != 6 or not parts[4].isdigit():
            return None
        return cls(*parts[:4], int(parts[4]), parts[5])

    def record(self) -> str:
        return f"{self.pid} {self.start} {self.host} {self.job} {self.restart} {self.since}"

    def describe(self) -> str:
        job = "" if self.job == "-" else f", SLURM job {self.job}" + (f" (start {self.restart + 1})" if self.restart else "")
        return f"pid {self.pid} on {self.host}{job}, since {self.since}"


def verdict(record: str, me: Holder) -> str:
    """What a training does about the lock's holder `record`: "take over" (dead, on this host), "wait"
    (its own SLURM job's earlier start) or "refuse". Pure but for /proc, read for a holder of this host."""
    if holder_is_dead(record):
        return "take over"
    holder = Holder.parse(record)
    if holder is not None and holder.job != "-" and holder.job == me.job and holder.restart < me.restart:
        return "wait"
    return "refuse"


def named(record: str) -> str:
    holder = Holder.parse(record)
    return holder.describe() if holder is not None else "a process that does not say who it is"


def refusal(run_dir: Path, record: str, waited_s: float = 0.0) -> str:
    who = named(record)
    waited = f" (waited {waited_s:.0f} s for this job's earlier start to end)" if waited_s else ""
    return (f"{run_dir} is being written by another training ({who}){waited}: two trainings in one run directory "
            "would interleave its metrics and overwrite each other's checkpoints. Wait for it to end (then "
            "--resume auto continues from its checkpoint), or give this one another --run-dir. If that training "
            f"is not running any more (its node failed), remove {run_dir / LOCK_NAME}")


@dataclass(frozen=True)
class Claim:
    """What `take` got: the lock's descriptor (None on ranks other than 0, and where refused), why it was refused
    (""), and whether it made the run directory (a start that writes nothing leaves no folder behind)."""
    fd: int | None = None
    refused: str = ""
    made_dir: bool = False


def take(run_dir: Path, me: Holder | None = None, wait_s: float = REQUEUE_WAIT_S) -> Claim:
    """Rank 0, before the checkpoint is read: the run directory's lock where this training may write `run_dir`,
    else why not."""
    me = me or Holder.me()
    made_dir = False
    try:  # a link to a folder not made yet (a run directory linked to another disk): its target, as `mkdir -p` of
        # the link would not (the link itself is there: "File exists")
        made_dir = not run_dir.exists()  # (in the try: a name longer than the file system's 255 bytes raises)
        run_dir.resolve().mkdir(parents=True, exist_ok=True)
    except OSError as exn:  # refused as a held lock is: rank 0's verdict, which every rank says
        return Claim(None, f"cannot make --run-dir {run_dir} ({exn.strerror or exn}): give a writable one", False)
    path, started, said = run_dir / LOCK_NAME, time.monotonic(), False
    while True:
        try:  # (the guard too: its flock fails as the lock's does where the file system has none)
            with guard(run_dir):
                fd = try_lock(path, me.record())
                if fd is not None:
                    return Claim(fd, "", made_dir)
                record = read_identity(path)
                decided = verdict(record, me)
                if decided == "take over":
                    log.warning("the training that held %s (%s) is no longer running, but processes it left still "
                                "hold its lock: taking the lock over", run_dir, named(record))
                    return Claim(take_over(path, me.record()), "", made_dir)
        except LockUnwritable as exn:  # a full disk, a read-only folder, a file system without flock
            return Claim(None, str(exn), made_dir)
        waited = time.monotonic() - started
        if decided == "refuse" or waited > wait_s:
            return Claim(None, refusal(run_dir, record, waited if decided == "wait" else 0.0), made_dir)
        if not said:
            log.info("%s is held by this SLURM job's earlier start (%s), still ending: waiting up to %.0f s for it",
                     run_dir, named(record), wait_s)
            said = True
        time.sleep(POLL_S)


def rendezvous_wait(dist_timeout: float, environ=os.environ) -> float:
    """How long every rank of this start waits for the others at the rendezvous: --dist-timeout, and on a requeued
    job's start (SLURM_RESTART_COUNT above 0) the wait for the earlier start's lock too, which rank 0 spends before
    it joins (`take`, before the rendezvous: the earlier start's rank 0 may still hold the job's port): the other
    ranks wait in the rendezvous meanwhile, and gave up first, each in a line blaming a peer. Pure."""
    restarted = int(environ.get("SLURM_RESTART_COUNT") or 0) > 0
    return dist_timeout + (REQUEUE_WAIT_S if restarted else 0.0)


def let_go(claim: Claim, run_dir: Path) -> None:
    """The lock released; the run directory removed where this start made it and wrote nothing in it but the lock."""
    if claim.fd is not None:
        release(claim.fd)
    if claim.made_dir and [entry.name for entry in run_dir.iterdir()] == [LOCK_NAME]:
        with contextlib.suppress(OSError):  # (a full disk's: a read-only one made no folder)
            (run_dir / LOCK_NAME).unlink(missing_ok=True)
            run_dir.resolve().rmdir()  # (a link made stays, as it was: to a folder not made)
