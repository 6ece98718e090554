"""One prepare per destination, with real processes: a prepare killed by kill -9 leaves no worker
running and no lock held; a lock kept by a dead prepare's leftover processes is taken over; a live
holder is waited for (shards/lock.py, prepare/workers.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import BIG_SPEC, ROOT, run_module, tree_bytes, write_sample
from shards.lock import (
    exclusive_lock, held_by_a_live_prepare, holder_is_dead, identity, release, start_time, take_over, unwritable,
)
from shards.manifest import DatasetNotReady, read_complete_manifest, write_file_atomic
from prepare.sample import SampleSpec, make_sample
from shards.paths import LOCK_NAME


def processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line holds `text` (prepare's workers are forks: they
    carry their parent's command line)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                pids.append(int(cmdline.parent.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return pids


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------- who holds it: pure decisions

def test_a_holder_is_dead_only_where_its_pid_and_start_time_name_no_running_process_of_this_host():
    mine = identity()
    pid, started, host = mine.split()
    assert not holder_is_dead(mine)
    assert holder_is_dead(f"{pid} {int(started) + 1} {host}")  # the pid reused by another process
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert holder_is_dead(f"{gone.pid} 1 {host}")
    assert not holder_is_dead(f"{gone.pid} 1 another-host")  # not ours to judge: taken as alive
    for record in ("", "garbage", f"{pid} None {host}", "x 1 host"):
        assert not holder_is_dead(record)
    assert start_time(os.getpid()) == started


def test_a_holder_hidden_from_this_user_in_proc_is_alive_not_dead():
    """/proc mounted with hidepid (a cluster's privacy setting): another user's live prepare or training has no
    /proc/PID/stat to read, and was judged dead, its lock taken over while it wrote (two users' jobs on one node, one
    group-shared --dest: both wrote there, each removing the other's shards). Real: a /proc of hidepid=2 in a mount
    namespace, asked as uid 12345 about this (root's) live process and a finished one."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a /proc and to run as another user")
    gone = subprocess.Popen(["true"])
    gone.wait()
    code = "import sys; from shards.lock import holder_is_dead; print([holder_is_dead(r) for r in sys.argv[1:]])"
    shown = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount -t proc -o hidepid=2 proc '
                            '/proc && exec setpriv --reuid 12345 --regid 12345 --clear-groups "$@"', "sh",
                            sys.executable, "-c", code, identity(), f"{gone.pid} 1 {socket.gethostname()}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    if shown.returncode != 0 and "mount" in shown.stderr:
        pytest.skip(f"cannot mount a /proc here: {shown.stderr.strip()}")
    assert shown.stdout == "[False, True]\n", shown.stderr


def test_the_lock_file_names_its_holder_and_a_free_lock_is_not_held(tmp_path):
    assert not held_by_a_live_prepare(tmp_path)
    with exclusive_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text() == identity()
        assert f"{os.getpid()} " in identity() and identity().endswith(socket.gethostname())
    assert not held_by_a_live_prepare(tmp_path)


@pytest.mark.parametrize("umask,mode", [(0o002, 0o664), (0o077, 0o600)])
def test_the_lock_and_atomic_files_take_the_users_umask(tmp_path, umask, mode):
    """A group-shared project folder (umask 002): a colleague's prepare or resume opens the lock file for writing
    and replaces the manifest or checkpoint; a fixed 0644 refused them, saying the folder was not writable. A
    private umask (077) keeps them private."""
    before = os.umask(umask)
    try:
        with exclusive_lock(tmp_path):
            pass
        write_file_atomic(tmp_path / "manifest.json", b"{}")
        fd = take_over(tmp_path / ".train.lock", identity())
        release(fd)
    finally:
        os.umask(before)
    for name in (LOCK_NAME, "manifest.json", ".train.lock"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([LOCK_NAME, "manifest.json", ".train.lock"])


def test_a_lock_file_of_another_user_in_a_writable_folder_is_named_with_what_to_do(tmp_path):
    (tmp_path / LOCK_NAME).write_text("")
    said = str(unwritable(tmp_path / LOCK_NAME, PermissionError(13, "Permission denied")))
    assert said == (f"cannot write the lock file {tmp_path / LOCK_NAME} (Permission denied): it is another user's (uid "
                    f"{os.getuid()}) and not writable by this one; ask them to make it group-writable (chmod g+w "
                    f"{tmp_path / LOCK_NAME}), or remove it while nothing runs there")
    assert str(unwritable(tmp_path / "gone" / LOCK_NAME, PermissionError(13, "Permission denied"))).endswith(
        "its folder must be writable by this user, with free space")


def test_a_file_system_without_flock_is_one_line_for_prepare_and_a_refusal_for_training(sources, tmp_path,
                                                                                          monkeypatch, caplog):
    """Lustre mounted without -o flock answers flock with ENOSYS (NFS without its lock daemon: ENOLCK): prepare
    says so in one line, exit status 2, and training's rank 0 refuses its run directory as for a full disk (a
    verdict every rank says), where both were a traceback of fcntl.flock (training's other ranks then waited)."""
    import errno
    import fcntl

    from prepare.cli import main
    from train.run.run_lock import Holder, take

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    dest = tmp_path / "imagenet"
    assert main(["--source", str(sources["official"]), "--dest", str(dest)]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [f"cannot lock {dest} (Function not implemented): its file system does not support file locks "
                      "(flock); use a local disk, NFS v4, GPFS, or Lustre mounted with -o flock"], errors
    claim = take(tmp_path / "run", Holder.me({}))
    assert claim.fd is None and claim.refused.startswith(f"cannot lock {tmp_path / 'run'} (Function not implemented)")


# ---------------------------------------------------------------- with real processes

HOLDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from shards.lock import acquire
    acquire(Path(sys.argv[1]))
    print("held", flush=True)
    if sys.argv[2] == "orphan":  # a child that keeps the descriptor (as workers of an older prepare did)
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        os._exit(0)  # the holder dies; its child, now init's, still holds the flock
    time.sleep(float(sys.argv[3]))
""")


def hold(dest: Path, how: str, seconds: float = 0) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(dest), how, str(seconds)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_lock_kept_by_a_dead_prepares_leftover_process_is_taken_over(tmp_path):
    dest = tmp_path / "imagenet"
    dest.mkdir()
    hold(dest, "orphan").wait()
    leftovers = processes_naming(str(dest))
    try:
        assert leftovers, "the stand-in for a leftover worker is not running"
        assert not held_by_a_live_prepare(dest)  # held, but by a dead prepare's leftovers
        started = time.monotonic()
        with exclusive_lock(dest):
            assert time.monotonic() - started < 5
            assert (dest / LOCK_NAME).read_text() == identity()
            assert held_by_a_live_prepare(dest)  # by us, alive
        assert not held_by_a_live_prepare(dest)
    finally:
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)


def test_a_training_started_while_a_prepare_writes_its_data_is_told_to_wait_for_it(tmp_path):
    """A training (or the library) started beside the prepare of its --data, or beside a --force or --verify
    rebuild: no manifest yet. It was told to run prepare, which was running. A dead prepare's leftovers, or no lock,
    leave that line; nothing is made in the folder (a reader's may be read-only)."""
    dest = tmp_path / "imagenet"
    dest.mkdir()
    with pytest.raises(DatasetNotReady, match=r"\(no manifest.json\): run `srun --ntasks-per-node=1 python -m prepare"):
        read_complete_manifest(dest)
    assert list(dest.iterdir()) == []
    holder = hold(dest, "live", seconds=60)
    try:
        with pytest.raises(DatasetNotReady) as refused:
            read_complete_manifest(dest)
        assert str(refused.value) == (f"no prepared dataset at {dest} yet: a prepare (pid {holder.pid} on "
                                      f"{socket.gethostname()}) is writing it now. Wait for it to finish, then train "
                                      "(in a job script: run prepare before train, not beside it)")
        assert held_by_a_live_prepare(dest)  # asked, not taken
    finally:
        holder.kill()
        holder.wait()
    hold(dest, "orphan").wait()
    leftovers = processes_naming(str(dest))
    try:
        assert leftovers
        with pytest.raises(DatasetNotReady, match=r"\(no manifest.json\): run `srun"):
            read_complete_manifest(dest)
    finally:
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)


def test_a_holder_in_a_pid_namespace_of_its_own_is_not_judged_dead_from_outside(tmp_path):
    """A container with its own PID namespace on the same node (apptainer --containall, podman): its prepare's pid
    named no process here, or another one (its pid 1, this host's init), and its live lock was taken over by a
    second job's prepare of the same --dest. Real: a holder under unshare --pid."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a PID namespace")
    dest = tmp_path / "imagenet"
    dest.mkdir()
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c",
                               HOLDER, str(dest), "live", "60"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline() != "held\n":
            pytest.skip("cannot make a PID namespace here")
        record = (dest / LOCK_NAME).read_text()
        assert not holder_is_dead(record) and held_by_a_live_prepare(dest)
        assert (dest / LOCK_NAME).read_text() == record  # asked, not taken over
        assert record.split()[2].startswith(f"{socket.gethostname()}:pidns")  # its pid is its namespace's
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_prepare_waits_for_a_live_holder_names_it_and_goes_on_when_it_ends(tmp_path):
    source = tmp_path / "source"
    make_sample(source, "official", SampleSpec(classes=2, train_per_class=4, val_per_class=2))
    dest = tmp_path / "imagenet"
    dest.mkdir()
    holder = hold(dest, "live", seconds=3)
    assert held_by_a_live_prepare(dest)
    started = time.monotonic()
    result = run_module("prepare", "--source", source, "--dest", dest, timeout=120)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started > 2  # it waited for the holder
    assert f"another prepare (pid {holder.pid} on {socket.gethostname()}) is writing {dest}; waiting" in result.stderr
    holder.wait()


@pytest.mark.slow
def test_kill_9_early_in_a_run_leaves_no_process_and_a_rerun_completes_with_identical_shards(tmp_path):
    """The out-of-memory killer, a node's health check or a user's kill -9 kill the prepare process
    alone: its workers must die with it and must not keep the lock (a rerun waited for ever)."""
    source = tmp_path / "big"
    write_sample(source, "official", BIG_SPEC)
    args = ["--source", source, "--shard-size", 0.5, "--workers", 2]
    reference = tmp_path / "reference"
    assert run_module("prepare", *args, "--dest", reference).returncode == 0
    dest = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "prepare", *map(str, args), "--dest", str(dest)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_until(lambda: len(processes_naming(str(dest))) >= 3, 30)  # the prepare and its 2 workers
    time.sleep(0.7)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_until(lambda: not processes_naming(str(dest)), 5), "workers outlived their prepare"
    assert not held_by_a_live_prepare(dest)
    started = time.monotonic()
    rerun = run_module("prepare", *args, "--dest", dest, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert time.monotonic() - started < 60
    assert tree_bytes(dest) == tree_bytes(reference)
    assert not processes_naming(str(dest))


# ---------------------------------------------------------------- a prepare and the loaders reading its --dest

@pytest.mark.slow
def test_a_prepare_force_into_the_dest_a_loader_reads_is_refused_and_leaves_the_dataset_whole(sources, tmp_path,
                                                                                              caplog):
    """A prepare --force into the --dest a training run of this node read: the run kept reading the shards it had
    mapped (their space not freed, though prepare's room check counted it free) and died at the first it had not
    ("changed after this loader was made"). The prepare is refused now, in one line naming the reader, and the run
    reads its epoch to the end; once the loader is closed, the --force replaces the dataset. The refused one does not
    say first that it is replacing the dataset (it said so, then refused): only the one that does."""
    import gc

    from conftest import config
    from prepare.builder import prepare
    from prepare.config import PrepareError
    from train import ImageNetLoader

    dest = tmp_path / "imagenet"
    prepare(config(sources["official"], dest))
    before = tree_bytes(dest)
    data = ImageNetLoader(dest, "train", batch_size=4, image_size=32, device="cpu", workers=1)
    batches = data.batches()
    read = len(next(batches).labels)
    with pytest.raises(PrepareError) as refused:
        prepare(config(sources["official"], dest, shard_size_mb=0.2, force=True))
    assert str(refused.value) == (f"{dest} is being read by a training run or loader on this node (pid {os.getpid()}): "
                                  "replacing its dataset now would pull it from under that run. Stop the run (or let "
                                  "it finish) and rerun, or prepare into another --dest")
    assert "replacing the dataset" not in caplog.text
    read += sum(len(batch.labels) for batch in batches)
    assert read == read_complete_manifest(dest).splits["train"].samples // 4 * 4 and tree_bytes(dest) == before
    del data, batches
    gc.collect()  # a loader dropped without close() lets go of the dataset too
    prepare(config(sources["official"], dest, shard_size_mb=0.2, force=True))
    assert tree_bytes(dest) != before and f"--force: replacing the dataset in {dest}\n" in caplog.text


def test_a_loader_started_while_a_prepare_replaces_its_dataset_is_told_to_wait_for_it(prepared, tmp_path):
    """While a prepare replaces a dataset (its readers lock held alone) a loader is refused in one line, never
    handed the old manifest's shards as they go; once the prepare ends, the loader starts."""
    from conftest import copy_dataset
    from shards.lock import sole_reader_lock
    from train import ImageNetLoader

    root = copy_dataset(prepared, tmp_path / "imagenet")
    held = sole_reader_lock(root)
    assert held is not None
    try:
        with pytest.raises(DatasetNotReady) as refused:
            ImageNetLoader(root, "train", batch_size=4, image_size=32, device="cpu", workers=1)
        assert str(refused.value) == (f"a prepare is replacing the dataset at {root} now. Wait for it to finish, "
                                      "then start again (in a job script: run prepare before train, not beside it)")
    finally:
        release(held)
    with ImageNetLoader(root, "train", batch_size=4, image_size=32, device="cpu", workers=1) as data:
        assert sole_reader_lock(root) is None  # held shared by the loader, until close()
    held = sole_reader_lock(root)
    assert held is not None
    release(held)


@pytest.mark.slow
def test_a_forked_child_dropping_its_copy_of_a_loader_closes_none_of_its_files_and_keeps_no_lock(prepared, tmp_path):
    """A child forked while a loader is open (os.fork, multiprocessing's fork) closes its copy of the readers lock at
    the fork, and the lowest free number goes to the next file it opens. Its copy of the loader, closed or collected
    there, released that number again: the child's own file was closed under it (EBADF). The parent's lock is kept
    through the child's life and exit, and goes with the parent's close()."""
    import gc

    from conftest import copy_dataset
    from shards.lock import readers
    from train import ImageNetLoader

    root = copy_dataset(prepared, tmp_path / "imagenet")
    data = ImageNetLoader(root, "train", batch_size=4, image_size=32, device="cpu", workers=1)
    held = data._shared.held
    told, tell = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's lines: it reports through the pipe, and never returns)
        try:
            mine = os.open(tmp_path / "child's file", os.O_RDWR | os.O_CREAT, 0o644)
            if mine != held:  # (the lowest number free: the lock's, unless the test process had a lower one free)
                os.dup2(mine, held, inheritable=False)
                os.close(mine)
                mine = held
            state = [os.getpid() in readers(root)]
            data.close()
            del data
            gc.collect()
            os.fstat(mine)
            os.write(tell, repr(state + ["open"]).encode())
        except BaseException as exn:
            os.write(tell, repr(exn).encode())
        os._exit(0)
    os.close(tell)
    os.waitpid(child, 0)
    with os.fdopen(told) as said:
        assert said.read() == "[False, 'open']"
    assert readers(root) == [os.getpid()]
    data.close()
    assert readers(root) == []


def test_the_readers_lock_is_taken_alone_where_flock_is_nfs_s_byte_range_lock(tmp_path, monkeypatch):
    """An NFS client makes an flock a byte-range lock of the whole file, and an exclusive one needs the file open for
    writing (flock(2)): prepare's sole_reader_lock opened it read-only, EBADF there, and every build into an NFS
    --dest (a first one too) stopped saying its file system had no flock. The stand-in answers as NFS does; the
    loaders' shared locks, read-only, are allowed there."""
    import errno
    import fcntl

    from shards.lock import shared_read_lock, sole_reader_lock

    real = fcntl.flock

    def nfs_flock(fd, operation):
        if operation & fcntl.LOCK_EX and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    held = sole_reader_lock(tmp_path)
    assert held is not None
    with pytest.raises(BlockingIOError):
        shared_read_lock(tmp_path)
    release(held)
    reading = shared_read_lock(tmp_path)
    assert reading is not None and sole_reader_lock(tmp_path) is None
    release(reading)


@pytest.mark.slow
def test_a_readers_lock_file_of_another_user_is_still_taken_alone_on_a_local_disk():
    """Another user's .readers.lock (made by their prepare, their umask's 0644) in a folder this user prepares in: a
    local disk locks a file opened read-only all the same, so the prepare goes on, as before it opened it to write.
    Real: a lock file of uid 12345, asked as uid 12345 and as another (54321)."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to run as other users")
    dest = Path(tempfile.mkdtemp(prefix="readers-"))  # (pytest's tmp_path lies in root's 0700 folder)
    try:
        dest.chmod(0o777)
        code = ("import os, sys; from pathlib import Path; from shards.lock import sole_reader_lock; "
                "os.umask(0o022); print(sole_reader_lock(Path(sys.argv[1])) is not None)")
        said = [subprocess.run(["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", sys.executable, "-c",
                                code, str(dest)], cwd=ROOT, capture_output=True, text=True, timeout=60)
                for uid in ("12345", "54321")]
        assert [s.stdout for s in said] == ["True\n", "True\n"], [s.stderr for s in said]
        assert (dest / ".readers.lock").stat().st_uid == 12345
    finally:
        shutil.rmtree(dest)
