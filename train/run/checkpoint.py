"""Checkpoints: one typed definition of what `last.pt` holds, how it is checked before a resume and
how it is restored. Written atomically by rank 0, loaded safely (weights_only). A checkpoint of an
earlier version (another CHECKPOINT_FORMAT) is refused, not converted."""

from __future__ import annotations

import random
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import torch

from shards.manifest import write_file_atomic
from train.run.config import TrainConfig
from train.errors import ResumeError
from train.run.settings import FIXED

CHECKPOINT_NAME = "last.pt"
CHECKPOINT_FORMAT = "imagenet-train-checkpoint/2"  # what this version writes and reads
# What a checkpoint must share with the run that resumes it (after the settings are resolved: its dataset too).
MUST_MATCH_ON_RESUME = FIXED + ("dataset_id",)


@dataclass(kw_only=True)
class Checkpoint:
    """Everything needed to continue a run exactly, at an epoch's end or in its middle."""
    model: dict  # state_dict of the unwrapped model
    optimizer: dict
    scheduler: dict
    scaler: dict
    epoch: int  # the epoch to run (next, or the one interrupted)
    step: int  # steps of `epoch` already taken; 0 at an epoch boundary
    world_size: int
    ranks: list[dict]  # per rank {"rng": rng_state(), "sums": EpochSums as a dict}; read only mid-epoch
    config: dict  # TrainConfig.to_dict() of the run that wrote it
    loader: dict | None = None  # mid-epoch: the train ImageNetLoader's state_dict() after `step` steps
    ema: dict | None = None  # --ema: the AveragedModel's state_dict (its weights, buffers and n_averaged)
    dataset: dict | None = None  # what the run trained on (dataset_of): named where a resume finds another
    format: str = CHECKPOINT_FORMAT

    def to_state(self) -> dict:
        """A plain dict for torch.save (not dataclasses.asdict: that would deep-copy every tensor)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: dict, path: Path) -> "Checkpoint":
        """The checkpoint in `state`, of this version's format: one of an earlier version is refused."""
        missing = [f.name for f in fields(cls) if f.name not in state and f.default is MISSING]
        if missing:
            raise ResumeError(f"{path} is not a checkpoint of this trainer (no {', '.join(missing)}): "
                              "start a new run in another --run-dir (or delete this file)")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ResumeError(f"{path} was written by an earlier version of python -m train (format "
                              f"{state.get('format', 'unnamed')}; this version reads {CHECKPOINT_FORMAT}): checkpoints "
                              "from before it are refused: start the run again in another --run-dir (or delete this "
                              "file)")
        return cls(**{f.name: state[f.name] for f in fields(cls)})

    @property
    def mid_epoch(self) -> bool:
        return self.step > 0

    def check_resumable(self, config: TrainConfig, world_size: int, dataset: dict | None = None) -> None:
        """Refuse checkpoints of another model or dataset, or a mid-epoch state another world size cannot continue.
        `dataset`: dataset_of the data this run reads, to name a copy prepared again with other options."""
        saved = TrainConfig.from_dict(self.config)
        if saved.dataset_id != config.dataset_id and self.dataset and dataset:
            prepared_again = prepared_again_with(self.dataset, dataset)
            if prepared_again:
                raise ResumeError(f"{config.data} holds the run's source prepared again with other options "
                                  f"({prepared_again}): the same images in other shards, which the run's read plan "
                                  "cannot continue. To resume, prepare it again with the run's options ("
                                  f"{prepare_flags(self.dataset['options'])}), or point --data at the copy it trained "
                                  "on; or start a new run in another --run-dir (python -m train.evaluate reads any copy)")
        diffs = [f"{name}: checkpoint {saved.setting(name)!r}, now {config.setting(name)!r}"
                 for name in MUST_MATCH_ON_RESUME if saved.setting(name) != config.setting(name)]
        if diffs:
            raise ResumeError(f"the checkpoint belongs to another run ({'; '.join(diffs)}): use another --run-dir, "
                              "or the settings it was made with")
        if self.mid_epoch and self.world_size != world_size:
            raise ResumeError(f"the checkpoint stopped mid-epoch with {self.world_size} ranks; this run has "
                              f"{world_size}. Resume with {self.world_size} tasks so the epoch's remaining "
                              "samples are read exactly.")

    def restore(self, model: torch.nn.Module, optimizer, scheduler, scaler, rank: int, device: torch.device,
                ema: torch.nn.Module | None = None) -> dict:
        """Load the training state (and the weights' average, with --ema); mid-epoch, also this rank's
        RNG state. Returns this rank's epoch sums (empty at an epoch boundary)."""
        model.load_state_dict(self.model)
        if ema is not None:
            if self.ema is None:
                raise ResumeError("this run keeps an EMA of the weights (--ema) but the checkpoint has none: resume "
                                  "with --no-ema, or start a new run")
            ema.load_state_dict(self.ema)
        optimizer.load_state_dict(self.optimizer)
        scheduler.load_state_dict(self.scheduler)
        if self.scaler:  # empty where the checkpoint's run had no GradScaler (bf16, fp32): this one starts afresh
            scaler.load_state_dict(self.scaler)
        if not self.mid_epoch:
            return {}
        set_rng_state(self.ranks[rank]["rng"], device)
        return self.ranks[rank]["sums"]


# prepare's options that decide the shards' bytes (the manifest's "options"), by the flags that set them
PREPARE_FLAGS = {"seed": "--seed", "shard_size_mb": "--shard-size", "resize": "--resize", "quality": "--quality",
                 "restart_mcus": "--restart-mcus", "skip_bad": "--skip-bad"}


def dataset_of(manifest) -> dict:
    """What a checkpoint keeps of the dataset its run trained on: enough to tell, on a resume that finds
    another dataset_id, the same source prepared again with other options. Pure."""
    return {"source": {name: manifest.source.get(name) for name in ("path", "layout")},
            "options": dict(manifest.options), "classes": [c.wnid for c in manifest.classes],
            "samples": {name: split.samples for name, split in manifest.splits.items() if name in ("train", "val")}}


def prepared_again_with(trained: dict, now: dict) -> str:
    """"--shard-size 0.12 -> 0.05, ..." where `now` is `trained`'s source (the same path, layout, classes and
    sample counts) prepared with other options; "" otherwise. Pure."""
    same_source = all(trained[name] == now[name] for name in ("source", "classes", "samples"))
    options = sorted(set(trained["options"]) | set(now["options"]))
    changed = [f"{PREPARE_FLAGS.get(name, name)} {trained['options'].get(name)} -> {now['options'].get(name)}"
               for name in options if trained["options"].get(name) != now["options"].get(name)]
    return ", ".join(changed) if same_source else ""


def prepare_flags(options: dict) -> str:
    """The prepare flags that give `options`, every one said (a flag for a true switch, none for an option unset).
    Pure."""
    words = []
    for name, flag in PREPARE_FLAGS.items():
        value = options.get(name)
        if isinstance(value, bool):
            words += [flag] if value else []
        elif value is not None:
            words += [f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"]
    return " ".join(words)


def rng_state(device: torch.device) -> dict:
    """The host's generators, and the accelerator's under its own type ("cuda": NVIDIA's and AMD's, "xpu")."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type != "cpu":
        state[device.type] = torch.get_device_module(device.type).get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type != "cpu" and device.type in state:
        torch.get_device_module(device.type).set_rng_state(state[device.type], device)


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_NAME


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Atomically (temporary file, fsync, rename): a reader sees the old or the new checkpoint, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, lambda f: torch.save(checkpoint.to_state(), f))


def find_checkpoint(run_dir: str, resume: str | None) -> Path | None:
    """The checkpoint to resume from: --resume auto takes the run directory's, if there is one. A new
    run (no --resume) into a run directory that holds one is refused: its first save would replace it."""
    if resume is None:
        if (existing := checkpoint_path(run_dir)).exists():
            raise ResumeError(f"--run-dir {run_dir} holds a run's checkpoint ({existing.name}), which a new "
                              "run would overwrite: add --resume auto to continue that run, or give another --run-dir "
                              "(or delete that one) to start a new one")
        return None
    if resume == "auto":
        path = checkpoint_path(run_dir)
        return path if path.exists() else None
    path = Path(resume)
    if not path.is_file():
        raise ResumeError(f"--resume {resume}: no such checkpoint file")
    return path


def load_checkpoint(path: Path) -> Checkpoint:
    # weights_only: a checkpoint on shared storage must not be able to run code when loaded.
    return Checkpoint.from_state(torch.load(path, map_location="cpu", weights_only=True), path)
