"""Training on prepared ImageNet shards: `python -m train`, and the library it reads its data with.

    from train import ImageNetLoader    # the data path for your own loop (train/imagenet_loader.py)
"""

__all__ = ["ImageNetLoader"]


def __getattr__(name: str):
    # On first use: `python -m train --help` does not wait for torch to import.
    if name == "ImageNetLoader":
        from train.imagenet_loader import ImageNetLoader

        return ImageNetLoader
    raise AttributeError(f"module 'train' has no attribute {name!r}")
