"""Disk space on --dest: what prepare needs there, as pure functions, and the file system's answer.

While prepare runs, --dest holds every image once as spill files, and then, shard by shard, the
shards that replace them. A shard is larger than its images (shards.format: SAMPLE_OVERHEAD a
sample, SHARD_END a shard). So the peak is the spills, plus the tar overhead of every shard written
so far, plus the shards being written (one per worker) while their spills still exist.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from shards.format import SAMPLE_OVERHEAD

SPILL_OVERHEAD = 200  # a pickled sample's keys, label and metadata around the JPEG bytes
MARGIN = 16 << 20  # once per check: the manifest, file-system slack


def space_needed(image_bytes: int, samples: int, shard_bytes: float, workers: int,
                 shard_image_bytes: int | None = None) -> int:
    """The peak of spills and shards for a split of `samples` images (`image_bytes` in all; the shards hold
    `shard_image_bytes` of images, where the spills are counted elsewhere: `image_bytes` where None).

    >>> space_needed(4500 * 1000, 1000, 1e6, 1) > 1.5 * 4500 * 1000   # small images: tar doubles them
    True
    """
    spills = image_bytes + samples * SPILL_OVERHEAD
    shards = (image_bytes if shard_image_bytes is None else shard_image_bytes) + samples * SAMPLE_OVERHEAD
    # shards being written beside their spills, moved samples: at most the split's shards all told, however large
    # --shard-size (--shard-size 100000 on 16 workers asked 3.2 TB of disk for ImageNet's 145 GB; 1e308 overflowed)
    in_flight = int(min(2 * workers * shard_bytes, shards))
    return spills + samples * SAMPLE_OVERHEAD + in_flight


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def is_out_of_space(exn: BaseException) -> bool:
    return isinstance(exn, OSError) and exn.errno in (errno.ENOSPC, errno.EDQUOT)


def out_of_files(files: int, available: int) -> bool:
    """Whether a file system that said it was full ran out of files (inodes: statvfs's f_files, f_favail), not
    bytes; one that counts none (f_files 0: btrfs, some network file systems) never does. Pure."""
    return files > 0 and available == 0


def ran_out_of_files(dest: Path) -> bool:
    """Whether the file system of `dest` has no file left to make: asked as a full disk is met, before the run's
    files are removed (their inodes with them)."""
    try:
        counts = os.statvfs(dest)
    except OSError:
        return False
    return out_of_files(counts.f_files, counts.f_favail)


def out_of_space_message(dest: Path, during: str, needed: int, free_at_start: int, files: bool = False) -> str:
    """The one line for a full --dest; `files`: it ran out of files (`ran_out_of_files`), not bytes."""
    if files:
        return (f"{dest} ran out of files (inodes: its file system holds at most {os.statvfs(dest).f_files:,}) while "
                f"{during}, with {free_bytes(dest) / 1e9:.2f} GB free now. What this run wrote is removed. Give a "
                "larger --shard-size (fewer shards and spill files) or fewer --workers (each writes a spill file a "
                "bucket), or choose another --dest")
    return (f"{dest} ran out of space while {during}: prepare needs about {needed / 1e9:.2f} GB there and the "
            f"file system had {free_at_start / 1e9:.2f} GB free at the start ({free_bytes(dest) / 1e9:.2f} GB now: "
            "other jobs may be writing to it). What this run wrote is removed. Free space, choose another --dest "
            "(node-local disk with room for the dataset), or shrink the images with --resize.")
