"""Kaggle's imagenet-object-localization-challenge.zip read in place: the zip prepares into the bytes of
the tree it extracts to and of the official archives; found as a file, in a folder, or one folder down
inside the zip; damaged zips (truncated, flipped bytes, odd methods, hostile sizes) are one line naming
the zip and member, and random damage anywhere gives an error of the user's kind or the right data,
never another exception."""

from __future__ import annotations

import io
import random
import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from conftest import SHARD_MB, config, tree_bytes
from prepare.builder import prepare
from prepare.sources import detect, open_source
from prepare.sample import KAGGLE_ZIP, kaggle_files, write_kaggle_zip
from prepare.sources.base import SourceError
from prepare.sources.zip_tree import MAX_MEMBER, ZipMember, read_member
from shards.errors import UserError

VAL_MEMBER = "ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_00000007.JPEG"


@pytest.fixture(scope="module")
def kaggle_zip(tmp_path_factory, images) -> Path:
    root = tmp_path_factory.mktemp("kaggle-zip")
    write_kaggle_zip(root, images)
    return root


@pytest.fixture(scope="module")
def zip_prepared(kaggle_zip, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("zip-prepared") / "imagenet"
    prepare(config(kaggle_zip, dest, workers=2))
    return dest


def test_the_zip_prepares_into_the_bytes_of_the_tree_it_extracts_to(kaggle_zip, zip_prepared, sources, tmp_path):
    extracted = tmp_path / "extracted"
    with zipfile.ZipFile(kaggle_zip / KAGGLE_ZIP) as archive:
        archive.extractall(extracted)
    prepare(config(extracted, tmp_path / "tree"))
    assert tree_bytes(zip_prepared) == tree_bytes(tmp_path / "tree")
    prepare(config(sources["kaggle"], tmp_path / "written"))  # the sample's Kaggle tree, written directly
    assert tree_bytes(zip_prepared) == tree_bytes(tmp_path / "written")


def test_with_as_many_shards_the_zip_writes_the_official_archives_shards(kaggle_zip, sources, tmp_path, monkeypatch):
    import prepare.builder as builder

    monkeypatch.setattr(builder, "shard_count", lambda split_bytes, shard_bytes: 4)
    prepare(config(kaggle_zip, tmp_path / "zip"))
    prepare(config(sources["official"], tmp_path / "official"))
    assert tree_bytes(tmp_path / "zip") == tree_bytes(tmp_path / "official") and len(tree_bytes(tmp_path / "zip")) == 8


def test_the_zip_is_found_as_a_file_in_a_folder_or_one_folder_down_inside(kaggle_zip, zip_prepared, images, tmp_path):
    assert detect(kaggle_zip).name == detect(kaggle_zip / KAGGLE_ZIP).name == "kaggle-zip"
    assert [f["path"] for f in detect(kaggle_zip).identity()["files"]] == [KAGGLE_ZIP]
    nested = tmp_path / "nested.zip"
    with zipfile.ZipFile(nested, "w") as archive:  # a zip of the extracted download's folder
        for name, data in kaggle_files(images):
            archive.writestr(f"imagenet-object-localization-challenge/{name}", data)
    prepare(config(nested, tmp_path / "out"))
    assert tree_bytes(tmp_path / "out") == tree_bytes(zip_prepared)


def test_a_zip_of_something_else_is_refused(tmp_path):
    other = tmp_path / "photos.zip"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("a/LOC_synset_mapping.txt", "x")
        archive.writestr("b/LOC_synset_mapping.txt", "x")
    with pytest.raises(SourceError, match="holds no LOC_synset_mapping.txt at its top \\(nor in one folder\\): is it "
                                          "Kaggle's imagenet-object-localization-challenge.zip"):
        open_source(other)


@pytest.mark.slow
def test_two_nodes_share_the_read_of_the_zip_and_write_a_one_node_prepares_bytes(kaggle_zip, tmp_path):
    from test_shared_read import finish, start_nodes

    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(kaggle_zip / KAGGLE_ZIP, dests, workers=2))
    assert [code for code, _ in results] == [0, 0], results
    prepare(config(kaggle_zip / KAGGLE_ZIP, tmp_path / "one", workers=2))
    for dest, (_, log) in zip(dests, results):
        assert tree_bytes(dest) == tree_bytes(tmp_path / "one")
        assert "shared read: 2 of 2 nodes" in log


# ---------------------------------------------------------------- damaged zips: one line naming zip and member

def local_header_offset(path: Path, name: str) -> int:
    with zipfile.ZipFile(path) as archive:
        return archive.getinfo(name).header_offset


def data_offset(path: Path, name: str) -> int:
    at = local_header_offset(path, name)
    data = path.read_bytes()
    name_length, extra_length = struct.unpack_from("<HH", data, at + 26)
    return at + 30 + name_length + extra_length


def flip_member_data(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[data_offset(path, VAL_MEMBER) + 100] ^= 0x55
    path.write_bytes(bytes(data))
    return f"{VAL_MEMBER}: .*(CRC-32|deflate stream)"


def break_local_header(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[local_header_offset(path, VAL_MEMBER)] = 0
    path.write_bytes(bytes(data))
    return f"{VAL_MEMBER}: no local header at byte"


def truncate(path: Path) -> str:
    path.write_bytes(path.read_bytes()[:path.stat().st_size * 2 // 3])
    return "as a zip .*truncated or not a zip"


def central_field(path: Path, name: str, offset: int, fmt: str, value: int) -> None:
    """Overwrite a field of `name`'s central directory record (offset from its signature)."""
    data = bytearray(path.read_bytes())
    encoded = name.encode()
    at = data.rfind(b"PK\x01\x02", 0, data.rfind(encoded))
    struct.pack_into(fmt, data, at + offset, value)
    path.write_bytes(bytes(data))


def unsupported_method(path: Path) -> str:
    central_field(path, VAL_MEMBER, 10, "<H", zipfile.ZIP_BZIP2)
    return f"{VAL_MEMBER} is compressed with zip method 12, which prepare does not read"


def encrypted(path: Path) -> str:
    central_field(path, VAL_MEMBER, 8, "<H", 0x1)
    return f"{VAL_MEMBER} is encrypted"


def huge_size(path: Path) -> str:
    central_field(path, VAL_MEMBER, 20, "<L", 0xFFFFFFF0)  # compressed size: beyond the file
    return f"{VAL_MEMBER}: the zip lists it larger than it is, or beyond its end"


@pytest.mark.parametrize("damage", [flip_member_data, break_local_header, truncate, unsupported_method, encrypted,
                                    huge_size])
def test_a_damaged_zip_stops_prepare_in_one_line_naming_it(kaggle_zip, tmp_path, run_here, damage):
    from prepare.cli import main

    source = Path(shutil.copytree(kaggle_zip, tmp_path / "source"))
    said = damage(source / KAGGLE_ZIP)
    dest = tmp_path / "out"
    result = run_here(main, "--source", source, "--dest", dest, "--shard-size", SHARD_MB, "--workers", 2)
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert str(source / KAGGLE_ZIP) in errors[0] and pytest.importorskip("re").search(said, errors[0]), errors[0]
    assert "Traceback" not in result.stderr
    assert not (dest / "manifest.json").exists() and not (dest / ".prepare-tmp").exists()


@pytest.mark.parametrize("method,packed,size,crc,problem", [
    (zipfile.ZIP_STORED, 5, 5, 0, "do not match the size and CRC-32"),
    (zipfile.ZIP_DEFLATED, 5, 1000, 0, "deflate stream"),
    (zipfile.ZIP_STORED, 10**9, 10**9, 0, "of its 1000000000 bytes are there"),  # read returns what is there
])
def test_a_member_that_does_not_match_its_directory_entry_is_named(tmp_path, method, packed, size, crc, problem):
    path = tmp_path / "one.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.JPEG", b"hello")
    member = ZipMember("a.JPEG", 0, packed, size, method, crc)
    with open(path, "rb") as f, pytest.raises(SourceError, match=f"{path}:a.JPEG: .*{problem}"):
        read_member(f, str(path), member)


def test_members_are_capped_far_below_memory_and_above_any_image():
    assert 100 << 20 < MAX_MEMBER <= 1 << 30


# ---------------------------------------------------------------- random damage: the user's kind of error, or the data

def small_zip(images) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in kaggle_files(images)[:4] + [(VAL_MEMBER, images.val[6][2])]:
            archive.writestr(name, data)
    return buffer.getvalue()


def read_everything(path: Path) -> list[tuple[str, bytes]]:
    from prepare.sources.zip_tree import central_directory

    out = []
    with open(path, "rb") as f:
        for member in central_directory(path):
            out.append((member.name, read_member(f, str(path), member)))
    return out


def test_random_damage_anywhere_is_a_user_error_or_the_right_bytes(images, tmp_path):
    """Seeded: 400 damaged copies of a small zip (bytes flipped, runs zeroed, cut short) each read whole.
    Every outcome is the undamaged bytes or an error of the user's kind (one line saying to download
    again); never another exception, which would be a traceback for the user."""
    original = small_zip(images)
    path = tmp_path / "fuzz.zip"
    path.write_bytes(original)
    truth = dict(read_everything(path))
    rng, outcomes = random.Random(29), {"error": 0, "same": 0}
    for _ in range(400):
        data = bytearray(original)
        kind = rng.randrange(3)
        if kind == 0:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            at = rng.randrange(len(data))
            data[at:at + rng.randrange(1, 64)] = bytes(min(64, len(data) - at))
        else:
            del data[rng.randrange(len(data)):]
        path.write_bytes(bytes(data))
        try:
            read = read_everything(path)
        except UserError as exn:
            assert "\n" not in str(exn)
            outcomes["error"] += 1
            continue
        assert all(truth.get(name) == got for name, got in read)  # CRC-32 checked: never other bytes
        outcomes["same"] += 1
    assert outcomes["error"] > 300 and outcomes["same"] > 0, outcomes  # damage to times or versions reads
