"""The device types `python -m train` and the library accept, as torch names them, and what each one's torch
offers beyond the device-generic API: a table of names alone, without torch, which the command lines' device
choices read (their parsers answer a user without importing torch) and train/accelerators.py decides from."""

from __future__ import annotations

# NVIDIA's GPUs and AMD's (ROCm's torch keeps NVIDIA's type name), Intel's
ACCELERATORS = ("cuda", "xpu")
DEVICE_TYPES = (*ACCELERATORS, "cpu")  # every type, the CPU last

# The start-up line's name for each type's platform; AMD's GPUs under ROCm's torch have NVIDIA's type, told apart by
# torch.version.hip
PLATFORMS = {"cuda": "NVIDIA CUDA", "xpu": "Intel XPU", "cpu": "CPU"}
ROCM_TYPE, ROCM = "cuda", "AMD ROCm"

# The compute capability from which NVIDIA's GPUs compute in bf16 (Ampere, 8.0: its tensor cores, and cuDNN's bf16
# convolutions, without which torch convolves by its own slow kernels); AMD's under ROCm's torch and Intel's have no
# such numbering, and compute in it
BF16_FROM_CAPABILITY = {"cuda": 8}

# Types whose convolutions torch.backends.cudnn.benchmark autotunes for fixed shapes: cuDNN's on NVIDIA's GPUs and
# MIOpen's on AMD's (ROCm's torch routes the flag there); Intel's oneDNN has no such search.
AUTOTUNED_CONVOLUTIONS = ("cuda",)

# The environment variable that chooses (and renumbers) the devices a process sees, for each type
VISIBLE_DEVICES = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}
