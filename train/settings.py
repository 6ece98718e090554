"""A run's settings across resumes: what the command line gave, against what a checkpoint ran with.

- `settings_on_resume` (pure): the checkpoint's settings, but where a setting only says how this process
  runs (`RUN_CONTROL`: paths, threads, logging), the command line's. A typed flag that differs from the
  checkpoint is refused, naming the flag and both values, unless --force-change names it: then the change
  is made, and returned to be logged and recorded. A resume without --recipe keeps the recipe.
- `describe` (pure): the lines a run logs at its start: recipe and schedule, augmentation, sizes, precision.
- `record_settings`: RUN_DIR/config.json, the settings in force and every change forced so far, atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from shards.manifest import write_file_atomic
from train.config import TrainConfig
from train.errors import ResumeError
from train.flags import flag_of, show

SETTINGS_FILE = "config.json"
SETTINGS_FORMAT = "imagenet-train-settings/1"
# How this process runs, not what the run computes: the command line's on resume, whatever the checkpoint's.
# (--decode changes the pixels slightly: a resume that changes it says so; --max-steps, the steps of an epoch
# and so the schedule's length, is a setting.)
RUN_CONTROL = ("data", "run_dir", "workers", "device", "decode", "resume", "compile", "channels_last", "log_every",
               "signal", "requeue", "dist_timeout", "tracker", "wandb_project", "max_bad_samples",
               "dataset_id")  # dataset_id: the manifest's, checked against the checkpoint's (Checkpoint.check_resumable)
# What a run is: never changed within it, --force-change or not (the weights, the plan, the batches and the
# optimizer's parameter groups depend on them; the recipe names what the run's settings came from).
FIXED = ("arch", "seed", "batch_size", "no_decay", "recipe")


@dataclass(frozen=True)
class Change:
    """A setting --force-change made differ from the checkpoint's."""
    field: str
    old: object
    new: object

    def line(self) -> str:
        return f"{flag_of(self.field)} {show(self.old)} -> {show(self.new)}"


def settings_on_resume(now: TrainConfig, saved: TrainConfig, given: frozenset[str],
                       forced: frozenset[str]) -> tuple[TrainConfig, list[Change]]:
    """The settings a resumed run continues with, and the changes --force-change made. Pure."""
    values, changes, refused = saved.to_dict(), [], []
    for name in (f.name for f in fields(TrainConfig)):
        new, old = getattr(now, name), getattr(saved, name)
        if name in RUN_CONTROL:
            values[name] = new
        elif name in given and new != old:
            if name in forced and name not in FIXED:
                values[name] = new
                changes.append(Change(name, old, new))
            else:
                refused.append(name)
    if refused:
        raise ResumeError(refusal(refused, now, saved))
    return TrainConfig(**values), changes


def refusal(names: list[str], now: TrainConfig, saved: TrainConfig) -> str:
    differ = "; ".join(f"{flag_of(name)} {show(getattr(saved, name))} there, {show(getattr(now, name))} here"
                       for name in names)
    fixed = [flag_of(name) for name in names if name in FIXED]
    forcing = " ".join(f"--force-change {flag_of(name)}" for name in names)
    remedy = (f"{', '.join(fixed)} cannot change within a run: leave {'it' if len(fixed) == 1 else 'them'} out, or "
              "start a new run in another --run-dir" if fixed else
              f"leave the {'flag' if len(names) == 1 else 'flags'} out to continue as the run began, or add {forcing} "
              "to change it on purpose (logged and recorded in RUN_DIR/config.json)")
    return f"the checkpoint's run differs from this command line ({differ}): {remedy}"


# ---------------------------------------------------------------- what the run says at its start

def describe(config: TrainConfig, world_size: int, validation: str, precision: str) -> list[str]:
    """The settings in force, in a few lines for the log. Pure."""
    global_batch = config.batch_size * world_size
    momentum = f"momentum {config.momentum:g}{' (Nesterov)' if config.nesterov else ''}"
    return [
        f"recipe {config.recipe}: {config.arch}, {config.epochs} epochs of batch {global_batch} ({world_size} x "
        f"{config.batch_size}), lr {config.lr * global_batch / 256:.4g} at the peak ({config.lr:g} per 256 images), "
        f"{config.warmup_epochs:g} warm-up epochs from {config.warmup_start_factor:g} x the peak (at each "
        f"{config.lr_update}'s {config.warmup_at}) then {config.lr_schedule} decay, changing every {config.lr_update}; "
        f"weight decay {config.weight_decay:g} (none on {config.no_decay}), {momentum}, label smoothing "
        f"{config.label_smoothing:g}",
        f"augmentation: {augmentation(config)}",
        f"sizes: train {train_sizes(config)}; validation {validation}",
        f"precision: {precision}{', channels_last' if config.channels_last else ''}"
        f"{', torch.compile' if config.compile else ''}",
    ]


def augmentation(config: TrainConfig) -> str:
    parts = ["RandomResizedCrop + flip"]
    if config.policy is not None:
        augment = config.augment()
        options = f"num_ops {augment.option('num_ops')}, magnitude {augment.option('magnitude')}, " \
            if config.policy == "randaugment" else ""
        bins = f"{config.num_magnitude_bins} magnitude bins, " if config.num_magnitude_bins is not None else ""
        parts.append(f"{config.policy} ({options}{bins}{config.policy_interpolation})")
    parts += [f"random erasing {config.erasing:g}"] if config.erasing else []
    parts += [f"MixUp {config.mixup:g}"] if config.mixup else []
    parts += [f"CutMix {config.cutmix:g}"] if config.cutmix else []
    parts += [f"repeated augmentation x{config.repeats}"] if config.repeats > 1 else []
    parts += [f"EMA every {config.ema_steps} steps, decay {config.ema_decay:g}"] if config.ema else []
    return ", ".join(parts)


def train_sizes(config: TrainConfig) -> str:
    if config.ramp is None:
        return f"{config.image_size} px"
    start, end, start_epoch, end_epoch = config.ramp
    return (f"{start} px to epoch {start_epoch}, then ramping to {end} px at epoch {end_epoch} (in steps of 32), "
            f"{end} px after")


def train_size(config: TrainConfig, epoch: int) -> int:
    """The training crop size of `epoch` (a ramp's, or --image-size): metrics.jsonl records it."""
    size = config.image_size_or_ramp()
    return size if isinstance(size, int) else size.size(epoch)


# ---------------------------------------------------------------- RUN_DIR/config.json

def record_settings(run_dir: str | Path, config: TrainConfig, changes: list[Change], epoch: int, step: int) -> Path:
    """Write RUN_DIR/config.json: the settings in force, and every change --force-change made, this one
    and earlier resumes' (kept from the file), with where in the run it was made."""
    path = Path(run_dir) / SETTINGS_FILE
    earlier = recorded_changes(path)
    document = {"format": SETTINGS_FORMAT, "settings": config.to_dict(),
                "changes": earlier + [{"epoch": epoch, "step": step, "flag": flag_of(c.field),
                                       "from": c.old, "to": c.new} for c in changes]}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())
    return path


def recorded_changes(path: Path) -> list[dict]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    changes = document.get("changes") if isinstance(document, dict) else None
    return changes if isinstance(changes, list) else []
