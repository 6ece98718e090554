"""What every source layout shares.

- The rules for names: a sample key from a member or file name (`image_key`), `SourceError`, `Item`.
- `Source`, the base class of a layout: its classes, labels, parts, and what the download declares
  it holds (`declared`, prepare/completeness.py); the `Part` protocol; files listed in chunks
  (`FileChunk`); the file names several layouts look for (the devkit, Kaggle's).

Each layout is a module of this package, listed in its registry (prepare/sources/__init__.py), which
recognises a download's layout once and opens it. Tars are read by prepare/sources/tars.py, files through
prepare/sources/trees.py and prepare/sources/zip_tree.py.

Names inside archives only ever become sample keys inside shards, never paths on disk.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

from prepare.completeness import Declared
from prepare.labels import WNID, class_maps
from shards.errors import UserError
from shards.format import MAX_KEY_LENGTH
from shards.paths import SPLITS
from shards.manifest import ClassInfo

DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
KAGGLE_DATA = "ILSVRC/Data/CLS-LOC"
KAGGLE_VAL_CSV = "LOC_val_solution.csv"
KAGGLE_SYNSETS = "LOC_synset_mapping.txt"
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
AVERAGE_IMAGE_BYTES = 110_000  # ImageNet's: a count from bytes where the source states none
KEY = re.compile(r"^[A-Za-z0-9_-]+$")  # dot-free, slash-free: safe as a WebDataset key


class SourceError(UserError, ValueError):
    """The source cannot be read as ImageNet: the message names the file and what to do."""


@contextlib.contextmanager
def unreadable_named():
    """A folder or file of the download that this user may not read (a copy of another user's or another group's,
    one subfolder left private): a SourceError naming it, where the listing's PermissionError was a traceback."""
    try:
        yield
    except PermissionError as exn:
        raise unreadable(exn.filename or "a file of --source", exn.strerror) from None


def unreadable(path, why: str = "Permission denied") -> SourceError:
    return SourceError(f"{path} is not readable by this user ({why}): the download must be readable throughout by "
                       "whoever prepares it; ask its owner for read access (chmod -R a+rX, or a group you are in)")


@dataclass(frozen=True)
class Signs:
    """What a layout's download shows at --source, as data: a name matching one of `names` (fnmatch
    patterns) at its top or in one of its `folders` (data/, say); or, where --source is a file, its name
    matching one of `file`. The registry lists the top (and those folders) once and asks a layout's
    `recognise` only where its signs show: no layout's code runs to decline a download."""
    names: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()  # besides the top
    file: tuple[str, ...] = ()  # patterns of --source's own name (lower case) where it is a file


@dataclass(frozen=True)
class Item:
    """One image to prepare: its key, its wnid, and its bytes."""
    key: str
    wnid: str
    origin: str  # where it came from, for error messages
    data: bytes
    min_side: int = 0  # pixels: the layout leaves out an image whose shorter side is under this (counted, named)
    split: str | None = None  # the split it belongs to, where its part yields several (`Source.read_together`)


def hf_key_and_wnid(stem: str, name: str, origin: str) -> tuple[str, str]:
    """ILSVRC/imagenet-1k's naming rule (its loading script: the wnid is what follows the stem's last
    underscore): n01440764_10026_n01440764 -> (n01440764_10026, n01440764). The key is the original
    file's stem, as in the official archives."""
    original, _, wnid = stem.rpartition("_")
    if not original or not WNID.match(wnid):
        raise SourceError(f"{origin}: the name {name!r} does not follow ILSVRC/imagenet-1k's rule "
                          "<image>_<wnid>.JPEG: is the archive from that dataset?")
    return checked_key(original, name, origin), wnid


def image_key(name: str, origin: str) -> str | None:
    """Sample key of an archive member or file name; None for what is not an image. A member name
    that is absolute or climbs with '..' is refused: no official archive has one."""
    stem = image_stem(name, origin)
    return None if stem is None else checked_key(stem, name, origin)


def image_stem(name: str, origin: str) -> str | None:
    """The file stem of an image's name (its base name before the suffix); None for what is not an
    image. An unsafe name is refused."""
    check_safe_name(name, origin)
    base = name.rsplit("/", 1)[-1]
    stem, dot, suffix = base.rpartition(".")
    if not dot or "." + suffix.lower() not in IMAGE_SUFFIXES:
        return None
    return stem


def check_safe_name(name: str, origin: str) -> None:
    if name.startswith("/") or ".." in name.split("/"):
        raise SourceError(f"{origin}: the member name {name!r} is unsafe (an absolute path, or one that climbs "
                          "with '..') and was refused. ImageNet's archives have none: use them as downloaded.")


def checked_key(stem: str, name: str, origin: str) -> str:
    """`stem` as a sample key: letters, digits, _ and - only, and short enough for a shard's tar headers."""
    if not KEY.match(stem):
        raise SourceError(f"{origin}: image name {name!r} cannot be a sample key (only letters, digits, _ and -)")
    if len(stem) > MAX_KEY_LENGTH:
        raise SourceError(f"{origin}: image name {name!r} is longer than {MAX_KEY_LENGTH} characters before its "
                          "suffix, the longest sample key a shard's tar headers hold: shorten it")
    return stem



# ---------------------------------------------------------------- a layout

def readable_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise SourceError(f"{path} not found: {what}")
    if not os.access(path, os.R_OK):
        raise SourceError(f"{path} is not readable (permissions): {what}")
    return path


class Part(Protocol):
    """A piece of a split that a worker reads on its own: a class tar, a range of val members, a chunk
    of files, a hub archive or shard, an ImageNetV2 archive (each layout's module defines its own)."""
    size: int  # bytes it yields, about: what the shared read balances its shares by

    def wnids(self) -> set[str]: ...

    def items(self) -> Iterator["Item"]: ...


class Source:
    """A layout's classes, labels and parts. Subclasses fill in `parts` and the bookkeeping."""
    layout: str
    root: Path
    classes: list[ClassInfo]
    splits: tuple[str, ...] = SPLITS  # the evaluation sets (prepare/eval_sets.py) add to these
    table: str | None = None  # the built-in class table it labels in (prepare/labels.py), where it has one

    def parts(self, split: str) -> list[Part]:
        """The split as pieces that a worker reads on its own (each with `items()`), in order."""
        raise NotImplementedError

    def split_bytes(self, split: str) -> int:
        """Bytes of a split in the source (exact for archives, estimated for trees)."""
        raise NotImplementedError

    def declared(self, split: str) -> Declared:
        """What the download declares the split holds (its pieces and count), and what of it is there
        before anything is read: prepare checks it before writing (prepare/completeness.py)."""
        return Declared(split)

    def estimated_count(self, split: str) -> int:
        """About how many images the split holds, before reading it (for the disk-space check)."""
        raise NotImplementedError

    def class_index(self) -> dict[str, int]:
        return {c.wnid: c.index for c in self.classes}

    def why_empty(self, split: str) -> str:
        """What the layout adds to "the split holds no images" (after a colon), where it knows more."""
        return ""

    def read_together(self) -> tuple[str, ...]:
        """Splits that one pass over the download yields together, where reading each alone would read
        it all again (winter21's one gzip stream, before its seek index: val is held out of every class).
        The build then reads them in one pass, of `joint_parts`."""
        return ()

    def joint_parts(self, splits: tuple[str, ...]) -> list[Part]:
        """The parts of one pass that yields the images of every split in `splits` (`read_together`'s),
        each Item naming its split."""
        raise NotImplementedError

    def close(self) -> None:
        """Close what this process opened to read the source (winter21's readers through its seek
        index): at the end of a build, and after a sample is read here, before workers fork."""

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def seek_index(self) -> str | None:
        """The seek index its parts are read through, where it has one (winter21's: prepare/sources/gzip_index.py):
        every node of a shared read must read through the same, or none."""
        return None

    def class_subsets(self) -> dict[str, list[int]]:
        """Named subsets of the classes that training also evaluates on their own (the manifest's
        `class_subsets`): name -> the subset's classes' indices in `classes`, in its label order."""
        return {}

    def class_maps(self) -> dict[str, dict]:
        """Where the classes of its built-in table lie in another table they nest with (the manifest's
        `class_maps`, prepare.labels.class_maps): {table: {"classes": its count, "index": each class's index
        there or -1}}; none without a built-in table."""
        return class_maps(self.table)  # (no table: none)

    def val_keys(self) -> set[str] | None:
        """The val images' keys where the layout lists them before reading (its labels name them)."""
        return None

    def real_labels(self, val_keys: set[str]) -> dict[str, list[int]] | None:
        """The ReaL label sets of the val images by key, where asked for (prepare/eval_sets.py)."""
        return None

    def check_real_labels(self, allow_partial: bool) -> None:
        """Check the ReaL labels against the val images before reading, where both are known (after
        the completeness check, so a missing val image is named as such)."""



# ---------------------------------------------------------------- files, in chunks (prepare/sources/trees.py's layouts)

@dataclass(frozen=True)
class FileChunk:
    """Consecutive files of an extracted tree: a worker reads and checks them."""
    files: tuple[tuple[str, str, str], ...]  # (key, wnid, path)
    size: int  # bytes, estimated (the files are not each statted: 1.3 M stats take minutes on shared storage)

    def wnids(self) -> set[str]:
        return {wnid for _, wnid, _ in self.files}

    def items(self) -> Iterator[Item]:
        for key, wnid, path in self.files:
            try:
                data = Path(path).read_bytes()
            except OSError as exn:
                raise SourceError(f"cannot read {path}: {exn.strerror}") from None
            yield Item(key, wnid, path, data)


FILES_PER_CHUNK = 1024  # tree files per part: each part opens up to one spill file per bucket


def list_images(folder: Path) -> list[tuple[str, str]]:
    """(key, path) of the images directly in `folder`, sorted by name (paths as strings: a tree lists
    1.28 M of them). Hidden files are not images: macOS writes an AppleDouble `._NAME` beside every file
    of a tree copied from a Mac to a shared or exFAT volume."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_file():
                key = image_key(entry.name, entry.path)
                if key is not None:
                    found.append((key, entry.path))
            elif entry.is_symlink() and not entry.is_dir() and image_stem(entry.name, entry.path) is not None:
                raise SourceError(f"{entry.path} is a link to {os.readlink(entry.path)}, which is not there: the "
                                  "tree's links must point to its images (copy the images, or mend the links)")
    return sorted(found)


_LISTINGS: contextvars.ContextVar[dict[str, tuple[str, ...]] | None] = contextvars.ContextVar("listings", default=None)


def names_in(folder: Path) -> tuple[str, ...]:
    """The names in `folder`, sorted; listed once from a download's detection to its parts (on shared
    storage a listing is a round trip), where they run inside `listings_kept`."""
    kept = _LISTINGS.get()
    if kept is None:
        return tuple(sorted(os.listdir(folder)))
    if str(folder) not in kept:
        kept[str(folder)] = tuple(sorted(os.listdir(folder)))
    return kept[str(folder)]


@contextlib.contextmanager
def listings_kept(kept: dict[str, tuple[str, ...]]):
    """`names_in` answers from `kept` inside (and keeps there what it lists): a detection's folders."""
    token = _LISTINGS.set(kept)
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def decoded_text(data: bytes, where: str) -> str:
    """A small text file of a download (a CSV, a class list) as UTF-8, the same on disk and in a zip."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exn:
        raise SourceError(f"{where} is not UTF-8 text ({exn.reason} at byte {exn.start}): it is damaged, "
                          "download it again") from None


def estimate_bytes(files: list, size_of=lambda path: Path(path).stat().st_size, sample: int = 2000) -> int:
    """Total size of many files from the sizes of a fixed sample of them (stat of 1.3 M files is slow).
    The sample depends only on how many there are, so a zip's members listed as its extracted tree's
    files give the tree's estimate."""
    if not files:
        return 0
    picked = random.Random(0).sample(files, min(sample, len(files)))
    return int(sum(map(size_of, picked)) * len(files) / len(picked))


def sized_chunks(rows: list | tuple, total_bytes: int) -> list[tuple[tuple, int]]:
    """Rows of a listing of files in consecutive chunks of FILES_PER_CHUNK (the parts), each with its
    share of `total_bytes`."""
    per_file = total_bytes / max(len(rows), 1)
    return [(chunk, round(per_file * len(chunk)))
            for chunk in (tuple(rows[i:i + FILES_PER_CHUNK]) for i in range(0, len(rows), FILES_PER_CHUNK))]


def file_chunks(rows: list[tuple[str, str, str]] | tuple, total_bytes: int) -> list[FileChunk]:
    """(key, wnid, path) rows in chunks of FILES_PER_CHUNK, each sized by its share of `total_bytes`."""
    return [FileChunk(chunk, size) for chunk, size in sized_chunks(rows, total_bytes)]
