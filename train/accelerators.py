"""The accelerator a process trains on, decided through torch's device-generic API: NVIDIA's GPUs ("cuda"), AMD's
(ROCm's torch keeps the type "cuda"), Intel's ("xpu"), or the CPU.

torch.accelerator names the one this torch build can use and counts its devices; torch.distributed maps each
device type to its process group's backend (cpu gloo, cuda nccl, which ROCm's torch routes to RCCL, xpu xccl).
What follows from a device (its backend, pinned host memory, autocast's default dtype) is a pure function of the
device and those tables, so every kind is decided, and tested, on a CPU. What stays NVIDIA's alone, the batched
JPEG decode (`decode="gpu"`: nvImageCodec, nvJPEG), is refused elsewhere in one line (train/device_decode.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

ACCELERATORS = ("cuda", "xpu")  # the device types the training and the library accept beside "cpu"
XPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/xpu"  # torch's build for Intel GPUs


def accelerator_here() -> str | None:
    """The type of the accelerator this torch build can use in this process ("cuda", "xpu"), or None."""
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


def autocast_default(device: torch.device) -> torch.dtype | None:
    """The precision a run takes where none is asked for: bf16 autocast on an accelerator (every one the training
    accepts has it), fp32 on the CPU. Pure."""
    return torch.bfloat16 if device.type != "cpu" else None


def platform(device: torch.device, hip: str | None = None) -> str:
    """The device's platform as the start-up line says it: NVIDIA CUDA, AMD ROCm (torch.version.hip), Intel XPU,
    or the CPU. Pure."""
    if device.type == "cuda":
        return f"AMD ROCm {hip}" if hip else "NVIDIA CUDA"
    return {"xpu": "Intel XPU", "cpu": "CPU"}.get(device.type, device.type)
