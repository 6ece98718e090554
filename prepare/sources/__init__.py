"""The source layouts: what a download looks like, one module each, and the registry that tells them apart.

A layout's module answers these, and nothing else decides them:

    NAME                             its name, as the manifest records it ("official", "timm-wds", ...)
    EXPECTED                         one line for people: the files that make it (the refusal lists them all)
    SIGNS                            the names its download shows at --source, as data (`Signs`)
    recognise(root) -> found | None  where its signs show: cheaply, from names, whether `root` holds it; what
                                     it found (a folder, the zip, True) is handed to the two below, never
                                     looked up again
    identifying_files(root, found)   the files whose size and mtime identify the download (a rerun compares them)
    open_source(root, found)         the `Source` (prepare/sources/base.py): classes, parts, what it declares
    RULES                            (where it has some) what it decides that the download does not say: in the
                                     source's identity, so that a change makes a dataset prepared by the old
                                     rule another dataset

A layout whose labels may index more than one class table (winter21's: its own 19,167 synsets or
ImageNet-22k's 21,841) answers instead of RULES:

    tables(found)                    the built-in tables it labels in (prepare/labels.py), its default first
    rules(found, table)              its RULES where it labels in `table`
    open_source(root, found, table)  its `Source`, labelled in `table`

`detect(root)` lists --source's top (and the folders some layout looks in) once, and asks the layouts whose
signs show there, in `LAYOUTS`' order: a download is read by its own layout's code alone, no other layout's
runs to decline it. The `Detected` it returns answers for the source: what identifies it, whether a --dest
lies inside it, and its `Source`. Adding a layout is a module and a line in `layouts()` (`LAYOUTS`). Downloads that differ only in
their names and tables are values of one module, each answering the same questions (timm's
WebDataset sets, prepare/sources/timm_wds.py's `TimmSet`s).

(The word "layout" names a download here; where a prepared dataset's files lie is shards/paths.py.)
"""

from __future__ import annotations

import fnmatch
import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from prepare.labels import class_maps
from prepare.sources.base import Signs, Source, SourceError, listings_kept, names_in, unreadable_named
from shards.manifest import DatasetNotReady, read_manifest
from shards.paths import MANIFEST_NAME


class Layout(Protocol):
    """A layout's module (or a value that answers as one)."""
    NAME: str
    EXPECTED: str
    SIGNS: Signs

    def recognise(self, root: Path) -> object: ...

    def identifying_files(self, root: Path, found) -> list[Path]: ...

    def open_source(self, root: Path, found) -> Source: ...


@functools.cache
def layouts() -> dict[str, Layout]:
    """The registry. In the order they are asked: the first that recognises a folder is its layout. The
    official archives and Kaggle's trees are named by files no other layout has; a Parquet download's top
    holds data/, never train/, so it is asked before the extracted tree, which any folder with a train/
    would match. (Imported here, not at the top: the layouts import this package's base.py, and a module
    that imports base.py alone must not import every layout.)"""
    from prepare.sources import hf_parquet, hf_tars, imagefolder, imagenet_full, kaggle, kaggle_zip, official, timm_wds

    return {layout.NAME: layout for layout in (
        official,
        kaggle,
        kaggle_zip,
        hf_tars,
        timm_wds.IMAGENET_12K,
        timm_wds.IMAGENET_22K,
        timm_wds.IMAGENET_W21,
        timm_wds.IMAGENET_1K,  # after the others: it takes an _info.json whose shards it does not know
        hf_parquet,
        imagenet_full,
        imagefolder,
    )}


def __getattr__(name: str):
    """`LAYOUTS`, the registry, as a module attribute (PEP 562)."""
    if name == "LAYOUTS":
        return layouts()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Detected:
    """A download whose layout is known: `identity()` says what it is, `open()` reads it."""
    root: Path
    layout: Layout
    found: object  # what the layout's `recognise` found, handed back to it
    listings: dict = field(default_factory=dict, compare=False, repr=False)  # folders detection listed (names_in)
    table: str | None = None  # the class table it labels in, where the layout offers more than one (`tables`)

    @property
    def name(self) -> str:
        return self.layout.NAME

    def identity(self) -> dict:
        """What identifies the source cheaply: its path, layout, and the size and mtime of the files that
        make it (none for trees: listing 1.3 M files would make an idempotent rerun take minutes on
        shared storage). Recorded in the manifest; a rerun compares it."""
        files = []
        with listings_kept(self.listings):
            identifying = self.layout.identifying_files(self.root, self.found)
        for path in identifying:
            st = stat_of_download_file(path)
            name = path.name if self.root.is_file() else os.path.relpath(path, self.root)
            files.append({"path": name, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        rules = self.rules()
        return {"path": str(self.root), "layout": self.name, "files": files} | ({"rules": rules} if rules else {})

    def rules(self) -> dict | None:
        """What the layout decides that the download does not say (its class table among them)."""
        if self.table is not None:
            return self.layout.rules(self.found, self.table)
        return getattr(self.layout, "RULES", None)

    def tables(self) -> tuple[str, ...]:
        """The class tables the layout labels this download in, its default first; () where it has its own alone."""
        offered = getattr(self.layout, "tables", None)
        return offered(self.found) if offered else ()

    def labelled_in(self, asked: str | None, prepared: dict | None) -> "Detected":
        """The download labelled in the table --class-table asks for; without one, in the table of the dataset
        prepared from it before (`prepared`: the source its manifest records, None where --dest holds none),
        else in the layout's default. Refused where the layout does not label in the table asked for. Pure."""
        offered = self.tables()
        if asked is not None:
            if asked not in offered:
                raise SourceError(table_refusal(self.name, asked, offered))
            return replace(self, table=asked)
        return replace(self, table=self.kept_table(prepared) or self.table)

    def kept_table(self, prepared: dict | None) -> str | None:
        """The table a dataset prepared from this download was labelled in, read from the source its
        manifest records (its path, layout and rules); None where it was not prepared from this download."""
        if not prepared or (prepared.get("path"), prepared.get("layout")) != (str(self.root), self.name):
            return None
        return next((table for table in self.tables()
                     if replace(self, table=table).rules() == prepared.get("rules")), None)

    def class_maps(self) -> dict[str, dict]:
        """Where the classes of the table it labels in lie in the tables that nest with it (the manifest's
        `class_maps`, as its `Source` gives them: Source.class_maps): none for a layout without a built-in table."""
        return class_maps(self.table)  # (no table: none)

    def holds(self, path: Path) -> bool:
        """Whether `path` lies inside the download (a --dest there would be read as part of it)."""
        return path == self.root or self.root in path.parents

    def open(self) -> Source:
        with listings_kept(self.listings), unreadable_named():
            if self.table is not None:
                return self.layout.open_source(self.root, self.found, self.table)
            return self.layout.open_source(self.root, self.found)


def table_refusal(layout: str, asked: str, offered: tuple[str, ...]) -> str:
    """--class-table naming a table the download is not labelled in. Pure."""
    if len(offered) > 1:
        return f"--class-table {asked}: this download (layout {layout}) is labelled in {' or '.join(offered)}"
    own = f"its own table, {offered[0]}" if offered else "its own table"
    return (f"--class-table {asked}: this download (layout {layout}) is labelled in {own} alone; --class-table "
            "chooses between winter21's own 19,167 classes and ImageNet-22k's 21,841 for ImageNet-21k's winter21 "
            "release (winter21_whole.tar.gz, timm/imagenet-w21-wds): leave it out")


def stat_of_download_file(path: Path) -> os.stat_result:
    """A file the download is made of, that a layout listed by name: a link whose target is gone (a hub cache's
    blob removed, a snapshot copied without its blobs) named, not a traceback."""
    try:
        return path.stat()
    except OSError as exn:
        if path.is_symlink():
            raise SourceError(f"{path} is a link to {os.readlink(path)}, which is not there (a hub cache whose files "
                              "were removed, or a folder copied without what its links point to): download it "
                              "again") from None
        raise SourceError(f"{path} cannot be read ({exn.strerror}): download it again") from None


def detect(root: Path) -> Detected:
    """Which layout `root` holds; a SourceError listing them all where none does."""
    root = Path(root)
    with unreadable_named():
        if not root.exists():
            raise SourceError(f"--source {root} does not exist")
        prepared_dataset(root)
        listings = {}
        with listings_kept(listings):
            shown = what_shows(root, {folder for layout in layouts().values() for folder in layout.SIGNS.folders})
            for layout in layouts().values():
                if signs_show(layout.SIGNS, shown) and (found := layout.recognise(root)):
                    detected = Detected(root, layout, found, listings)
                    return replace(detected, table=next(iter(detected.tables()), None))  # the layout's default
        raise SourceError(not_recognised(root))


def prepared_dataset(root: Path) -> None:
    """A dataset this package wrote, given as --source (for the download it came from, or to copy it): said so,
    with the download its manifest records. Its train/ would pass for an extracted tree, refused as one holding no
    <wnid>/ folders, which says nothing of the mistake."""
    if not (root / MANIFEST_NAME).is_file():
        return
    try:
        manifest = read_manifest(root)
    except DatasetNotReady:  # another program's manifest.json, or one unreadable: the layouts decide
        return
    recorded = manifest.source.get("path") if isinstance(manifest.source, dict) else None
    came = f"give --source the download it was prepared from ({recorded})" if recorded else (
        "give --source an ImageNet download")
    raise SourceError(f"--source {root} is a dataset `python -m prepare` wrote (its {MANIFEST_NAME}), ready to train "
                      f"from, not an ImageNet download: {came}")


def what_shows(root: Path, folders: set[str]) -> dict[str, tuple[str, ...]]:
    """--source's names, listed once (`names_in`: kept for the layout that reads it): its top's under "",
    each of `folders` it holds under its name; a file's own name, lower case, under None."""
    if not root.is_dir():
        return {None: (root.name.lower(),)}
    shown = {"": names_in(root)}
    for folder in sorted(folders):
        if folder in shown[""] and (root / folder).is_dir():
            shown[folder] = names_in(root / folder)
    return shown


def signs_show(signs: Signs, shown: dict) -> bool:
    """Whether a layout's signs show among what --source shows (`what_shows`). Pure."""
    if None in shown:
        return any(fnmatch.fnmatchcase(shown[None][0], pattern.lower()) for pattern in signs.file)
    return any(fnmatch.fnmatchcase(name, pattern) for folder in ("", *signs.folders) for name in shown.get(folder, ())
               for pattern in signs.names)


def not_recognised(root: Path) -> str:
    """The refusal: a layout's own hint where one knows what `root` is (the `datasets` Arrow cache),
    else every layout's files."""
    for layout in layouts().values():
        hint = getattr(layout, "hint", None)
        said = hint(root) if hint else None
        if said:
            return said
    what = "is not a directory" if root.is_file() else "holds no ImageNet layout"
    return f"--source {root} {what}. Expected one of:\n" + "\n".join(f"  {layout.EXPECTED}"
                                                                      for layout in layouts().values())


def open_source(root: Path) -> Source:
    """The source at `root`, its layout detected (for the tools and tests that want the `Source` only)."""
    return detect(root).open()
