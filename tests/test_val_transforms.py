"""Validation's transform against each library's own evaluation transform, on photo-like JPEGs of
real sizes (prepare.sample's photos, quality 95, 4:2:0): from 150 x 113 (enlarged) to 2500 x 1700,
wide, tall and square, several at least twice the output (where a training crop would decode at a
DCT scale: validation never does).

The loader's arguments come from the reference's own settings, as docs/library.md shows a user
taking them: torchvision's weights' `transforms()` (crop_size, resize_size, interpolation), timm's
`resolve_data_config` (input_size, crop_pct, crop_mode, interpolation; the pretrained configs are
timm's tables, no weights are downloaded), FFCV's CenterCropRGBImageDecoder (224/256 of the short
side to 256, OpenCV's INTER_AREA). Each reference runs on the same bytes; its normalised tensor is
scaled back to grey levels with its own mean and std. The loader's uint8 pixels must be within a
grey level of it on average (asserted much tighter), and each case's mean and max are printed
(`pytest -s tests/test_val_transforms.py -k references`).
"""

from __future__ import annotations

import functools
import io
import math

import numpy as np
import pytest
import torch
from PIL import Image

from prepare.sample import photo
from train.decoder import MAX_IMAGE_SIZE, Images, decode_crops
from train.loader_arguments import MAX_VAL_RESIZE, checked_validation
from train.transforms import IMAGENET_FILL, ResolutionRamp

# wide, tall and square; 150 x 113 is enlarged; the last five are at least twice a 224 output
SIZES = [(500, 375), (375, 500), (150, 113), (233, 232), (640, 333), (333, 640), (1200, 900), (900, 1200),
         (1024, 1024), (2500, 1700), (1700, 2500)]


@functools.cache
def sample_jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    photo(np.random.default_rng(width * 7 + height), width % 10, (width, height)).save(out, "JPEG", quality=95)
    return out.getvalue()


def ours(data: bytes, **val) -> np.ndarray:
    """The loader's validation pixels of one JPEG (uint8 HWC), from the library's val_* arguments (and the
    normalisation's mean, whose colour "border" pads with)."""
    validation = checked_validation(224, **val)
    width, height = Image.open(io.BytesIO(data)).size
    box, regions = validation.placements(np.array([width]), np.array([height]))
    out = np.zeros((1, *validation.shape, 3), np.uint8)
    status = decode_crops(Images.from_blobs([data]), box, np.zeros(1, bool), out, 0, dct_scaling=False,
                          interpolation=validation.interpolation, fast_dct=validation.fast_dct, regions=regions,
                          fill=validation.fill)
    assert status.tolist() == [0]
    return out[0]


def grey_levels(tensor: torch.Tensor, mean, std) -> np.ndarray:
    """A normalised CHW tensor back in 0-255, HWC."""
    back = tensor * torch.tensor(std).view(3, 1, 1) + torch.tensor(mean).view(3, 1, 1)
    return (back * 255).permute(1, 2, 0).numpy()


# ---------------------------------------------------------------- the references

def torchvision_case(weights_name: str):
    """(the loader's arguments, the reference) of a torchvision weight's evaluation transform."""
    from torchvision import models

    enum, member = weights_name.split(".")
    preset = getattr(getattr(models, enum), member).transforms()
    val = {"val_crop": preset.crop_size[0], "val_resize": preset.resize_size[0],
           "val_interpolation": preset.interpolation.value}

    def reference(data: bytes) -> np.ndarray:
        return grey_levels(preset(Image.open(io.BytesIO(data)).convert("RGB")), preset.mean, preset.std)
    return val, reference


def timm_case(model_name: str):
    """(the loader's arguments, the reference) of a timm model's evaluation transform."""
    from timm.data import create_transform, resolve_data_config
    from timm.models import get_pretrained_cfg

    cfg = resolve_data_config({}, pretrained_cfg=get_pretrained_cfg(model_name).to_dict())
    transform = create_transform(**cfg)
    height, width = cfg["input_size"][1:]
    val = {"val_crop": width if height == width else (height, width), "val_crop_fraction": cfg["crop_pct"],
           "val_crop_mode": cfg["crop_mode"], "val_interpolation": cfg["interpolation"], "mean": cfg["mean"]}

    def reference(data: bytes) -> np.ndarray:
        return grey_levels(transform(Image.open(io.BytesIO(data)).convert("RGB")), cfg["mean"], cfg["std"])
    return val, reference


def torchvision_padding_case(resize: int, crop: int):
    """(the loader's arguments, the reference) of torchvision's Resize(resize) + CenterCrop(crop) with a
    resize smaller than the crop: CenterCrop pads with black."""
    from torchvision import transforms

    preset = transforms.Compose([transforms.Resize(resize), transforms.CenterCrop(crop), transforms.PILToTensor()])
    val = {"val_crop": crop, "val_resize": resize, "val_interpolation": "bilinear"}

    def reference(data: bytes) -> np.ndarray:
        return preset(Image.open(io.BytesIO(data)).convert("RGB")).permute(1, 2, 0).numpy().astype(np.float32)
    return val, reference


def ffcv_center_crop(height: int, width: int, ratio: float) -> tuple[int, int, int, int]:
    """FFCV's get_center_crop (ffcv/fields/rgb_image.py), line for line."""
    s = min(height, width)
    c = int(ratio * s)
    delta_h = (height - c) // 2
    delta_w = (width - c) // 2
    return delta_h, delta_w, c, c


def ffcv_case():
    """(the loader's arguments, the reference) of FFCV's CenterCropRGBImageDecoder((256, 256), 224/256):
    libjpeg-turbo's TurboJPEG decode with TJFLAG_FASTDCT, the fast integer IDCT, as its imdecode
    (simplejpeg calls the same API), then OpenCV's resize with INTER_AREA of the crop, as its
    resize_crop."""
    cv2 = pytest.importorskip("cv2")
    simplejpeg = pytest.importorskip("simplejpeg")
    val = {"val_crop": 256, "val_crop_fraction": 224 / 256, "val_crop_mode": "ffcv", "val_interpolation": "area"}

    def reference(data: bytes) -> np.ndarray:
        image = simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=True, fastupsample=False)
        i, j, h, w = ffcv_center_crop(image.shape[0], image.shape[1], 224 / 256)
        crop = np.ascontiguousarray(image[i:i + h, j:j + w])
        return cv2.resize(crop, (256, 256), interpolation=cv2.INTER_AREA).astype(np.float32)
    return val, reference


CASES = {
    "torchvision ResNet50 IMAGENET1K_V2 (232/224 bilinear)": lambda: torchvision_case("ResNet50_Weights.IMAGENET1K_V2"),
    "torchvision EfficientNet_B0 IMAGENET1K_V1 (256/224 bicubic)":
        lambda: torchvision_case("EfficientNet_B0_Weights.IMAGENET1K_V1"),
    "torchvision ViT_B_16 SWAG_LINEAR (224/224 bicubic)":
        lambda: torchvision_case("ViT_B_16_Weights.IMAGENET1K_SWAG_LINEAR_V1"),
    "timm resnet50.a1_in1k (crop_pct 0.95 bicubic)": lambda: timm_case("resnet50.a1_in1k"),
    "timm convnext_tiny.fb_in1k (crop_pct 0.875 bicubic)": lambda: timm_case("convnext_tiny.fb_in1k"),
    "timm vit_base_patch16_224.augreg2 (crop_pct 0.9 bicubic)":
        lambda: timm_case("vit_base_patch16_224.augreg2_in21k_ft_in1k"),
    "timm dm_nfnet_f1.dm_in1k (squash, crop_pct 0.91 bicubic)": lambda: timm_case("dm_nfnet_f1.dm_in1k"),
    # #53: the padded ones
    "timm volo_d5_512.sail_in1k (crop_pct 1.15: padded, bicubic)": lambda: timm_case("volo_d5_512.sail_in1k"),
    "timm deepseek_vit_412m.deepseek_v4_flash_vision_exp (border 392, bicubic)":
        lambda: timm_case("deepseek_vit_412m.deepseek_v4_flash_vision_exp"),
    "torchvision Resize(194) + CenterCrop(224) (padded, bilinear)": lambda: torchvision_padding_case(194, 224),
    "timm vit_base_patch16_sapiens2.fb (1024 x 768, squash, bicubic)":
        lambda: timm_case("vit_base_patch16_sapiens2.fb"),
    "FFCV CenterCropRGBImageDecoder 224/256 to 256 (area, fast IDCT)": ffcv_case,
}
# Each filter's bound on the mean difference a pixel, in grey levels (measured: 0.02, 0.02 and 0.19 at
# worst): the rounding of PIL's fixed point against ours (bicubic's overshoot rounds a little more
# often), and of OpenCV's float sums against our two passes rounded to a level each.
MEAN_BOUND = {"bilinear": 0.05, "bicubic": 0.1, "area": 0.3}


def difference(name: str, width: int, height: int) -> tuple[float, float]:
    """(mean, max) of |ours - reference| over a JPEG's pixels, in grey levels."""
    if name.startswith("timm"):
        pytest.importorskip("timm")
    val, reference = CASES[name]()
    data = sample_jpeg(width, height)
    mine, theirs = ours(data, **val), reference(data)
    assert mine.shape == theirs.shape
    d = np.abs(mine.astype(np.float32) - theirs)
    return float(d.mean()), float(d.max())


@pytest.mark.parametrize("name", list(CASES))
def test_validation_pixels_are_the_references(name):
    """Within a grey level on average on every image (much less: MEAN_BOUND), 2 on a pixel; the
    case's line of the table printed (seen with pytest -s)."""
    val, _ = CASES[name]()
    found = [difference(name, width, height) for width, height in SIZES]
    print(f"\n{name:64s} mean {np.mean([m for m, _ in found]):.3f} (worst image {max(m for m, _ in found):.3f}), "
          f"max {max(x for _, x in found):.0f}", end="")
    for (width, height), (mean, most) in zip(SIZES, found):
        assert mean < MEAN_BOUND[val["val_interpolation"]] and most <= 2, (width, height, mean, most)


@pytest.mark.parametrize("width, height", [(1, 1000), (1000, 1), (2, 3000)])
def test_an_image_too_thin_to_letterbox_keeps_a_pixel_of_its_short_side(width, height):
    """"border" of an image whose short side, scaled with its long side to the output, rounds to none (prepare
    keeps such images): timm's resize refuses it (a ValueError), and a region of no pixels failed the decode,
    and with it the whole validation pass. The short side keeps one pixel: the image as a line through the
    middle, the rest the mean's colour."""
    val = {"val_crop": 224, "val_crop_fraction": 1.0, "val_crop_mode": "border"}
    _, regions = checked_validation(224, **val).placements(np.array([width]), np.array([height]))
    assert regions is not None and (regions[:, 2:] >= 1).all()
    data = sample_jpeg(width, height)
    mine = ours(data, **val).astype(np.float32)  # decoded (status 0)
    tall, middle = height > width, (224 - 1) // 2  # CenterCropOrPad's padding before it
    line = mine[:, middle] if tall else mine[middle]
    source = Image.open(io.BytesIO(data)).convert("RGB").resize((1, 224) if tall else (224, 1), Image.BILINEAR)
    assert np.abs(line - np.asarray(source, np.float32).reshape(224, 3)).max() <= 1
    rest = np.delete(mine, middle, axis=1 if tall else 0)
    assert (rest == np.array(IMAGENET_FILL, np.float32)).all()


# ---------------------------------------------------------------- the arguments

def test_timms_resize_is_its_floor_of_crop_over_crop_pct():
    for crop, pct in [(224, 0.875), (224, 0.95), (224, 0.9), (224, 0.91), (176, 0.875), (288, 1.0), (384, 0.96)]:
        assert checked_validation(224, crop, None, pct).resize == math.floor(crop / pct)
    assert checked_validation(224, 224, None, 0.875, "squash").resize == 256


def test_ffcvs_crop_is_its_get_center_crop():
    widths, heights = np.array([500, 375, 150, 233, 2500, 1, 7]), np.array([375, 500, 113, 232, 1700, 1, 3000])
    boxes = checked_validation(224, 256, None, None, "ffcv").boxes(widths, heights)
    for (w, h), box in zip(zip(widths, heights), boxes):
        i, j, ch, cw = ffcv_center_crop(int(h), int(w), 224 / 256)
        assert box.tolist() == [j, i, j + max(cw, 1), i + max(ch, 1)]  # FFCV would fail on an empty crop


def test_a_fraction_of_any_kind_is_kept_as_the_plain_float():
    for kind in (float, np.float32, np.float64, lambda v: torch.tensor(v)):
        fraction = checked_validation(224, 256, None, kind(0.875), "ffcv").fraction
        assert type(fraction) is float and fraction == 0.875


def test_a_mode_and_interpolation_given_as_numpy_strings_are_kept_as_the_plain_str():
    """As picked from a numpy array of choices: the str they equal, as a split is (a state holds no numpy)."""
    validation = checked_validation(224, val_crop_mode=np.str_("squash"), val_interpolation=np.str_("bicubic"))
    assert (type(validation.mode), type(validation.interpolation)) == (str, str)


@pytest.mark.parametrize("val, refused", [
    ({"val_resize": 256, "val_crop_fraction": 0.875}, "val_resize=256 and val_crop_fraction=0.875 both set"),
    ({"val_resize": 256, "val_crop_mode": "ffcv"}, "val_resize=256 with val_crop_mode='ffcv'"),
    ({"val_crop_mode": "letterbox"}, "val_crop_mode must be one of center, squash, border, ffcv, not 'letterbox'"),
    ({"val_interpolation": "nearest"}, "val_interpolation must be one of bilinear, bicubic, area, not 'nearest'"),
    ({"val_crop_fraction": 0}, "val_crop_fraction must be more than 0"),
    ({"val_crop_fraction": 1.2, "val_crop_mode": "ffcv"}, "val_crop_fraction must be at most 1"),
    ({"val_crop_fraction": 225}, "val_crop_fraction must be at most 224"),  # a resize of no pixel
    ({"val_crop_fraction": True}, "val_crop_fraction must be a number"),
    # a resize past int64's arithmetic overflowed in the first batch, a traceback
    ({"val_resize": 10 ** 20}, "val_resize must be at most 131072"),
    ({"val_crop_fraction": 1e-300}, "val_crop_fraction makes validation's resize floor(224 / 1e-300), more than "
                                    "131072 px: give a fraction of at least 224 / 131072"),
    ({"val_crop_fraction": 1e-320}, "val_crop_fraction makes validation's resize"),  # 224 / it is infinite
    ({"val_crop": (224, 256), "val_crop_fraction": 1e-300}, "val_crop_fraction makes validation's resize"),
    # each bound of a side, and of a resize, refused one past it (the last taken: the test after this one)
    ({"val_crop": 0}, "val_crop must be at least 1, not 0"),
    ({"val_crop": MAX_IMAGE_SIZE + 1}, f"val_crop must be at most {MAX_IMAGE_SIZE}"),
    ({"val_crop": (0, 224)}, "val_crop's height must be at least 1"), ({"val_crop": (224, 0)}, "val_crop's width must "
                                                                                              "be at least 1"),
    ({"val_crop": (MAX_IMAGE_SIZE + 1, 224)}, f"val_crop's height must be at most {MAX_IMAGE_SIZE}"),
    ({"val_crop": (224, MAX_IMAGE_SIZE + 1)}, f"val_crop's width must be at most {MAX_IMAGE_SIZE}"),
    ({"val_resize": MAX_VAL_RESIZE + 1}, f"val_resize must be at most {MAX_VAL_RESIZE}"),
    # a non-square crop's fraction divides its shorter side, which a fraction past it resizes to no pixel
    ({"val_crop": (224, 192), "val_crop_fraction": 193}, "val_crop_fraction must be at most 192"),
    ({"val_crop": (192, 224), "val_crop_fraction": 193}, "val_crop_fraction must be at most 192"),
    # a non-square crop has no one resize, nor FFCV's square crop
    ({"val_crop": (224, 192), "val_resize": 256}, "val_crop=(224, 192), not square, with val_resize=256"),
    ({"val_crop": (224, 192), "val_crop_mode": "ffcv"}, "val_crop=(224, 192), not square, with val_crop_mode='ffcv'"),
])
def test_conflicting_or_bad_validation_arguments_are_refused_in_one_line(val, refused):
    from train.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        checked_validation(224, **val)
    assert refused in str(error.value) and "\n" not in str(error.value)


def test_the_bounds_of_validations_sides_and_resize_are_taken():
    """The last values the refusals above leave: a side of 1 or the decoder's largest, the largest resize, a
    fraction of a non-square crop's shorter side, and a square pair with a resize (the one side it is)."""
    assert checked_validation(224, 1).shape == (1, 1)
    assert checked_validation(224, MAX_IMAGE_SIZE).shape == (MAX_IMAGE_SIZE, MAX_IMAGE_SIZE)
    assert checked_validation(224, (1, MAX_IMAGE_SIZE)).shape == (1, MAX_IMAGE_SIZE)
    assert checked_validation(224, (MAX_IMAGE_SIZE, 1)).shape == (MAX_IMAGE_SIZE, 1)
    assert checked_validation(224, val_resize=MAX_VAL_RESIZE).resize == MAX_VAL_RESIZE
    assert checked_validation(224, val_crop_fraction=224 / MAX_VAL_RESIZE).resize == MAX_VAL_RESIZE  # (exact)
    assert checked_validation(224, (224, 192), val_crop_fraction=192).shape == (224, 192)
    assert checked_validation(224, (224, 224), val_resize=256) == checked_validation(224, 224, val_resize=256)


def test_validation_of_a_ramp_crops_at_its_last_size_by_default():
    """The size the model ends training at, whether the ramp grows or shrinks to it (not its first, nor its
    largest)."""
    for ramp in (ResolutionRamp(32, 64, 0, 2), ResolutionRamp(64, 32, 0, 2)):
        assert checked_validation(ramp).shape == (ramp.end, ramp.end)
