"""Labels, exactly: meta.mat, the ground truth, Kaggle's CSV, and the sorted-wnid class index."""

import io
import re
import tarfile

import pytest

from prepare.labels import (
    GROUND_TRUTH, HF_CLASSES_NAME, META_MAT, Devkit, LabelError, Synset, check_val_labels, class_table,
    devkit_train_count, leaf_synsets, parse_class_list, parse_hf_classes, parse_kaggle_val_solution, parse_meta_mat,
    parse_synset_mapping, parse_train_cls, read_devkit, val_wnids_from_devkit,
)
from prepare.sample import meta_mat


def test_meta_mat_has_the_real_structure_and_ids_not_in_sorted_wnid_order(images):
    synsets = parse_meta_mat(meta_mat(images))
    leaves = leaf_synsets(synsets)
    assert len(leaves) == len(images.classes) and len(synsets) > len(leaves)
    by_id = [s.wnid for s in sorted(leaves, key=lambda s: s.ilsvrc_id)]
    assert by_id != sorted(by_id), "the sample must catch code that takes ILSVRC2012_ID order as class order"
    assert all(s.num_children > 0 for s in synsets if s not in leaves)


def test_ground_truth_ids_go_through_meta_mat():
    # The real devkit: ILSVRC2012_val_00000001 has ILSVRC2012_ID 490, which is n01751748 (sea snake).
    synsets = [Synset(490, "n01751748", "sea snake", 0), Synset(1, "n02119789", "kit fox", 0),
               Synset(1001, "n00015388", "animal", 2)]
    labels = val_wnids_from_devkit(Devkit(synsets, [490, 1]))
    assert labels == {"ILSVRC2012_val_00000001": "n01751748", "ILSVRC2012_val_00000002": "n02119789"}
    classes = class_table(["n02119789", "n01751748"], {})
    assert [(c.index, c.wnid) for c in classes] == [(0, "n01751748"), (1, "n02119789")]


def test_an_internal_synset_is_never_a_label():
    synsets = [Synset(1, "n01751748", "sea snake", 0), Synset(1001, "n00015388", "animal", 1)]
    with pytest.raises(LabelError, match="line 2: ILSVRC2012_ID 1001 is not a leaf"):
        val_wnids_from_devkit(Devkit(synsets, [1, 1001]))


def test_kaggle_csv_first_token_is_the_wnid():
    text = "ImageId,PredictionString\nILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 322 295\n"
    assert parse_kaggle_val_solution(text) == {"ILSVRC2012_val_00008726": "n02119789"}
    with pytest.raises(LabelError, match="header"):
        parse_kaggle_val_solution("a,b\n1,2\n")
    assert parse_synset_mapping("n01440764 tench, Tinca tinca\n") == {"n01440764": "tench, Tinca tinca"}


def test_devkit_without_meta_mat_names_the_file(tmp_path):
    path = tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("ILSVRC2012_devkit_t12/readme.txt")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(LabelError, match="lacks data/meta.mat"):
        read_devkit(path)


def devkit_bytes(images, **replaced: bytes) -> bytes:
    """The sample's devkit (sample.py writes it so), its data/ files replaced where given (meta_mat=...,
    ground_truth=...)."""
    from prepare.sample import ground_truth, tar_bytes

    files = {"meta_mat": ("data/meta.mat", meta_mat(images)),
             "ground_truth": ("data/ILSVRC2012_validation_ground_truth.txt", ground_truth(images).encode())}
    return tar_bytes([(f"ILSVRC2012_devkit_t12/{name}", replaced.get(key, data))
                      for key, (name, data) in files.items()], gz=True)


def refused_in_one_line(path, why: str) -> str:
    with pytest.raises(LabelError) as refusal:
        read_devkit(path)
    message = str(refusal.value)
    assert "\n" not in message and why in message and "Download ILSVRC2012_devkit_t12.tar.gz again" in message
    return message


def test_a_devkit_damaged_in_its_compressed_bytes_is_refused_never_read_into_other_labels(images, tmp_path):
    """tarfile reads a member at its offset and never reaches gzip's checksum: a devkit damaged in transfer
    was read into other val labels without a word (a review: 611 of 6,000 single-bit flips), or crashed
    scipy's reader (a segmentation fault). Inflated whole first: a flip anywhere in its compressed bytes gives
    the same devkit or a LabelError of one line, and the review's case, a ground truth changed under the old
    checksum, is refused."""
    import gzip

    path = tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    good = devkit_bytes(images)
    path.write_bytes(good)
    devkit = read_devkit(path)
    tar = gzip.decompress(good)
    changed = tar.replace(b"\n".join(map(str.encode, map(str, devkit.ground_truth[:2]))),
                          b"\n".join(map(str.encode, map(str, devkit.ground_truth[1::-1]))), 1)
    assert changed != tar
    path.write_bytes(gzip.compress(changed, mtime=0)[:-8] + good[-8:])  # the old CRC-32 and length kept
    refused_in_one_line(path, "CRC check failed")
    refused = 0
    for position in range(10, len(good), 7):  # past gzip's header: the deflated tar and its trailer
        flipped = bytearray(good)
        flipped[position] ^= 1 << position % 8
        path.write_bytes(flipped)
        try:
            assert read_devkit(path) == devkit, position
        except LabelError:
            refused += 1
    assert refused > (len(good) - 10) // 7 * 0.9


@pytest.mark.parametrize("damage, why", [
    ({"meta_mat": b"MATLAB 5.0 MAT-file" + bytes(200)}, "data/meta.mat is not the devkit's table of synsets"),
    ({"meta_mat": b"\0" * 300}, "data/meta.mat is not the devkit's table of synsets"),
    ({"ground_truth": b"1\n2\xff\n"}, "cannot read the devkit"),
    ({"ground_truth": b"1\nx\n"}, "not a list of integers"),
])
def test_a_devkit_whose_files_are_not_what_they_should_be_is_refused_in_one_line(images, tmp_path, damage, why):
    path = tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    path.write_bytes(devkit_bytes(images, **damage))
    refused_in_one_line(path, why)


@pytest.mark.parametrize("content", [b"<html><body>Please log in</body></html>\n", b"", b"\x1f\x8b\x08\0"])
def test_a_devkit_that_is_no_gzipped_tar_is_refused_in_one_line(tmp_path, content):
    """A login page saved under the devkit's name, an empty file, a gzip header cut short: one line (tarfile's
    own message, that tries every compression in turn, spans five)."""
    path = tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    path.write_bytes(content)
    with pytest.raises(LabelError) as refusal:
        read_devkit(path)
    assert "\n" not in str(refusal.value) and "ownload ILSVRC2012_devkit_t12.tar.gz again" in str(refusal.value)


def test_meta_mat_of_imagenets_1000_classes():
    """The internal synsets above 1,000 leaves have more than 255 children (a uint8 overflowed)."""
    from prepare.sample import SampleSpec, sample_images

    images = sample_images(SampleSpec(classes=1000, train_per_class=1, val_per_class=0, max_width=16))
    synsets = parse_meta_mat(meta_mat(images))
    assert len(leaf_synsets(synsets)) == 1000 and max(s.num_children for s in synsets) > 255


def without_train_counts(data: bytes) -> bytes:
    """A meta.mat as `data`, less its num_train_images field (a devkit that does not count the classes' images)."""
    import numpy as np
    import scipy.io

    table = scipy.io.loadmat(io.BytesIO(data))["synsets"]
    names = [name for name in table.dtype.names if name != "num_train_images"]
    stripped = np.empty(table.shape, dtype=[(name, "O") for name in names])
    for name in names:
        stripped[name] = table[name]
    out = io.BytesIO()
    scipy.io.savemat(out, {"synsets": stripped})
    return out.getvalue()


def test_the_devkits_train_counts_declare_the_train_split_and_a_meta_mat_without_them_declares_none(images):
    """The devkit's count of each class's train images is what a train split short of some images is held against
    (an extracted tree with the devkit beside: "the train split lacks 1 of the ... images the devkit's meta.mat
    declares"); read as no count, a partial download prepared without a word."""
    leaves = leaf_synsets(parse_meta_mat(meta_mat(images)))
    assert [s.num_train_images for s in leaves] == [len(images.train) // len(images.classes)] * len(images.classes)
    assert devkit_train_count(Devkit(parse_meta_mat(meta_mat(images)), [])) == len(images.train)
    synsets = parse_meta_mat(without_train_counts(meta_mat(images)))
    assert [s.wnid for s in leaf_synsets(synsets)] == [s.wnid for s in leaves]
    assert devkit_train_count(Devkit(synsets, [])) is None


def test_a_devkit_stored_without_gzip_is_read_and_one_lacking_either_file_names_them(images, tmp_path):
    """The devkit as a plain tar (gunzipped, its name kept) holds the same labels; one with meta.mat and no ground
    truth, or the ground truth and no meta.mat, is refused in one line naming them (not read up to a traceback)."""
    import gzip

    from prepare.sample import ground_truth, tar_bytes

    zipped, plain = tmp_path / "zipped.tar.gz", tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    zipped.write_bytes(devkit_bytes(images))
    plain.write_bytes(gzip.decompress(devkit_bytes(images)))
    assert read_devkit(plain) == read_devkit(zipped)
    for kept, data in ((META_MAT, meta_mat(images)), (GROUND_TRUTH, ground_truth(images).encode())):
        plain.write_bytes(tar_bytes([(f"ILSVRC2012_devkit_t12/{kept}", data)], gz=True))
        with pytest.raises(LabelError, match=f"lacks {META_MAT} or {GROUND_TRUTH}"):
            read_devkit(plain)


@pytest.mark.parametrize("body", ["ILSVRC2012_val_00000001,\n", "ILSVRC2012_val_00000001\n",
                                  "ILSVRC2012_val_00000001,255 142 454 329\n"])
def test_a_kaggle_val_row_without_a_wnid_is_named(body):
    """An empty prediction, a row cut short before it, a box with no wnid first: a LabelError naming the image,
    never a traceback nor a box's number taken for its class."""
    with pytest.raises(LabelError, match="^LOC_val_solution.csv: no wnid for ILSVRC2012_val_00000001$"):
        parse_kaggle_val_solution("ImageId,PredictionString\n" + body)


def test_an_empty_kaggle_val_solution_is_refused_by_its_header():
    with pytest.raises(LabelError, match="expected the header ImageId,PredictionString"):
        parse_kaggle_val_solution("")


def test_kaggles_train_cls_skips_blank_lines_and_names_a_line_off_its_pattern():
    text = "n01440764/n01440764_10026 1\n\n  \nn01443537/n01443537_2 2\n"
    assert parse_train_cls(text, "train_cls.txt") == {"n01440764_10026": "n01440764", "n01443537_2": "n01443537"}
    for line in ("n01440764_10026 1", "tench/n01440764_10026 1", "n01440764/ 1"):
        with pytest.raises(LabelError, match="^train_cls.txt line 2: expected '<wnid>/<image> <number>'"):
            parse_train_cls(f"n01440764/n01440764_1 1\n{line}\n", "train_cls.txt")


def test_val_labels_naming_a_wnid_with_no_train_class_are_refused():
    classes = class_table(["n01443537", "n01440764"], {})
    check_val_labels({"ILSVRC2012_val_00000001": "n01440764"}, classes)
    with pytest.raises(LabelError, match=r"name 1 wnid\(s\) with no train class, e.g. \['n09999999'\]"):
        check_val_labels({"ILSVRC2012_val_00000001": "n01440764", "ILSVRC2012_val_00000002": "n09999999"}, classes)


def test_a_class_table_takes_one_new_wnid_and_its_words_a_line():
    assert parse_class_list("# timm's\n\nn01440764\ttench\nn01443537\tgoldfish\n", "t.txt") == {
        "n01440764": "tench", "n01443537": "goldfish"}
    for bad in ("n01443537 goldfish", "n01443537", "tench\tn01440764", "n01440764\ttench, again"):
        with pytest.raises(LabelError, match="^t.txt line 2: expected 'wnid<TAB>words' with a new wnid"):
            parse_class_list(f"n01440764\ttench\n{bad}\n", "t.txt")


PAIRS = {"n01440764": "tench", "n01443537": "goldfish"}


@pytest.mark.parametrize("literal", [
    'OrderedDict({"n01440764": "tench", "n01443537": "goldfish"})',
    'collections.OrderedDict({"n01440764": "tench", "n01443537": "goldfish"})',
    '{"n01440764": "tench", "n01443537": "goldfish"}',
    'OrderedDict([("n01440764", "tench"), ("n01443537", "goldfish")])',
])
def test_classes_py_is_read_in_each_literal_form_it_may_take(literal):
    """The classes.py of ILSVRC/imagenet-1k: its OrderedDict of a dict literal, or of a list of pairs, or a dict
    literal; other assignments before it are left alone."""
    text = f"import collections\nfrom collections import OrderedDict\nnames.extra = 1\n{HF_CLASSES_NAME} = {literal}\n"
    assert parse_hf_classes(text, "classes.py") == PAIRS


@pytest.mark.parametrize("literal, why", [
    ("OrderedDict()", "is not a literal OrderedDict"),
    ("OrderedDict({})", "is empty"),
    ('{"n01440764": 5}', "holds ('n01440764', 5), not a wnid: words pair"),
    ('{"tench": "n01440764"}', "holds ('tench', 'n01440764'), not a wnid: words pair"),
    ('OrderedDict([("n01440764", "tench", "Tinca tinca")])', "holds ('n01440764', 'tench', 'Tinca tinca'), not a"),
    ('{"n01440764": "tench", "n01440764": "tinca"}', "lists n01440764 twice"),
])
def test_classes_py_that_is_no_table_of_wnid_words_pairs_is_refused_in_one_line(literal, why):
    with pytest.raises(LabelError, match=f"^classes.py: .*{re.escape(why)}"):
        parse_hf_classes(f"{HF_CLASSES_NAME} = {literal}\n", "classes.py")
