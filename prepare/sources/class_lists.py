"""A download's class table, from a class list beside its data (ILSVRC/imagenet-1k's classes.py, the
devkit, Kaggle's LOC_synset_mapping.txt) or the built-in ImageNet-1k table: the hub's layouts
(prepare/sources/hf_tars.py, timm_wds.py) take their classes from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prepare.labels import builtin_class_names, check_sorted_order, class_table, leaf_synsets, parse_hf_classes, \
    parse_synset_mapping, read_devkit
from prepare.sources.base import DEVKIT, KAGGLE_SYNSETS, decoded_text, readable_file
from shards.manifest import ClassInfo

HF_CLASSES = "classes.py"  # ILSVRC/imagenet-1k's (its `script` branch): IMAGENET2012_CLASSES, wnid -> words

CLASS_LISTS = (HF_CLASSES, DEVKIT, KAGGLE_SYNSETS)  # looked for beside a hub layout's data, in this order


@dataclass(frozen=True)
class ClassList:
    """A hub layout's classes: from a class list beside its data, or the built-in ImageNet-1k table."""
    classes: list[ClassInfo]
    path: Path | None  # None: the built-in table (prepare/imagenet_classes.txt)


def class_list_file(folders: list[Path]) -> Path | None:
    """The first of ILSVRC/imagenet-1k's classes.py, the devkit and Kaggle's LOC_synset_mapping.txt
    found in `folders`."""
    for name in CLASS_LISTS:
        for folder in folders:
            if (folder / name).is_file():
                return folder / name
    return None


def read_class_list(path: Path | None) -> ClassList:
    """The class table from `path` (index = position among the sorted wnids, as everywhere), or the
    built-in 1000 classes. classes.py numbers its classes by its order: that order must be sorted."""
    if path is None:
        names = builtin_class_names()
    elif path.name == HF_CLASSES:
        names = parse_hf_classes(class_list_text(path), str(path))
        check_sorted_order(list(names), str(path))
    elif path.name == DEVKIT:
        names = {s.wnid: s.words for s in leaf_synsets(read_devkit(path).synsets)}
    else:
        names = parse_synset_mapping(class_list_text(path))
    return ClassList(class_table(list(names), names), path)


def class_list_text(path: Path) -> str:
    return decoded_text(readable_file(path, "it names the classes").read_bytes(), str(path))
