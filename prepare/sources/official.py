"""The layout of ImageNet's official archives, read in parts, never extracted.

    ILSVRC2012_img_train.tar       one tar per class inside: a part each (`ClassTar`), located from
                                   the outer archive's headers and read at its offset
    ILSVRC2012_img_val.tar         flat: ranges of 500 consecutive members (`MemberRange`)
    ILSVRC2012_devkit_t12.tar.gz   the classes (meta.mat), the val labels, the declared counts

The tars are read by prepare/sources/tars.py; what every layout shares is in prepare/sources/base.py.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.completeness import Declared, Gap
from prepare.labels import (
    Devkit, LabelError, check_val_labels, class_table, devkit_train_count, leaf_synsets, read_devkit,
    val_wnids_from_devkit, WNID,
)
from prepare.sources.base import DEVKIT, Item, Signs, Source, SourceError, image_key, readable_file
from prepare.sources.tars import TAR_END, archive_members, check_tar_complete, iterate_tar, read_range

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
OFFICIAL_FILES = {  # name -> why it is needed, for the error when it is missing
    TRAIN_TAR: "the official train archive is needed next to the others",
    VAL_TAR: "the official validation archive is needed next to the others",
    DEVKIT: "the devkit holds the validation labels (meta.mat)",
}


@dataclass(frozen=True)
class ClassTar:
    """One class's tar inside the official train archive, and where its bytes lie: a worker can
    read it on its own, so classes are scattered in parallel."""
    archive: str
    wnid: str
    name: str  # member name in the archive, for messages
    offset: int
    size: int

    def wnids(self) -> set[str]:
        return {self.wnid}

    def items(self) -> Iterator[Item]:
        origin = f"{self.archive}:{self.name}"
        data = read_range(self.archive, self.offset, self.size, origin)
        check_tar_complete(data, origin)
        for member, image in iterate_tar(data, origin):
            key = image_key(member, origin)
            if key is not None:
                yield Item(key, self.wnid, f"{origin}:{member}", data=image)


@dataclass(frozen=True)
class MemberRange:
    """Consecutive whole members of the flat val archive (headers and data), with their labels:
    a worker reads the range and parses it as a tar of its own."""
    archive: str
    offset: int
    size: int
    labels: dict[str, str]  # key -> wnid, for the images in the range

    def wnids(self) -> set[str]:
        return set(self.labels.values())

    def items(self) -> Iterator[Item]:
        data = read_range(self.archive, self.offset, self.size, self.archive) + TAR_END
        for member, image in iterate_tar(data, self.archive):
            origin = f"{self.archive}:{member}"
            key = image_key(member, origin)
            if key is None:
                continue
            if key not in self.labels:
                raise LabelError(f"{origin}: no ground-truth label in the devkit ({DEVKIT})")
            yield Item(key, self.labels[key], origin, data=image)


class OfficialArchives(Source):
    layout = "official"

    def __init__(self, root: Path):
        self.root = root
        self.train_tar, self.val_tar, self.devkit_path = (readable_file(root / n, why) for n, why in OFFICIAL_FILES.items())
        self.devkit: Devkit = read_devkit(self.devkit_path)
        # The devkit's leaves are the train classes; `class_tars` checks the archive agrees.
        leaves = leaf_synsets(self.devkit.synsets)
        self.classes = class_table([s.wnid for s in leaves], {s.wnid: s.words for s in leaves})
        self.val_wnids = val_wnids_from_devkit(self.devkit)
        check_val_labels(self.val_wnids, self.classes)
        self._parts = {"train": self.class_tars(), "val": self.val_ranges()}  # the archives' headers, read once

    def split_bytes(self, split: str) -> int:
        return (self.train_tar if split == "train" else self.val_tar).stat().st_size

    def declared(self, split: str) -> Declared:
        """train: the devkit's classes (a class tar each) and their train counts; val: its ground truth."""
        if split == "train":
            present = {part.wnid for part in self._parts["train"]}
            missing = tuple(f"{c.wnid}.tar" for c in self.classes if c.wnid not in present)
            gap = Gap("class archives", len(self.classes), "the devkit's meta.mat", missing)
            count = devkit_train_count(self.devkit)
            return Declared(split, (gap,), count, "the devkit's meta.mat" if count is not None else None)
        present = {key for part in self._parts["val"] for key in part.labels}
        missing = tuple(key for key in self.val_wnids if key not in present)
        gap = Gap("images", len(self.val_wnids), "the devkit's ground truth", missing)
        return Declared(split, (gap,), len(self.val_wnids), "the devkit's ground truth", len(present))

    def val_keys(self) -> set[str]:
        return {key for part in self._parts["val"] for key in part.labels}

    def estimated_count(self, split: str) -> int:
        """val: the ground truth's count; train: the first class tar's count, scaled by bytes."""
        if split == "val":
            return len(self.val_wnids)
        first = self._parts["train"][0]
        with open(self.train_tar, "rb") as f:
            f.seek(first.offset)
            with tarfile.open(fileobj=f, mode="r:") as inner:  # its headers only: seeks over the images
                count = sum(1 for member in inner if member.isreg())
        return round(count * self.split_bytes("train") / max(first.size, 1))

    def parts(self, split: str) -> list[ClassTar] | list[MemberRange]:
        return list(self._parts[split])

    def class_tars(self) -> list[ClassTar]:
        """The class tars of the train archive, located from its headers, checked against the
        devkit's classes (those missing are named by `declared`)."""
        known = self.class_index()
        parts = []
        for member in archive_members(self.train_tar):
            wnid = member.name.rsplit("/", 1)[-1].removesuffix(".tar")
            if not member.isreg() or not member.name.endswith(".tar") or not WNID.match(wnid):
                continue
            if wnid not in known:
                raise SourceError(f"{self.train_tar}:{member.name}: class {wnid} is not a leaf synset of the "
                                  "devkit's meta.mat")
            parts.append(ClassTar(str(self.train_tar), wnid, member.name, member.offset_data, member.size))
        return parts

    def val_ranges(self, per_range: int = 500) -> list[MemberRange]:
        """The val archive cut into ranges of `per_range` consecutive members, located from its
        headers (one 512-byte read per member)."""
        ranges, start, end, labels, count = [], None, 0, {}, 0
        for member in archive_members(self.val_tar):
            start = member.offset if start is None else start
            end = member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
            key = image_key(member.name, f"{self.val_tar}:{member.name}")
            if key in self.val_wnids and member.isreg():  # a link or folder by an image's name: not the image
                labels[key] = self.val_wnids[key]
            count += 1
            if count == per_range:
                ranges.append(MemberRange(str(self.val_tar), start, end - start, labels))
                start, labels, count = None, {}, 0
        if start is not None:
            ranges.append(MemberRange(str(self.val_tar), start, end - start, labels))
        return ranges



# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

NAME = "official"
EXPECTED = f"official archives: {TRAIN_TAR}, {VAL_TAR}, {DEVKIT}"


SIGNS = Signs(names=(TRAIN_TAR, VAL_TAR))


def recognise(root: Path) -> bool:
    return root.is_dir() and ((root / TRAIN_TAR).exists() or (root / VAL_TAR).exists())


def identifying_files(root: Path, found: bool) -> list[Path]:
    """The three archives (a missing one is named here, before anything else)."""
    return [readable_file(root / name, why) for name, why in OFFICIAL_FILES.items()]


def open_source(root: Path, found: bool) -> OfficialArchives:
    return OfficialArchives(root)
