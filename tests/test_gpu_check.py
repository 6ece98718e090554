"""jobs/gpu_check.sh, the GPU issue's prepared check, run here as it runs there but on the CPU at toy
sizes (DEVICE=cpu): every step runs and its figures reach the results file, so that a lent GPU's few
minutes are not spent finding a typo. A release check (pytest -m release): it changes only with the
script, and takes minutes."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.release, pytest.mark.slow]


def test_the_gpu_check_runs_every_step_on_the_cpu_and_writes_its_figures(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "OUT": str(tmp_path / "out"), "SCRATCH": str(tmp_path / "scratch"),
           "CPU_SETS": "2 1"}
    result = subprocess.run(["bash", "jobs/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=900)
    results = (tmp_path / "out" / "gpu_check.txt").read_text()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "failed: none" in results and "FAILED" not in results
    assert "tests collected" in results  # step 1 only collects the CUDA tests here: the suite runs them
    for decode in ("cpu", "gpu"):
        for shards in ("plain", "seekable"):
            assert f"loader {shards} --decode {decode} on cpu: train" in results
        assert f"bench 2 cores, --modes model,full --decode {decode}: model" in results
        assert f"bench 1 cores, --modes model,full --decode {decode}: model" in results
        assert f"--decode {decode} --augment torchvision-v2: full" in results
    assert results.count("INFO epoch 0:") == 3 and "(EMA " in results
