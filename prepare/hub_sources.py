"""The Hugging Face hub's two ImageNet layouts, read in parts as prepare/official.py's are.

- hf-imagenet-1k: ILSVRC/imagenet-1k: data/train_images_{0..4}.tar.gz and data/val_images.tar.gz
                  (gzipped tars of <stem>_<wnid>.JPEG), classes.py beside (`HubArchives`, `GzipArchive`).
- timm-wds:       timm/imagenet-1k-wds: WebDataset shards imagenet1k-train-NNNN.tar and
                  imagenet1k-validation-NN.tar (KEY.jpg, KEY.cls, KEY.json), _info.json beside
                  (`WdsShards`, `WdsShard`).

Both take their classes from a class list beside their data, or the built-in ImageNet-1k table
(`read_class_list`). The name rules and `Source` are prepare/sources.py's, the tar reading
prepare/tars.py's; which layout a folder holds is decided in prepare/layouts.py. Nothing here imports webdataset.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.labels import (
    LabelError, builtin_class_names, check_sorted_order, check_val_labels, class_table, leaf_synsets, parse_hf_classes,
    parse_synset_mapping, read_devkit, val_wnids_from_devkit, WNID,
)
from prepare.completeness import IMAGENET_1K_CLASSES, Declared, Gap, numbering_gap
from prepare.sources import (
    DEVKIT, KAGGLE_SYNSETS, Item, Source, SourceError, check_safe_name, checked_key, image_stem, readable_file,
)
from prepare.tars import gzipped_tar_images, iterate_whole_tar
from shards.format import BAD_LABEL, parse_label
from shards.layout import SPLITS
from shards.manifest import ClassInfo

HF_DATA = "data"  # ILSVRC/imagenet-1k: the archives' folder in the dataset's repository
HF_TRAIN = re.compile(r"^train_images_(\d+)\.tar\.gz$")
HF_VAL = "val_images.tar.gz"
HF_CLASSES = "classes.py"
HF_SCRIPT = "imagenet-1k.py"  # the loading script: how many train archives it reads
HF_TRAIN_ARCHIVES = 5  # ILSVRC/imagenet-1k's train_images_0..4.tar.gz, where its script is not beside them
HF_SCRIPT_TRAIN_COUNT = re.compile(r"train_images_\{i\}\.tar\.gz['\"]\s*for\s+i\s+in\s+range\(\s*(\d+)\s*\)")
TIMM_INFO = "_info.json"
TIMM_SPLITS = {"train": "train", "val": "validation"}  # this project's split -> timm's
TIMM_SHARDS = {"train": "imagenet1k-train-*.tar", "val": "imagenet1k-validation-*.tar"}
TIMM_SHARD_COUNTS = {"train": 1024, "val": 64}  # timm/imagenet-1k-wds's shards, where its _info.json is not there
AVERAGE_IMAGE_BYTES = 110_000  # ImageNet's: a count from bytes where the source states none


# ---------------------------------------------------------------- the class list beside the data

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
        names = parse_hf_classes(readable_file(path, "it names the classes").read_text(), str(path))
        check_sorted_order(list(names), str(path))
    elif path.name == DEVKIT:
        names = {s.wnid: s.words for s in leaf_synsets(read_devkit(path).synsets)}
    else:
        names = parse_synset_mapping(readable_file(path, "it names the classes").read_text())
    return ClassList(class_table(list(names), names), path)


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


def hf_key_and_wnid(stem: str, name: str, origin: str) -> tuple[str, str]:
    """ILSVRC/imagenet-1k's naming rule (its loading script: the wnid is what follows the stem's last
    underscore): n01440764_10026_n01440764 -> (n01440764_10026, n01440764). The key is the original
    file's stem, as in the official archives."""
    original, _, wnid = stem.rpartition("_")
    if not original or not WNID.match(wnid):
        raise SourceError(f"{origin}: the name {name!r} does not follow ILSVRC/imagenet-1k's rule "
                          "<image>_<wnid>.JPEG: is the archive from that dataset?")
    return checked_key(original, name, origin), wnid


def hf_data_folder(root: Path) -> Path | None:
    """Where ILSVRC/imagenet-1k's archives are: root/data (root is the dataset's repository as
    downloaded) or root itself (its data folder); None if neither holds them."""
    for folder in (root / HF_DATA, root):
        if folder.is_dir() and ((folder / HF_VAL).is_file() or any(HF_TRAIN.match(p.name) for p in folder.iterdir())):
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
    return {int(m.group(1)): data / p.name for p in sorted(data.iterdir()) if (m := HF_TRAIN.match(p.name))}


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


def hf_files(root: Path) -> list[Path]:
    """ILSVRC/imagenet-1k's files that identify it: the archives, the class list, the loading script."""
    data = hf_data_folder(root)
    if data is None:
        raise SourceError(f"{root} holds no {HF_DATA}/train_images_N.tar.gz or {HF_VAL}")
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

    def __init__(self, root: Path):
        self.root = root
        data = hf_data_folder(root)
        if data is None:
            raise SourceError(f"{root} holds no {HF_DATA}/train_images_N.tar.gz or {HF_VAL}")
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


# ---------------------------------------------------------------- timm/imagenet-1k-wds: WebDataset shards

@dataclass(frozen=True)
class WdsShard:
    """One WebDataset shard of timm/imagenet-1k-wds: samples KEY.jpg, KEY.cls (the class index), KEY.json."""
    path: str
    size: int
    count: int | None  # samples it holds, where _info.json says
    classes: tuple[str, ...]  # the class table's wnids by index: what a .cls number means

    def wnids(self) -> set[str]:
        return set(self.classes)

    def items(self) -> Iterator[Item]:
        count = 0
        with open(self.path, "rb") as f:
            for prefix, sample in wds_samples(iterate_whole_tar(f, self.path), self.path):
                count += 1
                yield self.item(prefix, sample)
        if self.count is not None and count != self.count:
            raise SourceError(f"{self.path} holds {count} samples, {TIMM_INFO} says {self.count}: the shard is "
                              "incomplete or not the one listed there: download it again")

    def item(self, prefix: str, sample: dict[str, bytes]) -> Item:
        origin = f"{self.path}:{prefix}"
        for ext, what in (("jpg", "image"), ("cls", "class number")):
            if ext not in sample:
                raise SourceError(f"{origin}: the sample has no .{ext} (its {what}): the shard is damaged or not "
                                  "timm/imagenet-1k-wds's: download it again")
        label = parse_label(sample["cls"])
        if label == BAD_LABEL or label >= len(self.classes):
            raise SourceError(f"{origin}: .cls {sample['cls'][:20]!r} is not a class index of the class table "
                              f"(0..{len(self.classes) - 1}): the shards and the class list beside them (or the "
                              "built-in ImageNet-1k table) do not belong together")
        wnid = self.classes[label]
        key = wds_key(prefix, sample.get("json"), origin)
        named = re.match(r"(n\d{8})_", key)
        if named and named.group(1) != wnid:
            raise SourceError(f"{origin}: .cls {label} is {wnid} in the class table, but the image's name {key} "
                              f"says {named.group(1)}: the class list beside the shards does not belong to them")
        return Item(key, wnid, origin, sample["jpg"])


def wds_samples(members: Iterator[tuple[str, bytes]], origin: str) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Consecutive members with the same prefix as one sample, as webdataset groups them: the prefix is
    the name up to the first dot of its base name, the rest (lower-cased) the extension."""
    prefix, sample = None, {}
    for name, data in members:
        folder, _, base = name.rpartition("/")
        stem, dot, ext = base.partition(".")
        if not dot:
            continue
        this = f"{folder}/{stem}" if folder else stem
        if this != prefix:
            if prefix is not None:
                yield prefix, sample
            prefix, sample = this, {}
        if ext.lower() in sample:
            raise SourceError(f"{origin}:{this}: the sample has two .{ext.lower()} members")
        sample[ext.lower()] = data
    if prefix is not None:
        yield prefix, sample


def wds_key(prefix: str, meta: bytes | None, origin: str) -> str:
    """The original file's stem where the sample's json names it (then keys are the official
    layout's: n01440764_10026), else the sample's own key."""
    if meta is not None:
        try:
            name = json.loads(meta).get("filename")
        except (ValueError, AttributeError):
            raise SourceError(f"{origin}: its .json is not a JSON object: the shard is damaged, download it "
                              "again") from None
        if isinstance(name, str):
            stem = image_stem(name, origin)
            if stem is not None:
                return checked_key(stem, name, origin)
    check_safe_name(prefix, origin)
    return checked_key(prefix.rsplit("/", 1)[-1], prefix, origin)


@dataclass(frozen=True)
class WdsSplit:
    """A split of timm/imagenet-1k-wds: its shards and, where _info.json says, their counts."""
    filenames: tuple[str, ...]  # relative to the folder
    shard_lengths: tuple[int, ...] | None
    num_samples: int | None


def parse_wds_info(text: str, origin: str) -> dict[str, WdsSplit]:
    """_info.json, as timm's reader (timm/data/readers/reader_wds.py) reads it: {"splits": {"train":
    {"name", "num_samples", "filenames", "shard_lengths"}, "validation": {...}}} -> timm's split name ->
    WdsSplit, for the splits this project reads."""
    try:
        info = json.loads(text)
    except ValueError as exn:
        raise SourceError(f"{origin} is not JSON ({exn}): download it again") from None
    splits = info.get("splits") if isinstance(info, dict) else None
    if not isinstance(splits, dict):
        raise SourceError(f"{origin} has no \"splits\" object: is it timm/imagenet-1k-wds's {TIMM_INFO}?")
    return {name: wds_split_info(entry, f"{origin}: splits.{name}")
            for name, entry in splits.items() if name in TIMM_SPLITS.values()}


def wds_split_info(entry, where: str) -> WdsSplit:
    def whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    filenames = entry.get("filenames") if isinstance(entry, dict) else None
    if not isinstance(filenames, list) or not filenames or not all(isinstance(n, str) for n in filenames):
        raise SourceError(f"{where} has no list of shard \"filenames\": download {TIMM_INFO} again")
    for name in filenames:
        check_safe_name(name, where)
    lengths, count = entry.get("shard_lengths") or None, entry.get("num_samples")
    if lengths is not None and (not isinstance(lengths, list) or len(lengths) != len(filenames)
                                or not all(map(whole, lengths))):
        raise SourceError(f"{where}: \"shard_lengths\" is not one count per file: download {TIMM_INFO} again")
    if count is not None and not whole(count):
        raise SourceError(f"{where}: \"num_samples\" is not a count: download {TIMM_INFO} again")
    if lengths is not None and count is not None and sum(lengths) != count:
        raise SourceError(f"{where}: num_samples is {count}, shard_lengths add up to {sum(lengths)}: the file "
                          f"contradicts itself, download {TIMM_INFO} again")
    return WdsSplit(tuple(filenames), tuple(lengths) if lengths else None,
                    count if count is not None else sum(lengths) if lengths else None)


def wds_splits(root: Path) -> dict[str, WdsSplit]:
    """Each split's shards: as _info.json lists them where it is there (present or not), else the shard
    files present (then without counts)."""
    info = root / TIMM_INFO
    if info.is_file():
        listed = parse_wds_info(readable_file(info, "it lists the shards").read_text(), str(info))
        missing = [name for name in TIMM_SPLITS.values() if name not in listed]
        if missing:
            raise SourceError(f"{info} lists no {missing[0]!r} split: is it timm/imagenet-1k-wds's {TIMM_INFO}?")
        return {split: listed[name] for split, name in TIMM_SPLITS.items()}
    found = {split: tuple(sorted(p.name for p in root.glob(pattern))) for split, pattern in TIMM_SHARDS.items()}
    for split, names in found.items():
        if not names:
            raise SourceError(f"{root} holds no {TIMM_SHARDS[split]}: download timm/imagenet-1k-wds's "
                              f"{TIMM_SPLITS[split]} shards (and its {TIMM_INFO}, which counts them)")
    return {split: WdsSplit(names, None, None) for split, names in found.items()}


WDS_NUMBER = re.compile(r"^(imagenet1k-(?:train|validation)-)(\d+)\.tar$")  # the shards' names, numbered from 0


def wds_gap(root: Path, split: WdsSplit, info: bool, known: int | None = None) -> Gap:
    """The shards _info.json lists that are not there; without it, of the `known` shards of
    timm/imagenet-1k-wds's own layout (where the classes are ImageNet-1k's), or else of the numbering
    of those that are there (imagenet1k-train-0000.tar ...)."""
    if info:
        return Gap("shards", len(split.filenames), TIMM_INFO,
                   tuple(name for name in split.filenames if not (root / name).exists()))
    numbered = [m for name in split.filenames if (m := WDS_NUMBER.match(name))]
    if not numbered:
        return Gap("shards", len(split.filenames), "the files present")
    prefix, width = numbered[0].group(1), len(numbered[0].group(2))
    numbers = {int(m.group(2)) for m in numbered}
    if known is None:
        return numbering_gap(sorted(numbers), lambda n: f"{prefix}{n:0{width}d}.tar", "shards")
    return Gap("shards", known, "timm/imagenet-1k-wds's layout",
               tuple(f"{prefix}{n:0{width}d}.tar" for n in range(known) if n not in numbers))


def wds_files(root: Path) -> list[Path]:
    """timm/imagenet-1k-wds's files that identify it: the shards present, _info.json and the class list."""
    splits = wds_splits(root)
    shards = [root / name for split in SPLITS for name in splits[split].filenames if (root / name).is_file()]
    small = [path for path in (root / TIMM_INFO, class_list_file([root])) if path is not None and path.is_file()]
    return shards + small


def wds_shards_present(root: Path, listed: WdsSplit, missing: set[str], wnids: tuple[str, ...]) -> list[WdsShard]:
    lengths = listed.shard_lengths or (None,) * len(listed.filenames)
    present = [(root / name, count) for name, count in zip(listed.filenames, lengths) if name not in missing]
    return [WdsShard(str(readable_file(path, "a shard")), path.stat().st_size, count, wnids) for path, count in present]


class WdsShards(Source):
    """timm/imagenet-1k-wds from the Hugging Face hub: WebDataset shards, one part each; .cls is the class
    index in the sorted-wnid order (this project's), checked against the names where they carry a wnid."""
    layout = "timm-wds"

    def __init__(self, root: Path):
        self.root = root
        self.splits_info = wds_splits(root)
        self.class_list = read_class_list(class_list_file([root]))
        self.classes = self.class_list.classes
        wnids = tuple(c.wnid for c in self.classes)
        info = (root / TIMM_INFO).is_file()
        self._parts, self._declared = {}, {}
        imagenet_1k = len(self.classes) == IMAGENET_1K_CLASSES
        for split, listed in self.splits_info.items():
            gap = wds_gap(root, listed, info, TIMM_SHARD_COUNTS[split] if imagenet_1k else None)
            self._parts[split] = wds_shards_present(root, listed, set(gap.missing), wnids)
            found = sum(part.count for part in self._parts[split]) if listed.shard_lengths else None
            self._declared[split] = Declared(split, (gap,), listed.num_samples, TIMM_INFO if info else None, found)

    def parts(self, split: str) -> list[WdsShard]:
        return list(self._parts[split])

    def split_bytes(self, split: str) -> int:
        return sum(part.size for part in self._parts[split])

    def declared(self, split: str) -> Declared:
        """_info.json's shards and counts (each shard's count is checked as it is read); without it, the
        numbering of the shards present."""
        return self._declared[split]

    def estimated_count(self, split: str) -> int:
        return self.declared(split).images or max(1, self.split_bytes(split) // AVERAGE_IMAGE_BYTES)
