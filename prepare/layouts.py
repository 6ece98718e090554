"""Which source layout a folder (or file) holds, and how to open it:

- official:       ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, ILSVRC2012_devkit_t12.tar.gz (prepare/official.py)
- imagefolder:    train/<wnid>/*.JPEG and val/ (prepare/trees.py)
- kaggle:         ILSVRC/Data/CLS-LOC/{train/<wnid>/,val/} with its CSV and synset mapping (prepare/trees.py)
- kaggle-zip:     Kaggle's imagenet-object-localization-challenge.zip, read in place (prepare/trees.py, zip_tree.py)
- hf-imagenet-1k: the Hugging Face hub's ILSVRC/imagenet-1k, gzipped tars (prepare/hub_sources.py)
- timm-wds:       the hub's timm/imagenet-1k-wds, WebDataset shards (prepare/hub_sources.py)
- hf-parquet:     the hub's ILSVRC/imagenet-1k as Parquet, its `main` branch since 2025 (prepare/hub_parquet.py)

`detect_layout` names it, `open_source` opens it as a `Source`, `fingerprint` identifies it cheaply.
It imports the layouts' modules; none imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from prepare.hub_parquet import DOWNLOAD, ParquetImageNet, arrow_cache_hint, parquet_files, parquet_folders
from prepare.hub_sources import (
    HF_CLASSES, HF_DATA, HF_VAL, TIMM_INFO, TIMM_SHARDS, HubArchives, WdsShards, hf_data_folder,
    hf_files, wds_files,
)
from prepare.official import OFFICIAL_FILES, TRAIN_TAR, VAL_TAR, OfficialArchives
from prepare.sources import DEVKIT, KAGGLE_DATA, KAGGLE_SYNSETS, KAGGLE_VAL_CSV, Source, SourceError, readable_file
from prepare.trees import ImageFolderTree, KaggleTree, KaggleZip
from prepare.zip_tree import KAGGLE_ZIP, kaggle_zip, zip_identity

# a hub layout -> the files that identify it (for `fingerprint`)
HUB_FILES = {"hf-imagenet-1k": hf_files, "timm-wds": wds_files, "hf-parquet": parquet_files}


def fingerprint(root: Path, layout: str) -> dict:
    """What identifies a source cheaply: path, layout, and for archives and shards their size and mtime
    (with the class list and the other small files they are read with).

    Trees are identified by path and layout only: listing 1.3 M files would make an idempotent
    re-run take minutes on shared storage.
    """
    files = []
    if layout == "official":
        for name, why in OFFICIAL_FILES.items():
            st = readable_file(root / name, why).stat()
            files.append({"path": name, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    elif layout == "kaggle-zip":
        files.append(zip_identity(kaggle_zip(root)))
    elif layout in HUB_FILES:
        for path in HUB_FILES[layout](root):
            st = path.stat()
            files.append({"path": os.path.relpath(path, root), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return {"path": str(root), "layout": layout, "files": files}


def detect_layout(root: Path) -> str:
    """Which layout `root` holds; SourceError listing them when none."""
    if not root.exists():
        raise SourceError(f"--source {root} does not exist")
    if root.is_file() and root.suffix.lower() == ".zip":
        return "kaggle-zip"
    if not root.is_dir():
        raise SourceError(f"--source {root} is not a directory: give the folder that holds the ImageNet files "
                          f"(or Kaggle's {KAGGLE_ZIP})")
    if (root / TRAIN_TAR).exists() or (root / VAL_TAR).exists():
        return "official"
    if (root / KAGGLE_DATA / "train").is_dir():
        return "kaggle"
    if (root / KAGGLE_ZIP).is_file():
        return "kaggle-zip"
    if hf_data_folder(root) is not None:
        return "hf-imagenet-1k"
    if (root / TIMM_INFO).is_file() or any(any(root.glob(pattern)) for pattern in TIMM_SHARDS.values()):
        return "timm-wds"
    if parquet_folders(root) is not None:  # before the tree: a download's top holds data/, never train/
        return "hf-parquet"
    if (root / "train").is_dir():
        return "imagefolder"
    arrow_cache = arrow_cache_hint(root)
    if arrow_cache:
        raise SourceError(arrow_cache)
    raise SourceError(
        f"--source {root} holds no ImageNet layout. Expected one of:\n"
        f"  official archives: {TRAIN_TAR}, {VAL_TAR}, {DEVKIT}\n"
        "  an extracted tree: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG\n"
        f"  the Kaggle layout: {KAGGLE_DATA}/train/<wnid>/, {KAGGLE_DATA}/val/, {KAGGLE_VAL_CSV}, {KAGGLE_SYNSETS}\n"
        f"  Kaggle's download as it comes: {KAGGLE_ZIP} (give the zip, or the folder that holds it)\n"
        f"  Hugging Face's ILSVRC/imagenet-1k: {HF_DATA}/train_images_0.tar.gz ... and {HF_DATA}/{HF_VAL} "
        f"(this folder or its {HF_DATA}/), {HF_CLASSES} beside them\n"
        f"  Hugging Face's timm/imagenet-1k-wds: {TIMM_SHARDS['train']} and {TIMM_SHARDS['val']}, {TIMM_INFO} "
        "beside them\n"
        f"  Hugging Face's ILSVRC/imagenet-1k as Parquet: {HF_DATA}/train-NNNNN-of-NNNNN.parquet and "
        f"{HF_DATA}/validation-NNNNN-of-NNNNN.parquet (this folder, its {HF_DATA}/ or a hub-cache snapshot): "
        f"`{DOWNLOAD}`"
    )


def open_source(root: Path) -> Source:
    root = Path(root)
    layout = detect_layout(root)
    return {"official": OfficialArchives, "imagefolder": ImageFolderTree, "kaggle": KaggleTree, "kaggle-zip": KaggleZip,
            "hf-imagenet-1k": HubArchives, "timm-wds": WdsShards, "hf-parquet": ParquetImageNet}[layout](root)
