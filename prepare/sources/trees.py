"""ImageNet as image files, the machinery the tree layouts share (prepare/sources/imagefolder.py,
kaggle.py, kaggle_zip.py): a layout sees its files through a `Tree`, a folder on disk (`Folder`) or a
zip's members (prepare/sources/zip_tree.py's `ZipTree`), and `TreeSource` lists, labels and declares them.

Listing, labels and declarations are the same either way, so a zip prepares into the bytes of the
tree it extracts to. Every tree layout declares what it can: the classes (the devkit, LOC_synset_mapping.txt),
the val images (the devkit's ground truth, LOC_val_solution.csv), the train images (the devkit's counts,
Kaggle's ImageSets/CLS-LOC/train_cls.txt); what is missing is named before anything is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from prepare.completeness import Declared, Gap
from prepare.labels import LabelError, WNID, check_val_labels, class_table
from prepare.sources.base import (
    Part, Source, SourceError, decoded_text, estimate_bytes, file_chunks, list_images, readable_file,
)

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


def check_no_class_folder_empty(tree: Tree, rel: str, found: set[str]) -> None:
    """Where the train folders are the class table (nothing lists the classes), a <wnid>/ folder without
    images would leave its class out of the table, and every later class's label one less than a model
    trained on the whole tree expects (torchvision's ImageFolder refuses it too)."""
    empty = [wnid for wnid in tree.folders(rel) if WNID.match(wnid) and wnid not in found]
    if empty:
        others = f" (nor do {len(empty) - 1} other class folders)" if len(empty) > 1 else ""
        raise SourceError(f"{tree.where(join(rel, empty[0]))}/ holds no images{others}: its class would be left out of "
                          "the class table, shifting the labels of the classes after it. Put its images back (a copy "
                          "cut short?), or remove the folder")


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
        if not classes_by:
            check_no_class_folder_empty(tree, self.train_dir, found)
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
