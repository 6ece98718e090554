"""Kaggle's imagenet-object-localization-challenge.zip read in place: nothing is extracted.

Its central directory lists every member with where its bytes lie, so a part is a run of members
that a worker reads by offset, and the Kaggle layout (prepare/sources/trees.py) sees the zip as it would see
the extracted tree (`ZipTree`): the same listing, labels, declarations and bytes. Clusters whose inode
quotas forbid 1.33 million files, and anyone who would wait for `unzip`, prepare from the one file.

The central directory is read once with zipfile (about 8 s and 0.9 GB for Kaggle's 1.33 M members)
and kept as compact `ZipMember` rows; a member's bytes are read here, without zipfile: its local
header (whose name must be the directory's, as zipfile checks, and whose extra field may differ in length),
its data (stored or deflated), inflated to exactly the size the directory states, and checked against
its CRC-32. Every failure is one SourceError naming the zip and the member.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.sources.base import (
    Item, Part, SourceError, decoded_text, estimate_bytes, image_key, sized_chunks, unreadable,
)

KAGGLE_ZIP = "imagenet-object-localization-challenge.zip"
LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature, version, flags, method, time, date, crc, sizes, name/extra lengths
LOCAL_SIGNATURE = b"PK\x03\x04"
STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
MAX_MEMBER = 1 << 30  # bytes: no ImageNet file comes near; a bigger size is a damaged or hostile directory


@dataclass(frozen=True, slots=True)
class ZipMember:
    """Where one member's bytes lie in the zip, as its central directory says."""
    name: str
    offset: int  # of its local header
    packed: int  # bytes stored
    size: int  # bytes once inflated
    method: int
    crc: int
    utf8: bool = False  # how its name is encoded (else cp437): the local header's must be the same


def damaged(zip_path: str, name: str, what: str) -> SourceError:
    return SourceError(f"{zip_path}:{name}: {what}: the zip is damaged or truncated, download it again")


def read_member(f, zip_path: str, member: ZipMember) -> bytes:
    """The member's bytes from the open zip `f`, inflated and checked against its size and CRC-32."""
    f.seek(member.offset)
    header = f.read(LOCAL_HEADER.size)
    if len(header) < LOCAL_HEADER.size or header[:4] != LOCAL_SIGNATURE:
        raise damaged(zip_path, member.name, f"no local header at byte {member.offset}")
    name_length, extra_length = LOCAL_HEADER.unpack(header)[-2:]
    if f.read(name_length) != member.name.encode("utf-8" if member.utf8 else "cp437"):
        raise damaged(zip_path, member.name, "its local header names another file (the name was damaged in one of "
                                             "the two places the zip keeps it)")
    f.seek(member.offset + LOCAL_HEADER.size + name_length + extra_length)
    packed = f.read(member.packed)
    if len(packed) != member.packed:
        raise damaged(zip_path, member.name, f"{len(packed)} of its {member.packed} bytes are there")
    data = packed if member.method == STORED else inflate(packed, member, zip_path)
    if len(data) != member.size or zlib.crc32(data) != member.crc:
        raise damaged(zip_path, member.name, "its bytes do not match the size and CRC-32 the zip lists")
    return data


def inflate(packed: bytes, member: ZipMember, zip_path: str) -> bytes:
    """A deflated member, inflated to at most its stated size (a longer stream is damage, not memory)."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        data = inflater.decompress(packed, member.size + 1)
    except zlib.error as exn:
        raise damaged(zip_path, member.name, f"its deflate stream is broken ({exn})") from None
    if not inflater.eof or len(data) != member.size:
        raise damaged(zip_path, member.name, "its deflate stream does not end at the size the zip lists")
    return data


@dataclass(frozen=True)
class ZipChunk:
    """Consecutive images of the zip, (key, wnid, member): a worker reads them by offset."""
    zip_path: str
    members: tuple[tuple[str, str, ZipMember], ...]
    size: int  # bytes once inflated, estimated as the extracted tree's are

    def wnids(self) -> set[str]:
        return {wnid for _, wnid, _ in self.members}

    def items(self) -> Iterator[Item]:
        try:
            with open(self.zip_path, "rb") as f:
                for key, wnid, member in self.members:
                    yield Item(key, wnid, f"{self.zip_path}:{member.name}", read_member(f, self.zip_path, member))
        except OSError as exn:
            raise SourceError(f"cannot read {self.zip_path}: {exn.strerror or exn}") from None


def central_directory(path: Path) -> list[ZipMember]:
    """Every file member (not folders) of the zip, from its central directory, checked: no encryption,
    stored or deflated, sizes and offsets within the file. zipfile reads the directory (zip64
    included); only these rows are kept."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except PermissionError as exn:  # a permission, not damage: downloading it again would not help
        raise unreadable(path, exn.strerror) from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exn:
        raise SourceError(f"cannot read {path} as a zip ({exn}): it is truncated or not a zip, download it "
                          "again") from None
    file_size = path.stat().st_size
    members = []
    for info in infos:
        if info.is_dir():
            continue
        members.append(checked_member(info, str(path), file_size))
    return members


def checked_member(info: zipfile.ZipInfo, zip_path: str, file_size: int) -> ZipMember:
    if info.flag_bits & 0x1:
        raise SourceError(f"{zip_path}:{info.filename} is encrypted: prepare reads the zip as Kaggle serves it")
    if info.compress_type not in (STORED, DEFLATED):
        raise SourceError(f"{zip_path}:{info.filename} is compressed with zip method {info.compress_type}, which "
                          "prepare does not read (stored and deflate only): use the zip as Kaggle serves it, or "
                          "extract it")
    if (max(info.file_size, info.compress_size) > MAX_MEMBER or info.header_offset < 0
            or info.header_offset + info.compress_size > file_size):
        raise damaged(zip_path, info.filename, "the zip lists it larger than it is, or beyond its end")
    return ZipMember(info.filename, info.header_offset, info.compress_size, info.file_size, info.compress_type,
                     info.CRC, bool(info.flag_bits & 0x800))


class ZipTree:
    """A zip's members as a read-only tree (prepare/sources/trees.py's `Tree`), rooted at `prefix` inside it."""

    def __init__(self, path: Path, members: list[ZipMember], prefix: str = ""):
        self.root, self.prefix = path, prefix
        self.files: dict[str, ZipMember] = {}  # relative name -> member
        self.children: dict[str, list[str]] = {}  # folder -> the names directly in it (files and folders)
        self.folder_set: set[str] = {""}
        for member in members:
            if member.name.startswith(prefix):
                self.add(member.name[len(prefix):], member)

    def add(self, rel: str, member: ZipMember) -> None:
        if rel in self.files:
            raise SourceError(f"{self.root} holds {member.name} twice: download it again")
        self.files[rel] = member
        folder, _, name = rel.rpartition("/")
        self.children.setdefault(folder, []).append(name)
        while folder not in self.folder_set:  # every folder above, named in its parent
            self.folder_set.add(folder)
            parent, _, name = folder.rpartition("/")
            self.children.setdefault(parent, []).append(name)
            folder = parent

    def where(self, rel: str) -> str:
        return f"{self.root}:{self.prefix}{rel}"

    def is_dir(self, rel: str) -> bool:
        return rel in self.folder_set

    def is_file(self, rel: str) -> bool:
        return rel in self.files

    def folders(self, rel: str) -> list[str]:
        return sorted(name for name in self.children.get(rel, ()) if join(rel, name) in self.folder_set)

    def images(self, rel: str) -> list[tuple[str, ZipMember]]:
        found = []
        for name in self.children.get(rel, ()):
            if name.startswith("."):  # hidden, as list_images leaves them: macOS's `._NAME` files, say
                continue
            member = self.files.get(join(rel, name))
            if member is not None and (key := image_key(member.name, self.where(join(rel, name)))) is not None:
                found.append((key, member))
        return sorted(found, key=lambda row: row[0])

    def name_of(self, member: ZipMember) -> str:
        return f"{self.root}:{member.name}"

    def read_text(self, rel: str, why: str) -> str:
        member = self.files.get(rel)
        if member is None:
            raise SourceError(f"{self.where(rel)} not found: {why}")
        try:
            with open(self.root, "rb") as f:
                return decoded_text(read_member(f, str(self.root), member), self.where(rel))
        except OSError as exn:
            raise SourceError(f"cannot read {self.root}: {exn.strerror or exn}") from None

    def parts(self, rows: list[tuple[str, str, ZipMember]]) -> list[Part]:
        """Sized as the extracted tree's files are (estimated from the same sample, uncompressed): the
        same shard count, so the same shards."""
        total = estimate_bytes([member for _, _, member in rows], lambda member: member.size)
        return [ZipChunk(str(self.root), chunk, size) for chunk, size in sized_chunks(rows, total)]


def join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def kaggle_zip(root: Path) -> Path | None:
    """The Kaggle zip that --source names: the file itself, or the one a folder holds."""
    if root.is_file():
        return root
    return root / KAGGLE_ZIP if (root / KAGGLE_ZIP).is_file() else None


def open_kaggle_zip(path: Path, marker: str) -> ZipTree:
    """The zip as a tree rooted where the Kaggle layout starts: at its top, or in the one folder
    that holds `marker` (a zip of the extracted download's folder)."""
    members = central_directory(path)
    names = {member.name for member in members}
    if marker in names:
        return ZipTree(path, members)
    prefixes = sorted({name[:-len(marker)] for name in names if name.endswith("/" + marker)
                       and name.count("/") == marker.count("/") + 1})
    if len(prefixes) != 1:
        raise SourceError(f"{path} holds no {marker} at its top (nor in one folder): is it Kaggle's {KAGGLE_ZIP}?")
    return ZipTree(path, members, prefixes[0])
