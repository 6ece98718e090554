"""timm's WebDataset downloads from the Hugging Face hub, read a shard a part.

    timm/imagenet-1k-wds    imagenet1k-train-NNNN.tar (1,024), imagenet1k-validation-NN.tar (64)
    timm/imagenet-12k-wds   imagenet12k-train-NNNN.tar (1,024), imagenet12k-validation-NNN.tar (512): 11,821 classes
    timm/imagenet-22k-wds   imagenet22k-train-NNNN.tar (4,096), imagenet22k-validation-NNN.tar (512): 21,841
                            classes; its val is the 12k one (40 images of each 12k class)

A shard's number is as wide as its split's count needs, as the 1k set's real names show ({00..63} for
64, {0000..1023} for 1,024): the 12k and 22k val shards are probably -000 to -511, not yet seen in a real
download. The names are matched with a number of any width (`TimmSet.shard_number`), so either is read.
    timm/imagenet-w21-wds   imagenet_w21-train-NNNN.tar (2,048): winter21's 19,167 classes, 13,151,276 images,
                            train only; val is held out: its last HELD_OUT_SHARDS shards (`held_out_shards`)

Each sample is KEY.jpg, KEY.cls (the class's index among the sorted wnids), KEY.json; `_info.json`
beside the shards lists them and counts their samples. The downloads differ only in their names and
class tables, so each is a `TimmSet` of this module and a line of the registry (prepare/sources/__init__.py).
ImageNet-1k's classes come from a class list beside the shards or the built-in table
(prepare/sources/class_lists.py); 12k's, 22k's and w21's from the tables prepare ships (timm's,
prepare/imagenet12k_classes.txt, imagenet22k_classes.txt; winter21's own 19,167, imagenet_w21_classes.txt), .cls
checked against the wnid the image's name carries. w21 may be labelled in 22k's table instead
(`--class-table imagenet-22k`, the index winter21_whole.tar.gz's classes get there too, and what a dataset
prepared before winter21's own table was the default keeps): then its labels are 22k's, by the wnid each
image's name carries, and .cls is checked to agree with the names (`check_cls_order`). The WebP variant
(timm/imagenet-w21-webp-wds) is refused: prepare writes JPEG shards, and its images would have to be
decoded and re-encoded (`webp_refusal`).

Nothing here imports webdataset: prepare/sources/tars.py reads the tars.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.sources.class_lists import class_list_file, read_class_list
from prepare.completeness import IMAGENET_1K_CLASSES, Declared, Gap, numbering_gap
from prepare.labels import builtin_class_names, class_table
from prepare.sources.base import AVERAGE_IMAGE_BYTES, Item, Signs, Source, SourceError, check_safe_name, checked_key, \
    decoded_text, image_stem, readable_file
from prepare.sources.tars import iterate_whole_tar
from shards.format import BAD_LABEL, parse_label
from shards.manifest import ClassInfo
from shards.paths import SPLITS

TIMM_INFO = "_info.json"
TIMM_SPLITS = {"train": "train", "val": "validation"}  # this project's split -> timm's


@dataclass(frozen=True)
class TimmSet:
    """One of timm's WebDataset downloads: its names, its class table, its shards."""
    NAME: str  # the layout's name (the registry's and the manifest's)
    repo: str  # where it is downloaded from
    prefix: str  # of its shards' names: {prefix}-train-0000.tar
    table: str | None  # the built-in class table its .cls numbers (labels.BUILTIN_TABLES); None: a class list beside,
    # or ImageNet-1k's
    shard_counts: dict[str, int]  # split -> its shards, where _info.json is not there to list them
    subsets: tuple[str, ...] = ()  # built-in tables of class subsets evaluated on their own (its val's)
    held_out_shards: int = 0  # without a val split: its last train shards are val (their number)
    other_tables: tuple[str, ...] = ()  # built-in tables it may be labelled in instead, by its names' wnids (W21Shard)
    SIGNS: Signs = Signs()  # made from the prefix (__post_init__): _info.json, or a shard of its name

    def __post_init__(self):
        object.__setattr__(self, "SIGNS", Signs(names=(TIMM_INFO, f"{self.prefix}-*.tar")))

    def tables(self, found) -> tuple[str, ...]:
        """The tables it is labelled in, its own first; () for ImageNet-1k's (a class list beside may give it)."""
        return (self.table, *self.other_tables) if self.table else ()

    def rules(self, found, table: str) -> dict | None:
        """What prepare decides that the download does not say, in the source's identity (a change makes
        a dataset prepared by the old rule another dataset): w21's val and labels. (In 22k's table, the words
        of the datasets prepared before winter21's own table was the default: they keep their identity.)"""
        if not self.held_out_shards:
            return None
        return {"held_out_shards": self.held_out_shards,
                "labels": ".cls, checked against the wnid of each image's name" if table == self.table
                else f"the wnid of each image's name, in {TABLE_WORDS[table]} table"}

    @property
    def EXPECTED(self) -> str:
        if self.held_out_shards:
            return (f"Hugging Face's {self.repo}: {self.shard_pattern('train')}, {TIMM_INFO} beside them; val is "
                    f"held out (its last {self.held_out_shards} shards)")
        return (f"Hugging Face's {self.repo}: {self.shard_pattern('train')} and {self.shard_pattern('val')}, "
                f"{TIMM_INFO} beside them")

    def shard_pattern(self, split: str) -> str:
        return f"{self.prefix}-{TIMM_SPLITS[split]}-*.tar"

    def shard_number(self) -> re.Pattern:
        """The shards' names, numbered from 0."""
        return re.compile(rf"^({re.escape(self.prefix)}-(?:train|validation)-)(\d+)\.tar$")

    # ---- the registry's questions (prepare/sources/__init__.py)

    def recognise(self, root: Path) -> bool:
        """_info.json lists its shards (ImageNet-1k, asked last, takes any _info.json); without one, its
        shards are there. (_info.json first: which shards a download holds is its word, not a file pattern's.)"""
        if not root.is_dir():
            return False
        info = root / TIMM_INFO
        if info.is_file():
            return self is IMAGENET_1K or listed_prefix(info) == self.prefix
        return any(any(root.glob(self.shard_pattern(split))) for split in TIMM_SPLITS)

    def identifying_files(self, root: Path, found: bool) -> list[Path]:
        return wds_files(root, self)

    def open_source(self, root: Path, found: bool, table: str | None = None) -> "WdsShards":
        return WdsShards(root, self, table)


IMAGENET_1K = TimmSet("timm-wds", "timm/imagenet-1k-wds", "imagenet1k", None, {"train": 1024, "val": 64})
IMAGENET_12K = TimmSet("timm-12k-wds", "timm/imagenet-12k-wds", "imagenet12k", "imagenet-12k",
                       {"train": 1024, "val": 512})
IMAGENET_22K = TimmSet("timm-22k-wds", "timm/imagenet-22k-wds", "imagenet22k", "imagenet-22k",
                       {"train": 4096, "val": 512}, subsets=("imagenet-12k",))
# Its shards are shuffled ("validation & test splits can be made by dividing at the shard level", its card):
# the last 10 of 2,048 are val: about 64,000 images, 0.5 % (10/2,048 of its 13,151,276 is 64,215, our own
# division; birder's info.txt counts 128,430 for the last 10 of its WebP variant's 1,024 shards).
HELD_OUT_SHARDS = 10
IMAGENET_W21 = TimmSet("timm-w21-wds", "timm/imagenet-w21-wds", "imagenet_w21", "imagenet-w21", {"train": 2048},
                       held_out_shards=HELD_OUT_SHARDS, other_tables=("imagenet-22k",))
TABLE_WORDS = {"imagenet-22k": "ImageNet-22k's"}  # of the tables a set may be labelled in besides its own


def listed_prefix(info: Path) -> str | None:
    """The shards' name prefix of the first file an _info.json lists (imagenet12k-train-0000.tar ->
    imagenet12k); None where it lists none or is not JSON (the layout that opens it says why)."""
    try:
        splits = json.loads(info.read_text()).get("splits", {})
        first = next(name for entry in splits.values() for name in entry.get("filenames", []))
    except (OSError, ValueError, AttributeError, StopIteration, TypeError):
        return None
    return first.rpartition("/")[2].split("-", 1)[0] if isinstance(first, str) else None


@dataclass(frozen=True)
class WdsShard:
    """One WebDataset shard of timm's: samples KEY.jpg, KEY.cls (the class index), KEY.json."""
    path: str
    size: int
    count: int | None  # samples it holds, where _info.json says
    classes: tuple[str, ...]  # the class table's wnids by index: what a .cls number means
    repo: str = IMAGENET_1K.repo  # the download it belongs to, for messages

    def wnids(self) -> set[str]:
        return set(self.classes)

    def items(self) -> Iterator[Item]:
        return (self.item(prefix, sample) for prefix, sample in self.samples())

    def samples(self) -> Iterator[tuple[str, dict[str, bytes]]]:
        """The shard's samples, then proof that it holds as many as _info.json says."""
        count = 0
        with open(self.path, "rb") as f:
            for prefix, sample in wds_samples(iterate_whole_tar(f, self.path), self.path):
                count += 1
                yield prefix, sample
        if self.count is not None and count != self.count:
            raise SourceError(f"{self.path} holds {count} samples, {TIMM_INFO} says {self.count}: the shard is "
                              "incomplete or not the one listed there: download it again")

    def item(self, prefix: str, sample: dict[str, bytes]) -> Item:
        origin = f"{self.path}:{prefix}"
        if "jpg" not in sample and "webp" in sample:
            raise SourceError(webp_refusal(origin))
        for ext, what in (("jpg", "image"), ("cls", "class number")):
            if ext not in sample:
                raise SourceError(f"{origin}: the sample has no .{ext} (its {what}): the shard is damaged or not "
                                  f"{self.repo}'s: download it again")
        key = wds_key(prefix, sample.get("json"), origin)
        return Item(key, self.class_of(sample, key, origin), origin, sample["jpg"])

    def class_of(self, sample: dict[str, bytes], key: str, origin: str) -> str:
        """The wnid .cls numbers in the class table, checked against the one the image's name carries."""
        cls = sample["cls"]
        label = parse_label(cls)
        if label == BAD_LABEL or label >= len(self.classes):
            raise SourceError(f"{origin}: .cls {cls[:20]!r} is not a class index of the class table "
                              f"(0..{len(self.classes) - 1}): the shards and the class table ({self.repo}'s, or the "
                              "class list beside them) do not belong together")
        wnid = self.classes[label]
        named = re.match(r"(n\d{8})_", key)
        if named and named.group(1) != wnid:
            raise SourceError(f"{origin}: .cls {label} is {wnid} in the class table, but the image's name {key} "
                              f"says {named.group(1)}: the class table ({self.repo}'s, or the class list beside the shards) does "
                              "not belong to them")
        return wnid


@dataclass(frozen=True)
class W21Shard(WdsShard):
    """A shard of timm/imagenet-w21-wds labelled in 22k's table: the class is the wnid of the image's name
    (or of its .json's class_name). Its .cls, an index in winter21's own table, decides nothing; it is
    checked only to agree with the names (`check_cls_order`)."""

    def items(self) -> Iterator[Item]:
        numbers: dict[str, set[int]] = {}
        for prefix, sample in self.samples():
            item = self.item(prefix, sample)
            numbers.setdefault(item.wnid, set()).add(parse_label(sample["cls"]))
            yield item
        check_cls_order(numbers, self.path, self.repo)

    def class_of(self, sample: dict[str, bytes], key: str, origin: str) -> str:
        named = re.match(r"(n\d{8})_", key)
        wnid = named.group(1) if named else json_class_name(sample.get("json"))
        if wnid not in self.known:
            raise SourceError(f"{origin}: neither the image's name {key} nor its .json's class_name gives one of "
                              f"the class table's {len(self.classes):,} wnids, which is where prepare takes "
                              f"{self.repo}'s classes from: is the shard {self.repo}'s? Download it again")
        return wnid

    @functools.cached_property
    def known(self) -> frozenset[str]:  # once a shard, in the worker that reads it
        return frozenset(self.classes)


def json_class_name(meta: bytes | None) -> str | None:
    try:
        name = json.loads(meta).get("class_name") if meta is not None else None
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def check_cls_order(numbers: dict[str, set[int]], origin: str, repo: str) -> None:
    """A shard's .cls numbers against its images' wnids: one number a wnid, growing with the wnid, as an
    index among sorted wnids does, whatever its table and whether it counts from 0 or 1. Pure."""
    for wnid, seen in numbers.items():
        if len(seen) > 1 or BAD_LABEL in seen:
            raise SourceError(f"{origin}: the images of {wnid} carry .cls {', '.join(map(str, sorted(seen)[:3]))}: "
                              f"its .cls numbers and its images' names disagree: the shard is damaged or not {repo}'s, "
                              "download it again")
    ordered = sorted(numbers)
    for lower, higher in zip(ordered, ordered[1:]):
        (a,), (b,) = numbers[lower], numbers[higher]
        if a >= b:
            raise SourceError(f"{origin}: .cls {a} of {lower} is not below .cls {b} of {higher}, as an index among "
                              f"sorted wnids would be: its .cls numbers and its images' names disagree: the shard is "
                              f"damaged or not {repo}'s, download it again")


JPEG_W21 = "its JPEG variant, timm/imagenet-w21-wds, or image-net.org's winter21_whole.tar.gz (layout imagenet-full)"


def webp_refusal(origin: str) -> str:
    """The WebP variants hold .webp images: prepare's shards are JPEG (the loader's crop decode and the pinned
    pixels are libjpeg-turbo's), so each image would be decoded and re-encoded, a second lossy step."""
    return (f"{origin}: the sample's image is WebP (timm/imagenet-w21-webp-wds or another WebP variant): prepare "
            f"writes JPEG shards and does not re-encode WebP. Prepare {JPEG_W21} instead")


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
    """A split of one of timm's downloads: its shards and, where _info.json says, their counts."""
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
        raise SourceError(f"{origin} has no \"splits\" object: is it the {TIMM_INFO} of one of timm's downloads?")
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


def wds_splits(root: Path, spec: TimmSet = IMAGENET_1K) -> dict[str, WdsSplit]:
    """Each split's shards: as _info.json lists them where it is there (present or not), else the shard
    files present (then without counts)."""
    info = root / TIMM_INFO
    if info.is_file():
        text = decoded_text(readable_file(info, "it lists the shards").read_bytes(), str(info))
        listed = parse_wds_info(text, str(info))
        if "webp" in str(json.loads(text).get("name", "")).lower():
            raise SourceError(webp_refusal(str(info)))
        if spec.held_out_shards and "train" in listed:
            return held_out_splits(listed["train"], spec.held_out_shards, str(info))
        missing = [name for name in TIMM_SPLITS.values() if name not in listed]
        if missing:
            raise SourceError(f"{info} lists no {missing[0]!r} split: is it the {TIMM_INFO} of timm/imagenet-1k-wds, "
                              "-12k-wds or -22k-wds?")
        return {split: listed[name] for split, name in TIMM_SPLITS.items()}
    if spec.held_out_shards:  # its numbering in full: which shards are val does not hang on those present
        numbered = tuple(f"{spec.prefix}-train-{n:04d}.tar" for n in range(spec.shard_counts["train"]))
        beyond = sorted({p.name for p in root.glob(spec.shard_pattern("train"))} - set(numbered))
        if beyond:
            raise SourceError(f"{root} holds {beyond[0]}, which is not among {spec.repo}'s {len(numbered):,} train "
                              f"shards ({numbered[0]} to {numbered[-1]}): put its {TIMM_INFO} beside the shards, "
                              "which lists them")
        return held_out_splits(WdsSplit(numbered, None, None), spec.held_out_shards, f"{spec.repo}'s layout")
    found = {split: tuple(sorted(p.name for p in root.glob(spec.shard_pattern(split)))) for split in TIMM_SPLITS}
    for split, names in found.items():
        if not names:
            raise SourceError(f"{root} holds no {spec.shard_pattern(split)}: download {spec.repo}'s "
                              f"{TIMM_SPLITS[split]} shards (and its {TIMM_INFO}, which counts them)")
    return {split: WdsSplit(names, None, None) for split, names in found.items()}


def held_out_splits(train: WdsSplit, shards: int, origin: str) -> dict[str, WdsSplit]:
    """A download without a val split: its last `shards` train shards by name (by number: the names are
    zero-padded) are val, the rest train. Pure."""
    if len(train.filenames) <= shards:
        raise SourceError(f"{origin} lists {len(train.filenames)} train shards: too few to hold {shards} out as val "
                          f"(the whole download lists 2,048): download {TIMM_INFO} again")
    rows = sorted(zip(train.filenames, train.shard_lengths or (None,) * len(train.filenames)))
    cut = len(rows) - shards

    def part(rows: list[tuple[str, int | None]]) -> WdsSplit:
        lengths = tuple(length for _, length in rows) if train.shard_lengths else None
        return WdsSplit(tuple(name for name, _ in rows), lengths, sum(lengths) if lengths else None)

    return {"train": part(rows[:cut]), "val": part(rows[cut:])}


def wds_gap(root: Path, split: WdsSplit, info: bool, known: int | None = None, spec: TimmSet = IMAGENET_1K) -> Gap:
    """The shards _info.json lists that are not there; without it, of the `known` shards of the
    download's own layout (for timm/imagenet-1k-wds, where the classes are ImageNet-1k's; for a download
    whose val is held out, its numbering in full), or else of the numbering of those that are there
    (imagenet1k-train-0000.tar ...)."""
    if info or spec.held_out_shards:
        return Gap("shards", len(split.filenames), TIMM_INFO if info else f"{spec.repo}'s layout",
                   tuple(name for name in split.filenames if not (root / name).exists()))
    numbered = [m for name in split.filenames if (m := spec.shard_number().match(name))]
    if not numbered:
        return Gap("shards", len(split.filenames), "the files present")
    prefix, width = numbered[0].group(1), len(numbered[0].group(2))
    numbers = {int(m.group(2)) for m in numbered}
    if known is None:
        return numbering_gap(sorted(numbers), lambda n: f"{prefix}{n:0{width}d}.tar", "shards")
    return Gap("shards", known, f"{spec.repo}'s layout",
               tuple(f"{prefix}{n:0{width}d}.tar" for n in range(known) if n not in numbers))


def wds_files(root: Path, spec: TimmSet = IMAGENET_1K) -> list[Path]:
    """The files that identify the download: the shards present, _info.json and the class list."""
    splits = wds_splits(root, spec)
    shards = [root / name for split in SPLITS for name in splits[split].filenames if (root / name).is_file()]
    small = [path for path in (root / TIMM_INFO, class_list_file([root])) if path is not None and path.is_file()]
    return shards + small


def wds_shards_present(root: Path, listed: WdsSplit, missing: set[str], wnids: tuple[str, ...],
                       spec: TimmSet, table: str | None) -> list[WdsShard]:
    lengths = listed.shard_lengths or (None,) * len(listed.filenames)
    present = [(root / name, count) for name, count in zip(listed.filenames, lengths) if name not in missing]
    kind = W21Shard if table != spec.table else WdsShard  # in another table than its .cls numbers: by name
    return [kind(str(readable_file(path, "a shard")), path.stat().st_size, count, wnids, spec.repo)
            for path, count in present]


def timm_classes(root: Path, table: str | None) -> list[ClassInfo]:
    """A built-in table (12k's, 22k's, w21's); for ImageNet-1k, a class list beside the shards or the built-in 1000."""
    if table is not None:
        names = builtin_class_names(table)
        return class_table(list(names), names)
    return read_class_list(class_list_file([root])).classes


class WdsShards(Source):
    """One of timm's WebDataset downloads: its shards, one part each; .cls is the class index in the
    sorted-wnid order (this project's), checked against the names where they carry a wnid."""

    def __init__(self, root: Path, spec: TimmSet = IMAGENET_1K, table: str | None = None):
        self.root, self.spec, self.layout, self.table = root, spec, spec.NAME, table or spec.table
        self.splits_info = wds_splits(root, spec)
        self.classes = timm_classes(root, self.table)
        wnids = tuple(c.wnid for c in self.classes)
        info = (root / TIMM_INFO).is_file()
        self._parts, self._declared = {}, {}
        stated = spec is not IMAGENET_1K or len(self.classes) == IMAGENET_1K_CLASSES
        for split, listed in self.splits_info.items():
            gap = wds_gap(root, listed, info, spec.shard_counts.get(split) if stated else None, spec)
            self._parts[split] = wds_shards_present(root, listed, set(gap.missing), wnids, spec, self.table)
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

    def class_subsets(self) -> dict[str, list[int]]:
        """22k: its val is 12k's, evaluated also among the 12k classes alone ("12k")."""
        return {table.removeprefix("imagenet-"): subset_indices(self.classes, builtin_class_names(table))
                for table in self.spec.subsets}


def subset_indices(classes: list[ClassInfo], subset: dict[str, str]) -> list[int]:
    """The indices in `classes` of the subset's wnids, in the subset's (sorted) order. Pure."""
    index = {c.wnid: c.index for c in classes}
    missing = [wnid for wnid in subset if wnid not in index]
    if missing:
        raise SourceError(f"class {missing[0]} of the subset is not in the class table ({len(missing)} such): the "
                          "tables prepare ships do not belong together; reinstall it")
    return [index[wnid] for wnid in subset]
