"""The evaluation sets papers report besides the validation top-1, prepared with the dataset.

- ImageNetV2 (Recht et al. 2019): three test sets of 10,000 images, `<variant>/<class index>/<name>.jpeg`
  with the class index of the 1000-class order (sorted wnids, the dataset's own), each a .tar.gz read
  as a stream or the folder it extracts to. Each becomes a split of the dataset, evaluated as `val`
  is: `v2` (matched-frequency, the one reported as "ImageNetV2"), `v2-threshold` (threshold0.7) and
  `v2-top-images`.
- ReaL (Beyer et al. 2020, "Are we done with ImageNet?"): real.json, a list of 50,000 label sets, the
  i-th for ILSVRC2012_val_{i+1:08d}, some empty. Recorded beside the validation shards as
  `real_labels.json` (key -> class indices); an image counts when its set is not empty, and a
  prediction is right when it is in the set.

`with_eval_sets` wraps any source: the splits of the eval sets follow train and val. The evaluation sets
a command line adds to a complete dataset (`eval_addition`) are prepared over the dataset itself
(`PreparedDataset`): its classes, its val keys read back from its val shards; train and val are not read.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prepare.completeness import Declared, Gap
from prepare.labels import builtin_class_names
from prepare.sources.base import (
    FileChunk, Item, Source, SourceError, checked_key, estimate_bytes, file_chunks, list_images,
)
from prepare.sources.tars import gzipped_tar_images
from shards.format import shard_keys
from shards.paths import REAL_LABELS_FORMAT
from shards.manifest import ClassInfo, DamagedData, Manifest

# variant name in ImageNetV2's archive and folder names -> the split it becomes (shards.paths.EVAL_SPLITS)
V2_VARIANTS = {"matched-frequency": "v2", "threshold0.7": "v2-threshold", "top-images": "v2-top-images"}
# as downloaded (imagenetv2-matched-frequency.tar.gz) or extracted (imagenetv2-matched-frequency-format-val)
V2_NAME = re.compile(r"^imagenetv2-(matched-frequency|threshold0\.7|top-images)(-format-val|\.tar\.gz)?$")
V2_PER_CLASS = 10  # images in each class of each variant: 10,000 in ImageNet-1k's 1,000
REAL_VAL_KEY = "ILSVRC2012_val_{:08d}"  # real.json's i-th entry is this key of i + 1
OFFICIAL_VAL_KEY = re.compile(r"^ILSVRC2012_val_\d{8}$")  # REAL_VAL_KEY's keys; no train or ImageNetV2 key is one
EVAL_IDENTITY = ("eval_sets", "real_labels")  # what the evaluation sets add to a source's identity (eval_fingerprint)


class EvalSetError(SourceError):
    """An evaluation set (--eval-source, --real-labels) cannot be read: the message says what to do."""


class ImageNet1k:
    """ImageNet-1k's class indices, as ImageNetV2 and ReaL number their labels (the 1000 classes in
    sorted-wnid order, prepare/imagenet_classes.txt), turned into the dataset's own: the same on an
    ImageNet-1k dataset; on a dataset of other classes, its index of the same wnid, or an error."""

    def __init__(self, classes: list[ClassInfo]):
        self.wnids = tuple(builtin_class_names())
        self.labels = {c.wnid: c.index for c in classes}

    def label(self, index: int | str, where: str) -> int:
        if isinstance(index, str) and not index.isdigit():
            raise EvalSetError(f"{where}: ImageNetV2 holds one folder per class index (0/ ... 999/), not {index!r}")
        index = int(index)
        if not 0 <= index < len(self.wnids):
            raise EvalSetError(f"{where}: class index {index} is not one of ImageNet-1k's 0 ... 999")
        label = self.labels.get(self.wnids[index])
        if label is None:
            raise EvalSetError(f"{where}: class index {index} is ImageNet-1k's {self.wnids[index]}, which this dataset "
                               "does not have: ImageNetV2 and ReaL label the 1000 classes of ImageNet-1k")
        return label


@dataclass(frozen=True)
class V2Archive:
    """An ImageNetV2 variant as downloaded, imagenetv2-<variant>.tar.gz, read as a stream (one part:
    gzip cannot be split); members <variant folder>/<class index>/<name>.jpeg."""
    path: str
    size: int
    classes: tuple[ClassInfo, ...]  # the dataset's

    def wnids(self) -> set[str]:
        return {c.wnid for c in self.classes}

    def items(self) -> Iterator[Item]:
        imagenet = ImageNet1k(list(self.classes))
        for member, origin, stem, image in gzipped_tar_images(self.path):
            folder = member.rsplit("/", 2)[-2] if "/" in member else ""
            label = imagenet.label(folder, origin)
            yield Item(checked_key(f"{folder}_{stem}", member, origin), self.classes[label].wnid, origin, image)


@dataclass(frozen=True)
class ImageNetV2:
    """One ImageNetV2 variant: where it is, the split it becomes, and its images as (key, wnid, path)
    where it is extracted (None for the archive, read as a stream). Keys are `<class index>_<file
    stem>`: unique as the paths are."""
    path: Path
    variant: str
    split: str
    images: tuple[tuple[str, str, str], ...] | None
    classes: tuple[ClassInfo, ...]  # the dataset's
    size: int  # bytes: the archive's, or the folder's images' (estimated from a sample of them)

    def parts(self) -> list[FileChunk] | list[V2Archive]:
        if self.images is None:
            return [V2Archive(str(self.path), self.size, self.classes)]
        return file_chunks(self.images, self.size)

    def count(self) -> int | None:
        """Images it holds where listed (the archive states no count)."""
        return None if self.images is None else len(self.images)

    def declared(self) -> Declared:
        """ImageNetV2's 10 images in each class (10,000 in ImageNet-1k's 1,000): where extracted, the
        classes short of them named before reading; an archive counted as it is read."""
        by = f"ImageNetV2 (10 in each of the {len(self.classes):,} classes)"
        expected = V2_PER_CLASS * len(self.classes)
        if self.images is None:
            return Declared(self.split, images=expected, images_by=by)
        per_wnid = collections.Counter(wnid for _, wnid, _ in self.images)
        index = {wnid: i for i, wnid in enumerate(builtin_class_names())}
        short = [(index.get(c.wnid, c.wnid), V2_PER_CLASS - per_wnid[c.wnid]) for c in self.classes
                 if per_wnid[c.wnid] < V2_PER_CLASS]
        gap = Gap("images", expected, by, tuple(f"{folder}/ ({count})" for folder, count in short),
                  count=sum(count for _, count in short))
        return Declared(self.split, (gap,), expected, by, len(self.images))


def v2_variant(path: Path) -> str:
    """The variant an ImageNetV2 archive or folder holds, from its name as downloaded or extracted."""
    match = V2_NAME.match(path.name)
    if match is None:
        raise EvalSetError(
            f"--eval-source {path}: not ImageNetV2. Give its archive as downloaded "
            "(imagenetv2-matched-frequency.tar.gz, imagenetv2-threshold0.7.tar.gz, imagenetv2-top-images.tar.gz) "
            "or the folder it extracts to, named as it came (imagenetv2-matched-frequency-format-val, ...; "
            "holding 0/ ... 999/)")
    return match.group(1)


def read_v2(path: Path, classes: list[ClassInfo]) -> ImageNetV2:
    """An ImageNetV2 variant: its archive (read later, as a stream) or its extracted folder (listed
    now: a folder per ImageNet-1k class index, each a class of the dataset)."""
    path = Path(path)
    variant = v2_variant(path)
    if path.is_file():
        return ImageNetV2(path, variant, V2_VARIANTS[variant], None, tuple(classes), path.stat().st_size)
    if not path.is_dir():
        raise EvalSetError(f"--eval-source {path} does not exist")
    indices = sorted((p for p in path.iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name))
    if not indices:
        raise EvalSetError(f"--eval-source {path}: ImageNetV2 holds one folder per class index (0/ ... 999/); "
                           "found none")
    imagenet, images = ImageNet1k(classes), []
    for class_folder in indices:
        wnid = classes[imagenet.label(class_folder.name, str(class_folder))].wnid
        images += [(f"{class_folder.name}_{key}", wnid, file) for key, file in list_images(class_folder)]
    if not images:
        raise EvalSetError(f"--eval-source {path} holds no images")
    return ImageNetV2(path, variant, V2_VARIANTS[variant], tuple(images), tuple(classes),
                      estimate_bytes([file for _, _, file in images]))


def parse_real_json(text: str, origin: str) -> list[list[int]]:
    """real.json: a list of label sets (lists of class indices), one per validation image in order."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exn:
        raise EvalSetError(f"--real-labels {origin} is not JSON ({exn}): download real.json again") from None
    except RecursionError:  # nested deeper than Python's stack: no real.json is
        raise EvalSetError(f"--real-labels {origin} nests its lists deeper than real.json's two levels: download "
                           "real.json again") from None
    if not isinstance(raw, list) or not all(isinstance(s, list) and all(type(i) is int for i in s) for s in raw):
        raise EvalSetError(f"--real-labels {origin}: expected a JSON list of lists of class indices (real.json from "
                           "github.com/google-research/reassessed-imagenet)")
    return raw


OFFICIAL_VAL_IMAGES = 50_000  # the ILSVRC2012 validation images real.json gives a set each


def real_labels_by_key(sets: list[list[int]], val_keys: set[str], imagenet: ImageNet1k,
                       origin: str, partial: bool = False) -> dict[str, list[int]]:
    """The ReaL label sets of the validation keys, as the dataset's labels: entry i is
    ILSVRC2012_val_{i+1:08d}'s. Every val image must have its entry and every entry its image, or
    the sets belong to another val set; with `partial` (a val prepared with --allow-partial), the
    entries of the images not there are left out."""
    by_key = {REAL_VAL_KEY.format(i + 1): labels for i, labels in enumerate(sets)}
    if partial:
        by_key = {key: labels for key, labels in by_key.items() if key in val_keys}
    missing, extra = sorted(val_keys - by_key.keys()), sorted(by_key.keys() - val_keys)
    if extra and not missing and len(sets) == OFFICIAL_VAL_IMAGES:  # real.json whole: the images are what is missing
        raise EvalSetError(f"the source's validation split lacks {len(extra):,} of the {OFFICIAL_VAL_IMAGES:,} images "
                           f"--real-labels {origin} labels ({', '.join(extra[:2])}{', ...' * (len(extra) > 2)}): the "
                           "download is incomplete: download val again, or prepare with --allow-partial (ReaL is then "
                           "scored on the images there)")
    if missing or extra:
        raise EvalSetError(f"--real-labels {origin} has {len(sets)} label sets for {len(val_keys)} validation images "
                           f"(without a set: {missing[:2]}; a set without an image: {extra[:2]}): it belongs to the "
                           "50,000 official validation images, keyed ILSVRC2012_val_00000001 ...")
    return {key: sorted({imagenet.label(i, f"--real-labels {origin}, {key}") for i in labels})
            for key, labels in by_key.items()}


def real_labels_document(by_key: dict[str, list[int]]) -> bytes:
    """What the dataset keeps: real_labels.json, sorted by key, compact."""
    return json.dumps({"format": REAL_LABELS_FORMAT, "labels": by_key}, sort_keys=True,
                      separators=(",", ":")).encode()


class WithEvalSets(Source):
    """`base` (any layout) with ImageNetV2 splits after its own, and the ReaL labels of its val."""

    def __init__(self, base: Source, v2_sets: list[ImageNetV2], real_json: Path | None):
        self.base = base
        self.v2 = {v2.split: v2 for v2 in sorted(v2_sets, key=lambda v2: list(V2_VARIANTS).index(v2.variant))}
        if len(self.v2) < len(v2_sets):
            raise EvalSetError("--eval-source names one ImageNetV2 variant twice: give each at most once")
        self.layout, self.root, self.classes = base.layout, base.root, base.classes
        self.splits = base.splits + tuple(self.v2)
        self.real_json = real_json
        self._real_sets = None if real_json is None else parse_real_json(read_text(real_json), str(real_json))
        self.partial = False  # with --allow-partial: ReaL's sets of the val images not there are left out

    def check_real_labels(self, allow_partial: bool) -> None:
        """real.json against the val keys, now, where the layout lists them before reading (after the
        download's completeness: a val image missing is named as such, not as ReaL's)."""
        self.partial = allow_partial
        known = self.base.val_keys()
        if self._real_sets is not None and known is not None:
            self.real_labels(known)

    def val_keys(self) -> set[str] | None:
        return self.base.val_keys()

    def class_subsets(self) -> dict[str, list[int]]:
        return self.base.class_subsets()

    def class_maps(self) -> dict[str, dict]:
        return self.base.class_maps()

    def parts(self, split: str):
        return self.v2[split].parts() if split in self.v2 else self.base.parts(split)

    def split_bytes(self, split: str) -> int:
        return self.v2[split].size if split in self.v2 else self.base.split_bytes(split)

    def read_together(self) -> tuple[str, ...]:
        return self.base.read_together()

    def joint_parts(self, splits: tuple[str, ...]) -> list:
        return self.base.joint_parts(splits)

    def seek_index(self) -> str | None:
        return self.base.seek_index()

    def close(self) -> None:
        self.base.close()

    def why_empty(self, split: str) -> str:
        return "" if split in self.v2 else self.base.why_empty(split)

    def declared(self, split: str) -> Declared:
        return self.v2[split].declared() if split in self.v2 else self.base.declared(split)

    def estimated_count(self, split: str) -> int:
        if split in self.v2:
            return self.v2[split].count() or V2_PER_CLASS * len(self.classes)
        return self.base.estimated_count(split)

    def real_labels(self, val_keys: set[str]) -> dict[str, list[int]] | None:
        """The ReaL label sets by validation key, checked against the keys; None without --real-labels."""
        if self._real_sets is None:
            return None
        return real_labels_by_key(self._real_sets, val_keys, ImageNet1k(self.classes), str(self.real_json),
                                  self.partial)


def eval_fingerprint(eval_sources: tuple[Path, ...], real_json: Path | None) -> dict:
    """What the evaluation sets add to a source's identity: nothing without them (datasets made
    before keep theirs); ImageNetV2 by path and variant, an archive by its size and mtime too (as
    the official archives are; a folder as trees are, by path), real.json by its SHA-256."""
    extra = {}
    if eval_sources:
        sets = sorted((v2_fingerprint(Path(path)) for path in eval_sources), key=lambda found: found["variant"])
        if len({found["variant"] for found in sets}) < len(sets):
            raise EvalSetError("--eval-source names one ImageNetV2 variant twice: give each at most once")
        extra["eval_sets"] = sets
    if real_json is not None:
        extra["real_labels"] = {"path": str(Path(real_json).resolve()),
                                "sha256": hashlib.sha256(read_text(real_json).encode()).hexdigest()}
    return extra


def v2_fingerprint(path: Path) -> dict:
    found = {"path": str(path.resolve()), "variant": v2_variant(path)}
    if path.is_file():
        st = path.stat()
        found |= {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return found


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exn:
        raise EvalSetError(f"cannot read --real-labels {path}: {exn}") from None


def with_eval_sets(base: Source, eval_sources: tuple[Path, ...] = (), real_json: Path | None = None) -> Source:
    """`base` itself when no evaluation set is asked for; else it with them (read and checked now,
    before anything is prepared: a wrong folder fails in seconds, not after the train split)."""
    if not eval_sources and real_json is None:
        return base
    return WithEvalSets(base, [read_v2(Path(folder), base.classes) for folder in eval_sources], real_json)


# ---------------------------------------------------------------- evaluation sets added to a prepared dataset

@dataclass(frozen=True)
class EvalAddition:
    """What a command line adds to a complete dataset: ImageNetV2 splits it lacks, ReaL's labels
    where it has none."""
    splits: tuple[str, ...]
    real_labels: bool

    def describe(self) -> str:
        return " and ".join([*self.splits, *(["ReaL's labels"] if self.real_labels else [])])


def eval_addition(old: dict, new: dict) -> EvalAddition | None:
    """What the identity `new` (source and options) adds to the dataset made from `old`, or None
    where it is not only an addition: other options or source, an evaluation set removed or changed
    (another path, other bytes, another real.json), or nothing added. Removing is never an addition:
    a job script that lost an --eval-source would silently drop the set (and a resumed run's metric)."""
    if without_eval_sets(old) != without_eval_sets(new):
        return None
    old_sets, new_sets = old["source"].get("eval_sets", []), new["source"].get("eval_sets", [])
    old_real, new_real = old["source"].get("real_labels"), new["source"].get("real_labels")
    if any(found not in new_sets for found in old_sets):
        return None
    if old_real is not None and not same_bytes(old_real, new_real):
        return None
    addition = EvalAddition(tuple(V2_VARIANTS[found["variant"]] for found in new_sets if found not in old_sets),
                            old_real is None and new_real is not None)
    return addition if addition.splits or addition.real_labels else None


def same_bytes(old_real: dict, new_real: dict | None) -> bool:
    """Whether two real.json are the same labels: by their SHA-256 alone (timm's copy moves with every venv). Pure."""
    return new_real is not None and old_real["sha256"] == new_real["sha256"]


def comparable(identity: dict) -> dict:
    """An identity as two are compared: real.json by its bytes, not where it lay. Pure."""
    real = identity["source"].get("real_labels")
    if real is None:
        return identity
    return {**identity, "source": {**identity["source"], "real_labels": {"sha256": real["sha256"]}}}


def without_eval_sets(identity: dict) -> dict:
    """An identity (source and options) but for its evaluation sets: what train and val are made from."""
    return {"options": identity["options"],
            "source": {k: v for k, v in identity["source"].items() if k not in EVAL_IDENTITY}}


def added_sources(eval_sources: tuple[Path, ...], real_json: Path | None,
                  addition: EvalAddition) -> tuple[tuple[Path, ...], Path | None]:
    """The --eval-source paths and real.json of the command line that `addition` prepares."""
    return (tuple(path for path in eval_sources if V2_VARIANTS[v2_variant(Path(path))] in addition.splits),
            real_json if addition.real_labels else None)


class PreparedDataset(Source):
    """A complete prepared dataset as the base that evaluation sets are added to: its classes, and
    its val keys read back from its val shards (ReaL is checked against them). It has no split of
    its own to read: train and val stay as they are."""
    splits: tuple[str, ...] = ()

    def __init__(self, dest: Path, manifest: Manifest):
        self.dest, self.manifest, self.classes = Path(dest), manifest, manifest.classes
        self.layout, self.root = manifest.source.get("layout", ""), Path(manifest.source.get("path", dest))
        self._val_keys: set[str] | None = None

    def val_keys(self) -> set[str]:
        """The val images the dataset was made from, as a one-shot prepare checks ReaL against
        them: the keys in its val shards (tar headers only: about 4 s for 50,000), and the official
        val names --skip-bad left out (the manifest's `skipped` does not say a key's split, but
        only val images bear these names)."""
        if self._val_keys is None:
            keys = {key for shard in self.manifest.splits["val"].shards for key in self.keys_of(shard.name)}
            self._val_keys = keys | {key for key in self.manifest.skipped if OFFICIAL_VAL_KEY.match(key)}
        return self._val_keys

    def keys_of(self, name: str) -> list[str]:
        try:
            return shard_keys(self.dest / name)
        except (OSError, tarfile.TarError) as exn:
            raise DamagedData(f"cannot read the keys of {self.dest / name} ({exn}): the dataset is damaged; rerun "
                              "with --verify to rebuild it") from None
