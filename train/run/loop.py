"""The training run, top to bottom: set-up, resume, train_one_epoch, evaluate, checkpoint, preemption.

Every rank runs the same number of steps per epoch by construction (shards.plan), so DDP never
waits at an epoch's end for a rank that has run out of data. Validation runs through the
unwrapped module, so uneven per-rank batch counts issue no collectives.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel

from shards.errors import UserError
from shards.paths import SPLITS, metric_prefix
from shards.manifest import DamagedData, Manifest, read_complete_manifest
from shards.manifest import remove_killed_writes as remove_killed_atomic_writes  # (this module's names the run's)
from shards.plan import seeded_rng, steps_per_epoch
from shards.progress import Progress
from shards.resources import available_cpus, log_pil_build
from train.run.ema import ema_of, update_ema
from train.run.checkpoint import (CHECKPOINT_NAME, Checkpoint, CheckpointUnwritable, checkpoint_path, dataset_of, find_checkpoint,
                                  load_checkpoint, rng_state, save_checkpoint)
from train.cluster import DistEnv, cpu_threads, cpus_short, default_workers, init_distributed
from train.accelerators import autocast_default, autotunes_convolutions, computes_in_bf16, device_count, platform
from train.run.devices import device_for, idle_devices
from train.run.config import (CommandLine, TrainConfig, preemption_signal, settings_problem, warmup_ramps_by_step,
                              warmup_steps, whole_warmup_epochs)
from train.errors import ConfigError
from train.imagenet_loader import ImageNetLoader
from train.loader_arguments import checked_validation
from train.run.metrics import (EVALUATION_SETS, METRICS_NAME, append_metrics, epoch_line, read_metrics,
                               set_aside_records_from, set_aside_torn_record)
from train.run.models import build_model, check_takes
from train.run import run_lock
from train.real_labels import RealLabels
from train.run.settings import (SETTINGS_FILE, describe, record_settings, run_settings, set_aside_unreadable_settings,
                               train_size)
from train.run.flags import show
from train.shard_index import KEY_HASH_BITS
from train.run.trackers import WANDB_ID_NAME, NoTracker, open_tracker, require

log = logging.getLogger("train")
KEY_HASH_MOD = 1 << KEY_HASH_BITS  # epoch sums of key hashes are kept modulo this


@dataclass
class EpochSums:
    """What an epoch accumulates on one rank; saved in mid-epoch checkpoints, all-reduced at the end."""
    loss: float = 0.0  # sum over samples
    correct: int = 0
    samples: int = 0
    key_hash: int = 0  # sum of the key hashes of the samples read, mod KEY_HASH_MOD
    bad_samples: int = 0  # bad samples (damaged, oversized, no class), left out of their batches
    data_wait: float = 0.0  # seconds spent waiting for the loader
    elapsed: float = 0.0  # seconds of the epoch in this process
    steps_here: int = 0  # steps run by this process (images/s excludes those before a resume)
    # (fp16) samples of steps whose loss was NaN or infinite, whose updates the gradient scaler skipped: not in `loss`
    skipped_samples: int = 0


class Preemption:
    """SIGUSR1 (or --signal) and SIGTERM set a flag; ranks agree on it at a step boundary. Ctrl-C (SIGINT)
    too, so that a run stopped by hand resumes exactly; a second Ctrl-C stops at once (KeyboardInterrupt)."""

    def __init__(self, name: str):
        self.requested = False
        self.interrupted = False  # by Ctrl-C: exit 130, as a shell expects, and no requeue
        handlers = {signum: self._handle for signum in {preemption_signal(name), signal.SIGTERM}}
        handlers[signal.SIGINT] = self._interrupt
        self.before = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}

    def restore(self) -> None:
        """The handlers before, back: a run called in-process (a notebook's, a test's) leaves Ctrl-C as it found it."""
        for signum, handler in self.before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum, frame):
        self.requested = True

    def _interrupt(self, signum, frame):
        if self.interrupted:
            signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt
        self.requested = self.interrupted = True


@dataclass(kw_only=True)
class Run:
    """Everything the epoch functions need, built once in `main`."""
    config: TrainConfig
    env: DistEnv
    manifest: Manifest
    device: torch.device
    model: torch.nn.Module  # unwrapped: what evaluate and checkpoints use
    step_model: torch.nn.Module  # DDP-wrapped (and compiled): what training steps use
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    amp_dtype: torch.dtype | None
    steps: int  # per epoch
    batch_size: int  # each rank's: the run's global batch shared by this world (Checkpoint.batch_on)
    train_data: ImageNetLoader  # the public loader; eval_data's share its threads and pinned buffers
    eval_data: dict[str, ImageNetLoader]  # val, then the evaluation sets the dataset has (ImageNetV2)
    real_labels: RealLabels | None  # the val images' ReaL label sets, where prepared
    control: object  # a gloo group for CPU-side agreement (preemption) without device syncs
    preemption: Preemption
    tracker: NoTracker = field(default_factory=NoTracker)  # --tracker's (rank 0): opened where the run resumes
    step_offset: int = 0  # the run's step less its position on this layout (Checkpoint.step_offset)
    ema: AveragedModel | None = None  # --ema: the average of the weights, evaluated and checkpointed too
    # python -m train.evaluate of a checkpoint trained in another class table: its outputs placed on the data's
    outputs_on_data: "ClassPlacement | None" = None
    saved_at: tuple[Path, int, int] | None = None  # the checkpoint this run last wrote or resumed: (path, epoch, step)


# ---------------------------------------------------------------- set-up

def model_on(arch: str, num_classes: int, device: torch.device, channels_last: bool,
             image_size: int | None = None) -> torch.nn.Module:
    """--arch's model with fresh weights (train/run/models.py), on `device`."""
    model = build_model(arch, num_classes, image_size).to(device)
    return model.to(memory_format=torch.channels_last) if channels_last else model


# torchvision's set_weight_decay's norm_classes: a parameter a module of these owns is a norm layer's.
NORM_LAYERS = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm,
               torch.nn.modules.instancenorm._InstanceNorm, torch.nn.LocalResponseNorm)


def exempt_from_decay(model: torch.nn.Module, rule: str) -> list[str]:
    """The names of the parameters --no-decay `rule` spares weight decay, in model.named_parameters() order:
    - norm-and-bias: every 1-d parameter (norm layers' weights and biases, every bias): the classic's;
    - norm: the parameters of norm layers (NORM_LAYERS), as torchvision's set_weight_decay with
      norm_weight_decay=0.0; a convolution's or linear layer's bias is decayed;
    - bn-names: every parameter whose name contains "bn", as FFCV's create_optimizer; its ResNet-50's
      downsample batch norms (named downsample.1) and the fc bias are decayed."""
    if rule == "norm-and-bias":
        return [name for name, p in model.named_parameters() if p.ndim <= 1]
    if rule == "norm":
        owned = {id(p) for module in model.modules() if isinstance(module, NORM_LAYERS)
                 for p in module.parameters(recurse=False)}
        return [name for name, p in model.named_parameters() if id(p) in owned]
    if rule == "bn-names":
        return [name for name, _ in model.named_parameters() if "bn" in name]
    raise ValueError(f"no --no-decay rule {rule!r}: norm-and-bias, norm or bn-names")


def parameter_groups(model: torch.nn.Module, weight_decay: float, no_decay: str = "norm-and-bias") -> list[dict]:
    """Two SGD groups, always in this order (a checkpoint's optimizer state follows it): those decayed
    by `weight_decay`, and those --no-decay `no_decay` spares (exempt_from_decay)."""
    exempt = set(exempt_from_decay(model, no_decay))
    named = list(model.named_parameters())
    return [{"params": [p for name, p in named if name not in exempt], "weight_decay": weight_decay},
            {"params": [p for name, p in named if name in exempt], "weight_decay": 0.0}]


def build_optimizer(model: torch.nn.Module, lr: float, momentum: float, weight_decay: float,
                    nesterov: bool = True, no_decay: str = "norm-and-bias") -> torch.optim.Optimizer:
    """SGD with momentum (Nesterov's by default), no decay on what `no_decay` spares (by default norm
    layers and biases); `lr` is the peak rate."""
    return torch.optim.SGD(parameter_groups(model, weight_decay, no_decay), lr=lr, momentum=momentum,
                           nesterov=nesterov)


def step_module(model: torch.nn.Module, world_size: int, device: torch.device, compile: bool) -> torch.nn.Module:
    """What training steps call: DDP-wrapped across ranks, and compiled if asked."""
    if world_size > 1:
        model = DistributedDataParallel(model, device_ids=[device] if device.type != "cpu" else None)
    return torch.compile(model) if compile else model


def cosine_decay(progress: float) -> float:
    """From 1 at the warm-up's end (progress 0) to 0 at the run's end (progress 1): torch's
    CosineAnnealingLR with eta_min 0, in its closed form."""
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def linear_decay(progress: float) -> float:
    """From 1 at the warm-up's end to 0 at the run's end: FFCV's schedule after its peak."""
    return max(0.0, 1 - progress)


SCHEDULES = {"cosine": cosine_decay, "linear": linear_decay}  # --lr-schedule: after the warm-up


def warmup_then(decay, warmup: float, total: float, start_factor: float = 0.0, at_end: bool = True):
    """The rate's multiplier of unit t (a step, or an epoch), 0-based, of `total`: `warmup` units of a
    linear ramp from `start_factor` to 1, then `decay` of the progress from the ramp's end to the
    run's. Each warm-up unit runs at the ramp's value at its start (at_end False: torch's LinearLR,
    whose first unit is at the start factor, and FFCV's get_lr) or at its end (at_end True: the
    classic's (t + 1) / warmup, so that no step runs at 0 and the last warm-up step is at the peak)."""
    def factor(t: int) -> float:
        if t < warmup:
            return start_factor + (1 - start_factor) * (t + at_end) / warmup
        return decay((t - warmup) / max(1, total - warmup))
    return factor


def warmup_cosine(warmup_steps: int, total_steps: int, start_factor: float = 0.0, at_end: bool = True):
    """Linear warm-up, then cosine decay to 0 (by default the classic's, per step)."""
    return warmup_then(cosine_decay, warmup_steps, total_steps, start_factor, at_end)


def warmup_linear(warmup_steps: int, total_steps: int, start_factor: float = 0.0, at_end: bool = True):
    """Linear warm-up, then linear decay to 0 at the end: FFCV's get_lr with start_factor 1e-4 and
    at_end False, per step (it interpolates per step between its per-epoch rates, which is this line)."""
    return warmup_then(linear_decay, warmup_steps, total_steps, start_factor, at_end)


def lr_factor(lr_schedule: str, warmup_epochs: float, epochs: int, steps: int, start_factor: float = 0.0,
              warmup_at: str = "end", lr_update: str = "step"):
    """The multiplier of the peak rate for each optimizer step (0-based over the run, `steps` an epoch):
    what the run's LambdaLR calls. --lr-update epoch holds it for a whole epoch at the value of the
    epoch's schedule, as torchvision's reference steps LinearLR + CosineAnnealingLR (SequentialLR)
    once an epoch; step changes it every step. The LambdaLR's step count is then its whole state, so
    a checkpoint taken mid-epoch resumes it exactly (torch's own schedulers stepped once an epoch would
    need the loop to step them at epoch ends, and their chained form computes each rate from the last)."""
    decay, at_end = SCHEDULES[lr_schedule], {"start": False, "end": True}[warmup_at]
    if lr_update == "epoch":
        if warmup_ramps_by_step(warmup_epochs, lr_update):
            per_epoch = warmup_then(decay, warmup_epochs, epochs, start_factor, at_end)
            return short_warmup_then_epochs(per_epoch, round(warmup_epochs * steps), steps, start_factor, at_end)
        # whole epochs, as the step path takes whole steps: 1.5 epochs held an epoch each ran epoch 1 at 4/3 of
        # the peak (at the end) or never reached it (at the start)
        per_epoch = warmup_then(decay, whole_warmup_epochs(warmup_epochs), epochs, start_factor, at_end)
        return lambda step: per_epoch(step // steps)
    if lr_update == "step":
        return warmup_then(decay, round(warmup_epochs * steps), epochs * steps, start_factor, at_end)
    raise ValueError(f"no --lr-update {lr_update!r}: step or epoch")


def short_warmup_then_epochs(per_epoch, warmup_steps: int, steps: int, start_factor: float, at_end: bool):
    """The multiplier of each step: the warm-up's linear ramp over its first `warmup_steps` steps, the peak for
    the rest of epoch 0, then each epoch held at `per_epoch`'s value of it."""
    ramp = warmup_then(cosine_decay, warmup_steps, warmup_steps, start_factor, at_end)  # (its decay never used)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return ramp(step)
        return 1.0 if step < steps else per_epoch(step // steps)
    return factor


def amp_dtype_for(amp: str, device: torch.device) -> torch.dtype | None:
    if amp == "auto":
        return autocast_default(device, computes_in_bf16(device))
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[amp]


def build_run(config: TrainConfig, env: DistEnv, manifest: Manifest, device: torch.device, control,
              preemption: Preemption, batch_size: int, model_classes: int | None = None) -> Run:
    """The run on this world, each rank taking `batch_size` samples a step (--batch-size, but where a
    resume on another world size shares the run's global batch out: Checkpoint.batch_on); its model
    with `model_classes` outputs where they are not the data's classes (an evaluation across class tables)."""
    check_every_rank_reads_one_dataset(manifest, env, control)
    if batch_size < 2:  # a resume's share of the run's global batch on more ranks: the step would call it damage
        raise ConfigError(f"{env.world_size} ranks would take {batch_size} sample a step each, and batch norm cannot "
                          f"train on one: resume the run on fewer ranks")
    torch.manual_seed(config.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    if autotunes_convolutions(device):
        torch.backends.cudnn.benchmark = True  # fixed input shapes: pick the fastest convolution once
    model = model_on(config.arch, model_classes or manifest.num_classes, device, config.channels_last,
                     one_image_size(config))
    check_takes(model, config.arch, input_sizes(config), model_classes or manifest.num_classes, device)
    global_batch = batch_size * env.world_size
    steps = steps_per_epoch(manifest.splits["train"].samples, env.world_size, batch_size)
    if steps == 0:
        raise ConfigError(f"{manifest.splits['train'].samples} training samples make no global batch of "
                          f"{global_batch} ({env.world_size} ranks x --batch-size {batch_size}): lower --batch-size")
    if config.max_steps:
        steps = min(steps, config.max_steps)
    optimizer = build_optimizer(model, config.peak_lr(global_batch), config.momentum, config.weight_decay,
                                config.nesterov, config.no_decay)
    schedule = lr_factor(config.lr_schedule, config.warmup_epochs, config.epochs, steps, config.warmup_start_factor,
                         config.warmup_at, config.lr_update)
    amp_dtype = amp_dtype_for(config.amp, device)
    return Run(config=config, env=env, manifest=manifest, device=device, model=model,
               step_model=step_module(model, env.world_size, device, config.compile), optimizer=optimizer,
               scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, schedule),
               scaler=torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16), amp_dtype=amp_dtype,
               steps=steps, batch_size=batch_size, control=control, preemption=preemption, ema=ema_for(model, config, global_batch),
               **build_data(config, env, device, manifest, batch_size))


def input_sizes(config: TrainConfig) -> list[tuple[int, int]]:
    """Every (height, width) the run feeds its model: each training size (a ramp's every one), validation's
    output. Pure."""
    ramp = config.image_size_or_ramp()
    trained = ramp.sizes() if config.ramp is not None else [config.image_size]
    validation = checked_validation(ramp, config.val_crop, config.val_resize, config.val_crop_fraction,
                                    config.val_crop_mode, config.val_interpolation, None)
    return [(size, size) for size in sorted(set(trained))] + [validation.shape]


def one_image_size(config: TrainConfig) -> int | None:
    """The one size a run trains and validates at; None where it has several (a --ramp, a --val-crop of
    another size). Pure."""
    if config.ramp is not None:
        return None
    validation = checked_validation(config.image_size, config.val_crop, config.val_resize, config.val_crop_fraction,
                                    config.val_crop_mode, config.val_interpolation, None)
    return config.image_size if validation.shape == (config.image_size, config.image_size) else None


def ema_for(model: torch.nn.Module, config: TrainConfig, global_batch: int) -> AveragedModel | None:
    """--ema: the average of the weights (train/run/ema.py), updated every --ema-steps."""
    if not config.ema:
        return None
    return ema_of(model, config.ema_decay, config.ema_steps, config.epochs, global_batch)


def build_data(config: TrainConfig, env: DistEnv, device: torch.device, manifest: Manifest, batch_size: int) -> dict:
    """The public loader of the train split, and those of val and the evaluation sets sharing its
    threads and buffers. Bad samples are limited by agreement over the ranks here
    (check_bad_samples), not by each rank. The run's place and threads are the environment's as the
    command line read it (once): the loader reads it again for neither."""
    workers = config.workers if config.workers is not None else default_workers(env, available_cpus())
    train_data = ImageNetLoader(config.data, "train", batch_size=batch_size,
                                image_size=config.image_size_or_ramp(), device=device, seed=config.seed,
                                workers=workers, rank=env.rank, world_size=env.world_size, decode=config.decode,
                                channels_last=config.channels_last, shuffle_buffer=config.shuffle_buffer,
                                max_bad_samples=None, augment=config.augment, repeats=config.repeats,
                                val_crop=config.val_crop, val_resize=config.val_resize,
                                val_crop_fraction=config.val_crop_fraction, val_crop_mode=config.val_crop_mode,
                                val_interpolation=config.val_interpolation)
    evaluated = [split for split in manifest.splits if split != "train"]
    return {"train_data": train_data, "eval_data": {split: train_data.with_split(split) for split in evaluated},
            "real_labels": RealLabels.of(config.data, manifest)}


def check_bad_samples(total: int, limit: int, split: str, last: tuple) -> None:
    """Stop the run, on every rank alike (`total` is summed over ranks), past --max-bad-samples."""
    if total > limit:
        where = f"; the last on this rank: {last[0]} ({last[1]})" if last else "; see the other ranks' warnings"
        raise DamagedData(f"{total} bad {split} samples this epoch, more than --max-bad-samples {limit}"
                          f"{where}. The node's disk or dataset is damaged: run prepare with --verify on this node "
                          "(it finds and rebuilds damaged shards), or raise --max-bad-samples")


# ---------------------------------------------------------------- collectives

def what_ranks_read(manifest: Manifest) -> dict:
    """What every rank's --data (a node's own copy, $SLURM_TMPDIR's) must hold alike: the dataset, its
    evaluation sets, ReaL's labels. Ranks that differ would count other images, or pair their collectives
    with others' (an evaluation set one rank has and another has not)."""
    return {"dataset": manifest.dataset_id(), "evaluation sets": sorted(set(manifest.splits) - set(SPLITS)),
            "ReaL labels": (manifest.real_labels or {}).get("sha256")}


def first_disagreement(read: list[dict], hosts: list[str]) -> str | None:
    """Pure: where a rank's --data holds another dataset than rank 0's (what_ranks_read), the refusal that
    names it; None where they agree."""
    for rank, facts in enumerate(read):
        differ = [name for name in read[0] if facts[name] != read[0][name]]
        if differ:
            return (f"rank {rank} (on {hosts[rank]}) reads another {' and '.join(differ)} at --data than rank 0 (on "
                    f"{hosts[0]}): every rank must read the same dataset. Prepare each node's copy with the same "
                    "command (srun --ntasks-per-node=1 python -m prepare ...), or point --data at the same one")
    return None


def check_every_rank_reads_one_dataset(manifest: Manifest, env: DistEnv, control) -> None:
    """One gather at set-up, before any collective of the run: every rank refuses alike, in one line."""
    if control is None:
        return
    gathered: list = [None] * env.world_size
    dist.all_gather_object(gathered, (what_ranks_read(manifest), socket.gethostname().split(".")[0]), group=control)
    problem = first_disagreement([read for read, _ in gathered], [host for _, host in gathered])
    if problem:
        raise UserError(problem)


def all_reduce(values: list[float], run: Run, op=dist.ReduceOp.SUM) -> list[float]:
    """Sum (or max) a few numbers over ranks through the CPU-side control group."""
    if run.env.world_size == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=op, group=run.control)
    return tensor.tolist()


def all_reduce_int(value: int, run: Run) -> int:
    if run.env.world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, group=run.control)
    return int(tensor.item())


def agree(run: Run, bad_samples: int, tiny_batch: bool) -> tuple[bool, int, bool]:
    """One tiny gloo all-reduce per step, so that every rank decides alike: (has any rank received
    the preemption signal, samples left out this epoch on all ranks, is any rank's batch too small
    to train on)."""
    preempt, bad, tiny = all_reduce([float(run.preemption.requested), bad_samples, float(tiny_batch)], run)
    return preempt > 0, int(bad), tiny > 0


# ---------------------------------------------------------------- train and evaluate

class Diverged(UserError):
    """The run stopped being numbers on some rank: its loss or its weights NaN or infinite, or fp16's gradient scale
    fallen towards 0. Every rank stops alike, before a checkpoint of the ruined weights replaces the last good one
    (DeiT's and MAE's loops stop on a loss that is not finite too)."""


def diverged_ranks(run: Run, finite: torch.Tensor) -> list[int]:
    """The ranks whose `finite` (a bool on the device: are the weights) is False, asked of every rank at the same
    steps, so that all stop together. A device sync and a tiny gloo all-reduce: at the epoch's end, not every step."""
    return list(diverged_steps(run, torch.where(finite, 0, 1)))


def diverged_steps(run: Run, first_bad: torch.Tensor) -> dict[int, int]:
    """{rank: the step its loss first was not finite} of the ranks whose `first_bad` (an int on the device, 0 while
    every loss was finite) is set, asked of every rank at the same steps, so that all stop together. A device sync
    and a tiny gloo all-reduce: every --log-every steps and at the epoch's end, not every step."""
    steps = [0.0] * run.env.world_size
    steps[run.env.rank] = float(first_bad.item())
    return {rank: int(step) for rank, step in enumerate(all_reduce(steps, run)) if step}


def first_not_finite(first_bad: torch.Tensor, loss: torch.Tensor, step: int) -> torch.Tensor:
    """`step` where its `loss` is the first of the epoch not finite, else `first_bad` as it was: on the device, no
    sync. The step is what a divergence names: one rank's NaN gradient, shared by DDP, makes every rank's loss NaN
    at the next step, and the check every --log-every steps would name them all, and no step."""
    return torch.where((first_bad == 0) & ~torch.isfinite(loss), step, first_bad)


def weights_finite(model: torch.nn.Module) -> torch.Tensor:
    """Whether every parameter of `model` is finite: one bool on the device, one sync to read (an epoch's end's, not a
    step's). Not its buffers: BatchNorm's statistics move in the forward, which its loss measures, and a model may
    hold a mask of -inf as one."""
    finite = [torch.isfinite(p).all() for p in model.parameters()]
    return torch.stack(finite).all() if finite else torch.tensor(True)


def divergence(run: Run, first_bad: dict[int, int], epoch: int) -> Diverged:
    """What every rank stops with when the loss diverged in `epoch`: `first_bad`, the step each rank's loss first
    was not finite (diverged_steps), names the first ranks and their step, then the ranks that followed."""
    first = min(first_bad.values())
    ranks = [rank for rank, step in first_bad.items() if step == first]
    later = sorted(rank for rank in first_bad if rank not in ranks)
    then = f", then on {which_ranks(later, 0)} (DDP shares each step's gradients)" if later else ""
    return Diverged(f"the training loss became NaN or infinite on {which_ranks(ranks, run.env.world_size)} in epoch "
                    f"{epoch}, step {first}{then}: the run diverged and stopped, its weights unsaved. "
                    f"{how_to_go_on(run.saved_at, run.config.run_dir, run.amp_dtype == torch.float16)}")


def weights_divergence(run: Run, ranks: list[int], epoch: int, done: int) -> Diverged:
    """What every rank stops with when step `done`'s update, the last before a save, left weights NaN or infinite
    (every loss up to it finite: no loss measured the weights it left)."""
    # (under fp16 a loss that was not finite may have come before: the scaler's to skip, not counted as a divergence)
    when = (f"by the update of step {done}" if run.scaler.is_enabled() else
            f"in the update of step {done}, its loss still finite")
    return Diverged(f"the weights became NaN or infinite on {which_ranks(ranks, run.env.world_size)} in epoch "
                    f"{epoch}, {when}: the run diverged and stopped, its weights unsaved. "
                    f"{how_to_go_on(run.saved_at, run.config.run_dir, run.amp_dtype == torch.float16)}")


# fp16's gradient scaler starts at 2**16 and halves its scale at each step whose gradients overflow (a skipped
# update), growing it again only after 2,000 steps without one: a healthy run stays between about 2**10 and 2**16.
# Below 2**-24, forty halvings past 1, every step has been skipped for dozens of steps in a row, and the scale is on
# its way to 0, where an update turns the weights NaN.
SCALE_FLOOR = 2.0 ** -24


def scale_collapsed(run: Run) -> list[int]:
    """Under fp16, the ranks whose gradient scaler's scale fell below SCALE_FLOOR (the same on every rank: DDP gives
    each the same gradients); [] otherwise. A device sync (get_scale) and the all-reduce of `diverged_ranks`."""
    if not run.scaler.is_enabled():
        return []
    return diverged_ranks(run, torch.tensor(run.scaler.get_scale() >= SCALE_FLOOR))


def scale_divergence(run: Run, ranks: list[int], epoch: int, done: int) -> Diverged:
    """What every rank stops with when the scaler's scale collapsed: fp16 overflows at every step."""
    return Diverged(f"fp16's gradient scaler lowered its scale to {run.scaler.get_scale():.3g} on "
                    f"{which_ranks(ranks, run.env.world_size)} by epoch {epoch} step {done}: the loss or the gradients "
                    "overflowed fp16 at step after step, and each of those updates was skipped (the weights did not "
                    "train); at 0 an update turns them NaN. The run stopped, its weights unsaved. "
                    f"{how_to_go_on(run.saved_at, run.config.run_dir, fp16=True)}")


def how_to_go_on(saved_at: tuple[Path, int, int] | None, run_dir: str, fp16: bool) -> str:
    """From the last checkpoint (`saved_at`: its path, epoch and step), or from the start, with what to change. Pure."""
    if not saved_at:
        return ("No checkpoint was saved before it: start again with a lower --lr, a longer --warmup-epochs"
                f"{', or --amp bf16 where fp16 overflowed' if fp16 else ''}")
    path, epoch, step = saved_at
    again = "auto" if path == checkpoint_path(run_dir) else shlex.quote(str(path))
    # a resume refuses a flag that differs from the checkpoint's without its --force-change: each change says it
    bf16 = ", or bf16 where fp16 overflowed (--amp bf16 --force-change --amp)" if fp16 else ""
    return (f"{path} still holds epoch {epoch} step {step}, before it: resume from it with --resume {again} and a "
            "lower rate (--lr RATE --force-change --lr), a longer warm-up (--warmup-epochs N --force-change "
            f"--warmup-epochs){bf16}")


def which_ranks(ranks: list[int], world_size: int, named: int = 8) -> str:
    """`ranks` in words, a few named (a 512-rank run's line stays a line). Pure."""
    if world_size > 1 and len(ranks) == world_size:
        return "every rank"
    more = f" and {len(ranks) - named} more" if len(ranks) > named else ""
    return f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks[:named]))}{more}"


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, criterion, x: torch.Tensor,
               y: torch.Tensor, *, amp_dtype: torch.dtype | None = None, scaler: torch.amp.GradScaler | None = None,
               scheduler=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on a batch already on the device; returns (loss, logits). The benchmark
    calls it too, with a model and optimiser of its own."""
    with torch.autocast(x.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        logits = model(x)
        loss = criterion(logits, y)
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss, logits


def train_one_epoch(run: Run, epoch: int, sums: EpochSums) -> tuple[int, bool, dict]:
    """Train the epoch from where the train loader stands (a resumed one: mid-epoch) to its end,
    or until preemption. Returns (steps done, preempted, the loader's state after the last step)."""
    run.step_model.train()
    run.train_data.set_epoch(epoch)
    position = run.train_data.state_dict()  # after the steps taken: what a checkpoint saves
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=run.config.label_smoothing)
    step = functools.partial(train_step, run.step_model, run.optimizer, criterion, amp_dtype=run.amp_dtype,
                             scaler=run.scaler, scheduler=run.scheduler)
    loss_sum = torch.zeros((), device=run.device)
    # fp16: a step whose loss overflowed is the gradient scaler's to skip (its update is never applied), not a
    # divergence: counted apart (`skipped`), the epoch's loss without it; the weights are still checked before a save
    scaled = run.scaler.is_enabled()
    skipped = torch.zeros((), dtype=torch.int64, device=run.device)
    first_bad = torch.zeros((), dtype=torch.int64, device=run.device)  # the step this rank's loss first was not finite
    correct = torch.zeros((), dtype=torch.int64, device=run.device)
    done = position_at_start = position["position"]
    progress = Progress(f"epoch {epoch} step", run.steps, "steps", every=run.config.log_every, initial=done,
                        enabled=run.env.is_main)
    preempted, last_bad, checked = False, (), done  # checked: the step the loss was last known finite at
    warm_up = warmup_steps(run.config.warmup_epochs, run.steps, run.config.lr_update)  # the EMA restarts within it
    start, waited_before = time.perf_counter(), run.train_data.counters.data_wait_s
    with progress:
        for batch in run.train_data.batches() if done < run.steps else ():
            x, y, key_hashes, bad = batch.images, batch.labels, batch.key_hashes, batch.bad
            sums.bad_samples += len(bad)
            last_bad = bad[-1] if bad else last_bad
            preempted, bad_total, tiny = agree(run, sums.bad_samples, len(y) < 2)
            check_bad_samples(bad_total, run.config.max_bad_samples, "training", last_bad)
            if tiny:  # batch norm cannot train on one sample: only damage leaves a batch this small
                raise DamagedData(f"a training batch kept fewer than 2 of its {run.batch_size} samples: "
                                  "the dataset is damaged; run prepare with --verify on this node")
            if preempted:
                break  # before the step: the batch is read again on resume
            loss, logits = step(x, y if batch.targets is None else batch.targets)  # MixUp/CutMix: soft targets
            if run.ema is not None:
                warming_up = epoch * run.steps + done < warm_up
                update_ema(run.ema, run.model, done, run.config.ema_steps, warming_up=warming_up)
            loss_sum, skipped = add_loss(loss_sum, skipped, loss.detach().float(), len(y), scaled)
            correct += right_in_top1(logits, y)  # against the true labels, mixed or not
            sums.samples += len(y)
            sums.key_hash = (sums.key_hash + int(key_hashes.sum())) % KEY_HASH_MOD
            done += 1
            if not scaled:  # (fp16's overflow is the scaler's to skip)
                first_bad = first_not_finite(first_bad, loss.detach(), done)
            sums.steps_here += 1
            position = run.train_data.state_dict()
            progress.update(1, lambda: {"loss": f"{loss.item():.4f}", "lr": f"{rate_of_last_step(run.scheduler):.4g}"})
            if done % run.config.log_every == 0:  # loss.item(), isfinite: a device sync, every N steps
                if run.env.is_main:
                    log_step(run, epoch, done, loss.item(), time.perf_counter() - start, done - position_at_start)
                if first := diverged_steps(run, first_bad):
                    raise divergence(run, first, epoch)
                if ranks := scale_collapsed(run):
                    raise scale_divergence(run, ranks, epoch, done)
                checked = done
            if done >= run.steps:
                break
    # before the epoch's save, or preemption's: the losses since the last check, then the weights the last update
    # left, which the save would keep and no loss has measured (a loss measures the weights before its step's update)
    if done > checked and (first := diverged_steps(run, first_bad)):
        raise divergence(run, first, epoch)
    if done > checked and (ranks := scale_collapsed(run)):
        raise scale_divergence(run, ranks, epoch, done)
    if done > position_at_start and (ranks := diverged_ranks(run, weights_finite(run.model))):
        raise weights_divergence(run, ranks, epoch, done)
    if run.device.type != "cpu":
        torch.accelerator.synchronize(run.device)
    sums.loss += loss_sum.item()
    sums.skipped_samples += int(skipped.item())
    sums.correct += int(correct.item())
    sums.elapsed += time.perf_counter() - start
    sums.data_wait += run.train_data.counters.data_wait_s - waited_before
    return done, preempted, position


def add_loss(loss_sum: torch.Tensor, skipped: torch.Tensor, loss: torch.Tensor, samples: int,
             scaled: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A step's loss added to the epoch's sum, on the device (no sync); under a gradient scaler (`scaled`: fp16), a
    loss that is not finite is left out and its samples counted in `skipped`: the scaler skips that step's update."""
    if not scaled:
        return loss_sum + loss * samples, skipped
    finite = torch.isfinite(loss)
    return loss_sum + torch.where(finite, loss, 0.0) * samples, skipped + (~finite) * samples


def right_in_top1(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How many images of a training batch its top-1 got right, on the device (no sync). An image whose outputs are
    not all finite is wrong, as in evaluation: argmax takes NaN for the highest, so fp16's skipped steps (every step
    of an epoch, where the forward overflows) counted their images' label-0 share as right."""
    return ((logits.argmax(1) == labels) & torch.isfinite(logits).all(dim=1)).sum()


def rate_of_last_step(scheduler: torch.optim.lr_scheduler.LambdaLR) -> float:
    """The learning rate the last optimizer step trained with: get_last_lr(), read after scheduler.step(), is the
    next step's (an epoch's record said the next epoch's rate, the run's last 0)."""
    return scheduler.base_lrs[0] * scheduler.lr_lambdas[0](max(scheduler.last_epoch - 1, 0))


def log_step(run: Run, epoch: int, done: int, loss: float, elapsed: float, steps_here: int) -> None:
    """Loss, learning rate and images/s so far this epoch (this rank's x the ranks) to the tracker."""
    images_per_sec = steps_here * run.batch_size * run.env.world_size / max(elapsed, 1e-9)
    run.tracker.log({"train/loss": loss, "train/lr": rate_of_last_step(run.scheduler),
                     "train/images_per_sec": images_per_sec}, run_step(run, epoch, done))


def run_step(run: Run, epoch: int, done: int) -> int:
    """The run's step after `done` steps of `epoch`: the trackers' axis and metrics.jsonl's "step", a count that a
    resume continues (on another global batch too: Checkpoint.step_offset)."""
    return epoch * run.steps + done + run.step_offset


def evaluate_all(run: Run) -> dict | None:
    """The model's metrics on val and each evaluation set, and with --ema the average's too (as ema_val_*); None
    where a rank was asked to stop (preempted) while they were measured."""
    models = [(run.model, "")] + ([(run.ema.module, "ema_")] if run.ema is not None else [])
    if run.env.world_size > 1:
        take_rank_0s_buffers([run.model] + ([run.ema] if run.ema is not None else []), run.control)
    metrics = {}
    for model, prefix in models:
        for split, loader in run.eval_data.items():
            # unwrapped: ranks with fewer batches must not leave a DDP collective waiting
            real = run.real_labels if split == "val" else None
            figures = evaluate(run, model, split, loader, real, prefix)
            if figures is None:
                return None
            metrics |= {f"{prefix}{name}": value for name, value in figures.items()}
    return metrics


@torch.no_grad()
def take_rank_0s_buffers(models: list[torch.nn.Module], control) -> None:
    """Every rank's buffers (BatchNorm's running statistics, the EMA's averages of them) made rank 0's: DDP gives
    each rank rank 0's at the start of a forward, and each rank's own batch then moves its own, so after the last
    step they differ by rank. The checkpoint saves rank 0's: with them, every rank evaluates the model the checkpoint
    holds, and an evaluation on its own (train/run/evaluation.py) gives the run's figures on any number of ranks.
    A buffer on the host (AveragedModel keeps its n_averaged there, beside weights on the GPU) goes through the gloo
    group `control`: NCCL and XCCL, the default group's on a GPU, take device tensors only."""
    for model in models:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0, group=control if buffer.device.type == "cpu" else None)


@torch.no_grad()
def evaluate(run: Run, model: torch.nn.Module, split: str, loader: ImageNetLoader,
             real: RealLabels | None, prefix: str = "") -> dict | None:
    """Top-1/top-5 over every sample of `split` exactly once across ranks (asserted); with `real`,
    ReaL top-1 over the images whose label set is not empty; on val, top-1/top-5 among each class
    subset's classes alone (the manifest's `class_subsets`: ImageNet-22k's val is 12k's, reported as
    val_12k_top1). None where a rank was asked to stop while it measured (`stop_asked`). `prefix`: the record's for
    this model (the EMA's), in what is said of it."""
    model.eval()
    subsets = class_subsets(run.manifest, run.device) if split == "val" else {}
    # loss, top-1, top-5, images, left out, ReaL right, ReaL counted, ranks stopped, images whose outputs were not
    # finite; then each subset's top-1, top-5, images
    sums = torch.zeros(9 + 3 * len(subsets), dtype=torch.float64, device=run.device)
    k = min(5, run.manifest.num_classes)
    left_out, last_bad = 0, ()  # counted on the host: no device sync per batch
    for batch in loader.batches():
        if stop_asked(run):  # the epoch's training is saved first (train_epochs); its evaluation after the resume
            sums[7] = 1
            break
        x, y, bad = batch.images, batch.labels, batch.bad
        left_out += len(bad)
        last_bad = bad[-1] if bad else last_bad
        if not len(y):
            continue
        with torch.autocast(run.device.type, dtype=run.amp_dtype, enabled=run.amp_dtype is not None):
            logits = model(x).float()
        if run.outputs_on_data is not None:
            logits = run.outputs_on_data.place(logits)
        finite = torch.isfinite(logits).all(dim=1)
        top = top_classes(logits, k, finite)
        sums[:3] += torch.stack([F.cross_entropy(logits, y, reduction="sum").double(),
                                 (top[:, 0] == y).sum().double(), (top == y[:, None]).any(dim=1).sum().double()])
        sums[3] += len(y)
        sums[8] += (~finite).sum()
        if real is not None:
            sums[5:7] += torch.stack(real.score(top[:, 0], batch.key_hashes)).double()
        for i, subset in enumerate(subsets.values()):
            sums[9 + 3 * i:12 + 3 * i] += subset.score(logits, y)
    sums[4] = left_out
    if run.env.world_size > 1:  # a rank that stopped early meets the others here: each rank's batches counted once
        dist.all_reduce(sums)
    loss, top1, top5, count, bad, real_right, real_counted, stopped, not_finite = sums[:9].tolist()
    if stopped:
        return None
    check_bad_samples(int(bad), run.config.max_bad_samples, split, last_bad)
    expected = run.manifest.splits[split].samples
    if int(count + bad) != expected:
        raise RuntimeError(f"evaluated {int(count)} {split} images and left out {int(bad)}, the manifest lists "
                           f"{expected}")
    if not_finite and run.env.is_main:
        log.warning("%s%s: the outputs of %d of %d images were NaN or infinite (an evaluation forward that overflows, "
                    "as fp16's can where bf16's does not, or weights that diverged): they count as wrong in its top-1 "
                    "and top-5, and its loss is not finite", prefix, metric_prefix(split), not_finite, count)
    count, p = max(count, 1), metric_prefix(split)
    metrics = {f"{p}_loss": loss / count, f"{p}_top1": 100 * top1 / count, f"{p}_top5": 100 * top5 / count,
               f"{p}_images": int(sums[3]), f"{p}_bad_samples": int(bad)}
    if real is not None:
        metrics |= {"real_top1": 100 * real_right / max(real_counted, 1), "real_images": int(real_counted)}
    for i, name in enumerate(subsets):
        right1, right5, counted = sums[9 + 3 * i:12 + 3 * i].tolist()
        metrics |= {f"{p}_{name}_top1": 100 * right1 / max(counted, 1), f"{p}_{name}_top5": 100 * right5 / max(counted, 1),
                    f"{p}_{name}_images": int(counted)}
    return metrics


def top_classes(logits: torch.Tensor, k: int, finite: torch.Tensor) -> torch.Tensor:
    """Each image's `k` highest-scored classes; an image whose outputs are not all `finite` has none (NaN, which
    torch.topk ranks first, made a class's share of the images its top-1): the index past the last class, which no
    label and no ReaL label set holds."""
    top = logits.topk(k, dim=1).indices
    return torch.where(finite[:, None], top, logits.shape[1])


def stop_asked(run: Run) -> bool:
    """Whether this rank was asked to stop (the preemption signal, Ctrl-C): an evaluation on its own has no
    preemption to answer."""
    return run.preemption is not None and run.preemption.requested


class ClassSubset:
    """A subset of the classes scored on its own: predictions among its classes' logits alone, over the
    images whose label is one of them (the way a 22k model is scored on ImageNet-12k's val)."""

    def __init__(self, indices: list[int], num_classes: int, device: torch.device):
        self.indices = torch.tensor(indices, dtype=torch.long, device=device)
        self.place = torch.full((num_classes,), -1, dtype=torch.long, device=device)  # label -> its place, or -1
        self.place[self.indices] = torch.arange(len(indices), device=device)
        self.k = min(5, len(indices))

    def score(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(top-1 right, top-5 right, images counted) of a batch, on the device: no sync."""
        place = self.place[labels]
        counted = place >= 0
        among = logits[:, self.indices]
        top = among.topk(self.k, dim=1).indices
        right = (top == place[:, None]) & torch.isfinite(among).all(dim=1, keepdim=True)  # NaN is no prediction
        return torch.stack([(right[:, 0] & counted).sum(), (right.any(dim=1) & counted).sum(), counted.sum()]).double()


class ClassPlacement:
    """A model's outputs placed on the data's classes, where the model was trained in another class table the
    data's nests with (the manifest's `class_maps`): output `model_columns[i]` is data class `data_columns[i]`.
    A data class the model lacks gets a logit LACKING below the batch's lowest finite one (no probability: never in its
    top-5, an image of it is counted wrong, its loss finite); a model class the data lacks is left out (the
    model is scored among the data's classes, as a subset is)."""
    LACKING = 1e4

    def __init__(self, model_columns: list[int], data_columns: list[int], data_classes: int, device: torch.device):
        self.model_columns = torch.tensor(model_columns, dtype=torch.long, device=device)
        self.data_columns = torch.tensor(data_columns, dtype=torch.long, device=device)
        self.data_classes = data_classes

    def place(self, logits: torch.Tensor) -> torch.Tensor:
        lowest = logits.where(logits.isfinite(), float("inf")).amin()  # an image's NaN left the others' finite
        placed = logits.new_full((len(logits), self.data_classes), -self.LACKING) + lowest
        placed[:, self.data_columns] = logits[:, self.model_columns]
        return placed


def class_subsets(manifest: Manifest, device: torch.device) -> dict[str, ClassSubset]:
    return {name: ClassSubset(indices, manifest.num_classes, device) for name, indices in manifest.class_subsets.items()}


# ---------------------------------------------------------------- checkpoints

def gather_rank_states(run: Run, sums: EpochSums) -> list[dict]:
    """Every rank's RNG state and epoch sums, so a resumed epoch continues each rank exactly."""
    mine = {"rng": rng_state(run.device), "sums": asdict(sums)}
    if run.env.world_size == 1:
        return [mine]
    states = [None] * run.env.world_size
    dist.all_gather_object(states, mine, group=run.control)
    return states


def tidy_run_dir(config: TrainConfig, changes: list, start_epoch: int, start_step: int, resumed: bool = True) -> None:
    """Rank 0, as the run starts (`resumed` False) or resumes: its settings recorded in config.json, and what an
    earlier start left set aside or removed (a config.json that does not read, the forced changes and the records past
    the checkpoint, a torn record, a killed write's temporary file)."""
    if unreadable := set_aside_unreadable_settings(config.run_dir):  # before it is written again
        log.warning("%s", unreadable)
    if gone := record_settings(config.run_dir, config, changes, start_epoch, start_step, resumed):
        forced = ", ".join(f"--force-change {c.get('flag')} (to {show(c.get('to'))})" if isinstance(c, dict) else
                           repr(c) for c in gone)  # (a hand edit's entry, whatever it is)
        log.warning("%s: %s, recorded by %s, which this run does not carry: moved to its \"superseded\"",
                    Path(config.run_dir) / SETTINGS_FILE, forced,
                    "the start past this run's checkpoint (an older last.pt put back?)" if resumed else
                    "an earlier run whose last.pt is not here")
    if torn := set_aside_torn_record(config.run_dir):  # before this run appends a record to it
        log.warning("%s", torn)
    if superseded := set_aside_records_from(config.run_dir, start_epoch):
        log.warning("%s", superseded)
    if killed := remove_killed_writes(config.run_dir):
        log.warning("%s: removed %s, left by a write a kill stopped before its rename", config.run_dir,
                    ", ".join(killed))


def share_rank_zeros_problem(run: Run, problem: str) -> None:
    """Rank 0's problem with the run directory (or ""), which the others wait for: every rank stops alike, in
    its line, rather than some going on into a collective rank 0 never reaches."""
    if run.env.world_size > 1:
        said = [problem]
        dist.broadcast_object_list(said, src=0, group=run.control)
        problem = said[0]
    if problem:
        raise UserError(problem)


def save(run: Run, epoch: int, step: int, sums: EpochSums, loader: dict | None = None, problem: str = "") -> None:
    """Collective (every rank contributes its state); rank 0 writes; all wait until it is on disk.
    `loader`: the train loader's state (the same on every rank) after `step` steps, or at an epoch's end
    (`epoch_over`): what the run's layout is, for a resume on another world size. `problem`: rank 0's, where
    the epoch's record could not be written: no checkpoint then (the resume trains the epoch again), and
    every rank stops with it, as with a checkpoint that does not fit."""
    ranks = gather_rank_states(run, sums)
    if run.env.is_main and not problem:
        path = checkpoint_path(run.config.run_dir)
        try:
            save_checkpoint(path, Checkpoint(
                model=run.model.state_dict(), optimizer=run.optimizer.state_dict(),
                scheduler=run.scheduler.state_dict(), scaler=run.scaler.state_dict(), epoch=epoch, step=step,
                world_size=run.env.world_size, ranks=ranks, config=run.config.to_dict(), loader=loader,
                ema=run.ema.state_dict() if run.ema is not None else None, dataset=dataset_of(run.manifest),
                global_step=run_step(run, epoch, step)))
            log.info("checkpoint: epoch %d step %d -> %s", epoch, step, path)
        except CheckpointUnwritable as exn:
            problem = str(exn)
    share_rank_zeros_problem(run, problem)
    run.saved_at = (checkpoint_path(run.config.run_dir), epoch, step)  # every rank's, as rank 0 wrote it


def remove_killed_writes(run_dir: str | Path) -> list[str]:
    """The temporary files of the run directory's atomic writes that a kill stopped before their rename (a
    checkpoint's as large as the checkpoint, one a kill, on storage with a quota), removed; their names."""
    return remove_killed_atomic_writes(Path(run_dir), (CHECKPOINT_NAME, SETTINGS_FILE, METRICS_NAME, WANDB_ID_NAME))


def figures_gone(records: list[dict], record: dict) -> list[str]:
    """The evaluation sets' figures (ReaL's, ImageNetV2's) the run's last record has and this epoch's lacks: a
    resumed run whose --data lacks a set it evaluated on. Pure."""
    if not records:
        return []
    return [name for name, _ in EVALUATION_SETS if name in records[-1] and name not in record]


def appended(run_dir: str, record: dict) -> str:
    """The epoch's record appended to metrics.jsonl; where it cannot be (a full file system, a quota), why, in
    the line every rank stops with (`save`), else ""."""
    try:
        append_metrics(run_dir, record)
    except OSError as exn:
        return (f"cannot append epoch {record['epoch']}'s record to {Path(run_dir) / METRICS_NAME} "
                f"({exn.strerror or exn}): is its file system full, or over its quota? Make room, then resume "
                "(--resume auto): the epoch is trained again from the last checkpoint")
    return ""


def epoch_over(state: dict, batches: int) -> dict:
    """The train loader's state with its epoch of `batches` over, as a checkpoint at the epoch's end keeps it
    (an epoch of --max-steps stopped early, and is over too): it loads into any world size. Pure."""
    return {**state, "position": max(state["position"], batches)}


def requeue_job(job_id: str | None) -> None:
    if not job_id:
        log.warning("--requeue outside SLURM: nothing to requeue; resume with --resume auto")
        return
    # A requeue that works cancels this very job step: SLURM may kill this process, and scontrol with it, before
    # either returns. So it is said before, and scontrol's end judged by `requeue_failure`.
    log.info("requeueing SLURM job %s; it resumes from the checkpoint when it starts again", job_id)
    result = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
    failure = requeue_failure(job_id, result.returncode, result.stderr)
    if failure:
        log.error("%s", failure)


def requeue_failure(job_id: str, returncode: int, stderr: str) -> str | None:
    """What to say when `scontrol requeue` failed; None when it worked, or was killed by a signal (the
    requeue cancelling the step it ran in: it worked). Pure."""
    if returncode <= 0:
        return None
    return (f"scontrol requeue {job_id} failed (exit {returncode}: {stderr.strip() or 'no message'}): the job ends "
            "here; submit it again with --resume auto to continue from the checkpoint")


# ---------------------------------------------------------------- the run

def epoch_record(run: Run, epoch: int, done: int, sums: EpochSums, val: dict, resumed_at: int) -> dict:
    """Everything a rank accumulated, all-reduced, as one metrics.jsonl line."""
    counters = [run.train_data.counters] + [loader.counters for loader in run.eval_data.values()]
    pil_fallbacks, seeked = sum(c.pil_fallbacks for c in counters), sum(c.seeked_images for c in counters)
    loss, correct, samples, wait, elapsed, bad, pil, device, seeked, skipped = all_reduce(
        [sums.loss, sums.correct, sums.samples, sums.data_wait, sums.elapsed, sums.bad_samples, pil_fallbacks,
         run.train_data.device_decode_fallbacks, seeked, sums.skipped_samples], run)
    world = run.env.world_size
    images_here = sums.steps_here * run.batch_size * world
    mean_elapsed = elapsed / world
    return {"epoch": epoch, "step": run_step(run, epoch + 1, 0), "steps": done, "resumed_at_step": resumed_at,
            "train_loss": loss / (samples - skipped) if samples > skipped else math.nan,
            "train_top1": 100 * correct / samples, "train_images": int(samples), "train_skipped_images": int(skipped),
            "bad_samples": int(bad), "pil_fallbacks": int(pil), "device_decode_fallbacks": int(device),
            "seeked_images": int(seeked),
            "train_key_hash": all_reduce_int(sums.key_hash, run) % KEY_HASH_MOD, **val,
            "images_per_sec": images_here / mean_elapsed, "images_per_sec_per_gpu": images_here / mean_elapsed / world,
            "data_wait_fraction": wait / elapsed, "epoch_time_s": mean_elapsed, "lr": rate_of_last_step(run.scheduler),
            "world_size": world, "batch_size": run.batch_size, "image_size": train_size(run.config, epoch)}


def skipped_line(record: dict) -> str:
    """What rank 0 says of an epoch some of whose steps the gradient scaler skipped (fp16). Pure."""
    skipped, images = record["train_skipped_images"], record["train_images"]
    return (f"epoch {record['epoch']}: {skipped} of its {images} training images were in steps whose loss was NaN or "
            "infinite in fp16, and the gradient scaler skipped those steps' updates (the weights stay finite; "
            "train_loss leaves them out). Now and then is fp16's overflow; many, epoch after epoch, is a model that "
            "does not fit in fp16: resume with --amp bf16 --force-change --amp where the device has bf16, or a "
            "lower --lr")


def checked_already(command: CommandLine, config: TrainConfig) -> bool:
    """Whether the settings that will run are those the command line checked: a new run's, unless fitted
    to the data since. A resume's are known only now (the checkpoint's), and are checked here. Pure."""
    return command.config.resume is None and config == replace(command.config, dataset_id=config.dataset_id)


def main(command: CommandLine, env: DistEnv) -> int:
    config = command.config
    manifest = read_complete_manifest(Path(config.data))  # before the rendezvous: fail fast, by name
    config = replace(config, dataset_id=manifest.dataset_id())
    device = device_for(env, config.device)
    claim = run_lock.take(Path(config.run_dir)) if env.is_main else run_lock.Claim()
    refused, preemption = claim.refused, None
    try:
        control = join_ranks(env, device, config.dist_timeout, run_lock.rendezvous_wait(config.dist_timeout))
        if control is not None:
            said = [refused]
            dist.broadcast_object_list(said, src=0, group=control)  # rank 0's verdict on the run directory
            refused = said[0]
        if refused:
            raise run_lock.RunDirInUse(refused)
        preemption = Preemption(config.signal)
        return train_in(config, command, env, manifest, device, control, preemption)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        run_lock.let_go(claim, Path(config.run_dir))
        if preemption is not None:  # after the teardown, which a requeue's SIGTERM may meet
            preemption.restore()


def train_in(config: TrainConfig, command: CommandLine, env: DistEnv, manifest: Manifest, device: torch.device,
             control, preemption: Preemption) -> int:
    """The run, its run directory held: its settings (a resume's from the checkpoint, read only now that no
    other training writes it), then the loaders, the model and the epochs."""
    found = checkpoint_to_resume(config)  # its settings are the run's: read before anything is built
    checkpoint = found.checkpoint if found else None
    saved, epoch, step = ((TrainConfig.from_dict(checkpoint.config), checkpoint.epoch, checkpoint.step)
                          if checkpoint else (None, 0, 0))
    settings = run_settings(command, config, saved, epoch, manifest.splits["train"].samples, env.world_size, step)
    config, changes, notes = settings.config, settings.changes, settings.notes
    problem = None if checked_already(command, config) else settings_problem(config, settings.meant, settings.origin)
    if problem:
        raise ConfigError(problem)
    require(config.tracker)
    torch.set_num_threads(cpu_threads(env, available_cpus()))
    if env.launcher == "single" and env.job_tasks > 1:
        log.warning("SLURM_NTASKS=%d but this process is not an srun step: training as ONE process. "
                    "Run it as `srun python -m train` to use every task.", env.job_tasks)
    idle = idle_devices(env, device, device_count(device.type)) if env.is_main else None
    if idle:
        log.warning("%s", idle)
    if env.is_main and (short := cpus_short(env, len(os.sched_getaffinity(0)))):
        log.warning("%s", short)
    if env.is_main:
        log_pil_build(log)
        log.info("%s: %d ranks (%s launcher), device %s (%s), %d train / %d val samples, %d classes", config.arch,
                 env.world_size, env.launcher, device, platform(device, torch.version.hip),
                 manifest.splits["train"].samples,
                 manifest.splits["val"].samples, manifest.num_classes)
    # a resume on another world size keeps the run's global batch (refused mid-epoch where it cannot)
    batch_size = found.checkpoint.batch_on(env.world_size) if found else config.batch_size
    run = None
    try:
        run = build_run(config, env, manifest, device, control, preemption, batch_size)
        if env.is_main:
            say_settings(run, notes, changes, found.checkpoint if found is not None else None)
            log.info("%s", run.train_data.describe())
        return train(run, found, changes)
    finally:
        close_data(run)


def join_ranks(env: DistEnv, device: torch.device, timeout_s: float, rendezvous_s: float):
    """The rendezvous of a run of several ranks (within `rendezvous_s`, which is also the device's collectives'
    timeout), and its gloo group for CPU-side agreement (Run.control, within `timeout_s`); None for one rank."""
    if env.world_size == 1:
        return None
    init_distributed(env, device, rendezvous_s)
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


def close_data(run: Run | None) -> None:
    """The run's loaders closed (their threads and pinned buffers let go), where it got as far as making them."""
    if run is not None:
        for loader in run.eval_data.values():
            loader.close()
        run.train_data.close()


@dataclass(frozen=True)
class Found:
    """The checkpoint --resume found, and where."""
    path: Path
    checkpoint: Checkpoint


def checkpoint_to_resume(config: TrainConfig) -> Found | None:
    """The checkpoint --resume finds, loaded (once: its settings decide how the run is built), or None."""
    path = find_checkpoint(config.run_dir, config.resume)
    return None if path is None else Found(path, load_checkpoint(path))


def say_settings(run: Run, notes: tuple[str, ...], changes: list, resumed: Checkpoint | None) -> None:
    """Rank 0 logs the settings in force, and what replaced a recipe's or a checkpoint's."""
    config, loader = run.config, run.train_data
    precision = {torch.bfloat16: "bf16 autocast", torch.float16: "fp16 autocast with a GradScaler",
                 None: "fp32"}[run.amp_dtype] + f" (--amp {config.amp})"
    for line in (*notes, *describe(config, run.env.world_size, loader.validation.describe(), precision,
                                   run.batch_size, run.steps)):
        log.info("%s", line)
    batch_norm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in run.model.modules())
    for line in resumed.layout_change(run.env.world_size, batch_norm) if resumed is not None else ():
        log.warning("%s", line)
    for change in changes:
        log.warning("--force-change: %s on resume (recorded in %s)", change.line(), SETTINGS_FILE)
    saved = TrainConfig.from_dict(resumed.config) if resumed is not None else config
    if saved.decode != config.decode:
        log.warning("--decode %s where the checkpoint's run decoded with --decode %s: the pixels differ slightly "
                    "(another JPEG decoder), so the resumed run is not bit-identical to one that was not",
                    config.decode, saved.decode)


def resume(run: Run, found: Found | None) -> tuple[int, int, EpochSums]:
    """(epoch, step, this rank's sums) to start from: the checkpoint's, where --resume found one, else
    the beginning; mid-epoch, the train loader continues where the checkpoint's stopped. The read
    plan does not depend on the thread count: any --workers resumes."""
    if found is None:
        if run.env.is_main and run.config.resume == "auto":  # a first start, or a run directory emptied since
            log.info("--resume auto: no checkpoint in %s: a new run", run.config.run_dir)
        return 0, 0, EpochSums()
    checkpoint = found.checkpoint
    checkpoint.check_resumable(run.config, dataset_of(run.manifest))
    sums = checkpoint.restore(run.model, run.optimizer, run.scheduler, run.scaler, run.env.rank, run.device,
                              ema=run.ema, world_size=run.env.world_size)
    follow_settings(run, checkpoint.epoch, checkpoint.step)
    run.step_offset = checkpoint.step_offset(run.steps)
    # where it stopped, or the run's layout
    state = checkpoint.loader_to_load(run.env.world_size, run.batch_size, run.config.shuffle_buffer)
    if state is not None:
        run.train_data.load_state_dict(state)
    run.saved_at = (found.path, checkpoint.epoch, checkpoint.step)
    if run.env.is_main:
        log.info("resumed from %s at epoch %d step %d", found.path, checkpoint.epoch, checkpoint.step)
    return checkpoint.epoch, checkpoint.step, EpochSums(**sums)


def follow_settings(run: Run, epoch: int, step: int) -> None:
    """After a restore, the optimizer and the schedule follow this run's settings, not the checkpoint's:
    the same values unless --force-change changed one (the rate, momentum, decay, Nesterov, --epochs) or
    an epoch boundary meets another world size (the peak follows the global batch, the schedule's
    position the steps an epoch). Without a change every value is the one the checkpoint holds."""
    config, scheduler = run.config, run.scheduler
    peak = config.peak_lr(run.batch_size * run.env.world_size)
    for group, decay in zip(run.optimizer.param_groups, (config.weight_decay, 0.0)):  # parameter_groups' order
        group.update(initial_lr=peak, momentum=config.momentum, weight_decay=decay, nesterov=config.nesterov)
    scheduler.base_lrs = [peak] * len(run.optimizer.param_groups)
    scheduler.last_epoch = epoch * run.steps + step  # steps taken: what LambdaLR's step count stands for
    rates = [peak * factor(scheduler.last_epoch) for factor in scheduler.lr_lambdas]  # LambdaLR's get_lr
    for group, rate in zip(run.optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = rates  # what get_last_lr() reports (metrics' lr): torch keeps it there


def train(run: Run, found: Found | None, changes: list) -> int:
    config = run.config
    start_epoch, start_step, sums = resume(run, found)
    problem = ""
    if run.env.is_main:  # after the resume was accepted: config.json holds only settings that ran
        try:
            tidy_run_dir(config, changes, start_epoch, start_step, resumed=found is not None)
        except OSError as exn:
            problem = (f"cannot write the run directory {config.run_dir} ({exn.strerror or exn}): is its file system "
                       "full, or over its quota? Nothing was trained: make room, then run the same command again")
    share_rank_zeros_problem(run, problem)
    if start_epoch >= config.epochs and run.env.is_main:
        log.info("the run in %s already finished %d epochs", config.run_dir, config.epochs)
    run.tracker = open_tracker(config.tracker, config.run_dir, is_main=run.env.is_main,
                               resumed_step=run_step(run, start_epoch, start_step), project=config.wandb_project,
                               config=config.to_dict(), resumed=found is not None)
    try:
        return train_epochs(run, start_epoch, start_step, sums)
    finally:
        run.tracker.close()


def train_epochs(run: Run, start_epoch: int, start_step: int, sums: EpochSums) -> int:
    config = run.config
    for epoch in range(start_epoch, config.epochs):
        if start_step == 0:
            torch.manual_seed(seeded_rng(config.seed, "train", epoch, run.env.rank).getrandbits(63))
        done, preempted, position = train_one_epoch(run, epoch, sums)
        val = None if preempted else evaluate_all(run)
        if val is None:  # asked to stop while training or evaluating: a resume trains what is left, then evaluates
            save(run, epoch, done, sums, loader=position)
            by_hand = run.preemption.interrupted
            if run.env.is_main:
                log.info("%s at epoch %d step %d/%d; resume with --resume auto",
                         "stopped by Ctrl-C, the checkpoint saved," if by_hand else "preempted", epoch, done, run.steps)
                if config.requeue and not by_hand:
                    requeue_job(run.env.job_id)
            return 130 if by_hand else 0
        record = epoch_record(run, epoch, done, sums, val, start_step)
        problem = ""
        if run.env.is_main:  # metrics before the checkpoint: a kill in between leaves a line the resume sets aside
            if gone := figures_gone(read_metrics(config.run_dir), record):
                log.warning("%s: the run reported %s until epoch %d; %s lacks %s now (a node-local copy staged "
                            "again without its --eval-source or --real-labels?): prepare it with them to report them "
                            "again", config.run_dir, ", ".join(gone), epoch - 1, config.data,
                            "that evaluation set" if len(gone) == 1 else "those evaluation sets")
            problem = appended(config.run_dir, record)
            if not problem:
                run.tracker.log({f"epoch/{name}": value for name, value in record.items()}, record["step"])
                log.info("%s", epoch_line(record))
                if record["train_skipped_images"]:
                    log.warning("%s", skipped_line(record))
        save(run, epoch + 1, 0, EpochSums(), loader=epoch_over(position, len(run.train_data)), problem=problem)
        start_step, sums = 0, EpochSums()
    return 0
