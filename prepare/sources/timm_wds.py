"""timm/imagenet-1k-wds from the Hugging Face hub: WebDataset shards, read a shard a part.

    imagenet1k-train-NNNN.tar, imagenet1k-validation-NN.tar   samples KEY.jpg, KEY.cls, KEY.json (`WdsShard`)
    _info.json                                               the shards and their counts

The classes come from a class list beside the shards, or the built-in ImageNet-1k table
(prepare/class_lists.py). Nothing here imports webdataset: prepare/tars.py reads the tars.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.class_lists import class_list_file, read_class_list
from prepare.completeness import IMAGENET_1K_CLASSES, Declared, Gap, numbering_gap
from prepare.sources.base import AVERAGE_IMAGE_BYTES, Item, Source, SourceError, check_safe_name, checked_key, \
    image_stem, readable_file
from prepare.tars import iterate_whole_tar
from shards.format import BAD_LABEL, parse_label
from shards.paths import SPLITS

NAME = "timm-wds"
TIMM_INFO = "_info.json"
TIMM_SPLITS = {"train": "train", "val": "validation"}  # this project's split -> timm's
TIMM_SHARDS = {"train": "imagenet1k-train-*.tar", "val": "imagenet1k-validation-*.tar"}
TIMM_SHARD_COUNTS = {"train": 1024, "val": 64}  # timm/imagenet-1k-wds's shards, where its _info.json is not there
EXPECTED = (f"Hugging Face's timm/imagenet-1k-wds: {TIMM_SHARDS['train']} and {TIMM_SHARDS['val']}, {TIMM_INFO} "
            "beside them")

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


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

def recognise(root: Path) -> bool:
    return root.is_dir() and ((root / TIMM_INFO).is_file()
                              or any(any(root.glob(pattern)) for pattern in TIMM_SHARDS.values()))


def identifying_files(root: Path, found: bool) -> list[Path]:
    return wds_files(root)


def open_source(root: Path, found: bool) -> WdsShards:
    return WdsShards(root)
