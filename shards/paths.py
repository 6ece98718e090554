"""Where a prepared dataset lives on node-local disk, and how its files are named.

    DEST/manifest.json              written last: its presence means "complete"
    DEST/train/train-000000.tar     WebDataset shards: KEY.jpg, KEY.cls, KEY.json
    DEST/val/val-000000.tar
    DEST/v2/v2-000000.tar           evaluation sets, where prepared (--eval-source): EVAL_SPLITS
    DEST/real_labels.json           the ReaL label sets of the val images, where prepared (--real-labels)
    DEST/.prepare.lock              flock taken by the one prepare that works, naming its holder
    DEST/.readers.lock              flock shared by the loaders reading it, taken alone by a prepare replacing it
    DEST/.prepare-tmp/              spill files and shards being written (never read by train)
    DEST/.prepare-step              the shared read: how a node's first task stands, for its other tasks
    DEST/.prepare-node.NODE         the shared read: NODE's first task works here (one --dest on two nodes)

The shard format itself (what a sample is in a tar) is shards/format.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SPLITS = ("train", "val")  # every dataset has these
# ImageNetV2's three variants (matched-frequency, threshold0.7, top-images): further splits a dataset
# may have, each evaluated as val is (every sample once over the ranks, centre crop)
EVAL_SPLITS = ("v2", "v2-threshold", "v2-top-images")
ALL_SPLITS = SPLITS + EVAL_SPLITS
REAL_LABELS_FILE = "real_labels.json"
REAL_LABELS_FORMAT = "real-labels/1"  # {"format", "labels": {val key: [the dataset's class indices]}}
MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".prepare.lock"
READERS_NAME = ".readers.lock"
WORK_DIR_NAME = ".prepare-tmp"
STEP_FILE = ".prepare-step"
DEFAULT_SUBDIR = "imagenet"
SHARD_FILE = re.compile(rf"^({'|'.join(ALL_SPLITS)})-\d{{6}}\.tar$")  # the names shard_name gives, in a split's folder


def metric_prefix(split: str) -> str:
    """The name a split's metrics carry in metrics.jsonl: val_top1, v2_top1, v2_threshold_top1."""
    return split.replace("-", "_")


def node_marker(node: str) -> str:
    """The file a node's first task keeps in DEST while it prepares there with the other nodes."""
    return f".prepare-node.{node}"


def shard_name(split: str, index: int) -> str:
    """Path of shard `index` of `split`, relative to the dataset root (as stored in the manifest)."""
    return f"{split}/{split}-{index:06d}.tar"


def user_path(text: str) -> Path:
    """A path flag's value (argparse's type=), a leading `~` made the home: the shell expands `--dest ~/x` but not
    `--dest=~/x`, nor a `~` inside a variable's value (sbatch --export, TRAIN_ARGS), and a folder named `~` made in
    the working directory is one `rm -rf ~` from losing the home."""
    return Path(os.path.expanduser(text))


def path_is(path: Path, kind: str) -> bool:
    """Whether `path` is a "file" or a "dir": Path.is_file or is_dir, but False too for a name longer than the file
    system takes (a sweep's run named by its settings), for which they raise OSError instead of answering."""
    try:
        return path.is_file() if kind == "file" else path.is_dir()
    except OSError:
        return False


def default_dest(environ=os.environ) -> Path | None:
    """`$SLURM_TMPDIR/imagenet`, the node-local default for both stages; None outside SLURM."""
    tmpdir = environ.get("SLURM_TMPDIR")
    return Path(tmpdir) / DEFAULT_SUBDIR if tmpdir else None
