"""prepare's worker processes: the parts of the source and the shards, in `--workers` processes.

concurrent.futures' process pool, not multiprocessing.Pool: when a task fails (a bad image, a full
disk), leaving the pool cancels what is queued and waits only for what is running, where
Pool.terminate() could hang for good, its task-feeding thread blocked writing to a pipe its killed
workers no longer read (seen in the test of a worker failing on an image); and a worker killed
outright (the out-of-memory killer, say) is an error naming what happened, not a hang. An unexpected
failure inside a task is one line naming the image or shard it was on (`failures_named`).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, contextmanager, nullcontext
from itertools import islice
from typing import Callable, Iterable, Iterator

from prepare.config import PrepareError
from prepare.space import is_out_of_space
from shards.errors import UserError

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkerDied(UserError, RuntimeError):
    """A worker process ended without finishing its task: killed, or out of memory."""


@contextmanager
def worker_died_is_named():
    try:
        yield
    except BrokenProcessPool as exn:
        raise WorkerDied(f"a prepare worker process died mid-task ({exn}): killed, or out of memory? Check the "
                         "node's memory (fewer --workers use less), then rerun") from None


@contextmanager
def failures_named(what: str):
    """In a worker: an unexpected failure becomes one line naming the image or shard it was on.
    Errors that already say what to do, and a full disk (named by the main process), pass."""
    try:
        yield
    except UserError:
        raise
    except OSError as exn:
        if is_out_of_space(exn):
            raise
        raise PrepareError(f"{what}: {exn.strerror or exn} (a worker failed there)") from None
    except Exception as exn:
        raise PrepareError(f"{what}: {type(exn).__name__}: {exn} (a worker failed there)") from None


def die_with_parent(parent: int) -> None:
    """A worker's first act: SIGKILL from the kernel when the thread that forked it ends (the main
    thread: WorkerPool is made there), and exit now if the parent is already gone. (The parent's locks
    it let go of as it was forked: shards/lock.py.)"""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's (prepare/cli.py's Stopped): a worker just ends
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # Ctrl-C: Python's KeyboardInterrupt, not the parent's
        signal.signal(signal.SIGINT, signal.default_int_handler)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died between the fork and the line above
        os._exit(1)


class WorkerPool:
    """`workers` processes forked now, before the caller starts any thread: they inherit the modules
    imported so far. Made in the main thread: the workers die with the thread that forked them."""

    def __init__(self, workers: int):
        self.executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                            initializer=die_with_parent, initargs=(os.getpid(),))
        try:
            self.executor.submit(int).result()  # a fork executor starts all its processes at the first task
        except OSError as exn:  # a fork refused: EAGAIN (a limit on processes), ENOMEM (strict overcommit)
            self.end_started()
            raise PrepareError(f"cannot start {workers} prepare worker processes ({exn.strerror or exn}): this node "
                               "limits the job's processes (ulimit -u, its cgroup's task limit) or memory. Rerun with "
                               "fewer --workers") from None

    def end_started(self) -> None:
        """The workers forked before a fork failed, ended: they wait for tasks that never come, and the
        interpreter's exit waits for them (a hang after the traceback, where a fork failed)."""
        for process in list((self.executor._processes or {}).values()):
            process.kill()
            process.join()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)

    def imap(self, fn: Callable, jobs: Iterable) -> Iterator:
        """fn(job) for every job, in the jobs' order."""
        with worker_died_is_named():
            yield from self.executor.map(fn, jobs)

    def submit_ahead(self, fn: Callable, jobs: Iterable, ahead: int) -> Iterator[tuple[object, Future]]:
        """(job, the task of fn(job)) for every job, in the jobs' order: `ahead` submitted besides the one
        the caller takes, for tasks whose output the caller takes while they run (a part stream's segments).
        A worker that died is named when the caller asks a task's result."""
        jobs, pending = iter(jobs), deque()
        with worker_died_is_named():  # a submit to a pool whose worker died (idle, by the OOM killer) raises too
            pending.extend((job, self.executor.submit(fn, job)) for job in islice(jobs, ahead))
            while pending:
                taken = pending.popleft()
                pending.extend((job, self.executor.submit(fn, job)) for job in islice(jobs, 1))
                yield taken

    def imap_unordered(self, fn: Callable, jobs: Iterable) -> Iterator:
        """fn(job) for every job, as each finishes."""
        with worker_died_is_named():  # the submits too: a worker that died idle, before them, broke the pool
            pending: set[Future] = {self.executor.submit(fn, job) for job in jobs}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()


def worker_pool(workers: int) -> AbstractContextManager[WorkerPool | None]:
    """`workers` processes forked now (WorkerPool), or None where one is asked: jobs then run here."""
    return WorkerPool(workers) if workers > 1 else nullcontext()
