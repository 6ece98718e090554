"""Types of train._tarindex (train/native/tarindex.c), the shard index that train/shard_index.py
wraps: int64 rows (key_at, key_len, jpg_at, jpg_len, cls_at, cls_len) as bytes; and the shards' maps, watched for
a SIGBUS (a shard truncated under its map)."""

from typing_extensions import Buffer


def tar_index(shard: Buffer) -> bytes: ...


def map_shard(fd: int, size: int) -> int: ...


def unmap_shard(address: int, size: int) -> None: ...


def unreadable() -> int: ...


def was_unreadable(address: int) -> bool: ...
