"""Kaggle's imagenet-object-localization-challenge, extracted: ILSVRC/Data/CLS-LOC/{train/<wnid>/, val/} with
LOC_val_solution.csv and LOC_synset_mapping.txt; val flat as downloaded or sorted into <wnid>/ folders
(valprep.sh) (`KaggleTree`). The same read inside the zip is prepare/sources/kaggle_zip.py.
"""

from __future__ import annotations

from pathlib import Path

from prepare.completeness import Declared, Gap
from prepare.labels import parse_kaggle_val_solution, parse_synset_mapping, parse_train_cls
from prepare.sources.base import KAGGLE_DATA, KAGGLE_SYNSETS, KAGGLE_VAL_CSV, Signs, SourceError
from prepare.sources.trees import Folder, Tree, TreeSource, check_folders_agree, missing_keys

NAME = "kaggle"
KAGGLE_TRAIN_LIST = "ILSVRC/ImageSets/CLS-LOC/train_cls.txt"  # every train image, 'wnid/stem n'
EXPECTED = (f"the Kaggle layout: {KAGGLE_DATA}/train/<wnid>/, {KAGGLE_DATA}/val/, {KAGGLE_VAL_CSV}, "
            f"{KAGGLE_SYNSETS}")


class KaggleTree(TreeSource):
    """Kaggle's imagenet-object-localization-challenge, extracted (or, through prepare/sources/zip_tree.py, in
    its zip): LOC_synset_mapping.txt declares the classes, LOC_val_solution.csv the val images and their
    labels, ILSVRC/ImageSets/CLS-LOC/train_cls.txt (where it is there) every train image."""
    layout = "kaggle"
    train_dir, val_dir = f"{KAGGLE_DATA}/train", f"{KAGGLE_DATA}/val"

    def __init__(self, root: Path | Tree):
        tree = Folder(Path(root)) if isinstance(root, (str, Path)) else root
        names = parse_synset_mapping(tree.read_text(KAGGLE_SYNSETS, "the Kaggle layout names its classes there"))
        if not tree.is_file(KAGGLE_VAL_CSV):
            raise SourceError(f"{tree.where(KAGGLE_VAL_CSV)} not found: the Kaggle layout keeps its validation "
                              "labels there")
        super().__init__(tree, names, KAGGLE_SYNSETS)

    def read_val_labels(self) -> tuple[dict[str, str], str]:
        return parse_kaggle_val_solution(self.tree.read_text(KAGGLE_VAL_CSV, "the validation labels")), KAGGLE_VAL_CSV

    def declare_train(self, missing_classes: tuple[str, ...], classes_by: str | None) -> Declared:
        declared = super().declare_train(missing_classes, classes_by)
        if not self.tree.is_file(KAGGLE_TRAIN_LIST):
            return declared
        listed = parse_train_cls(self.tree.read_text(KAGGLE_TRAIN_LIST, "it lists the train images"),
                                 self.tree.where(KAGGLE_TRAIN_LIST))
        rows = self.listing["train"]
        check_folders_agree(rows, listed, KAGGLE_TRAIN_LIST, self.tree)
        gap = Gap("images", len(listed), KAGGLE_TRAIN_LIST, missing_keys(listed, rows, set(missing_classes)))
        return Declared("train", declared.gaps + (gap,), len(listed), KAGGLE_TRAIN_LIST, len(rows))


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

SIGNS = Signs(names=(KAGGLE_DATA.split("/")[0],))


def recognise(root: Path) -> bool:
    return root.is_dir() and (root / KAGGLE_DATA / "train").is_dir()


def identifying_files(root: Path, found: bool) -> list[Path]:
    """None: a tree is identified by its path (see prepare/sources/imagefolder.py)."""
    return []


def open_source(root: Path, found: bool) -> KaggleTree:
    return KaggleTree(root)
