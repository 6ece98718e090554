"""Per-epoch records: metrics.jsonl and the console line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from shards.paths import EVAL_SPLITS, metric_prefix

METRICS_NAME = "metrics.jsonl"


def append_metrics(run_dir: str | Path, record: dict) -> None:
    path = Path(run_dir) / METRICS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def epoch_line(record: dict) -> str:
    ema = f" (EMA {record['ema_val_top1']:.2f}%)" if "ema_val_top1" in record else ""
    return (f"epoch {record['epoch']}: train loss {record['train_loss']:.4f} top-1 {record['train_top1']:.2f}% | "
            f"val top-1 {record['val_top1']:.2f}%{ema} top-5 {record['val_top5']:.2f}% on {record['val_images']} "
            f"images{evaluation_sets(record)} | {record['images_per_sec']:.0f} img/s "
            f"({record['images_per_sec_per_gpu']:.0f} per rank), data wait {100 * record['data_wait_fraction']:.0f}%")


# the evaluation sets' top-1 in a record, where the dataset has them, and their names for people
EVALUATION_SETS = ([("real_top1", "ReaL"), ("val_12k_top1", "val among 12k's classes")]
                   + [(f"{metric_prefix(split)}_top1", split) for split in EVAL_SPLITS])


def evaluation_sets(record: dict) -> str:
    """ReaL and ImageNetV2's top-1, where the dataset has them: ", ReaL 81.20%, v2 70.10%"."""
    return "".join(f", {label} {record[name]:.2f}%" for name, label in EVALUATION_SETS if name in record)
