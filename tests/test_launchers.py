"""The public loader under real launchers, two CPU processes on gloo: the library manual's example
(docs/library.md) run verbatim under torchrun and under accelerate launch. Then, in two ranks started
warm as torchrun starts them (tests/warm.py), the example with the recipe's augmentation added, and a
mid-epoch state saved by rank 0 that resumes every rank to exactly the batches it had not taken."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import warm
from conftest import ROOT
from shards.manifest import read_manifest
from train.cluster import free_port

pytestmark = pytest.mark.slow
RESUME_SCRIPT = Path(__file__).with_name("library_resume_script.py")


def readme_example() -> str:
    """The complete DDP example of the library's manual (docs/library.md, linked from the README), as
    printed: the first Python block of its section "A complete DDP example"."""
    manual = (ROOT / "docs" / "library.md").read_text()
    section = manual.split("## A complete DDP example", 1)[1]
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
    # TMPDIR in the test's folder: torchrun (accelerate's too) leaves its log folder, /tmp/torchelastic_*, behind
    (cwd / "tmp").mkdir(exist_ok=True)
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TMPDIR": str(cwd / "tmp")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


EXIT_PROBE = """
import atexit, os, sys
def threads_at_exit():
    tasks = os.listdir(f"/proc/{os.getpid()}/task")
    names = sorted(open(f"/proc/{os.getpid()}/task/{t}/comm").read().strip() for t in tasks)
    # One file a rank: two ranks printing to torchrun's one pipe can interleave within a line.
    with open(f"threads-at-exit-{os.environ['RANK']}.txt", "w") as out:
        out.write(" ".join(names))
atexit.register(threads_at_exit)
sys.argv.pop(0)
exec(compile(open(sys.argv[0]).read(), sys.argv[0], "exec"))
"""


@pytest.mark.parametrize("launcher", [torchrun, accelerate], ids=["torchrun", "accelerate"])
def test_the_readme_example_runs_verbatim_on_two_ranks_and_leaves_no_process_group_thread_at_exit(prepared, tmp_path,
                                                                                                   launcher):
    """The example as printed, its two epochs evaluating every val image once over the ranks; and its
    process group gone before the interpreter shuts down (gloo's threads still running then ended one
    run in 15 with `terminate called without an active exception`): EXIT_PROBE runs the example and
    lists each rank's threads as it exits."""
    example, probe = tmp_path / "example.py", tmp_path / "probe.py"
    example.write_text(readme_example())
    probe.write_text(EXIT_PROBE)
    # 2 epochs of batch 12: 7 steps each (the example's resnet50 costs about 1 CPU-second a step and rank, most of
    # it the all-reduce and the optimizer's pass over 25M parameters), and val's 15 images a rank as 12 + 3
    result = run(launcher(str(probe), str(example), str(prepared), "2", "12", "32"), cwd=tmp_path)
    lines = re.findall(r"epoch (\d): loss [\d.]+, val top-1 [\d.]+% of (\d+) images, (\d) ranks", result.stdout)
    val = read_manifest(prepared).splits["val"].samples
    assert lines == [("0", str(val), "2"), ("1", str(val), "2")], result.stdout  # every val image once over 2 ranks
    exits = {path.name: path.read_text() for path in sorted(tmp_path.glob("threads-at-exit-*.txt"))}
    assert sorted(exits) == ["threads-at-exit-0.txt", "threads-at-exit-1.txt"], result.stdout
    assert not any(re.search(r"gloo|nccl", names) for names in exits.values()), exits


def test_the_readme_example_runs_with_the_recipes_augmentation_added_and_nothing_else_changed(prepared, tmp_path):
    """MixUp/CutMix make the training targets soft: F.cross_entropy takes them as they are."""
    text = readme_example()
    made = 'image_size=size, device=device) as train_data'
    assert made in text and "from train import ImageNetLoader\n" in text
    augment = 'augment=Augment(policy="trivialaugment", erasing=0.1, mixup=0.2, cutmix=1.0)'
    text = text.replace(made, f"image_size=size, device=device,\n                    {augment}) as train_data")
    example = tmp_path / "example.py"
    imports = "from train import Augment, ImageNetLoader\n"
    example.write_text(text.replace("from train import ImageNetLoader\n", imports))
    # one epoch (the test above runs two): the soft targets are in every step
    ranks = warm.Ranks(2, [prepared, 1, 12, 32], tmp_path / "logs", module=str(example), cwd=tmp_path)
    assert ranks.wait() == [0, 0], ranks.text()
    val = read_manifest(prepared).splits["val"].samples
    lines = re.findall(r"epoch (\d): loss [\d.]+, val top-1 [\d.]+% of (\d+) images, (\d) ranks", ranks.text())
    assert lines == [("0", str(val), "2")], ranks.text()


def test_a_mid_epoch_state_saved_by_rank_0_resumes_every_rank_exactly(prepared, tmp_path):
    """On the world that saved it, each rank's batches are the uninterrupted run's; on 1 rank, and on 4 under
    real torchrun and under accelerate launch (#52), every remaining global step holds the same samples with the
    same pixels."""
    state, out = tmp_path / "state.json", tmp_path / "out"
    for mode, *stop_after in (("whole",), ("stop", 3), ("resume",)):
        ranks = warm.Ranks(2, [prepared, mode, state, f"{out}-{mode}", *stop_after], tmp_path / mode,
                           module=str(RESUME_SCRIPT), cwd=tmp_path)
        assert ranks.wait() == [0, 0], ranks.text()
    runs = {mode: [json.loads(Path(f"{out}-{mode}.rank{rank}").read_text()) for rank in (0, 1)]
            for mode in ("whole", "stop", "resume")}
    for rank in (0, 1):
        whole, stop, resumed = (runs[mode][rank] for mode in ("whole", "stop", "resume"))
        assert stop["digests"] == whole["digests"][:3]
        assert resumed["digests"] == whole["digests"][3:] and len(whole["digests"]) > 4
        assert stop["state"] == json.loads(state.read_text())  # rank 1's own state equals what rank 0 saved
    one = warm.Ranks(1, [prepared, "resume", state, f"{out}-on1"], tmp_path / "on1", module=str(RESUME_SCRIPT),
                     cwd=tmp_path)
    assert one.wait() == [0], one.text()
    run(torchrun(str(RESUME_SCRIPT), str(prepared), "resume", str(state), f"{out}-on4", ranks=4), cwd=tmp_path)
    run(accelerate(str(RESUME_SCRIPT), str(prepared), "resume", str(state), f"{out}-accelerate", ranks=4),
        cwd=tmp_path)
    want = global_steps(runs["whole"])[3:]
    for name, world in (("on1", 1), ("on4", 4), ("accelerate", 4)):
        got = global_steps([json.loads(Path(f"{out}-{name}.rank{rank}").read_text()) for rank in range(world)])
        assert got == want, name


def global_steps(ranks: list[dict]) -> list[dict]:
    """{sample's key hash: its pixels' and label's digest} of each global step, over the ranks."""
    return [{key: value for step in steps for key, value in step.items()}
            for steps in zip(*(rank["samples"] for rank in ranks))]


