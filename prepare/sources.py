"""The five source layouts, each yielding `Item`s (key, wnid, bytes or path) per split.

- official:       ILSVRC2012_img_train.tar (one tar per class inside), ILSVRC2012_img_val.tar,
                  ILSVRC2012_devkit_t12.tar.gz; read as streams, never extracted.
- imagefolder:    train/<wnid>/*.JPEG and val/<wnid>/*.JPEG (or a flat val/ plus the devkit).
- kaggle:         ILSVRC/Data/CLS-LOC/{train/<wnid>/,val/} with LOC_val_solution.csv and
                  LOC_synset_mapping.txt.
- hf-imagenet-1k: the Hugging Face hub's ILSVRC/imagenet-1k: data/train_images_{0..4}.tar.gz and
                  data/val_images.tar.gz (gzipped tars of <stem>_<wnid>.JPEG), classes.py beside.
- timm-wds:       the hub's timm/imagenet-1k-wds: WebDataset shards imagenet1k-train-NNNN.tar and
                  imagenet1k-validation-NN.tar (KEY.jpg, KEY.cls, KEY.json), _info.json beside.

Names inside archives only ever become sample keys inside shards, never paths on disk.
"""

from __future__ import annotations

import collections
import gzip
import io
import json
import os
import random
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.labels import (
    Devkit, LabelError, builtin_class_names, check_sorted_order, check_val_labels, class_table, leaf_synsets,
    parse_hf_classes, parse_kaggle_val_solution, parse_synset_mapping, read_devkit, val_wnids_from_devkit, WNID,
)
from shards.errors import UserError
from shards.format import BAD_LABEL, MAX_KEY_LENGTH, parse_label
from shards.layout import SPLITS
from shards.manifest import ClassInfo

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
KAGGLE_DATA = Path("ILSVRC/Data/CLS-LOC")
KAGGLE_VAL_CSV = "LOC_val_solution.csv"
KAGGLE_SYNSETS = "LOC_synset_mapping.txt"
HF_DATA = "data"  # ILSVRC/imagenet-1k: the archives' folder in the dataset's repository
HF_TRAIN = re.compile(r"^train_images_(\d+)\.tar\.gz$")
HF_VAL = "val_images.tar.gz"
HF_CLASSES = "classes.py"
HF_SCRIPT = "imagenet-1k.py"  # the loading script: how many train archives it reads
HF_SCRIPT_TRAIN_COUNT = re.compile(r"train_images_\{i\}\.tar\.gz['\"]\s*for\s+i\s+in\s+range\(\s*(\d+)\s*\)")
TIMM_INFO = "_info.json"
TIMM_SPLITS = {"train": "train", "val": "validation"}  # this project's split -> timm's
TIMM_SHARDS = {"train": "imagenet1k-train-*.tar", "val": "imagenet1k-validation-*.tar"}
AVERAGE_IMAGE_BYTES = 110_000  # ImageNet's: a count from bytes where the source states none
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
KEY = re.compile(r"^[A-Za-z0-9_-]+$")  # dot-free, slash-free: safe as a WebDataset key
READ_SIZE = 1 << 16  # tarfile's reads of an archive streamed front to back (its default, 10 KiB, is slower)
TAR_END = b"\0" * 1024  # every complete tar ends with two zero blocks
OFFICIAL_FILES = {  # name -> why it is needed, for the error when it is missing
    TRAIN_TAR: "the official train archive is needed next to the others",
    VAL_TAR: "the official validation archive is needed next to the others",
    DEVKIT: "the devkit holds the validation labels (meta.mat)",
}


class SourceError(UserError, ValueError):
    """The source cannot be read as ImageNet: the message names the file and what to do."""


@dataclass(frozen=True)
class Item:
    """One image to prepare: its key, its wnid, and its bytes."""
    key: str
    wnid: str
    origin: str  # where it came from, for error messages
    data: bytes


def image_key(name: str, origin: str) -> str | None:
    """Sample key of an archive member or file name; None for what is not an image. A member name
    that is absolute or climbs with '..' is refused: no official archive has one."""
    stem = image_stem(name, origin)
    return None if stem is None else checked_key(stem, name, origin)


def image_stem(name: str, origin: str) -> str | None:
    """The file stem of an image's name (its base name before the suffix); None for what is not an
    image. An unsafe name is refused."""
    check_safe_name(name, origin)
    base = name.rsplit("/", 1)[-1]
    stem, dot, suffix = base.rpartition(".")
    if not dot or "." + suffix.lower() not in IMAGE_SUFFIXES:
        return None
    return stem


def check_safe_name(name: str, origin: str) -> None:
    if name.startswith("/") or ".." in name.split("/"):
        raise SourceError(f"{origin}: the member name {name!r} is unsafe (an absolute path, or one that climbs "
                          "with '..') and was refused. ImageNet's archives have none: use them as downloaded.")


def checked_key(stem: str, name: str, origin: str) -> str:
    """`stem` as a sample key: letters, digits, _ and - only, and short enough for a shard's tar headers."""
    if not KEY.match(stem):
        raise SourceError(f"{origin}: image name {name!r} cannot be a sample key (only letters, digits, _ and -)")
    if len(stem) > MAX_KEY_LENGTH:
        raise SourceError(f"{origin}: image name {name!r} is longer than {MAX_KEY_LENGTH} characters before its "
                          "suffix, the longest sample key a shard's tar headers hold: shorten it")
    return stem


def check_tar_complete(head_and_tail: bytes, origin: str) -> None:
    if not head_and_tail.endswith(TAR_END):
        raise SourceError(f"{origin} is truncated (no end-of-archive blocks): copy or download it again")


def check_tar_file_complete(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - len(TAR_END)))
        check_tar_complete(f.read(), str(path))


def iterate_tar(data: bytes, origin: str) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) of the regular files of a tar held in memory, as webdataset's reader
    (`tar_file_iterator` with skip_meta=None) yields them: tarfile's "r|*" stream, regular files
    only, top-level names of the form __*__ left out. Written out here so that prepare never
    imports webdataset, which imports torch (1-2 s a run, and larger forked workers).

    A tar of plain members only (`plain_tar_members`: what the official archives hold) is sliced
    without tarfile; anything else (links, pax or GNU long names, odd or damaged headers,
    compression) is read by tarfile from the start (`iterate_whole_tar`).

    Unlike tarfile's stream reader (and so webdataset's), it refuses a tar whose end-of-archive
    block is followed by anything but zeros: a header zeroed or garbled in the middle would
    otherwise end the archive there, silently, and lose the members after it.

    Links and other special members are skipped: nothing in a hostile archive can point outside it.
    """
    members = plain_tar_members(data)
    if members is None:
        yield from iterate_whole_tar(io.BytesIO(data), origin)
        return
    for name, start, size in members:
        if "/" not in name and name.startswith("__") and name.endswith("__"):
            continue
        yield name, data[start:start + size]
    end = members[-1][1] + -(-members[-1][2] // _BLOCK) * _BLOCK if members else 0
    check_only_zeros_after_the_end(data[end:], end, origin)


def check_only_zeros_after_the_end(rest: bytes, end: int, origin: str) -> None:
    """After a tar's end-of-archive block come only zeros (the padding to tar's record size); any
    other byte there is a member after a damaged header."""
    if rest.strip(b"\0"):
        raise SourceError(f"{origin} has a damaged tar header at byte {end} of its tar (more data follows what "
                          "would be its end): copy or download it again")


class TailWindow:
    """A file read front to back that keeps its last few reads (at least `keep` bytes) and where they
    lay: what a tar header looked like after tarfile has read past it. tarfile's stream reader reads
    READ_SIZE bytes at a time, no further than the header or data it needs."""

    def __init__(self, raw, keep: int = 4 * READ_SIZE):
        self.raw, self.keep, self.pos = raw, keep, 0
        self.reads: collections.deque[tuple[int, bytes]] = collections.deque()  # (offset, bytes)
        self.kept = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.reads.append((self.pos, data))
        self.pos += len(data)
        self.kept += len(data)
        while self.kept - len(self.reads[0][1]) >= self.keep:
            self.kept -= len(self.reads.popleft()[1])
        return data

    def bytes_at(self, offset: int, size: int) -> bytes:
        start = self.reads[0][0] if self.reads else 0
        if offset < start:
            raise AssertionError(f"the tar's last header at {offset} left the window ({start}..{self.pos})")
        return b"".join(data for _, data in self.reads)[offset - start:offset - start + size]


def iterate_whole_tar(fileobj, origin: str) -> Iterator[tuple[str, bytes]]:
    """The regular files (top-level __*__ names left out, as webdataset does) of a tar read
    once front to back, here from a file or a gzip stream, then proof that it was whole. tarfile's
    stream reader ends silently at a header it cannot parse and at a cut on a block boundary; here
    either is an error, and the rest of the stream is read, so that gzip checks its CRC and length.
    Every failure is one SourceError naming `origin` (the archive or shard)."""
    window = TailWindow(fileobj)
    try:
        stream = tarfile.open(fileobj=window, mode="r|", bufsize=READ_SIZE)
        for tarinfo in stream:
            name = tarinfo.name
            if not tarinfo.isreg() or name is None:
                continue
            if "/" not in name and name.startswith("__") and name.endswith("__"):
                continue
            yield name, stream.extractfile(tarinfo).read()
            stream.members = []
        end = window.bytes_at(stream.offset, _BLOCK)
        nonzero_after = bool(window.bytes_at(stream.offset, window.pos - stream.offset).strip(b"\0"))
        while chunk := window.read(1 << 20):  # to its end: gzip checks its CRC and length there
            nonzero_after = nonzero_after or bool(chunk.strip(b"\0"))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exn:
        raise SourceError(f"cannot read {origin}: {exn}. It is truncated or corrupt: download it again") from None
    if len(end) < _BLOCK:
        raise SourceError(f"{origin} is truncated (no end-of-archive blocks): download it again")
    if end != _ZERO_BLOCK or nonzero_after:
        raise SourceError(f"{origin} has a damaged tar header at byte {stream.offset} of its tar (more data follows "
                          "what would be its end): download it again")


# A number field that tarfile's nti reads as octal: spaces, octal digits, spaces, then a NUL and
# anything (nti reads up to the first NUL and strips). Stricter than nti: what it refuses is left to tarfile.
_OCTAL_FIELD = re.compile(rb" *[0-7]* *(?:\0.*)?", re.DOTALL)
_NUMBER_FIELDS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156), (329, 337), (337, 345))
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\x5d\x00\x00\x80", b"\xfd7zXZ")  # what "r|*" would decompress
_BLOCK = tarfile.BLOCKSIZE
_ZERO_BLOCK = bytes(_BLOCK)


def plain_tar_members(data: bytes) -> list[tuple[str, int, int]] | None:
    """(name, data offset, size) of every member, where the tar holds only what tarfile's stream
    reader would read as plain regular files (type "0", or NUL without a trailing slash; no ustar
    prefix; octal number fields; the unsigned checksum right; data within `data`) up to a zero
    block or the end; None otherwise, and then tarfile reads it. Names as tarfile decodes them."""
    if data.startswith(_COMPRESSED):
        return None
    members, offset, end = [], 0, len(data)
    while True:
        if offset == end:
            return members if offset else None  # tarfile: an empty file is an error
        if offset + _BLOCK > end:
            return None
        header = data[offset:offset + _BLOCK]
        if header == _ZERO_BLOCK:
            return members if offset else None
        for a, b in _NUMBER_FIELDS:
            if not _OCTAL_FIELD.fullmatch(header, a, b):
                return None
        if header[345] or header[156] not in b"0\0":  # a ustar prefix; not a regular file
            return None
        checksum = header[148:156].split(b"\0", 1)[0].strip()
        if int(checksum or b"0", 8) != 256 + sum(header[:148]) + sum(header[156:]):
            return None
        name = header[:100].split(b"\0", 1)[0].decode(tarfile.ENCODING, "surrogateescape")
        if header[156] == 0 and name.endswith("/"):  # an old-style directory
            return None
        size_field = header[124:136].split(b"\0", 1)[0].strip()
        size = int(size_field or b"0", 8)
        start = offset + _BLOCK
        if start + size > end:
            return None
        members.append((name, start, size))
        offset = start + -(-size // _BLOCK) * _BLOCK


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


@dataclass(frozen=True)
class FileChunk:
    """Consecutive files of an extracted tree: a worker reads and checks them."""
    files: tuple[tuple[str, str, str], ...]  # (key, wnid, path)
    size: int  # bytes, estimated (the files are not each statted: 1.3 M stats take minutes on shared storage)

    def wnids(self) -> set[str]:
        return {wnid for _, wnid, _ in self.files}

    def items(self) -> Iterator[Item]:
        for key, wnid, path in self.files:
            try:
                data = Path(path).read_bytes()
            except OSError as exn:
                raise SourceError(f"cannot read {path}: {exn.strerror}") from None
            yield Item(key, wnid, path, data)


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
        with open(self.path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as stream:
            for member, image in iterate_whole_tar(stream, self.path):
                origin = f"{self.path}:{member}"
                stem = image_stem(member, origin)
                if stem is not None:
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


Part = ClassTar | MemberRange | FileChunk | GzipArchive | WdsShard
FILES_PER_CHUNK = 1024  # tree files per part: each part opens up to one spill file per bucket


def read_range(archive: str, offset: int, size: int, origin: str) -> bytes:
    with open(archive, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise SourceError(f"{origin} is truncated: copy or download {archive} again")
    return data


def archive_members(path: Path) -> Iterator[tarfile.TarInfo]:
    """The members of an archive from its headers alone: tarfile in random-access mode seeks over
    each member's data."""
    check_tar_file_complete(path)
    try:
        with tarfile.open(path, "r:") as tar:
            yield from tar
    except (tarfile.TarError, OSError, EOFError) as exn:
        raise SourceError(f"cannot read {path}: {exn}. It is truncated or corrupt: copy or download it again") from None


def readable_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise SourceError(f"{path} not found: {what}")
    if not os.access(path, os.R_OK):
        raise SourceError(f"{path} is not readable (permissions): {what}")
    return path


class Source:
    """A layout's classes, labels and parts. Subclasses fill in `parts` and the bookkeeping."""
    layout: str
    root: Path
    classes: list[ClassInfo]
    splits: tuple[str, ...] = SPLITS  # the evaluation sets (prepare/eval_sets.py) add to these

    def parts(self, split: str) -> list[Part]:
        """The split as pieces that a worker reads on its own (each with `items()`), in order."""
        raise NotImplementedError

    def split_bytes(self, split: str) -> int:
        """Bytes of a split in the source (exact for archives, estimated for trees)."""
        raise NotImplementedError

    def expected_count(self, split: str) -> int | None:
        """How many images the split must yield, where the labels say so (the val ground truth)."""
        return None

    def estimated_count(self, split: str) -> int:
        """About how many images the split holds, before reading it (for the disk-space check)."""
        raise NotImplementedError

    def class_index(self) -> dict[str, int]:
        return {c.wnid: c.index for c in self.classes}

    def real_labels(self, val_keys: set[str]) -> dict[str, list[int]] | None:
        """The ReaL label sets of the val images by key, where asked for (prepare/eval_sets.py)."""
        return None


def fingerprint(root: Path, layout: str) -> dict:
    """What identifies a source cheaply: path, layout, and for archives and shards their size and mtime
    (with the class list and the other small files they are read with).

    Trees are identified by path and layout only: listing 1.3 M files would make an idempotent
    re-run take minutes on shared storage.
    """
    files = []
    if layout == "official":
        for name, why in OFFICIAL_FILES.items():
            st = readable_file(root / name, why).stat()
            files.append({"path": name, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    elif layout in HUB_FILES:
        for path in HUB_FILES[layout](root):
            st = path.stat()
            files.append({"path": os.path.relpath(path, root), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return {"path": str(root), "layout": layout, "files": files}


def detect_layout(root: Path) -> str:
    """Which of the five layouts `root` holds; SourceError listing them when none."""
    if not root.exists():
        raise SourceError(f"--source {root} does not exist")
    if not root.is_dir():
        raise SourceError(f"--source {root} is not a directory: give the folder that holds the ImageNet files")
    if (root / TRAIN_TAR).exists() or (root / VAL_TAR).exists():
        return "official"
    if (root / KAGGLE_DATA / "train").is_dir():
        return "kaggle"
    if hf_data_folder(root) is not None:
        return "hf-imagenet-1k"
    if (root / TIMM_INFO).is_file() or any(any(root.glob(pattern)) for pattern in TIMM_SHARDS.values()):
        return "timm-wds"
    if (root / "train").is_dir():
        return "imagefolder"
    raise SourceError(
        f"--source {root} holds no ImageNet layout. Expected one of:\n"
        f"  official archives: {TRAIN_TAR}, {VAL_TAR}, {DEVKIT}\n"
        "  an extracted tree: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG\n"
        f"  the Kaggle layout: {KAGGLE_DATA}/train/<wnid>/, {KAGGLE_DATA}/val/, {KAGGLE_VAL_CSV}, {KAGGLE_SYNSETS}\n"
        f"  Hugging Face's ILSVRC/imagenet-1k: {HF_DATA}/train_images_0.tar.gz ... and {HF_DATA}/{HF_VAL} "
        f"(this folder or its {HF_DATA}/), {HF_CLASSES} beside them\n"
        f"  Hugging Face's timm/imagenet-1k-wds: {TIMM_SHARDS['train']} and {TIMM_SHARDS['val']}, {TIMM_INFO} "
        "beside them"
    )


def open_source(root: Path) -> Source:
    root = Path(root)
    layout = detect_layout(root)
    return {"official": OfficialArchives, "imagefolder": ImageFolderTree, "kaggle": KaggleTree,
            "hf-imagenet-1k": HubArchives, "timm-wds": WdsShards}[layout](root)


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

    def split_bytes(self, split: str) -> int:
        return (self.train_tar if split == "train" else self.val_tar).stat().st_size

    def expected_count(self, split: str) -> int | None:
        return len(self.val_wnids) if split == "val" else None

    def estimated_count(self, split: str) -> int:
        """val: the ground truth's count; train: the first class tar's count, scaled by bytes."""
        if split == "val":
            return len(self.val_wnids)
        first = self.class_tars()[0]
        with open(self.train_tar, "rb") as f:
            f.seek(first.offset)
            with tarfile.open(fileobj=f, mode="r:") as inner:  # its headers only: seeks over the images
                count = sum(1 for member in inner if member.isreg())
        return round(count * self.split_bytes("train") / max(first.size, 1))

    def parts(self, split: str) -> list[ClassTar] | list[MemberRange]:
        return self.class_tars() if split == "train" else self.val_ranges()

    def class_tars(self) -> list[ClassTar]:
        """The class tars of the train archive, located from its headers, checked against the
        devkit's classes."""
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
        missing = sorted(set(known) - {p.wnid for p in parts})
        if missing:
            raise SourceError(f"{self.train_tar} holds {len(parts)} class archives, the devkit lists {len(known)} "
                              f"(missing e.g. {missing[:3]}): the archive is incomplete, download it again")
        return parts

    def val_ranges(self, per_range: int = 500) -> list[MemberRange]:
        """The val archive cut into ranges of `per_range` consecutive members, located from its
        headers (one 512-byte read per member)."""
        ranges, start, end, labels, count = [], None, 0, {}, 0
        for member in archive_members(self.val_tar):
            start = member.offset if start is None else start
            end = member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
            key = image_key(member.name, f"{self.val_tar}:{member.name}")
            if key in self.val_wnids:
                labels[key] = self.val_wnids[key]
            count += 1
            if count == per_range:
                ranges.append(MemberRange(str(self.val_tar), start, end - start, labels))
                start, labels, count = None, {}, 0
        if start is not None:
            ranges.append(MemberRange(str(self.val_tar), start, end - start, labels))
        return ranges


def list_images(folder: Path) -> list[tuple[str, Path]]:
    """(key, path) of the images directly in `folder`, sorted by name."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file():
                key = image_key(entry.name, entry.path)
                if key is not None:
                    found.append((key, Path(entry.path)))
    return sorted(found)


def list_class_tree(folder: Path) -> list[tuple[str, str, Path]]:
    """(key, wnid, path) for <folder>/<wnid>/<image>, sorted; other folders are ignored."""
    if not folder.is_dir():
        raise SourceError(f"{folder} not found: the split's images are expected there")
    listed = []
    for wnid in sorted(p.name for p in folder.iterdir() if p.is_dir() and WNID.match(p.name)):
        listed.extend((key, wnid, path) for key, path in list_images(folder / wnid))
    if not listed:
        raise SourceError(f"{folder} holds no <wnid>/ folders with images")
    return listed


def estimate_bytes(paths: list[Path], sample: int = 2000) -> int:
    """Total size of many files from the sizes of a fixed sample of them (stat of 1.3 M files is slow)."""
    if not paths:
        return 0
    picked = random.Random(0).sample(paths, min(sample, len(paths)))
    return int(sum(p.stat().st_size for p in picked) * len(paths) / len(picked))


class TreeSource(Source):
    """Images as files: train/<wnid>/ folders plus a val/ listing with labels."""

    def __init__(self, root: Path, train_dir: Path, names: dict[str, str]):
        self.root = root
        self.listing = {"train": list_class_tree(train_dir)}
        self.classes = class_table({wnid for _, wnid, _ in self.listing["train"]}, names)
        self.listing["val"] = self.list_val()
        check_val_labels({key: wnid for key, wnid, _ in self.listing["val"]}, self.classes)
        self._bytes = {split: estimate_bytes([p for _, _, p in rows]) for split, rows in self.listing.items()}

    def list_val(self) -> list[tuple[str, str, Path]]:
        raise NotImplementedError

    def split_bytes(self, split: str) -> int:
        return self._bytes[split]

    def expected_count(self, split: str) -> int | None:
        return len(self.listing[split])

    def estimated_count(self, split: str) -> int:
        return len(self.listing[split])

    def parts(self, split: str) -> list[FileChunk]:
        rows = [(key, wnid, str(path)) for key, wnid, path in self.listing[split]]
        per_file = self._bytes[split] / max(len(rows), 1)
        return [FileChunk(tuple(rows[i:i + FILES_PER_CHUNK]), round(per_file * len(rows[i:i + FILES_PER_CHUNK])))
                for i in range(0, len(rows), FILES_PER_CHUNK)]


def labelled_flat_folder(folder: Path, labels: dict[str, str], labels_file: str) -> list[tuple[str, str, Path]]:
    if not folder.is_dir():
        raise SourceError(f"{folder} not found: the validation images are expected there")
    rows = []
    for key, path in list_images(folder):
        if key not in labels:
            raise LabelError(f"{path}: no label for {key} in {labels_file}")
        rows.append((key, labels[key], path))
    return rows


class ImageFolderTree(TreeSource):
    layout = "imagefolder"

    def __init__(self, root: Path):
        self.devkit = read_devkit(root / DEVKIT) if (root / DEVKIT).is_file() else None
        names = {}
        if self.devkit:
            names = {s.wnid: s.words for s in leaf_synsets(self.devkit.synsets)}
        elif (root / KAGGLE_SYNSETS).is_file():
            names = parse_synset_mapping((root / KAGGLE_SYNSETS).read_text())
        super().__init__(root, root / "train", names)

    def list_val(self) -> list[tuple[str, str, Path]]:
        val = self.root / "val"
        if not val.is_dir():
            raise SourceError(f"{val} not found: the extracted tree needs val/<wnid>/*.JPEG next to train/")
        if any(p.is_dir() and WNID.match(p.name) for p in val.iterdir()):
            return list_class_tree(val)
        if self.devkit is None:
            raise SourceError(f"{val} holds images without <wnid>/ folders: put {DEVKIT} in {self.root} "
                              "so that their labels can be read, or sort them into val/<wnid>/")
        return labelled_flat_folder(val, val_wnids_from_devkit(self.devkit), DEVKIT)


class KaggleTree(TreeSource):
    layout = "kaggle"

    def __init__(self, root: Path):
        mapping = readable_file(root / KAGGLE_SYNSETS, "the Kaggle layout names its classes there")
        readable_file(root / KAGGLE_VAL_CSV, "the Kaggle layout keeps its validation labels there")
        super().__init__(root, root / KAGGLE_DATA / "train", parse_synset_mapping(mapping.read_text()))

    def list_val(self) -> list[tuple[str, str, Path]]:
        labels = parse_kaggle_val_solution((self.root / KAGGLE_VAL_CSV).read_text())
        return labelled_flat_folder(self.root / KAGGLE_DATA / "val", labels, KAGGLE_VAL_CSV)


# ---------------------------------------------------------------- the Hugging Face hub's layouts

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


def hf_train_archives(data: Path, folders: list[Path]) -> list[Path]:
    """train_images_0.tar.gz ... in number order, all of them: numbered from 0 without a gap, as many
    as the loading script reads where it is beside them."""
    numbered = sorted((int(m.group(1)), data / p.name) for p in data.iterdir() if (m := HF_TRAIN.match(p.name)))
    if not numbered:
        raise SourceError(f"{data} holds no train_images_N.tar.gz: download ILSVRC/imagenet-1k's train archives")
    stated = hf_script_train_count(folders)
    expected = list(range(stated if stated is not None else numbered[-1][0] + 1))
    numbers = [n for n, _ in numbered]
    if numbers != expected:
        missing = sorted(set(expected) - set(numbers))
        because = f" ({HF_SCRIPT} reads {stated})" if stated is not None else ""
        raise SourceError(f"{data} holds train archives number {numbers}, expected 0..{len(expected) - 1}{because}: "
                          + (f"download train_images_{missing[0]}.tar.gz" if missing else "remove the others"))
    return [readable_file(path, "a train archive") for _, path in numbered]


def hf_files(root: Path) -> list[Path]:
    """ILSVRC/imagenet-1k's files that identify it: the archives, the class list, the loading script."""
    data = hf_data_folder(root)
    if data is None:
        raise SourceError(f"{root} holds no {HF_DATA}/train_images_N.tar.gz or {HF_VAL}")
    folders = hf_repository_folders(root, data)
    small = [folder / HF_SCRIPT for folder in folders if (folder / HF_SCRIPT).is_file()]
    extra = [path for path in (class_list_file(folders), hf_devkit(folders)) if path is not None]
    return hf_train_archives(data, folders) + [hf_val_archive(data)] + sorted(set(extra)) + small


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
        self.archives = {"train": hf_train_archives(data, folders), "val": [hf_val_archive(data)]}
        self.class_list = read_class_list(class_list_file(folders))
        self.classes = self.class_list.classes
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

    def expected_count(self, split: str) -> int | None:
        """val: the devkit's ground truth where the devkit is beside the data; the layout states no count."""
        return len(self.val_wnids) if split == "val" and self.val_wnids is not None else None

    def estimated_count(self, split: str) -> int:
        return self.expected_count(split) or max(1, self.split_bytes(split) // AVERAGE_IMAGE_BYTES)


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
    """Each split's shards: as _info.json lists them where it is there, else the shard files present
    (then without counts)."""
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


def wds_shard_paths(root: Path, split: WdsSplit, origin: str) -> list[Path]:
    return [readable_file(root / name, f"a shard {origin} lists: download it") for name in split.filenames]


def wds_files(root: Path) -> list[Path]:
    """timm/imagenet-1k-wds's files that identify it: the shards, _info.json and the class list."""
    splits = wds_splits(root)
    shards = [path for split in SPLITS for path in wds_shard_paths(root, splits[split], TIMM_INFO)]
    small = [path for path in (root / TIMM_INFO, class_list_file([root])) if path is not None and path.is_file()]
    return shards + small


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
        self._parts = {}
        for split, info in self.splits_info.items():
            paths = wds_shard_paths(root, info, TIMM_INFO)
            lengths = info.shard_lengths or (None,) * len(paths)
            self._parts[split] = [WdsShard(str(path), path.stat().st_size, count, wnids)
                                  for path, count in zip(paths, lengths)]

    def parts(self, split: str) -> list[WdsShard]:
        return list(self._parts[split])

    def split_bytes(self, split: str) -> int:
        return sum(part.size for part in self._parts[split])

    def expected_count(self, split: str) -> int | None:
        """What _info.json states (each shard's count is checked as it is read)."""
        return self.splits_info[split].num_samples

    def estimated_count(self, split: str) -> int:
        return self.expected_count(split) or max(1, self.split_bytes(split) // AVERAGE_IMAGE_BYTES)


HUB_FILES = {"hf-imagenet-1k": hf_files, "timm-wds": wds_files}
