"""The shard format, the contract between the stages: what a sample is in a shard, how prepare
writes a shard, and how the reader reads a label. train's native index (train/native/tarindex.c)
is the reader's fast path over the same tar layout (tests/test_shard_index.py checks it against this
module's writer).

A shard is a tar of WebDataset samples: for each sample, members KEY.cls (the class index in
decimal ASCII), KEY.jpg (a JPEG) and KEY.json (the image's size and wnid), in that order (sorted by
extension), written byte for byte as webdataset's TarWriter(encoder=False, mtime=0) writes them, so
that any WebDataset reader reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path
from typing import Iterable

BAD_LABEL = -1  # a .cls that is not a decimal class index
LABEL_DIGITS = 9  # more digits than any class count needs: not a label
EXTENSIONS = ("cls", "jpg", "json")
# A member's name must fit the tar header's 100 bytes: a longer one takes a pax header, which the
# reader's fast path does not read.
MAX_KEY_LENGTH = 100 - 1 - max(map(len, EXTENSIONS))


# What a shard holds beyond its JPEGs' bytes, as the writer writes it (prepare's estimates of the disk
# it needs): per sample a 512-byte header per member, the .cls and .json contents padded to a block
# each, and on average half a block of padding after the JPEG; per shard the two end-of-archive
# blocks, padded to tarfile's 10 KiB record: on average half a record.
SAMPLE_OVERHEAD = len(EXTENSIONS) * tarfile.BLOCKSIZE + 2 * tarfile.BLOCKSIZE + tarfile.BLOCKSIZE // 2
SHARD_END = 2 * tarfile.BLOCKSIZE + tarfile.RECORDSIZE // 2


def tar_bytes(image_bytes: int, samples: int, shards: int) -> int:
    """About how large `shards` shards of `samples` images of `image_bytes` bytes in all will be."""
    return image_bytes + samples * SAMPLE_OVERHEAD + shards * SHARD_END


def sample_record(key: str, jpg: bytes, label: int, meta: dict) -> dict:
    """A sample as the writer takes it: its members by extension."""
    return {"__key__": key, "jpg": jpg, "cls": str(label).encode(), "json": json.dumps(meta, sort_keys=True).encode()}


def parse_label(raw: bytes) -> int:
    """The class index a .cls holds (decimal digits, as the writer writes them), or BAD_LABEL."""
    text = raw.strip()
    return int(text) if text.isdigit() and len(text) <= LABEL_DIGITS else BAD_LABEL


def write_tar(path: Path, samples: Iterable[dict]) -> str:
    """A shard with the bytes webdataset's TarWriter(encoder=False, mtime=0) writes (same samples,
    same bytes; tests/test_prepare.py compares them), by `ShardTarWriter`. Fsynced: the manifest
    written after it must not outlive it. Returns its SHA-256, computed from the bytes as they are
    written (no second read)."""
    with open(path, "wb") as f:
        writer = ShardTarWriter(f)
        for sample in samples:
            writer.write(sample)
        writer.close()
        f.flush()
        os.fsync(f.fileno())
    return writer.digest.hexdigest()


class ShardTarWriter:
    """webdataset's TarWriter(encoder=False, mtime=0, user and group "bigdata", mode 0o444) to a
    tarfile "w|" stream, byte for byte, without tarfile's per-member Python (a TarInfo, its copy,
    tobuf, copyfileobj: 0.06-0.08 ms a sample, most of prepare's CPU on small images).

    Each header is tarfile's own header for a template member, built once with the running
    Python's tarfile, with the name, size and checksum filled in; a member whose name or size that
    header cannot hold (non-ASCII or over 100 bytes, 8 GiB or more: tarfile then writes a pax
    header first) is given tarfile's own tobuf. Data padded to 512-byte blocks, the end of archive
    two zero blocks padded to tarfile's 10 KiB record, as tarfile writes them. Bytes are hashed
    and written in runs of about 1 MiB."""

    FLUSH = 1 << 20

    def __init__(self, f, user: str = "bigdata", group: str = "bigdata", mode: int = 0o444, mtime: int = 0):
        self.f, self.digest, self.buf, self.offset = f, hashlib.sha256(), bytearray(), 0
        self.user, self.group, self.mode, self.mtime = user, group, mode, mtime
        template = bytearray(self.tarinfo("", 0).tobuf(tarfile.DEFAULT_FORMAT, tarfile.ENCODING, "surrogateescape"))
        if len(template) != tarfile.BLOCKSIZE:  # pragma: no cover - a pax header for the template itself
            raise RuntimeError("tarfile's header for a plain member is not one block")
        template[0:100] = bytes(100)  # name
        template[124:136] = bytes(12)  # size
        template[148:156] = b" " * 8  # the checksum field, counted as spaces
        self.middle, self.tail = bytes(template[100:124]), bytes(template[136:148])
        self.after_checksum = bytes(template[156:])
        self.base_sum = sum(template)

    def tarinfo(self, name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = size, self.mtime, self.mode, self.user, self.group
        return ti

    def header(self, name: str, size: int) -> bytes:
        if not name.isascii() or len(name) > 100 or size >= 8 ** 11:
            return self.tarinfo(name, size).tobuf(tarfile.DEFAULT_FORMAT, tarfile.ENCODING, "surrogateescape")
        encoded = name.encode("ascii")
        size_field = b"%011o\0" % size
        checksum = self.base_sum + sum(encoded) + sum(size_field)
        return b"".join((encoded, bytes(100 - len(encoded)), self.middle, size_field, self.tail,
                         b"%06o\0 " % checksum, self.after_checksum))

    def write(self, sample: dict) -> None:
        """One sample: its members key.EXT in sorted order of EXT, as TarWriter writes them
        (keys starting with "_" left out; every value bytes)."""
        if "__key__" not in sample:
            raise ValueError("object must contain a __key__")
        key, buf = sample["__key__"], self.buf
        for k in sorted(sample):
            if k[0] == "_":
                continue
            v = sample[k]
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise ValueError(f"{k} doesn't map to a bytes after encoding ({type(v)})")
            size = len(v)
            buf += self.header(key + "." + k, size)
            buf += v
            if size % tarfile.BLOCKSIZE:
                buf += bytes(tarfile.BLOCKSIZE - size % tarfile.BLOCKSIZE)
        if len(buf) >= self.FLUSH:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.digest.update(self.buf)
            self.f.write(self.buf)
            self.offset += len(self.buf)
            self.buf.clear()

    def close(self) -> None:
        """The end of the archive: two zero blocks, then zeros to the end of a 10 KiB record."""
        end = self.offset + len(self.buf) + 2 * tarfile.BLOCKSIZE
        self.buf += bytes(2 * tarfile.BLOCKSIZE + (-end) % tarfile.RECORDSIZE)
        self.flush()


def shard_keys(path: Path) -> list[str]:
    """The keys of a shard's samples, in order, from its tar headers alone (tarfile seeks over each
    member's data): a split's keys without reading its images."""
    with tarfile.open(path, "r:") as tar:
        return [name[:-len(".cls")] for name in tar.getnames() if name.endswith(".cls")]
