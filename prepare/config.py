"""prepare's settings: one typed configuration (`PrepareConfig`), built from the command line by
prepare/cli.py and passed explicitly; `PrepareError`, a refusal or failure of the build."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prepare.images import RESTART_MCUS
from prepare.node_group import NodeGroupEnv
from shards.errors import UserError


class PrepareError(UserError, RuntimeError):
    """A refusal or failure whose message tells the user what to do."""


@dataclass(frozen=True)
class PrepareConfig:
    source: Path
    dest: Path
    seed: int = 0
    shard_size_mb: float = 200.0
    resize: int | None = None  # longer side at most this many pixels
    quality: int = 90  # JPEG quality of re-encoded images
    restart_mcus: int = RESTART_MCUS  # seekable JPEGs: restart markers every at most this many MCUs (0: none)
    skip_bad: bool = False
    force: bool = False
    verify: bool = False  # read every shard of an existing dataset against its checksums
    workers: int = 1
    progress_interval: float = 10.0
    group: NodeGroupEnv | None = None  # the srun step's nodes, sharing the read (None: this node reads alone)
    group_timeout_s: float = 1800.0  # longest wait for another node in any one collective
    eval_sources: tuple[Path, ...] = ()  # ImageNetV2 variants (archives or folders): further splits (eval_sets.py)
    real_labels: Path | None = None  # ReaL's real.json: the val images' label sets
    allow_partial: bool = False  # prepare what is there of an incomplete download (recorded in the manifest)
    class_table: str | None = None  # winter21's: the table its labels index (None: as prepared at --dest, else its own)

    def output_options(self) -> dict:
        """The options that decide the bytes of the shards (a re-run must match them)."""
        return {"seed": self.seed, "shard_size_mb": self.shard_size_mb, "resize": self.resize,
                "quality": self.quality, "restart_mcus": self.restart_mcus, "skip_bad": self.skip_bad}
