"""The training run, top to bottom: set-up, resume, train_one_epoch, evaluate, checkpoint, preemption.

Every rank runs the same number of steps per epoch by construction (shards.plan), so DDP never
waits at an epoch's end for a rank that has run out of data. Validation runs through the
unwrapped module, so uneven per-rank batch counts issue no collectives.
"""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

from shards.manifest import Manifest, read_complete_manifest
from shards.plan import seeded_rng, steps_per_epoch
from shards.resources import available_cpus, log_pil_build
from train.checkpoint import check_resumable, checkpoint_path, find_checkpoint, load_checkpoint, save_checkpoint
from train.cluster import DistEnv, cpu_threads, device_for, dist_env, init_distributed
from train.config import TrainConfig
from train.data import KEY_HASH_BITS, DeviceBatches, PlanArgs, PlannedShards, make_loader
from train.metrics import StepProgress, append_metrics, epoch_line
from train.transforms import TrainCrop, TrainTransform, ValCrop, ValTransform

log = logging.getLogger("train")
KEY_HASH_MOD = 1 << KEY_HASH_BITS  # epoch sums of key hashes are kept modulo this


@dataclass
class EpochSums:
    """What an epoch accumulates on one rank; saved in mid-epoch checkpoints, all-reduced at the end."""
    loss: float = 0.0  # sum over samples
    correct: int = 0
    samples: int = 0
    key_hash: int = 0  # sum of the key hashes of the samples read, mod KEY_HASH_MOD
    data_wait: float = 0.0  # seconds spent waiting for the loader
    elapsed: float = 0.0  # seconds of the epoch in this process
    steps_here: int = 0  # steps run by this process (images/s excludes those before a resume)


class Preemption:
    """SIGUSR1 (or --signal) and SIGTERM set a flag; ranks agree on it at a step boundary."""

    def __init__(self, name: str):
        self.requested = False
        for signum in {getattr(signal, "SIG" + name.upper().removeprefix("SIG")), signal.SIGTERM}:
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame):
        self.requested = True


@dataclass
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
    control: object  # a gloo group for CPU-side agreement (preemption) without device syncs
    preemption: Preemption


# ---------------------------------------------------------------- set-up

def build_model(arch: str, num_classes: int) -> torch.nn.Module:
    try:
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    except ValueError:
        names = torchvision.models.list_models(module=torchvision.models)
        raise ValueError(f"--arch {arch}: not a torchvision classification model; e.g. {', '.join(names[:8])} ...") from None


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on norm layers' weights and on biases (all 1-d parameters)."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(warmup_steps: int, total_steps: int):
    """LR multiplier per optimizer step: linear warm-up to 1, then cosine decay to 0."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return factor


def amp_dtype_for(amp: str, device: torch.device) -> torch.dtype | None:
    if amp == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[amp]


def build_run(config: TrainConfig, env: DistEnv, manifest: Manifest, device: torch.device, control,
              preemption: Preemption) -> Run:
    torch.manual_seed(config.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input shapes: pick the fastest convolution once
    model = build_model(config.arch, manifest.num_classes).to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    global_batch = config.batch_size * env.world_size
    steps = steps_per_epoch(manifest.splits["train"].samples, env.world_size, config.batch_size)
    if steps == 0:
        raise ValueError(f"{manifest.splits['train'].samples} training samples make no global batch of "
                         f"{global_batch} ({env.world_size} ranks x --batch-size {config.batch_size}): lower --batch-size")
    if config.max_steps:
        steps = min(steps, config.max_steps)
    optimizer = torch.optim.SGD(parameter_groups(model, config.weight_decay), lr=config.lr * global_batch / 256,
                                momentum=config.momentum, nesterov=True)
    schedule = warmup_cosine(round(config.warmup_epochs * steps), config.epochs * steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    amp_dtype = amp_dtype_for(config.amp, device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    step_model = model
    if env.world_size > 1:
        step_model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if config.compile:
        step_model = torch.compile(step_model)
    return Run(config, env, manifest, device, model, step_model, optimizer, scheduler, scaler, amp_dtype, steps,
               control, preemption)


def loader_for(run: Run, split: str, epoch: int, start_step: int, workers: int):
    c = run.config
    shards = run.manifest.splits[split].shards
    args = PlanArgs(split, [s.samples for s in shards], epoch, c.seed, run.env.world_size, run.env.rank, workers,
                    c.batch_size, c.shuffle_buffer, start_step)
    if split == "train":
        transform = (TrainCrop if c.decode == "gpu" else TrainTransform)(c.image_size, c.seed)
    else:
        transform = (ValCrop if c.decode == "gpu" else ValTransform)(c.image_size)
    dataset = PlannedShards([Path(c.data) / s.name for s in shards], args, transform)
    return make_loader(dataset, c.batch_size, workers, pin_memory=run.device.type == "cuda")


# ---------------------------------------------------------------- collectives

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


def agree_to_stop(run: Run) -> bool:
    """True on every rank if any rank received the preemption signal (one tiny gloo all-reduce)."""
    return all_reduce([float(run.preemption.requested)], run, op=dist.ReduceOp.MAX)[0] > 0


# ---------------------------------------------------------------- train and evaluate

def train_step(run: Run, criterion, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on a batch already on the device; returns (loss, logits)."""
    with torch.autocast(run.device.type, dtype=run.amp_dtype, enabled=run.amp_dtype is not None):
        logits = run.step_model(x)
        loss = criterion(logits, y)
    run.optimizer.zero_grad(set_to_none=True)
    run.scaler.scale(loss).backward()
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.scheduler.step()
    return loss, logits


def train_one_epoch(run: Run, epoch: int, start_step: int, sums: EpochSums, workers: int) -> tuple[int, bool]:
    """Train from `start_step` to the end of the epoch, or until preemption. Returns (steps done, preempted)."""
    run.step_model.train()
    loader = loader_for(run, "train", epoch, start_step, workers)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=run.config.label_smoothing)
    loss_sum = torch.zeros((), device=run.device)
    correct = torch.zeros((), dtype=torch.int64, device=run.device)
    progress = StepProgress(run.env.is_main, epoch, start_step, run.steps, run.config.log_every)
    done, preempted = start_step, False
    start = fetch_start = time.perf_counter()
    with DeviceBatches(loader, run.device, run.config.channels_last) as batches:
        for x, y, key_hashes in batches:
            sums.data_wait += time.perf_counter() - fetch_start
            loss, logits = train_step(run, criterion, x, y)
            loss_sum += loss.detach().float() * len(y)
            correct += (logits.argmax(1) == y).sum()
            sums.samples += len(y)
            sums.key_hash = (sums.key_hash + int(key_hashes.sum())) % KEY_HASH_MOD
            done += 1
            sums.steps_here += 1
            progress.update(done, lambda: {"loss": f"{loss.item():.4f}", "lr": f"{run.scheduler.get_last_lr()[0]:.4f}"})
            if done >= run.steps:
                break
            if agree_to_stop(run):
                preempted = True
                break
            fetch_start = time.perf_counter()
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    progress.close()
    sums.loss += loss_sum.item()
    sums.correct += int(correct.item())
    sums.elapsed += time.perf_counter() - start
    return done, preempted


@torch.no_grad()
def evaluate(run: Run, workers: int) -> dict:
    """Top-1/top-5 over every validation sample exactly once across ranks (asserted)."""
    model = run.model  # unwrapped: ranks with fewer batches must not leave a DDP collective waiting
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=run.device)  # loss, top-1, top-5, images
    k = min(5, run.manifest.num_classes)
    with DeviceBatches(loader_for(run, "val", 0, 0, workers), run.device, run.config.channels_last) as batches:
        for x, y, _ in batches:
            with torch.autocast(run.device.type, dtype=run.amp_dtype, enabled=run.amp_dtype is not None):
                logits = model(x).float()
            top = logits.topk(k, dim=1).indices
            sums[:3] += torch.stack([F.cross_entropy(logits, y, reduction="sum").double(),
                                     (top[:, 0] == y).sum().double(), (top == y[:, None]).any(dim=1).sum().double()])
            sums[3] += len(y)
    if run.env.world_size > 1:
        dist.all_reduce(sums)
    loss, top1, top5, count = sums.tolist()
    expected = run.manifest.splits["val"].samples
    if int(count) != expected:
        raise RuntimeError(f"evaluated {int(count)} validation images, the manifest lists {expected}")
    return {"val_loss": loss / count, "val_top1": 100 * top1 / count, "val_top5": 100 * top5 / count,
            "val_images": int(count)}


# ---------------------------------------------------------------- checkpoints

def rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def gather_rank_states(run: Run, sums: EpochSums) -> list[dict]:
    """Every rank's RNG state and epoch sums, so a resumed epoch continues each rank exactly."""
    mine = {"rng": rng_state(run.device), "sums": asdict(sums)}
    if run.env.world_size == 1:
        return [mine]
    states = [None] * run.env.world_size
    dist.all_gather_object(states, mine, group=run.control)
    return states


def save(run: Run, epoch: int, step: int, sums: EpochSums, workers: int) -> None:
    """Collective (every rank contributes its state); rank 0 writes; all wait until it is on disk."""
    ranks = gather_rank_states(run, sums)
    if run.env.is_main:
        state = {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
                 "scheduler": run.scheduler.state_dict(), "scaler": run.scaler.state_dict(),
                 "epoch": epoch, "step": step, "world_size": run.env.world_size, "num_workers": workers,
                 "ranks": ranks, "config": run.config.to_dict()}
        save_checkpoint(checkpoint_path(run.config.run_dir), state)
        log.info("checkpoint: epoch %d step %d -> %s", epoch, step, checkpoint_path(run.config.run_dir))
    if run.env.world_size > 1:
        dist.barrier(group=run.control)


def restore(run: Run, state: dict) -> tuple[int, int, EpochSums, int]:
    """Load a checkpoint into the run; returns (epoch, step, sums, workers of that epoch)."""
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.scaler.load_state_dict(state["scaler"])
    epoch, step = state["epoch"], state["step"]
    mine = state["ranks"][run.env.rank] if step > 0 else {"sums": {}}
    if step > 0:
        set_rng_state(mine["rng"], run.device)
    return epoch, step, EpochSums(**mine["sums"]), state["num_workers"]


def requeue_job() -> None:
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        log.warning("--requeue outside SLURM: nothing to requeue; resume with --resume auto")
        return
    result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if result.returncode:
        log.error("scontrol requeue %s failed: %s", job, result.stderr.strip())
    else:
        log.info("requeued SLURM job %s; it resumes from the checkpoint when it starts again", job)


# ---------------------------------------------------------------- the run

def epoch_record(run: Run, epoch: int, done: int, sums: EpochSums, val: dict, resumed_at: int) -> dict:
    """Everything a rank accumulated, all-reduced, as one metrics.jsonl line."""
    loss, correct, samples, wait, elapsed = all_reduce(
        [sums.loss, sums.correct, sums.samples, sums.data_wait, sums.elapsed], run)
    world = run.env.world_size
    images_here = sums.steps_here * run.config.batch_size * world
    mean_elapsed = elapsed / world
    return {"epoch": epoch, "step": (epoch + 1) * run.steps, "steps": done, "resumed_at_step": resumed_at,
            "train_loss": loss / samples, "train_top1": 100 * correct / samples, "train_images": int(samples),
            "train_key_hash": all_reduce_int(sums.key_hash, run) % KEY_HASH_MOD, **val,
            "images_per_sec": images_here / mean_elapsed, "images_per_sec_per_gpu": images_here / mean_elapsed / world,
            "data_wait_fraction": wait / elapsed, "epoch_time_s": mean_elapsed, "lr": run.scheduler.get_last_lr()[0],
            "world_size": world, "batch_size": run.config.batch_size}


def main(config: TrainConfig) -> int:
    env = dist_env(os.environ)
    manifest = read_complete_manifest(Path(config.data))  # before the rendezvous: fail fast, by name
    device = device_for(env, config.device)
    torch.set_num_threads(cpu_threads(env, available_cpus(), os.environ))
    config = replace(config, dataset_id=manifest.dataset_id())
    preemption = Preemption(config.signal)  # before loader workers fork: they inherit the harmless handler
    if env.launcher == "single" and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        log.warning("SLURM_NTASKS=%s but this process is not an srun step: training as ONE process. "
                    "Run it as `srun python -m train` to use every task.", os.environ["SLURM_NTASKS"])
    if env.is_main:
        log_pil_build(log)
        log.info("%s: %d ranks (%s launcher), device %s, %d train / %d val samples, %d classes", config.arch,
                 env.world_size, env.launcher, device, manifest.splits["train"].samples,
                 manifest.splits["val"].samples, manifest.num_classes)
    control = None
    if env.world_size > 1:
        init_distributed(env, device, config.dist_timeout)
        control = dist.new_group(backend="gloo", timeout=timedelta(seconds=config.dist_timeout))
    try:
        run = build_run(config, env, manifest, device, control, preemption)
        return train(run)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def train(run: Run) -> int:
    config = run.config
    start_epoch, start_step, sums, workers = 0, 0, EpochSums(), config.workers
    checkpoint = find_checkpoint(config.run_dir, config.resume)
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        check_resumable(state, config, run.env.world_size)
        start_epoch, start_step, sums, saved_workers = restore(run, state)
        if start_step > 0:
            workers = saved_workers  # the epoch's plan depends on it: finish the epoch with the same count
        if run.env.is_main:
            log.info("resumed from %s at epoch %d step %d", checkpoint, start_epoch, start_step)
    if start_epoch >= config.epochs and run.env.is_main:
        log.info("the run in %s already finished %d epochs", config.run_dir, config.epochs)
    for epoch in range(start_epoch, config.epochs):
        if start_step == 0:
            torch.manual_seed(seeded_rng(config.seed, "train", epoch, run.env.rank).getrandbits(63))
        done, preempted = train_one_epoch(run, epoch, start_step, sums, workers)
        if preempted:
            save(run, epoch, done, sums, workers)
            if run.env.is_main:
                log.info("preempted at epoch %d step %d/%d; resume with --resume auto", epoch, done, run.steps)
                if config.requeue:
                    requeue_job()
            return 0
        record = epoch_record(run, epoch, done, sums, evaluate(run, config.workers), start_step)
        if run.env.is_main:  # metrics before the checkpoint: a kill in between repeats a line, loses none
            append_metrics(config.run_dir, record)
            log.info("%s", epoch_line(record))
        save(run, epoch + 1, 0, EpochSums(), config.workers)
        start_step, sums, workers = 0, EpochSums(), config.workers
    return 0
