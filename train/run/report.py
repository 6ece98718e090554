"""python -m train.report RUN_DIR [--out PNG]: loss, top-1 and images/s per epoch from metrics.jsonl: val's,
the EMA's (--ema), ReaL's and ImageNetV2's where the run has them, and the training size where it changed."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from shards.manifest import write_file_atomic
from train.run.metrics import EVALUATION_SETS, METRICS_NAME, evaluation_sets, read_records
from shards.paths import path_is, user_path

FORMATS = (".png", ".pdf", ".svg")  # what --out may be, by its suffix (none: .png)


def plot(records: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, on compute nodes
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in records]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(epochs, [r["train_loss"] for r in records], "o-", label="train")
    axes[0].plot(epochs, [r["val_loss"] for r in records], "o-", label="val")
    axes[0].set(title="loss", xlabel="epoch", yscale="log")
    axes[1].plot(epochs, [r["train_top1"] for r in records], "o-", label="train top-1")
    axes[1].plot(epochs, [r["val_top1"] for r in records], "o-", label="val top-1")
    axes[1].plot(epochs, [r["val_top5"] for r in records], "o--", label="val top-5")
    for name, label in accuracies(records):  # where the run has them: gaps where an epoch has not
        axes[1].plot(epochs, [r.get(name, math.nan) for r in records], "o:", label=f"{label} top-1")
    axes[1].set(title="accuracy (%)", xlabel="epoch")
    sizes = [r.get("image_size") for r in records]
    if None not in sizes and len(set(sizes)) > 1:  # progressive resizing: the size beside images/s
        size_axis = axes[2].twinx()
        size_axis.step(epochs, sizes, "k:", where="post", label="train size (px)")
        size_axis.set(ylabel="train size (px)")
    axes[2].plot(epochs, [r["images_per_sec"] for r in records], "o-", label="global")
    axes[2].plot(epochs, [r["images_per_sec_per_gpu"] for r in records], "o-", label="per rank")
    axes[2].set(title="images/s", xlabel="epoch")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    try:  # atomically: a full disk keeps the plot before, where savefig left an empty file in its place
        write_file_atomic(out, lambda file: fig.savefig(file, format=out.suffix[1:], dpi=100))
    finally:
        plt.close(fig)
    return out


def plot_path(out: Path) -> tuple[Path | None, str | None]:
    """Where --out writes: its suffix one of FORMATS (.png added where it has none); (None, why) otherwise. Pure."""
    if not out.suffix:
        return out.with_name(out.name + ".png"), None
    if out.suffix.lower() not in FORMATS:
        return None, f"--out {out}: give a {', '.join(FORMATS[:-1])} or {FORMATS[-1]} file"
    return out.with_suffix(out.suffix.lower()), None


def accuracies(records: list[dict]) -> list[tuple[str, str]]:
    """(metric, label) of the top-1 figures any record has besides val's: the EMA's val (--ema), ReaL,
    ImageNetV2's variants, and the EMA's of those (an evaluation set added to the dataset, or --ema forced,
    mid-run: drawn from where they start)."""
    named = [("ema_val_top1", "val EMA")] + EVALUATION_SETS + [(f"ema_{name}", f"{label} EMA")
                                                              for name, label in EVALUATION_SETS]
    return [(name, label) for name, label in named if any(name in r for r in records)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.report", description=__doc__)
    p.add_argument("run_dir", type=user_path)
    p.add_argument("--out", type=user_path, default=None,
                   help="a .png, .pdf or .svg file, or a folder to write metrics.png in (default: RUN_DIR/metrics.png)")
    args = p.parse_args(argv)
    if not path_is(args.run_dir, "dir"):  # a path mistyped: not a run that has no epoch yet
        print(f"{args.run_dir}: no such run directory: give the --run-dir of a python -m train run", file=sys.stderr)
        return 2
    records, damaged = read_records(args.run_dir)
    if damaged:
        print(f"{args.run_dir / METRICS_NAME}: skipped line{'s' * (len(damaged) > 1)} "
              f"{', '.join(map(str, damaged))}: not an epoch record (cut short or damaged)", file=sys.stderr)
    if not records:
        print(f"no epochs in {args.run_dir / METRICS_NAME} yet", file=sys.stderr)
        return 2
    given = args.out or args.run_dir / "metrics.png"
    if given.is_dir():  # a folder: the plot goes into it (plot_path made FOLDER.png beside it)
        given = given / "metrics.png"
    out, why = plot_path(given)
    if why:
        print(why, file=sys.stderr)
        return 2
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        plot(records, out)
    except OSError as exn:
        print(f"cannot write the plot {out} ({exn.strerror or exn}): is its file system full, or read-only? Any "
              "plot there before is kept", file=sys.stderr)
        return 2
    last = records[-1]
    ema = f" (EMA {last['ema_val_top1']:.2f}%)" if "ema_val_top1" in last else ""
    print(f"{len(records)} epochs; last: val top-1 {last['val_top1']:.2f}%{ema}, top-5 {last['val_top5']:.2f}%"
          f"{evaluation_sets(last)}, "
          f"{last['images_per_sec']:.0f} img/s; plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
