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
