"""The test suite itself: what it asks of the machine it runs on."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from conftest import FULL_PASSES_EVERY, NEEDS_FREE_GB, ROOT
from test_prepare import small_tmpfs


def test_the_suite_refuses_to_start_on_a_nearly_full_disk_in_one_line(tmp_path):
    """A real 50 MB tmpfs as TMPDIR: pytest stops before collecting, saying what it needs and what to do."""
    mount = tmp_path / "small"
    reason = small_tmpfs(mount, 50)
    if reason:
        pytest.skip(reason)
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider",
                                 "tests/test_checkpoint.py"], cwd=ROOT, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(mount)},
                                capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["umount", str(mount)])
    assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"the test suite needs about {NEEDS_FREE_GB} GB free in {mount} and there are 0.1" in result.stdout + result.stderr
    assert "set TMPDIR to a larger disk" in result.stdout + result.stderr


def test_the_test_process_has_frozen_what_collection_made_and_runs_rarer_full_collections():
    """conftest's garbage-collector settings are in force in the process that runs the tests (and its automatic
    collection is still on: only the full passes are rarer)."""
    assert gc.isenabled()
    assert gc.get_freeze_count() > 100_000  # torch's modules, the test modules, the items
    assert gc.get_threshold()[2] == FULL_PASSES_EVERY != 10


# ---------------------------------------------------------------- tests/warm.py: processes forked warm

WARM_PROBE = """
import os, signal, sys, time

caught = []
signal.signal(signal.SIGUSR1, lambda signum, frame: caught.append(signum))
print("argv", sys.argv[1:], "cwd", os.getcwd(), "probe", os.environ.get("PROBE"), "torch" in sys.modules, flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "session":
    print("leads its group", os.getpgid(0) == os.getpid(), "and session", os.getsid(0) == os.getpid(),
          "HOME" in os.environ, flush=True)
if sys.argv[1] == "wait-for-signal":
    while not caught:
        time.sleep(0.01)
    print("caught", caught, flush=True)
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def probe(tmp_path) -> str:
    """WARM_PROBE as a package `probe` in tmp_path, to run as `python -m probe` from there."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__main__.py").write_text(WARM_PROBE)
    (tmp_path / "probe" / "__init__.py").write_text("")
    return "probe"


@pytest.mark.slow
def test_a_warm_process_is_its_own_process_with_its_argv_environment_folder_streams_and_exit_status(tmp_path, probe):
    import warm

    result = warm.run(probe, "plain", 3, env={"PROBE": "here", "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stdout.splitlines() == [f"argv ['plain', '3'] cwd {tmp_path} probe here True"]
    assert result.stderr == "to stderr\n"


@pytest.mark.slow
def test_a_warm_popen_has_popens_face_a_whole_environment_and_a_session_of_its_own(tmp_path, probe):
    """warm.Popen, as tests/test_shared_read.py starts prepare's nodes: `env` replaces the environment
    (as Popen's does: a variable the suite has is not inherited), start_new_session's own process group."""
    import os

    import warm

    assert "HOME" in os.environ
    env = {"PROBE": "alone", "PYTHONPATH": str(tmp_path), "PATH": os.environ["PATH"]}
    process = warm.Popen(probe, ["session", 4], env=env, cwd=tmp_path, new_session=True)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 4 and stderr == "to stderr\n"
    assert stdout.splitlines() == [f"argv ['session', '4'] cwd {tmp_path} probe alone True",
                                   "leads its group True and session True False"]
    assert not process.folder.exists()  # its streams' files are gone with it
    plain = warm.run(probe, "session", 0, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert plain.stdout.splitlines()[1] == "leads its group False and session False True"


@pytest.mark.slow
def test_a_warm_process_takes_signals_and_is_killed_and_starts_in_under_a_second(tmp_path, probe):
    """The warm server forks; a fork of a process that has imported torch must not hang (the project
    once met a hang in CPython's after-fork code): 20 in a row, 4 at once, each well under a second."""
    import os
    import signal
    import time

    import warm

    warm.run(probe, "plain", 0, cwd=tmp_path)  # the server started: its imports are not the start time
    started = time.monotonic()
    assert [warm.run(probe, "plain", 0, cwd=tmp_path).returncode for _ in range(20)] == [0] * 20
    each = (time.monotonic() - started) / 20
    assert each < 1.0, f"a warm process took {each:.2f} s"
    logs = [tmp_path / f"p{i}.log" for i in range(4)]
    together = [warm.Process(probe, ["wait-for-signal", 5], log, cwd=tmp_path) for log in logs]
    deadline = time.monotonic() + 30
    while not all("argv" in log.read_text() for log in logs):  # every handler in place
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for process in together[:3]:
        process.send_signal(signal.SIGUSR1)
    assert [p.wait(timeout=30) for p in together[:3]] == [5, 5, 5]
    assert all("caught [10]" in log.read_text() for log in logs[:3])
    together[3].kill()
    assert together[3].wait(timeout=30) == -signal.SIGKILL and together[3].pid != os.getpid()
