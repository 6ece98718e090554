"""Labels, exactly: class index = position of the wnid among the sorted train wnids (torchvision's
convention), validation labels through the devkit's meta.mat or Kaggle's CSV; the class lists of
the Hugging Face hub's layouts (ILSVRC/imagenet-1k's classes.py, read as text and never run); the
built-in class tables (`BUILTIN_TABLES`: the 1000 ILSVRC 2012 classes, prepare/imagenet_classes.txt, and
ImageNet-12k's and -22k's, from timm; winter21's own, from birder) and where one table's classes lie in
another (`class_maps`).

The parsing functions take text or bytes and return plain values; only `read_devkit` and
`read_builtin_table` (the package's own files, under `builtin_class_names` and the maps) touch files.
"""

from __future__ import annotations

import ast
import csv
import functools
import gzip
import importlib.resources
import io
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import scipy.io

from shards.errors import UserError
from shards.manifest import ClassInfo

WNID = re.compile(r"^n\d{8}$")
VAL_KEY = "ILSVRC2012_val_{:08d}"
META_MAT = "data/meta.mat"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
GZIP_MAGIC = b"\x1f\x8b"


class LabelError(UserError, ValueError):
    """Labels that cannot be trusted: missing, inconsistent or unparseable."""


@dataclass(frozen=True)
class Synset:
    ilsvrc_id: int  # ILSVRC2012_ID: what the ground-truth file holds; NOT the class index
    wnid: str
    words: str
    num_children: int
    num_train_images: int | None = None  # the devkit's count of the class's train images (None: not given)


@dataclass(frozen=True)
class Devkit:
    synsets: list[Synset]
    ground_truth: list[int]  # ILSVRC2012_ID of val image i+1


def parse_meta_mat(data: bytes) -> list[Synset]:
    """Every synset of the devkit's meta.mat (leaves and internal nodes), in file order. Bytes that are not
    its table (another .mat, a damaged one) are a LabelError, whatever scipy's reader or the fields raise."""
    try:
        table = scipy.io.loadmat(io.BytesIO(data), squeeze_me=True)["synsets"]
        counted = "num_train_images" in (table.dtype.names or ())
        return [
            Synset(int(row["ILSVRC2012_ID"]), str(row["WNID"]), str(row["words"]), int(row["num_children"]),
                   int(row["num_train_images"]) if counted else None)
            for row in table.ravel()
        ]
    except Exception as exn:  # noqa: BLE001 -- scipy's reader has no one error type for bytes it cannot parse
        raise LabelError(f"{META_MAT} is not the devkit's table of synsets ({one_line(exn)})") from None


def one_line(exn: BaseException) -> str:
    """An exception's message on one line (tarfile's and scipy's span several), its type where it has none."""
    return " ".join(str(exn).split()) or type(exn).__name__


def devkit_train_count(devkit: "Devkit") -> int | None:
    """How many train images the devkit's meta.mat says the classes hold (1,281,167 in ILSVRC2012's);
    None where it does not count them all."""
    counts = [s.num_train_images for s in leaf_synsets(devkit.synsets)]
    return None if any(c is None for c in counts) else sum(counts)


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


def parse_train_cls(text: str, origin: str) -> dict[str, str]:
    """Kaggle's ILSVRC/ImageSets/CLS-LOC/train_cls.txt: 'n01440764/n01440764_10026 1' per train image ->
    {key: wnid}."""
    listed = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        wnid, slash, key = line.split()[0].partition("/")
        if not slash or not WNID.match(wnid) or not key:
            raise LabelError(f"{origin} line {number}: expected '<wnid>/<image> <number>', got {line[:60]!r}")
        listed[key] = wnid
    return listed


def parse_synset_mapping(text: str) -> dict[str, str]:
    """LOC_synset_mapping.txt: 'n01440764 tench, Tinca tinca' per line -> {wnid: name}."""
    names = {}
    for line in text.splitlines():
        if line.strip():
            wnid, _, name = line.strip().partition(" ")
            names[wnid] = name
    return names


HF_CLASSES_NAME = "IMAGENET2012_CLASSES"
BUILTIN_CLASSES = "imagenet_classes.txt"


def parse_class_list(text: str, origin: str) -> dict[str, str]:
    """imagenet_classes.txt: one 'wnid<TAB>words' line per class, '#' lines are comments -> {wnid: words},
    in file order."""
    names = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        wnid, tab, words = line.partition("\t")
        if not tab or not WNID.match(wnid) or wnid in names:
            raise LabelError(f"{origin} line {number}: expected 'wnid<TAB>words' with a new wnid, got {line[:60]!r}")
        names[wnid] = words
    return names


BUILTIN_TABLES = {  # the class tables prepare ships, by name: (file, how many classes)
    "imagenet-1k": (BUILTIN_CLASSES, 1000),
    "imagenet-12k": ("imagenet12k_classes.txt", 11821),  # timm's 12k subset of fall11
    "imagenet-22k": ("imagenet22k_classes.txt", 21841),  # fall11's classes
    "imagenet-w21": ("imagenet_w21_classes.txt", 19167),  # winter21's own, 22k's less 2,674: what w21's .cls numbers
}
# tables whose classes nest (winter21's in fall11's): a dataset labelled in one records where its classes lie in
# the other (the manifest's `class_maps`), so that a model of either table evaluates on it
MAPPED_TABLES = {"imagenet-22k": ("imagenet-w21",), "imagenet-w21": ("imagenet-22k",)}


def builtin_class_names(table: str = "imagenet-1k") -> dict[str, str]:
    """A class table shipped with prepare, sorted by wnid: the 1000 ILSVRC 2012 classes
    (prepare/imagenet_classes.txt), timm's ImageNet-12k and ImageNet-22k (imagenet12k_classes.txt,
    imagenet22k_classes.txt), made from timm's timm/data/_info/ synset lists and imagenet_synset_to_lemma.txt
    (github.com/huggingface/pytorch-image-models, Apache-2.0, prepare/LICENSE-timm; each file's first lines
    say which release), and winter21's own 19,167 (imagenet_w21_classes.txt, birder-project/birder's list with
    22k's words, Apache-2.0, prepare/LICENSE-birder). A copy of the table read once."""
    return dict(read_builtin_table(table))


@functools.cache
def read_builtin_table(table: str) -> dict[str, str]:
    name, count = BUILTIN_TABLES[table]
    names = parse_class_list(importlib.resources.files("prepare").joinpath(name).read_text(), f"prepare/{name}")
    if len(names) != count or list(names) != sorted(names):
        raise LabelError(f"prepare/{name} holds {len(names)} classes, not {count} sorted ones: the package is damaged, "
                         "reinstall it")
    return names


def indices_in(table: str, within: str) -> list[int]:
    """The index in the built-in table `within` of each class of `table`, in `table`'s order (winter21's
    19,167 in 22k's 21,841: how a label of one is a label of the other); LabelError where a class of `table` is
    not in `within`. Pure but for reading the two tables."""
    position = {wnid: index for index, wnid in enumerate(read_builtin_table(within))}
    missing = [wnid for wnid in read_builtin_table(table) if wnid not in position]
    if missing:
        raise LabelError(f"{len(missing)} classes of {table} are not in {within} (the first: {missing[0]}): the two "
                         "tables do not nest")
    return [position[wnid] for wnid in read_builtin_table(table)]


def class_maps(table: str | None) -> dict[str, dict]:
    """Where the classes of a dataset labelled in the built-in `table` lie in each table it nests with
    (`MAPPED_TABLES`): {other table: {"classes": its count, "index": the index there of each class of
    `table`, in `table`'s order, -1 where it has none}} (the manifest's `class_maps`); none for a table that
    nests with none, or no built-in table (None). Pure but for reading the tables."""
    maps = {}
    for other in MAPPED_TABLES.get(table, ()):
        position = {wnid: index for index, wnid in enumerate(read_builtin_table(other))}
        index = [position.get(wnid, -1) for wnid in read_builtin_table(table)]
        maps[other] = {"classes": len(position), "index": index}
    return maps


def parse_hf_classes(text: str, origin: str) -> dict[str, str]:
    """classes.py of the ILSVRC/imagenet-1k dataset: `IMAGENET2012_CLASSES = OrderedDict({"n01440764":
    "tench, Tinca tinca", ...})` -> {wnid: words} in its order. Read as a syntax tree of literals: the
    file is never imported or run, so nothing in it can execute."""
    try:
        tree = ast.parse(text, filename=origin)
    except (SyntaxError, ValueError) as exn:
        raise LabelError(f"{origin} is not Python source ({exn}): use the classes.py of ILSVRC/imagenet-1k "
                         "as downloaded, or remove it") from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == HF_CLASSES_NAME):
            return class_pairs(literal_mapping(node.value, origin), origin)
    raise LabelError(f"{origin} assigns no {HF_CLASSES_NAME}: is it the classes.py of ILSVRC/imagenet-1k?")


def literal_mapping(node: ast.expr, origin: str) -> list:
    """The (key, value) pairs of a dict literal, `OrderedDict(<dict literal>)` or `OrderedDict(<list of
    pairs>)`, in source order (a repeated key kept twice, for `class_pairs` to refuse)."""
    if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and isinstance(node.func, (ast.Name, ast.Attribute))
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "OrderedDict"):
        node = node.args[0]
    try:
        if isinstance(node, ast.Dict) and None not in node.keys:
            return [(ast.literal_eval(k), ast.literal_eval(v)) for k, v in zip(node.keys, node.values)]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [tuple(pair) for pair in ast.literal_eval(node)]
    except (ValueError, TypeError, SyntaxError):
        pass
    raise LabelError(f"{origin}: {HF_CLASSES_NAME} is not a literal OrderedDict of wnid: words strings")


def class_pairs(pairs: list, origin: str) -> dict[str, str]:
    names = {}
    for pair in pairs:
        if len(pair) != 2 or not all(isinstance(p, str) for p in pair) or not WNID.match(pair[0]):
            raise LabelError(f"{origin}: {HF_CLASSES_NAME} holds {pair!r}, not a wnid: words pair of strings")
        if pair[0] in names:
            raise LabelError(f"{origin}: {HF_CLASSES_NAME} lists {pair[0]} twice")
        names[pair[0]] = pair[1]
    if not names:
        raise LabelError(f"{origin}: {HF_CLASSES_NAME} is empty")
    return names


def check_sorted_order(wnids: list[str], origin: str) -> None:
    """A class list whose order is its label numbers (ILSVRC/imagenet-1k's classes.py) must list the
    wnids sorted: this project's class index is the position among the sorted wnids."""
    for index, (listed, rule) in enumerate(zip(wnids, sorted(wnids))):
        if listed != rule:
            raise LabelError(f"{origin} numbers its classes in an order other than sorted wnids (class {index} is "
                             f"{listed} there, {rule} here): its labels would not be this project's (torchvision's "
                             "order). Use the classes.py of ILSVRC/imagenet-1k as downloaded, or remove it.")


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
    """meta.mat and the validation ground truth from ILSVRC2012_devkit_t12.tar.gz (read in place). Inflated
    whole first (2.5 MB), so that gzip's checksum and length are checked: tarfile reads a member at its offset
    and never reaches them, and a damaged devkit gave wrong val labels, or crashed scipy's reader."""
    try:
        data = Path(path).read_bytes()
        if data[:2] != GZIP_MAGIC and not data[257:262] == b"ustar":  # an HTML page saved by that name, say
            raise LabelError(f"the devkit {path} is not a gzipped tar (its first bytes: {data[:24]!r}): download "
                             "ILSVRC2012_devkit_t12.tar.gz again")
        tar_bytes = gzip.decompress(data) if data[:2] == GZIP_MAGIC else data
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            members = {m.name.split("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
            meta, truth = members.get(META_MAT), members.get(GROUND_TRUTH)
            if meta is None or truth is None:
                raise LabelError(f"{path} lacks {META_MAT} or {GROUND_TRUTH}: is it ILSVRC2012_devkit_t12.tar.gz?")
            meta_bytes = tar.extractfile(meta).read()
            truth_text = tar.extractfile(truth).read().decode()
    except (tarfile.TarError, EOFError, OSError, zlib.error, UnicodeDecodeError) as exn:
        raise LabelError(f"cannot read the devkit {path}: {one_line(exn)}. Download ILSVRC2012_devkit_t12.tar.gz "
                         "again.") from None
    try:
        return Devkit(parse_meta_mat(meta_bytes), parse_ground_truth(truth_text))
    except LabelError as exn:
        raise LabelError(f"the devkit {path}: {exn}. Download ILSVRC2012_devkit_t12.tar.gz again.") from None
