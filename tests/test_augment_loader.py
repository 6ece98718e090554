"""The augmentation through the public loader (the stages train/augment/ hands the data path): per-sample
policies and random erasing applied to exactly the crops a loader without them gives, repeated
augmentation, resolution schedules, validation's own sizes, and resume bit-identical with all of it on
(MixUp/CutMix: tests/test_augment_mixing.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from conftest import shard_set
from shards.manifest import read_manifest
from shards.plan import steps_per_epoch
from train import Augment, ImageNetLoader, ResolutionRamp
from train.augment.ops import OPS
from train.device_batches import IMAGENET_MEAN, IMAGENET_STD
from train.errors import ResumeError
from train.loader import Loader, PlanArgs

SIZE = 32
EVERYTHING = Augment(policy="trivialaugment", erasing=0.5, mixup=0.2, cutmix=1.0)


def loader(prepared, split="train", **options) -> ImageNetLoader:
    options = {"batch_size": 4, "image_size": SIZE, "device": "cpu", "workers": 2, **options}
    return ImageNetLoader(prepared, split, **options)


def records(batches) -> list[tuple]:
    return [(b.images.clone(), (b.labels if b.targets is None else b.targets).clone(), b.key_hashes.tolist())
            for b in batches]


def same(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) and x[2] == y[2]
                                    for x, y in zip(a, b))


def normalised(images: torch.Tensor) -> torch.Tensor:
    """uint8 NCHW -> what the loader yields (float32, ImageNet-normalised)."""
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255
    return (images.float() - mean) / std


def plain_uint8(prepared, epoch: int, augment: Augment, batches: int) -> list:
    """The uint8 NHWC batches of the internal Loader (before the device), with their draws."""
    shards = shard_set(prepared)
    args = PlanArgs(split="train", epoch=epoch, seed=0, world_size=1, rank=0, batch_size=4, shuffle_buffer=1000,
                    size=SIZE, draws=augment.draws)
    with Loader({"train": shards}, batch_size=4, image_size=SIZE, threads=2) as inner:
        out = []
        for batch in inner.epoch(args):
            out.append(batch._replace(images=batch.images.clone()))
            if len(out) == batches:
                return out
    return out


@pytest.mark.parametrize("policy", ["trivialaugment", "randaugment", "autoaugment"])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_a_policy_changes_no_crop_and_applies_torchvisions_op_with_the_draws_it_records(prepared, policy,
                                                                                     interpolation):
    """The batch without the policy is the reference: torchvision's own op on each of its samples,
    with the op and magnitude the augmented batch records, gives the augmented batch's pixels."""
    augment = Augment(policy=policy, policy_interpolation=interpolation)
    reference = plain_uint8(prepared, 1, Augment(), batches=6)
    with loader(prepared, augment=augment) as data:
        data.set_epoch(1)
        augmented = [b for _, b in zip(range(6), data.batches())]
    transform, std = v2.TrivialAugmentWide(), torch.tensor(IMAGENET_STD).view(3, 1, 1) * 255
    applied = 0
    for plain, batch in zip(reference, augmented):
        assert plain.key_hashes.tolist() == batch.key_hashes.tolist()
        images = plain.images.permute(0, 3, 1, 2)
        for i in range(len(images)):
            expected = images[i]
            for op, magnitude in zip(batch.ops[i].tolist(), batch.magnitudes[i].tolist()):
                if op >= 0:
                    expected = transform._apply_image_or_video_transform(expected, OPS[op], magnitude, interpolation,
                                                                         {v2._utils.is_pure_tensor: None})
                    applied += 1
            levels = (batch.images[i] - normalised(expected[None])[0]).abs() * std  # in grey levels
            # apply_ops' own tolerances per op (tests/test_augment_ops.py): a level at most, on few pixels
            assert levels.max() < 1.5 or (levels > 1.01).float().mean() < 0.002, (OPS[op], magnitude)
    assert applied >= 20


def test_random_erasing_zeroes_its_box_of_the_normalised_image_and_nothing_else(prepared):
    with loader(prepared) as data:
        data.set_epoch(2)
        plain = [b.images.clone() for _, b in zip(range(5), data.batches())]
    with loader(prepared, augment=Augment(erasing=0.7)) as data:
        data.set_epoch(2)
        erased = [b for _, b in zip(range(5), data.batches())]
    boxes = 0
    for before, batch in zip(plain, erased):
        for i, (top, left, height, width) in enumerate(batch.erase.tolist()):
            inside = torch.zeros((SIZE, SIZE), dtype=torch.bool)
            inside[top:top + height, left:left + width] = True
            assert (batch.images[i][:, inside] == 0).all()
            assert torch.equal(batch.images[i][:, ~inside], before[i][:, ~inside])
            boxes += height > 0
    assert 5 <= boxes < 20


@pytest.mark.parametrize("world", [1, 2, 4])
def test_repeats_give_each_rank_the_steps_of_an_epoch_without_them_and_each_sample_r_readings(prepared, world):
    train = read_manifest(prepared).splits["train"].samples
    hashes, readings = [], []
    for rank in range(world):
        with loader(prepared, repeats=4, rank=rank, world_size=world, augment=Augment(policy="trivialaugment")) as data:
            data.set_epoch(3)
            batches = list(data.batches())
            assert len(batches) == len(data) == steps_per_epoch(train, world, 4)
            hashes += [h for b in batches for h in b.key_hashes.tolist()]
            readings += [r for b in batches for r in b.repeats.tolist()]
            for b in batches:  # each reading its own augmentation: same key, other draws
                for h in set(b.key_hashes.tolist()):
                    rows = [i for i, k in enumerate(b.key_hashes.tolist()) if k == h]
                    if len(rows) > 1:
                        assert len({(b.ops[i].item(), b.magnitudes[i].item()) for i in rows}) > 1 or \
                            not torch.equal(b.images[rows[0]], b.images[rows[1]])
    counts = np.unique(hashes, return_counts=True)[1]
    assert sorted(counts)[1:] == [4] * (len(counts) - 1)
    assert sorted(set(readings)) == [0, 1, 2, 3]


def test_a_resolution_ramp_changes_the_size_between_epochs_and_validation_keeps_its_own(prepared):
    ramp = ResolutionRamp(32, 64, start_epoch=1, end_epoch=3)
    with loader(prepared, image_size=ramp, val_crop=48, val_resize=56) as data, data.with_split("val") as val:
        sizes = []
        for epoch in range(5):
            data.set_epoch(epoch)
            sizes.append(next(iter(data))[0].shape[-1])
        assert sizes == [ramp.size(e) for e in range(5)] == [32, 32, 64, 64, 64]
        val_images = [images for images, _ in val]
        assert {tuple(x.shape[1:]) for x in val_images} == {(3, 48, 48)}
        assert sum(len(x) for x in val_images) == read_manifest(prepared).splits["val"].samples


def test_a_mid_epoch_state_of_another_size_or_augmentation_is_refused(prepared):
    with loader(prepared, augment=Augment(policy="trivialaugment")) as data:
        batches = data.batches()
        next(batches)
        state = data.state_dict()
        batches.close()
    for options, name in (({"image_size": 48}, "size"), ({}, "augment"),
                          ({"augment": Augment(policy="trivialaugment"), "repeats": 2}, "repeats")):
        with loader(prepared, **options) as other, pytest.raises(ResumeError, match=name):
            other.load_state_dict(state)


def epoch_records(prepared, start_state=None, **options) -> tuple[list, dict]:
    with loader(prepared, **options) as data:
        if start_state is not None:
            data.load_state_dict(start_state)
        data.set_epoch(1)
        batches = data.batches()
        taken = records(next(batches) for _ in range(2)) if start_state is None else []
        state = data.state_dict()
        return taken + records(batches), state


@pytest.mark.parametrize("workers", [1, 3])
def test_resume_is_bit_identical_with_every_option_on(prepared, workers):
    options = dict(augment=EVERYTHING, repeats=2, image_size=ResolutionRamp(32, 48, 0, 2, step=16))
    whole, _ = epoch_records(prepared, workers=2, **options)
    with loader(prepared, workers=2, **options) as data:
        data.set_epoch(1)
        batches = data.batches()
        head = records(next(batches) for _ in range(2))
        state = data.state_dict()
        batches.close()
    rest, _ = epoch_records(prepared, start_state=state, workers=workers, **options)
    assert same(head + rest, whole)


def test_resume_is_bit_identical_with_every_option_on_two_ranks(prepared):
    options = dict(augment=EVERYTHING, repeats=2, workers=1)
    for rank in (0, 1):
        with loader(prepared, rank=rank, world_size=2, **options) as data:
            data.set_epoch(2)
            whole = records(data.batches())
        with loader(prepared, rank=rank, world_size=2, **options) as data:
            data.set_epoch(2)
            batches = data.batches()
            head = records(next(batches) for _ in range(3))
            state = data.state_dict()
            batches.close()
        with loader(prepared, rank=rank, world_size=2, **{**options, "workers": 3}) as data:
            data.load_state_dict(state)
            data.set_epoch(2)
            assert same(head + records(data.batches()), whole)


def test_the_augmented_batches_are_the_same_for_any_prefetch_depth(prepared):
    runs = []
    for prefetch in (1, 4):
        with loader(prepared, augment=EVERYTHING, repeats=2, prefetch=prefetch) as data:
            data.set_epoch(1)
            runs.append(records(data.batches()))
    assert same(*runs)
