"""The library's settings, exact or refused: every number of ImageNetLoader, Augment and
ResolutionRamp taken as the plain int or float it equals (Python's, numpy's, a 0-d tensor) or refused
in one line naming it (booleans, NaN, infinities, floats where a whole number is meant, out of range);
a state holding them loads with torch.load(weights_only=True); settings that would be ignored
refused; mean, std and uint8 output for any model; the classes; and a top level that type checkers
see as the real classes."""

from __future__ import annotations

import ast
import io
import inspect
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from shards.manifest import read_manifest
from train import Augment, ConfigError, ImageNetLoader, ResolutionRamp, ResumeError
from train.decoder import MAX_IMAGE_SIZE
from train.device_batches import IMAGENET_MEAN, IMAGENET_STD, normalise
from train.numbers import real_number, whole_number

SIZE = 32
REPO = Path(__file__).resolve().parent.parent


def loader(prepared, split="train", **options) -> ImageNetLoader:
    options = {"batch_size": 4, "image_size": SIZE, "device": "cpu", "workers": 2, **options}
    return ImageNetLoader(prepared, split, **options)


# ---------------------------------------------------------------- every number a number

INTEGER_KINDS = {"int": int, "np.int64": np.int64, "tensor int": lambda v: torch.tensor(v)}
FLOAT_KINDS = {"float": float, "np.float32": np.float32, "np.float64": np.float64,
               "tensor float": lambda v: torch.tensor(float(v))}


def numbers_of_kind(kind, whole: bool) -> dict:
    """Every numeric setting of the loader in one kind of number: whole settings only where the
    kind is an integer one (a float there is refused, below); the values are exact in float32."""
    k = kind if whole else int
    augment = Augment(policy="randaugment", num_ops=k(2), magnitude=k(5), num_magnitude_bins=k(11),
                      erasing=kind(1) if whole else kind(0.25), mixup=kind(1) if whole else kind(0.5),
                      cutmix=kind(2) if whole else kind(1.0))
    ramp = ResolutionRamp(k(32), k(48), k(0), k(2), step=k(16))
    return dict(batch_size=k(4), image_size=ramp, seed=k(3), workers=k(2), shuffle_buffer=k(50), prefetch=k(1),
                max_bad_samples=k(5), rank=k(0), world_size=k(1), augment=augment, repeats=k(2), val_crop=k(32),
                val_resize=k(36), mean=[kind(0.5) if not whole else kind(0)] * 3, std=[kind(0.25) if not whole else
                                                                                        kind(1)] * 3)


def python_numbers(options: dict) -> dict:
    """The same settings as plain Python numbers."""
    def plain(value):
        if isinstance(value, (Augment, ResolutionRamp)):
            return type(value)(**{name: plain(getattr(value, name)) for name in value.__dataclass_fields__})
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value.item() if hasattr(value, "item") else value
    return {name: plain(value) for name, value in options.items()}


def mid_epoch_state(prepared, options: dict) -> dict:
    with loader(prepared, **options) as data:
        data.set_epoch(options["seed"])  # an epoch of the same kind
        batches = data.batches()
        next(batches)
        state = data.state_dict()
        batches.close()
    return state


@pytest.mark.parametrize("whole, kind", [(True, kind) for kind in INTEGER_KINDS.values()] +
                         [(False, kind) for kind in FLOAT_KINDS.values()],
                         ids=list(INTEGER_KINDS) + list(FLOAT_KINDS))
def test_a_state_made_of_any_kind_of_number_is_plain_and_loads_with_weights_only(prepared, tmp_path, whole, kind):
    """Python ints and floats, np.int64, np.float32, np.float64, 0-d tensors of int and float: the
    loader keeps the plain numbers they equal, so its state (the Augment's settings included) is what
    a loader of Python numbers saves, and torch.load(weights_only=True) gives it back equal."""
    options = numbers_of_kind(kind, whole)
    state = mid_epoch_state(prepared, options)
    assert state == mid_epoch_state(prepared, python_numbers(options))
    leaves = [v for value in state.values() for v in (value.values() if isinstance(value, dict) else [value])]
    assert all(type(leaf) in (int, float, str, type(None)) for leaf in leaves)
    torch.save({"loader": state}, tmp_path / "checkpoint.pt")
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["loader"] == state


WHOLE_SETTINGS = {"batch_size": 4, "image_size": SIZE, "seed": 0, "workers": 2, "shuffle_buffer": 10, "prefetch": 2,
                  "max_bad_samples": 3, "repeats": 1, "val_crop": SIZE, "val_resize": 40}
NOT_WHOLE = {"True": True, "False": False, "np.True_": np.True_, "bool tensor": torch.tensor(True),
             "float": 4.0, "np.float32": np.float32(4), "float tensor": torch.tensor(4.0),
             "1-element tensor": torch.tensor([4]), "string": "4", "nan": float("nan")}


@pytest.mark.parametrize("name", WHOLE_SETTINGS)
@pytest.mark.parametrize("value", NOT_WHOLE.values(), ids=NOT_WHOLE)
def test_a_whole_number_setting_refuses_what_is_not_a_whole_number_naming_it(prepared, name, value):
    with pytest.raises(ConfigError, match=f"^{name} must be a whole number, not ") as refused:
        loader(prepared, **{name: value})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", WHOLE_SETTINGS)
@pytest.mark.parametrize("kind", INTEGER_KINDS.values(), ids=INTEGER_KINDS)
def test_a_whole_number_setting_takes_any_integer_as_the_plain_int(prepared, name, kind):
    with loader(prepared, **{name: kind(WHOLE_SETTINGS[name])}) as data:
        stored = {"workers": data.threads}.get(name, getattr(data, name, None))
        assert type(stored) is int and stored == WHOLE_SETTINGS[name]


@pytest.mark.parametrize("options, message", [
    ({"rank": True, "world_size": 2}, "rank must be a whole number"),
    ({"rank": 0, "world_size": 1.0}, "world_size must be a whole number"),
    ({"repeats": 0}, "repeats must be at least 1"), ({"prefetch": 0}, "prefetch must be at least 1"),
    ({"val_crop": 32, "val_resize": 0}, "val_resize must be at least 1"),
    ({"rank": -1, "world_size": 2}, "rank must be at least 0"), ({"rank": 0, "world_size": 0}, "world_size must be at "
                                                                                                "least 1"),
    ({"image_size": 0}, "image_size must be at least 1"),
    ({"image_size": MAX_IMAGE_SIZE + 1}, f"image_size must be at most {MAX_IMAGE_SIZE}"),
    ({"image_size": ResolutionRamp(32, MAX_IMAGE_SIZE + 32, 0, 2)}, f"image_size's ramp reaches {MAX_IMAGE_SIZE + 32} "
                                                                    f"px, more than {MAX_IMAGE_SIZE}"),
    ({"image_size": ResolutionRamp(MAX_IMAGE_SIZE + 32, 32, 0, 2)}, "image_size's ramp reaches"),  # (its start)
    ({"image_size": ResolutionRamp(32, 64, 0, 2)}, None),  # accepted: the control
])
def test_other_numbers_out_of_range_or_of_the_wrong_kind_are_refused_by_name(prepared, options, message):
    if message is None:
        loader(prepared, **options).close()
        return
    with pytest.raises(ConfigError, match=message):
        loader(prepared, **options)


def test_image_size_takes_a_side_from_1_to_the_decoders_largest_and_a_ramp_that_reaches_it():
    """The last sizes the refusals above leave (checked alone: a loader's buffers of 8192 px are 800 MB)."""
    from train.loader_arguments import checked_image_size

    assert (checked_image_size(1), checked_image_size(MAX_IMAGE_SIZE)) == (1, MAX_IMAGE_SIZE)
    ramp = ResolutionRamp(32, MAX_IMAGE_SIZE, 0, 2)
    assert checked_image_size(ramp) is ramp


def test_a_ramp_that_shrinks_trains_its_first_epochs_at_its_larger_size(prepared):
    """A batch slot holds the ramp's largest side, here its start: not its end, which validation crops at."""
    with loader(prepared, image_size=ResolutionRamp(48, 32, 0, 2, step=16)) as data:
        assert [images.shape[-2:] for images, _ in data][0] == (48, 48)
        data.set_epoch(2)
        assert [images.shape[-2:] for images, _ in data][0] == (32, 32)


def test_a_split_given_as_a_numpy_string_is_the_plain_str_its_state_loads_with_weights_only(prepared):
    """A split picked from a numpy array (np.str_) was kept as it came: its state did not load with
    torch.load(weights_only=True)."""
    with loader(prepared, np.str_("val")) as data:
        assert type(data.split) is str
        saved = io.BytesIO()
        torch.save(data.state_dict(), saved)
    saved.seek(0)
    assert torch.load(saved, weights_only=True)["split"] == "val"


@pytest.mark.parametrize("epoch", [True, 2.0, np.float64(2), torch.tensor(2.0)])
def test_set_epoch_refuses_a_bool_or_a_float(prepared, epoch):
    with loader(prepared) as data, pytest.raises(ConfigError, match="epoch must be a whole number"):
        data.set_epoch(epoch)


@pytest.mark.parametrize("field", ["start", "end", "start_epoch", "end_epoch", "step"])
@pytest.mark.parametrize("value", [True, 32.0, np.float32(32), torch.tensor(32.0), None])
def test_a_resolution_ramp_refuses_what_is_not_a_whole_number(field, value):
    settings = {"start": 32, "end": 64, "start_epoch": 0, "end_epoch": 40, "step": 32, field: value}
    with pytest.raises(ConfigError, match=f"the resolution ramp's {field} must be a whole number"):
        ResolutionRamp(**settings)


@pytest.mark.parametrize("kind", INTEGER_KINDS.values(), ids=INTEGER_KINDS)
def test_a_resolution_ramp_keeps_plain_ints(kind):
    ramp = ResolutionRamp(kind(160), kind(192), kind(65), kind(76), step=kind(32))
    assert ramp == ResolutionRamp(160, 192, 65, 76) and all(type(getattr(ramp, f)) is int for f in
                                                             ramp.__dataclass_fields__)


def test_a_resolution_ramp_over_a_billion_epochs_is_made_at_once_and_its_extremes_are_every_epochs():
    """Its checks took every epoch's size: an end_epoch of 10**12 hung the constructor for good."""
    def too_long(signum, frame):
        raise TimeoutError("ResolutionRamp took over 10 s")

    before = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(10)
    try:
        ramp = ResolutionRamp(32, 64, 0, 10 ** 12)
        assert (ramp.largest, ramp.size(10 ** 11), ramp.size(10 ** 12)) == (64, 32, 64)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    for settings in [(160, 192, 65, 76), (192, 160, 0, 5), (30, 100, 3, 4, 64), (17, 17, 0, 9), (20, 60, 0, 7, 40)]:
        ramp = ResolutionRamp(*settings)
        assert ramp.largest == max(ramp.sizes()) and min(ramp.extremes()) == min(ramp.sizes())


def test_a_resolution_ramps_sizes_are_each_once_in_epoch_order_and_at_once_over_a_hundred_billion_epochs():
    """sizes() asked every epoch's size: `python -m train --ramp 32 64 0 99999999999` hung at its start (its model
    is probed at each size the run trains at)."""
    def too_long(signum, frame):
        raise TimeoutError("ResolutionRamp.sizes took over 10 s")

    before = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(10)
    try:
        assert ResolutionRamp(32, 64, 0, 10 ** 11 - 1).sizes() == [32, 64]
        assert ResolutionRamp(64, 32, 5, 10 ** 11).sizes() == [64, 32]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert ResolutionRamp(192, 160, 0, 5).sizes() == [192, 160]  # epochs 0-2 at 192, 3-5 at 160
    for settings in [(160, 192, 65, 76), (33, 64, 0, 9), (32, 63, 2, 40, 8), (30, 100, 3, 4, 64), (17, 17, 0, 9),
                     (100, 1, 0, 50, 1), (20, 60, 0, 7, 40)]:
        ramp = ResolutionRamp(*settings)
        every_epochs = [ramp.size(epoch) for epoch in range(ramp.start_epoch, ramp.end_epoch + 1)]
        assert ramp.sizes() == [size for at, size in enumerate(every_epochs) if at == 0 or every_epochs[at - 1] != size]


def test_the_checks_say_which_kinds_they_take():
    assert whole_number("n", np.uint8(3)) == 3 and real_number("x", np.int32(3)) == 3.0
    with pytest.raises(ConfigError, match=r"n must be a whole number, not 64.0 \(float\): use // for a division"):
        whole_number("n", 256 / 4)
    with pytest.raises(ConfigError, match="x must be more than 0, not 0.0"):
        real_number("x", 0, above=0)


@pytest.mark.parametrize("policy", ["trivialaugment", "randaugment", "autoaugment", None])
def test_a_mid_epoch_state_resumes_the_same_augmentation_given_by_its_defaults_or_their_values(prepared, policy):
    """The state holds the augmentation the batches get (the policy's defaults filled in): an Augment
    that states them loads the state of one that leaves them out; other values do not."""
    augment = Augment(policy=policy, erasing=0.25)
    state = mid_epoch_state(prepared, {"augment": augment, "seed": 0})
    assert state["augment"] == augment.effective() and Augment(**state["augment"]).effective() == state["augment"]
    with loader(prepared, augment=Augment(**augment.effective())) as data:
        data.load_state_dict(state)
    if policy in ("trivialaugment", "randaugment"):
        with loader(prepared, augment=Augment(policy=policy, erasing=0.25, num_magnitude_bins=11)) as data, \
                pytest.raises(ResumeError, match="augment"):
            data.load_state_dict(state)


def test_a_state_of_an_earlier_version_is_refused_in_one_line(prepared):
    """States saved before this version (format imagenet-loader/1, whose augment named its fields
    otherwise) are refused, not converted."""
    state = mid_epoch_state(prepared, {"augment": Augment(policy="trivialaugment"), "seed": 0})
    old = {**state, "format": "imagenet-loader/1"}
    # (one of format 1 may lack what format 2 added: it is told the same, not to pass a whole dict)
    older = {name: value for name, value in old.items() if name not in ("repeats", "size", "augment")}
    for earlier in (old, older):
        with loader(prepared, augment=Augment(policy="trivialaugment")) as data, \
                pytest.raises(ResumeError, match=r"^this loader state is of format 'imagenet-loader/1', an earlier "
                                                 r"version's; .*refused, start the run again$"):
            data.load_state_dict(earlier)


# ---------------------------------------------------------------- settings that would be ignored

@pytest.mark.parametrize("split", ["val"])
@pytest.mark.parametrize("options, named", [
    ({"augment": Augment(policy="trivialaugment")}, "augment"), ({"augment": Augment(erasing=0.1)}, "augment"),
    ({"augment": Augment(mixup=0.2)}, "augment"), ({"repeats": 2}, "repeats"),
    ({"augment": Augment(cutmix=1.0), "repeats": 4}, "augment and repeats"),
    ({"fixed_shape": True}, "fixed_shape"),  # (val's last batch stays partial: it was silently so)
])
def test_augment_or_repeats_on_a_split_other_than_train_are_refused(prepared, split, options, named):
    with pytest.raises(ConfigError, match=f"^{named} would be ignored by the {split} split .*with_split"):
        loader(prepared, split, **options)


def test_an_augment_that_changes_nothing_and_one_reading_are_what_val_does_anyway(prepared):
    with loader(prepared, "val", augment=Augment(), repeats=1, fixed_shape=False) as val:
        assert len(list(val)) == len(val)


def test_with_split_carries_augment_and_repeats_which_act_on_train_passes_only(prepared):
    """The val loader of an augmented train loader reads val plainly; its own with_split("train")
    augments again, as the loader it came from."""
    augment = Augment(policy="trivialaugment", erasing=0.5)
    with loader(prepared, "val") as plain:
        reference = [images.clone() for images, _ in plain]
    with loader(prepared, augment=augment, repeats=2) as data, data.with_split("val") as val, \
            val.with_split("train") as train_again:
        assert all(torch.equal(a, b) for a, b in zip((images for images, _ in val), reference, strict=True))
        assert (train_again.augment, train_again.repeats) == (augment, 2)
        data.set_epoch(1)
        train_again.set_epoch(1)
        first = next(data.batches())
        again = next(train_again.batches())
        assert torch.equal(first.images, again.images) and torch.equal(first.ops, again.ops)


def test_more_repeats_than_samples_a_rank_reads_are_refused(prepared):
    train = read_manifest(prepared).splits["train"].samples
    per_rank = train // (2 * 4) * 4  # whole batches of 4 on each of 2 ranks
    with pytest.raises(ConfigError, match=f"repeats={per_rank + 1} is more than the {per_rank} train samples each "
                                          f"rank reads an epoch .*use at most {per_rank}"):
        loader(prepared, repeats=per_rank + 1, rank=0, world_size=2)
    loader(prepared, repeats=per_rank, rank=0, world_size=2).close()
    with pytest.raises(ConfigError, match=f"more than the {train // 4 * 4} train samples each rank reads"):
        loader(prepared, repeats=train // 4 * 4 + 1)  # one process


def test_a_val_batch_size_past_the_split_is_its_one_batch_with_buffers_for_the_split_alone(prepared):
    """Validation's last batch is partial, so a batch_size past the split is its one batch: the buffers hold the
    split's samples, not batch_size images (3 TB for 10**9 at 32 px: a traceback from the allocator)."""
    samples = read_manifest(prepared).splits["val"].samples
    with loader(prepared, "val", batch_size=10 ** 9) as data:
        assert len(data) == 1 and [len(labels) for _, labels in data] == [samples]
        largest = max(split.samples for split in read_manifest(prepared).splits.values())
        assert data._shared.loader.strategy.memory_bytes() == 4 * largest * SIZE * SIZE * 3  # a ring of 4


def test_on_one_process_a_batch_of_8_with_repeats_4_holds_2_images_4_times_each(prepared):
    """RASampler's rule, as docs/library.md states it: the readings of a sample go to the ranks in
    turn, so on one rank they are side by side; each its own augmentation."""
    with loader(prepared, batch_size=8, repeats=4, augment=Augment(policy="trivialaugment")) as data:
        for batch in data.batches():
            hashes = batch.key_hashes.tolist()
            assert [hashes.count(h) for h in dict.fromkeys(hashes)] == [4, 4]
            assert sorted(batch.repeats.tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]


# ---------------------------------------------------------------- any model: mean, std, uint8, classes

def all_images(data) -> list[torch.Tensor]:
    return [images.clone() for images, _ in data]


def test_uint8_output_is_the_decoded_pixels_that_the_float_output_normalises(prepared):
    with loader(prepared, dtype=torch.uint8) as data, data.with_split("val") as val:
        train_uint8, val_uint8 = all_images(data), all_images(val)
    with loader(prepared) as data, data.with_split("val") as val:
        train_float, val_float = all_images(data), all_images(val)
    for uint8, floats in ((train_uint8, train_float), (val_uint8, val_float)):
        assert all(x.dtype == torch.uint8 and x.shape[1:] == (3, SIZE, SIZE) for x in uint8)
        assert all(x.is_contiguous(memory_format=torch.channels_last) for x in uint8)
        assert len(uint8) == len(floats)
        assert all(torch.equal(normalise(x.float(), channels_last=True), y) for x, y in zip(uint8, floats))
    assert len({x.float().mean().item() for x in train_uint8}) == len(train_uint8)  # no batch overwrote another


def test_uint8_output_with_a_policy_and_without_channels_last(prepared):
    augment = Augment(policy="trivialaugment")
    with loader(prepared, dtype=torch.uint8, augment=augment, channels_last=False) as data:
        uint8 = all_images(data)
    with loader(prepared, augment=augment) as data:
        floats = all_images(data)
    assert all(x.is_contiguous() and x.dtype == torch.uint8 for x in uint8)
    assert all(torch.equal(normalise(x.float(), channels_last=True), y) for x, y in zip(uint8, floats, strict=True))


def val_pixels_and_jpegs(prepared, **val) -> list[tuple[np.ndarray, bytes]]:
    """(the loader's uint8 HWC pixels, the JPEG's bytes) of every val sample, matched by key hash."""
    from conftest import shard_set

    shards = shard_set(prepared, "val")
    ids = np.arange(len(shards))
    shards.ensure_indexed(ids)
    jpegs = dict(zip(shards.key_hashes(ids).tolist(), (shards.images(ids[i:i + 1]).data(0) for i in ids)))
    with loader(prepared, "val", dtype=torch.uint8, **val) as data:
        return [(image.permute(1, 2, 0).numpy().copy(), jpegs[h]) for batch in data.batches()
                for image, h in zip(batch.images, batch.key_hashes.tolist())]


def timm_reference(crop: int, crop_pct: float, crop_mode: str, interpolation: str):
    """timm's transforms_imagenet_eval (crop_mode "center" or "squash") without normalisation, as
    tests/test_val_transforms.py checks it against timm itself: torchvision's Resize + CenterCrop."""
    import math

    from PIL import Image
    from torchvision import transforms as T

    scale = math.floor(crop / crop_pct)
    mode = T.InterpolationMode(interpolation)
    resize = T.Resize(scale if crop_mode == "center" else (scale, scale), interpolation=mode)
    return lambda data: np.asarray(T.CenterCrop(crop)(resize(Image.open(io.BytesIO(data)).convert("RGB"))))


@pytest.mark.parametrize("crop_pct, crop_mode, interpolation", [(0.9, "center", "bicubic"),
                                                                (0.875, "squash", "bicubic"),
                                                                (0.95, "center", "bilinear")])
def test_validation_takes_any_models_eval_transform_end_to_end(prepared, crop_pct, crop_mode, interpolation):
    """The loader's val_* arguments as a timm model's pretrained config states them, through the
    whole data path (threads, batches, uint8 output), against the transform on every val JPEG (the
    CMYK and grey ones included), to the rounding of a level."""
    reference = timm_reference(SIZE, crop_pct, crop_mode, interpolation)
    found = val_pixels_and_jpegs(prepared, val_crop=SIZE, val_crop_fraction=crop_pct, val_crop_mode=crop_mode,
                                 val_interpolation=interpolation)
    assert len(found) == len(shard_set_of(prepared))
    for pixels, data in found:
        difference = np.abs(pixels.astype(np.float32) - reference(data))
        assert difference.mean() < 0.1 and difference.max() <= 2, (difference.mean(), difference.max())


def test_validation_as_ffcvs_center_crop_decoder_end_to_end(prepared):
    """val_crop_mode "ffcv" (the ffcv-rn50 recipe's): the centre 224/256 of the short side, OpenCV's
    INTER_AREA to the output, decoded with the fast IDCT, through the whole data path; against FFCV's
    own steps on every val JPEG: TurboJPEG's fast-IDCT decode (simplejpeg calls the same API),
    get_center_crop, cv2.resize."""
    cv2, simplejpeg = pytest.importorskip("cv2"), pytest.importorskip("simplejpeg")
    found = val_pixels_and_jpegs(prepared, val_crop=SIZE, val_crop_mode="ffcv", val_interpolation="area")
    assert len(found) == len(shard_set_of(prepared))
    for pixels, data in found:
        image = simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=True, fastupsample=False)
        c = int(224 / 256 * min(image.shape[:2]))
        top, left = (image.shape[0] - c) // 2, (image.shape[1] - c) // 2
        theirs = cv2.resize(np.ascontiguousarray(image[top:top + c, left:left + c]), (SIZE, SIZE),
                            interpolation=cv2.INTER_AREA)
        difference = np.abs(pixels.astype(np.float32) - theirs)
        assert difference.mean() < 0.3 and difference.max() <= 2, (difference.mean(), difference.max())


def shard_set_of(prepared):
    from conftest import shard_set

    return shard_set(prepared, "val")


@pytest.mark.parametrize("options, message", [
    ({"augment": Augment(erasing=0.1)}, "uint8 cannot hold what random erasing make"),
    ({"augment": Augment(mixup=0.2)}, "uint8 cannot hold what MixUp/CutMix make"),
    ({"augment": Augment(erasing=0.1, cutmix=1.0)}, "random erasing and MixUp/CutMix"),
    ({"mean": (0.5, 0.5, 0.5)}, "mean and std would be ignored with dtype=torch.uint8"),
    ({"std": (0.5, 0.5, 0.5)}, "mean and std would be ignored"),
])
def test_uint8_output_refuses_what_cannot_be_uint8_in_one_line(prepared, options, message):
    with pytest.raises(ConfigError, match=message) as refused:
        loader(prepared, dtype=torch.uint8, **options)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("mean, std", [((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
                                       (np.array([0.25, 0.5, 0.75]), torch.tensor([0.125, 0.25, 0.5]))])
def test_mean_and_std_normalise_in_0_1_units_as_torchvisions_normalize(prepared, mean, std):
    with loader(prepared, dtype=torch.uint8) as data:
        uint8 = all_images(data)[:3]
    with loader(prepared, mean=mean, std=std) as data:
        assert data.mean == tuple(float(m) for m in mean) and data.std == tuple(float(s) for s in std)
        floats = all_images(data)[:3]
    m, s = (torch.tensor([float(v) for v in values]).view(1, 3, 1, 1) * 255 for values in (mean, std))
    assert all(torch.equal((x.float() - m) / s, y) for x, y in zip(uint8, floats))


def test_the_default_normalisation_is_imagenets(prepared):
    with loader(prepared) as data:
        assert (data.mean, data.std) == (IMAGENET_MEAN, IMAGENET_STD) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    with loader(prepared, dtype=torch.uint8) as data:
        assert (data.mean, data.std) == (None, None)


@pytest.mark.parametrize("options, message", [
    ({"mean": (0.5, 0.5)}, "mean must be three numbers"), ({"mean": 0.5}, "mean must be three numbers"),
    ({"mean": "abc"}, "mean must be three numbers"),
    ({"mean": (123.7, 116.3, 103.5)}, r"mean\[0\] must be at most 1, not 123.7 \(mean and std are in 0-1 units"),
    ({"mean": (0.5, float("nan"), 0.5)}, r"mean\[1\] must be a finite number"),
    ({"std": (0.5, 0.5, 0)}, r"std\[2\] must be more than 0"), ({"std": (0.5, float("inf"), 0.5)}, "finite"),
    ({"std": (True, 0.5, 0.5)}, r"std\[0\] must be a number, not True"),
    ({"mean": (-0.1, 0.5, 0.5)}, r"mean\[0\] must be at least 0, not -0.1 \(mean and std are in 0-1 units"),
    ({"std": (0.5, 1.5, 0.5)}, r"std\[1\] must be at most 1, not 1.5 \(mean and std are in 0-1 units"),
])
def test_a_mean_or_std_that_cannot_work_is_refused_by_name(prepared, options, message):
    with pytest.raises(ConfigError, match=message):
        loader(prepared, **options)


def test_classes_are_the_manifests_wnids_and_names_in_label_order(prepared):
    manifest = read_manifest(prepared)
    with loader(prepared) as data, data.with_split("val") as val:
        assert len(data.classes) == data.num_classes == manifest.num_classes
        assert [(c.wnid, c.name) for c in data.classes] == \
            [(c.wnid, c.name) for c in sorted(manifest.classes, key=lambda c: c.index)]
        wnid, name = data.classes[0]
        assert (wnid, name) == (data.classes[0].wnid, data.classes[0].name) and wnid.startswith("n")
        assert val.classes is data.classes


# ---------------------------------------------------------------- a typed top level

def test_a_keyword_augment_renamed_is_answered_with_its_new_name():
    from train.augment.choices import Augment

    with pytest.raises(TypeError, match=r"Augment\(\) got an unexpected keyword argument 'interpolation': it is now "
                                        r"policy_interpolation= \(the same setting, renamed\)$"):
        Augment(policy="trivialaugment", interpolation="bilinear")
    with pytest.raises(TypeError, match="unexpected keyword argument 'policy_interp'"):  # any other: Python's own
        Augment(policy_interp="bilinear")
    assert Augment(policy="trivialaugment", policy_interpolation="bilinear").policy_interpolation == "bilinear"
    assert list(inspect.signature(Augment).parameters)[:2] == ["policy", "num_ops"]  # the signature shown is its own


def test_the_top_level_imports_lazily_and_shows_type_checkers_the_same_names():
    """At run time `import train` imports no torch (python -m train --help does not wait for it);
    under TYPE_CHECKING it imports each public name from the module the lazy table names."""
    source = (REPO / "train" / "__init__.py").read_text()
    tree = ast.parse(source)
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    typed = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    import train

    assert typed == train._HOMES and sorted(typed) == sorted(train.__all__)
    code = "import sys, train; assert 'torch' not in sys.modules, 'train imported torch'; print(train.__all__)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True)


def imports_of(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each `from module import name` in a file, at any depth."""
    return [(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names]


def test_the_library_stands_below_the_command_line_and_augmentation_is_a_stage_of_the_data_path():
    """Nothing of train but its command line (cli, loop, __main__, and settings: a run's settings, new or
    resumed) imports train.run.config for more than TrainConfig; the loader and the device batches run the
    augmentation's stages without importing it."""
    for path in (REPO / "train").rglob("*.py"):
        if path.parent.name == "bench" or path.name in ("cli.py", "loop.py", "__main__.py", "settings.py"):
            continue
        names = {name for module, name in imports_of(path) if module == "train.run.config"}
        assert names <= {"TrainConfig"}, (path, names)
    for name in ("loader.py", "device_batches.py"):
        assert not [m for m, _ in imports_of(REPO / "train" / name) if m.startswith("train.augment")], name


def test_the_package_ships_a_py_typed_marker():
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for package in ("train", "shards"):
        assert (REPO / package / "py.typed").is_file() and "py.typed" in settings[package]


MYPY_PROBE = '''
import train
from train import Augment, ImageNetLoader, ResolutionRamp

reveal_type(ImageNetLoader)
reveal_type(Augment(policy="trivialaugment").erasing)
reveal_type(train.ResolutionRamp(160, 192, 65, 76).largest)
loader = ImageNetLoader("/data", "train", batch_sise=8, image_size=224, device="cpu")
from train import ImageNetLoadr
val = ImageNetLoader("/data", "val", batch_size=8, image_size=224, device="cpu", val_crop=(224, 288), val_resize=None)
'''


@pytest.mark.slow
def test_mypy_sees_the_real_classes_through_from_train_import(tmp_path, pytestconfig):
    """mypy (the test extra installs it) reports a misspelt keyword of ImageNetLoader and a misspelt
    name of train, and reveals the class, not Any."""
    probe, settings = tmp_path / "probe.py", tmp_path / "mypy.ini"
    probe.write_text(MYPY_PROBE)
    # torch's and torchvision's own types are not what this checks, and analysing them was 10 of a cold run's 13 s:
    # skipped, a torch.device in our signatures reads as Any
    settings.write_text("[mypy]\n[mypy-torch.*]\nfollow_imports = skip\n[mypy-torchvision.*]\nfollow_imports = skip\n")
    # a warm cache (pytest's, where its cache plugin runs): a second run takes about a second, a cold one 3
    cache = pytestconfig.cache.mkdir("mypy") if getattr(pytestconfig, "cache", None) else tmp_path / "mypy-cache"
    command = [sys.executable, "-m", "mypy", "--config-file", str(settings), "--follow-imports=silent",
               "--no-error-summary", "--cache-dir", str(cache), str(probe)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout + result.stderr

    def said(line_number: int) -> str:
        # by name: mypy's cache gives an unchanged probe's messages under the path it first had
        return "\n".join(line for line in lines if f"probe.py:{line_number}:" in line)

    assert 'Revealed type is "def (root: ' in said(5) and "-> train.imagenet_loader.ImageNetLoader" in said(5)
    assert re.search(r'Revealed type is "(builtins\.)?float"', said(6))  # mypy 2 drops the "builtins."
    assert re.search(r'Revealed type is "(builtins\.)?int"', said(7))
    assert 'Unexpected keyword argument "batch_sise" for "ImageNetLoader"; did you mean "batch_size"?' in said(8)
    assert 'Module "train" has no attribute "ImageNetLoadr"' in said(9)
    assert said(10) == ""  # val_crop's (height, width), as docs/library.md gives it (timm's input_size)


def test_python_m_train_help_does_not_wait_for_torch():
    """docs/library.md: `import train` imports its names on first use, 'so `python -m train --help` does not wait for
    torch'. The command line imported train.cluster (and with it torch, seconds on a cluster's shared file system)
    before it parsed a flag."""
    probe = ("import runpy, sys\n"
             "sys.argv = ['train', '--help']\n"
             "try:\n"
             "    runpy.run_module('train', run_name='__main__')\n"
             "except SystemExit:\n"
             "    pass\n"
             "print('torch' in sys.modules, file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert "usage: python -m train" in result.stdout, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "False", result.stderr


@pytest.mark.parametrize("val_crop, said", [
    ((3, 224, 224), r"val_crop is one side or \(height, width\), not \(3, 224, 224\): timm's input_size \(3, H, W\) is "
                    r"val_crop=\(H, W\), here \(224, 224\)$"),
    ([224], r"val_crop is one side or \(height, width\), not \[224\]$"),
    # timm's input_size is three long and begins with its 3 channels: another shape is not it
    ((3, 224, 224, 224), r"val_crop is one side or \(height, width\), not \(3, 224, 224, 224\)$"),
    ((1, 224, 224), r"val_crop is one side or \(height, width\), not \(1, 224, 224\)$"),
])
def test_a_val_crop_of_other_than_one_or_two_sides_is_refused_saying_what_it_takes(val_crop, said):
    """timm's data config holds input_size (3, H, W), which the docs name beside val_crop: passed as it is, it
    was refused as 'must be a whole number', though a pair is taken."""
    from train.loader_arguments import checked_validation

    with pytest.raises(ConfigError, match=said) as refused:
        checked_validation(224, val_crop)
    assert "\n" not in str(refused.value)
    assert checked_validation(224, (224, 192)).shape == (224, 192)  # the pair it takes
