"""Experiment trackers for `python -m train --tracker tensorboard|wandb`, rank 0 only: each epoch's
record, and the loss, learning rate and images/s every --log-every steps, at the run's global
optimizer step (which a resumed run continues). Both are optional extras; metrics.jsonl is written
either way, also where a tracker cannot write its files (a full disk: one warning, then it logs nothing).

    TensorBoard   event files in RUN_DIR/tensorboard (torch.utils.tensorboard); a resumed run drops
                  the events logged after its checkpoint's step (purge_step), so no step is logged twice
    WandB         Weights & Biases in RUN_DIR/wandb; WANDB_MODE=offline works on nodes without
                  internet access. The run's id is kept in RUN_DIR/wandb-id, so a requeued job
                  continues the same run: offline, each attempt writes a folder of its own, and
                  `wandb sync RUN_DIR/wandb/offline-run-*` uploads them in order as one run. Steps a
                  killed run logged after its last checkpoint stay in W&B, which ignores the resumed
                  run's repeats of them until it passes them.
"""

from __future__ import annotations

import importlib
import logging
import secrets
import threading
from pathlib import Path

from shards.manifest import write_file_atomic
from train.errors import ConfigError

log = logging.getLogger("train")

WANDB_ID_NAME = "wandb-id"
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # the package each of TRACKERS[1:] needs


def missing(tracker: str, package: str) -> ConfigError:
    return ConfigError(f"--tracker {tracker} needs the {package} package: pip install 'imagenet-slurm[{tracker}]' "
                       "in the project's environment (bash jobs/install.sh --dev installs it)")


def require(tracker: str) -> None:
    """Import the tracker's package now, on every rank, before the rendezvous: a missing one is the
    same one line everywhere, not rank 0's alone after the others have started."""
    if tracker == "none":
        return
    try:
        importlib.import_module(PACKAGES[tracker])
    except ImportError:
        raise missing(tracker, PACKAGES[tracker]) from None


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
        hush_writer_thread_errors()  # before its thread starts: opening writes the event file's first record
        # what a killed run logged after the step it resumes from (a fresh start: step 0) is dropped
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resumed_step + 1)

    def log(self, values: dict, step: int) -> None:
        for name, value in values.items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def hush_writer_thread_errors() -> None:
    """TensorBoard's writer thread keeps the OSError it meets (a full disk) for the writer's next flush, which
    Guarded turns into one warning, and raises it too: threading's hook printed its traceback on rank 0's stderr
    beside that warning. Only that thread's OSErrors are hushed; every other thread's error reaches the hook
    installed before."""
    earlier = threading.excepthook
    if getattr(earlier, "hushes_tensorboard", False):
        return

    def hook(args) -> None:
        if not (type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError)):
            earlier(args)

    hook.hushes_tensorboard = True
    threading.excepthook = hook


def run_id_of(run_dir: Path, resumed: bool = True) -> str:
    """The run's W&B id, kept in RUN_DIR/wandb-id so that a requeued job continues the same W&B run: read, or
    drawn (as W&B's own ids) and written atomically where there is none yet (or an empty one, left by a
    crash of an earlier version's plain write: W&B refuses an empty id). A new run (not `resumed`) draws its own
    where the folder keeps an earlier run's whose last.pt went: continued, that W&B run would ignore the new run's
    steps until they passed its own last."""
    id_file = run_dir / WANDB_ID_NAME
    run_id = id_file.read_text().strip() if id_file.exists() else ""
    if not run_id or not resumed:
        earlier, run_id = run_id, secrets.token_hex(4)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_file_atomic(id_file, run_id.encode())
        if earlier:
            log.warning("%s: W&B run %s was an earlier start's, whose last.pt is not here: this new run logs to "
                        "W&B run %s (continued, %s would ignore its steps up to its own last)", id_file, earlier,
                        run_id, earlier)
    return run_id


class WandB:
    def __init__(self, run_dir: Path, project: str, config: dict, resumed: bool = True):
        try:
            import wandb
        except ImportError:
            raise missing("wandb", "wandb") from None
        self.run = wandb.init(project=project, id=run_id_of(Path(run_dir), resumed), resume="allow", dir=str(run_dir),
                              config=config, name=Path(run_dir).name)

    def log(self, values: dict, step: int) -> None:
        self.run.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)

    def close(self) -> None:
        self.run.finish()


FOLDERS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # where each tracker writes in the run directory


def stopped(tracker: str, run_dir: str, exn: OSError) -> str:
    return (f"--tracker {tracker}: cannot write {Path(run_dir) / FOLDERS[tracker]} ({exn.strerror or exn}): is its "
            "file system full, or over its quota? It logs nothing more until the run is resumed; metrics.jsonl still "
            "records every epoch (python -m train.report RUN_DIR draws them)")


class Guarded:
    """A tracker whose files cannot be written (the run directory's file system full, a quota) stops, in one
    warning, and the run goes on: metrics.jsonl is its record, and an epoch's record that cannot be appended stops
    every rank in one line. Unguarded, TensorBoard's writer thread raised the OSError at its next flush: rank 0's
    traceback alone, the other ranks left waiting in the step's collective."""

    def __init__(self, tracker, name: str, run_dir: str):
        self.tracker, self.name, self.run_dir = tracker, name, run_dir

    def log(self, values: dict, step: int) -> None:
        self.attempt(self.tracker.log, values, step)

    def close(self) -> None:
        self.attempt(self.tracker.close)

    def attempt(self, call, *args) -> None:
        try:
            call(*args)
        except OSError as exn:
            self.tracker = NoTracker()  # (TensorBoard's writer thread has ended: its close would raise it again)
            log.warning("%s", stopped(self.name, self.run_dir, exn))


def open_tracker(tracker: str, run_dir: str, *, is_main: bool, resumed_step: int, project: str, config: dict,
                 resumed: bool = True):
    """The tracker of rank 0 (Guarded); the other ranks log nothing. `resumed`: whether the run continues a
    checkpoint (a new run logs to a W&B run of its own)."""
    if tracker == "none" or not is_main:
        return NoTracker()
    try:
        opened = (TensorBoard(Path(run_dir), resumed_step) if tracker == "tensorboard"
                  else WandB(Path(run_dir), project, config, resumed))
    except OSError as exn:  # its folder, or W&B's run id, on a full file system
        log.warning("%s", stopped(tracker, run_dir, exn))
        return NoTracker()
    return Guarded(opened, tracker, run_dir)
