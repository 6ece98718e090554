"""What every source layout shares, and the layout of ImageNet's official archives.

- The rules for names: a sample key from a member or file name (`image_key`), `SourceError`, `Item`.
- Tars read without webdataset: `iterate_tar` (sliced where plain), `iterate_whole_tar` (streamed and
  proven whole), the byte ranges of the official archives (`read_range`, `archive_members`).
- `Source`, the base class of a layout: its classes, labels, parts, and what the download declares
  it holds (`declared`, prepare/completeness.py); files listed in chunks (`FileChunk`).
- official:    ILSVRC2012_img_train.tar (one tar per class inside), ILSVRC2012_img_val.tar,
               ILSVRC2012_devkit_t12.tar.gz; read as streams, never extracted (`OfficialArchives`).

The extracted and Kaggle trees (on disk or in Kaggle's zip) are in prepare/trees.py and
prepare/zip_tree.py, the Hugging Face hub's layouts in prepare/hub_sources.py and prepare/hub_parquet.py;
which layout a folder holds, and opening it, in prepare/layouts.py.

Names inside archives only ever become sample keys inside shards, never paths on disk.
"""

from __future__ import annotations

import collections
import gzip
import io
import os
import random
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np

from prepare.completeness import Declared, Gap
from prepare.labels import (
    Devkit, LabelError, check_val_labels, class_table, devkit_train_count, leaf_synsets, read_devkit,
    val_wnids_from_devkit, WNID,
)
from shards.errors import UserError
from shards.format import MAX_KEY_LENGTH
from shards.layout import SPLITS
from shards.manifest import ClassInfo

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
KAGGLE_DATA = "ILSVRC/Data/CLS-LOC"
KAGGLE_VAL_CSV = "LOC_val_solution.csv"
KAGGLE_SYNSETS = "LOC_synset_mapping.txt"
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


# ---------------------------------------------------------------- tars, read without webdataset

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

    Unlike tarfile's stream reader (and so webdataset's), it refuses a tar in which a member's
    header follows what would be its end: a header zeroed or garbled in the middle would otherwise
    end the archive there, silently, and lose the members after it. (Other bytes after the end,
    zeros or junk, are left alone, as tarfile leaves them.)

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
    if holds_a_tar_header(memoryview(data)[end:]):
        raise members_lost_after(end, origin)


def members_lost_after(end: int, origin: str) -> SourceError:
    return SourceError(f"{origin} has a damaged tar header at byte {end} of its tar (members follow what would be "
                       "its end, and would be lost): copy or download it again")


_OCTAL_OR_PAD = np.zeros(256, bool)
_OCTAL_OR_PAD[list(b"01234567 \0")] = True


def holds_a_tar_header(data) -> bool:
    """Whether any whole 512-byte block of `data` (aligned as the tar's) is a tar header by its
    checksum, as tarfile would take it. Vectorised: a block is looked at closely only where its
    checksum field holds octal digits, spaces and NULs alone (image bytes: about 1 in 10^11)."""
    count = len(data) // _BLOCK
    if not count:
        return False
    blocks = np.frombuffer(data, np.uint8, count * _BLOCK).reshape(count, _BLOCK)
    fields = blocks[:, 148:156]
    candidates = np.flatnonzero(_OCTAL_OR_PAD[fields].all(axis=1) & (fields >= 0x30).any(axis=1))
    return any(checksum_matches(bytes(blocks[i])) for i in candidates)


def checksum_matches(header: bytes) -> bool:
    """tarfile's test of a header block: its checksum field, octal, equals the sum of its bytes with
    that field as spaces (unsigned or signed, as old tars wrote it)."""
    field = header[148:156].split(b"\0", 1)[0].strip()
    if not field or not field.isdigit() or b"8" in field or b"9" in field:
        return False
    rest = header[:148] + b" " * 8 + header[156:]
    return int(field, 8) in (sum(rest), sum(b - 256 if b > 127 else b for b in rest))


class HeaderScan:
    """holds_a_tar_header over a stream fed in order from a block boundary of the tar."""

    def __init__(self):
        self.carry, self.found = b"", False

    def feed(self, data: bytes) -> None:
        if self.found:
            return
        data = self.carry + data
        whole = len(data) // _BLOCK * _BLOCK
        self.found = holds_a_tar_header(memoryview(data)[:whole])
        self.carry = data[whole:]


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
        after = HeaderScan()
        after.feed(window.bytes_at(stream.offset + _BLOCK, window.pos - stream.offset - _BLOCK))
        while chunk := window.read(1 << 20):  # to its end: gzip checks its CRC and length there
            after.feed(chunk)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exn:
        raise SourceError(f"cannot read {origin}: {exn}. It is truncated or corrupt: download it again") from None
    if len(end) < _BLOCK:
        raise SourceError(f"{origin} is truncated (no end-of-archive blocks): download it again")
    if end != _ZERO_BLOCK or after.found:  # tarfile stopped at a header it could not read, or before one
        raise members_lost_after(stream.offset, origin)


def gzipped_tar_images(path: str) -> Iterator[tuple[str, str, str, bytes]]:
    """(member name, "path:member", file stem, bytes) of the images of a gzipped tar, read as a
    stream and proven whole (`iterate_whole_tar`): the hub's archives, ImageNetV2's."""
    with open(path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as stream:
        for member, image in iterate_whole_tar(stream, path):
            origin = f"{path}:{member}"
            stem = image_stem(member, origin)
            if stem is not None:
                yield member, origin, stem, image


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


# ---------------------------------------------------------------- a layout

def readable_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise SourceError(f"{path} not found: {what}")
    if not os.access(path, os.R_OK):
        raise SourceError(f"{path} is not readable (permissions): {what}")
    return path


class Part(Protocol):
    """A piece of a split that a worker reads on its own: a class tar, a range of val members, a chunk
    of files, a hub archive or shard, an ImageNetV2 archive (each layout's module defines its own)."""
    size: int  # bytes it yields, about: what the shared read balances its shares by

    def wnids(self) -> set[str]: ...

    def items(self) -> Iterator["Item"]: ...


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

    def declared(self, split: str) -> Declared:
        """What the download declares the split holds (its pieces and count), and what of it is there
        before anything is read: prepare checks it before writing (prepare/completeness.py)."""
        return Declared(split)

    def estimated_count(self, split: str) -> int:
        """About how many images the split holds, before reading it (for the disk-space check)."""
        raise NotImplementedError

    def class_index(self) -> dict[str, int]:
        return {c.wnid: c.index for c in self.classes}

    def val_keys(self) -> set[str] | None:
        """The val images' keys where the layout lists them before reading (its labels name them)."""
        return None

    def real_labels(self, val_keys: set[str]) -> dict[str, list[int]] | None:
        """The ReaL label sets of the val images by key, where asked for (prepare/eval_sets.py)."""
        return None

    def check_real_labels(self, allow_partial: bool) -> None:
        """Check the ReaL labels against the val images before reading, where both are known (after
        the completeness check, so a missing val image is named as such)."""


# ---------------------------------------------------------------- the official archives

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
            if key in self.val_wnids:
                labels[key] = self.val_wnids[key]
            count += 1
            if count == per_range:
                ranges.append(MemberRange(str(self.val_tar), start, end - start, labels))
                start, labels, count = None, {}, 0
        if start is not None:
            ranges.append(MemberRange(str(self.val_tar), start, end - start, labels))
        return ranges


# ---------------------------------------------------------------- files, in chunks (prepare/trees.py's layouts)

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


FILES_PER_CHUNK = 1024  # tree files per part: each part opens up to one spill file per bucket


def list_images(folder: Path) -> list[tuple[str, str]]:
    """(key, path) of the images directly in `folder`, sorted by name (paths as strings: a tree lists
    1.28 M of them)."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file():
                key = image_key(entry.name, entry.path)
                if key is not None:
                    found.append((key, entry.path))
    return sorted(found)


def decoded_text(data: bytes, where: str) -> str:
    """A small text file of a download (a CSV, a class list) as UTF-8, the same on disk and in a zip."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exn:
        raise SourceError(f"{where} is not UTF-8 text ({exn.reason} at byte {exn.start}): it is damaged, "
                          "download it again") from None


def estimate_bytes(files: list, size_of=lambda path: Path(path).stat().st_size, sample: int = 2000) -> int:
    """Total size of many files from the sizes of a fixed sample of them (stat of 1.3 M files is slow).
    The sample depends only on how many there are, so a zip's members listed as its extracted tree's
    files give the tree's estimate."""
    if not files:
        return 0
    picked = random.Random(0).sample(files, min(sample, len(files)))
    return int(sum(map(size_of, picked)) * len(files) / len(picked))


def sized_chunks(rows: list | tuple, total_bytes: int) -> list[tuple[tuple, int]]:
    """Rows of a listing of files in consecutive chunks of FILES_PER_CHUNK (the parts), each with its
    share of `total_bytes`."""
    per_file = total_bytes / max(len(rows), 1)
    return [(chunk, round(per_file * len(chunk)))
            for chunk in (tuple(rows[i:i + FILES_PER_CHUNK]) for i in range(0, len(rows), FILES_PER_CHUNK))]


def file_chunks(rows: list[tuple[str, str, str]] | tuple, total_bytes: int) -> list[FileChunk]:
    """(key, wnid, path) rows in chunks of FILES_PER_CHUNK, each sized by its share of `total_bytes`."""
    return [FileChunk(chunk, size) for chunk, size in sized_chunks(rows, total_bytes)]
