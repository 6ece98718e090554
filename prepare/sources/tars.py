"""Tars read without webdataset, and proven whole: prepare's tar toolkit, for every layout that holds
tars (the official archives, the hub's gzipped archives and timm's shards, ImageNetV2's archives).

- `iterate_tar`: the regular files of a tar held in memory, sliced without tarfile where every
  member is plain (`plain_tar_members`: what the official archives hold), else read by tarfile;
  a member's header after what would be the tar's end is refused (`holds_a_tar_header`).
- `iterate_whole_tar`: a tar read once front to back (a file or a gzip stream), then proven whole:
  its end-of-archive blocks there, nothing after them that a header would be (`HeaderScan`, over
  the last reads `TailWindow` keeps); `gzipped_tar_images`, the images of a gzipped tar.
- `read_range`/`read_at`, `archive_members`, `check_tar_complete`: the official archives' byte ranges, their
  members located from the headers alone.

Every failure is a SourceError naming the archive: truncated, corrupt, or members that would be lost.
Links and other special members are skipped: nothing in a hostile archive can point outside it.
"""

from __future__ import annotations

import collections
import gzip
import io
import re
import tarfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from prepare.sources.base import SourceError, image_stem

READ_SIZE = 1 << 16  # tarfile's reads of an archive streamed front to back (its default, 10 KiB, is slower)
TAR_END = b"\0" * 1024  # every complete tar ends with two zero blocks


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
    for member, data in iterate_whole_tar_members(fileobj, origin):
        yield member.name, data


def iterate_whole_tar_members(fileobj, origin: str) -> Iterator[tuple[tarfile.TarInfo, bytes]]:
    """`iterate_whole_tar` with each member's header (its data's offset in the stream: where a seek
    index finds it again, prepare/sources/gzip_index.py)."""
    window = TailWindow(fileobj)
    try:
        stream = tarfile.open(fileobj=window, mode="r|", bufsize=READ_SIZE)
        for tarinfo in stream:
            name = tarinfo.name
            if not tarinfo.isreg() or name is None:
                continue
            if "/" not in name and name.startswith("__") and name.endswith("__"):
                continue
            yield tarinfo, stream.extractfile(tarinfo).read()
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
        return read_at(f, offset, size, origin, archive)


def read_at(f, offset: int, size: int, origin: str, archive: str) -> bytes:
    """`size` bytes at `offset` of the open archive `f` (a file, or a gzip stream inflated through a
    seek index), or a SourceError naming `origin` where it ends before."""
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise SourceError(f"{origin} is truncated: copy or download {archive} again")
    return data


def archive_members(path: Path) -> Iterator[tarfile.TarInfo]:
    """The members of an archive from its headers alone: tarfile in random-access mode seeks over
    each member's data. Its walk ends without a word at a damaged header, or at the file's end where
    the archive was cut between two members: the archive is then proven to end where the walk did
    (`check_ends_at`)."""
    check_tar_file_complete(path)
    try:
        with tarfile.open(path, "r:") as tar:
            yield from tar
            end = tar.offset  # the block that ended the walk
    except (tarfile.TarError, OSError, EOFError) as exn:
        raise SourceError(f"cannot read {path}: {exn}. It is truncated or corrupt: copy or download it again") from None
    check_ends_at(path, end)


def check_ends_at(path: Path, end: int) -> None:
    """The tar at `path` ends at byte `end`: its end-of-archive blocks there, and no header after them (a
    header zeroed would end the walk early, losing the members after it). After a whole archive's walk
    only its padding is left to scan (a few KiB); a damaged one is read to its end, once."""
    with open(path, "rb") as f:
        f.seek(end)
        blocks = f.read(len(TAR_END))
        if blocks != TAR_END[:len(blocks)]:
            raise members_lost_after(end, str(path))
        if len(blocks) < len(TAR_END):
            raise SourceError(f"{path} is truncated (it ends at byte {end + len(blocks)}, between two members, "
                              "without its end-of-archive blocks): copy or download it again")
        scan = HeaderScan()
        while (data := f.read(1 << 24)) and not scan.found:
            scan.feed(data)
    if scan.found:
        raise members_lost_after(end, str(path))
