"""The accelerator a process trains on, decided through torch's device-generic API: NVIDIA's GPUs (type cuda), AMD's
(ROCm's torch keeps that type), Intel's (xpu), or the CPU. The types' names and what each one's torch offers beyond
the generic API lie in one table, train/device_types.py; everything here decides from it.

torch.accelerator names the one this torch build can use and counts its devices; torch.distributed maps each
device type to its process group's backend (cpu gloo, cuda nccl, which ROCm's torch routes to RCCL, xpu xccl).
What follows from a device (its backend, pinned host memory, autocast's default dtype) is a pure function of the
device and those tables, so every kind is decided, and tested, on a CPU. What stays NVIDIA's alone, the batched
JPEG decode (`decode="gpu"`: nvImageCodec, nvJPEG), is refused elsewhere in one line (train/device_decode.py).
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.distributed as dist

from train.device_types import ACCELERATORS, AUTOTUNED_CONVOLUTIONS, BF16_FROM_CAPABILITY, PLATFORMS, ROCM, ROCM_TYPE

XPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/xpu"  # torch's build for Intel GPUs


def accelerator_here() -> str | None:
    """The type of the accelerator this torch build can use in this process (cuda, xpu), or None."""
    found = torch.accelerator.current_accelerator(check_available=True)
    return None if found is None else found.type


def device_count(kind: str) -> int:
    """How many devices of `kind` this process sees (0 where this torch build has no such accelerator)."""
    return torch.accelerator.device_count() if kind != "cpu" and accelerator_here() == kind else 0


def rank_device(kind: str, local_rank: int, count: int) -> torch.device:
    """A rank's device: KIND:<local rank mod the devices it sees> (one device a task, as --gpus-per-task gives:
    index 0), or the CPU. Pure."""
    return torch.device("cpu") if kind == "cpu" else torch.device(kind, local_rank % count)


def backend_for(device: torch.device) -> str:
    """The process group's backend for `device`: torch's own map (gloo for a type it does not list). Pure."""
    return dist.Backend.default_device_backend_map.get(device.type, "gloo")


def pins_memory(device: torch.device) -> bool:
    """Whether batches bound for `device` are staged in pinned host memory (copied without blocking). Pure."""
    return device.type != "cpu"


def autocast_default(device: torch.device, bf16: bool = True) -> torch.dtype | None:
    """The precision a run takes where none is asked for: bf16 autocast on an accelerator that computes in it
    (`bf16`: computes_in_bf16), fp16 (with a GradScaler) on one that does not (NVIDIA's before Ampere: V100, T4),
    fp32 on the CPU. Pure."""
    if device.type == "cpu":
        return None
    return torch.bfloat16 if bf16 else torch.float16


def computes_in_bf16(device: torch.device) -> bool:
    """Whether `device` computes in bf16 at its speed: NVIDIA's GPUs from compute capability 8 (Ampere); a V100 or
    T4 takes bf16 tensors, and torch's autocast lets it, but its convolutions then run in torch's own im2col kernels,
    cuDNN's bf16 ones needing Ampere: slower than fp32. AMD's (ROCm's torch) and Intel's: yes."""
    least = BF16_FROM_CAPABILITY.get(device.type)
    if least is None or torch.version.hip:
        return True
    return torch.get_device_module(device.type).get_device_capability(device)[0] >= least


def platform(device: torch.device, hip: str | None = None) -> str:
    """The device's platform as the start-up line says it: NVIDIA CUDA, AMD ROCm (`hip`: torch.version.hip, set
    by ROCm's torch, whose GPUs keep NVIDIA's type), Intel XPU, or the CPU. Pure."""
    if hip and device.type == ROCM_TYPE:
        return f"{ROCM} {hip}"
    return PLATFORMS.get(device.type, device.type)


def streams_of(device: torch.device) -> ModuleType | None:
    """torch's module for the device's accelerator (torch.cuda, torch.xpu: each has Stream, Event, stream(),
    current_stream() and synchronize() alike), through which the batches' side stream and the timings'
    synchronisation work on every accelerator; None for the CPU, which has no streams. Pure."""
    return None if device.type not in ACCELERATORS else torch.get_device_module(device.type)


def autotunes_convolutions(device: torch.device) -> bool:
    """Whether the training sets torch.backends.cudnn.benchmark for `device` (its fixed input shapes: the fastest
    convolution picked once, by cuDNN on NVIDIA's GPUs, MIOpen on AMD's). Pure."""
    return device.type in AUTOTUNED_CONVOLUTIONS
