"""Per-epoch records: metrics.jsonl and the console line."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from shards.manifest import write_file_atomic
from shards.paths import EVAL_SPLITS, metric_prefix

METRICS_NAME = "metrics.jsonl"
# what every epoch record holds, as numbers (python -m train.report draws them): a line without one of
# them is not a record but a damaged line, named and skipped
REQUIRED = ("epoch", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "images_per_sec",
            "images_per_sec_per_gpu")


def append_metrics(run_dir: str | Path, record: dict) -> None:
    path = Path(run_dir) / METRICS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    append_durably(path, json_line(record))


def json_line(record: dict) -> bytes:
    """`record` as a line of JSON, a figure that is not a number (NaN, an infinity: a loss that diverged, an fp16
    epoch whose every step was skipped) written null: json.dumps writes NaN, which JSON has not, and JavaScript's,
    Go's and Rust's readers refuse the whole file for it. read_records reads such a figure back as NaN (a record
    holds numbers alone: no other null)."""
    finite = {name: None if isinstance(value, float) and not math.isfinite(value) else value
              for name, value in record.items()}
    return (json.dumps(finite, sort_keys=True, allow_nan=False) + "\n").encode()


def append_durably(path: Path, data: bytes) -> None:
    """`data` at the end of `path`, on the disk before this returns (a kill after it loses nothing)."""
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The run's epoch records; a line that is not one (cut short by a kill, damaged) is left out: see
    read_records for which."""
    return read_records(run_dir)[0]


def read_records(run_dir: str | Path) -> tuple[list[dict], list[int]]:
    """(the epoch records, the numbers of the lines, from 1, that are not one)."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return [], []
    records, damaged = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        record = parsed_record(line)
        if record is None:
            damaged.append(number)
        else:
            records.append(record)
    return records, damaged


def parsed_record(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    record |= {name: math.nan for name, value in record.items() if value is None}  # json_line's null: every figure's
    if not all(is_number(record.get(name)) for name in REQUIRED):
        return None
    return record


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def set_aside_records_from(run_dir: str | Path, epoch: int) -> str | None:
    """Before a run that starts at `epoch` (its checkpoint's; 0 for a new run) appends to metrics.jsonl: the
    records of `epoch` and after would be written again by it (a kill between an epoch's record and its
    checkpoint, or an earlier run in the folder whose checkpoint went). They are moved to
    metrics.jsonl.superseded and the file written again without them, atomically: each epoch once, nothing
    lost. The line to log, or None where there are none."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return None
    keep, superseded = [], []
    for line in path.read_bytes().splitlines(keepends=True):
        record = parsed_record(line.decode(errors="replace"))
        (superseded if record is not None and record["epoch"] >= epoch else keep).append(line)
    if not superseded:
        return None
    aside = path.with_name(METRICS_NAME + ".superseded")
    append_durably(aside, b"".join(superseded))
    write_file_atomic(path, b"".join(keep))
    return (f"{path}: {len(superseded)} record(s) of epoch {epoch} and after, which this run writes again (a kill "
            f"between a record and its checkpoint, or an earlier run's): set aside in {aside.name}")


def set_aside_torn_record(run_dir: str | Path) -> str | None:
    """Before a run appends to metrics.jsonl: a last line without its newline (a kill mid-write) would
    have the next record glued to it. It is moved to metrics.jsonl.torn, the file cut back to its last
    whole line. The line to log, or None where the file ends whole."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    whole = data.rfind(b"\n") + 1
    torn = path.with_name(METRICS_NAME + ".torn")
    append_durably(torn, data[whole:] + b"\n")
    with open(path, "r+b") as f:
        f.truncate(whole)
        os.fsync(f.fileno())
    lines = data.count(b"\n")
    return (f"{path}: its last line was cut short ({len(data) - whole} bytes, a kill as it was written?): set aside "
            f"in {torn.name}; the run's records are the {lines} whole lines before it")


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
