"""Training on prepared ImageNet shards: `python -m train`, and the library it reads its data with.

    from train import ImageNetLoader    # the data path for your own loop (train/imagenet_loader.py)
    from train import Augment, ResolutionRamp  # its recipes: policies, erasing, mixing (train/augment/); progressive resizing
    from train import RealLabels        # ReaL top-1 of val batches (train/real_labels.py)
    from train import eval_transform_arguments  # a timm or torchvision model's eval transform (train/published.py)

and the errors it raises, each one line saying what to do: ConfigError (a setting that cannot
work), DatasetNotReady (no prepared dataset, or a damaged one), DamagedData (more bad samples
than allowed), ResumeError (a state or checkpoint of another run).
"""

import importlib
from typing import TYPE_CHECKING

__all__ = ["ImageNetLoader", "Augment", "ResolutionRamp", "RealLabels", "eval_transform_arguments", "ConfigError",
           "DatasetNotReady", "DamagedData", "ResumeError"]
_HOMES = {"ImageNetLoader": "train.imagenet_loader", "Augment": "train.augment.choices",
          "ResolutionRamp": "train.transforms", "RealLabels": "train.real_labels",
          "eval_transform_arguments": "train.published",
          "ConfigError": "train.errors", "ResumeError": "train.errors",
          "DatasetNotReady": "shards.manifest", "DamagedData": "shards.manifest"}

if TYPE_CHECKING:
    # What type checkers and IDEs see: the real classes (at run time they are imported on first use,
    # below). tests/test_library_settings.py checks that the two lists agree.
    from shards.manifest import DamagedData, DatasetNotReady
    from train.augment.choices import Augment
    from train.errors import ConfigError, ResumeError
    from train.imagenet_loader import ImageNetLoader
    from train.published import eval_transform_arguments
    from train.real_labels import RealLabels
    from train.transforms import ResolutionRamp
else:
    def __getattr__(name: str):
        # On first use: the command line's help does not wait for torch to import. Hidden from type
        # checkers, to whom a module __getattr__ would make every misspelt name valid.
        if name in _HOMES:
            return getattr(importlib.import_module(_HOMES[name]), name)
        raise AttributeError(f"module 'train' has no attribute {name!r}")
