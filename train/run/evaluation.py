"""`python -m train.evaluate RUN_DIR`: a run's checkpoint evaluated on its own, as the run evaluates it.

What torchvision's reference calls --test-only and timm's validate.py: the checkpoint's weights (and its
EMA's, where the run keeps one) on val and on every evaluation set of the dataset (ImageNetV2, ReaL, a class
subset's val), with the run's own model, validation transform and metrics, every image once over any number
of ranks (launched as training's are: srun, torchrun). For the numbers again after a crash in the last
epoch's evaluation, on another prepared copy of the data, or on a checkpoint kept from earlier.

A checkpoint trained in another class table the data's nests with (winter21 in its own 19,167 classes,
evaluated on winter21 or fall11 prepared in ImageNet-22k's 21,841, or the other way round) is evaluated through
the mapping the data's manifest records (`class_maps`): its outputs are placed on the data's classes
(`mapped_outputs`), and it is scored among the data's classes.

It reads the checkpoint and appends one record to RUN_DIR/eval.jsonl; it never writes last.pt or
metrics.jsonl, so it takes no run directory lock and may run while the run trains (it reads last.pt as
last saved: checkpoints are written atomically).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from dataclasses import replace
from pathlib import Path

from shards.errors import UserError
from shards.paths import MANIFEST_NAME, default_dest, path_is, user_path
from train.device_types import DEVICE_TYPES

log = logging.getLogger("train")

EVAL_NAME = "eval.jsonl"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m train.evaluate",
        description="Evaluate a run's checkpoint (and its EMA) on val and every evaluation set of the dataset, "
                    "as the run evaluates: one record appended to RUN_DIR/eval.jsonl. Launch it as training: "
                    "srun python -m train.evaluate RUN_DIR, or under torchrun.")
    p.add_argument("run_dir", type=user_path,
                   help="the run directory: its last.pt is evaluated, its eval.jsonl written")
    p.add_argument("--checkpoint", type=user_path, default=None,
                   help="another checkpoint of the run to evaluate (default: RUN_DIR/last.pt)")
    p.add_argument("--data", type=user_path, default=None,
                   help="the prepared dataset (default: the run's --data; where that is gone, a later job's "
                        "$SLURM_TMPDIR/imagenet); another prepared copy of the same classes is fine: the record names "
                        "it")
    p.add_argument("--workers", type=int, default=None, help="decode threads per rank (default: as training's)")
    p.add_argument("--device", choices=DEVICE_TYPES, default=None,
                   help="default: the GPU this torch build has, where one is visible")
    p.add_argument("--decode", choices=["cpu", "gpu"], default=None, help="default: the run's --decode")
    p.add_argument("--dist-timeout", type=float, default=None,
                   help="seconds to wait for peers (default: the run's --dist-timeout)")
    return p


def evaluation_data(given: str | Path | None, runs: str, environ, holds_a_dataset) -> str:
    """--data, else the run's; where the run's is gone and this job's $SLURM_TMPDIR/imagenet holds a dataset,
    that: a run trained on the default --data recorded its job's node-local folder, which ended with the job
    (training's own default is the job's). `holds_a_dataset(path)`: whether a manifest is there. Pure but for it."""
    if given:
        return str(given)
    here = default_dest(environ)
    if not holds_a_dataset(runs) and here is not None and str(here) != runs and holds_a_dataset(str(here)):
        return str(here)
    return runs


def evaluation_config(saved, args: argparse.Namespace, data: str):
    """The run's settings (its model, validation transform, precision), with how this process runs taken
    from this command line: the data, the threads, the device. Pure."""
    return replace(saved, run_dir=str(args.run_dir), data=data, workers=args.workers,
                   device=args.device, decode=args.decode or saved.decode,
                   dist_timeout=args.dist_timeout or saved.dist_timeout, resume=None, max_steps=0, tracker="none")


def what_was_evaluated(checkpoint, path: Path, data: str, dataset_id: str, run_dataset_id: str, world_size: int) -> dict:
    """The record's head: which weights, at which point of the run, on which data. Pure."""
    return {"checkpoint": str(path), "epochs_done": checkpoint.epoch, "step_in_epoch": checkpoint.step,
            "data": data, "dataset_id": dataset_id, "run_dataset_id": run_dataset_id, "world_size": world_size,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def mapped_outputs(trained: list[str] | None, manifest, data: str) -> tuple[str, list[int], list[int]] | None:
    """Where the checkpoint's outputs (the classes its run trained on, `trained`: their wnids in its label
    order) lie among the classes of the data at `data`, through a mapping its manifest records (`class_maps`):
    (the table, the model's output columns, the data's class columns), or None where the data's classes are
    the checkpoint's (or the checkpoint does not name them: its model's shape decides). A UserError where
    they differ and no recorded mapping is the checkpoint's table. Pure."""
    wnids = [c.wnid for c in manifest.classes]
    if trained is None or trained == wnids:
        return None
    for table, mapping in manifest.class_maps.items():
        pairs = [(j, i) for i, j in enumerate(mapping["index"]) if j >= 0]
        if mapping["classes"] == len(trained) and all(trained[j] == wnids[i] for j, i in pairs):
            return table, [j for j, _ in pairs], [i for _, i in pairs]
    recorded = ", ".join(f"{table} ({m['classes']:,})" for table, m in manifest.class_maps.items()) or "none"
    other = "another class table" if len(trained) != len(wnids) else "other classes, or in another order"
    winter21s = {len(trained), len(wnids)} == {19167, 21841}  # its own table and 22k's, which manifests map
    older = (f"; a dataset prepared before manifests recorded the mapping gets it from python -m prepare run on it "
             f"again (--dest {data})" if winter21s and not manifest.class_maps else "")
    raise UserError(f"the checkpoint's model predicts the {len(trained):,} classes its run trained on, not the "
                    f"{len(wnids):,} of {data} ({other}), and the data's manifest maps its classes into no table of "
                    f"theirs (it maps them into: {recorded}): give --data the dataset the run was trained on, or one "
                    f"prepared from its source{older}")


def evaluation_line(record: dict) -> str:
    """The log line of a record: where the run was, then val's and the evaluation sets' figures."""
    from train.run.metrics import evaluation_sets

    at = ("before any training step" if record["epochs_done"] == record["step_in_epoch"] == 0
          else f"after epoch {record['epochs_done'] - 1}" if record["step_in_epoch"] == 0
          else f"epoch {record['epochs_done']} step {record['step_in_epoch']}")
    ema = f" (EMA {record['ema_val_top1']:.2f}%)" if "ema_val_top1" in record else ""
    ranks = f"{record['world_size']} rank{'s' if record['world_size'] > 1 else ''}"
    return (f"evaluated {record['checkpoint']} ({at}) on {record['data']}, {ranks}: val top-1 "
            f"{record['val_top1']:.2f}%{ema} top-5 {record['val_top5']:.2f}% on {record['val_images']} images"
            f"{evaluation_sets(record)}")


def append_record(path: Path, line: bytes) -> None:
    """The record at the end of RUN_DIR/eval.jsonl, its folder made where --checkpoint names a run directory
    that is not there yet; a file system that refuses it (read-only, full) is one line, and the file is left as
    it was (no part of the line at its end)."""
    from train.run.metrics import append_durably

    size = path.stat().st_size if path.exists() else None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        append_durably(path, line)
    except OSError as exn:
        with contextlib.suppress(OSError):
            path.unlink() if size is None else os.truncate(path, size)
        raise UserError(f"cannot append the record to {path} ({exn.strerror or exn}): its figures are in the line "
                        "above; give a run directory this user can write, with room (a colleague's run: "
                        "--checkpoint THEIR_RUN/last.pt with a RUN_DIR of your own)") from None


def evaluate_checkpoint(args: argparse.Namespace, env) -> dict:
    """Every rank: the checkpoint's record (appended to RUN_DIR/eval.jsonl by rank 0)."""
    import torch
    import torch.distributed as dist

    from shards.manifest import read_complete_manifest
    from shards.resources import available_cpus
    from train.cluster import cpu_threads
    from train.run.checkpoint import checkpoint_path, load_checkpoint
    from train.run.devices import device_for
    from train.run.loop import ClassPlacement, build_run, close_data, evaluate_all, join_ranks
    from train.run.metrics import json_line

    path = args.checkpoint or checkpoint_path(args.run_dir)
    if not path_is(path, "file"):
        raise UserError(f"no checkpoint at {path}: nothing to evaluate (a run saves RUN_DIR/last.pt at each epoch's "
                        "end and at a preemption; --checkpoint names another file)")
    checkpoint = load_checkpoint(path)
    saved = checkpoint.settings
    config = evaluation_config(saved, args, evaluation_data(args.data, saved.data, os.environ,
                                                            lambda path: (Path(path) / MANIFEST_NAME).is_file()))
    if args.data is None and not Path(config.data).is_absolute() and not (Path(config.data) / MANIFEST_NAME).is_file():
        # (not "no prepared dataset at DATA: run python -m prepare": it is there, beside the folder the run started in)
        raise UserError(f"the run's --data {config.data} is a path relative to the folder the run was started in, and "
                        f"there is no prepared dataset at it from {os.getcwd()}: run python -m train.evaluate from "
                        "that folder, or give --data the prepared dataset")
    manifest = read_complete_manifest(Path(config.data))
    mapped = mapped_outputs((checkpoint.dataset or {}).get("classes"), manifest, config.data)
    device = device_for(env, config.device)
    torch.set_num_threads(cpu_threads(env, available_cpus()))
    run = None
    try:
        control = join_ranks(env, device, config.dist_timeout, config.dist_timeout)
        run = build_run(config, env, manifest, device, control, preemption=None, batch_size=config.batch_size,
                        model_classes=len(checkpoint.dataset["classes"]) if mapped else None)
        if mapped:
            run.outputs_on_data = ClassPlacement(mapped[1], mapped[2], manifest.num_classes, device)
        try:
            run.model.load_state_dict(checkpoint.model)
        except RuntimeError as exn:  # the head's shape: another number of classes
            raise UserError(f"the checkpoint's {config.arch} does not fit {config.data}, which has "
                            f"{manifest.num_classes} classes ({str(exn).splitlines()[-1].strip()}): give --data the "
                            "dataset the run was trained on (or a copy of it prepared again)") from None
        if run.ema is not None:
            run.ema.load_state_dict(checkpoint.ema)
        dataset_id = manifest.dataset_id()
        record = what_was_evaluated(checkpoint, path, config.data, dataset_id, saved.dataset_id,
                                    env.world_size) | ({"class_map": mapped[0]} if mapped else {}) | evaluate_all(run)
        if env.is_main:
            if mapped:
                log.info("the checkpoint's %d classes are placed on %s's %d through its manifest's mapping into %s: "
                         "the model is scored among the data's classes", len(checkpoint.dataset["classes"]),
                         config.data, manifest.num_classes, mapped[0])
            elif dataset_id != saved.dataset_id:
                log.info("%s is not the dataset the run trained on (dataset_id %s, the run's %s): another prepared "
                         "copy of the same classes", config.data, dataset_id, saved.dataset_id)
            log.info("%s", evaluation_line(record))  # first: a record that cannot be kept is still said
            append_record(args.run_dir / EVAL_NAME, json_line(record))  # (a NaN loss: null)
            log.info("record appended to %s", args.run_dir / EVAL_NAME)
        return record
    finally:
        close_data(run)
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    from train.cluster import dist_env
    from train.run.cli import setup_logging
    from train.run.flags import MAX_DIST_TIMEOUT_S, in_flags

    parser = build_parser()
    args = parser.parse_args(argv)
    # as training refuses it: inf or nan ended the rendezvous of several ranks in an OverflowError (a negative, a
    # timeout) told as a peer that never arrived; 0 silently became the run's
    if args.dist_timeout is not None and not 0 < args.dist_timeout <= MAX_DIST_TIMEOUT_S:
        parser.error(f"--dist-timeout must be a finite number of seconds above 0 (at most {MAX_DIST_TIMEOUT_S:.0e}), "
                     f"not {args.dist_timeout}")
    # a checkpoint given as RUN_DIR was looked for at RUN_DIR/last.pt inside it: "no checkpoint at .../last.pt/last.pt"
    if path_is(args.run_dir, "file"):
        parser.error(f"RUN_DIR {args.run_dir} is a file, not a run directory: give the run's folder "
                     f"({args.run_dir.parent}), which evaluates its last.pt, or a folder for eval.jsonl with "
                     f"--checkpoint {args.run_dir}")
    try:
        env = dist_env(os.environ)
        setup_logging(env)
        evaluate_checkpoint(args, env)
        return 0
    except UserError as exn:  # one line, exit 2, as training's
        logging.getLogger("train").error("%s", in_flags(exn))
        return 2
