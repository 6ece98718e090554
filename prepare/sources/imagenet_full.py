"""The full ImageNet releases of image-net.org: every synset's images as one tar, <wnid>.tar, all in one archive.

    fall11_whole.tar        a plain tar of 21,841 <wnid>.tar (1.31 TB): a part a class tar, located from the
                            archive's headers and read at its offset, as the official train archive's
    winter21_whole.tar.gz   one gzip stream of a tar of 19,167 <wnid>.tar (about 1.1 TB): it cannot be read at
                            an offset without inflating what comes before. The first job reads the stream
                            whole (val and train from one part, inflated in parallel by rapidgzip) and keeps a seek
                            index (prepare/sources/gzip_index.py); every later job reads a part a class tar, as
                            fall11's, each inflated from the index's nearest checkpoint

Labels are a class's index among a table's sorted wnids, a table prepare ships (prepare/labels.py), so no
pass over a 1.1 TB stream is needed to list the classes first. fall11's are ImageNet-22k's 21,841 (timm's
imagenet22k_synsets.txt). winter21's are by default its own 19,167 (`--class-table imagenet-w21`), as timm's
w21 shards number them (.cls) and timm, birder and others train them: a checkpoint trained here is theirs
to evaluate or fine-tune, and the other way round. `--class-table imagenet-22k` labels winter21 in 22k's
table instead (a class has the same index in either release and in timm/imagenet-22k-wds), for whoever
combines it with them; a dataset prepared before winter21's own table was the default keeps 22k's. Either way
the manifest records where its classes lie in the other table (`class_maps`).

Neither release has a val split: prepare holds one out by a fixed rule (`held_out`), ImageNet-21K-P's
(Ridnik et al. 2021): of each class with more than HELD_OUT_FROM images, the first HELD_OUT_PER_CLASS by name
(byte order, where 21K-P's `ls | head -n 50` depends on the locale). The rest is train. The manifest records
the rule (`options`' source layout and this module's constants are what decide it). Images whose shorter side is
under MIN_SIDE px are left out, counted in the log and named under the manifest's `skipped`.
"""

from __future__ import annotations

import contextlib
import logging
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.completeness import Declared, Gap
from prepare.sources.gzip_index import (
    Inflated, Member, archive_stamp, close_readers, indexed_reader, keep_index, load_index,
)
from prepare.labels import WNID, builtin_class_names, class_table
from prepare.sources.base import AVERAGE_IMAGE_BYTES, Item, Signs, Source, SourceError, image_key, readable_file
from prepare.sources.tars import archive_members, check_tar_complete, iterate_tar, iterate_whole_tar_members, read_at
from shards.resources import available_cpus

log = logging.getLogger("prepare")

NAME = "imagenet-full"
FALL11 = "fall11_whole.tar"
WINTER21 = "winter21_whole.tar.gz"
RELEASES = {FALL11: 21_841, WINTER21: 19_167}  # archive -> the synsets it holds
HELD_OUT_PER_CLASS = 50  # val images a class gives (ImageNet-21K-P's)
HELD_OUT_FROM = 500  # ... where it has more than this many (21K-P keeps only such classes)
MIN_SIDE = 32  # pixels: smaller images are left out, counted and named (timm's w21 dropped about 2,000 such)
TABLES = {FALL11: ("imagenet-22k",), WINTER21: ("imagenet-w21", "imagenet-22k")}  # archive -> its tables, default first
TABLE_WORDS = {"imagenet-22k": "ImageNet-22k's 21,841 (fall11's)",
               "imagenet-w21": "winter21's own 19,167 (imagenet-w21)"}
# what this layout decides that the download does not say: in the source's identity, so that a change makes a
# dataset prepared by the old rule another dataset (prepare/sources/__init__.py's Detected.identity); the
# table where it is not 22k's (a dataset prepared in 22k's before winter21's own was the default keeps its identity)
RULES = {"held_out_per_class": HELD_OUT_PER_CLASS, "held_out_from": HELD_OUT_FROM, "min_side": MIN_SIDE}
EXPECTED = (f"image-net.org's full release: {FALL11} or {WINTER21} (a tar of <wnid>.tar), this folder or the file; "
            f"val is held out ({HELD_OUT_PER_CLASS} a class)")


def held_out(names: list[str]) -> set[str]:
    """The member names of one class that go to val: the first HELD_OUT_PER_CLASS in byte order where the
    class has more than HELD_OUT_FROM images, else none. Pure."""
    if len(names) <= HELD_OUT_FROM:
        return set()
    return set(sorted(names)[:HELD_OUT_PER_CLASS])


def class_images(data: bytes, origin: str) -> list[tuple[str, bytes]]:
    """(member name, bytes) of a class tar's images."""
    return [(member, image) for member, image in iterate_tar(data, origin)
            if image_key(member, f"{origin}:{member}") is not None]


def split_items(images: list[tuple[str, bytes]], wnid: str, split: str, origin: str,
                named: bool = False) -> Iterator[Item]:
    """The images of one class that belong to `split`, by the held-out rule (each naming its split
    where `named`: a pass that yields several)."""
    val = held_out([member for member, _ in images])
    for member, image in images:
        if (member in val) == (split == "val"):
            yield Item(image_key(member, f"{origin}:{member}"), wnid, f"{origin}:{member}", image, MIN_SIDE,
                       split if named else None)


def class_of(member: str, known: frozenset[str], origin: str, table: str = "imagenet-22k") -> str | None:
    """The wnid of an outer member named [folder/]<wnid>.tar (one of `known`, `table`'s); None for what is
    not a class tar."""
    wnid = member.rsplit("/", 1)[-1].removesuffix(".tar")
    if not member.endswith(".tar") or not WNID.match(wnid):
        return None
    if wnid not in known:
        other = " (--class-table imagenet-22k labels in ImageNet-22k's 21,841)" if table != "imagenet-22k" else ""
        raise SourceError(f"{origin}:{member}: synset {wnid} is not among {TABLE_WORDS[table]}, the table its labels "
                          f"index: is the archive image-net.org's full release?{other}")
    return wnid


# ---------------------------------------------------------------- a part a class tar: fall11, winter21 indexed

@dataclass(frozen=True)
class FullClassTar:
    """One class's tar inside fall11_whole.tar (or winter21_whole.tar.gz's inflated stream, through its
    seek `index`), at its offset: a worker reads it alone. train reads it whole; fall11's val reads the
    inner tar's headers and its held-out images only. winter21's val reads it whole too: reaching each
    header inflates what comes before it anyway, and only the whole class tar can be checked against
    the CRC-32 its index holds."""
    archive: str
    wnid: str
    name: str
    offset: int
    size: int
    split: str
    index: str | None = None  # winter21's seek index (its path: a part job carries no more)
    crc32: int | None = None  # winter21's, from its index

    def wnids(self) -> set[str]:
        return {self.wnid}

    def items(self) -> Iterator[Item]:
        origin = f"{self.archive}:{self.name}"
        if self.split == "val" and self.index is None:
            yield from self.held_out_items(origin)
            return
        yield from split_items(class_images(self.whole(origin), origin), self.wnid, self.split, origin)

    def whole(self, origin: str) -> bytes:
        """The class tar's bytes, proven whole: its CRC-32 where the index holds one, its tar's end."""
        with self.opened() as f:
            data = read_at(f, self.offset, self.size, origin, self.archive)
        if self.crc32 is not None and zlib.crc32(data) != self.crc32:
            raise SourceError(f"{origin}: inflated through the seek index {self.index}, its bytes are not those the "
                              "whole read that kept the index checked (their CRC-32 differs): the archive was damaged "
                              "since. Copy or download it again (and delete the index)")
        check_tar_complete(data, origin)
        return data

    def held_out_items(self, origin: str) -> Iterator[Item]:
        """fall11's: the inner tar's headers (one 512-byte read a member), then its held-out images' bytes."""
        with open(self.archive, "rb") as f:
            f.seek(self.offset)
            try:
                with tarfile.open(fileobj=f, mode="r:") as inner:
                    members = [m for m in inner if m.isreg() and image_key(m.name, f"{origin}:{m.name}") is not None]
            except (tarfile.TarError, EOFError) as exn:
                raise SourceError(f"{origin}: {exn}: the archive is damaged, download it again") from None
            val = held_out([m.name for m in members])
            for member in sorted((m for m in members if m.name in val), key=lambda m: m.name):
                where = f"{origin}:{member.name}"
                data = read_at(f, member.offset_data, member.size, where, self.archive)
                yield Item(image_key(member.name, where), self.wnid, where, data, MIN_SIDE)

    def opened(self):
        """The archive as a file: fall11's itself; winter21's inflated stream, this process's reader
        through the index (kept open for the next class tar)."""
        if self.index is None:
            return open(self.archive, "rb")
        return contextlib.nullcontext(indexed_reader(self.archive, self.index))


# ---------------------------------------------------------------- winter21 without an index: the stream whole

@dataclass(frozen=True)
class FullStream:
    """winter21_whole.tar.gz read front to back: each class tar in turn, its images of `splits` (both,
    in a local build's one pass: each Item then names its split; one, in a shared read's part). Once
    the stream is proven whole, its seek index is kept for later jobs (prepare/sources/gzip_index.py)."""
    archive: str
    size: int
    known: frozenset[str]
    splits: tuple[str, ...]
    table: str = "imagenet-22k"  # the one `known` is, for the refusal of a class tar outside it

    def wnids(self) -> set[str]:
        return set(self.known)

    def items(self) -> Iterator[Item]:
        stamp = archive_stamp(Path(self.archive))  # before the read: a copy changing under it is not indexed
        # another read may have kept the index already (a shared read's other split): then there is nothing to
        # learn, and a CRC-32 of every class tar (a core's time for 1.1 TB at 2.2 GB/s) would be taken for nothing
        learn = load_index(Path(self.archive)) is None
        named = len(self.splits) > 1
        class_tars = []
        with Inflated(self.archive, available_cpus()) as stream:
            for member, data in iterate_whole_tar_members(stream, self.archive):
                wnid = class_of(member.name, self.known, self.archive, self.table)
                if wnid is not None:
                    if learn:
                        class_tars.append(Member(member.name, member.offset_data, member.size, zlib.crc32(data)))
                    origin = f"{self.archive}:{member.name}"
                    images = class_images(data, origin)
                    for split in self.splits:
                        yield from split_items(images, wnid, split, origin, named)
            if learn:
                keep_index(Path(self.archive), stream, class_tars, stamp)
        log.info("%s: inflated the stream whole, %d bytes, once for %s", Path(self.archive).name, stream.inflated,
                 " and ".join(self.splits))


# ---------------------------------------------------------------- the source

class FullRelease(Source):
    """fall11_whole.tar or winter21_whole.tar.gz, labelled in `table` (one of `tables`), val held out."""
    layout = NAME

    def __init__(self, root: Path, archive: Path, table: str):
        self.root, self.archive, self.table = root, readable_file(archive, "the full release's archive"), table
        names = builtin_class_names(table)
        self.classes = class_table(list(names), names)
        self.synsets = RELEASES[archive.name]
        self.index = load_index(archive) if archive.name == WINTER21 else None
        self.class_tars = [] if self.streamed else self.locate_class_tars()
        if self.streamed:
            log.info("%s has no seek index yet: val and train are read from one pass over the stream, which keeps "
                     "one for later jobs (docs/prepare.md, winter21's one gzip stream)", archive.name)

    @property
    def streamed(self) -> bool:
        """winter21 without its index: one part, the stream read whole, yields both splits (`joint_parts`)."""
        return self.archive.name == WINTER21 and self.index is None

    def seek_index(self) -> str | None:
        return None if self.index is None else str(self.index.path)

    def close(self) -> None:
        close_readers()

    def locate_class_tars(self) -> list[tuple[str, Member]]:
        """(wnid, member) of the class tars: fall11's from its headers, winter21's from its seek index
        (with their CRC-32s)."""
        known = frozenset(self.class_index())
        if self.index is not None:
            members = self.index.members
        else:
            members = [Member(m.name, m.offset_data, m.size) for m in archive_members(self.archive) if m.isreg()]
        found = []
        for member in members:
            wnid = class_of(member.name, known, str(self.archive), self.table)
            if wnid is not None:
                found.append((wnid, member))
        return found

    def read_together(self) -> tuple[str, ...]:
        """Without its index, winter21's val and train come from one pass over the stream: reading each
        alone would inflate its 1.1 TB twice."""
        return ("val", "train") if self.streamed else ()

    def joint_parts(self, splits: tuple[str, ...]) -> list:
        return [FullStream(str(self.archive), sum(map(self.split_bytes, splits)), frozenset(self.class_index()),
                           splits, self.table)]

    def parts(self, split: str) -> list:
        if self.streamed:  # a split alone (a size sample's): the stream read whole for it
            return self.joint_parts((split,))
        return [FullClassTar(str(self.archive), wnid, m.name, m.offset, m.size, split, self.seek_index(), m.crc32)
                for wnid, m in self.class_tars]

    def split_bytes(self, split: str) -> int:
        """val: HELD_OUT_PER_CLASS images a class at most (smaller classes give none), and never more than
        the rule's share of the archive; train: the rest. (Without its index, winter21's one part a split
        reads the whole stream, but this is what it yields: what the shared read balances and buffers.)"""
        whole = self.archive.stat().st_size
        val = min(HELD_OUT_PER_CLASS * self.synsets * AVERAGE_IMAGE_BYTES,
                  whole * HELD_OUT_PER_CLASS // (HELD_OUT_FROM + 1))
        return val if split == "val" else whole - val

    def declared(self, split: str) -> Declared:
        """fall11: ImageNet-22k's table lists its class tars (a missing one is named); winter21 declares
        nothing before its stream is read (its synsets are not listed anywhere but in it, or its index)."""
        if split == "train" and self.archive.name == FALL11:
            present = {wnid for wnid, *_ in self.class_tars}
            missing = tuple(f"{c.wnid}.tar" for c in self.classes if c.wnid not in present)
            return Declared(split, (Gap("class archives", len(self.classes), "ImageNet-22k's table (fall11's)", missing),))
        return Declared(split)

    def why_empty(self, split: str) -> str:
        if split != "val":
            return ""
        return (f": val is held out from classes of more than {HELD_OUT_FROM} images ({HELD_OUT_PER_CLASS} each), and "
                "none has that many. Is the archive image-net.org's whole release?")

    def estimated_count(self, split: str) -> int:
        images = max(1, self.archive.stat().st_size // AVERAGE_IMAGE_BYTES)
        return images if split == "train" else min(images, HELD_OUT_PER_CLASS * self.synsets)


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

SIGNS = Signs(names=tuple(RELEASES), file=tuple(RELEASES))


def recognise(root: Path) -> Path | None:
    """The release's archive: --source itself, or the one its folder holds."""
    if root.is_file():
        return root if root.name in RELEASES else None
    there = [root / name for name in RELEASES if (root / name).is_file()]
    if len(there) > 1:
        raise SourceError(f"{root} holds both {FALL11} and {WINTER21}: point --source at the one to prepare")
    return there[0] if there else None


def identifying_files(root: Path, found: Path) -> list[Path]:
    return [found]


def tables(found: Path) -> tuple[str, ...]:
    """fall11's own table, 22k's; winter21's own (the default), or 22k's."""
    return TABLES[found.name]


def rules(found: Path, table: str) -> dict:
    return RULES | ({"class_table": table} if table != "imagenet-22k" else {})


def open_source(root: Path, found: Path, table: str) -> FullRelease:
    return FullRelease(root, found, table)
