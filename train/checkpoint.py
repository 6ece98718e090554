"""Checkpoints: written atomically by rank 0, loaded safely (weights_only), checked before resuming."""

from __future__ import annotations

from pathlib import Path

import torch

from shards.manifest import write_file_atomic
from train.config import MUST_MATCH_ON_RESUME, TrainConfig

CHECKPOINT_NAME = "last.pt"


class ResumeError(RuntimeError):
    """The checkpoint cannot continue this run: the message says why and what to do."""


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_NAME


def save_checkpoint(path: Path, state: dict) -> None:
    """Atomically (temporary file, fsync, rename): a reader sees the old or the new checkpoint, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, lambda f: torch.save(state, f))


def find_checkpoint(run_dir: str, resume: str | None) -> Path | None:
    """The checkpoint to resume from: --resume auto takes the run directory's, if there is one."""
    if resume is None:
        return None
    if resume == "auto":
        path = checkpoint_path(run_dir)
        return path if path.exists() else None
    path = Path(resume)
    if not path.is_file():
        raise ResumeError(f"--resume {resume}: no such checkpoint file")
    return path


def load_checkpoint(path: Path) -> dict:
    # weights_only: a checkpoint on shared storage must not be able to run code when loaded.
    return torch.load(path, map_location="cpu", weights_only=True)


def check_resumable(state: dict, config: TrainConfig, world_size: int) -> None:
    """Refuse checkpoints of another model or dataset, or a mid-epoch state another world size cannot continue."""
    saved = TrainConfig.from_dict(state["config"])
    diffs = [f"{name}: checkpoint {getattr(saved, name)!r}, now {getattr(config, name)!r}"
             for name in MUST_MATCH_ON_RESUME if getattr(saved, name) != getattr(config, name)]
    if diffs:
        raise ResumeError(f"the checkpoint belongs to another run ({'; '.join(diffs)}): use another --run-dir, "
                          "or the settings it was made with")
    if state["step"] > 0 and state["world_size"] != world_size:
        raise ResumeError(f"the checkpoint stopped mid-epoch with {state['world_size']} ranks; this run has "
                          f"{world_size}. Resume with {state['world_size']} tasks so the epoch's remaining "
                          "samples are read exactly.")
