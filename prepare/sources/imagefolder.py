"""An extracted tree on disk: train/<wnid>/*.JPEG, and val/<wnid>/*.JPEG or a flat val/ with the devkit
beside (`ImageFolderTree`). Listing and declarations are prepare/sources/trees.py's, shared with Kaggle's layouts.
"""

from __future__ import annotations

from pathlib import Path

from prepare.completeness import Declared
from prepare.labels import (
    Devkit, WNID, builtin_class_names, devkit_train_count, leaf_synsets, parse_synset_mapping, read_devkit,
    val_wnids_from_devkit,
)
from prepare.sources.base import DEVKIT, KAGGLE_DATA, KAGGLE_SYNSETS, KAGGLE_VAL_CSV, Signs, SourceError
from prepare.sources.trees import Folder, TreeSource

NAME = "imagefolder"
EXPECTED = "an extracted tree: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG"

IMAGENET_1K_TABLE = "ImageNet-1k's class table"
MOSTLY = 0.9  # of ImageNet-1k's classes: a tree holding this many of them is taken for ImageNet-1k with some missing


def mostly_imagenet_1k(folders: list[str]) -> bool:
    """Whether a tree's train folders are ImageNet-1k's classes, nearly all of them: then a missing one
    is a gap in the download, not a subset (ImageNet-100 and the like stay as they are). Pure."""
    known = builtin_class_names()
    wnids = {name for name in folders if WNID.match(name)}
    return bool(wnids) and wnids <= known.keys() and len(wnids) >= MOSTLY * len(known)


class ImageFolderTree(TreeSource):
    """train/<wnid>/ and val/ on disk. The devkit beside, where it is, declares the classes, their train
    counts and the val labels; else LOC_synset_mapping.txt the classes; else, where the train folders are
    nearly all of ImageNet-1k's classes, the built-in table (so a missing class never shifts the labels)."""
    layout = "imagefolder"
    train_dir, val_dir = "train", "val"

    def __init__(self, root: Path):
        tree = Folder(root)
        self.devkit: Devkit | None = read_devkit(root / DEVKIT) if tree.is_file(DEVKIT) else None
        if self.devkit:
            names, by = {s.wnid: s.words for s in leaf_synsets(self.devkit.synsets)}, "the devkit's meta.mat"
        elif tree.is_file(KAGGLE_SYNSETS):
            names, by = parse_synset_mapping(tree.read_text(KAGGLE_SYNSETS, "it names the classes")), KAGGLE_SYNSETS
        elif mostly_imagenet_1k(tree.folders(self.train_dir) if tree.is_dir(self.train_dir) else []):
            names, by = builtin_class_names(), IMAGENET_1K_TABLE
        else:
            names, by = {}, None
        super().__init__(tree, names, by)

    def read_val_labels(self) -> tuple[dict[str, str] | None, str | None]:
        if self.devkit is None:
            return None, None
        return val_wnids_from_devkit(self.devkit), "the devkit's ground truth"

    def flat_val_without_labels(self) -> SourceError:
        kaggle = kaggle_root_above(self.root)
        if kaggle is not None:  # --source given as Kaggle's ILSVRC/Data/CLS-LOC: its labels are three folders up
            return SourceError(f"{self.root} is the image folder of Kaggle's download, whose val labels are in "
                               f"{kaggle / KAGGLE_VAL_CSV}: pass --source {kaggle}")
        return SourceError(f"{self.tree.where(self.val_dir)} holds images without <wnid>/ folders: put {DEVKIT} in "
                           f"{self.root} so that their labels can be read, or sort them into val/<wnid>/")

    def declare_train(self, missing_classes: tuple[str, ...], classes_by: str | None) -> Declared:
        declared = super().declare_train(missing_classes, classes_by)
        count = devkit_train_count(self.devkit) if self.devkit else None
        if count is None:
            return declared
        return Declared("train", declared.gaps, count, "the devkit's meta.mat", declared.found)


def kaggle_root_above(root: Path) -> Path | None:
    """The folder of Kaggle's download where `root` is its ILSVRC/Data/CLS-LOC; None elsewhere."""
    root = root.resolve()
    above = root.parents[2] if len(root.parents) > 2 else None
    return above if above is not None and root == above / KAGGLE_DATA and (above / KAGGLE_VAL_CSV).is_file() else None


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

SIGNS = Signs(names=("train",))


def recognise(root: Path) -> bool:
    return root.is_dir() and (root / "train").is_dir()


def identifying_files(root: Path, found: bool) -> list[Path]:
    """None: listing 1.3 M files would make an idempotent rerun take minutes on shared storage (a tree
    is identified by its path)."""
    return []


def open_source(root: Path, found: bool) -> ImageFolderTree:
    return ImageFolderTree(root)
