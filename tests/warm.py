"""Training processes started warm: forked from a server that has torch, torchvision and the training
loop imported already, so that a rank starts in a fraction of a second instead of about 5 s.

Each process is a real process all the same: its own pid, environment, working folder, stdout and
stderr (a log file), exit status, signal handlers and gloo sockets. What it does not have is a fresh
interpreter: sys.path is set as `python -m` sets it (the working folder, then PYTHONPATH), but what
was imported in the server stays imported (a torch or a tensorboard shadowed by PYTHONPATH is not
seen), and what the OpenMP runtime read as it loaded (OMP_NUM_THREADS) is the server's. Tests of
those keep `conftest.run_module`, and a few cold `python -m train` tests remain for the entry point
itself.

multiprocessing's forkserver runs the server: it is a fresh interpreter (not a fork of pytest, which
has run threads) that imports PRELOAD once and forks a child per process asked for.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import time
from pathlib import Path

# What a training rank imports before its first step; about 5 s of a cold start on 2 vCPUs.
PRELOAD = ["torch", "torchvision", "train.run.loop", "train.run.cli", "train.run.report"]

_context = None


def context() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(module: str, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str,
           new_session: bool = False) -> None:
    """In the forked child: become `python -m module argv` (or `python module argv`, for a module
    that ends in .py) as far as a warm process can, and run it.
    An exit status leaves as SystemExit; multiprocessing's child then ends with os._exit, so the
    atexit functions a cold interpreter would run at its end are run here."""
    import atexit
    import runpy
    import sys

    if new_session:  # as Popen(start_new_session=True): a process group of its own and its children's
        os.setsid()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    # as python starts: the working folder (-m) or the script's, then PYTHONPATH's folders, then the rest
    script = module.endswith(".py")
    first = os.path.dirname(os.path.abspath(module)) if script else cwd
    extra = [folder for folder in env.get("PYTHONPATH", "").split(os.pathsep) if folder]
    sys.path[:] = [first, *extra, *[folder for folder in sys.path if folder not in ("", first, *extra)]]
    for target, path in ((1, out), (2, err)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = [module, *argv]
    try:
        if script:
            runpy.run_path(module, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


class Process:
    """One warm `python -m MODULE ARGS` (or `python SCRIPT.py ARGS`), its stdout written to `out` and
    its stderr to `err` (the same file unless given); Popen's methods."""

    def __init__(self, module: str, args, out: Path, err: Path | None = None, env: dict | None = None,
                 cwd: Path | None = None, new_session: bool = False, inherit_env: bool = True):
        from conftest import ROOT

        err = out if err is None else err
        for path in {Path(out), Path(err)}:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        full_env = {**(os.environ if inherit_env else {}), **{k: str(v) for k, v in (env or {}).items()}}
        self.process = context().Process(target=_child, args=(module, [str(a) for a in args], full_env,
                                                              str(cwd or ROOT), str(out), str(err), new_session))
        self.process.start()
        self.pid = self.process.pid
        self.args = [module, *map(str, args)]

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        self.process.kill()


class Popen(Process):
    """A warm process with subprocess.Popen's face, for code written against Popen (stderr=PIPE,
    text=True): `communicate(timeout)` gives back (stdout, stderr) as text once it has ended, and
    `returncode` is then set; `env`, where given, is the whole environment, as Popen's is. Its streams
    go to files in a folder of its own, removed at the end."""

    def __init__(self, module: str, args, env: dict | None = None, cwd: Path | None = None,
                 new_session: bool = False):
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix=f"warm-{Path(module).name}-"))
        self.returncode = None
        super().__init__(module, args, self.folder / "stdout", self.folder / "stderr", env=env, cwd=cwd,
                         new_session=new_session, inherit_env=env is None)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        import shutil

        self.returncode = self.wait(timeout)
        streams = (self.folder / "stdout").read_text(), (self.folder / "stderr").read_text()
        shutil.rmtree(self.folder, ignore_errors=True)
        return streams


def run(module: str, *args, env: dict | None = None, timeout: float = 300, cwd: Path | None = None
        ) -> subprocess.CompletedProcess:
    """`conftest.run_module`'s warm twin: the exit status, stdout and stderr."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"warm-{Path(module).name}-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = Process(module, args, out, err, env=env, cwd=cwd)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError(f"{module} still running after {timeout} s:\n{err.read_text()[-5000:]}") from None
        return subprocess.CompletedProcess(process.args, code, stdout=out.read_text(), stderr=err.read_text())


class Ranks:
    """`world` warm processes of `python -m train ARGS` (or another module or script), started as
    torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT), each with
    its own log file; `ranks` starts only some of them."""

    def __init__(self, world: int, args: list, tmp: Path, env: dict | None = None, ranks=None,
                 module: str = "train", cwd: Path | None = None):
        from train.cluster import free_port

        port = free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        self.logs = [tmp / f"rank{r}.log" for r in range(world)]
        self.procs = []
        for rank in ranks if ranks is not None else range(world):
            rank_env = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world,
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, **(env or {})}
            self.procs.append(Process(module, args, self.logs[rank], env=rank_env, cwd=cwd))

    def wait(self, timeout: float = 300) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"ranks still running after {timeout} s:\n{self.text()}") from None
        return codes

    def wait_for(self, text: str, rank: int = 0, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.logs[rank].read_text():
            if time.monotonic() > deadline or all(p.poll() is not None for p in self.procs):
                raise AssertionError(f"never saw {text!r}:\n{self.text()}")
            time.sleep(0.05)

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()

    def text(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in self.logs if p.exists())
