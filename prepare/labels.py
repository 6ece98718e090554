"""Labels, exactly: class index = position of the wnid among the sorted train wnids (torchvision's
convention), validation labels through the devkit's meta.mat or Kaggle's CSV.

The parsing functions take text or bytes and return plain values; only `read_devkit` touches files.
"""

from __future__ import annotations

import csv
import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import scipy.io

from shards.errors import UserError
from shards.manifest import ClassInfo

WNID = re.compile(r"^n\d{8}$")
VAL_KEY = "ILSVRC2012_val_{:08d}"
META_MAT = "data/meta.mat"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"


class LabelError(UserError, ValueError):
    """Labels that cannot be trusted: missing, inconsistent or unparseable."""


@dataclass(frozen=True)
class Synset:
    ilsvrc_id: int  # ILSVRC2012_ID: what the ground-truth file holds; NOT the class index
    wnid: str
    words: str
    num_children: int


@dataclass(frozen=True)
class Devkit:
    synsets: list[Synset]
    ground_truth: list[int]  # ILSVRC2012_ID of val image i+1


def parse_meta_mat(data: bytes) -> list[Synset]:
    """Every synset of the devkit's meta.mat (leaves and internal nodes), in file order."""
    table = scipy.io.loadmat(io.BytesIO(data), squeeze_me=True)["synsets"]
    return [
        Synset(int(row["ILSVRC2012_ID"]), str(row["WNID"]), str(row["words"]), int(row["num_children"]))
        for row in table.ravel()
    ]


def leaf_synsets(synsets: list[Synset]) -> list[Synset]:
    """The classes: only synsets without children are labels (1000 of 1860 in the real devkit)."""
    return [s for s in synsets if s.num_children == 0]


def parse_ground_truth(text: str) -> list[int]:
    try:
        return [int(line) for line in text.split()]
    except ValueError as exn:
        raise LabelError(f"{GROUND_TRUTH}: not a list of integers ({exn})") from None


def val_wnids_from_devkit(devkit: Devkit) -> dict[str, str]:
    """Validation key -> wnid: line i of the ground truth is the ILSVRC2012_ID of val image i."""
    wnid_of_id = {s.ilsvrc_id: s.wnid for s in leaf_synsets(devkit.synsets)}
    labels = {}
    for number, ilsvrc_id in enumerate(devkit.ground_truth, start=1):
        if ilsvrc_id not in wnid_of_id:
            raise LabelError(f"{GROUND_TRUTH} line {number}: ILSVRC2012_ID {ilsvrc_id} is not a leaf synset of meta.mat")
        labels[VAL_KEY.format(number)] = wnid_of_id[ilsvrc_id]
    return labels


def parse_kaggle_val_solution(text: str) -> dict[str, str]:
    """LOC_val_solution.csv: ImageId,PredictionString; the first token of the string is the wnid."""
    rows = csv.DictReader(io.StringIO(text))
    if rows.fieldnames is None or not {"ImageId", "PredictionString"} <= set(rows.fieldnames):
        raise LabelError("LOC_val_solution.csv: expected the header ImageId,PredictionString")
    labels = {}
    for row in rows:
        tokens = (row["PredictionString"] or "").split()
        if not tokens or not WNID.match(tokens[0]):
            raise LabelError(f"LOC_val_solution.csv: no wnid for {row['ImageId']}")
        labels[row["ImageId"]] = tokens[0]
    return labels


def parse_synset_mapping(text: str) -> dict[str, str]:
    """LOC_synset_mapping.txt: 'n01440764 tench, Tinca tinca' per line -> {wnid: name}."""
    names = {}
    for line in text.splitlines():
        if line.strip():
            wnid, _, name = line.strip().partition(" ")
            names[wnid] = name
    return names


def class_table(train_wnids: list[str] | set[str], names: dict[str, str]) -> list[ClassInfo]:
    """Classes in index order: index = position in the sorted train wnids (torchvision's ImageFolder)."""
    return [ClassInfo(index, wnid, names.get(wnid, wnid)) for index, wnid in enumerate(sorted(train_wnids))]


def check_val_labels(val_wnids: dict[str, str], classes: list[ClassInfo]) -> None:
    known = {c.wnid for c in classes}
    unknown = sorted({w for w in val_wnids.values() if w not in known})
    if unknown:
        raise LabelError(f"validation labels name {len(unknown)} wnid(s) with no train class, e.g. {unknown[:3]}: "
                         "the devkit or CSV does not belong to this train set")


def read_devkit(path: Path) -> Devkit:
    """meta.mat and the validation ground truth from ILSVRC2012_devkit_t12.tar.gz (read in place)."""
    try:
        with tarfile.open(path, "r:*") as tar:
            members = {m.name.split("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
            meta, truth = members.get(META_MAT), members.get(GROUND_TRUTH)
            if meta is None or truth is None:
                raise LabelError(f"{path} lacks {META_MAT} or {GROUND_TRUTH}: is it ILSVRC2012_devkit_t12.tar.gz?")
            meta_bytes = tar.extractfile(meta).read()
            truth_text = tar.extractfile(truth).read().decode()
    except (tarfile.TarError, EOFError, OSError) as exn:
        raise LabelError(f"cannot read the devkit {path}: {exn}. Download ILSVRC2012_devkit_t12.tar.gz again.") from None
    return Devkit(parse_meta_mat(meta_bytes), parse_ground_truth(truth_text))
