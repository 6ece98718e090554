"""ILSVRC/imagenet-1k from the Hugging Face hub, its former layout (the `script` branch): gzipped tars
read in parts as the official archives are.

    data/train_images_{0..4}.tar.gz, data/val_images.tar.gz   members <stem>_<wnid>.JPEG (`GzipArchive`)
    classes.py, imagenet-1k.py                                the class list, the loading script beside

The classes come from a class list beside the data, or the built-in ImageNet-1k table
(prepare/sources/class_lists.py); the tars are read by prepare/sources/tars.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.sources.class_lists import HF_CLASSES, class_list_file, read_class_list
from prepare.completeness import IMAGENET_1K_CLASSES, Declared, Gap, numbering_gap
from prepare.labels import LabelError, check_val_labels, read_devkit, val_wnids_from_devkit
from prepare.sources.base import (
    AVERAGE_IMAGE_BYTES, DEVKIT, Item, Signs, Source, SourceError, hf_key_and_wnid, names_in, readable_file,
)
from prepare.sources.tars import gzipped_tar_images

NAME = "hf-imagenet-1k"
HF_DATA = "data"  # ILSVRC/imagenet-1k: the archives' folder in the dataset's repository
HF_TRAIN = re.compile(r"^train_images_(\d+)\.tar\.gz$")
HF_VAL = "val_images.tar.gz"
HF_SCRIPT = "imagenet-1k.py"  # the loading script: how many train archives it reads
HF_TRAIN_ARCHIVES = 5  # ILSVRC/imagenet-1k's train_images_0..4.tar.gz, where its script is not beside them
HF_SCRIPT_TRAIN_COUNT = re.compile(r"train_images_\{i\}\.tar\.gz['\"]\s*for\s+i\s+in\s+range\(\s*(\d+)\s*\)")
EXPECTED = (f"Hugging Face's ILSVRC/imagenet-1k (its `script` branch): {HF_DATA}/train_images_0.tar.gz ... and "
            f"{HF_DATA}/{HF_VAL} (this folder or its {HF_DATA}/), {HF_CLASSES} beside them")

# ---------------------------------------------------------------- ILSVRC/imagenet-1k: gzipped tars

@dataclass(frozen=True)
class GzipArchive:
    """One gzipped tar of ILSVRC/imagenet-1k (gzip cannot be split: a worker streams it whole), whose
    members are named <stem>_<wnid>.JPEG."""
    path: str
    size: int  # compressed: about the bytes of the images it yields (JPEGs do not compress)
    known: frozenset[str]  # the class table's wnids
    labels: dict[str, str] | None = None  # key -> wnid from a devkit beside (val), checked against the names

    def wnids(self) -> set[str]:
        return set(self.known)

    def items(self) -> Iterator[Item]:
        for member, origin, stem, image in gzipped_tar_images(self.path):
            key, wnid = hf_key_and_wnid(stem, member, origin)
            self.check_label(key, wnid, origin)
            yield Item(key, wnid, origin, image)

    def check_label(self, key: str, wnid: str, origin: str) -> None:
        if wnid not in self.known:
            raise SourceError(f"{origin}: class {wnid} (from the name) is not in the class table: the archive and "
                              "the class list beside it (or the built-in ImageNet-1k table) do not belong together")
        if self.labels is not None and self.labels.get(key) != wnid:
            truth = self.labels.get(key)
            raise LabelError(f"{origin}: the name says {wnid}, the devkit's ground truth "
                             f"{'has no label for ' + key if truth is None else 'says ' + truth}: "
                             "the archive and the devkit beside it do not belong together")


def hf_data_folder(root: Path) -> Path | None:
    """Where ILSVRC/imagenet-1k's archives are: root/data (root is the dataset's repository as
    downloaded) or root itself (its data folder); None if neither holds them."""
    for folder in (root / HF_DATA, root):
        if folder.is_dir() and ((folder / HF_VAL).is_file() or any(HF_TRAIN.match(name) for name in names_in(folder))):
            return folder
    return None


def hf_repository_folders(root: Path, data: Path) -> list[Path]:
    """Where classes.py, the loading script and a devkit are looked for: the repository's top, which is
    --source, or its parent where --source is the data folder itself."""
    return [root, root.parent] if data == root and root.name == HF_DATA else [root]


def hf_script_train_count(folders: list[Path]) -> int | None:
    """How many train archives the loading script beside the data reads (`range(5)`), if it is there."""
    for folder in folders:
        if (folder / HF_SCRIPT).is_file():
            found = HF_SCRIPT_TRAIN_COUNT.search((folder / HF_SCRIPT).read_text(errors="replace"))
            return int(found.group(1)) if found else None
    return None


def hf_train_archives(data: Path) -> dict[int, Path]:
    """train_images_N.tar.gz by N, those present."""
    return {int(m.group(1)): data / name for name in names_in(data) if (m := HF_TRAIN.match(name))}


def hf_train_gap(numbers: list[int], stated: int | None, data: Path, imagenet_1k: bool) -> Gap:
    """The train archives the loading script reads (`range(5)`) that are not there; without the
    script, ILSVRC/imagenet-1k's own 5 where the classes are ImageNet-1k's 1000, else the gaps in the
    archives' numbering. An archive beyond the count is refused."""
    name = "train_images_{}.tar.gz".format
    by = HF_SCRIPT
    if stated is None and imagenet_1k:
        stated, by = HF_TRAIN_ARCHIVES, "ILSVRC/imagenet-1k's layout"
    if stated is None:
        return numbering_gap(numbers, name, "train archives")
    beyond = [n for n in numbers if n >= stated]
    if beyond:
        raise SourceError(f"{data / name(beyond[0])}: {by} has train archives 0..{stated - 1} only: remove it, or "
                          "use the loading script that belongs to these archives")
    return Gap("train archives", stated, by, tuple(name(n) for n in range(stated) if n not in numbers))


def hf_files(root: Path, data: Path) -> list[Path]:
    """ILSVRC/imagenet-1k's files that identify it (`data`: the archives' folder, `hf_data_folder`): the
    archives, the class list, the loading script."""
    folders = hf_repository_folders(root, data)
    small = [folder / HF_SCRIPT for folder in folders if (folder / HF_SCRIPT).is_file()]
    extra = [path for path in (class_list_file(folders), hf_devkit(folders)) if path is not None]
    val = [data / HF_VAL] if (data / HF_VAL).is_file() else []
    return [path for _, path in sorted(hf_train_archives(data).items())] + val + sorted(set(extra)) + small


def hf_val_archive(data: Path) -> Path:
    return readable_file(data / HF_VAL, "ILSVRC/imagenet-1k's validation archive is needed beside the train ones")


def hf_devkit(folders: list[Path]) -> Path | None:
    return next((folder / DEVKIT for folder in folders if (folder / DEVKIT).is_file()), None)


class HubArchives(Source):
    """ILSVRC/imagenet-1k from the Hugging Face hub: gzipped tars of <stem>_<wnid>.JPEG, one part each."""
    layout = "hf-imagenet-1k"

    def __init__(self, root: Path, data: Path):
        """`data`: the archives' folder, as `recognise` found it (`hf_data_folder`)."""
        self.root = root
        folders = hf_repository_folders(root, data)
        train = hf_train_archives(data)
        if not train:
            raise SourceError(f"{data} holds no train_images_N.tar.gz: download ILSVRC/imagenet-1k's train archives")
        self.class_list = read_class_list(class_list_file(folders))
        self.classes = self.class_list.classes
        self.train_gap = hf_train_gap(sorted(train), hf_script_train_count(folders), data,
                                      len(self.classes) == IMAGENET_1K_CLASSES)
        self.archives = {"train": [readable_file(path, "a train archive") for _, path in sorted(train.items())],
                         "val": [hf_val_archive(data)]}
        devkit = hf_devkit(folders)
        self.val_wnids = val_wnids_from_devkit(read_devkit(devkit)) if devkit else None
        if self.val_wnids is not None:
            check_val_labels(self.val_wnids, self.classes)

    def parts(self, split: str) -> list[GzipArchive]:
        known = frozenset(self.class_index())
        labels = self.val_wnids if split == "val" else None
        return [GzipArchive(str(path), path.stat().st_size, known, labels) for path in self.archives[split]]

    def split_bytes(self, split: str) -> int:
        return sum(path.stat().st_size for path in self.archives[split])

    def declared(self, split: str) -> Declared:
        """train: the archives the loading script reads (or their numbering); val: the devkit's ground
        truth where the devkit is beside the data (counted as the stream is read)."""
        if split == "train":
            return Declared(split, (self.train_gap,))
        if self.val_wnids is None:
            return Declared(split)
        return Declared(split, images=len(self.val_wnids), images_by="the devkit's ground truth")

    def val_keys(self) -> set[str] | None:
        """With the devkit beside the archives: its ground truth's keys."""
        return set(self.val_wnids) if self.val_wnids is not None else None

    def estimated_count(self, split: str) -> int:
        return self.declared(split).images or max(1, self.split_bytes(split) // AVERAGE_IMAGE_BYTES)


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

SIGNS = Signs(names=(HF_VAL, "train_images_*.tar.gz"), folders=(HF_DATA,))


def recognise(root: Path) -> Path | None:
    """The folder that holds the archives, where `root` is such a download."""
    return hf_data_folder(root) if root.is_dir() else None


def identifying_files(root: Path, found: Path) -> list[Path]:
    return hf_files(root, found)


def open_source(root: Path, found: Path) -> HubArchives:
    return HubArchives(root, found)
