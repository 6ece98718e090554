"""Which crop and which flip: pure functions of (seed, epoch, sample key), drawn for a whole batch.

Train: torchvision's RandomResizedCrop (scale 0.08-1, aspect ratio 3/4-4/3, ten tries, then the
centre crop) and a horizontal flip with probability 1/2, vectorised over the batch with numpy. The
random numbers come from a counter-based generator (splitmix64) keyed by the sample's 64-bit key
hash and a per-epoch seed, so a sample's augmentation does not depend on which thread decodes it,
on the batch it falls in, or on a resume; each reading of a repeated sample has a key of its own
(`repeat_keys`), which its crop, flip and augmentation (train/augment/draws.py) are drawn from.

Validation (`ValTransform`), one of four geometries, each as the box in source pixels that is
resized in one step to crop x crop, or, where the resized image is smaller than the crop along an
axis, to a region of it, the rest padding (`placements`):
- "center": torchvision's Resize(resize) + CenterCrop(crop) (the evaluation preset; 256 and 224
  classically, 232 and 224 in torchvision's V2 recipe), and timm's crop_mode "center" (resize =
  floor(crop / crop_pct)): the box that the resize grid and the crop's integer offset keep, so
  that the one-step resize samples at the whole image's resize positions with its filter; a resize
  smaller than the crop (timm's crop_pct above 1: volo_d5_512's 1.15) pads with black, as
  CenterCrop pads;
- "squash": timm's crop_mode "squash", Resize((resize, resize)) (the aspect ratio not kept) +
  CenterCrop(crop), on its grid the same way;
- "border": timm's crop_mode "border", ResizeKeepRatio(resize, longest=1) (the longer side to
  resize, the ratio kept) + CenterCropOrPad(crop) padding with the mean's colour (`fill`): the
  whole image letterboxed;
- "ffcv": FFCV's CenterCropRGBImageDecoder, the centre square of int(fraction x the short side)
  pixels at integer offsets, resized to crop x crop (its DEFAULT_CROP_RATIO: 224/256), decoded as
  its imdecode decodes, with libjpeg-turbo's fast integer IDCT (`fast_dct`).
The filter (bilinear, bicubic, area) is the decoder's (train/decoder.py: INTERPOLATIONS).

Boxes are (left, top, right, bottom) in source pixels, float32; the decoder (train/decoder.py)
or the device (train/device_decode.py, which decodes each box's `decode_windows`) resizes each box
to size x size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shards.plan import seeded_rng
from train.errors import ConfigError
from train.numbers import whole_number

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
RESIZE_FOR_CROP = 256 / 224  # the classic evaluation's resize for a crop: Resize(256) for CenterCrop(224)
VAL_CROP_MODES = ("center", "squash", "border", "ffcv")  # validation's geometries: see the module's docstring
IMAGENET_MEAN = (0.485, 0.456, 0.406)  # ImageNet's normalisation (torchvision's and timm's defaults)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET_FILL = tuple(round(255 * v) for v in IMAGENET_MEAN)  # timm's border padding for it: (124, 116, 104)
FFCV_CROP_FRACTION = 224 / 256  # FFCV's DEFAULT_CROP_RATIO: the centre square's share of the short side
TRIES = 10  # RandomResizedCrop's attempts before the centre-crop fallback
DRAWS = 2 * TRIES + 3  # uniforms per sample: (area, log ratio) per try, top, left, flip

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Vigna's splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def epoch_key(seed: int, epoch: int, stream: str = "augment") -> np.uint64:
    """An augmentation stream of an epoch: "augment" for the crop and flip, "policy" and "erasing"
    for the rest, so that turning a policy on does not change a sample's crop (all independent of the
    read plan's streams)."""
    return np.uint64(seeded_rng(seed, stream, epoch).getrandbits(64))


def uniforms(key_hashes: np.ndarray, seed: int, epoch: int, count: int, stream: str = "augment") -> np.ndarray:
    """(n, count) float64 in [0, 1): draw j of sample i depends only on (seed, epoch, stream, its key, j)."""
    streams = splitmix64(key_hashes.astype(np.uint64) ^ epoch_key(seed, epoch, stream))
    counters = np.arange(count, dtype=np.uint64) * _GOLDEN
    bits = splitmix64(streams[:, None] ^ counters[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


_REPEAT = np.uint64(0xD1B54A32D192ED03)  # mixes a repeat's index into its sample's key


def repeat_keys(key_hashes: np.ndarray, repeats: np.ndarray | None) -> np.ndarray:
    """The keys a sample's crop, flip and augmentation are drawn from: its key hash for its first (or
    only) reading, another for each repeat (repeated augmentation), so each repeat has its own."""
    keys = key_hashes.astype(np.uint64)
    if repeats is None:
        return keys
    mixed = splitmix64(keys ^ (repeats.astype(np.uint64) * _REPEAT))
    return np.where(repeats == 0, keys, mixed)


def random_resized_crops(widths: np.ndarray, heights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """torchvision's RandomResizedCrop.get_params for a batch, from u = uniforms(..., DRAWS).

    Returns float32 (n, 4) boxes (left, top, right, bottom) with integer corners, as torchvision's.
    """
    w, h = widths.astype(np.float64)[:, None], heights.astype(np.float64)[:, None]
    area = w * h * (SCALE[0] + (SCALE[1] - SCALE[0]) * u[:, :TRIES])
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[:, TRIES:2 * TRIES])
    cw, ch = np.rint(np.sqrt(area * aspect)), np.rint(np.sqrt(area / aspect))  # round half to even, as round()
    fits = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = fits.argmax(axis=1)
    rows = np.arange(len(u))
    found = fits[rows, first]
    cw, ch = cw[rows, first], ch[rows, first]
    w, h = w[:, 0], h[:, 0]
    top = np.floor(u[:, 2 * TRIES] * (h - ch + 1))
    left = np.floor(u[:, 2 * TRIES + 1] * (w - cw + 1))
    # none of the ten fit: the centre crop, clamped to the aspect ratios
    in_ratio = w / h
    fw = np.where(in_ratio > RATIO[1], np.rint(h * RATIO[1]), w)
    fh = np.where(in_ratio < RATIO[0], np.rint(w / RATIO[0]), h)
    cw, ch = np.where(found, cw, fw), np.where(found, ch, fh)
    top = np.where(found, top, (h - ch) // 2)
    left = np.where(found, left, (w - cw) // 2)
    return np.stack([left, top, left + cw, top + ch], axis=1).astype(np.float32)


def train_crops(key_hashes: np.ndarray, widths: np.ndarray, heights: np.ndarray, seed: int,
                epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """RandomResizedCrop boxes (float32 (n, 4)) and horizontal flips (bool (n,)) for a batch."""
    u = uniforms(key_hashes, seed, epoch, DRAWS)
    return random_resized_crops(widths, heights, u), u[:, 2 * TRIES + 2] < 0.5


@dataclass(frozen=True)
class ValTransform:
    """Validation's transform, resolved (the loader checks the arguments it comes from: see
    loader_arguments.checked_validation): `crop` the output side; `resize` the Resize of "center"
    (the short side), "squash" (both sides) or "border" (the long side), None for "ffcv"; `fraction`
    the share of the short side "ffcv" keeps, None for the others; `interpolation` the resize's
    filter; `fill` the padding's colour (RGB), where the resized image is smaller than the crop."""
    crop: int
    resize: int | None = None
    fraction: float | None = None
    mode: str = "center"
    interpolation: str = "bilinear"
    fill: tuple[int, int, int] = (0, 0, 0)
    # a non-square output (timm's input_size (3, H, W)): its height, and its resize's (None: square, `crop`, `resize`)
    crop_height: int | None = None
    resize_height: int | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """The output's (height, width)."""
        return (self.crop_height or self.crop, self.crop)

    @property
    def resize_shape(self) -> tuple[int, int]:
        """The resize's (height, width) target (of "squash" and "border", and of a non-square "center")."""
        return (self.resize_height or self.resize, self.resize)

    @property
    def square(self) -> bool:
        return self.crop_height is None or self.crop_height == self.crop

    def boxes(self, widths: np.ndarray, heights: np.ndarray) -> np.ndarray:
        """Each image's box in source pixels, float32 (n, 4)."""
        return self.placements(widths, heights)[0]

    def placements(self, widths: np.ndarray, heights: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(boxes, regions): each image's box in source pixels, float32 (n, 4), and the region of the
        crop x crop output it is resized to, int32 (n, 4): top, left, height, width, the rest `fill`;
        None where every image fills its output."""
        if self.mode == "ffcv":
            return ffcv_crops(widths, heights, self.fraction), None
        resize = self.resize_shape
        if self.mode == "squash":
            sizes = np.full(len(widths), resize[1], np.int64), np.full(len(widths), resize[0], np.int64)
        elif self.mode == "border":
            sizes = kept_ratio_sizes(widths, heights, resize, longest=True)
        elif self.square:  # torchvision's Resize(int): the short side, the long one int(...)
            sizes = resized_sizes(widths, heights, self.resize)
        else:  # timm's ResizeKeepRatio(scale_size): both sides at least their target's
            sizes = kept_ratio_sizes(widths, heights, resize, longest=False)
        return placed_on_grid(widths, heights, *sizes, self.shape)

    @property
    def fast_dct(self) -> bool:
        """FFCV's decoder decodes with libjpeg's fast integer IDCT (TJFLAG_FASTDCT): about a grey level
        from the accurate one on average, which the other references decode with."""
        return self.mode == "ffcv"

    def describe(self) -> str:
        """What it is, in torchvision's or FFCV's words, for the logs."""
        if self.mode == "ffcv":
            return (f"the centre {self.fraction:g} of the short side resized to {self.crop} ({self.interpolation}, "
                    "fast IDCT: FFCV's CenterCropRGBImageDecoder)")
        crop, resize_shape = self.crop if self.square else self.shape, self.resize_shape
        if self.mode == "border":
            resize = self.resize if self.square else resize_shape
            return (f"ResizeKeepRatio({resize}, {self.interpolation}, longest=1) + CenterCropOrPad({crop}, "
                    f"fill={list(self.fill)}) (timm's crop_mode border)")
        if self.mode == "center" and not self.square:
            return f"ResizeKeepRatio({resize_shape}, {self.interpolation}) + CenterCrop({crop})"
        resize = self.resize if self.mode == "center" else resize_shape
        return f"Resize({resize}, {self.interpolation}) + CenterCrop({crop})"


def crops(key_hashes: np.ndarray, widths: np.ndarray, heights: np.ndarray, augment: tuple[int, int] | None,
          validation: ValTransform | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(boxes, flips, regions) for a batch: train_crops with augment = (seed, epoch) (no regions: each
    fills its output), else validation's placements and no flips."""
    if augment is None:
        boxes, regions = validation.placements(widths, heights)
        return boxes, np.zeros(len(widths), bool), regions
    return (*train_crops(key_hashes, widths, heights, *augment), None)


def default_resize(crop: int) -> int:
    """The classic evaluation's Resize for a CenterCrop of `crop`: 256 for 224."""
    return round(crop * RESIZE_FOR_CROP)


def resized_sizes(widths: np.ndarray, heights: np.ndarray, resize: int) -> tuple[np.ndarray, np.ndarray]:
    """(width, height) after torchvision's Resize(resize): the shorter side `resize`, the longer
    int(resize * long / short), as its _compute_resized_output_size computes it."""
    w, h = widths.astype(np.int64), heights.astype(np.int64)
    short, long = np.minimum(w, h), np.maximum(w, h)
    new_long = np.floor((resize * long) / short.astype(np.float64)).astype(np.int64)  # int() of a positive float
    return np.where(w <= h, resize, new_long), np.where(w <= h, new_long, resize)


def centre_crops(widths: np.ndarray, heights: np.ndarray, resize: int, crop: int) -> np.ndarray:
    """The box, in source pixels, that torchvision's Resize(resize) + CenterCrop(crop) keeps, on
    their grid (placed_on_grid's; resize >= crop)."""
    return placed_on_grid(widths, heights, *resized_sizes(widths, heights, resize), crop)[0]


def kept_ratio_sizes(widths: np.ndarray, heights: np.ndarray, resize: tuple[int, int], longest: bool
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(width, height) after timm's ResizeKeepRatio((height, width) `resize`, longest=1 or 0): both sides
    divided by the larger (longest) or the smaller of side / target, each rounded (round half to even, as
    its round()): the image fits inside the target, or covers it. A side is at least a pixel: letterboxed, an
    image more than twice as long as the target per pixel of its width (1 x 1000 into 224) would round to
    none, which timm's resize refuses (a ValueError) and no output can hold; it keeps its one pixel."""
    w, h = widths.astype(np.float64), heights.astype(np.float64)
    by_width, by_height = w / resize[1], h / resize[0]
    ratio = np.maximum(by_width, by_height) if longest else np.minimum(by_width, by_height)
    return (np.maximum(np.rint(w / ratio), 1).astype(np.int64),
            np.maximum(np.rint(h / ratio), 1).astype(np.int64))


def placed_on_grid(widths: np.ndarray, heights: np.ndarray, new_w: np.ndarray, new_h: np.ndarray,
                   crop: int | tuple[int, int]) -> tuple[np.ndarray, np.ndarray | None]:
    """(boxes, regions) of a resize to new_w x new_h then CenterCrop(crop) (timm's CenterCropOrPad; a pair:
    (height, width)), axis by axis on their grid. An axis at least `crop` long is cropped: CenterCrop's integer
    offset (round half to even, as round()) in the resized image, mapped back through the axis's own scale
    (source / resized), the whole output's side, so that resizing the box samples at the whole image's resize
    positions with its filter. A shorter axis is padded: the whole source axis, resized to its own length at
    offset (crop - new) // 2 of the output (CenterCrop's padding). Regions None where no axis is padded."""
    crop_h, crop_w = (crop, crop) if isinstance(crop, int) else crop
    boxes, regions = [], []
    for source, new, side in ((widths, new_w, crop_w), (heights, new_h, crop_h)):
        new = new.astype(np.int64)
        offset = np.where(new >= side, np.rint((new - side) / 2.0), 0.0)
        scale = source / new.astype(np.float64)
        kept = np.minimum(new, side)
        boxes.append((offset * scale, (offset + kept) * scale))
        regions.append(((side - kept) // 2, kept))
    (left, right), (top, bottom) = boxes
    box = np.stack([left, top, right, bottom], axis=1).astype(np.float32)
    (x, width), (y, height) = regions
    if (width == crop_w).all() and (height == crop_h).all():
        return box, None
    return box, np.stack([y, x, height, width], axis=1).astype(np.int32)


def ffcv_crops(widths: np.ndarray, heights: np.ndarray, fraction: float) -> np.ndarray:
    """FFCV's get_center_crop: the centre square of int(fraction x the short side) pixels (at least
    one), at the integer offsets (side - c) // 2."""
    w, h = widths.astype(np.int64), heights.astype(np.int64)
    c = np.maximum(np.floor(fraction * np.minimum(w, h)).astype(np.int64), 1)  # int() of a positive float
    top, left = (h - c) // 2, (w - c) // 2
    return np.stack([left, top, left + c, top + c], axis=1).astype(np.float32)


FILTER_REACH = {"bilinear": 1, "bicubic": 2, "area": 1}  # the filter's support at scale 1, in source pixels


def decode_windows(boxes: np.ndarray, widths: np.ndarray, heights: np.ndarray, size: int,
                   interpolation: str = "bilinear") -> tuple[np.ndarray, np.ndarray]:
    """What decode='gpu' decodes of each image: (windows int32 (n, 4), boxes float32 (n, 4) within
    them). A window is the box grown by the resize filter's support (FILTER_REACH x max(1, box /
    size) source pixels; area's cells stay inside the box, so bilinear's margin is room to spare)
    plus one pixel for the chroma upsampling at its edges, clamped to the image, so that resizing the
    box inside its window gives what resizing it inside the whole image gives."""
    w, h = widths.astype(np.float64), heights.astype(np.float64)
    reach = FILTER_REACH[interpolation]
    margin_x = np.ceil(reach * np.maximum((boxes[:, 2] - boxes[:, 0]) / size, 1)) + 1
    margin_y = np.ceil(reach * np.maximum((boxes[:, 3] - boxes[:, 1]) / size, 1)) + 1
    left = np.clip(np.floor(boxes[:, 0]) - margin_x, 0, w)
    top = np.clip(np.floor(boxes[:, 1]) - margin_y, 0, h)
    right = np.clip(np.ceil(boxes[:, 2]) + margin_x, 0, w)
    bottom = np.clip(np.ceil(boxes[:, 3]) + margin_y, 0, h)
    windows = np.stack([left, top, right, bottom], axis=1).astype(np.int32)
    inside = boxes - np.stack([left, top, left, top], axis=1)
    return windows, inside.astype(np.float32)


@dataclass(frozen=True)
class ResolutionRamp:
    """A training crop size that changes with the epoch, as FFCV's progressive resizing: `start` px
    up to `start_epoch`, `end` px from `end_epoch`, in between linear, rounded to a multiple of `step`
    (FFCV's get_resolution, line for line)."""
    start: int
    end: int
    start_epoch: int
    end_epoch: int
    step: int = 32

    def __post_init__(self):
        for name, least in (("start", 1), ("end", 1), ("step", 1), ("start_epoch", 0), ("end_epoch", self.start_epoch)):
            object.__setattr__(self, name, whole_number(f"ramp.{name}", getattr(self, name), least=least,
                                                        said=f"the resolution ramp's {name}"))
        if min(self.extremes()) < 1:
            raise ConfigError(f"{self} rounds some epochs to 0 px: give sizes of at least one step")

    def size(self, epoch: int) -> int:
        if epoch <= self.start_epoch:
            return self.start
        if epoch >= self.end_epoch:
            return self.end
        between = np.interp([epoch], [self.start_epoch, self.end_epoch], [self.start, self.end])[0]
        return int(np.round(between / self.step)) * self.step

    def sizes(self) -> list[int]:
        """Each size the ramp trains at, once, in the order of the epochs from start_epoch to end_epoch (before and
        after: the ends). Each run of epochs at one size is skipped by bisection, not walked: asking every epoch's
        size, a ramp from 32 to 64 px ending at epoch 99,999,999,999 hung the run's start."""
        sizes, epoch = [], self.start_epoch
        while epoch <= self.end_epoch:
            sizes.append(self.size(epoch))
            epoch = self.last_epoch_at(sizes[-1], epoch) + 1
        return sizes

    def last_epoch_at(self, size: int, epoch: int) -> int:
        """The last epoch from `epoch` (at `size`) to end_epoch still at `size`. The epochs at one size are
        consecutive (the size is monotone between the ends, and an end off the step's multiples is its epoch's
        alone), so the first epoch at another size is bisected."""
        low, high = epoch, self.end_epoch
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.size(middle) == size else (low, middle - 1)
        return low

    def extremes(self) -> list[int]:
        """The sizes of the ends and of the epochs next to them, which hold the smallest and the largest: the size
        is monotone in the epoch between the ends. Not every epoch's: an end_epoch of 10**9 ran for hours."""
        epochs = {self.start_epoch, self.start_epoch + 1, self.end_epoch - 1, self.end_epoch}
        return [self.size(epoch) for epoch in sorted(epochs) if self.start_epoch <= epoch <= self.end_epoch]

    @property
    def largest(self) -> int:
        """The largest size of any epoch (rounding to the step may pass the larger end)."""
        return max(self.extremes())
