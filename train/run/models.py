"""The model a run trains: a torchvision classification model by name, or your own by import path.

    --arch resnet50                         torchvision.models.get_model("resnet50", num_classes=...)
    --arch mymodels.vit:small_vit           mymodels/vit.py's small_vit(num_classes=...), found on
                                            PYTHONPATH or in the current directory
"""

from __future__ import annotations

import importlib
import os
import sys

import torch
import torchvision

from train.errors import ConfigError


def build_model(arch: str, num_classes: int) -> torch.nn.Module:
    """A model with fresh weights for `num_classes` classes; ConfigError saying what to change where
    `arch` names none."""
    if ":" in arch:
        return model_from_import_path(arch, num_classes)
    try:
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    except ValueError:
        names = torchvision.models.list_models(module=torchvision.models)
        raise ConfigError(f"--arch {arch}: not a torchvision classification model (e.g. {', '.join(names[:8])} ...), "
                          "nor an import path package.module:callable") from None


def model_from_import_path(arch: str, num_classes: int) -> torch.nn.Module:
    """`package.module:callable`, called with num_classes=...; the current directory is searched as
    `python -m` searches it, also where the launcher started the run elsewhere."""
    module_name, _, name = arch.partition(":")
    if not module_name or not name:
        raise ConfigError(f"--arch {arch}: an import path is package.module:callable, e.g. mymodels.vit:small_vit")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exn:
        if exn.name == module_name or module_name.startswith(f"{exn.name}."):  # it, not a module it imports
            raise ConfigError(f"--arch {arch}: no module {module_name} on PYTHONPATH or in {os.getcwd()}") from None
        raise
    make = getattr(module, name, None)
    if not callable(make):
        raise ConfigError(f"--arch {arch}: {module_name} has no callable {name}")
    model = make(num_classes=num_classes)
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"--arch {arch}: {name}(num_classes={num_classes}) returned a {type(model).__name__}, "
                          "not a torch.nn.Module")
    return model
