"""The exponential moving average of the weights that a recipe evaluates and checkpoints beside them
(--ema): torch's AveragedModel over parameters and buffers, its decay and its updates as torchvision's
classification reference keeps them."""

from __future__ import annotations

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def ema_of(model: torch.nn.Module, decay: float, every: int, epochs: int, global_batch: int) -> AveragedModel:
    """torch's AveragedModel with an exponential average of parameters and buffers, its decay per
    update adjusted to the global batch, the steps between updates (`every`) and the run's `epochs`
    as torchvision's reference adjusts --model-ema-decay (so one value serves any batch and length)."""
    adjust = global_batch * every / epochs
    alpha = min(1.0, (1.0 - decay) * adjust)
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(1.0 - alpha), use_buffers=True)


def update_ema(ema: AveragedModel, model: torch.nn.Module, index: int, every: int, warming_up: bool) -> None:
    """After the step of batch `index` (0-based) of the epoch, every `every` batches, as torchvision's
    reference does it; during the warm-up epochs (`warming_up`) the average restarts at each update,
    so that it follows the weights until the warm-up ends."""
    if index % every:
        return
    ema.update_parameters(model)
    if warming_up:
        ema.n_averaged.fill_(0)
