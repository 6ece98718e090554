"""The device a rank of `python -m train` (or the benchmarks) trains on, from --device and the
distributed environment."""

from __future__ import annotations

import torch

from train.cluster import ClusterError, DistEnv


def device_for(env: DistEnv, requested: str | None) -> torch.device:
    """cuda:<local rank mod visible GPUs> when CUDA is there (with --gpus-per-task: cuda:0), else cpu."""
    kind = requested or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ClusterError("--device cuda, but no GPU is visible to this task (check --gpus-per-task)")
        return torch.device("cuda", env.local_rank % torch.cuda.device_count())
    return torch.device(kind)
