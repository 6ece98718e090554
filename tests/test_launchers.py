"""The public loader under real launchers, two CPU processes on gloo: the README's example run
verbatim under torchrun and under accelerate launch, and a mid-epoch state saved by rank 0 that
resumes every rank to exactly the batches it had not taken."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from shards.manifest import read_manifest
from train.cluster import free_port

pytestmark = pytest.mark.slow
RESUME_SCRIPT = Path(__file__).with_name("library_resume_script.py")


def readme_example() -> str:
    """The first Python block of the README's library section, as printed."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your own loop: `from train import ImageNetLoader`", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def torchrun(*args: str, ranks: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(ranks),
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}", *args]


def accelerate(*args: str, ranks: int = 2) -> list[str]:
    # --multi_gpu starts the processes through torch.distributed even without a GPU (--cpu would start
    # one process: accelerate's multi-CPU mode goes through MPI instead)
    return [str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_processes", str(ranks),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
            str(free_port()), *args]


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


@pytest.mark.parametrize("launcher", [torchrun, accelerate], ids=["torchrun", "accelerate"])
def test_the_readme_example_runs_verbatim_on_two_ranks(prepared, tmp_path, launcher):
    example = tmp_path / "example.py"
    example.write_text(readme_example())
    result = run(launcher(str(example), str(prepared), "2", "8", "32"), cwd=tmp_path)
    lines = re.findall(r"epoch (\d): loss [\d.]+, val top-1 [\d.]+% of (\d+) images, (\d) ranks", result.stdout)
    val = read_manifest(prepared).splits["val"].samples
    assert lines == [("0", str(val), "2"), ("1", str(val), "2")], result.stdout  # every val image once over 2 ranks


def test_a_mid_epoch_state_saved_by_rank_0_resumes_every_rank_exactly(prepared, tmp_path):
    state, out = tmp_path / "state.json", tmp_path / "out"
    run(torchrun(str(RESUME_SCRIPT), str(prepared), "whole", str(state), f"{out}-whole"), cwd=tmp_path)
    run(torchrun(str(RESUME_SCRIPT), str(prepared), "stop", str(state), f"{out}-stop", "3"), cwd=tmp_path)
    run(torchrun(str(RESUME_SCRIPT), str(prepared), "resume", str(state), f"{out}-resume"), cwd=tmp_path)
    for rank in (0, 1):
        whole, stop, resumed = (json.loads(Path(f"{out}-{mode}.rank{rank}").read_text())
                                for mode in ("whole", "stop", "resume"))
        assert stop["digests"] == whole["digests"][:3]
        assert resumed["digests"] == whole["digests"][3:] and len(whole["digests"]) > 4
        assert stop["state"] == json.loads(state.read_text())  # rank 1's own state equals what rank 0 saved
