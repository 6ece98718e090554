"""A seek index for a tar held in one gzip stream (winter21_whole.tar.gz): where each member's data
lies in the inflated stream, and rapidgzip's checkpoints to start inflating near it.

A one-stream gzip cannot be read at an offset without inflating everything before it. The first job
that reads the whole stream (prepare/sources/imagenet_full.py's `FullStream`) keeps what it learnt
on the way: rapidgzip's index (its gztool format: a checkpoint every 4 MiB, each with the 32 KiB
window inflating from it needs, zeroed where nothing refers to it, then compressed: about 28 KB a GB
of JPEG tar) and the members' offsets and CRC-32s. Every later job reads a member, like fall11's class
tars, at its offset: each node inflates only its share, and no node inflates the stream twice.

A read at an offset never reaches the gzip trailer, whose CRC covers the whole stream: each member's
own CRC-32, taken in the whole read that checked the trailer, is what proves the bytes a later job
inflates are those (a damaged block can inflate without an error, to other bytes).

The index is one file, written whole or not at all (a temporary name, then a rename):

    {"format": 1, "archive": {"bytes": ..., "mtime_ns": ...}, "members": [[name, offset, size, crc32], ...],
     "index_bytes": ..., "index_sha256": ...}\\n
    <rapidgzip's index>

It lies beside the archive (`<archive>.prepare-index`) where that folder is writable, else in the
user's cache ($XDG_CACHE_HOME or ~/.cache, imagenet-prepare/). One that no longer matches the
archive's size and time, or is damaged, is ignored (and replaced by the next whole read).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from prepare.sources.base import SourceError

log = logging.getLogger("prepare")

FORMAT = 1
SUFFIX = ".prepare-index"


@dataclass(frozen=True)
class Member:
    name: str
    offset: int  # of its data, in the inflated stream
    size: int
    crc32: int | None = None  # of its data (zlib's): winter21's, taken in its whole read; fall11's tar has none


@dataclass(frozen=True)
class StreamIndex:
    """A loaded index: the file it is in and the members it lists."""
    path: Path
    members: tuple[Member, ...]


def index_locations(archive: Path) -> list[Path]:
    """Where the archive's index may lie, in the order looked at and written to: beside it, then in
    the user's cache (named by the archive's full path, so that two copies keep two indexes)."""
    archive = archive.resolve()
    beside = archive.with_name(archive.name + SUFFIX)
    try:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imagenet-prepare"
    except RuntimeError:  # no home to be found (HOME unset, a user without a passwd entry): beside it alone
        return [beside]
    digest = hashlib.sha256(str(archive).encode()).hexdigest()[:16]
    return [beside, cache / f"{archive.name}-{digest}{SUFFIX}"]


def archive_stamp(archive: Path) -> dict:
    """What says the index still describes the archive: a copy or a new download changes one of them."""
    st = archive.stat()
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def parse_index(data: bytes, archive_stamp_now: dict) -> tuple[tuple[Member, ...], bytes] | str:
    """(members, rapidgzip's index) from an index file's bytes, or why they cannot be used. Pure."""
    head, newline, binary = data.partition(b"\n")
    try:
        header = json.loads(head)
        if not newline or header.get("format") != FORMAT:
            return "not an index of this version"
        if header.get("archive") != archive_stamp_now:
            return "made for another state of the archive (its size or time differ)"
        if len(binary) != header["index_bytes"] or hashlib.sha256(binary).hexdigest() != header["index_sha256"]:
            return "damaged (its checksum differs)"
        # the members' names, offsets and CRC-32s too: a bit flipped in a class tar's name relabelled the class
        # (indexes written before this checksum lack it, and are read as they were)
        if "members_sha256" in header and members_digest(header["members"]) != header["members_sha256"]:
            return "damaged (its checksum differs)"
        members = tuple(Member(str(name), int(offset), int(size), int(crc32))
                        for name, offset, size, crc32 in header["members"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return "damaged (its header cannot be read)"
    return members, binary


def members_digest(members: list) -> str:
    """The SHA-256 of an index's members as its header lists them ([name, offset, size, CRC-32] each). Pure."""
    return hashlib.sha256(json.dumps(members, separators=(",", ":")).encode()).hexdigest()


_SAID: set[tuple[str, str]] = set()  # (index, why) already warned of in this process: load_index runs thrice a job


def load_index(archive: Path) -> StreamIndex | None:
    """The archive's index where a usable one lies; else None (the stream is then read whole)."""
    for path in index_locations(archive):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exn:
            log.warning("%s: cannot read this seek index (%s): ignored", path, exn.strerror or exn)
            continue
        parsed = parse_index(data, archive_stamp(archive))
        if isinstance(parsed, str):
            if (str(path), parsed) not in _SAID:
                _SAID.add((str(path), parsed))
                log.warning("%s: this seek index of %s is %s: ignored (the next whole read of the stream keeps a new "
                            "one, here where this folder can be written, else in the user's cache: delete this one)",
                            path, archive.name, parsed)
            continue
        return StreamIndex(path, parsed[0])
    return None


def index_document(reader, members: list[Member], stamp: dict) -> bytes:
    """The index file's bytes, from a rapidgzip reader that has inflated the whole stream."""
    exported = io.BytesIO()
    reader.export_index(exported, index_format())
    binary = exported.getvalue()
    listed = [[m.name, m.offset, m.size, m.crc32] for m in members]
    header = {"format": FORMAT, "archive": stamp, "members": listed, "members_sha256": members_digest(listed),
              "index_bytes": len(binary), "index_sha256": hashlib.sha256(binary).hexdigest()}
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + binary


def keep_index(archive: Path, reader, members: list[Member], stamp: dict) -> Path | None:
    """Write the index where it may lie (beside the archive, else the cache), unless a usable one
    is there already; the path, or None where none was written (said in the log). Never fails: the
    index only saves later jobs time, and this runs after the whole stream was read."""
    try:
        return write_index(archive, reader, members, stamp)
    except Exception as exn:  # rapidgzip's export, an unexpected file system: not worth the read it follows
        log.warning("%s: its seek index could not be kept (%s: %s): every job reads the stream whole",
                    archive.name, type(exn).__name__, exn)
        return None


def write_index(archive: Path, reader, members: list[Member], stamp: dict) -> Path | None:
    if load_index(archive) is not None:
        return None
    document = index_document(reader, members, stamp)
    for path in index_locations(archive):
        temporary = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(document)
            os.replace(temporary, path)
        except OSError:  # read-only, not ours, or full: the next place
            with contextlib.suppress(OSError):
                temporary.unlink()
            continue
        log.info("%s: kept its seek index in %s (%.1f MB): later jobs read each class tar at its offset, every "
                 "node inflating only its share", archive.name, path, len(document) / 1e6)
        return path
    log.warning("%s: no place to keep its seek index (neither %s is writable): every job reads the stream whole",
                archive.name, " nor ".join(str(p.parent) for p in index_locations(archive)))
    return None


# ---------------------------------------------------------------- reading the stream

def index_format():
    """rapidgzip's gztool format: compressed windows (indexed_gzip's format is 250 times larger)."""
    import rapidgzip  # here, not at the top: only a winter21 stream's reads and index need it

    return rapidgzip.IndexFormat.GZTOOL


class Inflated:
    """rapidgzip's reader of a gzip stream, whose errors on damaged data (ValueError: a CRC or a
    distance; RuntimeError: a size) become a SourceError that says what to do."""

    def __init__(self, archive: str, threads: int, index: str | None = None, index_bytes: bytes | None = None):
        import rapidgzip  # here, not at the top: only a winter21 stream's reads need it

        self.archive, self.index = archive, index
        self.inflated = 0  # bytes read from the stream so far (what a job inflated: its log says)
        self.reader = rapidgzip.open(archive, parallelization=threads)
        if index_bytes is not None:
            self.checked(self.reader.import_index, io.BytesIO(index_bytes))

    def read(self, size: int = -1) -> bytes:
        data = self.checked(self.reader.read, size)
        self.inflated += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.checked(self.reader.seek, offset, whence)

    def tell(self) -> int:
        return self.reader.tell()

    def export_index(self, out, index_format) -> None:
        self.reader.export_index(out, index_format)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> "Inflated":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def checked(self, call, *args):
        try:
            return call(*args)
        except (ValueError, RuntimeError) as exn:
            why = str(exn) if len(str(exn)) < 160 else str(exn)[:157] + "..."  # rapidgzip's are long
            if self.index is None:
                raise SourceError(f"cannot inflate {self.archive} ({why}): it is truncated or corrupt: copy or "
                                  "download it again") from None
            raise SourceError(f"cannot inflate {self.archive} through its seek index {self.index} ({why}): delete "
                              "the index and rerun (the stream is then read whole, and checked); if that fails "
                              "too, copy or download the archive again") from None


_readers: dict[tuple[int, str], Inflated] = {}


def indexed_reader(archive: str, index: str) -> Inflated:
    """This process's reader of `archive` seeking through `index`, opened once (a worker reads many
    members: the index is imported once, not a member). A process reads one part at a time, so one
    reader serves them in turn. One thread: the workers are the parallelism. Keyed by the process
    too, as a reader's threads do not survive a fork."""
    key = (os.getpid(), index)
    if key not in _readers:
        try:
            data = Path(index).read_bytes()
        except OSError as exn:
            raise SourceError(f"{index}: the seek index of {archive} went while prepare ran ({exn.strerror or exn}): "
                              "rerun prepare") from None
        parsed = parse_index(data, archive_stamp(Path(archive)))
        if isinstance(parsed, str):
            raise SourceError(f"{index}: the seek index of {archive} is {parsed} (it changed while prepare ran): "
                              "rerun prepare")
        _readers[key] = Inflated(archive, 1, index, parsed[1])
    return _readers[key]


def close_readers() -> None:
    """Close the readers this process opened: at its exit (a reader left to the interpreter's teardown
    ends it with std::terminate, its threads still joinable), and at the end of a prepare or of a
    sample read here, before a fork (the source's `close`: nor is the archive then held open)."""
    for key in [key for key in _readers if key[0] == os.getpid()]:
        _readers.pop(key).close()


atexit.register(close_readers)

