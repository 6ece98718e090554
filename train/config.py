"""One typed configuration, built from the command line, passed explicitly, saved in checkpoints."""

from __future__ import annotations

import argparse
import signal
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from shards.layout import default_dest

TRACKERS = ("none", "tensorboard", "wandb")  # --tracker (train/trackers.py)


class ConfigError(Exception):
    """A setting that cannot work (an unknown model, a batch larger than the data): the message says
    which one and what to change."""


# Settings that change what a checkpoint means: resuming with other values is refused.
MUST_MATCH_ON_RESUME = ("arch", "image_size", "seed", "batch_size", "dataset_id")


@dataclass(frozen=True)
class TrainConfig:
    data: str
    run_dir: str
    arch: str = "resnet50"
    epochs: int = 90
    batch_size: int = 256  # per rank
    workers: int | None = None  # decoding threads per rank; None: its share of the CPUs, less one
    device: str | None = None  # cuda when available, else cpu
    image_size: int = 224
    decode: str = "cpu"  # "gpu": the threads only draw crops; the device decodes (nvJPEG) and resizes
    seed: int = 0
    resume: str | None = None  # "auto", a checkpoint path, or None
    lr: float = 0.1  # per 256 images of global batch: the peak rate is lr * global_batch / 256
    momentum: float = 0.9
    weight_decay: float = 1e-4  # not applied to norm layers and biases
    label_smoothing: float = 0.1
    warmup_epochs: float = 5.0
    amp: str = "auto"  # bf16 on GPU, off on CPU; or "bf16", "fp16", "off"
    channels_last: bool = True
    compile: bool = False
    shuffle_buffer: int = 1000  # the read plan's shuffle window, in samples: nothing is held (shards are mapped)
    log_every: int = 50  # steps between progress lines in logs
    signal: str = "USR1"  # preemption signal (SIGTERM is handled too)
    requeue: bool = False  # after a preemption checkpoint, `scontrol requeue` the SLURM job
    dist_timeout: float = 120.0  # seconds for the rendezvous and for any collective to complete
    max_steps: int = 0  # stop each epoch after this many steps (0: all); for smoke tests only
    max_bad_samples: int = 100  # per epoch and split, over all ranks: more stops the run
    tracker: str = "none"  # or "tensorboard", "wandb": rank 0 logs there too (metrics.jsonl either way)
    wandb_project: str = "imagenet-slurm"
    dataset_id: str = ""  # filled from the manifest: which dataset the run trains on

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig("", "")
    p = argparse.ArgumentParser(
        prog="python -m train", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Streaming DDP training on ImageNet shards prepared by `python -m prepare`. Under srun, "
                    "one task per GPU; also under torchrun, or as one plain process.")
    dest = default_dest()
    p.add_argument("--data", default=str(dest) if dest else None,
                   help="the prepared dataset on node-local disk (default $SLURM_TMPDIR/imagenet)")
    p.add_argument("--run-dir", default="runs/default", help="checkpoints and metrics.jsonl (shared storage)")
    p.add_argument("--arch", default=d.arch,
                   help="any torchvision classification model name, or package.module:callable (found on PYTHONPATH or "
                        "in the current directory), called with num_classes=... and returning a torch.nn.Module")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per rank")
    p.add_argument("--workers", type=int, default=None,
                   help="decoding threads per rank (default: the rank's share of the task's CPUs, less one for the "
                        "training thread); batches are the same for any count")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    p.add_argument("--image-size", type=int, default=d.image_size,
                   help="train crop size; validation resizes to size*256/224 and centre-crops size")
    p.add_argument("--decode", choices=["cpu", "gpu"], default=d.decode,
                   help="gpu: batched nvJPEG decode and crop/resize/flip on the device, the threads only draw "
                        "crops (with --device cpu it runs the same path on the CPU, for testing)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--resume", default=None, help="'auto' (newest checkpoint in --run-dir, if any) or a path")
    p.add_argument("--lr", type=float, default=d.lr, help="learning rate per 256 images of global batch")
    p.add_argument("--momentum", type=float, default=d.momentum)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--label-smoothing", type=float, default=d.label_smoothing)
    p.add_argument("--warmup-epochs", type=float, default=d.warmup_epochs)
    p.add_argument("--amp", choices=["auto", "bf16", "fp16", "off"], default=d.amp)
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--shuffle-buffer", type=int, default=d.shuffle_buffer,
                   help="the window of the read plan's shuffle: within a rank's run of samples, sample k is among "
                        "the first k + N (reads stay near-sequential; no bytes are held, shards are memory-mapped)")
    p.add_argument("--log-every", type=int, default=d.log_every)
    p.add_argument("--signal", default=d.signal, help="preemption signal name (as sbatch --signal sends it)")
    p.add_argument("--requeue", action="store_true", help="requeue the SLURM job after a preemption checkpoint")
    p.add_argument("--dist-timeout", type=float, default=d.dist_timeout,
                   help="seconds to wait for peers at start-up and in any collective")
    p.add_argument("--max-steps", type=int, default=0, help="cap steps per epoch (smoke tests)")
    p.add_argument("--tracker", choices=TRACKERS, default=d.tracker,
                   help="also log each epoch, and loss, lr and images/s every --log-every steps, to TensorBoard "
                        "(RUN_DIR/tensorboard) or Weights & Biases (RUN_DIR/wandb; WANDB_MODE=offline without internet), "
                        "from rank 0")
    p.add_argument("--wandb-project", default=d.wandb_project, help="the Weights & Biases project (--tracker wandb)")
    p.add_argument("--max-bad-samples", type=int, default=d.max_bad_samples,
                   help="bad samples (damaged, over the pixel limit, or labelled with no class) are left out, named and "
                        "counted; more than this many in one "
                        "epoch's training or validation (all ranks) stops the run (0: stop at the first)")
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TrainConfig:
    if args.data is None:
        parser.error("--data is required outside a SLURM job (no $SLURM_TMPDIR): the folder prepare wrote")
    for name in ("epochs", "batch_size", "image_size", "shuffle_buffer", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_bad_samples < 0:
        parser.error("--max-bad-samples must be 0 or more")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be at least 1 (or left out: the rank's share of the CPUs, less one)")
    if not hasattr(signal, f"SIG{args.signal.upper().removeprefix('SIG')}"):
        parser.error(f"--signal {args.signal}: no such signal")
    values = {k: v for k, v in vars(args).items()}
    values["data"], values["run_dir"] = str(Path(args.data)), str(Path(args.run_dir))
    return TrainConfig(**values)
