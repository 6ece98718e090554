"""The Hugging Face hub's ImageNet as Parquet, read in parts as the official archives are.

- hf-parquet: ILSVRC/imagenet-1k's `main` branch since its conversion to Parquet (2025):
              data/train-NNNNN-of-00294.parquet, data/validation-NNNNN-of-00014.parquet and
              data/test-NNNNN-of-00028.parquet (unlabelled: never read), README.md whose YAML header
              counts each split (`ParquetImageNet`). A part is a run of consecutive row groups of
              one file, about ROWS_PER_PART rows (`RowGroupRun`).

--source may be the repository as `hf download ILSVRC/imagenet-1k --repo-type dataset --local-dir X`
leaves it (X), its data/ folder, a snapshot of the hub cache (hub/datasets--ILSVRC--imagenet-1k/
snapshots/<sha>, where `load_dataset` leaves the same files as symlinks to blobs/), or the cache's
datasets--ILSVRC--imagenet-1k folder itself (its refs/main snapshot). The `datasets` library's own
Arrow cache is recognised and refused with where to point instead (`arrow_cache_hint`).

A row is `image` = {bytes, path} and `label`, the class's place among ImageNet-1k's 1000 sorted wnids
(the built-in table, prepare/imagenet_classes.txt). The key is the original file's stem from
image.path (<stem>_<wnid>.JPEG, ILSVRC/imagenet-1k's naming rule, `hf_key_and_wnid`), whose wnid must
be the label's; where an older conversion left path null, the key is `<split>_<file number, 5 digits>_<row
in the file, 6 digits>` (`documented_key`: a file missing changes no other file's keys).

What the download declares (`declared`): the files' -of-N names say how many files each split has
(a missing one is a Gap, not an error: prepare refuses it unless --allow-partial; a split without a
single file is an error at open, nothing saying how many there should be), README.md's dataset_info
how many images; the files' footers count what is there before anything is read.

Read with pyarrow alone: the three columns only, one row group at a time, in record batches of
BATCH_ROWS rows (a part's memory is a row group's column chunks and one batch, never a whole file).
Which layout a folder holds is decided once, by the registry (prepare/sources/__init__.py).
"""

from __future__ import annotations

import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from prepare.completeness import Declared, Gap
from prepare.labels import builtin_class_names, class_table
from prepare.labels import one_line as labels_one_line
from prepare.sources.base import (
    IMAGE_SUFFIXES, Item, Signs, Source, SourceError, hf_key_and_wnid, names_in, readable_file, unreadable,
)

if TYPE_CHECKING:  # imported where used: every prepare imports this module, few read Parquet (0.2 s)
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger(__name__)

HF_DATA = "data"
README = "README.md"
HUB_REPOSITORY = "datasets--ILSVRC--imagenet-1k"  # the hub cache's folder of the dataset
PARQUET_NAME = re.compile(r"^(train|validation|test)-(\d+)-of-(\d+)\.parquet$")
HUB_SPLITS = {"train": "train", "val": "validation"}  # this project's split -> the hub's (test: never read)
COLUMNS = ("image.bytes", "image.path", "label")  # the only columns read
ROWS_PER_PART = 1000  # a part: consecutive row groups of one file, about this many rows (~110 MB)
BATCH_ROWS = 100  # rows a record batch holds: the hub writes image data in row groups of 100
FOOTER_THREADS = 16  # footers read at once at open: 308 small reads, latency-bound on shared storage
COUNTED_BY = "README.md's dataset_info"
FILES_BY = "their names' -of-N"
DOWNLOAD = "hf download ILSVRC/imagenet-1k --repo-type dataset --local-dir DIR"


# ---------------------------------------------------------------- where the files are

@dataclass(frozen=True)
class ParquetFolders:
    """Where a download's Parquet files are, and its README.md (None where it is not there)."""
    data: Path
    readme: Path | None


def parquet_folders(root: Path) -> ParquetFolders | None:
    """The data folder of `root` (the repository, a hub-cache snapshot or the hub cache's
    datasets--ILSVRC--imagenet-1k folder) or `root` itself (the data folder); None where neither
    holds train or validation Parquet files."""
    if is_hub_cache_repository(root):
        root = hub_snapshot(root)
    for data, top in ((root / HF_DATA, root), (root, root.parent if root.name == HF_DATA else root)):
        if data.is_dir() and any(split_of(name) in HUB_SPLITS.values() for name in names_in(data)):
            readme = top / README
            return ParquetFolders(data, readme if readme.is_file() else None)
    return None


def split_of(name: str) -> str | None:
    found = PARQUET_NAME.match(name)
    return found.group(1) if found else None


def is_hub_cache_repository(root: Path) -> bool:
    """The hub cache's folder of a repository: refs/ naming snapshots/ of blobs/."""
    return (root / "snapshots").is_dir() and (root / "refs").is_dir()


def hub_snapshot(root: Path) -> Path:
    """The snapshot refs/main names: what `load_dataset` read last."""
    ref = root / "refs" / "main"
    snapshots = sorted(p.name for p in (root / "snapshots").iterdir())
    if not ref.is_file():
        raise SourceError(f"{root} is a Hugging Face hub cache folder without refs/main: point --source at the "
                          f"snapshot to read, {root / 'snapshots'}/<sha> (there: {', '.join(snapshots) or 'none'})")
    sha = ref.read_text().strip()
    if not re.fullmatch(r"[0-9A-Za-z_-]+", sha) or not (root / "snapshots" / sha).is_dir():
        raise SourceError(f"{ref} names the snapshot {sha[:60]!r}, which {root / 'snapshots'} does not hold: point "
                          f"--source at one that is there ({', '.join(snapshots) or 'none'}) or download again")
    return root / "snapshots" / sha


# ---------------------------------------------------------------- which files a split has (pure)

@dataclass(frozen=True)
class SplitFiles:
    """One split's Parquet files: those present in number order, and those their -of-N names say are missing."""
    present: tuple[str, ...]
    listed: int  # the N of -of-N
    missing: tuple[str, ...]


def split_files(names: Iterable[str], hub_split: str, origin: str) -> SplitFiles:
    """The files `<hub_split>-NNNNN-of-MMMMM.parquet` among `names`. All must agree on M (one
    conversion's files), number below M; the missing numbers are named as the present ones are
    written. None present: an error (nothing says how many there should be). Pure."""
    found = sorted((int(m.group(2)), m) for name in names if (m := PARQUET_NAME.match(name))
                   and m.group(1) == hub_split)
    if not found:
        raise SourceError(f"{origin} holds no {hub_split}-NNNNN-of-NNNNN.parquet: download ILSVRC/imagenet-1k's "
                          f"{hub_split} files ({DOWNLOAD} --include 'data/{hub_split}-*')")
    totals = sorted({m.group(3) for _, m in found}, key=int)
    if len(totals) > 1:
        raise SourceError(f"{origin} holds {hub_split} files of {len(totals)} conversions "
                          f"(-of-{', -of-'.join(totals)}): keep only one download's files")
    total, width = totals[0], len(found[0][1].group(2))
    beyond = [m.group(0) for n, m in found if n >= int(total)]
    if beyond:
        raise SourceError(f"{origin}/{beyond[0]} is numbered beyond its -of-{total}: the file is misnamed, remove it")
    present = {n for n, _ in found}
    missing = tuple(f"{hub_split}-{n:0{width}d}-of-{total}.parquet" for n in range(int(total)) if n not in present)
    return SplitFiles(tuple(m.group(0) for _, m in found), int(total), missing)


# ---------------------------------------------------------------- README.md's counts (pure)

def readme_counts(text: str) -> dict[str, int]:
    """The hub split name -> num_examples of README.md's YAML header: dataset_info's `splits` (of the
    `default` config, or the only one, where dataset_info lists configs). Empty where it says nothing,
    or where the header is no YAML PyYAML reads (the counts then come from the files alone). Pure."""
    import yaml  # here: only a Parquet download's README needs it

    header = yaml_header(text)
    try:
        meta = yaml.load("\n".join(header), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if header else None
    except yaml.YAMLError:
        return {}
    info = meta.get("dataset_info") if isinstance(meta, dict) else None
    configs = [config for config in (info if isinstance(info, list) else [info]) if isinstance(config, dict)]
    named = {config.get("config_name"): config for config in configs}
    config = named.get("default") or (configs[0] if len(configs) == 1 else {})
    splits = config.get("splits")
    return {str(entry["name"]): int(entry["num_examples"]) for entry in (splits if isinstance(splits, list) else [])
            if isinstance(entry, dict) and entry.get("name") and is_count(entry.get("num_examples"))}


def is_count(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value.isdigit())


def yaml_header(text: str) -> list[str]:
    """The lines between a leading `---` and the next: the metadata block of a hub README."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return []
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---"), len(lines))
    return lines[1:end]


# ---------------------------------------------------------------- footers

@dataclass(frozen=True)
class Footer:
    """What a Parquet file's footer says: its row groups' rows and the bytes the three columns
    take in each, and how many rows have no image.path (`null_paths`)."""
    path: str
    groups: tuple[tuple[int, int], ...]  # (rows, bytes) per row group
    null_paths: int

    @property
    def rows(self) -> int:
        return sum(rows for rows, _ in self.groups)


def open_parquet(path: str) -> pq.ParquetFile:
    """The file with its footer read (a bad or missing footer: one line naming it). Page checksums,
    where the writer left them, are checked as the pages are read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exn:
        if not os.access(path, os.R_OK):  # a permission, not damage: downloading it again would not help
            raise unreadable(path) from None
        raise SourceError(f"cannot read {path}: {one_line(exn)}. Its footer is damaged or it is truncated: "
                          "download it again") from None


def column_paths(parquet: pq.ParquetFile) -> list[str]:
    """The file's leaf columns by dotted path: image.bytes, image.path, label."""
    return [parquet.schema.column(i).path for i in range(len(parquet.schema))]


def read_footer(path: str) -> Footer:
    with open_parquet(path) as parquet:
        return footer_of(parquet, path)


def footer_of(parquet: pq.ParquetFile, path: str) -> Footer:
    """The footer's row groups, checked to hold ILSVRC/imagenet-1k's columns."""
    meta, columns = parquet.metadata, column_paths(parquet)
    lacking = [name for name in ("image.bytes", "label") if name not in columns]
    if lacking:
        raise SourceError(f"{path} has no {lacking[0]} column (it has {', '.join(columns[:6])}): it is not "
                          "ILSVRC/imagenet-1k's Parquet")
    check_column_types(parquet, path)
    read = [columns.index(name) for name in COLUMNS if name in columns]
    groups = tuple((meta.row_group(g).num_rows, sum(meta.row_group(g).column(c).total_compressed_size for c in read))
                   for g in range(meta.num_row_groups))
    return Footer(path, groups, null_paths(parquet, columns, path))


def check_column_types(parquet: pq.ParquetFile, path: str) -> None:
    """image.bytes binary, image.path text, label an integer: else one line (a file of another shape
    would otherwise fail in the middle of reading, with a traceback)."""
    import pyarrow as pa

    schema = parquet.schema_arrow
    image = schema.field("image").type
    fields = {field.name: field.type for field in image} if pa.types.is_struct(image) else {}
    expected = {"image.bytes": (fields.get("bytes"), (pa.types.is_binary, pa.types.is_large_binary)),
                "image.path": (fields.get("path"), (pa.types.is_string, pa.types.is_large_string)),
                "label": (schema.field("label").type, (pa.types.is_integer,))}
    for name, (kind, tests) in expected.items():
        if kind is not None and not any(test(kind) for test in tests):
            raise SourceError(f"{path}: its {name} column holds {kind}, not what ILSVRC/imagenet-1k's Parquet holds "
                              "there: the file is of another dataset or damaged")


def null_paths(parquet: pq.ParquetFile, columns: list[str], path: str) -> int:
    """Rows without image.path, by the footer's statistics (every row where the column is absent);
    where they do not count nulls, those of the first row group, read (one small column chunk):
    enough to warn at open, while each row is still keyed by what it holds."""
    import pyarrow as pa

    meta = parquet.metadata
    if "image.path" not in columns:
        return meta.num_rows
    column = columns.index("image.path")
    stats = [meta.row_group(g).column(column).statistics for g in range(meta.num_row_groups)]
    if all(s is not None and s.has_null_count for s in stats):
        return sum(s.null_count for s in stats)
    try:
        return parquet.read_row_group(0, columns=["image.path"]).column("image").flatten()[0].null_count
    except (pa.ArrowException, OSError) as exn:
        raise damaged(path, 0, meta.num_row_groups, exn) from None


def read_footers(paths: list[str]) -> list[Footer]:
    """Every file's footer, several at once (each a small read at the file's end)."""
    if len(paths) < 2:
        return [read_footer(path) for path in paths]
    with ThreadPoolExecutor(min(FOOTER_THREADS, len(paths))) as pool:
        return list(pool.map(read_footer, paths))


def one_line(exn: BaseException) -> str:
    """pyarrow's message on one line, without its closing dots (ours follow)."""
    return labels_one_line(exn).rstrip(".") or type(exn).__name__


def damaged(path: str, group: int, groups: int, exn: BaseException) -> SourceError:
    return SourceError(f"cannot read {path}: its row group {group} (of 0..{groups - 1}): {one_line(exn)[:300]}. "
                       "The file is damaged: download it again")


# ---------------------------------------------------------------- parts: runs of row groups

def row_group_runs(rows: list[int], per_part: int) -> list[range]:
    """Consecutive row groups (their indices) of about `per_part` rows each, in order: each run is
    closed once it holds `per_part` rows or more (a bigger row group is a run alone). Pure."""
    runs, start, held = [], 0, 0
    for group, count in enumerate(rows):
        held += count
        if held >= per_part:
            runs.append(range(start, group + 1))
            start, held = group + 1, 0
    if start < len(rows):
        runs.append(range(start, len(rows)))
    return runs


def documented_key(split: str, file_number: int, row: int) -> str:
    """The key of a row without image.path: its split, its file's number (the NNNNN of NNNNN-of-M) and
    its row in that file, so that a file missing changes no other file's keys. Pure."""
    return f"{split}_{file_number:05d}_{row:06d}"


def label_wnid(label, classes: tuple[str, ...], origin: str) -> str:
    if label is None or not 0 <= label < len(classes):
        test = " (-1 marks the unlabelled test split)" if label == -1 else ""
        raise SourceError(f"{origin}: label {label} is not one of ImageNet-1k's classes (0..{len(classes) - 1}){test}: "
                          "the file is damaged or not ILSVRC/imagenet-1k's train or validation data")
    return classes[label]


def path_key(name: str, wnid: str, label: int, origin: str) -> str:
    """The key image.path gives (<stem>_<wnid>.JPEG -> stem), its wnid checked against the label's.
    Only the base name counts: the path never becomes one on disk, and the key is checked to be safe. Pure."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, suffix = base.rpartition(".")
    if not dot or "." + suffix.lower() not in IMAGE_SUFFIXES:
        raise SourceError(f"{origin}: image.path {name[:100]!r} does not name an image (.JPEG): the file is not "
                          "ILSVRC/imagenet-1k's")
    key, named = hf_key_and_wnid(stem, name, origin)
    if named != wnid:
        raise SourceError(f"{origin}: image.path {name!r} says {named}, label {label} is {wnid}: the file is damaged "
                          "or not ILSVRC/imagenet-1k's, download it again")
    return key


@dataclass(frozen=True)
class RowGroupRun:
    """Consecutive row groups of one Parquet file: a worker reads them on its own, one at a time."""
    path: str
    split: str  # this project's: the documented keys' prefix
    groups: tuple[int, ...]
    groups_in_file: int
    first_row: int  # of the run, in its file
    file_number: int  # the file's NNNNN (the documented keys)
    size: int  # the three columns' bytes in these row groups (footer)
    classes: tuple[str, ...]  # wnid by label: ImageNet-1k's sorted 1000

    def wnids(self) -> set[str]:
        return set(self.classes)

    def items(self) -> Iterator[Item]:
        row = self.first_row
        for images, names, labels in self.batches():
            for data, name, label in zip(images, names, labels):
                yield self.item(row, data, name, label)
                row += 1

    def item(self, row: int, data: bytes | None, name: str | None, label: int | None) -> Item:
        origin = f"{self.path}:row {row}"
        wnid = label_wnid(label, self.classes, origin)
        if data is None:
            raise SourceError(f"{origin}: image.bytes is null: the file is damaged, download it again")
        key = (documented_key(self.split, self.file_number, row) if name is None
               else path_key(name, wnid, label, origin))
        return Item(key, wnid, origin, data)

    def batches(self) -> Iterator[tuple[list, list, list]]:
        """(image bytes, paths, labels) of each record batch, one row group at a time: pyarrow's
        errors (a damaged page, a file cut short since open) become one line naming the row group."""
        import pyarrow as pa

        with open_parquet(self.path) as parquet:
            columns = [name for name in COLUMNS if name in column_paths(parquet)]  # image.path may be absent
            for group in self.groups:
                try:
                    for batch in parquet.iter_batches(BATCH_ROWS, row_groups=[group], columns=columns,
                                                      use_threads=False):
                        yield batch_columns(batch)
                except (pa.ArrowException, OSError) as exn:
                    raise damaged(self.path, group, self.groups_in_file, exn) from None


def batch_columns(batch: pa.RecordBatch) -> tuple[list, list, list]:
    """The batch's image bytes, paths (None where null or absent) and labels as Python values; the
    image struct flattened so that a null image reads as null bytes and path."""
    image = batch.column(batch.schema.get_field_index("image"))
    fields = dict(zip([f.name for f in image.type], image.flatten()))
    paths = fields["path"].to_pylist() if "path" in fields else [None] * batch.num_rows
    return fields["bytes"].to_pylist(), paths, batch.column(batch.schema.get_field_index("label")).to_pylist()


# ---------------------------------------------------------------- the source

class ParquetImageNet(Source):
    """ILSVRC/imagenet-1k as Parquet (the hub's `main` branch): runs of row groups as parts, labels by
    the built-in 1000-class table, keys from image.path."""
    layout = "hf-parquet"

    def __init__(self, root: Path, folders: ParquetFolders | None = None):
        self.root = root
        folders = folders or parquet_folders(root)
        if folders is None:
            raise SourceError(f"{root} holds no {HF_DATA}/train-NNNNN-of-NNNNN.parquet or "
                              f"{HF_DATA}/validation-NNNNN-of-NNNNN.parquet")
        self.folders = folders
        names = names_in(folders.data)
        self.files = {split: split_files(names, hub, str(folders.data)) for split, hub in HUB_SPLITS.items()}
        self.counts = readme_counts(readable_file(folders.readme, "it counts the splits").read_text(
            errors="replace")) if folders.readme else {}
        footers = iter(read_footers([str(folders.data / name) for split in HUB_SPLITS for name in
                                     self.files[split].present]))
        self.footers = {split: [next(footers) for _ in self.files[split].present] for split in HUB_SPLITS}
        names_by_wnid = builtin_class_names()
        self.classes = class_table(list(names_by_wnid), names_by_wnid)
        self._parts = {split: self.split_parts(split) for split in HUB_SPLITS}
        self.warn_null_paths()

    def split_parts(self, split: str) -> list[RowGroupRun]:
        wnids = tuple(c.wnid for c in self.classes)
        parts = []
        for footer in self.footers[split]:
            rows = [count for count, _ in footer.groups]
            number = int(PARQUET_NAME.match(Path(footer.path).name).group(2))
            for run in row_group_runs(rows, ROWS_PER_PART):
                parts.append(RowGroupRun(footer.path, split, tuple(run), len(rows), sum(rows[:run.start]), number,
                                         sum(footer.groups[g][1] for g in run), wnids))
        return parts

    def warn_null_paths(self) -> None:
        """Once, at open: rows without image.path get the documented keys, not the original names."""
        for split in HUB_SPLITS:
            without = [f for f in self.footers[split] if f.null_paths]
            if without:
                log.warning("%s%s: rows without image.path (an older conversion): their keys are %s_<the file's "
                            "number, 5 digits>_<the row in the file, 6 digits> (%s ...), not the original files' names",
                            without[0].path, f" and {len(without) - 1} more {HUB_SPLITS[split]} files"
                            if len(without) > 1 else "", split, documented_key(split, 0, 0))

    def parts(self, split: str) -> list[RowGroupRun]:
        return list(self._parts[split])

    def split_bytes(self, split: str) -> int:
        return sum(part.size for part in self._parts[split])

    def declared(self, split: str) -> Declared:
        """The files the names' -of-N list (the absent ones a Gap), README.md's count, the footers' rows."""
        files, images = self.files[split], self.counts.get(HUB_SPLITS[split])
        return Declared(split, gaps=(Gap("Parquet files", files.listed, FILES_BY, files.missing),), images=images,
                        images_by=COUNTED_BY if images is not None else None, found=self.estimated_count(split))

    def estimated_count(self, split: str) -> int:
        """Exact: the footers' row counts."""
        return sum(footer.rows for footer in self.footers[split])


def parquet_files(folders: ParquetFolders) -> list[Path]:
    """The files that identify a Parquet download, without reading them: the train and validation
    files present and README.md (the test files are never read)."""
    names = names_in(folders.data)
    files = [folders.data / name for hub in HUB_SPLITS.values() for name in names if split_of(name) == hub]
    return files + ([folders.readme] if folders.readme else [])


# ---------------------------------------------------------------- the datasets library's Arrow cache: refused

def arrow_cache_hint(root: Path) -> str | None:
    """Where `root` is (or holds, up to three folders down) the `datasets` library's Arrow cache
    (dataset_info.json beside *.arrow files): one line saying what to point --source at instead.
    prepare reads the Parquet files that cache was made from, which `load_dataset` keeps in the hub
    cache; the Arrow copy adds nothing but a second format to keep right."""
    for pattern in ("dataset_info.json", "*/dataset_info.json", "*/*/dataset_info.json", "*/*/*/dataset_info.json"):
        for info in sorted(root.glob(pattern)):
            if any(info.parent.glob("*.arrow")):
                return (f"--source {root} is the `datasets` library's Arrow cache ({info.parent}), which prepare does "
                        "not read: point --source at the Parquet files it was made from, the hub cache's snapshot "
                        f"~/.cache/huggingface/hub/{HUB_REPOSITORY}/snapshots/<sha> (or that {HUB_REPOSITORY} "
                        f"folder), or download them with `{DOWNLOAD}` and pass DIR")
    return None


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

NAME = "hf-parquet"
EXPECTED = (f"Hugging Face's ILSVRC/imagenet-1k as Parquet: {HF_DATA}/train-NNNNN-of-NNNNN.parquet and "
            f"{HF_DATA}/validation-NNNNN-of-NNNNN.parquet (this folder, its {HF_DATA}/ or a hub-cache snapshot): "
            f"`{DOWNLOAD}`")


SIGNS = Signs(names=("*.parquet", "snapshots"), folders=(HF_DATA,))  # snapshots/: the hub cache's


def recognise(root: Path) -> ParquetFolders | None:
    return parquet_folders(root) if root.is_dir() else None


def identifying_files(root: Path, found: ParquetFolders) -> list[Path]:
    return parquet_files(found)


def open_source(root: Path, found: ParquetFolders) -> ParquetImageNet:
    return ParquetImageNet(root, found)


def hint(root: Path) -> str | None:
    """What to do where nothing was recognised at `root`: the `datasets` Arrow cache is refused by name."""
    return arrow_cache_hint(root)
