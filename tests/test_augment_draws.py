"""Which augmentation each sample draws (train/augment/draws.py): torchvision's policies' distributions,
recorded from torchvision's own classes, RandomErasing's make_params line for line, draws that are a
pure function of (seed, epoch, key, repeat); and Augment, the value of every augmentation choice: its
checks, its defaults, its plain data."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from train.augment.choices import AUGMENT_FIELDS, Augment
from train.augment.draws import ERASE_RATIO, ERASE_SCALE, ERASE_TRIES, OPS, erasing_boxes, policy_draws
from train.errors import ConfigError
from train.transforms import repeat_keys, uniforms

KEYS = np.arange(1, 12001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
SIZE = (176, 150)  # height, width: the translations of RandAugment and AutoAugment scale with them


def torchvisions_draws(transform: v2.Transform, calls: int) -> Counter:
    """(op names and magnitudes, in order) of each call of torchvision's own policy, recorded by
    replacing the op it applies with a recorder."""
    seen: Counter = Counter()
    applied: list = []

    def record(image, transform_id, magnitude, interpolation, fill):
        applied.append((transform_id, round(magnitude, 5)))
        return image

    transform._apply_image_or_video_transform = record
    image = torch.zeros((3, *SIZE), dtype=torch.uint8)
    torch.manual_seed(0)
    for _ in range(calls):
        applied.clear()
        transform(image)
        seen[tuple(applied)] += 1
    return seen


def our_draws(augment: Augment, keys=KEYS) -> Counter:
    ops, magnitudes = policy_draws(keys, 5, 2, augment, *SIZE)
    seen: Counter = Counter()
    for row_ops, row_magnitudes in zip(ops.tolist(), magnitudes.tolist()):
        seen[tuple((OPS[o], round(m, 5)) for o, m in zip(row_ops, row_magnitudes) if o >= 0)] += 1
    return seen


@pytest.mark.parametrize("augment, transform", [
    (Augment(policy="trivialaugment"), lambda: v2.TrivialAugmentWide()),
    (Augment(policy="randaugment", num_ops=1, magnitude=9), lambda: v2.RandAugment(num_ops=1, magnitude=9)),
    (Augment(policy="randaugment", num_ops=1, magnitude=27), lambda: v2.RandAugment(num_ops=1, magnitude=27)),
    (Augment(policy="autoaugment"), lambda: v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET)),
], ids=["trivialaugment", "randaugment-m9", "randaugment-m27", "autoaugment"])
def test_ops_and_magnitudes_have_the_distribution_of_torchvisions_own_policy(augment, transform):
    """A two-sample chi-square over every (ops, magnitudes) outcome: ours from 12,000 keys, torchvision's
    from 12,000 calls of its class. Every outcome we draw is one torchvision draws, and the other way
    round for every outcome frequent enough to be seen in both."""
    import scipy.stats  # (half a second: imported by the tests that use it, not by every collection)

    ours, theirs = our_draws(augment), torchvisions_draws(transform(), len(KEYS))
    outcomes = sorted(set(ours) | set(theirs))
    common = [o for o in outcomes if ours[o] + theirs[o] >= 20]
    assert len(common) >= 10
    table = np.array([[ours[o] for o in common], [theirs[o] for o in common]])
    assert scipy.stats.chi2_contingency(table).pvalue > 1e-4
    rare = [o for o in outcomes if o not in common]
    assert sum(ours[o] + theirs[o] for o in rare) < 0.02 * 2 * len(KEYS)
    assert {op for outcome in ours for op, _ in outcome} <= set(transform()._AUGMENTATION_SPACE)


def test_randaugment_applies_num_ops_ops_in_order():
    import scipy.stats

    ops, magnitudes = policy_draws(KEYS[:2000], 0, 0, Augment(policy="randaugment", num_ops=3), *SIZE)
    assert ops.shape == magnitudes.shape == (2000, 3) and (ops >= 0).all()
    for r in range(3):  # each round uniform over RandAugment's 14 ops
        counts = np.bincount(ops[:, r], minlength=len(OPS))[[OPS.index(n) for n in v2.RandAugment._AUGMENTATION_SPACE]]
        assert scipy.stats.chisquare(counts).pvalue > 1e-4


def test_a_samples_draws_depend_on_seed_epoch_key_and_repeat_only():
    augment = Augment(policy="trivialaugment")
    ops, magnitudes = policy_draws(KEYS[:50], 1, 3, augment, 64, 64)
    alone = policy_draws(KEYS[7:8], 1, 3, augment, 64, 64)
    assert alone[0][0] == ops[7] and alone[1][0] == magnitudes[7]
    reversed_ = policy_draws(KEYS[:50][::-1].copy(), 1, 3, augment, 64, 64)
    assert np.array_equal(reversed_[0][::-1], ops)
    assert not np.array_equal(policy_draws(KEYS[:50], 1, 4, augment, 64, 64)[0], ops)  # another epoch
    assert not np.array_equal(policy_draws(KEYS[:50], 2, 3, augment, 64, 64)[0], ops)  # another seed
    keys = repeat_keys(KEYS[:50], np.arange(50) % 4)
    assert np.array_equal(keys[::4], KEYS[:50:4]) and not np.isin(keys[1::4], KEYS).any()


def test_the_policys_stream_is_not_the_crops():
    """Turning a policy on must not change a sample's crop: the streams are distinct."""
    crops_u = uniforms(KEYS[:100], 0, 0, 4)
    assert not np.array_equal(uniforms(KEYS[:100], 0, 0, 4, "policy"), crops_u)
    assert not np.array_equal(uniforms(KEYS[:100], 0, 0, 4, "erasing"), crops_u)


def make_params_reference(height: int, width: int, p: float, u: np.ndarray) -> tuple[int, int, int, int] | None:
    """torchvision v2 RandomErasing's forward (the p test) and make_params, line for line, with its
    random draws replaced by u; (i, j, h, w), or None where nothing is erased."""
    if u[0] >= p:
        return None
    area = height * width
    log_ratio = (math.log(ERASE_RATIO[0]), math.log(ERASE_RATIO[1]))
    for attempt in range(ERASE_TRIES):
        erase_area = area * (ERASE_SCALE[0] + (ERASE_SCALE[1] - ERASE_SCALE[0]) * u[1 + attempt])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[1 + ERASE_TRIES + attempt])
        h = int(round(math.sqrt(erase_area * aspect_ratio)))
        w = int(round(math.sqrt(erase_area / aspect_ratio)))
        if not (h < height and w < width):
            continue
        i = int(u[-2] * (height - h + 1))
        j = int(u[-1] * (width - w + 1))
        return i, j, h, w
    return None


@pytest.mark.parametrize("height, width", [(224, 224), (176, 176), (40, 29), (8, 8)])
@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_erasing_boxes_are_random_erasings_make_params(height, width, p):
    boxes = erasing_boxes(KEYS[:3000], 3, 1, p, height, width)
    u = uniforms(KEYS[:3000], 3, 1, 3 + 2 * ERASE_TRIES, "erasing")
    for box, draws in zip(boxes.tolist(), u):
        expected = make_params_reference(height, width, p, draws)
        assert box == (list(expected) if expected else [0, 0, 0, 0])
    if height >= 40:
        assert abs((boxes[:, 2] > 0).mean() - p) < 0.05


RANDAUGMENT = {"policy": "randaugment"}


@pytest.mark.parametrize("options, message", [
    ({"policy": "augmix"}, "policy must be one of"), ({"policy_interpolation": "bicubic"}, "policy_interpolation"),
    ({**RANDAUGMENT, "num_ops": 0}, "num_ops must be at least 1"),
    ({**RANDAUGMENT, "magnitude": 31}, r"magnitude must be below the policy's 31 magnitude bins, not 31"),
    ({**RANDAUGMENT, "magnitude": 9, "num_magnitude_bins": 9}, r"below the policy's 9 magnitude bins"),
    ({"policy": "trivialaugment", "num_magnitude_bins": 1}, "num_magnitude_bins must be at least 2"),
    ({"policy": "trivialaugment", "num_magnitude_bins": 10 ** 9}, "num_magnitude_bins must be at most 10000"),
    ({**RANDAUGMENT, "num_ops": 10 ** 6}, "num_ops must be at most 100"),
    ({"erasing": 1.5}, "erasing must be at most 1"), ({"erasing": -0.1}, "erasing must be at least 0"),
    ({"mixup": -1}, "mixup .* must be at least 0"), ({"cutmix": float("nan")}, "cutmix .* finite"),
    ({"mixup": float("inf")}, "mixup .* finite"),
    # torch's float32 Beta: a tiny alpha failed mid-run (or drew 0.5 exactly), a huge one drew about 0, not 0.5
    ({"mixup": 1e-308}, r"mixup must be 0 \(off\) or at least 0.01"), ({"cutmix": 0.001}, "cutmix must be 0 .off."),
    ({"cutmix": 1e308}, r"cutmix \(an alpha, 0: off\) must be at most 3.4e\+38"),
    ({"erasing": np.float64("nan")}, "erasing must be a finite"),
])
def test_an_augmentation_that_cannot_work_is_refused_by_name(options, message):
    with pytest.raises(ConfigError, match=message):
        Augment(**options)


# ---------------------------------------------------------------- every number a number, every option used

@pytest.mark.parametrize("name", ["erasing", "mixup", "cutmix"])
@pytest.mark.parametrize("value", [True, False, np.bool_(True), torch.tensor(True), "0.1", None, [0.1],
                                   torch.tensor([0.1]), 1j])
def test_a_probability_or_alpha_that_is_no_number_is_refused(name, value):
    """erasing=True was once a probability of 1: a bool is a mistake, not a number."""
    with pytest.raises(ConfigError, match=f"augment {name}.* must be a number, not"):
        Augment(**{name: value})


@pytest.mark.parametrize("name", ["num_ops", "magnitude", "num_magnitude_bins"])
@pytest.mark.parametrize("value", [True, 2.0, np.float32(2), torch.tensor(2.0), torch.tensor(True), "2"])
def test_a_policy_option_that_is_no_whole_number_is_refused(name, value):
    with pytest.raises(ConfigError, match=f"augment {name} must be a whole number"):
        Augment(policy="randaugment", **{name: value})


@pytest.mark.parametrize("kind", [int, np.int64, np.int32, torch.tensor, lambda v: np.array(v)])
def test_whole_numbers_of_any_kind_are_stored_as_plain_ints(kind):
    augment = Augment(policy="randaugment", num_ops=kind(3), magnitude=kind(5), num_magnitude_bins=kind(11))
    assert augment == Augment(policy="randaugment", num_ops=3, magnitude=5, num_magnitude_bins=11)
    assert all(type(getattr(augment, name)) is int for name in ("num_ops", "magnitude", "num_magnitude_bins"))


@pytest.mark.parametrize("kind", [float, np.float64, np.float32, torch.tensor, lambda v: torch.tensor(v).double(),
                                  lambda v: np.array(v)])
def test_real_numbers_of_any_kind_are_stored_as_the_plain_float_they_equal(kind):
    augment = Augment(erasing=kind(0.25), mixup=kind(0.5), cutmix=kind(1.0))  # exact in float32 too
    assert augment == Augment(erasing=0.25, mixup=0.5, cutmix=1.0)
    assert all(type(getattr(augment, name)) is float for name in ("erasing", "mixup", "cutmix"))
    assert type(Augment(erasing=1).erasing) is float and type(Augment(mixup=np.int64(1)).mixup) is float


@pytest.mark.parametrize("policy, given", [
    (None, {"num_ops": 2}), (None, {"magnitude": 9}), (None, {"num_magnitude_bins": 31}),
    ("trivialaugment", {"num_ops": 2}), ("trivialaugment", {"magnitude": 9}),
    ("autoaugment", {"num_ops": 2}), ("autoaugment", {"magnitude": 9}), ("autoaugment", {"num_magnitude_bins": 31}),
])
def test_an_option_the_policy_does_not_take_is_refused_not_ignored(policy, given):
    """Even at the value the option had by default before: a given value would be ignored."""
    name = next(iter(given))
    with pytest.raises(ConfigError, match=f"augment {name} would be ignored by policy {policy!r}"):
        Augment(policy=policy, **given)


def test_the_options_default_to_what_the_policys_torchvision_class_takes():
    assert (Augment().num_ops, Augment().magnitude, Augment().num_magnitude_bins) == (None, None, None)
    options = ("num_ops", "magnitude", "num_magnitude_bins")
    assert [Augment(policy="randaugment").option(n) for n in options] == [2, 9, 31]
    assert [Augment(policy="trivialaugment").option(n) for n in options] == [None, None, 31]
    assert [Augment(policy="autoaugment").option(n) for n in options] == [None, None, None]
    assert Augment(policy="randaugment", magnitude=3).effective() == {
        **Augment(policy="randaugment").to_dict(), "num_ops": 2, "magnitude": 3, "num_magnitude_bins": 31}


def test_the_policies_defaults_table_is_the_installed_torchvisions_signatures():
    """Augment imports no torch (train/augment/choices.py): its table of the policies' defaults is held
    to torchvision's classes here, and Augment is built without importing torch."""
    import inspect
    import subprocess
    import sys

    from train.augment.choices import POLICY_DEFAULTS, POLICY_OPTIONS
    from train.augment.draws import POLICY_CLASSES

    for policy, cls in POLICY_CLASSES.items():
        parameters = inspect.signature(cls).parameters
        assert POLICY_DEFAULTS[policy] == {name: parameters[name].default for name in POLICY_OPTIONS
                                           if name in parameters}, policy
    code = ("import sys; from train.augment.choices import Augment; Augment(policy='randaugment', magnitude=5); "
            "print('torch' in sys.modules or 'numpy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize("default, explicit", [
    (Augment(policy="randaugment"), Augment(policy="randaugment", num_ops=2, magnitude=9, num_magnitude_bins=31)),
    (Augment(policy="trivialaugment"), Augment(policy="trivialaugment", num_magnitude_bins=31)),
])
def test_the_defaults_draw_byte_for_byte_what_the_explicit_values_draw(default, explicit):
    ops, magnitudes = policy_draws(KEYS[:3000], 4, 2, default, *SIZE)
    ops_explicit, magnitudes_explicit = policy_draws(KEYS[:3000], 4, 2, explicit, *SIZE)
    assert ops.tobytes() == ops_explicit.tobytes() and magnitudes.tobytes() == magnitudes_explicit.tobytes()
    assert default.rounds == explicit.rounds and default.effective() == explicit.effective()


def test_to_dict_is_plain_data_that_makes_the_same_augment():
    augment = Augment(policy="randaugment", num_ops=np.int64(3), erasing=np.float32(0.25), mixup=torch.tensor(0.5))
    settings = augment.to_dict()
    assert Augment(**settings) == augment
    assert all(type(v) in (int, float, str, type(None)) for v in settings.values())


def test_the_draws_stage_gives_the_batch_records_fields_of_what_is_asked():
    """Augment.draws, what the loader's decode threads run: policy_draws and erasing_boxes by the
    batch record's field names, nothing where nothing is asked."""
    keys = KEYS[:64]
    augment = Augment(policy="randaugment", num_ops=3, erasing=0.5)
    drawn = augment.draws(keys, 4, 2, 48)
    ops, magnitudes = policy_draws(keys, 4, 2, augment, 48, 48)
    assert list(drawn) == ["ops", "magnitudes", "erase"]
    assert np.array_equal(drawn["ops"], ops) and np.array_equal(drawn["magnitudes"], magnitudes)
    assert np.array_equal(drawn["erase"], erasing_boxes(keys, 4, 2, 0.5, 48, 48))
    assert list(Augment(erasing=0.5).draws(keys, 4, 2, 48)) == ["erase"]
    assert Augment().draws(keys, 4, 2, 48) == {} == Augment(mixup=0.2, policy_interpolation="bilinear").draws(
        keys, 4, 2, 48)


def test_the_effective_augment_is_an_augment_with_the_policys_defaults_stated():
    for policy in (None, "trivialaugment", "randaugment", "autoaugment"):
        effective = Augment(policy=policy, erasing=0.1).effective()
        assert tuple(effective) == AUGMENT_FIELDS and Augment(**effective).effective() == effective
        assert Augment(**effective) != Augment(policy=policy, erasing=0.1) or policy in (None, "autoaugment")
