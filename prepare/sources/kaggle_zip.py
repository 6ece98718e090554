"""Kaggle's download as it comes, imagenet-object-localization-challenge.zip, read in place
(prepare/sources/zip_tree.py): the Kaggle layout (prepare/sources/kaggle.py) seen through the zip's members.
"""

from __future__ import annotations

from pathlib import Path

from prepare.sources.base import KAGGLE_SYNSETS, Signs, SourceError
from prepare.sources.kaggle import KaggleTree
from prepare.sources.zip_tree import KAGGLE_ZIP, kaggle_zip, open_kaggle_zip

NAME = "kaggle-zip"
EXPECTED = f"Kaggle's download as it comes: {KAGGLE_ZIP} (give the zip, or the folder that holds it)"


class KaggleZip(KaggleTree):
    """Kaggle's download as it comes, imagenet-object-localization-challenge.zip, read in place."""
    layout = "kaggle-zip"

    def __init__(self, root: Path):
        path = kaggle_zip(root)
        if path is None:
            raise SourceError(f"{root} holds no {KAGGLE_ZIP}")
        super().__init__(open_kaggle_zip(path, KAGGLE_SYNSETS))


# ---------------------------------------------------------------- the registry's questions (prepare/sources/__init__.py)

SIGNS = Signs(names=(KAGGLE_ZIP,), file=("*.zip",))


def recognise(root: Path) -> Path | None:
    """The zip: --source itself where it is a .zip file, or Kaggle's zip in the folder."""
    if root.is_file():
        return root if root.suffix.lower() == ".zip" else None
    return kaggle_zip(root)


def identifying_files(root: Path, found: Path) -> list[Path]:
    return [found]


def open_source(root: Path, found: Path) -> KaggleZip:
    return KaggleZip(root)
