"""Types of train._tarindex (train/native/tarindex.c), the shard index that train/shard_index.py
wraps: int64 rows (key_at, key_len, jpg_at, jpg_len, cls_at, cls_len) as bytes."""

from typing_extensions import Buffer


def tar_index(shard: Buffer) -> bytes: ...
