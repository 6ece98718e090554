"""Per-epoch records (metrics.jsonl + console) and step progress (tqdm on a terminal, lines in logs)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

from tqdm import tqdm

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
    return (f"epoch {record['epoch']}: train loss {record['train_loss']:.4f} top-1 {record['train_top1']:.2f}% | "
            f"val top-1 {record['val_top1']:.2f}% top-5 {record['val_top5']:.2f}% on {record['val_images']} images | "
            f"{record['images_per_sec']:.0f} img/s ({record['images_per_sec_per_gpu']:.0f} per rank), "
            f"data wait {100 * record['data_wait_fraction']:.0f}%")


class StepProgress:
    """Rank 0's progress through an epoch: a tqdm bar on a terminal, else a line every `every` steps."""

    def __init__(self, enabled: bool, epoch: int, start: int, total: int, every: int, stream=None):
        self.stream = stream or sys.stderr
        self.enabled, self.epoch, self.total, self.every = enabled, epoch, total, every
        self.bar = None
        if enabled and self.stream.isatty():
            self.bar = tqdm(total=total, initial=start, desc=f"epoch {epoch}", unit="step", file=self.stream,
                            dynamic_ncols=True)

    def update(self, step: int, values: Callable[[], dict]) -> None:
        """`step` steps done; `values` is called for only when a line is due (it may sync the device)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            if step % self.every == 0:
                self.bar.set_postfix(values())
        elif step % self.every == 0 or step == self.total:
            text = " ".join(f"{k} {v}" for k, v in values().items())
            print(f"epoch {self.epoch} step {step}/{self.total} {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
