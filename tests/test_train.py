"""Real multi-process DDP training on gloo (CPU), on the prepared sample data.

Ranks are started as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), one
process each, forked warm (tests/warm.py: torch already imported); tests/test_slurm.py does the same
through a real srun. A few start `python -m train` cold, as a user does: the entry point, real
torchrun, and what a fresh interpreter decides (the working folder and PYTHONPATH on sys.path).
Every test here starts training processes (2-30 s each): all are `slow`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import warm
from warm import Ranks
from conftest import ARCH, ROOT, copy_dataset, damage_jpeg, oversize_jpeg, relabel, run_module
from shards.manifest import read_manifest
from shards.plan import steps_per_epoch
from train.run.checkpoint import checkpoint_path, load_checkpoint
from train.cluster import free_port
from train.run.metrics import read_metrics

pytestmark = pytest.mark.slow

# Small and fast on two CPU cores (conftest's ARCH) on 32-px crops.
FAST = ["--arch", ARCH, "--image-size", "32", "--batch-size", "4", "--log-every", "1", "--warmup-epochs", "1",
        "--shuffle-buffer", "16"]


def train_args(prepared: Path, run_dir: Path, *extra) -> list:
    return ["--data", prepared, "--run-dir", run_dir, *FAST, *extra]


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 3), (3, 1), (4, 2)])
def test_every_world_size_and_worker_count_trains_equal_steps_and_evaluates_exactly(prepared, tmp_path, world,
                                                                                    workers):
    manifest = read_manifest(prepared)
    ranks = Ranks(world, train_args(prepared, tmp_path / "run", "--epochs", 1, "--workers", workers), tmp_path)
    assert ranks.wait() == [0] * world, ranks.text()
    (record,) = read_metrics(tmp_path / "run")
    steps = steps_per_epoch(manifest.splits["train"].samples, world, 4)
    assert record["steps"] == steps and record["train_images"] == steps * world * 4
    assert record["val_images"] == manifest.splits["val"].samples
    for key in ("train_loss", "train_top1", "val_top1", "val_top5", "images_per_sec", "images_per_sec_per_gpu",
                "data_wait_fraction", "step", "epoch"):
        assert key in record


# A model with neither BatchNorm nor dropout: on any world size, the same global batches give the same
# gradients (up to the order of float sums), so a resume on another world size can be compared tightly.
NORM_FREE = """
import torch

def small(num_classes):
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.GroupNorm(2, 8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes))
"""


def test_preemption_mid_epoch_then_resume_on_2_1_or_4_ranks_reads_exactly_the_remaining_samples(prepared, tmp_path):
    """A 2-rank run preempted mid-epoch resumes on 2 ranks as it was, and on 1 and 4 (#52: the run's global
    batch of 12 shared out): the same samples each epoch, each once, the same losses and weights as the
    uninterrupted run's (a model without BatchNorm: with it, each rank's statistics would differ)."""
    (tmp_path / "norm_free.py").write_text(NORM_FREE)
    args = ["--epochs", 2, "--workers", 2, "--batch-size", 6, "--arch", "norm_free:small"]
    reference = Ranks(2, train_args(prepared, tmp_path / "ref", *args), tmp_path / "ref-logs", cwd=tmp_path)
    assert reference.wait() == [0, 0], reference.text()

    run = tmp_path / "run"
    first = Ranks(2, train_args(prepared, run, *args), tmp_path / "a", cwd=tmp_path)
    first.wait_for("epoch 0 step 4/")
    first.procs[1].send_signal(signal.SIGUSR1)  # one rank only: the ranks must agree to stop
    assert first.wait() == [0, 0], first.text()
    state = load_checkpoint(checkpoint_path(run))
    steps = read_metrics(tmp_path / "ref")[0]["steps"]
    assert state.epoch == 0 and 4 <= state.step < steps, state.step
    assert (state.loader["epoch"], state.loader["position"], state.loader["world_size"]) == (0, state.step, 2)
    assert read_metrics(run) == []
    # a checkpoint of an earlier version (no format; its settings named otherwise) is refused, not converted
    old = copy_dataset(run, tmp_path / "old-run")
    legacy = torch.load(checkpoint_path(old), weights_only=True)
    del legacy["format"]
    torch.save(legacy, checkpoint_path(old))
    refused = Ranks(2, train_args(prepared, old, *args, "--resume", "auto"), tmp_path / "c", cwd=tmp_path)
    assert refused.wait() == [2, 2] and "was written by an earlier version of python -m train" in refused.text()
    other = Ranks(2, train_args(prepared, run, *args, "--resume", "auto", "--shuffle-buffer", 17), tmp_path / "x",
                  cwd=tmp_path)
    assert other.wait() == [2, 2] and "--shuffle-buffer 16 there, 17 here" in other.text()
    five = Ranks(5, train_args(prepared, run, *args, "--resume", "auto"), tmp_path / "on5", cwd=tmp_path)
    assert five.wait() == [2] * 5 and "stopped mid-epoch on a run laid out for 2 ranks x 6: 5 ranks cannot share the " \
        "run's global batch of 12 equally: resume it on 1, 2, 3, 4, 6 ranks" in five.text()
    on = {world: copy_dataset(run, tmp_path / f"run-on{world}") for world in (1, 4)}
    for world, run_dir in ((2, run), (1, on[1]), (4, on[4])):
        second = Ranks(world, train_args(prepared, run_dir, *args, "--resume", "auto"), tmp_path / f"b{world}",
                       cwd=tmp_path)
        assert second.wait() == [0] * world, second.text()
        assert f"resumed from {checkpoint_path(run_dir)} at epoch 0 step {state.step}" in second.text()
        if world != 2:
            assert f"resumed on {world} rank{'s' * (world > 1)} from 2, the same global batches of 12: the same " \
                   "samples at every step, augmented the same; not the same: each rank's random state (dropout, " \
                   "stochastic depth) for the rest of epoch 0 is seeded for its place on this world" in second.text()
        ours, theirs = read_metrics(run_dir), read_metrics(tmp_path / "ref")
        assert [r["resumed_at_step"] for r in ours] == [state.step, 0]
        assert [(r["world_size"], r["batch_size"]) for r in ours] == [(world, 12 // world)] * 2
        for a, b in zip(ours, theirs):
            assert (a["steps"], a["train_images"], a["train_key_hash"], a["val_images"]) == \
                   (b["steps"], b["train_images"], b["train_key_hash"], b["val_images"])
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
            assert a["lr"] == b["lr"]
        final = load_checkpoint(checkpoint_path(run_dir))
        reference_final = load_checkpoint(checkpoint_path(tmp_path / "ref"))
        assert final.layout == (2, 6)  # the run's layout, kept at the epoch's end for the next resume
        for name, tensor in reference_final.model.items():
            assert torch.allclose(final.model[name].float(), tensor.float(), atol=1e-5), name
    # at an epoch's end, on yet another world, a longer run with a shuffle window --force-change sets: taken
    longer = Ranks(4, train_args(prepared, on[1], *args, "--resume", "auto", "--epochs", 3, "--force-change", "--epochs",
                                 "--shuffle-buffer", 17, "--force-change", "--shuffle-buffer"), tmp_path / "c4",
                   cwd=tmp_path)
    assert longer.wait() == [0] * 4, longer.text()
    assert [(r["epoch"], r["world_size"], r["batch_size"]) for r in read_metrics(on[1])][2] == (2, 4, 3)


# The same small model, whose first evaluation in each process says so in a file and then takes 3 s: time for a
# test to send the preemption signal while the run evaluates. (A batch of two is the run's probe of the sizes the
# model takes, before training: not an evaluation.)
SLOW_TO_EVALUATE = NORM_FREE + """
import time
from pathlib import Path


class FirstEvaluationSlow(torch.nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net, self.waited = small(num_classes), False

    def forward(self, x):
        if not self.training and len(x) > 2 and not self.waited:
            self.waited = True
            Path("evaluating").touch()
            time.sleep(3)
        return self.net(x)


def slow(num_classes):
    return FirstEvaluationSlow(num_classes)
"""


def test_preemption_while_evaluating_keeps_the_epochs_steps_and_the_resume_evaluates_them(prepared, tmp_path):
    """The signal that comes as the run evaluates is answered there: the epoch's steps are saved (it was
    evaluated to the end and saved after, and a kill within the signal's grace lost the whole epoch); the resume
    trains nothing of that epoch again and evaluates it. To one rank only: the ranks agree."""
    (tmp_path / "slow_to_evaluate.py").write_text(SLOW_TO_EVALUATE)
    run, args = tmp_path / "run", ["--epochs", 1, "--arch", "slow_to_evaluate:slow"]
    first = Ranks(2, train_args(prepared, run, *args), tmp_path / "a", cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (tmp_path / "evaluating").exists() and time.monotonic() < deadline:
        assert all(proc.poll() is None for proc in first.procs), first.text()
        time.sleep(0.05)
    first.procs[1].send_signal(signal.SIGUSR1)
    assert first.wait() == [0, 0], first.text()
    steps = steps_per_epoch(read_manifest(prepared).splits["train"].samples, 2, 4)
    assert f"preempted at epoch 0 step {steps}/{steps}" in first.text()
    state = load_checkpoint(checkpoint_path(run))
    assert (state.epoch, state.step, state.loader["position"]) == (0, steps, steps) and read_metrics(run) == []
    second = Ranks(2, train_args(prepared, run, *args, "--resume", "auto"), tmp_path / "b", cwd=tmp_path)
    assert second.wait() == [0, 0], second.text()
    (record,) = read_metrics(run)
    val_images = read_manifest(prepared).splits["val"].samples
    assert (record["epoch"], record["steps"], record["resumed_at_step"]) == (0, steps, steps)
    assert (record["train_images"], record["val_images"]) == (steps * 2 * 4, val_images)
    assert load_checkpoint(checkpoint_path(run)).epoch == 1


def test_a_missing_dataset_fails_fast_with_the_prepare_command(tmp_path):
    start = time.monotonic()
    result = run_module("train", "--data", tmp_path / "nothing", "--run-dir", tmp_path / "run", *FAST)
    assert result.returncode == 2
    assert "no prepared dataset" in result.stderr and "python -m prepare" in result.stderr
    assert time.monotonic() - start < 30


def test_a_peer_that_never_arrives_fails_within_the_timeout_naming_the_address(prepared, tmp_path):
    start = time.monotonic()
    lonely = Ranks(2, train_args(prepared, tmp_path / "run", "--epochs", 1, "--dist-timeout", 5), tmp_path, ranks=[0])
    assert lonely.wait(timeout=60) == [2]
    assert "rendezvous at 127.0.0.1:" in lonely.text() and "never arrived" in lonely.text()
    assert time.monotonic() - start < 45


def test_a_killed_rank_makes_the_others_fail_quickly(prepared, tmp_path):
    ranks = Ranks(2, train_args(prepared, tmp_path / "run", "--epochs", 3, "--workers", 1, "--dist-timeout", 20),
                  tmp_path)
    ranks.wait_for("epoch 0 step 2/")
    ranks.procs[1].kill()
    start = time.monotonic()
    code = ranks.procs[0].wait(timeout=90)
    assert code != 0 and time.monotonic() - start < 60


def test_resume_refuses_a_checkpoint_of_another_model(prepared, tmp_path):
    run = tmp_path / "run"
    assert warm.run("train", *train_args(prepared, run, "--epochs", 1, "--max-steps", 2, "--workers", 1)).returncode == 0
    result = warm.run("train", *train_args(prepared, run, "--epochs", 2, "--max-steps", 2, "--workers", 1,
                                           "--resume", "auto", "--arch", "resnet34"))
    assert result.returncode == 2 and f"--arch {ARCH} there, resnet34 here" in result.stderr
    assert "--arch cannot change within a run" in result.stderr
    again = warm.run("train", *train_args(prepared, run, "--epochs", 1, "--resume", "auto", "--workers", 1))
    assert again.returncode == 0 and "already finished 1 epochs" in again.stderr


def test_a_new_run_into_a_run_dir_holding_a_checkpoint_is_refused_and_the_checkpoint_kept(prepared, tmp_path):
    run = tmp_path / "run"
    assert warm.run("train", *train_args(prepared, run, "--epochs", 1, "--max-steps", 2, "--workers", 1)).returncode == 0
    kept = (run / "last.pt").read_bytes()
    again = warm.run("train", *train_args(prepared, run, "--epochs", 1, "--max-steps", 2, "--workers", 1))
    assert again.returncode == 2 and "holds a run's checkpoint (last.pt), which a new run would overwrite" in again.stderr
    assert "add --resume auto to continue that run" in again.stderr
    assert (run / "last.pt").read_bytes() == kept and len(read_metrics(run)) == 1


def test_real_torchrun_launches_it_too(prepared, tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    (tmp_path / "tmp").mkdir()  # TMPDIR here: torchrun leaves its log folder, /tmp/torchelastic_*, behind
    result = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "train",
                             *map(str, train_args(prepared, tmp_path / "run", "--epochs", 1, "--max-steps", 3,
                                                  "--workers", 1))],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert result.returncode == 0, result.stderr
    assert "2 ranks (torchrun launcher)" in result.stderr
    assert read_metrics(tmp_path / "run")[0]["val_images"] == read_manifest(prepared).splits["val"].samples


def test_device_decode_trains_and_evaluates_exactly(prepared, tmp_path):
    """--decode gpu's whole path (workers crop, the device decodes), on the CPU device."""
    run = tmp_path / "run"
    result = warm.run("train", *train_args(prepared, run, "--epochs", 1, "--max-steps", 3, "--workers", 1,
                                           "--decode", "gpu", "--device", "cpu"))
    assert result.returncode == 0, result.stderr
    (record,) = read_metrics(run)
    assert record["steps"] == 3 and record["val_images"] == read_manifest(prepared).splits["val"].samples


def damaged_copy(prepared: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The sample dataset damaged in place, at the same size (so that only a read finds it): in
    train, two JPEGs' data, one JPEG's header (claiming 81 Mpx) and one label; in val, one JPEG's
    data and one label outside the classes. {key: why it is left out}."""
    data = copy_dataset(prepared, tmp_path / "data")
    manifest = read_manifest(data)
    train_shard, val_shard = (data / manifest.splits[s].shards[0].name for s in ("train", "val"))
    too_large, no_class = "more pixels than shards.limits.MAX_PIXELS allows", "its .cls is not a class index"
    return data, {damage_jpeg(train_shard, 1): "damaged JPEG data", damage_jpeg(train_shard, 5): "damaged JPEG data",
                  oversize_jpeg(train_shard, 2): too_large, relabel(train_shard, 3, b"x"): no_class,
                  damage_jpeg(val_shard, 2): "damaged JPEG data", relabel(val_shard, 4, b"99"): no_class}


@pytest.mark.parametrize("decode", ["cpu", "gpu"])  # gpu: the device-decode path, on the CPU device
def test_damaged_samples_are_left_out_named_and_counted_on_every_rank(prepared, tmp_path, decode):
    data, keys = damaged_copy(prepared, tmp_path)
    ranks = Ranks(2, train_args(data, tmp_path / "run", "--epochs", 2, "--workers", 1, "--decode", decode,
                                "--device", "cpu"), tmp_path)
    assert ranks.wait() == [0, 0], ranks.text()
    manifest = read_manifest(data)
    steps = steps_per_epoch(manifest.splits["train"].samples, 2, 4)
    for record in read_metrics(tmp_path / "run"):
        assert record["steps"] == steps  # a left-out sample never changes the number of steps
        assert record["bad_samples"] == 4 and record["train_images"] == steps * 2 * 4 - 4
        assert record["val_bad_samples"] == 2
        assert record["val_images"] + record["val_bad_samples"] == manifest.splits["val"].samples
        assert record["pil_fallbacks"] == 0 and record["device_decode_fallbacks"] == 0
    text = ranks.text()
    assert all(f": {key} ({why}" in text for key, why in keys.items()), text
    assert "--verify" in text


def test_more_bad_samples_than_allowed_stop_the_run_in_one_line(prepared, tmp_path):
    data, keys = damaged_copy(prepared, tmp_path)
    result = warm.run("train", *train_args(data, tmp_path / "run", "--epochs", 1, "--workers", 1,
                                           "--max-bad-samples", 0))
    assert result.returncode == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(error) == 1 and "more than --max-bad-samples 0" in error[0]
    assert read_manifest(data).splits["train"].shards[0].name in error[0] and "--verify" in error[0]
    assert "Traceback" not in result.stderr


TINY_MODEL = '''
import torch


def tiny_net(num_classes):
    """A model of the user's own: a convolution and a linear layer."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes))


def not_a_model(num_classes):
    return "a string"
'''


def train_in(cwd: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    """python -m train run from `cwd`, as a user starts it from their project's folder."""
    return subprocess.run([sys.executable, "-m", "train", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_arch_takes_a_models_import_path_from_the_current_folder_or_pythonpath(prepared, tmp_path):
    project = tmp_path / "project"
    (project / "mymodels").mkdir(parents=True)
    (project / "mymodels" / "__init__.py").write_text("")
    (project / "mymodels" / "tiny.py").write_text(TINY_MODEL)
    fast = [a if a != ARCH else "mymodels.tiny:tiny_net" for a in FAST]
    run = tmp_path / "run"
    result = train_in(project, "--data", prepared, "--run-dir", run, *fast, "--epochs", 1, "--max-steps", 2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert load_checkpoint(checkpoint_path(run)).config["arch"] == "mymodels.tiny:tiny_net"
    elsewhere = train_in(tmp_path, "--data", prepared, "--run-dir", run, *fast, "--epochs", 2, "--max-steps", 2,
                         "--force-change", "--epochs", "--resume", "auto", env={"PYTHONPATH": str(project)})
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    assert [r["epoch"] for r in read_metrics(run)] == [0, 1]
    # the refusals, warm (train/run/models.py puts the working folder on sys.path itself, as srun's tasks need)
    other = warm.run("train", "--data", prepared, "--run-dir", run, *FAST, "--epochs", 3, "--resume", "auto",
                     cwd=project)
    assert other.returncode == 2 and f"--arch mymodels.tiny:tiny_net there, {ARCH} here" in other.stderr
    for arch, message in [("mymodels.nothing:tiny_net", "no module mymodels.nothing on PYTHONPATH or in"),
                          ("mymodels.tiny:absent", "mymodels.tiny has no callable absent"),
                          ("mymodels.tiny:not_a_model", "returned a str, not a torch.nn.Module")]:
        bad = warm.run("train", "--data", prepared, "--run-dir", tmp_path / "bad", "--arch", arch, "--epochs", 1,
                       "--warmup-epochs", 0, cwd=project)
        errors = [line for line in bad.stderr.splitlines() if " ERROR " in line]
        assert bad.returncode == 2 and len(errors) == 1 and message in errors[0], bad.stderr[-2000:]


def tensorboard_scalars(run: Path) -> dict[str, list[int]]:
    """{tag: [steps]} of every event file the runs in RUN_DIR/tensorboard wrote."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_gets_the_epochs_and_the_steps_and_a_resume_continues_its_steps_and_report_draws_them(
        prepared, tmp_path):
    """A run that logged past its last checkpoint (killed before its next one: here, the checkpoint
    of epoch 1 put back) resumes from it without logging any step twice; python -m train.report
    draws the run's metrics."""
    run = tmp_path / "run"
    args = ["--data", prepared, "--run-dir", run, *FAST, "--max-steps", 3, "--tracker", "tensorboard"]
    assert warm.run("train", *args, "--epochs", 1).returncode == 0
    after_epoch_0 = checkpoint_path(run).read_bytes()
    longer = ["--epochs", 2, "--force-change", "--epochs", "--resume", "auto"]  # the run made longer on resume
    assert warm.run("train", *args, *longer).returncode == 0
    report = warm.run("train.report", run)
    assert report.returncode == 0 and (run / "metrics.png").stat().st_size > 10_000
    assert "2 epochs" in report.stdout
    checkpoint_path(run).write_bytes(after_epoch_0)  # as if killed during epoch 1, after logging its steps
    resumed = warm.run("train", *args, *longer)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    scalars = tensorboard_scalars(run)
    assert scalars["epoch/val_top1"] == [3, 6]  # the global step: epochs of 3 steps
    assert scalars["train/loss"] == [1, 2, 3, 4, 5, 6] and scalars["train/lr"] == [1, 2, 3, 4, 5, 6]
    assert "train/images_per_sec" in scalars and "epoch/train_loss" in scalars


def test_a_resume_on_a_world_that_changes_the_steps_an_epoch_continues_the_runs_step_and_drops_no_event(
        prepared, tmp_path):
    """A run of 1 rank x 5 resumed on 2 ranks (5 is not shared by 2: each keeps 5, a global batch of 10, half the
    steps an epoch): its step was the new layout's position, epoch x steps, which went back, so TensorBoard's
    purge dropped the first epoch's record and the second half of its steps, W&B would ignore the resumed
    epoch's, and metrics.jsonl's step went down (a review's finding). The run's step now goes on counting."""
    run = tmp_path / "run"
    args = train_args(prepared, run, "--batch-size", 5, "--workers", 1, "--tracker", "tensorboard")
    first = Ranks(1, [*args, "--epochs", 1], tmp_path / "one")
    assert first.wait() == [0], first.text()
    second = Ranks(2, [*args, "--epochs", 2, "--force-change", "--epochs", "--resume", "auto"], tmp_path / "two")
    assert second.wait() == [0, 0], second.text()
    samples = read_manifest(prepared).splits["train"].samples
    one, two = steps_per_epoch(samples, 1, 5), steps_per_epoch(samples, 2, 5)
    assert two < one
    assert [r["step"] for r in read_metrics(run)] == [one, one + two]
    scalars = tensorboard_scalars(run)
    assert scalars["epoch/val_top1"] == [one, one + two]
    assert scalars["train/loss"] == list(range(1, one + two + 1))
    assert load_checkpoint(checkpoint_path(run)).global_step == one + two


def test_a_resume_that_would_share_one_sample_a_rank_is_refused_as_such_not_as_damage(prepared, tmp_path):
    """A run of 1 rank x 2 resumed on 2 ranks takes 1 sample a rank (#52: the global batch shared out): the step
    refused the batch of one as 'the dataset is damaged; run prepare with --verify' (a review's finding)."""
    run = tmp_path / "run"
    args = train_args(prepared, run, "--batch-size", 2, "--workers", 1, "--max-steps", 1)
    first = Ranks(1, [*args, "--epochs", 1], tmp_path / "one")
    assert first.wait() == [0], first.text()
    second = Ranks(2, [*args, "--epochs", 2, "--force-change", "--epochs", "--resume", "auto"], tmp_path / "two")
    assert second.wait() == [2, 2], second.text()
    assert "2 ranks would take 1 sample a step each, and batch norm cannot train on one: resume the run on fewer " \
           "ranks" in second.text()
    assert "damaged" not in second.text()


@pytest.mark.parametrize("world", [1, 2])
def test_ctrl_c_saves_a_checkpoint_says_how_to_resume_and_the_resume_finishes_the_epoch_exactly(prepared, tmp_path,
                                                                                              world):
    run = tmp_path / "run"
    args = train_args(prepared, run, "--epochs", 1, "--workers", 1, "--batch-size", 12 // world)
    first = Ranks(world, args, tmp_path / "a")
    first.wait_for("epoch 0 step 3/")
    for rank in first.procs:  # a terminal's Ctrl-C reaches every process of the foreground job
        rank.send_signal(signal.SIGINT)
    assert first.wait() == [130] * world, first.text()  # as a shell expects of Ctrl-C: a script's next step does not run
    state = load_checkpoint(checkpoint_path(run))
    assert state.epoch == 0 and 3 <= state.step and state.loader["position"] == state.step
    assert f"stopped by Ctrl-C, the checkpoint saved, at epoch 0 step {state.step}/" in first.text()
    assert "resume with --resume auto" in first.text() and "Traceback" not in first.text()
    second = Ranks(world, args + ["--resume", "auto"], tmp_path / "b")
    assert second.wait() == [0] * world, second.text()
    (record,) = read_metrics(run)
    assert record["resumed_at_step"] == state.step and record["train_images"] == record["steps"] * 12


def test_a_second_ctrl_c_stops_at_once():
    """The first Ctrl-C asks for a checkpoint at the next step; one more, while it is on its way, is Python's
    own KeyboardInterrupt."""
    from train.run.loop import Preemption

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM)}
    try:
        preemption = Preemption("USR1")
        handler = signal.getsignal(signal.SIGINT)
        handler(signal.SIGINT, None)
        assert preemption.requested and preemption.interrupted
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGINT, None)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_resume_on_the_source_prepared_again_with_other_options_names_them_and_what_to_do(prepared, sources,
                                                                                          tmp_path):
    from conftest import SHARD_MB, config, prepare

    run = tmp_path / "run"
    assert warm.run("train", *train_args(prepared, run, "--max-steps", 2, "--workers", 1, "--epochs", 1),
                    ).returncode == 0
    again = tmp_path / "imagenet-again"
    prepare(config(sources["official"], again, shard_size_mb=SHARD_MB / 2))
    resumed = warm.run("train", *train_args(again, run, "--max-steps", 2, "--workers", 1, "--epochs", 2,
                                            "--force-change", "--epochs", "--resume", "auto"))
    assert resumed.returncode == 2
    (said,) = [line for line in resumed.stderr.splitlines() if " ERROR " in line]
    assert (f"{again} holds the run's source prepared again with other options (--shard-size {SHARD_MB} -> "
            f"{SHARD_MB / 2}): the same images in other shards") in said
    assert f"prepare it again with the run's options (--seed 0 --shard-size {SHARD_MB:g} " in said
    assert "or point --data at the copy it trained on" in said and "python -m train.evaluate reads any copy" in said


def test_a_record_torn_by_a_kill_is_set_aside_at_the_resume_in_one_line(prepared, tmp_path):
    """A kill as metrics.jsonl was written leaves its last line cut short: the resume moves it to
    metrics.jsonl.torn and says so, and its own record starts a line of its own."""
    run = tmp_path / "run"
    args = train_args(prepared, run, "--max-steps", 2, "--workers", 1)
    assert warm.run("train", *args, "--epochs", 1).returncode == 0
    metrics = run / "metrics.jsonl"
    whole = metrics.read_bytes()
    metrics.write_bytes(whole + whole[:17])  # a second record, cut short
    again = warm.run("train", *args, "--epochs", 2, "--force-change", "--epochs", "--resume", "auto")
    assert again.returncode == 0, again.stderr[-3000:]
    warned = [line for line in again.stderr.splitlines() if "cut short" in line]
    assert len(warned) == 1 and " WARNING " in warned[0] and "set aside in metrics.jsonl.torn" in warned[0]
    assert (run / "metrics.jsonl.torn").read_bytes() == whole[:17] + b"\n"
    assert [r["epoch"] for r in read_metrics(run)] == [0, 1] and metrics.read_bytes().startswith(whole)


def test_wandb_logs_offline_and_a_requeued_run_continues_the_same_run(prepared, tmp_path):
    run = tmp_path / "run"
    args = ["--data", prepared, "--run-dir", run, *FAST, "--max-steps", 2, "--tracker", "wandb"]
    offline = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    first = warm.run("train", *args, "--epochs", 1, env=offline)
    assert first.returncode == 0, first.stderr[-3000:]
    run_id = (run / "wandb-id").read_text()
    again = warm.run("train", *args, "--epochs", 2, "--force-change", "--epochs", "--resume", "auto", env=offline)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (run / "wandb-id").read_text() == run_id
    offline_runs = sorted((run / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 2 and all(p.name.endswith(run_id) for p in offline_runs)
    assert all(list(p.glob("*.wandb")) for p in offline_runs)
    # its last.pt deleted (as a refusal advises): a new run there logs to a W&B run of its own, and its config.json
    # lists none of the earlier run's forced changes
    checkpoint_path(run).unlink()
    new = warm.run("train", *args, "--epochs", 1, "--resume", "auto", env=offline)
    assert new.returncode == 0, new.stderr[-3000:]
    assert (run / "wandb-id").read_text() != run_id and f"W&B run {run_id} was an earlier start's" in new.stderr
    document = json.loads((run / "config.json").read_text())
    assert document["changes"] == [] and [c["flag"] for c in document["superseded"]] == ["--epochs"]


@pytest.mark.parametrize("tracker", ["tensorboard", "wandb"])
def test_a_tracker_whose_package_is_missing_is_one_line_naming_the_extra(prepared, tmp_path, tracker, run_here,
                                                                         monkeypatch):
    from train.run.cli import main

    monkeypatch.setitem(sys.modules, tracker, None)  # its import fails, as where it is not installed
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    # set by torch as it first imports its compiler, where it is not set: in the test's folder, and unset after
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    result = run_here(main, "--data", prepared, "--run-dir", tmp_path / "run", *FAST, "--epochs", 1, "--tracker",
                      tracker)
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert f"--tracker {tracker} needs the {tracker} package: pip install 'imagenet-slurm[{tracker}]'" in errors[0]


def test_the_torchvision_v2_recipe_trains_resumes_bit_identically_after_a_preemption_and_reports_the_ema(
        prepared, tmp_path):
    """Every part of the recipe on (policy, erasing, mixing, repeats, EMA, separate validation sizes),
    one rank: a run preempted mid-epoch and resumed ends with exactly the weights, EMA and metrics of
    a run that was not."""
    args = ["--recipe", "torchvision-v2", "--epochs", 2, "--val-crop", 32, "--val-resize", 37, "--workers", 2,
            "--ema-steps", 2, "--max-steps", 14]
    reference = Ranks(1, train_args(prepared, tmp_path / "ref", *args), tmp_path / "ref-logs")
    assert reference.wait() == [0], reference.text()
    run = tmp_path / "run"
    first = Ranks(1, train_args(prepared, run, *args), tmp_path / "a")
    first.wait_for("epoch 0 step 5/")
    first.procs[0].send_signal(signal.SIGUSR1)
    assert first.wait() == [0], first.text()
    assert load_checkpoint(checkpoint_path(run)).step >= 5
    second = Ranks(1, train_args(prepared, run, *args, "--resume", "auto", "--workers", 1), tmp_path / "b")
    assert second.wait() == [0], second.text()
    ours, theirs = read_metrics(run), read_metrics(tmp_path / "ref")
    # Timings and the counters of a process's life differ; the training loss is summed in float32 on the device
    # per process: a resumed epoch adds the two parts' sums (a difference of about 1e-8).
    drop = {"resumed_at_step", "images_per_sec", "images_per_sec_per_gpu", "data_wait_fraction", "epoch_time_s",
            "seeked_images", "pil_fallbacks", "train_loss"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in ours] == \
           [{k: v for k, v in r.items() if k not in drop} for r in theirs]
    assert [r["train_loss"] for r in ours] == pytest.approx([r["train_loss"] for r in theirs], rel=1e-6)
    assert all("ema_val_top1" in r and r["ema_val_images"] == read_manifest(prepared).splits["val"].samples
               for r in ours)
    final, reference_final = load_checkpoint(checkpoint_path(run)), load_checkpoint(checkpoint_path(tmp_path / "ref"))
    for saved, expected in ((final.model, reference_final.model), (final.ema, reference_final.ema)):
        assert saved.keys() == expected.keys()
        assert all(torch.equal(saved[name], tensor) for name, tensor in expected.items())
    assert "val top-1" in second.text() and "(EMA " in second.text()


def test_a_requeue_is_judged_failed_only_by_scontrols_own_error():
    """SLURM may kill the step, and scontrol in it, as the requeue it asked for cancels the step: that is
    the requeue working (tests/test_slurm.py's preemption job met it), not an error to log."""
    from train.run.loop import requeue_failure

    assert requeue_failure("237", 0, "") is None
    assert requeue_failure("237", -15, "") is None  # killed by SIGTERM
    failure = requeue_failure("237", 1, "scontrol: error: Requeue of job 237 not allowed\n")
    assert failure == ("scontrol requeue 237 failed (exit 1: scontrol: error: Requeue of job 237 not allowed): the job "
                       "ends here; submit it again with --resume auto to continue from the checkpoint")
    assert "(exit 1: no message)" in requeue_failure("237", 1, "")


@pytest.mark.slow  # a run
def test_the_ema_restarts_over_the_warm_up_the_schedule_runs_not_the_epoch_it_ends_in(prepared, tmp_path):
    """With --warmup-epochs 0.5 the average restarted at every update of epoch 0 (epoch < 0.5), so it was the raw
    weights; torchvision's reference restarts it over the epochs its LinearLR warms up. Now over the warm-up's
    steps: the updates after them are averaged (a review's finding)."""
    from train.run.config import warmup_steps

    run = tmp_path / "run"
    trained = warm.run("train", *train_args(prepared, run, "--epochs", 1, "--workers", 1, "--warmup-epochs", 0.5,
                                            "--ema", "--ema-steps", 1))
    assert trained.returncode == 0, trained.stderr[-3000:]
    steps = read_metrics(run)[0]["steps"]
    averaged = steps - warmup_steps(0.5, steps, "step")
    assert averaged >= 1 and load_checkpoint(checkpoint_path(run)).ema["n_averaged"].item() == averaged
    assert warmup_steps(2.5, 4, "epoch") == 8 and warmup_steps(0.5, 4, "epoch") == 2 == warmup_steps(0.5, 4, "step")


@pytest.mark.slow  # a run and its resume
def test_an_ema_forced_on_a_run_without_one_starts_at_the_checkpoints_weights(prepared, tmp_path):
    """docs/training.md lists --ema among what --force-change changes: it was said as recorded, then the restore
    refused a checkpoint without an average (a review's finding). The average starts at the weights resumed."""
    run = tmp_path / "run"
    first = warm.run("train", *train_args(prepared, run, "--epochs", 1, "--workers", 1, "--max-steps", 2))
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = warm.run("train", *train_args(prepared, run, "--epochs", 2, "--workers", 1, "--max-steps", 2, "--ema",
                                            "--ema-steps", 1, "--resume", "auto", "--force-change", "--epochs",
                                            "--force-change", "--ema", "--force-change", "--ema-steps"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = read_metrics(run)
    assert "ema_val_top1" not in records[0] and "ema_val_top1" in records[1]
    assert load_checkpoint(checkpoint_path(run)).ema is not None


@pytest.mark.slow  # a run, then its resume, on 2 ranks
def test_a_resume_into_a_full_run_directory_stops_every_rank_in_one_line(prepared, tmp_path):
    """Rank 0 records the settings in config.json as the run resumes: on a full file system that was a traceback
    there, and the other rank went on into its first collective and waited for it (a review's finding)."""
    from test_prepare import a_small_disk, fill

    with a_small_disk(tmp_path / "small", 4) as mount:
        run = mount / "run"
        first = Ranks(2, train_args(prepared, run, "--epochs", 1, "--workers", 1, "--max-steps", 1), tmp_path / "one")
        assert first.wait(timeout=120) == [0, 0], first.text()
        fill(mount, "4k")
        def kept() -> dict:
            return {path.name: path.read_bytes() for path in run.iterdir() if path.name != ".train.lock"}

        before = kept()
        ranks = Ranks(2, train_args(prepared, run, "--epochs", 2, "--workers", 1, "--resume", "auto",
                                    "--force-change", "--epochs"), tmp_path / "two")
        assert ranks.wait(timeout=120) == [2, 2], ranks.text()
        said = [[line.split("ERROR ", 1)[1] for line in log.read_text().splitlines() if "ERROR " in line]
                for log in ranks.logs]
        assert said[0] == said[1] == [f"cannot write the run directory {run} (No space left on device): is its file "
                                      "system full, or over its quota? Nothing was trained: make room, then run the "
                                      "same command again"]
        assert "Traceback" not in ranks.text()
        assert kept() == before


def test_a_run_directory_that_fills_mid_run_stops_every_rank_in_one_line(prepared, tmp_path):
    """The run directory's file system fills while the ranks train (another job, a quota): the epoch's record
    cannot be appended, so no checkpoint is written after it either (the resume trains the epoch again), and
    every rank stops with rank 0's one line, exit 2, where rank 0 died in a traceback and the others waited out
    the rendezvous's timeout."""
    from test_prepare import a_small_disk, fill

    with a_small_disk(tmp_path / "small", 2) as mount:
        run = mount / "run"
        ranks = Ranks(2, train_args(prepared, run, "--epochs", 1, "--workers", 1), tmp_path / "logs")
        deadline = time.monotonic() + 120
        while not (run / "config.json").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for proc in ranks.procs:  # (paused while the disk fills: a small run may reach its record within that)
            proc.send_signal(signal.SIGSTOP)
        fill(mount, "4k")
        for proc in ranks.procs:
            proc.send_signal(signal.SIGCONT)
        assert ranks.wait(timeout=120) == [2, 2], ranks.text()
        said = [[line.split("ERROR ", 1)[1] for line in log.read_text().splitlines() if "ERROR " in line]
                for log in ranks.logs]
        assert said[0] == said[1] == [f"cannot append epoch 0's record to {run / 'metrics.jsonl'} (No space left on "
                                      "device): is its file system full, or over its quota? Make room, then resume "
                                      "(--resume auto): the epoch is trained again from the last checkpoint"]
        assert not (run / "last.pt").exists() and "Traceback" not in ranks.text()


# A model whose logits turn NaN at its training forward call $NAN_AT_STEP, on rank $NAN_RANK only (every rank where
# unset): the loss a diverging run meets, where and when a test wants it. With NAN_IN=gradient, the loss of that step
# stays finite and its gradient turns NaN: the weights its update leaves are NaN, as a step that blows them up leaves.
# With NAN_IN=evaluation, every evaluation forward's logits are NaN (an fp16 overflow there), training's finite.
NAN_AT_A_STEP = """
import os

import torch

class NanGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")

class NanAt(torch.nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.GroupNorm(2, 8), torch.nn.ReLU(),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                       torch.nn.Linear(8, num_classes))
        self.steps = 0
        self.register_buffer("mask", torch.tensor([0.0, float("-inf")]))  # as attention masks are: not a divergence

    def forward(self, x):
        logits = self.net(x)
        if self.training:
            self.steps += 1
            here = os.environ.get("NAN_RANK", os.environ["RANK"]) == os.environ["RANK"]
            if here and self.steps == int(os.environ.get("NAN_AT_STEP", "0")):
                gradient = os.environ.get("NAN_IN") == "gradient"
                logits = NanGradient.apply(logits) if gradient else logits * float("nan")
        elif os.environ.get("NAN_IN") == "evaluation":
            logits = logits * float("nan")
        return logits


def nan_at(num_classes):
    return NanAt(num_classes)
"""


def errors_of(ranks: Ranks) -> list[list[str]]:
    return [[line.split("ERROR ", 1)[1] for line in log.read_text().splitlines() if "ERROR " in line]
            for log in ranks.logs]


def test_a_loss_that_turns_nan_on_one_rank_stops_every_rank_in_one_line_and_saves_nothing(prepared, tmp_path):
    """Training went on through a NaN loss (a rate too high, fp16 overflowing): every later step, evaluation and
    checkpoint on NaN weights, the last good checkpoint replaced by them. The ranks now ask at each --log-every
    step whether any rank's loss stopped being finite, and all stop together, naming the rank and the step."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_AT_A_STEP)
    run = tmp_path / "run"
    ranks = Ranks(2, train_args(prepared, run, "--epochs", 1, "--workers", 1, "--arch", "nan_at_a_step:nan_at"),
                  tmp_path / "logs", env={"NAN_AT_STEP": "3", "NAN_RANK": "1"}, cwd=tmp_path)
    assert ranks.wait(timeout=120) == [2, 2], ranks.text()
    said = errors_of(ranks)
    assert said[0] == said[1] == ["the training loss became NaN or infinite on rank 1 in epoch 0, step 3: the run "
                                  "diverged and stopped, its weights unsaved. No checkpoint was saved before it: "
                                  "start again with a lower --lr, a longer --warmup-epochs"], ranks.text()
    assert "Traceback" not in ranks.text()
    assert not (run / "last.pt").exists() and read_metrics(run) == []


def test_a_loss_that_turns_nan_after_the_last_log_step_keeps_the_last_checkpoint_as_it_was(prepared, tmp_path):
    """Between --log-every steps the loss is not looked at (a device sync): the epoch's end asks again, before its
    checkpoint would replace the last good one. The line says which checkpoint holds the weights before, and how to
    resume from it."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_AT_A_STEP)
    run, args = tmp_path / "run", ["--workers", 1, "--arch", "nan_at_a_step:nan_at", "--log-every", 1000]
    first = Ranks(1, train_args(prepared, run, "--epochs", 1, *args), tmp_path / "one", cwd=tmp_path)
    assert first.wait(timeout=120) == [0], first.text()
    kept = (run / "last.pt").read_bytes()
    ranks = Ranks(1, train_args(prepared, run, "--epochs", 2, *args, "--resume", "auto", "--force-change",
                                "--epochs"), tmp_path / "two", env={"NAN_AT_STEP": "2"}, cwd=tmp_path)
    assert ranks.wait(timeout=120) == [2], ranks.text()
    assert errors_of(ranks) == [[f"the training loss became NaN or infinite on rank 0 in epoch 1, step 2: the run "
                                 f"diverged and stopped, its weights unsaved. {run / 'last.pt'} still "
                                 "holds epoch 1 step 0, before it: resume from it with --resume auto and a lower rate "
                                 "(--lr RATE --force-change --lr), a longer warm-up (--warmup-epochs N --force-change "
                                 "--warmup-epochs)"]], ranks.text()
    assert (run / "last.pt").read_bytes() == kept and len(read_metrics(run)) == 1
    # the advice, pasted, is taken: a resume refuses a changed flag without its --force-change
    warm_up = errors_of(ranks)[0][0].rsplit("(", 1)[1].rstrip(")").replace("N", "2").split()
    again = Ranks(1, train_args(prepared, run, "--epochs", 2, *args, "--resume", "auto", "--force-change", "--epochs",
                                *warm_up), tmp_path / "three", cwd=tmp_path)
    assert again.wait(timeout=120) == [0], again.text()


def test_a_loss_that_turns_nan_on_rank_2_between_log_steps_is_named_with_its_rank_and_step(prepared, tmp_path):
    """Rank 2's NaN gradient, all-reduced, makes every rank's loss NaN at the next step: the check every --log-every
    steps said "on every rank ... between steps 0 and 15", neither the rank nor the step where it began. Each rank
    now keeps the step its loss first went NaN (on the device), and the line names the first."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_AT_A_STEP)
    ranks = Ranks(3, train_args(prepared, tmp_path / "run", "--epochs", 1, "--workers", 1, "--arch",
                                "nan_at_a_step:nan_at", "--log-every", 1000), tmp_path / "logs",
                  env={"NAN_AT_STEP": "2", "NAN_RANK": "2"}, cwd=tmp_path)
    assert ranks.wait(timeout=120) == [2, 2, 2], ranks.text()
    assert errors_of(ranks) == [["the training loss became NaN or infinite on rank 2 in epoch 0, step 2, then on ranks "
                                 "0, 1 (DDP shares each step's gradients): the run diverged and stopped, its weights "
                                 "unsaved. No checkpoint was saved before it: start again with a lower --lr, a longer "
                                 "--warmup-epochs"]] * 3, ranks.text()


def test_weights_that_turn_nan_in_an_epochs_last_update_are_not_saved_over_the_last_checkpoint(prepared, tmp_path):
    """A loss measures the weights before its step's update: the last step's update of an epoch (or before a
    preemption) is measured by no loss, and its NaN weights were evaluated (val_loss NaN), recorded and checkpointed
    over the last good checkpoint, exit 0. Before a save the ranks ask whether the weights are finite too."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_AT_A_STEP)
    run = tmp_path / "run"
    steps = steps_per_epoch(read_manifest(prepared).splits["train"].samples, 2, 4)
    ranks = Ranks(2, train_args(prepared, run, "--epochs", 2, "--workers", 1, "--arch", "nan_at_a_step:nan_at"),
                  tmp_path / "logs", env={"NAN_AT_STEP": 2 * steps, "NAN_RANK": "1", "NAN_IN": "gradient"},
                  cwd=tmp_path)
    assert ranks.wait(timeout=120) == [2, 2], ranks.text()
    said = errors_of(ranks)
    assert said[0] == said[1] == [f"the weights became NaN or infinite on every rank in epoch 1, in the update of "
                                  f"step {steps}, its loss still finite: the run diverged and stopped, its weights "
                                  f"unsaved. {run / 'last.pt'} still holds epoch 1 step 0, before it: resume from it "
                                  "with --resume auto and a lower rate (--lr RATE --force-change --lr), a longer "
                                  "warm-up (--warmup-epochs N --force-change --warmup-epochs)"], ranks.text()
    assert "Traceback" not in ranks.text() and len(read_metrics(run)) == 1
    state = load_checkpoint(checkpoint_path(run))
    assert (state.epoch, state.step) == (1, 0)
    assert all(torch.isfinite(weights).all() for name, weights in state.model.items() if name != "mask")


def test_outputs_that_are_nan_only_in_evaluation_count_as_wrong_and_are_said(prepared, tmp_path):
    """An evaluation forward that overflows (fp16 where the training forward did not) gave NaN logits, which
    torch.topk ranks first: val_top1 and val_top5 were figures of the NaN ordering (a class's share of val), said as
    the model's, in silence. Its images now count as wrong, and rank 0 says how many were not finite. The model's
    buffer of -inf (a mask) is no divergence: the run goes on."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_AT_A_STEP)
    run = tmp_path / "run"
    ranks = Ranks(1, train_args(prepared, run, "--epochs", 1, "--workers", 1, "--arch", "nan_at_a_step:nan_at",
                                "--ema"), tmp_path / "logs", env={"NAN_IN": "evaluation"}, cwd=tmp_path)
    assert ranks.wait(timeout=120) == [0], ranks.text()
    (record,) = read_metrics(run)
    for p in ("val", "ema_val"):
        assert (record[f"{p}_top1"], record[f"{p}_top5"]) == (0, 0) and record[f"{p}_loss"] != record[f"{p}_loss"]
        images = read_manifest(prepared).splits["val"].samples
        assert (f"{p}: the outputs of {images} of {images} images were NaN or infinite (an evaluation forward that "
                "overflows, as fp16's can where bf16's does not, or weights that diverged): they count as wrong in "
                "its top-1 and top-5, and its loss is not finite") in ranks.text()


def test_a_loss_that_overflows_in_fp16_is_the_scalers_to_skip_and_the_run_goes_on(prepared, tmp_path):
    """Under fp16 a loss that overflows is what the gradient scaler exists for: it skips that step's update and
    lowers its scale, the weights untouched. Stopping there ended runs that would have trained on (and on a resume
    the same batch came again); the step is counted, left out of train_loss, said at the epoch's end."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_AT_A_STEP)
    run = tmp_path / "run"
    ranks = Ranks(2, train_args(prepared, run, "--epochs", 1, "--workers", 1, "--arch", "nan_at_a_step:nan_at",
                                "--amp", "fp16"), tmp_path / "logs", env={"NAN_AT_STEP": "3", "NAN_RANK": "1"},
                  cwd=tmp_path)
    assert ranks.wait(timeout=120) == [0, 0], ranks.text()
    (record,) = read_metrics(run)
    assert record["train_skipped_images"] == 4 and record["train_images"] == record["steps"] * 8
    assert record["train_loss"] == record["train_loss"] and 0 < record["train_loss"] < 10  # finite, without it
    assert (f"epoch 0: 4 of its {record['train_images']} training images were in steps whose loss was NaN or "
            "infinite in fp16, and the gradient scaler skipped those steps' updates") in ranks.text()
    state = load_checkpoint(checkpoint_path(run))
    assert state.epoch == 1
    assert all(torch.isfinite(weights).all() for name, weights in state.model.items() if name != "mask")


# NAN_AT_A_STEP's model whose every training forward overflows (logits NaN) where $NAN_ALWAYS is set
NAN_ALWAYS = NAN_AT_A_STEP + """
class NanAlways(NanAt):
    def forward(self, x):
        logits = self.net(x)
        return logits * float("nan") if self.training and os.environ.get("NAN_ALWAYS") else logits


def nan_always(num_classes):
    return NanAlways(num_classes)
"""


def test_an_fp16_epoch_whose_every_step_was_skipped_reports_no_loss_and_no_right_answer(prepared, tmp_path):
    """Every forward overflowing in fp16: the scaler skips every update. argmax takes NaN for the highest, so
    train_top1 was the share of the class NaN fell on (16.67% of 6 classes), said as the model's. (Two ranks: an
    epoch of 22 steps, 22 halvings of the scaler's scale, short of SCALE_FLOOR's stop: the next test.)"""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_ALWAYS)
    run = tmp_path / "run"
    ranks = Ranks(2, train_args(prepared, run, "--epochs", 1, "--workers", 1, "--arch", "nan_at_a_step:nan_always",
                                "--amp", "fp16"), tmp_path / "logs", env={"NAN_ALWAYS": "1"}, cwd=tmp_path)
    assert ranks.wait(timeout=120) == [0, 0], ranks.text()
    (record,) = read_metrics(run)
    assert record["train_skipped_images"] == record["train_images"] and record["train_top1"] == 0
    assert record["train_loss"] != record["train_loss"]  # NaN: no step's loss is left to average
    assert f"epoch 0: {record['train_images']} of its {record['train_images']} training images" in ranks.text()



def test_an_fp16_run_that_overflows_at_every_step_stops_before_its_scale_reaches_0(prepared, tmp_path):
    """fp16's scaler halves its scale at each skipped step: after about 170 in a row it reached 0, and the next
    update turned the weights NaN, every later loss NaN and so 'skipped', the run going on with a warning an epoch
    (a review's finding). Below SCALE_FLOOR (41 halvings from 2**16, in this 45-step epoch) every rank stops."""
    (tmp_path / "nan_at_a_step.py").write_text(NAN_ALWAYS)
    run = tmp_path / "run"
    ranks = Ranks(1, train_args(prepared, run, "--epochs", 1, "--workers", 1, "--arch", "nan_at_a_step:nan_always",
                                "--amp", "fp16", "--log-every", 5), tmp_path / "logs", env={"NAN_ALWAYS": "1"},
                  cwd=tmp_path)
    assert ranks.wait(timeout=120) == [2], ranks.text()
    assert errors_of(ranks) == [[f"fp16's gradient scaler lowered its scale to {2.0 ** -29:.3g} on rank 0 by epoch 0 "
                                 "step 45: the loss or the gradients overflowed fp16 at step after step, and each of "
                                 "those updates was skipped (the weights did not train); at 0 an update turns them "
                                 "NaN. The run stopped, its weights unsaved. No checkpoint was saved before it: start "
                                 "again with a lower --lr, a longer --warmup-epochs, or --amp bf16 where fp16 "
                                 "overflowed"]], ranks.text()
    assert not (run / "last.pt").exists() and read_metrics(run) == []