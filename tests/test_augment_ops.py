"""train/augment/ops.py against torchvision.transforms.v2, op by op, on photo-like images.

Tolerance: none. Every op equals torchvision's `_apply_image_or_video_transform` bit for bit (torch.equal)
on the CPU, for every magnitude of TrivialAugmentWide's, RandAugment's and AutoAugment's tables with
both signs, both interpolations and fills, on whichever numeric path this CPU takes, and on those other
CPUs take, forced here (`test_the_equality_holds_on_the_numeric_paths_of_other_cpus`). Where torchvision's
float32 arithmetic has an evaluation order or a rounding that a batched rewrite would change, the ops
reproduce that order instead:
- the affine grid: torchvision's own _affine_grid, a (H * W, 3) x (3, 2) bmm whose rounding is the BLAS
  kernel's (MKL's AVX-512 sgemm, on Intel CPUs, fuses y * t1 into x * t0; its AVX2 path, on AMD, does
  not: a grid coordinate then lands on the other side of a half-pixel tie, 1,293 values of ShearY on
  40x29 picked other pixels when the grid was computed elementwise); the matrices come from torchvision's
  own function on the same Python floats (torch's vectorised atan/sin/cos differ from libm in the last
  bit);
- Color, Contrast, Sharpness: `_blend` and adjust_sharpness add with `alpha=`, one fused multiply-add in
  torch's AVX2/AVX512 kernels (two roundings in its default kernels): reproduced, whichever the device
  does, not approximated (otherwise 1 grey level at up to ~40 pixels of an image, mostly grey ones);
- a bilinear fill off the integers (97.5) next to the image: a whole-pixel shift is not a copy there
  (torchvision's mask is 1 - 1e-6, not 1, and 97.5 rounds the other way): such translations take the grid.
Only the CUDA comparison (which runs where there is a GPU) has a tolerance, stated there.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import AutoAugment, RandAugment, TrivialAugmentWide
from torchvision.transforms.v2 import functional as F

from tests.jpegs import photo
from train.augment.ops import OPS, DeviceOps, apply_ops, apply_policy_rounds, erase

REFERENCE = TrivialAugmentWide()  # any _AutoAugmentBase: its _apply_image_or_video_transform is shared
# The ops whose float arithmetic a CPU's kernels may round otherwise: the affine grid's bmm (the geometric
# ops) and the fused multiply-add of the blends. The others are integer, bitwise or single IEEE operations.
PATH_DEPENDENT = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Color", "Contrast", "Sharpness")
# Set in the processes that rerun the equality tests on another CPU's numeric path: the path-dependent ops
FORCED_PATH = os.environ.get("AUGMENT_OPS_NUMERIC_PATH")
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
    if FORCED_PATH:
        cases = {(op, m) for op, m in cases if op >= 0 and OPS[op] in PATH_DEPENDENT}
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
@pytest.mark.slow
@pytest.mark.parametrize("width,height", [(32, 32), (40, 29)])
def test_every_op_and_magnitude_equals_torchvision(width, height, interpolation, fill):
    batch, ops, mags = mixed_batch(width, height, magnitudes(height, width))
    out = apply_ops(batch, ops, mags, interpolation=interpolation, fill=fill)
    assert out.dtype == torch.uint8 and out.shape == batch.shape
    assert_each_equals_torchvision(batch, ops, mags, out, interpolation, fill)


@pytest.mark.slow
@pytest.mark.parametrize("width,height", [(32, 32), (40, 29), (176, 176), (225, 97)])
def test_the_grid_is_torchvisions_own_for_every_geometric_magnitude(width, height):
    """Each sample's grid, bit for bit torchvision's _affine_grid for that sample's matrix alone: the same
    bmm, whichever way this CPU's BLAS rounds it (a batched or elementwise grid rounds otherwise on some)."""
    from torchvision.transforms.v2.functional._geometry import _affine_grid

    from train.augment.ops import _grids, _matrix

    cases = [(op, m) for op, m in magnitudes(height, width) if OPS[op] in ("ShearX", "ShearY", "Rotate")]
    matrices = [_matrix(op, m, width, height) for op, m in cases]
    order = np.random.default_rng(width).permutation(len(cases) * 2) % len(cases)  # each twice, shuffled
    grids = _grids(matrices, order, width, height, torch.device("cpu"))
    for i, k in enumerate(order.tolist()):
        theta = torch.tensor(matrices[k], dtype=torch.float32).reshape(1, 2, 3)  # as affine_image makes it
        assert torch.equal(grids[i:i + 1], _affine_grid(theta, width, height, width, height)), cases[k]


@pytest.mark.slow
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


# The numeric paths of other CPUs, forced on this one: MKL's conditional numerical reproducibility branches
# (the affine grid's bmm: its AVX-512 kernels run on Intel CPUs, AVX2 on AMD, COMPATIBLE on neither by
# default) and ATen's kernels (the colour blends' fused multiply-add: AVX2, AVX-512, none in the default
# ones). Each pairs one of each. A path is forced only on a CPU that has its instructions: ATen takes
# ATEN_CPU_CAPABILITY at its word, and avx512 kernels on a CPU without AVX-512 (an AMD EPYC of family 25
# model 1) die of an illegal instruction (SIGILL, CI at stop 57).
NUMERIC_PATHS = {"mkl-compatible, aten-default": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"},
                 "mkl-avx2, aten-avx2": {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
                 "mkl-avx512, aten-avx512": {"MKL_CBWR": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}}


def cpu_has(capability: str) -> bool:
    """Whether this CPU runs ATen's kernels of a capability (DEFAULT, AVX2, AVX512: ATen's avx512 ones need
    the F, BW, DQ and VL extensions)."""
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    needs = {"DEFAULT": set(), "AVX2": {"avx2", "fma"}, "AVX512": {"avx512f", "avx512bw", "avx512dq", "avx512vl"}}
    return needs[capability] <= flags


@pytest.mark.slow
@pytest.mark.parametrize("path", NUMERIC_PATHS)
def test_the_equality_holds_on_the_numeric_paths_of_other_cpus(path):
    """The equality tests above, again in a process on another numeric path (it must hold on the CPU a
    user's node has, not only on this one), for the ops whose rounding a path can change (PATH_DEPENDENT:
    every magnitude, both sizes, interpolations and fills), their grids, and policy rounds of them."""
    if FORCED_PATH:
        pytest.skip("already on a forced path")
    capability = NUMERIC_PATHS[path]["ATEN_CPU_CAPABILITY"].upper()
    if not cpu_has(capability):
        pytest.skip(f"this CPU has no {capability}: its kernels would die of an illegal instruction here")
    env = {**os.environ, **NUMERIC_PATHS[path], "AUGMENT_OPS_NUMERIC_PATH": path}
    selected = "every_op_and_magnitude or policy_rounds or capability or grid_is_torchvisions or mkl_branch"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-k", selected,
                             __file__], cwd=Path(__file__).parents[1], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_the_forced_capability_is_the_one_torch_runs():
    """Under a forced path (the test above), torch reports the ATen capability it was given where this CPU
    has it: the path is really taken."""
    if not FORCED_PATH:
        pytest.skip("run by test_the_equality_holds_on_the_numeric_paths_of_other_cpus")
    wanted = NUMERIC_PATHS[FORCED_PATH]["ATEN_CPU_CAPABILITY"].upper()
    assert cpu_has(wanted), "forced only where the CPU has it"
    assert torch.backends.cpu.get_cpu_capability() == wanted


def test_the_forced_mkl_branch_rounds_the_grid_as_that_branch_does():
    """Under a forced path (the test above), MKL really takes the branch asked for: its AVX2 and COMPATIBLE
    kernels round the grid as the plain sum (x * t0 + y * t1) + t2, its AVX-512 kernel otherwise (a fused
    multiply-add), on a CPU where MKL runs that kernel."""
    from train.augment.ops import SHEAR_Y, _grids, _matrix

    if not FORCED_PATH:
        pytest.skip("run by test_the_equality_holds_on_the_numeric_paths_of_other_cpus")
    width, height = 40, 29
    matrix = _matrix(SHEAR_Y, -0.2, width, height)
    grid = _grids([matrix], np.zeros(1, dtype=np.int64), width, height, torch.device("cpu"))[0].numpy()
    t = (torch.tensor(matrix).reshape(1, 2, 3).transpose(1, 2) / torch.tensor([0.5 * width, 0.5 * height]))[0].numpy()
    xs = np.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, width, dtype=np.float32)[None, :, None]
    ys = np.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, height, dtype=np.float32)[:, None, None]
    plain = (xs * t[0] + ys * t[1]) + t[2]  # float32 throughout, each operation rounded
    branch = NUMERIC_PATHS[FORCED_PATH]["MKL_CBWR"]
    if branch != "AVX512":
        assert np.array_equal(grid, plain)
    elif np.array_equal(grid, plain):
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        assert " avx512f" not in flags or "GenuineIntel" not in flags, "MKL_CBWR=AVX512 on Intel: the plain sum"
        pytest.skip("MKL does not run its AVX-512 kernel on this CPU: Intel's rounding is checked on Intel CPUs")


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
def test_cuda_equals_torchvision_on_cuda(interpolation, fill):
    """The promise on a GPU is the CPU's: each op equals torchvision's on the same device. (Not against the
    CPU's result: the grid is the device's own bmm, cuBLAS's there and MKL's here, which round a tie
    apart as MKL's AVX-512 and AVX2 kernels do, and CUDA's grid_sample unnormalises ((g + 1) * W - 1) / 2
    where the CPU's computes (g + 1) * (W / 2) - 0.5.) Written without a GPU at hand: issue 41's check
    runs it."""
    batch, ops, mags = mixed_batch(40, 29, magnitudes(29, 40), seed=5)
    batch = batch.cuda()
    out = apply_ops(batch, ops.cuda(), mags.cuda(), interpolation=interpolation, fill=fill)
    assert_each_equals_torchvision(batch, ops, mags, out, interpolation, fill)
    channels_last = batch.contiguous(memory_format=torch.channels_last)
    again = apply_ops(channels_last, ops, mags, interpolation=interpolation, fill=fill)
    assert again.is_contiguous(memory_format=torch.channels_last) and torch.equal(again, out)
