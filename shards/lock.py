"""One writer a folder: an flock on a lock file in it, the file holding its holder's identity.

Used by prepare (one prepare a destination, `.prepare.lock`: `exclusive_lock`, below: the others wait for
it) and by training (one training a run directory, `.train.lock`: train/run/run_lock.py decides there what a
held lock means). A dataset's readers share a third, `.readers.lock` (`shared_read_lock`, `sole_reader_lock`, at
the end): a prepare that would replace the dataset under a loader of this node is refused, and a loader does not
start on a dataset a prepare is replacing.

The kernel lets go of an flock when the last descriptor of it closes, so a holder that dies, even by
kill -9, leaves nothing to clean up. What could still keep a dead holder's lock is a process that
inherited the descriptor by a fork: a child forked while the lock is held closes its copy at once
(os.register_at_fork, below), and a waiter does not rely on it either. The holder writes "pid
start-time host", then anything its user adds, into the file; a waiter that finds the lock held by a
process no longer running on this host may take over, with a fresh lock file put in place of the old
one. A holder on another host (a folder on shared storage) cannot be judged from here.

Writing the holder's identity and judging a holder both happen under a second flock, on the folder
itself, held for a moment (never while a process is forked), so that a waiter never reads the
identity of a lock's previous holder, and two waiters never both take over.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from shards.errors import UserError
from shards.paths import LOCK_NAME, READERS_NAME

_held: set[int] = set()  # descriptors of the locks this process holds: forked children close them
POLL_S = 0.5  # how often a waiting prepare tries the lock again


class LockUnwritable(UserError):
    """A lock file that cannot be made, written or locked: its folder read-only, full, or not this user's, or on a
    file system without flock."""


def unwritable(path: Path, exn: OSError) -> LockUnwritable:
    if isinstance(exn, PermissionError) and path.exists() and os.access(path.parent, os.W_OK):
        # the folder is writable: the file is another user's, made where their umask kept it from the group
        return LockUnwritable(f"cannot write the lock file {path} ({exn.strerror}): it is another user's (uid "
                              f"{path.stat().st_uid}) and not writable by this one; ask them to make it group-writable "
                              f"(chmod g+w {path}), or remove it while nothing runs there")
    return LockUnwritable(f"cannot write the lock file {path} ({exn.strerror or exn}): its folder must be writable "
                          "by this user, with free space")


def flock(fd: int, operation: int, path: Path) -> None:
    """fcntl.flock of `path`'s descriptor. A file system without flock (Lustre mounted without -o flock: ENOSYS;
    NFS without its lock daemon: ENOLCK) is LockUnwritable, one line, where it was a traceback; a lock held by
    another (LOCK_NB's BlockingIOError) passes to the caller."""
    try:
        fcntl.flock(fd, operation)
    except BlockingIOError:
        raise
    except OSError as exn:
        raise LockUnwritable(f"cannot lock {path} ({exn.strerror or exn}): its file system does not support file "
                             "locks (flock); use a local disk, NFS v4, GPFS, or Lustre mounted with -o flock") from None


# ---------------------------------------------------------------- who holds it

def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat's 22nd field): with the pid,
    a process's identity that a reused pid does not share. None where there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # after the command name, which may hold spaces


INITIAL_PID_NAMESPACE = 0xEFFFFFFC  # /proc/self/ns/pid's inode in the host's own PID namespace (PROC_PID_INIT_INO)


def this_host() -> str:
    """This host's name as a holder's record gives it; in a PID namespace of its own (a container's: apptainer --pid
    or --containall, docker, podman) with that namespace, whose pids the host's processes cannot look up: a live
    holder in one was judged dead from outside (its pid no process, or another's there), its lock taken over."""
    host = socket.gethostname()
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return host
    return host if namespace == INITIAL_PID_NAMESPACE else f"{host}:pidns{namespace}"


def identity() -> str:
    """This process: "pid start-time host"."""
    return f"{os.getpid()} {start_time(os.getpid())} {this_host()}"


def holder_is_dead(record: str) -> bool:
    """Whether the holder `record` names (its first three words) is a process of this host that is no
    longer running. A record that is not one (empty: a holder between taking the lock and writing it,
    under the guard, so never seen; or another program's) or another host's holder (or another PID namespace's,
    `this_host`): not known to be dead.
    Nor is a process this user may not look at in /proc (another user's, where /proc is mounted with hidepid, as
    clusters do for privacy): judged dead, its lock was taken over while it wrote (two users' jobs on one node, one
    group-shared folder), and both wrote there."""
    parts = record.split()
    if len(parts) < 3 or not parts[0].isdigit() or parts[1] == "None" or parts[2] != this_host():
        return False
    started = start_time(int(parts[0]))
    if started is None and is_running(int(parts[0])):
        return False
    return started != parts[1]


def is_running(pid: int) -> bool:
    """Whether some process has the id `pid`: kill's signal 0, which hidepid does not hide (another user's: EPERM)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(record: str) -> str:
    parts = record.split()
    return f"pid {parts[0]} on {parts[2]}" if len(parts) >= 3 else "a process"


def read_identity(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


# ---------------------------------------------------------------- taking and leaving it

@contextmanager
def guard(folder: Path):
    """The short lock around writing and judging the holder's identity: an flock of the folder. LockUnwritable where
    the folder cannot be opened (another user's, private: a colleague's run directory), where it was a traceback."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exn:
        raise LockUnwritable(f"cannot open {folder} ({exn.strerror or exn}): it must be a folder this user may "
                             "write") from None
    try:
        flock(fd, fcntl.LOCK_EX, folder)
        yield
    finally:
        os.close(fd)


def locked_alone_now(fd: int, path: Path) -> bool:
    """Whether the exclusive flock of `fd` (`path`'s) was had at once; where not (another holds it), `fd` is closed.
    LockUnwritable, `fd` closed, where the file system has no flock."""
    try:
        flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, path)
    except BlockingIOError:
        os.close(fd)
        return False
    except LockUnwritable:
        os.close(fd)
        raise
    return True


def try_lock(path: Path, record: str) -> int | None:
    """The lock's descriptor, taken now with `record` written in it; None where another holds it, or
    where the file was replaced between our open and our lock (a takeover: try again). Under the guard.
    LockUnwritable where the file cannot be made or written."""
    try:
        # 0666 for the umask to narrow: a colleague in a group-shared folder (umask 002) opens it for writing to
        # prepare or train there, where 0644 refused them, saying the folder was not writable
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exn:
        raise unwritable(path, exn) from None
    if not locked_alone_now(fd, path):
        return None
    try:
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            os.close(fd)
            return None
    except FileNotFoundError:
        os.close(fd)
        return None
    write_record(fd, record, path)
    _held.add(fd)
    return fd


def write_record(fd: int, record: str, path: Path) -> None:
    """`record` in the lock file; the descriptor closed, and LockUnwritable, where it cannot be written."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode(), 0)
    except OSError as exn:
        os.close(fd)
        raise unwritable(path, exn) from None


def take_over(path: Path, record: str) -> int:
    """(Under the guard, the holder judged dead.) A fresh lock file, locked and with `record`, renamed
    over the old one: the processes left holding the old file hold nothing of ours."""
    fresh = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    except OSError as exn:
        raise unwritable(fresh, exn) from None
    fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else has it
    try:
        write_record(fd, record, fresh)  # (which closes it where it fails)
    except LockUnwritable:
        fresh.unlink(missing_ok=True)
        raise
    try:
        os.replace(fresh, path)
    except OSError as exn:
        os.close(fd)
        fresh.unlink(missing_ok=True)
        raise unwritable(path, exn) from None
    _held.add(fd)
    return fd


def release(fd: int) -> None:
    _held.discard(fd)
    os.close(fd)  # the flock goes with the last descriptor


def release_taken_by(pid: int, fd: int) -> None:
    """`release`, in process `pid` (the one that took the lock) only: a child forked since closed its copy at the fork
    (close_inherited_locks), and the number may be one of the child's own files by now, which a release closed."""
    if os.getpid() == pid:
        release(fd)


def held_by_another(path: Path) -> str | None:
    """(Under the guard.) The record of the process that holds `path` now, or None where it is free."""
    fd = try_lock(path, identity())
    if fd is not None:
        release(fd)
        return None
    return read_identity(path)


# ---------------------------------------------------------------- one prepare per destination

def acquire(dest: Path) -> int:
    """Wait for the prepare lock of `dest`, taking it over from a holder that is dead; its descriptor. (A
    holder on another host, a --dest on shared storage, is taken as alive.)"""
    log = logging.getLogger("prepare")
    path, said = dest / LOCK_NAME, False
    while True:
        with guard(dest):
            fd = try_lock(path, identity())
            if fd is not None:
                return fd
            record = read_identity(path)
            if holder_is_dead(record):
                log.warning("the prepare that held %s (%s) is no longer running, but processes it left still hold "
                            "its lock: taking the lock over", dest, describe(record))
                return take_over(path, identity())
        if not said:
            log.info("another prepare (%s) is writing %s; waiting for it to finish", describe(record), dest)
            said = True
        time.sleep(POLL_S)


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
    with guard(dest):
        record = held_by_another(dest / LOCK_NAME)
    return record is not None and not holder_is_dead(record)


def prepare_writing(dest: Path) -> str | None:
    """The record of a running prepare that holds `dest`'s lock now, asked by a reader (training): nothing is made or
    written (the folder may be read-only to it), and a lock it cannot judge (no lock file, no flock) is no answer,
    None. Under the guard: a prepare that finds the lock held for this moment never takes it for a dead one's."""
    path = dest / LOCK_NAME
    try:
        with guard(dest):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                record = read_identity(path)
                return None if holder_is_dead(record) else record
            finally:
                os.close(fd)  # (the shared lock, where taken, with it)
    except (OSError, LockUnwritable):
        return None
    return None


# ---------------------------------------------------------------- the dataset's readers

def shared_read_lock(dest: Path) -> int | None:
    """A shared flock of `dest`'s readers lock, for a loader while it reads the dataset there: its descriptor
    (`release` it); None where it cannot be had (no lock file: a dataset prepared before prepare made one; a file
    system without flock): the loader reads unguarded, as all did before. Nothing is made in the folder (a reader's
    may be read-only): prepare makes the file (`make_readers_lock`). BlockingIOError where a prepare holds it alone,
    replacing the dataset now."""
    try:
        fd = os.open(dest / READERS_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
        return None
    _held.add(fd)  # a child forked by the reader does not keep the dataset locked after it
    return fd


def make_readers_lock(dest: Path) -> None:
    """The readers lock file of `dest`, made by prepare (in a folder it writes; a loader makes nothing there), 0666
    for the umask to narrow: any user's loader may lock it shared. Where it cannot be made, loaders read unguarded."""
    try:
        os.close(os.open(dest / READERS_NAME, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
    except OSError:
        pass


def open_to_lock_alone(path: Path) -> int:
    """`path` opened (made where missing) for an exclusive flock: for writing, as try_lock's, since NFS makes an flock
    a byte-range lock and an exclusive one of a file opened read-only is EBADF (flock(2)), which refused every
    prepare into an NFS --dest as a file system without flock; read-only where it is another user's file this one
    may not write (their umask's 0644; a local disk locks it so all the same)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError as exn:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            raise unwritable(path, exn) from None
    except OSError as exn:
        raise unwritable(path, exn) from None


def sole_reader_lock(dest: Path) -> int | None:
    """The readers lock of `dest` taken alone, for a prepare about to replace the dataset there: its descriptor
    (`release` it once the new dataset is whole); None where a loader of this node holds it shared (its pids:
    `readers`). LockUnwritable where the file cannot be made, or the file system has no flock."""
    path = dest / READERS_NAME
    fd = open_to_lock_alone(path)
    if not locked_alone_now(fd, path):
        return None
    _held.add(fd)
    return fd


def readers(dest: Path) -> list[int]:
    """The pids that hold `dest`'s readers lock, as /proc/locks lists flocks by device and inode (pids of this
    PID namespace); [] where it cannot be told."""
    try:
        stat = os.stat(dest / READERS_NAME)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    inode = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    pids = {int(fields[4]) for fields in (line.split() for line in lines)
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == inode and fields[4].isdigit()}
    return sorted(pid for pid in pids if pid > 0)


def close_inherited_locks() -> None:
    """In a process forked while this one held locks: let go of its copies of the descriptors, so that
    a lock ends with the process that took it."""
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=close_inherited_locks)
