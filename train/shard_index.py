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

import hashlib
import mmap
from pathlib import Path

import numpy as np

from shards.format import parse_label
from shards.manifest import DatasetNotReady, Manifest
from shards.plan import ReadPlan
from shards.not_built import not_built
from shards.resources import raise_open_file_limit
from train.decoder import Images

try:
    from train import _tarindex
except ImportError as exn:  # pragma: no cover - only on an install that skipped the build
    raise not_built("train._tarindex", "the shard index", exn) from None

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
        self.maps: list[mmap.mmap | None] = [None] * len(paths)
        self.indexed = np.zeros(len(paths), bool)
        raise_open_file_limit()  # a map keeps its file open: one per shard

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
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            rows = tar_index(data)
        except ValueError as exn:
            data.close()
            raise damaged_shard(path, str(exn)) from None
        if len(rows) != count or (rows[:, 2] < 0).any() or (rows[:, 4] < 0).any():
            data.close()
            raise damaged_shard(path, f"it holds {len(rows)} samples (some without .jpg or .cls), the manifest "
                                      f"lists {count}")
        at = slice(self.first[shard], self.first[shard] + count)
        self.key_at[at], self.jpg_at[at], self.jpg_len[at] = rows[:, 0], rows[:, 2], rows[:, 3]
        self.labels[at] = [parse_label(data[a:a + n]) for a, n in zip(rows[:, 4].tolist(), rows[:, 5].tolist())]
        self.hashes[at] = [key_hash64(data[a:a + n]) for a, n in zip(rows[:, 0].tolist(), rows[:, 1].tolist())]
        self.maps[shard] = data
        self.indexed[shard] = True

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
        """Unmap the shards. A map still exported (a view someone holds) closes when the last view
        goes: close() itself raises nothing, so it never hides the error it is cleaning up after."""
        for data in self.maps:
            if data is not None:
                try:
                    data.close()
                except BufferError:
                    pass
        self.maps = [None] * len(self.paths)
        self.indexed[:] = False
