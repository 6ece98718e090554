"""The device a rank of `python -m train` (or the benchmarks) trains on, from --device and the
distributed environment."""

from __future__ import annotations

import torch

from train.accelerators import XPU_TORCH, accelerator_here, device_count, rank_device
from train.cluster import ClusterError, DistEnv


def device_for(env: DistEnv, requested: str | None) -> torch.device:
    """KIND:<local rank mod the visible devices> (with --gpus-per-task: index 0) of the accelerator asked for, or of
    the one this torch build has (torch.accelerator: NVIDIA's and AMD's GPUs are type cuda, Intel's xpu); else cpu."""
    kind = requested or accelerator_here() or "cpu"
    if kind == "cpu":
        return torch.device("cpu")
    count = device_count(kind)
    if count == 0:
        raise ClusterError(missing(kind))
    return rank_device(kind, env.local_rank, count)


def missing(kind: str) -> str:
    """Why --device `kind` cannot be used here, and what to do, in one line."""
    if kind == "xpu":
        return ("--device xpu, but this torch sees no Intel GPU (torch.xpu.is_available() is False): on a node with "
                f"Intel GPUs, install torch's XPU build ({XPU_TORCH}); elsewhere use --device cuda or cpu")
    if torch.version.cuda is None and torch.version.hip is None and getattr(torch.version, "xpu", None):
        return (f"--device {kind}, but this torch is the build for Intel's GPUs ({torch.__version__}: neither CUDA "
                "nor ROCm): on Intel's GPUs use --device xpu (or leave --device out); on NVIDIA's install torch's "
                "CUDA build (pip install torch)")
    if torch.version.cuda is None and torch.version.hip is None:  # a CPU-only build sees no GPU on any node
        return (f"--device {kind}, but this torch is a CPU-only build ({torch.__version__}: neither CUDA nor ROCm): "
                "install torch's CUDA build (pip install torch; ROCm's for AMD's GPUs), or use --device cpu")
    return f"--device {kind}, but no GPU is visible to this task (check --gpus-per-task)"


def idle_devices(env: DistEnv, device: torch.device, count: int) -> str | None:
    """What to say where devices this process sees stay idle: more of them (`count`) than its node has ranks, each
    training on one device (an srun of one task a node on a node of 4 GPUs uses cuda:0 alone); None otherwise. Pure."""
    ranks = env.local_world_size
    if device.type == "cpu" or count <= ranks:
        return None
    srun, torchrun = f"srun --ntasks-per-node={count} --gpus-per-task=1", f"torchrun --nproc-per-node={count}"
    how = {"slurm": srun, "torchrun": torchrun}.get(env.launcher, f"{srun} in a SLURM job, {torchrun} elsewhere")
    where = ("`python -m train` alone is one rank" if env.launcher == "single" else
             f"its node runs {ranks} rank{'s' if ranks > 1 else ''} of the job, one device a rank")
    return (f"{count - ranks} of the {count} {device.type} devices this process sees stay idle: {where}: run one a "
            f"device ({how})")
