"""ImageNet as image files: the extracted tree and Kaggle's layout, on disk or inside Kaggle's zip.

- imagefolder: train/<wnid>/*.JPEG, and val/<wnid>/*.JPEG or a flat val/ with the devkit beside
               (`ImageFolderTree`).
- kaggle:      ILSVRC/Data/CLS-LOC/{train/<wnid>/, val/} with LOC_val_solution.csv and LOC_synset_mapping.txt;
               val flat as downloaded or sorted into <wnid>/ folders (valprep.sh) (`KaggleTree`).
- kaggle-zip:  the same inside imagenet-object-localization-challenge.zip, read in place (prepare/zip_tree.py).

A layout sees its files through a `Tree`: a folder on disk (`Folder`) or a zip's members (`ZipTree`).
Listing, labels and declarations are the same either way, so a zip prepares into the bytes of the
tree it extracts to. Every layout declares what it can: the classes (the devkit, LOC_synset_mapping.txt),
the val images (the devkit's ground truth, LOC_val_solution.csv), the train images (the devkit's counts,
Kaggle's ImageSets/CLS-LOC/train_cls.txt); what is missing is named before anything is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from prepare.completeness import Declared, Gap
from prepare.labels import (
    Devkit, LabelError, builtin_class_names, check_val_labels, class_table, devkit_train_count, leaf_synsets,
    parse_kaggle_val_solution, parse_synset_mapping, parse_train_cls, read_devkit, val_wnids_from_devkit, WNID,
)
from prepare.sources import (
    DEVKIT, KAGGLE_DATA, KAGGLE_SYNSETS, KAGGLE_VAL_CSV, Part, Source, SourceError, decoded_text, estimate_bytes,
    file_chunks, list_images, readable_file,
)
from prepare.zip_tree import KAGGLE_ZIP, kaggle_zip, open_kaggle_zip

KAGGLE_TRAIN_LIST = "ILSVRC/ImageSets/CLS-LOC/train_cls.txt"  # every train image, 'wnid/stem n'

Row = tuple[str, str, Any]  # (key, wnid, where the image is: a path, or a zip member)


class Tree(Protocol):
    """Files under one root, named by paths relative to it ("" is the root, "/" separates)."""
    root: Path  # the folder, or the zip

    def where(self, rel: str) -> str:
        """The path for messages."""

    def is_dir(self, rel: str) -> bool: ...

    def is_file(self, rel: str) -> bool: ...

    def folders(self, rel: str) -> list[str]:
        """The names of the folders directly in `rel`, sorted."""

    def images(self, rel: str) -> list[tuple[str, Any]]:
        """(key, where) of the images directly in `rel`, sorted by key; other files are left out."""

    def name_of(self, where: Any) -> str:
        """An image's `where` for messages: its path, or ZIP:MEMBER."""

    def read_text(self, rel: str, why: str) -> str:
        """A small file's text; SourceError saying `why` it is needed where it is not there."""

    def parts(self, rows: list[Row]) -> list[Part]:
        """The rows as parts, in order: consecutive files that a worker reads on its own."""


def join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


class Folder:
    """A tree on disk."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def where(self, rel: str) -> str:
        return str(self.path(rel))

    def is_dir(self, rel: str) -> bool:
        return self.path(rel).is_dir()

    def is_file(self, rel: str) -> bool:
        return self.path(rel).is_file()

    def folders(self, rel: str) -> list[str]:
        return sorted(p.name for p in self.path(rel).iterdir() if p.is_dir())

    def images(self, rel: str) -> list[tuple[str, str]]:
        return list_images(self.path(rel))

    def name_of(self, where: str) -> str:
        return where

    def read_text(self, rel: str, why: str) -> str:
        path = readable_file(self.path(rel), why)
        try:
            return decoded_text(path.read_bytes(), str(path))
        except OSError as exn:
            raise SourceError(f"cannot read {path}: {exn.strerror or exn}") from None

    def parts(self, rows: list[Row]) -> list[Part]:
        return file_chunks(rows, estimate_bytes([path for _, _, path in rows]))


# ---------------------------------------------------------------- listing

def list_class_tree(tree: Tree, rel: str) -> list[Row]:
    """(key, wnid, where) for <rel>/<wnid>/<image>, sorted; other folders are ignored."""
    if not tree.is_dir(rel):
        raise SourceError(f"{tree.where(rel)} not found: the split's images are expected there")
    listed = []
    for wnid in (name for name in tree.folders(rel) if WNID.match(name)):
        listed.extend((key, wnid, where) for key, where in tree.images(join(rel, wnid)))
    if not listed:
        raise SourceError(f"{tree.where(rel)} holds no <wnid>/ folders with images")
    return listed


def labelled_images(tree: Tree, rel: str, labels: dict[str, str], labels_file: str) -> list[Row]:
    """The images directly in `rel`, labelled by `labels` (key -> wnid): every one must have a label."""
    rows = []
    for key, where in tree.images(rel):
        if key not in labels:
            raise LabelError(f"{tree.name_of(where)}: no label for {key} in {labels_file}")
        rows.append((key, labels[key], where))
    return rows


def check_folders_agree(rows: list[Row], labels: dict[str, str], labels_file: str, tree: Tree) -> None:
    """Images sorted into <wnid>/ folders (val after valprep.sh, train): each image's folder must be
    the class `labels_file` gives it."""
    for key, wnid, where in rows:
        if labels.get(key) != wnid:
            said = f"says {labels[key]}" if key in labels else "does not list it"
            raise LabelError(f"{tree.name_of(where)}: in the folder {wnid}/, but {labels_file} {said}: the folders "
                             "and the list do not belong together (files of another download mixed in?)")


def missing_keys(listed: dict[str, str], rows: list[Row], skip_wnids: set[str] = frozenset()) -> tuple[str, ...]:
    """The listed keys not among `rows` (those of the classes in `skip_wnids` left out: their whole
    folder is missing, which names them), sorted."""
    found = {key for key, _, _ in rows}
    return tuple(sorted(key for key, wnid in listed.items() if key not in found and wnid not in skip_wnids))


# ---------------------------------------------------------------- the layouts

class TreeSource(Source):
    """Images as files: train/<wnid>/ folders, and val/ flat with a label list or in <wnid>/ folders.
    `classes_by` names what lists the classes (then they are the class table, and a folder missing is
    named); without it, the train folders found are the classes."""
    train_dir: str
    val_dir: str

    def __init__(self, tree: Tree, names: dict[str, str], classes_by: str | None):
        self.tree, self.root = tree, tree.root
        train = list_class_tree(tree, self.train_dir)
        found = {wnid for _, wnid, _ in train}
        declared = set(names) if classes_by else found
        unknown = sorted(found - declared)
        if unknown:
            raise SourceError(f"{tree.where(join(self.train_dir, unknown[0]))}/ is not a class {classes_by} lists "
                              f"({len(unknown)} such folders): the tree and {classes_by} do not belong together")
        self.classes = class_table(declared, names)
        self.val_labels, self.val_labels_by = self.read_val_labels()
        self.listing = {"train": train, "val": self.list_val()}
        check_val_labels({key: wnid for key, wnid, _ in self.listing["val"]}, self.classes)
        missing_classes = tuple(sorted(declared - found))
        self._declared = {"train": self.declare_train(missing_classes, classes_by), "val": self.declare_val()}
        self._parts = {split: tree.parts(rows) for split, rows in self.listing.items()}

    def read_val_labels(self) -> tuple[dict[str, str] | None, str | None]:
        """(val key -> wnid, the file that says so), or (None, None) where the layout has none."""
        return None, None

    def flat_val_without_labels(self) -> SourceError:
        """The error for a flat val/ where the layout has no labels for it."""
        return SourceError(f"{self.tree.where(self.val_dir)} holds images without <wnid>/ folders and no labels")

    def list_val(self) -> list[Row]:
        """val/<wnid>/ folders (checked against the labels where there are some), or a flat val/
        labelled by them."""
        tree, rel, labels = self.tree, self.val_dir, self.val_labels
        if not tree.is_dir(rel):
            raise SourceError(f"{tree.where(rel)} not found: the validation images are expected there")
        sorted_into = [name for name in tree.folders(rel) if WNID.match(name)]
        loose = tree.images(rel)
        if sorted_into and loose:
            raise SourceError(f"{tree.where(rel)} holds {len(loose)} images beside {len(sorted_into)} <wnid>/ folders: "
                              "sort all of them into <wnid>/ folders (valprep.sh) or none")
        if sorted_into:
            rows = list_class_tree(tree, rel)
            if labels is not None:
                check_folders_agree(rows, labels, self.val_labels_by, tree)
            return rows
        if labels is None:
            raise self.flat_val_without_labels()
        return labelled_images(tree, rel, labels, self.val_labels_by)

    def declare_train(self, missing_classes: tuple[str, ...], classes_by: str | None) -> Declared:
        gaps = ()
        if classes_by:
            gaps = (Gap("class folders", len(self.classes), classes_by,
                        tuple(f"{self.train_dir}/{wnid}/" for wnid in missing_classes)),)
        return Declared("train", gaps, found=len(self.listing["train"]))

    def declare_val(self) -> Declared:
        rows, labels = self.listing["val"], self.val_labels
        if labels is None:
            return Declared("val", found=len(rows))
        gap = Gap("images", len(labels), self.val_labels_by, missing_keys(labels, rows))
        return Declared("val", (gap,), len(labels), self.val_labels_by, len(rows))

    def declared(self, split: str) -> Declared:
        return self._declared[split]

    def parts(self, split: str) -> list[Part]:
        return list(self._parts[split])

    def split_bytes(self, split: str) -> int:
        return sum(part.size for part in self._parts[split])

    def val_keys(self) -> set[str]:
        return {key for key, _, _ in self.listing["val"]}

    def estimated_count(self, split: str) -> int:
        return len(self.listing[split])


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
        return SourceError(f"{self.tree.where(self.val_dir)} holds images without <wnid>/ folders: put {DEVKIT} in "
                           f"{self.root} so that their labels can be read, or sort them into val/<wnid>/")

    def declare_train(self, missing_classes: tuple[str, ...], classes_by: str | None) -> Declared:
        declared = super().declare_train(missing_classes, classes_by)
        count = devkit_train_count(self.devkit) if self.devkit else None
        if count is None:
            return declared
        return Declared("train", declared.gaps, count, "the devkit's meta.mat", declared.found)


class KaggleTree(TreeSource):
    """Kaggle's imagenet-object-localization-challenge, extracted (or, through prepare/zip_tree.py, in
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


class KaggleZip(KaggleTree):
    """Kaggle's download as it comes, imagenet-object-localization-challenge.zip, read in place."""
    layout = "kaggle-zip"

    def __init__(self, root: Path):
        path = kaggle_zip(root)
        if path is None:
            raise SourceError(f"{root} holds no {KAGGLE_ZIP}")
        super().__init__(open_kaggle_zip(path, KAGGLE_SYNSETS))
