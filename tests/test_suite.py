"""The test suite itself: what it asks of the machine it runs on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, NEEDS_FREE_GB
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
