"""The shards of a split, memory-mapped and indexed: shard-format code.

    tar_index   a shard's tar headers -> where each sample's key, JPEG and label lie (natively:
                train/native/tarindex.c, a few microseconds a sample)
    ShardSet    a split's shards, memory-mapped, with a table of every sample: its shard, where its
                JPEG lies, its label, its key's hash; a shard is indexed when a batch first needs it

Labels are parsed once, when a shard is indexed: a .cls that is not a decimal class index is
recorded as BAD_LABEL, and `bad_labels` tells which samples of a batch carry a label outside
[0, classes): the loader leaves them out, named and counted, as it does damaged JPEGs.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import mmap
import os
import weakref
from pathlib import Path

import numpy as np

from shards.format import parse_label
from shards.manifest import DatasetNotReady, Manifest
from shards.plan import ReadPlan
from shards.not_built import not_built
from train.decoder import Images

try:
    from train import _tarindex
except ImportError as exn:  # pragma: no cover - only on an install that skipped the build
    raise not_built("train._tarindex", "the shard index", exn) from None
if not hasattr(_tarindex, "map_shard"):  # a build older than its source (a git pull without jobs/install.sh)
    raise not_built("train._tarindex", "the shard index", ImportError("a build older than its source, without "
                                                                      "map_shard"))

KEY_HASH_BITS = 40  # sums of a batch, and all-reduced sums over ranks, stay far below 2**63


def key_hash64(key: bytes | str) -> int:
    """A 64-bit hash of a sample key: the seed of its augmentation."""
    data = key.encode() if isinstance(key, str) else bytes(key)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def key_hash(key: bytes | str) -> int:
    """A 40-bit hash of a sample key: summed over an epoch, it tells which samples were read."""
    return key_hash64(key) >> (64 - KEY_HASH_BITS)


def tar_index(shard) -> np.ndarray:
    """int64 (samples, 6) rows of a shard in memory: key_at, key_len, jpg_at, jpg_len, cls_at, cls_len
    (-1 where a sample lacks the member). ValueError naming the byte of a damaged header."""
    return np.frombuffer(_tarindex.tar_index(shard), dtype=np.int64).reshape(-1, 6)


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def file_identity(path: Path) -> tuple | None:
    """What tells the file at `path` from another put there later: its device, inode, size and modification time;
    None where there is none."""
    try:
        return identity_of(os.stat(path))
    except OSError:
        return None


def identity_of(stat: os.stat_result) -> tuple:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def cut_short(before: tuple | None, now: tuple | None) -> bool:
    """Whether the file `before` (file_identity) described is `now` the same file, shorter: truncated in place."""
    return before is not None and now is not None and now[:2] == before[:2] and now[2] < before[2]


def mapped(path: Path, identity: tuple | None) -> memoryview:
    """The shard at `path`, memory-mapped read-only, as a memoryview of bytes that holds no file descriptor, where it
    is still the file `identity` (file_identity) describes; DatasetNotReady where it is not, or cannot be mapped.
    Python's mmap keeps a duplicate of its file's descriptor for each map (until 3.13's trackfd=False), so a run over
    more shards than the hard `ulimit -n` (ImageNet-21k's 6,500 under a cluster's 4,096) failed with "Too many open
    files". The mapping goes when the last view of it (a slice, a native call's buffer) does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exn:
        raise replaced_shard(path, f"it cannot be opened now ({exn.strerror or exn})") from None
    try:
        stat = os.fstat(fd)
        if cut_short(identity, identity_of(stat)):
            raise shrunk_shard(path)  # not "another file"
        if identity is not None and identity_of(stat) != identity:
            raise replaced_shard(path, "another file is there now")
        if stat.st_size == 0:
            raise damaged_shard(path, "it is empty")
        try:
            address = _tarindex.map_shard(fd, stat.st_size)  # watched: a SIGBUS in it is `unreadable`, not a death
        except OSError as exn:
            if exn.errno == errno.ENOMEM:  # the process's room for maps, not the shard: --verify would find it whole
                raise no_room_to_map(path) from None
            raise damaged_shard(path, f"it cannot be mapped ({exn.strerror or exn})") from None
    finally:
        os.close(fd)
    region = (ctypes.c_ubyte * stat.st_size).from_address(address)
    unmap = weakref.finalize(region, _tarindex.unmap_shard, address, stat.st_size)  # every view holds `region`
    unmap.atexit = False  # not as the interpreter exits, under a decode thread still reading: the kernel unmaps it
    return memoryview(region).cast("B").toreadonly()


def map_address(view: memoryview) -> int:
    """Where the map a view of `mapped` shows starts: the address map_shard returned, as the watch knows it (the
    view's object is `mapped`'s ctypes array)."""
    return ctypes.addressof(view.obj)  # type: ignore[arg-type]


def read_past_its_end(view: memoryview) -> bool:
    """Whether the map `view` shows has been read past its file's new end (zeros read there: `mapped`); no system
    call, and no look at the table while no map in the process has been hit."""
    return bool(_tarindex.unreadable()) and _tarindex.was_unreadable(map_address(view))


def replaced_shard(path: Path, what: str) -> DatasetNotReady:
    return DatasetNotReady(f"shard {path} changed after this loader was made: {what} (the dataset prepared again "
                           "under a running job, or removed?). Make the loader again, or start the run again: a "
                           "resume checks that the dataset is the one its checkpoint trained on")


def no_room_to_map(path: Path) -> DatasetNotReady:
    """A map refused for want of room (ENOMEM): the process holds as many maps as the kernel lets it
    (vm.max_map_count, 65,530 by default: each shard read is one, beside the libraries' and the threads'), or as
    many as the loader watches for SIGBUS (tarindex.c's 65,536), or its address space is at `ulimit -v`. Said as a
    damaged shard, it sent the user to prepare --verify, which found every shard whole."""
    try:
        maps = f"{len(Path('/proc/self/maps').read_text().splitlines()):,} maps now, "
        limit = f"the kernel's vm.max_map_count {int(Path('/proc/sys/vm/max_map_count').read_text()):,}"
    except (OSError, ValueError):
        maps, limit = "", "the kernel's vm.max_map_count"
    return DatasetNotReady(f"shard {path} cannot be mapped: this process has no room for another memory map ({maps}"
                           f"{limit}; or its address space is at `ulimit -v`). Each shard read is one: raise "
                           "vm.max_map_count (sysctl), read fewer shards at once (fewer splits' loaders in one "
                           "process), or prepare with a larger --shard-size (fewer shards)")


def shrunk_shard(path: Path) -> DatasetNotReady:
    return DatasetNotReady(f"shard {path} shrank while this process read it: something truncated or rewrote it in "
                           "place (prepare never does: it writes new files and renames them). Stop what writes "
                           "there, rerun prepare with --verify on this node (it rebuilds damaged shards), then "
                           "start the run again")


def damaged_shard(path: Path, what: str) -> DatasetNotReady:
    return DatasetNotReady(f"shard {path} is damaged: {what}. Rerun prepare with --verify on this node: it "
                           "rebuilds damaged shards")


class ShardSet:
    """A split's shards, memory-mapped, with a table of every sample (global id = the shard's first
    id + the sample's position in it): where its JPEG lies, its label, its key's hash. A shard is
    indexed when a batch first needs it: the first epoch spreads the cost (about 10 us a sample)."""

    def __init__(self, paths: list[Path], sizes: list[int], classes: int):
        self.paths, self.sizes, self.classes = list(paths), list(sizes), classes
        self.first = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        total = int(self.first[-1])
        self.shard = np.repeat(np.arange(len(paths), dtype=np.int32), sizes)
        self.key_at, self.jpg_at, self.jpg_len = (np.zeros(total, np.int64) for _ in range(3))
        self.labels = np.zeros(total, np.int64)
        self.hashes = np.zeros(total, np.uint64)
        self.maps: list[memoryview | None] = [None] * len(paths)
        self.indexed = np.zeros(len(paths), bool)
        # The files as the manifest was checked against them: a shard mapped later must still be the same file
        self.identities = [file_identity(path) for path in self.paths]

    @classmethod
    def of(cls, root: Path, manifest: Manifest, split: str) -> "ShardSet":
        """The shards of `split` of the dataset at `root`, as its manifest lists them."""
        shards = manifest.splits[split].shards
        return cls([Path(root) / s.name for s in shards], [s.samples for s in shards], manifest.num_classes)

    def __len__(self) -> int:
        return int(self.first[-1])

    def ids(self, plan: ReadPlan) -> np.ndarray:
        """Global sample ids of a read plan, in its emission order."""
        runs = [np.arange(p.start, p.stop, dtype=np.int64) + self.first[p.shard] for p in plan.pieces]
        read = np.concatenate(runs) if runs else np.zeros(0, np.int64)
        return read[np.asarray(plan.order, dtype=np.int64)]

    def ensure_indexed(self, ids: np.ndarray) -> None:
        shards = self.shard[ids]
        if self.indexed[shards].all():
            return
        for shard in np.unique(shards[~self.indexed[shards]]).tolist():
            self.index(shard)

    def index(self, shard: int) -> None:
        path, count = self.paths[shard], self.sizes[shard]
        data = mapped(path, self.identities[shard])
        try:
            rows = tar_index(data)
        except ValueError as exn:
            raise self.damaged(shard, data, str(exn)) from None
        if len(rows) != count or (rows[:, 2] < 0).any() or (rows[:, 4] < 0).any():
            raise self.damaged(shard, data, f"it holds {len(rows)} samples (some without .jpg or .cls), the manifest "
                                            f"lists {count}")
        at = slice(self.first[shard], self.first[shard] + count)
        self.key_at[at], self.jpg_at[at], self.jpg_len[at] = rows[:, 0], rows[:, 2], rows[:, 3]
        self.labels[at] = [parse_label(bytes(data[a:a + n]))
                           for a, n in zip(rows[:, 4].tolist(), rows[:, 5].tolist())]
        self.hashes[at] = [key_hash64(data[a:a + n]) for a, n in zip(rows[:, 0].tolist(), rows[:, 1].tolist())]
        if read_past_its_end(data):  # what was read of it is zeros: its table is not kept
            raise shrunk_shard(path)
        self.maps[shard] = data
        self.indexed[shard] = True

    def damaged(self, shard: int, data: memoryview, what: str) -> DatasetNotReady:
        """The error for a shard whose index found `what` wrong: the shrunk shard's, where its file was cut short in
        place since it was mapped (its headers read as zeros past the new end: by a SIGBUS, or, within the end's
        page, by the kernel without one; a stat, once, on this path of errors alone), else the damaged shard's."""
        path = self.paths[shard]
        if cut_short(self.identities[shard], file_identity(path)):
            return shrunk_shard(path)
        if read_past_its_end(data):
            return shrunk_shard(path)
        return damaged_shard(path, what)

    def check_readable(self) -> None:
        """DatasetNotReady, one line, where a shard shrank under its map since it was mapped: its reads from the end
        on found zeros (`mapped`). Asked after each batch, before it is given out: a call that makes no system call
        while no map in the process has been hit."""
        if not _tarindex.unreadable():
            return
        for shard, view in enumerate(self.maps):
            if view is not None and read_past_its_end(view):
                raise shrunk_shard(self.paths[shard])

    def let_go(self, shards) -> None:
        """These shards' pages out of this process's resident set (madvise MADV_DONTNEED): they stay in the page
        cache, and a later read maps them again (a minor fault). A pass calls it for each shard it has read for the
        last time. Each epoch a rank reads other shards, so a map that kept every page it had read made a rank's
        resident set grow, epoch after epoch, towards the whole split: ImageNet's 145 GB in each rank of a node, which
        top, Slurm's accounting (MaxRSS, seff) and a per-process memory limit add up, though only the page cache,
        shared and reclaimable, held it. A failure changes nothing but that, and is ignored."""
        for shard in shards:
            view = self.maps[shard]
            if view is not None:
                LIBC.madvise(ctypes.addressof(view.obj), len(view), mmap.MADV_DONTNEED)

    def images(self, ids: np.ndarray) -> Images:
        return Images(tuple(self.maps), self.shard[ids], self.jpg_at[ids], self.jpg_len[ids])

    def bad_labels(self, ids: np.ndarray) -> np.ndarray:
        """Which of these samples (indexed) carry no class index in [0, classes)."""
        labels = self.labels[ids]
        return (labels < 0) | (labels >= self.classes)

    def key_hashes(self, ids: np.ndarray) -> np.ndarray:
        """The samples' KEY_HASH_BITS-bit key hashes, int64: what an epoch's sum is made of."""
        return (self.hashes[ids] >> np.uint64(64 - KEY_HASH_BITS)).astype(np.int64)

    def describe(self, sample: int) -> str:
        """'train/train-000003.tar: n01440764_10026', for messages."""
        shard = int(self.shard[sample])
        at = int(self.key_at[sample])
        key = bytes(self.maps[shard][at:at + 100]).split(b"\0", 1)[0].decode(errors="replace").split(".", 1)[0]
        return f"{self.paths[shard]}: {key}"

    def table_bytes(self) -> int:
        return sum(a.nbytes for a in (self.shard, self.key_at, self.jpg_at, self.jpg_len, self.labels, self.hashes))

    def close(self) -> None:
        """Let go of the shards' maps: each is unmapped as the last view of it goes (`mapped`), at once where nobody
        else holds one. close() itself raises nothing, so it never hides the error it is cleaning up after."""
        self.maps = [None] * len(self.paths)
        self.indexed[:] = False
