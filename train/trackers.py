"""Experiment trackers for `python -m train --tracker tensorboard|wandb`, rank 0 only: each epoch's
record, and the loss, learning rate and images/s every --log-every steps, at the run's global
optimizer step (which a resumed run continues). Both are optional extras; metrics.jsonl is written
either way.

    TensorBoard   event files in RUN_DIR/tensorboard (torch.utils.tensorboard); a resumed run drops
                  the events logged after its checkpoint's step (purge_step), so no step is logged twice
    WandB         Weights & Biases in RUN_DIR/wandb; WANDB_MODE=offline works on nodes without
                  internet access (`wandb sync` them later). The run's id is kept in RUN_DIR/wandb-id,
                  so a requeued job continues the same run.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from train.config import ConfigError

TRACKERS = ("none", "tensorboard", "wandb")
WANDB_ID_NAME = "wandb-id"


def missing(tracker: str, package: str) -> ConfigError:
    return ConfigError(f"--tracker {tracker} needs the {package} package: pip install 'imagenet-slurm[{tracker}]' "
                       "in the project's environment (bash jobs/install.sh --dev installs it)")


class NoTracker:
    def log(self, values: dict, step: int) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoard:
    def __init__(self, run_dir: Path, resumed_step: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise missing("tensorboard", "tensorboard") from None
        # events the crashed run logged after its checkpoint (its step and before are kept) are dropped
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resumed_step + 1 if resumed_step else None)

    def log(self, values: dict, step: int) -> None:
        for name, value in values.items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, run_dir: Path, project: str, config: dict):
        try:
            import wandb
        except ImportError:
            raise missing("wandb", "wandb") from None
        id_file = Path(run_dir) / WANDB_ID_NAME
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)  # as W&B's own ids
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
        self.run = wandb.init(project=project, id=run_id, resume="allow", dir=str(run_dir), config=config,
                              name=Path(run_dir).name)

    def log(self, values: dict, step: int) -> None:
        self.run.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)

    def close(self) -> None:
        self.run.finish()


def open_tracker(tracker: str, run_dir: str, *, is_main: bool, resumed_step: int, project: str, config: dict):
    """The tracker of rank 0; the other ranks log nothing."""
    if tracker == "none" or not is_main:
        return NoTracker()
    if tracker == "tensorboard":
        return TensorBoard(Path(run_dir), resumed_step)
    return WandB(Path(run_dir), project, config)
