"""One prepare per destination: a lock file in it, holding the identity of its holder.

The lock is an flock on `.prepare.lock`; the kernel lets go of it when the last descriptor of it
closes, so a prepare that dies, even by kill -9, leaves nothing to clean up. What could still keep a
dead prepare's lock is a process that inherited the descriptor: prepare's workers close theirs as
they start and die with their parent (prepare/workers.py), but a waiter does not rely on it. The
holder writes "pid start-time host" into the file; a waiter that finds the lock held by a prepare
that is no longer running on this host takes over, with a fresh lock file put in place of the old
one, and says so. A holder on another host (a --dest on shared storage) is taken as alive.

Writing the holder's identity and deciding that a holder is dead both happen under a second flock,
on the destination folder itself, held for a moment (never while a process is forked), so that a
waiter never reads the identity of a lock's previous holder, and two waiters never both take over.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from shards.paths import LOCK_NAME

log = logging.getLogger("prepare")

POLL_S = 0.5  # how often a waiting prepare tries the lock again
_held: set[int] = set()  # descriptors of the locks this process holds: forked workers close them


# ---------------------------------------------------------------- who holds it

def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat's 22nd field): with the pid,
    a process's identity that a reused pid does not share. None where there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # after the command name, which may hold spaces


def identity() -> str:
    return f"{os.getpid()} {start_time(os.getpid())} {socket.gethostname()}"


def holder_is_dead(record: str) -> bool:
    """Whether the holder `record` names is a process of this host that is no longer running. A
    record that is not one (empty: a holder between taking the lock and writing it, under the
    guard, so never seen; or another program's) or another host's holder: not known to be dead."""
    parts = record.split()
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] == "None" or parts[2] != socket.gethostname():
        return False
    return start_time(int(parts[0])) != parts[1]


def describe(record: str) -> str:
    parts = record.split()
    return f"pid {parts[0]} on {parts[2]}" if len(parts) == 3 else "a process"


# ---------------------------------------------------------------- taking and leaving it

@contextmanager
def guard(dest: Path):
    """The short lock around writing and judging the holder's identity: an flock of the folder."""
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def try_lock(path: Path) -> int | None:
    """The lock's descriptor, taken now with our identity written in it; None where another holds
    it, or where the file was replaced between our open and our lock (a takeover: try again)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            os.close(fd)
            return None
    except FileNotFoundError:
        os.close(fd)
        return None
    write_identity(fd)
    _held.add(fd)
    return fd


def write_identity(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, identity().encode(), 0)


def read_identity(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def take_over(path: Path) -> int | None:
    """(Under the guard, the holder found dead.) A fresh lock file, locked and with our identity,
    renamed over the old one: the processes left holding the old file hold nothing of ours."""
    fresh = path.with_name(f"{path.name}.{os.getpid()}")
    fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else has it
    write_identity(fd)
    os.replace(fresh, path)
    _held.add(fd)
    return fd


def acquire(dest: Path) -> int:
    """Wait for the lock of `dest`, taking it over from a holder that is dead; its descriptor."""
    path, said = dest / LOCK_NAME, False
    while True:
        with guard(dest):
            fd = try_lock(path)
            if fd is not None:
                return fd
            record = read_identity(path)
            if holder_is_dead(record):
                log.warning("the prepare that held %s (%s) is no longer running, but processes it left still hold "
                            "its lock: taking the lock over", dest, describe(record))
                return take_over(path)
        if not said:
            log.info("another prepare (%s) is writing %s; waiting for it to finish", describe(record), dest)
            said = True
        time.sleep(POLL_S)


def release(fd: int) -> None:
    _held.discard(fd)
    os.close(fd)  # the flock goes with the last descriptor


@contextmanager
def exclusive_lock(dest: Path):
    """One prepare per destination: the others wait here, then find the manifest and verify it."""
    fd = acquire(dest)
    try:
        yield
    finally:
        release(fd)


def held_by_a_live_prepare(dest: Path) -> bool:
    """Whether a running prepare holds `dest`'s lock now (not a dead one's leftover processes)."""
    path = dest / LOCK_NAME
    with guard(dest):
        fd = try_lock(path)
        if fd is not None:
            release(fd)
            return False
        return not holder_is_dead(read_identity(path))


def close_inherited_locks() -> None:
    """In a process forked while this one held locks (a prepare worker): let go of its copies of
    the descriptors, so that the lock ends with the prepare that took it."""
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()
