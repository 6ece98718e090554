"""Training on prepared ImageNet shards: `python -m train`, and the library it reads its data with.

    from train import ImageNetLoader    # the data path for your own loop (train/imagenet_loader.py)
    from train import Augment, ResolutionRamp  # its recipes: policies, erasing, mixing; progressive resizing
    from train import RealLabels        # ReaL top-1 of val batches (train/real_labels.py)

and the errors it raises, each one line saying what to do: ConfigError (a setting that cannot
work), DatasetNotReady (no prepared dataset, or a damaged one), DamagedData (more bad samples
than allowed), ResumeError (a state or checkpoint of another run).
"""

import importlib

__all__ = ["ImageNetLoader", "Augment", "ResolutionRamp", "RealLabels", "ConfigError", "DatasetNotReady", "DamagedData",
           "ResumeError"]
_HOMES = {"ImageNetLoader": "train.imagenet_loader", "Augment": "train.policies", "ResolutionRamp": "train.transforms",
          "RealLabels": "train.real_labels",
          "ConfigError": "train.config", "ResumeError": "train.config",
          "DatasetNotReady": "shards.manifest", "DamagedData": "shards.manifest"}


def __getattr__(name: str):
    # On first use: `python -m train --help` does not wait for torch to import.
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'train' has no attribute {name!r}")
