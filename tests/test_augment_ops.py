"""train/augment/ops.py against torchvision.transforms.v2, op by op, on photo-like images.

Tolerance: none. Every op equals torchvision's `_apply_image_or_video_transform` bit for bit (torch.equal)
on the CPU, for every magnitude of TrivialAugmentWide's, RandAugment's and AutoAugment's tables with
both signs, both interpolations and fills. Where torchvision's float32 arithmetic has an evaluation
order or a rounding that a batched rewrite would change, the ops reproduce that order instead:
- the affine grid: torchvision's bmm sums (x * t0 + y * t1) + t2 without a fused multiply-add on the
  CPU; the matrices come from torchvision's own function on the same Python floats (torch's vectorised
  atan/sin/cos differ from libm in the last bit, and a grid coordinate then rounds to the other float32;
  that gave 1 grey level at a few pixels of ShearY on 40x29 before the matrices were made on the host);
- Color, Contrast, Sharpness: `_blend` and adjust_sharpness add with `alpha=`, one fused multiply-add in
  torch's AVX2/AVX512 kernels (two roundings in its default kernels): reproduced, whichever the device
  does, not approximated (otherwise 1 grey level at up to ~40 pixels of an image, mostly grey ones);
- a bilinear fill off the integers (97.5) next to the image: a whole-pixel shift is not a copy there
  (torchvision's mask is 1 - 1e-6, not 1, and 97.5 rounds the other way): such translations take the grid.
Only the CUDA comparison (which runs where there is a GPU) has a tolerance, stated there.
"""

from __future__ import annotations

import random

import pytest
import torch
from torchvision.transforms.v2 import AutoAugment, RandAugment, TrivialAugmentWide
from torchvision.transforms.v2 import functional as F

from tests.jpegs import photo
from train.augment.ops import OPS, DeviceOps, apply_ops, apply_policy_rounds, erase

REFERENCE = TrivialAugmentWide()  # any _AutoAugmentBase: its _apply_image_or_video_transform is shared
SIGNED_EXTRAS = {"Rotate": [90.0, -90.0, 180.0, 270.0, 360.0, -180.0, 0.0]}  # torchvision's rot90 fast paths


def reference(image: torch.Tensor, op: int, magnitude: float, interpolation: str, fill) -> torch.Tensor:
    if op < 0:
        return image
    return REFERENCE._apply_image_or_video_transform(image, OPS[op], magnitude, interpolation=interpolation,
                                                     fill={"others": fill})


def magnitudes(height: int, width: int, every: int = 1) -> list[tuple[int, float]]:
    """(op, magnitude) for every bin (or every `every`-th) of the three policies' tables, both signs."""
    cases = set()
    for policy, bins in ((TrivialAugmentWide, 31), (RandAugment, 31), (AutoAugment, 10)):
        for name, (table, signed) in policy._AUGMENTATION_SPACE.items():
            values = table(bins, height, width)
            values = [0.0] if values is None else [float(v) for v in values[::every]]
            values += SIGNED_EXTRAS.get(name, [])
            for v in values:
                cases.add((OPS.index(name), v))
                if signed:
                    cases.add((OPS.index(name), -v))
    cases |= {(OPS.index("Invert"), 0.0), (-1, 0.0), (OPS.index("Identity"), 0.0)}
    return sorted(cases)


def images(width: int, height: int, count: int) -> list[torch.Tensor]:
    return [F.pil_to_tensor(photo(width, height, seed)) for seed in range(count)]


def mixed_batch(width: int, height: int, cases: list[tuple[int, float]], seed: int = 0):
    """A shuffled batch: sample i is one of 4 photos with cases[perm[i]]."""
    order = list(range(len(cases)))
    random.Random(seed).shuffle(order)
    sources = images(width, height, 4)
    batch = torch.stack([sources[i % 4] for i in range(len(order))])
    ops = torch.tensor([cases[i][0] for i in order])
    mags = torch.tensor([cases[i][1] for i in order], dtype=torch.float64)
    return batch, ops, mags


def assert_each_equals_torchvision(batch, ops, mags, out, interpolation, fill):
    wrong = {}
    for i in range(len(batch)):
        expected = reference(batch[i], int(ops[i]), float(mags[i]), interpolation, fill)
        if not torch.equal(out[i], expected):
            diff = (out[i].int() - expected.int()).abs()
            wrong.setdefault(OPS[int(ops[i])], []).append(
                f"m={float(mags[i])}: {int((diff > 0).sum())} values differ, by up to {int(diff.max())}")
    assert not wrong, wrong


@pytest.mark.parametrize("interpolation,fill", [("nearest", None), ("bilinear", None), ("nearest", 77),
                                                ("bilinear", 0.0), ("bilinear", 97.5)])
@pytest.mark.parametrize("width,height", [(32, 32), (40, 29)])
def test_every_op_and_magnitude_equals_torchvision(width, height, interpolation, fill):
    batch, ops, mags = mixed_batch(width, height, magnitudes(height, width))
    out = apply_ops(batch, ops, mags, interpolation=interpolation, fill=fill)
    assert out.dtype == torch.uint8 and out.shape == batch.shape
    assert_each_equals_torchvision(batch, ops, mags, out, interpolation, fill)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_a_large_image_equals_torchvision(interpolation):
    # every op at 176x176 (a training size), every third bin of each table
    batch, ops, mags = mixed_batch(176, 176, magnitudes(176, 176, every=3), seed=1)
    out = apply_ops(batch, ops, mags, interpolation=interpolation)
    assert_each_equals_torchvision(batch, ops, mags, out, interpolation, None)


def test_a_sample_does_not_depend_on_its_batch():
    cases = magnitudes(29, 40, every=4)
    batch, ops, mags = mixed_batch(40, 29, cases, seed=2)
    together = apply_ops(batch, ops, mags.float())  # float32 magnitudes: the same values
    alone = torch.cat([apply_ops(batch[i:i + 1], ops[i:i + 1], mags[i:i + 1]) for i in range(len(batch))])
    assert torch.equal(together, alone)
    halves = torch.cat([apply_ops(batch[:7], ops[:7], mags[:7]), apply_ops(batch[7:], ops[7:], mags[7:])])
    assert torch.equal(together, halves)


@pytest.mark.parametrize("interpolation,fill", [("nearest", None), ("bilinear", 0.0)])
def test_channels_last_input(interpolation, fill):
    batch, ops, mags = mixed_batch(40, 29, magnitudes(29, 40, every=3), seed=3)
    expected = apply_ops(batch, ops, mags, interpolation=interpolation, fill=fill)
    out = apply_ops(batch.contiguous(memory_format=torch.channels_last), ops, mags, interpolation=interpolation,
                    fill=fill)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, expected)
    strided = torch.cat([batch, batch], dim=3)[..., ::2]  # neither layout: made contiguous first
    assert torch.equal(apply_ops(strided, ops, mags), apply_ops(strided.contiguous(), ops, mags))


def test_the_input_is_left_alone_and_an_empty_batch_works():
    batch, ops, mags = mixed_batch(32, 32, magnitudes(32, 32, every=10))
    before = batch.clone()
    apply_ops(batch, ops, mags)
    assert torch.equal(batch, before)
    empty = apply_ops(batch[:0], ops[:0], mags[:0])
    assert empty.shape == (0, 3, 32, 32)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_policy_rounds_apply_in_order_and_minus_one_skips(interpolation):
    cases = magnitudes(29, 40, every=5)
    rng = random.Random(4)
    rounds = [[rng.choice(cases) for _ in range(3)] for _ in range(60)]
    for i in range(0, 60, 7):  # skipped rounds, also between two ops
        rounds[i][i % 3] = (-1, 0.0)
    sources = images(40, 29, 3)
    batch = torch.stack([sources[i % 3] for i in range(60)])
    ops = torch.tensor([[op for op, _ in r] for r in rounds])
    mags = torch.tensor([[m for _, m in r] for r in rounds], dtype=torch.float64)
    out = apply_policy_rounds(batch, ops, mags, interpolation=interpolation)
    for i, r in enumerate(rounds):
        expected = batch[i]
        for op, m in r:
            expected = reference(expected, op, m, interpolation, None)
        assert torch.equal(out[i], expected), (i, r)
    # not commutative: the order is the draws' order
    swapped = apply_policy_rounds(batch, ops.flip(1), mags.flip(1), interpolation=interpolation)
    assert not torch.equal(out, swapped)


@pytest.mark.parametrize("value", [0.0, -1.5])
def test_erase_equals_torchvision(value):
    batch = torch.stack([F.pil_to_tensor(photo(40, 29, s)) for s in range(5)]).float().div_(255).sub_(0.5)
    boxes = torch.tensor([[0, 0, 29, 40], [3, 5, 10, 7], [0, 0, 0, 0], [28, 39, 1, 1], [10, 0, 0, 12]])
    out = erase(batch.clone(), boxes, value)
    for i, (top, left, h, w) in enumerate(boxes.tolist()):
        expected = batch[i] if h == 0 or w == 0 else F.erase(batch[i], top, left, h, w, v=torch.tensor(value))
        assert torch.equal(out[i], expected)
    assert torch.equal(out[2], batch[2]) and torch.equal(out[4], batch[4])  # height 0 (or width 0): untouched
    same = batch.clone()
    assert erase(same, boxes, value) is same  # in place
    channels_last = batch.contiguous(memory_format=torch.channels_last)
    assert torch.equal(erase(channels_last, boxes, value), out)


def test_the_device_stage_applies_the_rounds_with_its_interpolation_and_erases():
    """DeviceOps, what DeviceBatches runs (Augment.on_device): the same calls, its interpolation bound."""
    batch = torch.stack([F.pil_to_tensor(photo(40, 29, s)) for s in range(4)])
    ops = torch.tensor([[OPS.index("ShearX"), OPS.index("Rotate")]] * 4)
    mags = torch.tensor([[0.3, 30.0], [-0.2, -15.0], [0.1, 5.0], [0.0, 0.0]], dtype=torch.float64)
    for interpolation in ("nearest", "bilinear"):
        expected = apply_policy_rounds(batch, ops, mags, interpolation=interpolation)
        assert torch.equal(DeviceOps(interpolation).apply_policy(batch, ops, mags), expected)
    images, boxes = torch.zeros((4, 3, 40, 29)), torch.tensor([[0, 0, 5, 5]] * 4)
    assert torch.equal(DeviceOps().erase(images.clone() + 1, boxes), erase(images + 1, boxes))


def test_bad_arguments_raise_value_error():
    batch, ops, mags = mixed_batch(32, 32, [(1, 0.3), (6, 0.2)])
    cases = [
        (lambda: apply_ops(batch.float(), ops, mags), "uint8"),
        (lambda: apply_ops(batch[:, :1], ops, mags), r"\(N, 3, H, W\)"),
        (lambda: apply_ops(batch[0], ops, mags), r"\(N, 3, H, W\)"),
        (lambda: apply_ops(batch.numpy(), ops, mags), "uint8"),
        (lambda: apply_ops(batch, ops.float(), mags), "integer"),
        (lambda: apply_ops(batch, ops[:, None], mags), "integer"),
        (lambda: apply_ops(batch, ops, mags.int()), "float32 or float64"),
        (lambda: apply_ops(batch, ops[:1], mags[:1]), "length 2"),
        (lambda: apply_ops(batch, ops, mags[:1]), "length 2"),
        (lambda: apply_ops(batch, torch.tensor([1, 15]), mags), r"\[-1, 14\]"),
        (lambda: apply_ops(batch, torch.tensor([-2, 1]), mags), r"\[-1, 14\]"),
        (lambda: apply_ops(batch, ops, mags, interpolation="bicubic"), "interpolation"),
        (lambda: apply_ops(batch, ops, mags, fill=300), "fill"),
        (lambda: apply_ops(batch, ops, mags, fill=-1), "fill"),
        (lambda: apply_ops(batch, ops, mags, fill=[1, 2, 3]), "fill"),
        (lambda: apply_ops(batch, torch.tensor([10, 1]), torch.tensor([9.0, 0.0])), "Posterize"),
        (lambda: apply_ops(batch, torch.tensor([11, 1]), torch.tensor([1.5, 0.0])), "Solarize"),
        (lambda: apply_ops(batch, torch.tensor([6, 1]), torch.tensor([-1.5, 0.0])), "Brightness"),
        (lambda: apply_ops(batch, torch.tensor([5, 1]), torch.tensor([float("nan"), 0.0])), "Rotate"),
        (lambda: apply_policy_rounds(batch, ops, mags), r"\(N, K\)"),
        (lambda: apply_policy_rounds(batch, ops[:, None], mags[:, None], interpolation="area"), "interpolation"),
        (lambda: apply_policy_rounds(batch, ops[:, None], mags[:, None], fil=0), "keyword"),
        (lambda: erase(batch, torch.zeros(2, 4, dtype=torch.int64)), "float"),
        (lambda: erase(batch.float(), torch.zeros(2, 3, dtype=torch.int64)), r"\(2, 4\)"),
        (lambda: erase(batch.float(), torch.zeros(2, 4)), "integer"),
        (lambda: erase(batch.float(), torch.tensor([[0, 0, 33, 4], [0, 0, 0, 0]])), "not inside"),
        (lambda: erase(batch.float(), torch.tensor([[-1, 0, 3, 4], [0, 0, 0, 0]])), "not inside"),
        (lambda: erase(batch.float(), torch.zeros(2, 4, dtype=torch.int64), value="random"), "value"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("interpolation,fill", [("nearest", None), ("bilinear", None), ("bilinear", 97.5)])
def test_cuda_equals_cpu(interpolation, fill):
    """The same code on CUDA. Exact for every op but the grid-sampled ones (and for those too where the
    sample only moves whole pixels): the grid is the same float32 arithmetic on both, but CUDA's
    grid_sample unnormalises ((g + 1) * W - 1) / 2 where the CPU's computes (g + 1) * (W / 2) - 0.5, so
    a coordinate that lands within a rounding of a pixel boundary can take the other pixel (nearest:
    any difference, at most 0.1% of an image's values) or other weights (bilinear: at most 1 grey level,
    at most 0.1% of the values). The colour ops are exact when both devices fuse `add_(alpha=)` alike
    (their tables follow the device's kernel, so each equals torchvision on its own device)."""
    from train.augment.ops import _fuses

    batch, ops, mags = mixed_batch(40, 29, magnitudes(29, 40), seed=5)
    cpu = apply_ops(batch, ops, mags, interpolation=interpolation, fill=fill)
    cuda = apply_ops(batch.cuda(), ops.cuda(), mags.cuda(), interpolation=interpolation, fill=fill).cpu()
    same_blend = _fuses(torch.device("cuda")) == _fuses(torch.device("cpu"))
    for i in range(len(batch)):
        op = OPS[int(ops[i])] if ops[i] >= 0 else "none"
        diff = (cpu[i].int() - cuda[i].int()).abs()
        if op in ("ShearX", "ShearY", "Rotate") or (op.startswith("Translate") and fill == 97.5):
            assert (diff > 0).float().mean() <= 0.001, (op, float(mags[i]))
            if interpolation == "bilinear":
                assert diff.max() <= 1, (op, float(mags[i]))
        elif op not in ("Color", "Contrast", "Sharpness") or same_blend:
            assert torch.equal(cpu[i], cuda[i]), (op, float(mags[i]))
    channels_last = batch.cuda().contiguous(memory_format=torch.channels_last)
    out = apply_ops(channels_last, ops, mags, interpolation=interpolation, fill=fill)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out.cpu(), cuda)
