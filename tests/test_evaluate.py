"""`python -m train.evaluate RUN_DIR` (train/run/evaluation.py): a run's checkpoint, and its EMA, evaluated on
its own give the run's own last val figures, on one rank and on two, on another prepared copy of the data
too; what cannot be evaluated is refused in one line."""

from __future__ import annotations

import json
import os
import re
import logging

import pytest

import warm
from conftest import ROOT, config, prepare
from prepare.sample import SampleSpec, make_sample
from test_train import train_args
from train.run.evaluation import EVAL_NAME, evaluation_line, main
from train.run.metrics import read_metrics

pytestmark = pytest.mark.slow  # every test reads a run trained by a training process (ema_run)

# exactly the run's: counts; the losses too on one rank (the same batches), to float32's rounding on two
SAME = ("val_top1", "val_top5", "val_images", "val_bad_samples", "ema_val_top1", "ema_val_top5", "ema_val_images")
LOSSES = ("val_loss", "ema_val_loss")


@pytest.fixture(scope="module")
def ema_run(prepared, tmp_path_factory):
    """Two epochs with an EMA of the weights: its last record is what an evaluation alone must give again."""
    run = tmp_path_factory.mktemp("evaluated") / "run"
    trained = warm.run("train", *train_args(prepared, run, "--epochs", 2, "--workers", 1, "--ema", "--ema-steps", 1))
    assert trained.returncode == 0, trained.stderr[-3000:]
    return run, read_metrics(run)[-1]


def evaluations(run) -> list[dict]:
    return [json.loads(line) for line in (run / EVAL_NAME).read_text().splitlines()]


def test_evaluation_alone_gives_the_runs_last_val_and_ema_figures_and_appends_one_record(ema_run, caplog):
    run, last = ema_run
    before = len(evaluations(run)) if (run / EVAL_NAME).exists() else 0
    with caplog.at_level(logging.INFO, logger="train"):
        assert main([str(run), "--workers", "1"]) == 0
    record = evaluations(run)[-1]
    assert len(evaluations(run)) == before + 1
    assert {name: record[name] for name in SAME + LOSSES} == {name: last[name] for name in SAME + LOSSES}
    assert record["epochs_done"] == 2 and record["step_in_epoch"] == 0 and record["world_size"] == 1
    assert record["dataset_id"] == record["run_dataset_id"] and record["checkpoint"] == str(run / "last.pt")
    assert f"evaluated {run / 'last.pt'} (after epoch 1) on {record['data']}, 1 rank: val top-1 " in caplog.text
    assert f"val top-1 {last['val_top1']:.2f}% (EMA {last['ema_val_top1']:.2f}%)" in caplog.text
    assert (run / "metrics.jsonl").read_text().count("\n") == 2  # the run's own records untouched


def test_two_ranks_evaluate_every_val_image_once_and_agree_with_one(ema_run, tmp_path):
    run, last = ema_run
    ranks = warm.Ranks(2, [run, "--workers", "1"], tmp_path, module="train.evaluate")
    assert ranks.wait() == [0, 0], ranks.text()
    record = evaluations(run)[-1]
    assert record["world_size"] == 2
    assert {name: record[name] for name in SAME} == {name: last[name] for name in SAME}
    assert [record[name] for name in LOSSES] == pytest.approx([last[name] for name in LOSSES], rel=1e-6)
    assert evaluation_line(record) in ranks.text()


def test_a_copy_of_the_data_prepared_again_with_other_options_is_evaluated_and_named(ema_run, sources, tmp_path,
                                                                                     caplog):
    run, last = ema_run
    copy = tmp_path / "imagenet-again"
    prepare(config(sources["official"], copy, shard_size_mb=0.05))
    with caplog.at_level(logging.INFO, logger="train"):
        assert main([str(run), "--data", str(copy), "--workers", "1"]) == 0
    record = evaluations(run)[-1]
    assert record["data"] == str(copy) and record["dataset_id"] != record["run_dataset_id"]
    assert {name: record[name] for name in SAME} == {name: last[name] for name in SAME}  # the same images, read
    assert f"{copy} is not the dataset the run trained on" in caplog.text


def test_ranks_reading_different_copies_of_the_data_all_stop_in_the_same_line(ema_run, prepared, sources, tmp_path):
    """Rank 1's node holds another dataset at --data than rank 0's (prepared with other options): both say so in
    one line and exit 2, where before each evaluated its own copy without a word."""
    from train.cluster import free_port

    run, _ = ema_run
    copy = tmp_path / "imagenet-again"
    prepare(config(sources["official"], copy, shard_size_mb=0.05))
    port = {"MASTER_PORT": free_port()}
    ranks = [warm.Ranks(2, [run, "--data", data, "--workers", "1"], tmp_path / f"rank{rank}", env=port, ranks=[rank],
                        module="train.evaluate") for rank, data in enumerate([prepared, copy])]
    assert [code for one in ranks for code in one.wait()] == [2, 2], "".join(one.text() for one in ranks)
    said = [[line.split("ERROR ", 1)[1] for line in one.text().splitlines() if "ERROR " in line] for one in ranks]
    assert said[0] == said[1] and len(said[0]) == 1
    assert said[0][0].startswith("rank 1 (on ") and "reads another dataset at --data than rank 0" in said[0][0]


def test_a_record_that_cannot_be_kept_is_said_and_its_run_directory_made_where_it_is_not_there(ema_run, tmp_path,
                                                                                               caplog):
    """A colleague's run on a read-only mount (real: a bind mount made read-only) lost the whole evaluation to a
    traceback at its end; --checkpoint with a RUN_DIR not made yet, the same. Now the figures come first, the
    record's failure is one line, exit status 2, the file as it was; a RUN_DIR not there is made."""
    import shutil
    import subprocess

    run, last = ema_run
    mine = tmp_path / "mine" / "evals"
    with caplog.at_level(logging.INFO, logger="train"):
        assert main([str(mine), "--checkpoint", str(run / "last.pt"), "--workers", "1"]) == 0
    assert evaluations(mine)[-1]["val_top1"] == last["val_top1"]
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    theirs = tmp_path / "theirs"
    shutil.copytree(run, theirs / "run")
    before = (theirs / "run" / EVAL_NAME).read_bytes() if (theirs / "run" / EVAL_NAME).exists() else None
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    assert subprocess.run(["mount", "--bind", str(theirs), str(read_only)]).returncode == 0
    try:
        assert subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)]).returncode == 0
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="train"):
            assert main([str(read_only / "run"), "--workers", "1"]) == 2
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [f"cannot append the record to {read_only / 'run' / EVAL_NAME} (Read-only file system): its "
                          "figures are in the line above; give a run directory this user can write, with room (a "
                          "colleague's run: --checkpoint THEIR_RUN/last.pt with a RUN_DIR of your own)"]
        assert f"val top-1 {last['val_top1']:.2f}% (EMA {last['ema_val_top1']:.2f}%)" in caplog.text
    finally:
        subprocess.run(["umount", str(read_only)])
    assert ((theirs / "run" / EVAL_NAME).read_bytes() if (theirs / "run" / EVAL_NAME).exists() else None) == before


def test_what_cannot_be_evaluated_is_refused_in_one_line(ema_run, tmp_path, caplog):
    run, _ = ema_run
    make_sample(tmp_path / "two", "official", SampleSpec(classes=2, train_per_class=4, val_per_class=2))
    other_classes = tmp_path / "two-classes"
    prepare(config(tmp_path / "two", other_classes))
    assert main([str(tmp_path / "empty")]) == 2
    assert f"no checkpoint at {tmp_path / 'empty' / 'last.pt'}: nothing to evaluate" in caplog.text
    assert main([str(run), "--data", str(other_classes)]) == 2
    assert (f"the checkpoint's model predicts the 6 classes its run trained on, not the 2 of {other_classes} "
            "(another class table), and the data's manifest maps its classes into no table of theirs") in caplog.text
    assert "give --data the dataset the run was trained on" in caplog.text


def test_a_runs_relative_data_read_from_another_folder_is_said_so_not_a_dataset_to_prepare(tmp_path, caplog,
                                                                                          monkeypatch):
    """A run started with --data imagenet (relative) records it so: evaluated from another working folder, that was
    "no prepared dataset at imagenet (no manifest.json): run ... python -m prepare ... --dest imagenet", a dataset
    to prepare again where it is there (a review's finding)."""
    import torch

    from train.run.checkpoint import Checkpoint, save_checkpoint
    from train.run.config import TrainConfig

    model = torch.nn.Linear(2, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    save_checkpoint(tmp_path / "run" / "last.pt", Checkpoint(
        model=model.state_dict(), optimizer=optimizer.state_dict(), scheduler={}, scaler={}, epoch=1, step=0,
        world_size=1, ranks=[], config=TrainConfig("imagenet", "run", arch="resnet18").to_dict()))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main([str(tmp_path / "run"), "--device", "cpu"]) == 2
    (said,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert said == (f"the run's --data imagenet is a path relative to the folder the run was started in, and there is "
                    f"no prepared dataset at it from {tmp_path / 'elsewhere'}: run python -m train.evaluate from that "
                    "folder, or give --data the prepared dataset")


def test_the_manuals_evaluation_snippet_runs_as_printed_and_gives_the_runs_val_top1(ema_run, prepared, capsys):
    """docs/library.md's 'Evaluating a checkpoint' block, run as printed but for its two paths (it names every
    other name it uses: the review that found num_classes unbound ran it as a user would)."""
    run, last = ema_run
    manual = (ROOT / "docs" / "library.md").read_text().split("## Evaluating a checkpoint of `python -m train`", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", manual, re.S).group(1)
    paths = 'run_dir, root = "/shared/runs/r50", "/tmp/imagenet"'
    assert paths in snippet
    exec(snippet.replace(paths, f"run_dir, root = {str(run)!r}, {str(prepared)!r}"), {})
    assert capsys.readouterr().out == f"val top-1 {last['val_top1']:.2f}% of {last['val_images']} images\n"


def test_the_data_is_the_runs_unless_its_job_folder_is_gone_and_this_jobs_holds_one():
    """A run trained on the default --data recorded its job's $SLURM_TMPDIR/imagenet, gone with the job: a later
    job's evaluation read that path and told the user to prepare into it (a review's finding)."""
    from train.run.evaluation import evaluation_data

    there = {"/tmp/job2/imagenet", "/shared/shards"}
    holds = there.__contains__
    later_job = {"SLURM_TMPDIR": "/tmp/job2"}
    assert evaluation_data(None, "/tmp/job1/imagenet", later_job, holds) == "/tmp/job2/imagenet"
    assert evaluation_data(None, "/shared/shards", later_job, holds) == "/shared/shards"  # the run's, where it is
    assert evaluation_data("/mine", "/tmp/job1/imagenet", later_job, holds) == "/mine"  # --data, always
    assert evaluation_data(None, "/tmp/job1/imagenet", {}, holds) == "/tmp/job1/imagenet"  # outside a job: named
    assert evaluation_data(None, "/tmp/job1/imagenet", {"SLURM_TMPDIR": "/tmp/job3"}, holds) == "/tmp/job1/imagenet"


def test_the_line_of_a_checkpoint_saved_before_any_step_says_so():
    """A Ctrl-C before the first step saves epoch 0 step 0: its evaluation said 'after epoch -1'."""
    from train.run.evaluation import evaluation_line

    record = {"checkpoint": "c", "epochs_done": 0, "step_in_epoch": 0, "data": "d", "world_size": 1,
              "val_top1": 1.0, "val_top5": 5.0, "val_images": 10}
    assert evaluation_line(record).startswith("evaluated c (before any training step) on d, 1 rank")
    assert "(after epoch 0)" in evaluation_line({**record, "epochs_done": 1})
    assert "(epoch 0 step 3)" in evaluation_line({**record, "step_in_epoch": 3})


def test_a_winter21_dataset_prepared_before_class_maps_is_told_how_to_get_them():
    """A checkpoint of winter21's own table on a dataset in 22k's whose manifest predates class_maps: the refusal
    said only to give another --data, where a rerun of prepare on it records the mapping (a review's finding)."""
    from types import SimpleNamespace

    from shards.errors import UserError
    from train.run.evaluation import mapped_outputs

    trained = [f"n{i:08d}" for i in range(19167)]
    data = SimpleNamespace(classes=[SimpleNamespace(wnid=f"n{i:08d}") for i in range(21841)], class_maps={})
    with pytest.raises(UserError, match="gets it from python -m prepare run on it again \\(--dest /d\\)$"):
        mapped_outputs(trained, data, "/d")
    two = SimpleNamespace(classes=[SimpleNamespace(wnid="n00000001"), SimpleNamespace(wnid="n00000002")], class_maps={})
    with pytest.raises(UserError) as other:
        mapped_outputs(trained[:6], two, "/d")
    assert "run on it again" not in str(other.value)  # no table of theirs to record


@pytest.mark.parametrize("timeout", ["inf", "nan", "-1", "0", "1e14"])
def test_a_dist_timeout_that_is_no_finite_number_above_0_is_refused_in_one_line(tmp_path, capsys, timeout):
    """As training refuses it, before anything is read: on several ranks inf ended the rendezvous in an
    OverflowError, and -1 in a timeout, each told as 'a peer never arrived or died'; 0 became the run's."""
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "run"), "--dist-timeout", timeout])
    assert stopped.value.code == 2
    said = f"--dist-timeout must be a finite number of seconds above 0 (at most 1e+09), not {float(timeout)}"
    assert capsys.readouterr().err.splitlines()[-1] == f"python -m train.evaluate: error: {said}"


def test_a_checkpoint_given_as_the_run_directory_names_its_folder_and_checkpoint(tmp_path, capsys):
    """`python -m train.evaluate runs/r50/last.pt` looked for runs/r50/last.pt/last.pt: "no checkpoint at
    .../last.pt/last.pt", the file it was given said missing."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes(b"")
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "run" / "last.pt")])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"python -m train.evaluate: error: RUN_DIR {tmp_path / 'run' / 'last.pt'} is a file, not a run directory: give "
        f"the run's folder ({tmp_path / 'run'}), which evaluates its last.pt, or a folder for eval.jsonl with "
        f"--checkpoint {tmp_path / 'run' / 'last.pt'}")


def test_a_run_directory_whose_name_is_too_long_is_no_checkpoint_said_in_one_line(tmp_path, caplog):
    """A name past the file system's 255 bytes (a sweep's run named by its settings): Path.is_file raised, a
    traceback in place of the one line."""
    run_dir = tmp_path / ("r" * 300)
    assert main([str(run_dir)]) == 2
    assert caplog.records[-1].getMessage().startswith(f"no checkpoint at {run_dir / 'last.pt'}: nothing to evaluate")
