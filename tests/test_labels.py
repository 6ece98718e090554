"""Labels, exactly: meta.mat, the ground truth, Kaggle's CSV, and the sorted-wnid class index."""

import io
import tarfile

import pytest

from prepare.labels import (
    Devkit, LabelError, Synset, class_table, leaf_synsets, parse_kaggle_val_solution, parse_meta_mat,
    parse_synset_mapping, read_devkit, val_wnids_from_devkit,
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


def test_meta_mat_of_imagenets_1000_classes():
    """The internal synsets above 1,000 leaves have more than 255 children (a uint8 overflowed)."""
    from prepare.sample import SampleSpec, sample_images

    images = sample_images(SampleSpec(classes=1000, train_per_class=1, val_per_class=0, max_width=16))
    synsets = parse_meta_mat(meta_mat(images))
    assert len(leaf_synsets(synsets)) == 1000 and max(s.num_children for s in synsets) > 255
