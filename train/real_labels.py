"""ReaL top-1 (Beyer et al. 2020, "Are we done with ImageNet?"): the val images' label sets, where
the dataset was prepared with them (`python -m prepare --real-labels real.json`).

    real = RealLabels.of(root)                       # None: prepared without them
    for batch in val_loader.batches():
        predictions = model(batch.images).argmax(1)
        right, counted = real.score(predictions, batch.key_hashes)

An image counts when its set is not empty; a prediction is right when it is in the set (as timm's
validate.py reports it). Batches carry each sample's key hash: the sets are found by it, so no
per-sample key crosses the loader.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from shards.paths import REAL_LABELS_FORMAT
from shards.manifest import DatasetNotReady, Manifest, read_complete_manifest
from train.shard_index import key_hash



class RealLabels:
    """Label sets by key hash: `hashes` sorted, `sets` (n, most labels of one image) padded with -1."""

    def __init__(self, by_key: dict[str, list[int]]):
        hashes = np.array([key_hash(key) for key in by_key], dtype=np.int64)
        order = np.argsort(hashes)
        self.hashes = hashes[order]
        if len(self.hashes) and (np.diff(self.hashes) == 0).any():
            raise DatasetNotReady("two validation keys of the ReaL labels share a key hash: ReaL top-1 cannot tell "
                                  "them apart on this dataset; prepare it without --real-labels")
        rows = list(by_key.values())
        width = max((len(labels) for labels in rows), default=0) or 1
        sets = np.full((len(rows), width), -1, dtype=np.int64)
        for i, labels in enumerate(rows):
            sets[i, :len(labels)] = labels
        self.sets = torch.from_numpy(sets[order])
        self.labelled = int((self.sets[:, 0] >= 0).sum())

    @classmethod
    def of(cls, root: str | Path, manifest: Manifest | None = None) -> "RealLabels | None":
        """The dataset's ReaL labels; None where it was prepared without them. A leading `~` in `root` is the home."""
        root = Path(root).expanduser()  # (as ImageNetLoader's root)
        manifest = manifest or read_complete_manifest(root)
        if not manifest.real_labels:
            return None
        path = root / manifest.real_labels["file"]
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as exn:
            raise DatasetNotReady(f"cannot read {path} ({exn}): rerun prepare with --verify on this node") from None
        if not isinstance(document, dict) or document.get("format") != REAL_LABELS_FORMAT:
            raise DatasetNotReady(f"{path} is not ReaL labels of format {REAL_LABELS_FORMAT}: rerun prepare with "
                                  "--verify")
        return cls(document["labels"])

    def __len__(self) -> int:
        return len(self.hashes)

    def score(self, predictions: torch.Tensor, key_hashes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(right, counted) of a batch, on the predictions' device: predictions in the image's set,
        among the images whose set is not empty. A sample with no set is not a val image: ValueError; so are
        predictions that are not one class a sample (logits, or argmax's keepdim column), which broadcast against
        the sets into a torch error about sizes, or into a wrong count."""
        if predictions.dim() != 1 or key_hashes.dim() != 1 or len(predictions) != len(key_hashes):
            raise ValueError(f"score takes one predicted class a sample, model(images).argmax(1), and the batch's "
                             f"key_hashes: not predictions of shape {tuple(predictions.shape)} with key hashes of "
                             f"shape {tuple(key_hashes.shape)}")
        wanted = key_hashes.cpu().numpy()
        rows = np.searchsorted(self.hashes, wanted).clip(0, max(len(self.hashes) - 1, 0))
        if len(wanted) and (not len(self.hashes) or (self.hashes[rows] != wanted).any()):
            raise ValueError("a batch holds samples without ReaL labels: score val batches of the dataset the labels "
                             "were prepared with")
        sets = self.sets[torch.from_numpy(rows)].to(predictions.device, non_blocking=True)
        counted = sets[:, 0] >= 0
        right = (sets == predictions[:, None]).any(dim=1) & counted
        return right.sum(), counted.sum()
