"""python -m train.report: the figures a run has (val's, the EMA's, ReaL's, ImageNetV2's, the training
size where it changed) drawn and printed."""

from __future__ import annotations

import json

import pytest

import warm
from train.run.report import accuracies


def record(epoch: int, **extra) -> dict:
    return {"epoch": epoch, "train_loss": 2.0 - epoch / 10, "val_loss": 2.1, "train_top1": 10.0 + epoch,
            "val_top1": 11.0 + epoch, "val_top5": 40.0, "images_per_sec": 100.0, "images_per_sec_per_gpu": 50.0,
            **extra}


def test_the_ema_real_and_v2_figures_are_drawn_where_the_run_has_them():
    records = [record(e, ema_val_top1=12.0, real_top1=13.0, v2_top1=9.0, ema_v2_top1=9.5) for e in range(3)]
    assert accuracies(records) == [("ema_val_top1", "val EMA"), ("real_top1", "ReaL"), ("v2_top1", "v2"),
                                   ("ema_v2_top1", "v2 EMA")]
    for r in records[:2]:  # an evaluation set added to the dataset before the last epoch: drawn from there
        r.pop("real_top1")
    assert ("real_top1", "ReaL") in accuracies(records)
    assert accuracies([record(0)]) == []


@pytest.mark.slow
def test_the_report_prints_the_ema_and_draws_a_ramps_sizes(tmp_path):
    lines = [record(e, ema_val_top1=20.0 + e, image_size=160 if e < 2 else 192, v2_top1=5.0) for e in range(4)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = warm.run("train.report", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "last: val top-1 14.00% (EMA 23.00%), top-5 40.00%, v2 5.00%" in result.stdout
    assert (tmp_path / "metrics.png").stat().st_size > 10_000


def test_the_report_skips_lines_that_are_not_records_and_says_which(tmp_path, capsys):
    """A kill mid-write leaves a last line cut short; a disk error, garbage. The report draws the records it
    can read and names the lines it skipped, never a traceback."""
    from train.run.report import main

    whole = [json.dumps(record(e)) for e in range(3)]
    (tmp_path / "metrics.jsonl").write_text(f"{whole[0]}\nnot json\n{whole[1]}\n[1, 2]\n{whole[2]}\n{whole[2][:30]}")
    assert main([str(tmp_path), "--out", str(tmp_path / "plot.png")]) == 0
    out, err = capsys.readouterr()
    assert "skipped lines 2, 4, 6: not an epoch record (cut short or damaged)" in err
    assert out.startswith("3 epochs; last: val top-1 13.00%")
    (tmp_path / "metrics.jsonl").write_text(whole[0][:40])  # nothing whole: said, exit 2
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "skipped line 1:" in err and "no epochs in" in err


def test_a_run_directory_that_is_not_there_is_said_so_not_a_run_without_epochs(tmp_path, capsys):
    """A mistyped RUN_DIR (or a file's path) was "no epochs in RUN_DIR/metrics.jsonl yet": a run still in its first
    epoch, to wait for (a review's finding)."""
    from train.run.report import main

    for wrong in (tmp_path / "rn", tmp_path / "last.pt", tmp_path / ("r" * 300)):  # (the last: a name too long)
        (tmp_path / "last.pt").write_bytes(b"")
        assert main([str(wrong)]) == 2
        assert capsys.readouterr().err == (f"{wrong}: no such run directory: give the --run-dir of a python -m train "
                                           "run\n")
    assert main([str(tmp_path)]) == 2  # a run directory whose run has not finished an epoch yet
    assert capsys.readouterr().err == f"no epochs in {tmp_path / 'metrics.jsonl'} yet\n"


@pytest.mark.slow  # two plots drawn
def test_out_naming_a_folder_that_is_there_writes_the_plot_in_it(tmp_path, capsys):
    """--out plots/ (a folder) wrote plots.png beside it, the trailing slash lost (a review's finding)."""
    from train.run.report import main

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(record(e)) + "\n" for e in range(2)))
    (tmp_path / "plots").mkdir()
    for given in (f"{tmp_path / 'plots'}/", str(tmp_path / "plots")):
        assert main([str(tmp_path), "--out", given]) == 0
        assert capsys.readouterr().out.endswith(f"plot: {tmp_path / 'plots' / 'metrics.png'}\n")
    assert (tmp_path / "plots" / "metrics.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "plots.png").exists()


def test_a_torn_last_record_is_set_aside_whole_lines_kept(tmp_path):
    from train.run.metrics import append_metrics, read_records, set_aside_torn_record

    assert set_aside_torn_record(tmp_path) is None  # no file
    for epoch in range(2):
        append_metrics(tmp_path, record(epoch))
    assert set_aside_torn_record(tmp_path) is None  # ends whole: untouched
    metrics = tmp_path / "metrics.jsonl"
    before = metrics.read_bytes()
    torn = json.dumps(record(2))[:25]
    metrics.write_bytes(before + torn.encode())
    line = set_aside_torn_record(tmp_path)
    assert line is not None and f"cut short ({len(torn)} bytes" in line and "metrics.jsonl.torn" in line
    assert "the 2 whole lines before it" in line
    assert metrics.read_bytes() == before and (tmp_path / "metrics.jsonl.torn").read_text() == torn + "\n"
    append_metrics(tmp_path, record(2))  # the next record starts a line of its own
    assert [r["epoch"] for r in read_records(tmp_path)[0]] == [0, 1, 2] and read_records(tmp_path)[1] == []


def test_a_line_that_parses_but_lacks_a_records_figures_is_named_not_a_traceback(tmp_path, capsys):
    """A record's figures are numbers the report draws: a line of JSON without one ({"epoch": 3}, a key
    with a flipped letter, a figure that is a string) is a damaged line, skipped and named."""
    from train.run.report import main

    whole = [json.dumps(record(e)) for e in range(2)]
    flipped = json.dumps(record(2)).replace("val_top1", "val_tOp1")
    text = json.dumps({**record(3), "train_loss": "2.0"})
    (tmp_path / "metrics.jsonl").write_text("\n".join([whole[0], '{"epoch": 3}', whole[1], flipped, text]) + "\n")
    assert main([str(tmp_path), "--out", str(tmp_path / "plot.png")]) == 0
    out, err = capsys.readouterr()
    assert "skipped lines 2, 4, 5: not an epoch record (cut short or damaged)" in err
    assert out.startswith("2 epochs; last: val top-1 12.00%")


def test_records_a_resumed_run_writes_again_are_set_aside_each_epoch_kept_once(tmp_path):
    """A kill between an epoch's record and its checkpoint, or an earlier run in the folder whose checkpoint
    went: the run that starts at epoch E sets aside the records of E and after (nothing lost), so that each
    epoch's is written once."""
    from train.run.metrics import append_metrics, read_records, set_aside_records_from

    assert set_aside_records_from(tmp_path, 0) is None  # no file
    for epoch in range(3):
        append_metrics(tmp_path, record(epoch))
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes() + b"not json\n")
    assert set_aside_records_from(tmp_path, 3) is None  # the checkpoint is past them all: untouched
    before = metrics.read_bytes().splitlines(keepends=True)
    line = set_aside_records_from(tmp_path, 1)  # the checkpoint of epoch 0's end: epochs 1 and 2 come again
    assert line is not None and "2 record(s) of epoch 1 and after" in line and "metrics.jsonl.superseded" in line
    assert metrics.read_bytes() == before[0] + before[3]  # the damaged line stays where it was, named by the report
    assert (tmp_path / "metrics.jsonl.superseded").read_bytes() == before[1] + before[2]
    append_metrics(tmp_path, record(1))
    assert [r["epoch"] for r in read_records(tmp_path)[0]] == [0, 1]
    assert "2 record(s) of epoch 0 and after" in set_aside_records_from(tmp_path, 0)  # a new run in the folder
    assert read_records(tmp_path)[0] == []
    assert len((tmp_path / "metrics.jsonl.superseded").read_text().splitlines()) == 4


@pytest.mark.slow  # four plots drawn
def test_the_plots_path_is_made_said_as_written_and_a_full_disk_keeps_the_plot_before(tmp_path, capsys):
    """--out in a folder not made yet, without a suffix, with one matplotlib cannot write: a traceback, a path
    printed other than the file's, a ValueError; on a full disk (a real tmpfs) an empty metrics.png in place of
    the plot before (a review's findings)."""
    from test_prepare import a_small_disk, fill
    from train.run.report import main

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(record(e)) + "\n" for e in range(2)))
    assert main([str(tmp_path), "--out", str(tmp_path / "plots" / "run")]) == 0
    assert capsys.readouterr().out.endswith(f"plot: {tmp_path / 'plots' / 'run.png'}\n")
    assert (tmp_path / "plots" / "run.png").read_bytes().startswith(b"\x89PNG")
    assert main([str(tmp_path), "--out", str(tmp_path / "plot.txt")]) == 2
    assert capsys.readouterr().err == f"--out {tmp_path / 'plot.txt'}: give a .png, .pdf or .svg file\n"
    assert main([str(tmp_path), "--out", str(tmp_path / "plot.PDF")]) == 0
    assert (tmp_path / "plot.pdf").read_bytes().startswith(b"%PDF")
    with a_small_disk(tmp_path / "small", 1) as mount:
        (mount / "metrics.jsonl").write_text((tmp_path / "metrics.jsonl").read_text())
        assert main([str(mount)]) == 0
        before = (mount / "metrics.png").read_bytes()
        fill(mount, "4k")
        capsys.readouterr()
        assert main([str(mount)]) == 2
        assert capsys.readouterr().err == (f"cannot write the plot {mount / 'metrics.png'} (No space left on device): "
                                           "is its file system full, or read-only? Any plot there before is kept\n")
        assert (mount / "metrics.png").read_bytes() == before
        assert not [path.name for path in mount.iterdir() if path.name.endswith(".tmp")]


def test_a_figure_the_run_reported_and_this_epoch_lacks_is_named():
    """A requeued job staged its node-local copy again without --eval-source: the same train and val, so the
    resume went on, and v2_top1 stopped without a word (a review's finding). The run now says which went."""
    from train.run.loop import figures_gone

    before = [record(0, v2_top1=5.0, real_top1=9.0), record(1, v2_top1=6.0, real_top1=9.5)]
    assert figures_gone(before, record(2, real_top1=9.6)) == ["v2_top1"]
    assert figures_gone(before, record(2, v2_top1=6.0, real_top1=9.6)) == []
    assert figures_gone([], record(0)) == [] and figures_gone([record(0)], record(1, v2_top1=1.0)) == []


def test_a_figure_that_is_not_a_number_is_written_null_and_read_back_as_nan(tmp_path, capsys):
    """json.dumps writes NaN (a diverged evaluation's val_loss, an fp16 epoch whose every step was skipped), which
    JSON has not: JavaScript's and Go's readers refused the whole metrics.jsonl. It is null now; the run's readers
    (the report, a resume's set-aside) take it back as NaN, the record kept."""
    from train.run.metrics import append_metrics, read_records

    append_metrics(tmp_path, record(0, train_loss=float("nan"), val_loss=float("inf"), ema_val_loss=float("nan")))
    text = (tmp_path / "metrics.jsonl").read_text()
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert (strict["train_loss"], strict["val_loss"]) == (None, None)
    ((read,), damaged) = read_records(tmp_path)
    assert damaged == [] and all(read[name] != read[name] for name in ("train_loss", "val_loss", "ema_val_loss"))
    from train.run.report import main

    assert main([str(tmp_path), "--out", str(tmp_path / "plot.png")]) == 0  # drawn, a gap where NaN is
    assert capsys.readouterr().out.startswith("1 epochs; last: val top-1 11.00%")
