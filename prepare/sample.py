"""The demo data: a small ImageNet in the exact official layouts, for the demo, the tests and the benchmarks.

    python -m prepare.sample OUT [--layout official|imagefolder|kaggle|kaggle-zip|hf-imagenet-1k|timm-wds|hf-parquet|all] ...

The official layout has the real structure: an outer train tar of per-class tars, a flat val tar,
and a devkit tar.gz whose meta.mat holds leaf and internal synsets with ILSVRC2012_IDs that are
deliberately NOT in sorted-wnid order (as in the real devkit). It carries the real archive's
quirks: a CMYK JPEG and a grayscale JPEG in train and val, and a PNG named n02105855_2933.JPEG.

Images look like photographs (smooth shading, objects, grain) so decode costs are realistic, and
each class has its own colour and shape so that a small model can learn them: above-chance
validation accuracy is itself a check that the labels are right.

The Hugging Face hub's layouts hold the same images: ILSVRC/imagenet-1k's gzipped tars named by its
loading script's rule (<stem>_<wnid>.JPEG) with its classes.py, and timm/imagenet-1k-wds's shuffled
WebDataset shards with their _info.json, as TensorFlow Datasets wrote them (.cls numbers ImageNet-1k's
1000 classes, no class list beside, the CMYK JPEGs and the PNG re-encoded). The sample's classes are
real ImageNet-1k classes, so every layout can hold them.
ILSVRC/imagenet-1k's Parquet (its `main` branch since 2025) holds them as rows of image {bytes, path}
and label (the 1000-class index), with a README.md whose YAML header counts the splits.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import multiprocessing
import random
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image, ImageDraw, ImageFilter

from prepare.labels import builtin_class_names
from shards.help import HelpFormatter
from shards.resources import available_cpus
from shards.paths import user_path

# Real ImageNet classes (their wnids, words and the real ILSVRC2012_IDs are not needed: ours are
# shuffled on purpose). n01751748 is the class of ILSVRC2012_val_00000001; n02105855 holds the PNG.
REAL_CLASSES = [
    ("n01440764", "tench, Tinca tinca"), ("n01443537", "goldfish, Carassius auratus"),
    ("n01751748", "sea snake"), ("n02105855", "Shetland sheepdog, Shetland sheep dog, Shetland"),
    ("n02119789", "kit fox, Vulpes macrotis"), ("n02690373", "airliner"), ("n03417042", "garbage truck, dustcart"),
    ("n03888257", "parachute, chute"), ("n04037443", "racer, race car, racing car"), ("n07747607", "orange"),
]
PNG_KEY = "n02105855_2933"
TAR_MTIME = 1_330_000_000  # fixed, so the same spec gives byte-identical archives


@dataclass(frozen=True)
class SampleSpec:
    classes: int = 10
    train_per_class: int = 40
    val_per_class: int = 10
    seed: int = 0
    max_width: int = 500  # ImageNet's photos are mostly 500 x 375 or 375 x 500
    quality: int = 95  # with the grain below: about 80 KiB per 500 x 375 image, like ImageNet


@dataclass
class SampleImages:
    classes: list[tuple[str, str, int]]  # (wnid, words, ILSVRC2012_ID)
    internal: list[tuple[str, str, int, list[int]]]  # (wnid, words, ID, children IDs)
    train: list[tuple[str, str, bytes]] = field(default_factory=list)  # (key, wnid, file bytes)
    val: list[tuple[str, str, bytes]] = field(default_factory=list)


def class_names(count: int) -> list[tuple[str, str]]:
    """The first `count` of REAL_CLASSES, then the other ImageNet-1k classes in sorted order: every
    sample class is a real one, so layouts labelled by ImageNet-1k's 1000-class index (the hub's
    Parquet, timm's shards) can hold it."""
    if count > len(builtin_class_names()):
        raise ValueError(f"the sample holds at most ImageNet-1k's {len(builtin_class_names())} classes")
    taken = {wnid for wnid, _ in REAL_CLASSES}
    extra = [(wnid, words) for wnid, words in builtin_class_names().items() if wnid not in taken]
    return (REAL_CLASSES + extra)[:count]


def synsets(count: int, rng: np.random.Generator):
    """Leaves with IDs 1..count in shuffled order, plus internal nodes (IDs after the leaves)."""
    named = class_names(count)
    ids = rng.permutation(count) + 1
    leaves = [(wnid, words, int(i)) for (wnid, words), i in zip(named, ids)]
    halves = [[i for _, _, i in leaves[: count // 2]], [i for _, _, i in leaves[count // 2:]]]
    internal = [("n00015388", "animal, animate being", count + 1, halves[0]),
                ("n03575240", "instrumentality, instrumentation", count + 2, halves[1])]
    internal.append(("n00001740", "entity", count + 3, [count + 1, count + 2]))
    return leaves, internal


def photo(rng: np.random.Generator, class_number: int, size: tuple[int, int]) -> Image.Image:
    """A photo-like RGB image: shaded background, a class-coloured object, soft blur and grain."""
    w, h = size
    coarse = rng.uniform(40, 215, size=(4, 5, 3)).astype(np.uint8)
    image = Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    hue = np.array([(class_number * 97) % 256, (class_number * 57 + 80) % 256, (class_number * 151 + 40) % 256])
    for _ in range(int(rng.integers(2, 5))):  # clutter
        box = sorted(rng.integers(0, w, 2)), sorted(rng.integers(0, h, 2))
        draw.rectangle([box[0][0], box[1][0], box[0][1], box[1][1]], fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
    cx, cy = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h
    r = rng.uniform(0.25, 0.4) * min(w, h)
    colour = tuple(int(c) for c in np.clip(hue + rng.normal(0, 12, 3), 0, 255))
    if class_number % 3 == 0:
        draw.ellipse([cx - r, cy - r * 0.7, cx + r, cy + r * 0.7], fill=colour)
    elif class_number % 3 == 1:
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=colour)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(1.2))
    pixels = np.asarray(image, dtype=np.int16) + rng.normal(0, 10, (h, w, 1)).astype(np.int16)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encode(image: Image.Image, fmt: str, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return out.getvalue()


def image_bytes(spec: SampleSpec, split: str, index: int, class_number: int, quirk: str | None = None) -> bytes:
    """One image, drawn from its own random stream: the same spec gives the same bytes in any
    process, so images can be made in parallel."""
    rng = np.random.default_rng([spec.seed, SPLIT_STREAMS[split], index])
    w = int(rng.integers(spec.max_width * 8 // 10, spec.max_width + 1))
    size = (w, w * 3 // 4) if rng.random() < 0.7 else (w * 3 // 4, w)
    image = photo(rng, class_number, size)
    if quirk == "cmyk":
        return encode(image.convert("CMYK"), "JPEG", spec.quality)
    if quirk == "gray":
        return encode(image.convert("L"), "JPEG", spec.quality)
    if quirk == "png":
        return encode(image, "PNG", spec.quality)
    return encode(image, "JPEG", spec.quality)


SPLIT_STREAMS = {"train": 1, "val": 2}


def image_list(spec: SampleSpec, leaves) -> tuple[list[tuple], list[tuple]]:
    """(key, wnid, class number, quirk) of every train and val image, in archive order."""
    rng = np.random.default_rng([spec.seed, 0])
    train_quirks = {(0, 0): "cmyk", (1, 1): "gray"}
    train = []
    for c, (wnid, _, _) in enumerate(leaves):
        for i in range(spec.train_per_class):
            number = 2933 if (wnid == "n02105855" and i == 1) else 10_000 + 37 * i + c
            key = f"{wnid}_{number}"
            train.append((key, wnid, c, "png" if key == PNG_KEY else train_quirks.get((c, i))))
    val_classes = rng.permutation(np.repeat(np.arange(spec.classes), spec.val_per_class))
    val = [(f"ILSVRC2012_val_{n:08d}", leaves[c][0], int(c), {2: "cmyk", 3: "gray"}.get(n))
           for n, c in enumerate(val_classes, start=1)]
    return train, val


def draw_images(spec: SampleSpec, split: str, rows: list[tuple], workers: int) -> list[tuple[str, str, bytes]]:
    jobs = [(spec, split, index, c, quirk) for index, (_, _, c, quirk) in enumerate(rows)]
    if workers > 1 and len(jobs) > 64:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            data = pool.starmap(image_bytes, jobs, chunksize=16)
    else:
        data = [image_bytes(*job) for job in jobs]
    return [(key, wnid, d) for (key, wnid, _, _), d in zip(rows, data)]


def sample_images(spec: SampleSpec = SampleSpec(), workers: int = 1) -> SampleImages:
    leaves, internal = synsets(spec.classes, np.random.default_rng(spec.seed))
    train, val = image_list(spec, leaves)
    return SampleImages(leaves, internal, draw_images(spec, "train", train, workers),
                        draw_images(spec, "val", val, workers))


# ---------------------------------------------------------------- layouts

def tar_bytes(members: list[tuple[str, bytes]], gz: bool = False) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), TAR_MTIME, 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(out.getvalue(), mtime=0) if gz else out.getvalue()


def write_if_changed(path: Path, data: bytes) -> None:
    """Leave an identical file alone (and its mtime): rerunning the demo needs no --force."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not (path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data):
        path.write_bytes(data)


def meta_mat(images: SampleImages) -> bytes:
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
              "num_train_images"]
    rows = [(i, wnid, words, [], 0, len(images.train) // len(images.classes)) for wnid, words, i in images.classes]
    rows += [(i, wnid, words, children, 1 + (wnid == "n00001740"), 0) for wnid, words, i, children in images.internal]
    rows.sort()  # the real meta.mat lists synsets by ILSVRC2012_ID
    table = np.zeros((len(rows), 1), dtype=[(f, "O") for f in fields])
    for r, (i, wnid, words, children, height, count) in enumerate(rows):
        table[r, 0] = (np.array([[i]], dtype=np.uint16), wnid, words, f"gloss of {words}",
                       np.array([[len(children)]], dtype=np.uint16),
                       np.array([children], dtype=np.uint16) if children else np.zeros((1, 0), dtype=np.uint8),
                       np.array([[height]], dtype=np.uint8), np.array([[count]], dtype=np.uint16))
    out = io.BytesIO()
    scipy.io.savemat(out, {"synsets": table})
    # The 116-byte text header carries a creation time: fix it, so the same spec gives the same bytes.
    return b"MATLAB 5.0 MAT-file, written by prepare.sample".ljust(116) + out.getvalue()[116:]


def ground_truth(images: SampleImages) -> str:
    id_of = {wnid: i for wnid, _, i in images.classes}
    return "".join(f"{id_of[wnid]}\n" for _, wnid, _ in images.val)


def write_official(out: Path, images: SampleImages) -> None:
    out.mkdir(parents=True, exist_ok=True)
    per_class = {}
    for key, wnid, data in images.train:
        per_class.setdefault(wnid, []).append((f"{key}.JPEG", data))
    inner = [(f"{wnid}.tar", tar_bytes(members)) for wnid, members in sorted(per_class.items())]
    write_if_changed(out / "ILSVRC2012_img_train.tar", tar_bytes(inner))
    write_if_changed(out / "ILSVRC2012_img_val.tar", tar_bytes([(f"{key}.JPEG", d) for key, _, d in images.val]))
    devkit = [("ILSVRC2012_devkit_t12/data/meta.mat", meta_mat(images)),
              ("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", ground_truth(images).encode())]
    write_if_changed(out / "ILSVRC2012_devkit_t12.tar.gz", tar_bytes(devkit, gz=True))


def write_tree(folder: Path, rows: list[tuple[str, str, bytes]], by_class: bool) -> None:
    for key, wnid, data in rows:
        write_if_changed((folder / wnid if by_class else folder) / f"{key}.JPEG", data)


def write_imagefolder(out: Path, images: SampleImages) -> None:
    write_tree(out / "train", images.train, by_class=True)
    write_tree(out / "val", images.val, by_class=True)


def kaggle_files(images: SampleImages) -> list[tuple[str, bytes]]:
    """Kaggle's imagenet-object-localization-challenge as it unzips, (path, bytes): the images under
    ILSVRC/Data/CLS-LOC/ (train in <wnid>/ folders, val flat), LOC_synset_mapping.txt, LOC_val_solution.csv
    (the first token of each box list is the wnid), and ILSVRC/ImageSets/CLS-LOC/train_cls.txt and val.txt."""
    data, sets = "ILSVRC/Data/CLS-LOC", "ILSVRC/ImageSets/CLS-LOC"
    solution = io.StringIO(newline="")
    writer = csv.writer(solution, lineterminator="\n")
    writer.writerow(["ImageId", "PredictionString"])
    for key, wnid, _ in images.val:
        writer.writerow([key, f"{wnid} 10 20 200 180 {wnid} 30 40 220 200"])
    train_cls = "".join(f"{wnid}/{key} {n}\n" for n, (key, wnid, _) in enumerate(images.train, start=1))
    val_list = "".join(f"{key} {n}\n" for n, (key, _, _) in enumerate(sorted(images.val), start=1))
    return ([("LOC_synset_mapping.txt", synset_mapping(images).encode()),
             ("LOC_val_solution.csv", solution.getvalue().encode()),
             (f"{sets}/train_cls.txt", train_cls.encode()), (f"{sets}/val.txt", val_list.encode())]
            + [(f"{data}/train/{wnid}/{key}.JPEG", d) for key, wnid, d in images.train]
            + [(f"{data}/val/{key}.JPEG", d) for key, _, d in images.val])


def write_kaggle(out: Path, images: SampleImages) -> None:
    for name, data in kaggle_files(images):
        write_if_changed(out / name, data)


KAGGLE_ZIP = "imagenet-object-localization-challenge.zip"


def write_kaggle_zip(out: Path, images: SampleImages) -> None:
    """Kaggle's download as it comes: one zip of kaggle_files (deflated, fixed times: the same bytes on
    a rerun), in `out`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in kaggle_files(images):
            archive.writestr(zipfile.ZipInfo(name, date_time=(2019, 1, 1, 0, 0, 0)), data,
                             compress_type=zipfile.ZIP_DEFLATED)
    write_if_changed(out / KAGGLE_ZIP, buffer.getvalue())


def synset_mapping(images: SampleImages) -> str:
    """LOC_synset_mapping.txt: 'wnid words' lines, sorted by wnid."""
    return "".join(f"{w} {words}\n" for w, words, _ in sorted(images.classes))


def hf_classes_py(images: SampleImages) -> str:
    """classes.py as ILSVRC/imagenet-1k has it, for the sample's classes (sorted by wnid)."""
    entries = "".join(f"        {json.dumps(wnid)}: {json.dumps(words)},\n"
                      for wnid, words, _ in sorted(images.classes))
    return f"from collections import OrderedDict\n\nIMAGENET2012_CLASSES = OrderedDict(\n    {{\n{entries}    }}\n)\n"


HF_SCRIPT = '''"""prepare.sample's stand-in for ILSVRC/imagenet-1k's loading script: the lines prepare reads."""

_DATA_URL = {
    "train": [f"data/train_images_{i}.tar.gz" for i in range(2)],
    "val": ["data/val_images.tar.gz"],
    "test": ["data/test_images.tar.gz"],
}
'''


def write_hf_imagenet(out: Path, images: SampleImages) -> None:
    """ILSVRC/imagenet-1k as the hub holds it: data/train_images_{0,1}.tar.gz, data/val_images.tar.gz and a
    tiny data/test_images.tar.gz (unlabelled: prepare ignores it), members named <stem>_<wnid>.JPEG,
    and classes.py and the loading script at the top."""
    def named(rows):
        return [(f"{key}_{wnid}.JPEG", data) for key, wnid, data in rows]

    train = named(images.train)
    write_if_changed(out / "data" / "train_images_0.tar.gz", tar_bytes(train[0::2], gz=True))
    write_if_changed(out / "data" / "train_images_1.tar.gz", tar_bytes(train[1::2], gz=True))
    write_if_changed(out / "data" / "val_images.tar.gz", tar_bytes(named(images.val), gz=True))
    test = [(f"ILSVRC2012_test_{n:08d}.JPEG", data) for n, (_, _, data) in enumerate(images.val[:2], start=1)]
    write_if_changed(out / "data" / "test_images.tar.gz", tar_bytes(test, gz=True))
    write_if_changed(out / "classes.py", hf_classes_py(images).encode())
    write_if_changed(out / "imagenet-1k.py", HF_SCRIPT.encode())


HF_PARQUET_FILES = {"train": 2, "validation": 1, "test": 1}  # the hub's split -> its files
HF_PARQUET_ROW_GROUP = 100  # rows a row group holds: the hub's image data is written so


def write_hf_parquet(out: Path, images: SampleImages, row_group_rows: int = HF_PARQUET_ROW_GROUP) -> None:
    """ILSVRC/imagenet-1k's `main` branch as the hub holds it since its conversion to Parquet:
    data/train-0000i-of-00002.parquet (the train rows in two halves, archive order),
    data/validation-00000-of-00001.parquet and a tiny data/test-00000-of-00001.parquet (label -1:
    prepare never reads it), rows of image {bytes, path: <stem>_<wnid>.JPEG} and label (the class's
    place among ImageNet-1k's 1000 sorted wnids), in row groups of `row_group_rows`; README.md with
    the YAML header the hub writes (configs, dataset_info's features and splits)."""
    index = {wnid: i for i, wnid in enumerate(sorted(builtin_class_names()))}
    splits = {"train": [(f"{key}_{wnid}.JPEG", data, index[wnid]) for key, wnid, data in images.train],
              "validation": [(f"{key}_{wnid}.JPEG", data, index[wnid]) for key, wnid, data in images.val],
              "test": [(f"ILSVRC2012_test_{n:08d}.JPEG", data, -1) for n, (_, _, data) in enumerate(images.val[:2], 1)]}
    for split, rows in splits.items():
        count = HF_PARQUET_FILES[split]
        per_file = -(-len(rows) // count)
        for n in range(count):
            write_if_changed(out / "data" / f"{split}-{n:05d}-of-{count:05d}.parquet",
                             parquet_bytes(rows[n * per_file:(n + 1) * per_file], row_group_rows))
    counts = {split: (len(rows), sum(len(data) for _, data, _ in rows)) for split, rows in splits.items()}
    write_if_changed(out / "README.md", hf_readme(counts).encode())


def parquet_bytes(rows: list[tuple[str | None, bytes, int]], row_group_rows: int) -> bytes:
    """A Parquet file of (path, image bytes, label) rows as `datasets` writes them: the image a struct
    {bytes, path}, the label int64, the features in the schema's "huggingface" metadata."""
    import pyarrow as pa  # here: the other layouts' samples need no pyarrow
    import pyarrow.parquet as pq

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {"info": {"features": {"image": {"_type": "Image"},
                                      "label": {"names": list(builtin_class_names().values()), "_type": "ClassLabel"}}}}
    schema = pa.schema([("image", image), ("label", pa.int64())], metadata={"huggingface": json.dumps(features)})
    table = pa.table([pa.array([{"bytes": data, "path": path} for path, data, _ in rows], image),
                      pa.array([label for _, _, label in rows], pa.int64())], schema=schema)
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_rows, use_dictionary=False)  # no image repeats
    return out.getvalue()


def hf_readme(counts: dict[str, tuple[int, int]]) -> str:
    """README.md of ILSVRC/imagenet-1k as the Parquet conversion leaves it: the YAML header (what prepare
    reads: dataset_info's splits and their num_examples), then the card. counts: split -> (rows, bytes)."""
    names = "".join(f"          '{i}': '{words.replace(chr(39), chr(39) * 2)}'\n"
                    for i, words in enumerate(builtin_class_names().values()))
    splits = "".join(f"  - name: {split}\n    num_bytes: {size}\n    num_examples: {rows}\n"
                     for split, (rows, size) in counts.items())
    files = "".join(f"  - split: {split}\n    path: data/{split}-*\n" for split in counts)
    total = sum(size for _, size in counts.values())
    return ("---\nannotations_creators:\n- crowdsourced\nlanguage:\n- en\nlicense:\n- other\npretty_name: ImageNet\n"
            "task_categories:\n- image-classification\ndataset_info:\n  features:\n  - name: image\n    dtype: image\n"
            f"  - name: label\n    dtype:\n      class_label:\n        names:\n{names}  splits:\n{splits}"
            f"  download_size: {total}\n  dataset_size: {total}\nconfigs:\n- config_name: default\n  data_files:\n"
            f"{files}---\n\n# Dataset Card for ImageNet\n\nprepare.sample's stand-in for ILSVRC/imagenet-1k.\n")


TIMM_SHARDS = {"train": ("train", "imagenet1k-train-{:04d}.tar", 3),  # split: (timm's name, shard name, shards)
               "val": ("validation", "imagenet1k-validation-{:02d}.tar", 2)}


def write_timm_wds(out: Path, images: SampleImages) -> None:
    """timm/imagenet-1k-wds as the hub holds it, written from TensorFlow Datasets: each split's samples
    shuffled into a few shards keyed by the original file's stem, each KEY.cls (the index among
    ImageNet-1k's 1000 sorted wnids), KEY.jpg and KEY.json ({"label", "width", "height", "filename"}),
    and _info.json counting them; no class list beside. As TFDS did, the CMYK JPEGs and the PNG are
    re-encoded as RGB JPEGs (`tfds_image`): their bytes differ from the official archives'."""
    index = {wnid: i for i, wnid in enumerate(builtin_class_names())}
    splits = {}
    for split, rows in (("train", images.train), ("val", images.val)):
        name, pattern, count = TIMM_SHARDS[split]
        shuffled = list(rows)
        random.Random(f"timm-wds {split}").shuffle(shuffled)
        filenames, lengths = [], []
        for shard in range(count):
            samples = shuffled[shard::count]
            members = []
            for key, wnid, data in samples:
                image, (width, height) = tfds_image(data)
                meta = {"label": index[wnid], "width": width, "height": height, "filename": f"{key}.JPEG"}
                members += [(f"{key}.cls", str(index[wnid]).encode()), (f"{key}.jpg", image),
                            (f"{key}.json", json.dumps(meta).encode())]
            filenames.append(pattern.format(shard))
            lengths.append(len(samples))
            write_if_changed(out / filenames[-1], tar_bytes(members))
        splits[name] = {"name": name, "num_samples": sum(lengths), "filenames": filenames, "shard_lengths": lengths}
    info = {"name": "imagenet1k", "splits": splits}
    write_if_changed(out / "_info.json", (json.dumps(info, indent=2) + "\n").encode())


def tfds_image(data: bytes) -> tuple[bytes, tuple[int, int]]:
    """An image as TensorFlow Datasets stored it: RGB and grayscale JPEGs as they are, anything else
    (CMYK, the PNG) re-encoded as an RGB JPEG. With its size."""
    image = Image.open(io.BytesIO(data))
    if image.format == "JPEG" and image.mode in ("RGB", "L"):
        return data, image.size
    return encode(image.convert("RGB"), "JPEG", 95), image.size


WRITERS = {"official": write_official, "imagefolder": write_imagefolder, "kaggle": write_kaggle,
           "kaggle-zip": write_kaggle_zip,
           "hf-imagenet-1k": write_hf_imagenet, "timm-wds": write_timm_wds,
           "hf-parquet": write_hf_parquet}


def make_sample(out: Path, layout: str = "official", spec: SampleSpec = SampleSpec(), workers: int = 1) -> SampleImages:
    """Write the sample dataset in `layout` (or every layout in out/<layout> for "all")."""
    images = sample_images(spec, workers)
    if layout == "all":
        for name, write in WRITERS.items():
            write(Path(out) / name, images)
    else:
        WRITERS[layout](Path(out), images)
    return images


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m prepare.sample", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("out", type=user_path, help="the folder to write the sample download to")
    p.add_argument("--layout", choices=[*WRITERS, "all"], default="official",
                   help="which download to write it as: the official archives, an extracted tree, Kaggle's folder "
                        "or zip, the hub's tars, timm's WebDataset shards or the hub's Parquet; all: each in "
                        "OUT/<layout>")
    p.add_argument("--classes", type=int, default=SampleSpec.classes,
                   help="how many classes (real ImageNet-1k wnids, each with its own colour and shape), at least 4")
    p.add_argument("--train-per-class", type=int, default=SampleSpec.train_per_class,
                   help="training images a class, at least 2")
    p.add_argument("--val-per-class", type=int, default=SampleSpec.val_per_class,
                   help="validation images a class, at least 1")
    p.add_argument("--max-width", type=int, default=SampleSpec.max_width,
                   help="the widest image, in pixels (ImageNet's photos are mostly 500 x 375)")
    p.add_argument("--seed", type=int, default=SampleSpec.seed,
                   help="what the images look like: another seed, other images of the same classes")
    p.add_argument("--workers", type=int, default=available_cpus(), help="processes drawing images")
    return p


def main(argv: list[str] | None = None) -> None:
    p = build_parser()
    a = p.parse_args(argv)
    if a.classes < 4 or a.train_per_class < 2 or a.val_per_class < 1:
        p.error("need at least 4 classes, 2 train and 1 val image per class (for the quirk images)")
    spec = SampleSpec(a.classes, a.train_per_class, a.val_per_class, a.seed, a.max_width)
    images = make_sample(a.out, a.layout, spec, a.workers)
    size = sum(len(d) for _, _, d in images.train + images.val)
    print(f"wrote {len(images.train)} train + {len(images.val)} val images ({size / 1e6:.1f} MB, "
          f"{len(images.classes)} classes) in the {a.layout} layout to {a.out}")


if __name__ == "__main__":
    main()
