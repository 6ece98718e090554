"""The manifest: what a prepared dataset holds, written last as its completion marker.

One reader (`read_manifest`) and one writer (`write_manifest`) for both stages. The writer is
atomic (temporary file, fsync, rename), so a reader sees either no manifest or a whole one.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import BinaryIO, Callable

from shards.errors import UserError
from shards.lock import describe, prepare_writing, shared_read_lock
from shards.paths import ALL_SPLITS, MANIFEST_NAME, SPLITS

FORMAT = "imagenet-wds/1"


class DatasetNotReady(UserError, RuntimeError):
    """No complete prepared dataset where one was expected."""


class ManifestUnreadable(DatasetNotReady):
    """A manifest is there but cannot be read (`why`): damaged, not this version's format, or not
    readable by this user. It still marks a dataset someone made: prepare replaces it only when told."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


class DamagedData(UserError):
    """A prepared dataset's bytes are damaged (more samples failed to decode than allowed, or a
    shard fails its checksum): the message names the shard and what to do."""


@dataclass(frozen=True)
class ShardInfo:
    name: str  # relative to the dataset root, e.g. "train/train-000003.tar"
    samples: int
    bytes: int
    sha256: str = ""  # hex digest of the file, computed as it was written ("" in datasets made before)


@dataclass(frozen=True)
class SplitInfo:
    samples: int
    bytes: int
    shards: list[ShardInfo]


@dataclass(frozen=True)
class ClassInfo:
    index: int
    wnid: str
    name: str


@dataclass
class Manifest:
    source: dict  # {"path", "layout", "files": [{"path", "size", "mtime_ns"}]}
    options: dict  # the options that decide the bytes of the shards
    classes: list[ClassInfo]
    splits: dict[str, SplitInfo]
    converted: dict[str, str] = field(default_factory=dict)  # key -> what was done to it
    skipped: dict[str, str] = field(default_factory=dict)  # key -> why it is not in the shards
    stats: dict = field(default_factory=dict)  # counts, bytes, elapsed, images/s, MB/s (the first run's);
    # "added": the same of each run that added evaluation sets since, with its "splits" and "real_labels"
    # key -> what libjpeg found wrong in its entropy-coded data, for images stored as they are (a
    # manifest written before prepare checked has none: read as empty)
    damaged: dict[str, str] = field(default_factory=dict)
    # the ReaL label sets of the val images, where prepared: {"file", "bytes", "sha256", "images",
    # "labelled"} (the file is REAL_LABELS_FILE beside the manifest); empty without them
    real_labels: dict = field(default_factory=dict)
    # split -> what it lacks against what the download declares, where prepared with --allow-partial
    partial: dict[str, str] = field(default_factory=dict)
    # split -> a count that differs from ImageNet-1k's where the download declares none (prepare's warning)
    warnings: dict[str, str] = field(default_factory=dict)
    # a named subset of the classes evaluated on its own -> its classes' indices in `classes`, in the
    # subset's own label order: ImageNet-22k's {"12k": [...]} (timm/imagenet-22k-wds's val is the 12k one)
    class_subsets: dict[str, list[int]] = field(default_factory=dict)
    # another class table the classes nest with -> {"classes": its count, "index": the index there of each class
    # of `classes`, -1 where it has none}: winter21's datasets record 22k's (labelled in winter21's own 19,167) or
    # winter21's own (labelled in 22k's), so that a model of either table evaluates on them (python -m train.evaluate)
    class_maps: dict[str, dict] = field(default_factory=dict)
    format: str = FORMAT

    def to_json(self) -> str:
        return json.dumps(as_plain(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        raw = json.loads(text)
        if raw.get("format") != FORMAT:
            later = format_number(raw.get("format")) > format_number(FORMAT)
            raise (LaterFormat if later else ValueError)(f"unknown manifest format {raw.get('format')!r} (this code "
                                                         f"reads {FORMAT!r})")
        splits = {  # in ALL_SPLITS' order (the JSON's keys are sorted): train, val, then the evaluation sets
            name: SplitInfo(s["samples"], s["bytes"], [ShardInfo(**shard) for shard in s["shards"]])
            for name, s in sorted(raw["splits"].items(), key=lambda item: split_order(item[0]))
        }
        return cls(
            source=raw["source"],
            options=raw["options"],
            classes=[ClassInfo(**c) for c in raw["classes"]],
            splits=splits,
            converted=raw.get("converted", {}),
            skipped=raw.get("skipped", {}),
            damaged=raw.get("damaged", {}),
            stats=raw.get("stats", {}),
            real_labels=raw.get("real_labels", {}),
            partial=raw.get("partial", {}),
            warnings=raw.get("warnings", {}),
            class_subsets=raw.get("class_subsets", {}),
            class_maps=raw.get("class_maps", {}),
        )

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def dataset_id(self) -> str:
        """A short fingerprint of what the shards hold: checkpoints refuse to resume on another dataset.
        (Shard names, counts and sizes, not checksums: datasets made before checksums keep their id.)
        Train and val only: a run resumes on the dataset prepared again with evaluation sets added."""
        splits = {name: {"samples": split.samples, "bytes": split.bytes,
                         "shards": [{"name": s.name, "samples": s.samples, "bytes": s.bytes} for s in split.shards]}
                  for name, split in self.splits.items() if name in SPLITS}
        content = json.dumps([self.options, as_plain(self.classes), splits], sort_keys=True)
        return hashlib.blake2b(content.encode(), digest_size=8).hexdigest()


def as_plain(value):
    """`value` with each dataclass in it a dict, as dataclasses.asdict gives, without copying what holds none:
    asdict copies every list and dict, deep (a 22k manifest's 21,841 classes and its class maps: 0.1 s a write)."""
    if isinstance(value, (str, int, float)) or value is None:  # (most of what a manifest holds: first)
        return value
    if is_dataclass(value):
        return {name: as_plain(item) for name, item in vars(value).items()}
    if isinstance(value, list) and value and is_dataclass(value[0]):
        return [as_plain(item) for item in value]
    if isinstance(value, dict) and any(is_dataclass(item) for item in value.values()):
        return {key: as_plain(item) for key, item in value.items()}
    return value


def split_order(name: str) -> int:
    return ALL_SPLITS.index(name) if name in ALL_SPLITS else len(ALL_SPLITS)


def manifest_path(root: Path) -> Path:
    return Path(root) / MANIFEST_NAME


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Atomically write the manifest: whole or not at all, even on kill -9 or power loss. The folders of
    the shards it lists are made durable first (their renames fsynced): after a power loss a manifest
    never lists a shard whose rename was lost."""
    for folder in sorted({(root / shard.name).parent for split in manifest.splits.values() for shard in split.shards}):
        fsync_dir(folder)
    write_file_atomic(manifest_path(root), manifest.to_json().encode())


def remove_killed_writes(folder: Path, names: tuple[str, ...]) -> list[str]:
    """The temporary files write_file_atomic left in `folder` for `names` where a kill stopped it before
    its rename (`.NAME.XXXXXXXX.tmp`), removed; their names. Only those names: nothing else of the folder."""
    removed = []
    for name in names:
        for path in sorted(Path(folder).glob(f".{name}.*.tmp")):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def write_file_atomic(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write `data` (bytes, or a function writing to a binary file) to `path` atomically: a temporary
    file in the same folder, fsync, rename, fsync of the folder. Readers see the old file or the
    new one, whole, whatever happens (kill -9, power loss). Used for manifests and checkpoints."""
    path = Path(path)
    fd, tmp = temporary_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def temporary_beside(path: Path) -> tuple[int, str]:
    """A new file `.NAME.XXXXXXXX.tmp` beside `path`, open for writing, and its path. Made with mode 0666 for the
    umask (or the folder's default ACL) to narrow, as any file its user makes: mkstemp's 0600, or a fixed 0644, kept
    a group-shared folder's colleagues from writing its files (a run directory resumed, a dataset prepared again)
    and overrode a private umask's 077."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), str(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def fsync_dir(path: Path) -> None:
    """Make renames in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LaterFormat(ValueError):
    """A manifest of a format later than this code's."""


def format_number(name) -> int:
    """The version in a format's name ('imagenet-wds/1': 1); 0 for anything else."""
    head, _, number = str(name).rpartition("/")
    return int(number) if head == FORMAT.rpartition("/")[0] and number.isdigit() else 0


def read_manifest(root: Path) -> Manifest:
    """The manifest of the dataset at `root`; DatasetNotReady, saying what to run, if there is none."""
    path = manifest_path(root)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        # a folder inside a dataset (its train/ or val/): telling to prepare into it would read the whole source
        # again, hours, for a dataset that is already there
        if manifest_path(Path(root).parent).is_file():
            raise DatasetNotReady(f"no prepared dataset at {root}: it is a folder of the dataset at "
                                  f"{Path(root).parent}, which is the folder to give") from None
        raise DatasetNotReady(
            f"no prepared dataset at {root} (no {MANIFEST_NAME}): run "
            f"`srun --ntasks-per-node=1 python -m prepare --source /path/to/imagenet --dest {shlex.quote(str(root))}` "
            "on every node of the job first"
        ) from None
    except NotADirectoryError:
        raise DatasetNotReady(f"{root} is not a directory: give the folder `python -m prepare` wrote "
                              "(its --dest)") from None
    except OSError as exn:
        raise ManifestUnreadable(f"cannot read {path}: {exn.strerror}", str(exn.strerror)) from None
    try:
        return Manifest.from_json(data.decode())  # (a UnicodeDecodeError is a ValueError: damaged too)
    except LaterFormat as exn:  # preparing it again with this version would undo the later one's work
        raise ManifestUnreadable(f"{path} was written by a later version of this package ({exn}): upgrade the "
                                 "package where this runs (pip install -U), or use a --dest of this version's",
                                 str(exn)) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exn:  # (AttributeError: JSON but no object)
        raise ManifestUnreadable(f"{path} is unreadable ({exn}): rerun prepare with --force", str(exn)) from None


def find_damage(root: Path, manifest: Manifest) -> list[str]:
    """What is missing or of the wrong size among the shards (and the ReaL labels) the manifest
    lists (stat only: fast)."""
    problems = []
    for name, expected, _ in checksummed_files(manifest):
        try:
            size = (Path(root) / name).stat().st_size
        except FileNotFoundError:
            problems.append(f"{name} is missing")
            continue
        if size != expected:
            problems.append(f"{name} has {size} bytes, the manifest says {expected}")
    return problems


def first_unreadable(root: Path, manifest: Manifest) -> str | None:
    """The first of the files the manifest lists that this user may not read (its folder private, the file of
    another user's umask), and why; None where each is readable or missing (find_damage's). Training met such a
    shard as a traceback of find_damage's stat, or mid-epoch as a shard 'changed after this loader was made'."""
    for name, _, _ in checksummed_files(manifest):
        path = Path(root) / name
        try:
            path.stat()
        except FileNotFoundError:
            continue
        except PermissionError as exn:
            return f"{name} ({exn.strerror})"
        if not os.access(path, os.R_OK):
            return f"{name} (Permission denied)"
    return None


def file_sha256(path: Path, chunk: int = 4 << 20) -> str:
    """The SHA-256 of a file, read in chunks (hashlib releases the GIL: threads hash in parallel).
    The same digest as `sha256sum` prints."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def checksum_problem(root: Path, name: str, sha256: str) -> str | None:
    """Why a file of the dataset (a shard, the ReaL labels) is not the bytes its manifest recorded,
    or None when it is."""
    try:
        actual = file_sha256(Path(root) / name)
    except FileNotFoundError:
        return f"{name} is missing"
    except OSError as exn:  # an I/O error on a failing disk, say: damaged, as far as any reader can tell
        return f"{name} cannot be read ({exn.strerror or exn})"
    if actual != sha256:
        return f"{name} fails its checksum (sha256 {actual[:16]}..., the manifest recorded {sha256[:16]}...)"
    return None


def checksummed_files(manifest: Manifest) -> list[tuple[str, int, str]]:
    """(name, bytes, sha256) of every file the manifest lists: the shards, then the ReaL labels."""
    files = [(s.name, s.bytes, s.sha256) for split in manifest.splits.values() for s in split.shards]
    if manifest.real_labels:
        files.append((manifest.real_labels["file"], manifest.real_labels["bytes"], manifest.real_labels["sha256"]))
    return files


def read_lock(root: Path) -> int | None:
    """A loader's shared lock on the dataset at `root` while it reads it (shards.lock.shared_read_lock: release it
    as the loader closes), so that a prepare --force on this node refuses to replace it under the loader, which had
    kept reading the old shards it had mapped and died, one line, at the first it had not. Refused, one line, where a
    prepare is replacing the dataset now."""
    try:
        return shared_read_lock(Path(root))
    except BlockingIOError:
        record = prepare_writing(Path(root))
        who = f" ({describe(record)})" if record else ""
        raise DatasetNotReady(f"a prepare{who} is replacing the dataset at {root} now. Wait for it to finish, then "
                              "start again (in a job script: run prepare before train, not beside it)") from None


def read_complete_manifest(root: Path) -> Manifest:
    """The manifest, after checking that every shard it lists is present (what `train` calls). A dataset a prepare
    is writing now (its manifest not there yet, or removed by a --force or --verify rebuild) is said so: a training
    started beside it was told to run prepare, which was running."""
    try:
        manifest = read_manifest(root)
    except ManifestUnreadable:
        raise
    except DatasetNotReady:
        if (record := prepare_writing(Path(root))) is not None:
            raise DatasetNotReady(f"no prepared dataset at {root} yet: a prepare ({describe(record)}) is writing it "
                                  "now. Wait for it to finish, then train (in a job script: run prepare before "
                                  "train, not beside it)") from None
        raise
    if denied := first_unreadable(root, manifest):
        raise DatasetNotReady(f"the dataset at {root} cannot be read by this user: {denied}. Ask its owner for read "
                              "access (chmod -R a+rX on its folder; g+rX for a group), or prepare a copy of your own")
    problems = find_damage(root, manifest)
    if problems:
        raise DatasetNotReady(
            f"the dataset at {root} is damaged: {'; '.join(problems[:5])}"
            f"{' ...' if len(problems) > 5 else ''}. Rerun prepare with --verify on this node: it rebuilds "
            "damaged shards."
        )
    return manifest
