"""A run's settings across resumes: what the command line gave, against what a checkpoint ran with.

- `settings_on_resume` (pure): the checkpoint's settings, but where a setting only says how this process
  runs (`RUN_CONTROL`: paths, threads, logging, --max-steps), the command line's. A typed flag that differs
  from the checkpoint is refused, naming the flag and both values, unless --force-change names it: then the
  change is made, and returned to be logged and recorded. A resume without --recipe keeps the recipe.
- `carried_over` (pure): the checkpoint's settings that this command line left out and would have given
  otherwise, said at the start of a resume.
- `run_settings` (pure): the settings that run, new or resumed, with the lines that say what was kept,
  fitted or forced. A new run's values nobody typed that do not fit it are fitted (`fit_untyped`: the
  warm-up; `fit_to_data`: EMA's interval, repeated augmentation), never refused; --force-change without a
  checkpoint to change is refused.
- `describe` (pure): the lines a run logs at its start: recipe and schedule, augmentation, sizes, precision.
- `record_settings`: RUN_DIR/config.json, the settings in force and every change forced so far, atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from shards.manifest import write_file_atomic
from shards.plan import steps_per_epoch
from train.augment.choices import AUGMENT_FIELDS
from train.run.config import (SETTINGS, CommandLine, TrainConfig, fit_untyped, warmup_ramps_by_step, warmup_steps,
                              whole_warmup_epochs)
from train.errors import ConfigError, ResumeError
from train.run.flags import flag_of, show

SETTINGS_FILE = "config.json"
SETTINGS_FORMAT = "imagenet-train-settings/1"
# How this process runs, not what the run computes: the command line's on resume, whatever the checkpoint's
# (a resume never inherits them: a smoke test's --max-steps does not cap the run it resumes). --decode changes
# the pixels slightly: a resume that changes it says so.
RUN_CONTROL = ("data", "run_dir", "workers", "device", "decode", "resume", "compile", "channels_last", "log_every",
               "signal", "requeue", "dist_timeout", "max_steps", "tracker", "wandb_project", "max_bad_samples",
               "dataset_id")  # dataset_id: the manifest's, checked against the checkpoint's (Checkpoint.check_resumable)
# What a run is: never changed within it, --force-change or not (the weights, the plan, the batches and the
# optimizer's parameter groups depend on them; the recipe names what the run's settings came from).
FIXED = ("arch", "seed", "batch_size", "no_decay", "recipe")
# What the rest of an epoch is read and augmented with: a checkpoint in an epoch's middle resumes it as it began
# (the loader's state refuses another: train/imagenet_loader.py's STATE_IDENTITY, MID_EPOCH_IDENTITY)
READ_AS_IT_BEGAN = ("image_size", "ramp", "repeats", "shuffle_buffer", *AUGMENT_FIELDS)


@dataclass(frozen=True)
class Change:
    """A setting --force-change made differ from the checkpoint's."""
    field: str
    old: object
    new: object

    def line(self) -> str:
        return f"{flag_of(self.field)} {show(self.old)} -> {show(self.new)}"


def settings_on_resume(now: TrainConfig | Mapping, saved: TrainConfig, given: frozenset[str], forced: frozenset[str],
                       epoch: int = 0, step: int = 0) -> tuple[TrainConfig, list[Change]]:
    """The settings a resumed run continues with, and the changes --force-change made. `epoch`, `step`: the
    checkpoint's (the epochs finished, a forced --epochs must leave the run at least one more; the steps of the
    next taken, whose rest is read as it began). A forced flag already equal to the checkpoint's (a requeued job
    that forced it before) changes nothing. Pure."""
    now = by_name(now)
    values, changes, refused = saved.to_dict(), [], []
    for name in SETTINGS:
        new, old = now[name], saved.setting(name)
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
    mid_epoch = [change for change in changes if change.field in READ_AS_IT_BEGAN] if step else []
    if mid_epoch:
        flags = " ".join(f"--force-change {flag_of(change.field)}" for change in mid_epoch)
        raise ResumeError(f"{', '.join(change.line() for change in mid_epoch)} (forced): the checkpoint is at step "
                          f"{step} of epoch {epoch}, whose rest is read and augmented as it began. Resume without "
                          f"{flags} to finish the epoch, then force the change from the checkpoint at its end")
    if values["epochs"] <= epoch and "epochs" in {c.field for c in changes}:
        raise ResumeError(f"--epochs {values['epochs']} (forced): the run's checkpoint is at epoch {epoch} of "
                          f"{saved.epochs}, so nothing would train and the checkpoint would keep saying {saved.epochs}. "
                          f"Force a longer run (--epochs {epoch + 1} or more), or leave --epochs out")
    if values["epochs"] <= epoch and changes:  # config.json would say it while last.pt keeps the old value
        forced = ", ".join(change.line() for change in changes)
        raise ResumeError(f"{forced} (forced): the run has finished its {saved.epochs} epochs, so nothing would train "
                          f"with it, and the checkpoint would keep the old value. Force a longer run too (--epochs "
                          f"{epoch + 1} --force-change --epochs), or start a new run in another --run-dir")
    return TrainConfig.from_settings(values), changes


def by_name(settings: TrainConfig | Mapping) -> dict:
    """Settings by name (SETTINGS): a command line's (CommandLine.values), or a configuration's."""
    return settings.to_dict() if isinstance(settings, TrainConfig) else dict(settings)


def carried_over(now: TrainConfig | Mapping, saved: TrainConfig, given: frozenset[str]) -> list[str]:
    """`--flag value` for each setting the resumed run keeps from its checkpoint where this command line,
    which left the flag out, would have given another value (its default, its recipe's). Pure."""
    now = by_name(now)
    return [f"{flag_of(name)} {show(saved.setting(name))}" for name in SETTINGS
            if name not in RUN_CONTROL and name not in given and saved.setting(name) != now[name]]


# ---------------------------------------------------------------- a run's settings, new or resumed

@dataclass(frozen=True)
class RunSettings:
    """The settings a run starts with, and what its start says of them."""
    config: TrainConfig
    changes: list[Change]  # what --force-change changed on this resume
    notes: tuple[str, ...]  # start-up lines: what replaced, fitted or kept a value
    origin: dict[str, str]  # field -> where its value came from, as refusals say it
    meant: frozenset[str]  # the fields this command line asked for: typed other than their default, or forced


def run_settings(command: CommandLine, config: TrainConfig, saved: TrainConfig | None, epoch: int, train_samples: int,
                 world_size: int, step: int = 0) -> RunSettings:
    """The settings that will run; `saved`, `epoch`: the settings and the epoch of the checkpoint resumed
    (None, 0 for a new run). A resume continues with the checkpoint's settings, but for what
    --force-change changes (a value typed equal to the checkpoint's is the checkpoint's); a new run fits
    the values nobody typed to itself and to the data. A cap of --max-steps is said either way: the
    checkpoints of such a process hold shortened epochs. Pure."""
    capped = (f"--max-steps {config.max_steps}: each epoch of this process stops after {config.max_steps} steps "
              "(a smoke test), and so do the epochs its checkpoints record",) if config.max_steps else ()
    if saved is None:
        if command.force_change:
            flags = " ".join(f"--force-change {flag_of(name)}" for name in sorted(command.force_change))
            raise ConfigError(f"{flags}: there is no checkpoint to change (--resume {show(config.resume)}, --run-dir "
                              f"{config.run_dir}): a new run takes every flag as typed. Leave {flags} out, or give "
                              "the --run-dir of the run to change with --resume auto")
        config, fitted = fit_untyped(config, command.given, command.origin, command.source_epochs)
        steps = steps_per_epoch(train_samples, world_size, config.batch_size)
        config, fitted_to_data = fit_to_data(config, command.given, command.origin, steps)
        return RunSettings(config, [], (*command.notes, *fitted, *fitted_to_data, *capped), dict(command.origin),
                           command.meant())
    # the command line's settings (its augmentation as typed: `config` holds the default Augment on a resume),
    # with this process's run control, the manifest's dataset id among it
    now = {**command.values, **{name: config.setting(name) for name in RUN_CONTROL}}
    resumed, changes = settings_on_resume(now, saved, command.given, command.force_change, epoch, step)
    changed = frozenset(change.field for change in changes)
    notes = []
    kept = carried_over(now, saved, command.given)
    if kept:
        notes.append(f"resumed with the run's own {', '.join(kept)} (this command line leaves them out; --max-steps, "
                     "--workers, logging and tracking are this command line's)")
    notes += [f"--force-change {flag_of(name)}: the run has {flag_of(name)} {show(saved.setting(name))} already"
              for name in sorted(command.force_change - changed - set(RUN_CONTROL))]
    notes += [f"--force-change {flag_of(name)}: not needed, {flag_of(name)} is this command line's on every resume"
              for name in sorted(command.force_change & set(RUN_CONTROL))]
    origin = {name: "forced" if name in changed else "typed" if name in RUN_CONTROL and name in command.given
              else "the checkpoint's" for name in SETTINGS}
    return RunSettings(resumed, changes, (*notes, *capped), origin, changed)


def fit_to_data(config: TrainConfig, given: frozenset[str], origin: dict[str, str], steps: int
                ) -> tuple[TrainConfig, list[str]]:
    """A new run's values nobody typed that do not fit its data, fitted, with a line each: EMA updates
    further apart than an epoch's `steps` (the recipe's every 32 on a small dataset: torchvision's update at
    each epoch's first step would then be the only one) come once an epoch, so that the decay's adjustment
    counts the updates made; repeated augmentation's readings at most the samples a rank reads. Pure."""
    lines = []
    if config.ema and "ema_steps" not in given and 1 <= steps < config.ema_steps:
        lines.append(f"--ema-steps {config.ema_steps} ({origin.get('ema_steps', 'the default')}) is more than the "
                     f"{steps} steps of an epoch here: an EMA update every {steps} steps, once an epoch")
        config = replace(config, ema_steps=steps)
    per_rank = steps * config.batch_size
    if "repeats" not in given and 1 <= per_rank < config.repeats:
        lines.append(f"--repeats {config.repeats} ({origin.get('repeats', 'the default')}) is more than the "
                     f"{per_rank} samples a rank reads an epoch here: {per_rank} readings of each")
        config = replace(config, repeats=per_rank)
    return config, lines


def refusal(names: list[str], now: dict, saved: TrainConfig) -> str:
    differ = "; ".join(f"{flag_of(name)} {show(saved.setting(name))} there, {show(now[name])} here"
                       for name in names)
    fixed = [flag_of(name) for name in names if name in FIXED]
    forcing = " ".join(f"--force-change {flag_of(name)}" for name in names)
    remedy = (f"{', '.join(fixed)} cannot change within a run: leave {'it' if len(fixed) == 1 else 'them'} out, or "
              "start a new run in another --run-dir" if fixed else
              f"leave the {'flag' if len(names) == 1 else 'flags'} out to continue as the run began, or add {forcing} "
              "to change it on purpose (logged and recorded in RUN_DIR/config.json)")
    return f"the checkpoint's run differs from this command line ({differ}): {remedy}"


# ---------------------------------------------------------------- what the run says at its start

def describe(config: TrainConfig, world_size: int, validation: str, precision: str, batch_size: int | None = None,
             steps: int | None = None) -> list[str]:
    """The settings in force, in a few lines for the log; `batch_size`: each rank's, where a resume on another
    world size shares the run's global batch out (None: --batch-size); `steps`: an epoch's, where known. Pure."""
    batch_size = batch_size or config.batch_size
    global_batch = batch_size * world_size
    momentum = f"momentum {config.momentum:g}{' (Nesterov)' if config.nesterov else ''}"
    return [
        f"recipe {config.recipe}: {config.arch}, {config.epochs} epochs of batch {global_batch} ({world_size} x "
        f"{batch_size}), lr {config.peak_lr(global_batch):.4g} at the peak ({config.lr:g} per 256 images), "
        f"{warmup(config, steps)} then {config.lr_schedule} decay, changing every {config.lr_update}; "
        f"weight decay {config.weight_decay:g} (none on {config.no_decay}), {momentum}, label smoothing "
        f"{config.label_smoothing:g}",
        f"augmentation: {augmentation(config)}",
        f"sizes: train {train_sizes(config)}; validation {validation}",
        f"precision: {precision}{', channels_last' if config.channels_last else ''}"
        f"{', torch.compile' if config.compile else ''}",
    ]


def warmup(config: TrainConfig, steps: int | None = None) -> str:
    """The warm-up, as the log says it (`steps`: an epoch's, where known). Pure."""
    ramp = f"{config.warmup_epochs:g} warm-up epochs from {config.warmup_start_factor:g} x the peak"
    if steps and config.warmup_epochs > 0 and warmup_steps(config.warmup_epochs, steps, config.lr_update) == 0:
        return (f"no warm-up ({config.warmup_epochs:g} epochs of {steps} steps is under one: the first step runs at "
                "the peak),")
    if warmup_ramps_by_step(config.warmup_epochs, config.lr_update):
        return (f"{ramp} (at each step's {config.warmup_at}: shorter than an epoch, it ramps by the step), the peak to "
                "epoch 0's end,")
    if config.lr_update == "epoch" and whole_warmup_epochs(config.warmup_epochs) != config.warmup_epochs:
        return (f"{ramp} (at each epoch's {config.warmup_at}: {whole_warmup_epochs(config.warmup_epochs)} whole "
                "epochs, the rate changing once an epoch)")
    return f"{ramp} (at each {config.lr_update}'s {config.warmup_at})"


def augmentation(config: TrainConfig) -> str:
    parts, augment = ["RandomResizedCrop + flip"], config.augment
    if augment.policy is not None:
        options = f"num_ops {augment.option('num_ops')}, magnitude {augment.option('magnitude')}, " \
            if augment.policy == "randaugment" else ""
        bins = f"{augment.num_magnitude_bins} magnitude bins, " if augment.num_magnitude_bins is not None else ""
        parts.append(f"{augment.policy} ({options}{bins}{augment.policy_interpolation})")
    parts += [f"random erasing {augment.erasing:g}"] if augment.erasing else []
    parts += [f"MixUp {augment.mixup:g}"] if augment.mixup else []
    parts += [f"CutMix {augment.cutmix:g}"] if augment.cutmix else []
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

def record_settings(run_dir: str | Path, config: TrainConfig, changes: list[Change], epoch: int, step: int,
                    resumed: bool = True) -> list:
    """Write RUN_DIR/config.json: the settings in force, and every change --force-change made, this one
    and earlier resumes' (kept from the file), with where in the run it was made. A change recorded already
    (a start killed before its first checkpoint, resumed again from the same one) is recorded once. One the run
    does not carry (`not_carried`: a new run's, a resume's from an older checkpoint) moves to "superseded":
    those it moved now are returned, for the caller to say."""
    path = Path(run_dir) / SETTINGS_FILE
    recorded = recorded_changes(path)
    gone = not_carried(recorded, epoch, step, resumed)
    earlier = [change for change in recorded if change not in gone]
    these = [{"epoch": epoch, "step": step, "flag": flag_of(c.field), "from": c.old, "to": c.new} for c in changes]
    document = {"format": SETTINGS_FORMAT, "settings": config.to_dict(),
                "changes": earlier + [change for change in these if change not in earlier]}
    if superseded := recorded_superseded(path) + gone:
        document["superseded"] = superseded
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())
    return gone


def not_carried(changes: list, epoch: int, step: int, resumed: bool) -> list:
    """The recorded changes that a run starting at `epoch`, `step` does not carry, which config.json would
    otherwise list beside settings that contradict them: every one where it is a new run (a run directory whose
    last.pt went, deleted or not copied: they were an earlier run's), else those recorded past the checkpoint it
    resumes (an older last.pt put back: the start that forced them went on from a later one). Pure."""
    def past(change) -> bool:
        where = (change.get("epoch"), change.get("step")) if isinstance(change, dict) else ()
        return len(where) == 2 and all(isinstance(n, int) for n in where) and where > (epoch, step)
    return [change for change in changes if not resumed or past(change)]


def recorded_superseded(path: Path) -> list:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    superseded = document.get("superseded") if isinstance(document, dict) else None
    return superseded if isinstance(superseded, list) else []


def recorded_changes(path: Path) -> list[dict]:
    return readable_changes(path) or []


def readable_changes(path: Path) -> list[dict] | None:
    """config.json's changes; None where it is not a settings document (damaged, or edited by hand into bad JSON)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    changes = document.get("changes") if isinstance(document, dict) else None
    return changes if isinstance(changes, list) else None


def set_aside_unreadable_settings(run_dir: str | Path) -> str | None:
    """Before config.json is written again: one that does not read (damaged, or edited by hand) holds the run's
    earlier --force-change records, which its replacement would drop without a word. It is moved to
    config.json.unreadable (.1, .2, ... where that is taken). The line to log, or None where it reads or is not
    there."""
    path = Path(run_dir) / SETTINGS_FILE
    if not path.exists() or readable_changes(path) is not None:
        return None
    aside, n = path.with_name(f"{SETTINGS_FILE}.unreadable"), 0
    while aside.exists():
        n += 1
        aside = path.with_name(f"{SETTINGS_FILE}.unreadable.{n}")
    os.replace(path, aside)
    return (f"{path} does not read as this run's settings (damaged, or edited by hand?): set aside in {aside.name}, "
            "with the --force-change records of the run's earlier starts it holds; config.json is written anew")
