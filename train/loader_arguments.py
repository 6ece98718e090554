"""The loader's arguments, checked before anything is read: each a plain value of its kind, or one
ConfigError line naming the argument (carried as data: train/errors.py) and what to give instead.
Pure but for the device check, which asks torch what this process sees. ImageNetLoader
(train/imagenet_loader.py) calls them; `python -m train` asks two of them before a run starts
(train/run/config.py's library_problem)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping

import torch

from shards.paths import EVAL_SPLITS
from shards.plan import even_split, steps_per_epoch
from train.accelerators import XPU_TORCH, device_count, platform
from train.augment.choices import Augment
from train.cluster import DistEnv
from train.decoder import INTERPOLATIONS, MAX_IMAGE_SIZE
from train.device_batches import Channels
from train.device_types import ACCELERATORS, VISIBLE_DEVICES
from train.errors import ConfigError, about
from train.loader import DECODES
from train.numbers import optional, real_number, real_triple, whole_number
from train.transforms import (FFCV_CROP_FRACTION, IMAGENET_FILL, IMAGENET_MEAN, IMAGENET_STD, VAL_CROP_MODES,
                              ResolutionRamp, ValTransform, default_resize)


DEVICE, PLACE = {"device": "device"}, {"rank": "rank", "world_size": "world_size"}  # the arguments errors name


def checked_root(root) -> Path:
    """The dataset's folder as an absolute path: the one checked here is the one read, after a chdir too. A leading
    `~` is the home, as torchvision's datasets take it (a str in Python goes through no shell to expand it)."""
    # a path of bytes (os.PathLike's may be) is not one pathlib takes: a TypeError deep in it
    if not isinstance(root, (str, os.PathLike)) or isinstance(os.fspath(root), bytes):
        raise ConfigError(f"{{root}} must be the folder `python -m prepare` wrote (its --dest), a str or a path, not "
                          f"{root!r}", {"root": "root"})
    return Path(root).expanduser().absolute()


def check_split(split: str, splits: Mapping) -> str:
    """`split` as a plain str (a numpy string would not pass torch.load(weights_only=True) in a state):
    one of the dataset's, train, val, and the evaluation sets it was prepared with."""
    if split in splits:
        return str(split)
    missing = (f"; {split} is an evaluation set this dataset was not prepared with (python -m prepare --eval-source)"
               if split in EVAL_SPLITS else "")
    raise ConfigError(f"{{split}} must be one of {', '.join(splits)}, not {split!r}{missing}", {"split": "split"})


def checked_image_size(image_size) -> int | ResolutionRamp:
    if isinstance(image_size, ResolutionRamp):
        if image_size.largest > MAX_IMAGE_SIZE:
            raise ConfigError(f"{{image_size.ramp}} reaches {image_size.largest} px, more than {MAX_IMAGE_SIZE}",
                              {"image_size.ramp": "image_size's ramp"})
        return image_size
    return whole_number("image_size", image_size, least=1, most=MAX_IMAGE_SIZE)


def largest_size(image_size: int | ResolutionRamp) -> int:
    return image_size if isinstance(image_size, int) else image_size.largest


def checked_validation(image_size: int | ResolutionRamp, val_crop=None, val_resize=None, val_crop_fraction=None,
                       val_crop_mode: str = "center", val_interpolation: str = "bilinear",
                       mean: tuple[float, float, float] | None = None) -> ValTransform:
    """Validation's transform from the loader's val_* arguments: the crop by default the training
    size (a ramp's last); the resize given, or floor(crop / fraction) as timm's crop_pct makes it (a
    fraction above 1, timm's volo_d5_512's 1.15, makes it smaller than the crop: padded), or the classic
    ratio (256 for 224); "ffcv" keeps a fraction of the short side (FFCV's 224/256 by default) and has no
    resize; "border" pads with `mean`'s colour (timm's round(255 x mean); None: ImageNet's). A combination
    that sets one thing twice is refused, naming both."""
    mode = choice("val_crop_mode", val_crop_mode, VAL_CROP_MODES)
    interpolation = choice("val_interpolation", val_interpolation, INTERPOLATIONS)
    check_val_conflicts(val_resize, val_crop_fraction, mode)
    default = image_size if isinstance(image_size, int) else image_size.end
    height, crop = (default, default) if val_crop is None else crop_shape(val_crop, mode, val_resize)
    # FFCV's fraction is a share of the short side; timm's crop_pct divides the crop (at most its shorter side: a
    # resize of at least a pixel)
    most = 1 if mode == "ffcv" else min(height, crop)
    fraction = optional(real_number, "val_crop_fraction", val_crop_fraction, above=0, most=most)
    if mode == "ffcv":
        return ValTransform(crop, None, FFCV_CROP_FRACTION if fraction is None else fraction, mode, interpolation)
    fill = padding_fill(mean) if mode == "border" else (0, 0, 0)
    if height != crop:  # timm's scale_size: each side's own floor(side / crop_pct)
        return ValTransform(crop, val_resize_of(crop, None, fraction), None, mode, interpolation, fill, height,
                            val_resize_of(height, None, fraction))
    return ValTransform(crop, val_resize_of(crop, val_resize, fraction), None, mode, interpolation, fill)


def crop_shape(val_crop, mode: str, val_resize) -> tuple[int, int]:
    """(height, width) of val_crop: one side, or (height, width) as timm's input_size ends (a square pair is
    the one side). A non-square output is resized by val_crop_fraction (timm's scale_size), not val_resize,
    and not in FFCV's mode, whose crop is square."""
    if isinstance(val_crop, (tuple, list)) and len(val_crop) == 2:
        height = whole_number("val_crop", val_crop[0], least=1, most=MAX_IMAGE_SIZE, said="val_crop's height")
        width = whole_number("val_crop", val_crop[1], least=1, most=MAX_IMAGE_SIZE, said="val_crop's width")
        if height != width and (mode == "ffcv" or val_resize is not None):
            given = "{val_crop_mode}='ffcv' (a square crop)" if mode == "ffcv" else f"{{val_resize}}={val_resize!r}"
            raise ConfigError(f"{{val_crop}}=({height}, {width}), not square, with {given}: a non-square output is "
                              "resized by {val_crop_fraction} (timm's crop_pct of each side), in the center, squash or "
                              "border mode", VAL_ARGUMENTS)
        return height, width
    if isinstance(val_crop, (tuple, list)):  # (told "must be a whole number", one would not guess a pair is taken)
        raise ConfigError(f"{{val_crop}} is one side or (height, width), not {val_crop!r}"
                          + timm_input_size(val_crop), {"val_crop": "val_crop"})
    side = whole_number("val_crop", val_crop, least=1, most=MAX_IMAGE_SIZE)
    return side, side


def timm_input_size(val_crop: tuple | list) -> str:
    """What a refusal of `val_crop` adds where it is timm's input_size (3, H, W) as its data config has it."""
    if len(val_crop) == 3 and val_crop[0] == 3:
        return f": timm's input_size (3, H, W) is val_crop=(H, W), here {tuple(val_crop[1:])!r}"
    return ""


def padding_fill(mean: tuple[float, float, float] | None) -> tuple[int, int, int]:
    """timm's border fill: [round(255 * v) for v in mean] (ImageNet's mean: 124, 116, 104)."""
    return IMAGENET_FILL if mean is None else tuple(min(255, max(0, round(255 * v))) for v in mean)


# The largest validation Resize: far past any use (a photo's short side zoomed to it, then cropped), and the
# geometry's int64 arithmetic of larger ones (a val_crop_fraction of 1e-300) overflowed in the first batch
MAX_VAL_RESIZE = 16 * MAX_IMAGE_SIZE


def val_resize_of(crop: int, val_resize, fraction: float | None) -> int:
    """Resize's size before CenterCrop(crop): given, or timm's floor(crop / crop_pct) (its
    transforms_imagenet_eval, the same float division), or the classic ratio."""
    if val_resize is not None:
        return whole_number("val_resize", val_resize, least=1, most=MAX_VAL_RESIZE)
    if fraction is None:
        return default_resize(crop)
    if crop / fraction > MAX_VAL_RESIZE:
        raise about("val_crop_fraction", None, f"makes validation's resize floor({crop} / {fraction}), more than "
                    f"{MAX_VAL_RESIZE} px: give a fraction of at least {crop} / {MAX_VAL_RESIZE}")
    return math.floor(crop / fraction)


VAL_ARGUMENTS = {name: name for name in ("val_crop", "val_resize", "val_crop_fraction", "val_crop_mode")}


def check_val_conflicts(val_resize, val_crop_fraction, mode: str) -> None:
    """val_resize and val_crop_fraction both set the resize; FFCV's crop has no resize step."""
    if val_resize is not None and val_crop_fraction is not None:
        raise ConfigError(f"{{val_resize}}={val_resize!r} and {{val_crop_fraction}}={val_crop_fraction!r} both set "
                          "validation's resize (Resize(floor({val_crop} / {val_crop_fraction})), timm's crop_pct): give "
                          "one of them", VAL_ARGUMENTS)
    if val_resize is not None and mode == "ffcv":
        raise ConfigError(f"{{val_resize}}={val_resize!r} with {{val_crop_mode}}='ffcv', which resizes no whole image "
                          "(it keeps {val_crop_fraction} of the short side, resized to {val_crop}): leave {val_resize} "
                          "out, or use {val_crop_mode} 'center'", VAL_ARGUMENTS)


def choice(name: str, value, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise about(name, None, f"must be one of {', '.join(choices)}, not {value!r}")
    return str(value)  # a numpy string as the plain str it equals


def checked_augment(augment) -> Augment:
    if augment is None:
        return Augment()
    if not isinstance(augment, Augment):
        raise ConfigError(f"{{augment}} must be a train.Augment (or None), not {augment!r}", {"augment": "augment"})
    return augment


def check_only_train_augments(split: str, augment: Augment, repeats: int, fixed_shape: bool = False) -> None:
    """Augmentation, repeats and fixed_shape act on train passes only: given to another split they would be
    ignored, which hides a mistake (a val loader meant to be the train one, or one meant to keep a compiled
    model's shapes, whose last batch is partial all the same)."""
    if split == "train":
        return
    given = [name for name, ignored in (("augment", augment.changes_batches), ("repeats", repeats != 1),
                                        ("fixed_shape", fixed_shape)) if ignored]
    if given:
        raise ConfigError(" and ".join("{" + name + "}" for name in given) + f" would be ignored by the {split} split "
                          "(they act on train only): leave them out, or make the train loader with them and take this "
                          f"one with loader.with_split({split!r})", {name: name for name in given})


def check_repeats(repeats: int, samples: int, world_size: int, batch_size: int) -> None:
    """Each rank reads an epoch's whole batches (steps x batch_size samples) as distinct samples each
    read `repeats` times over the ranks (RASampler's rule): more readings than a rank reads leaves
    not even one distinct sample per rank."""
    per_rank = steps_per_epoch(samples, world_size, batch_size) * batch_size
    if repeats > per_rank:
        raise about("repeats", None, f"is more than the {per_rank} train samples each rank reads an epoch "
                    f"({samples} over {world_size} rank(s) in whole batches of {batch_size}): use at most {per_rank}",
                    note=f"={repeats}")


def check_decode(decode: str) -> None:
    if decode not in DECODES:
        raise about("decode", None, f"must be one of {', '.join(DECODES)}, not {decode!r}")


def check_device_decode(decode: str, device: torch.device, hip: str | None) -> None:
    """decode='gpu' is NVIDIA's (nvJPEG, through nvImageCodec): on Intel's GPUs, or AMD's (ROCm's torch, whose
    device type is "cuda" too), it is refused in one line; the CPU decode feeds every device. On the CPU it runs the
    same path, for testing. `hip`: torch.version.hip. Pure."""
    if decode != "gpu" or device.type == "cpu" or (device.type == "cuda" and not hip):
        return
    where = f"AMD's GPUs (ROCm {hip})" if device.type == "cuda" else f"{platform(device)} ({device})"
    raise ConfigError("{decode} gpu is NVIDIA's JPEG decode (nvJPEG, through nvImageCodec), which " + where
                      + " does not have: use {decode} cpu, the decode that feeds every device", {"decode": "decode"})


def check_dtype(dtype, augment: Augment) -> None:
    """A floating dtype, or uint8 where nothing makes floats (random erasing fills with the
    normalised 0, MixUp/CutMix blend images)."""
    if dtype == torch.uint8:
        floats = [name for name, on in (("random erasing", augment.erasing > 0), ("MixUp/CutMix", augment.mixing))
                  if on]
        if floats:
            raise ConfigError(f"{{dtype}}=torch.uint8 cannot hold what {' and '.join(floats)} make (floats, after "
                              "normalisation): use a floating dtype, or leave them out of {augment}",
                              {"dtype": "dtype", "augment": "augment"})
        return
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ConfigError(f"{{dtype}} must be a floating-point torch dtype (torch.float32, torch.bfloat16, ...) or "
                          f"torch.uint8 (not normalised), not {dtype!r}", {"dtype": "dtype"})


def checked_normalisation(dtype, mean, std) -> tuple[Channels | None, Channels | None]:
    """(mean, std) in 0-1 units as plain floats (ImageNet's where None); (None, None) for uint8
    output, which is not normalised: a mean or std given with it would be ignored."""
    if dtype == torch.uint8:
        if mean is not None or std is not None:
            raise ConfigError("{mean} and {std} would be ignored with {dtype}=torch.uint8 (its images are not "
                              "normalised): leave them out, or use a floating dtype",
                              {"mean": "mean", "std": "std", "dtype": "dtype"})
        return None, None
    try:
        mean = IMAGENET_MEAN if mean is None else real_triple("mean", mean, least=0, most=1)
        std = IMAGENET_STD if std is None else real_triple("std", std, above=0, most=1)
    except ConfigError as error:
        raise ConfigError(error.template + " (mean and std are in 0-1 units, as torchvision's Normalize after "
                          f"ToTensor: ImageNet's are {IMAGENET_MEAN} and {IMAGENET_STD})", error.arguments) from None
    return mean, std


def checked_device(device) -> torch.device:
    """The device, checked now rather than at the first batch, deep inside torch."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exn:
        gist = (str(exn).strip().splitlines() or [type(exn).__name__])[0]  # (torch's TypeError lists its overloads)
        raise ConfigError(f"{{device}} {device!r} is not a torch device ({gist}): give 'cuda', 'cuda:N', 'xpu' or "
                          "'cpu'", DEVICE) from None
    if device.type == "meta":
        raise ConfigError("{device} 'meta' holds no data: give the device the model trains on ('cuda', 'cuda:N', "
                          "'xpu', 'cpu')", DEVICE)
    if device.type not in ACCELERATORS:
        return device
    count = device_count(device.type)
    if count == 0:
        raise ConfigError("{device} " + no_device_seen(device), DEVICE)
    if device.index is not None and device.index >= count:
        raise ConfigError("{device} " + past_the_devices_seen(device, count), DEVICE)
    return device


def past_the_devices_seen(device: torch.device, count: int) -> str:
    """Why an index past the `count` devices this process sees cannot be used, and which to use. Where it sees one,
    its own (srun --gpus-per-task, or a binding per task), that one is index 0 whatever its LOCAL_RANK: advising
    KIND:LOCAL_RANK there repeated the mistake. Pure."""
    kind, seen = device.type, VISIBLE_DEVICES[device.type]
    if count == 1:
        return (f"{str(device)!r}, but this process sees one GPU alone, {kind}:0 ({seen} renumbers them: each "
                f"process given a GPU of its own sees it as index 0): use '{kind}:0'")
    return (f"{str(device)!r}, but this process sees {count} GPUs, {kind}:0 to {kind}:{count - 1} ({seen} "
            f"renumbers them): use {kind}:LOCAL_RANK, this node's rank (not RANK, the job's)")


def no_device_seen(device: torch.device) -> str:
    """Why an accelerator's device cannot be used in this process, and what to do, in one line, after the
    argument's name. Pure."""
    if device.type == "xpu":
        return (f"{str(device)!r}, but this torch sees no Intel GPU (torch.xpu.is_available() is False): on a "
                f"node with Intel GPUs, install torch's XPU build ({XPU_TORCH}); elsewhere use device='cpu'")
    return (f"{str(device)!r}, but torch sees no {device.type.upper()} GPU in this process "
            f"(torch.{device.type}.is_available() is False): use device='cpu', or run where a GPU is visible")


def place_of(rank, world_size, env: DistEnv | None) -> tuple[int, int, bool]:
    """(rank, world size, whether they were given): given, or the process's (`env`: cluster.process_env)."""
    if rank is None and world_size is None:
        assert env is not None
        return env.rank, env.world_size, False
    if rank is None or world_size is None:
        raise ConfigError(f"{{rank}} and {{world_size}} go together (or neither: torch.distributed's, or the "
                          f"launcher's), not rank={rank!r}, world_size={world_size!r}", PLACE)
    rank, world_size = whole_number("rank", rank, least=0), whole_number("world_size", world_size, least=1)
    if rank >= world_size:
        raise ConfigError(f"{{rank}} and {{world_size}} go together, 0 <= rank < world_size, not rank={rank}, "
                          f"world_size={world_size}", PLACE)
    return rank, world_size, True


def check_buffers_fit(batch_size: int, side: int, ring: int, ranks_here: int, limit: int | None) -> None:
    """Refuse batch buffers the node cannot hold. decode='cpu' keeps a ring of `ring` batches of side x side images
    (uint8; pinned for a GPU) a rank, and so does every rank on the node (`ranks_here`). Made past the memory the
    node lets the process hold (`limit`: shards.resources.memory_limit; None, not known: not checked), their pages
    stayed untouched until decoded into, and the kernel killed the run at its first batches without a word. Only
    the hopeless is refused: the model and the batches on their way need memory besides. A limit, not what is free
    now: every rank of the node decides alike (one refusing alone would leave the others waiting for it). Pure."""
    image = side * side * 3
    need = ring * batch_size * image * ranks_here
    if limit is None or need <= limit:
        return
    fits = limit // (ring * image * ranks_here)
    fix = (f"lower {{batch_size}} to at most {fits}" if fits else "lower {image_size}") + (
        " or run fewer ranks a node" if ranks_here > 1 else "")
    raise ConfigError(f"{{batch_size}} {batch_size} of {side} px images needs {need / 1e9:.1f} GB of batch buffers "
                      f"({ring} batches a rank, {ranks_here} rank{'s' if ranks_here > 1 else ''} on this node), more "
                      f"than the {limit / 1e9:.1f} GB of memory the node lets this job hold: {fix}",
                      {"batch_size": "batch_size", "image_size": "image_size"})


def epoch_length(split: str, samples: int, world_size: int, batch_size: int, rank: int) -> int:
    """Batches rank `rank` yields in a whole epoch (shards.plan): train whole global batches,
    the same on every rank; val the rank's even share, its last batch partial."""
    if split == "train":
        return steps_per_epoch(samples, world_size, batch_size)
    start, stop = even_split(samples, world_size, rank)
    return -(-(stop - start) // batch_size)


def check_has_batches(split: str, samples: int, world_size: int, batch_size: int) -> None:
    """An epoch with no batch on a rank is a mistake, not an empty loop (whose loss is never set). Decided from
    what every rank knows alike, never from the rank: a rank that refused alone would leave the others waiting
    for it in their first collective."""
    if split == "train" and steps_per_epoch(samples, world_size, batch_size) == 0:
        fix = (f"lower {{batch_size}} to at most {samples // world_size} (or use fewer ranks)" if samples >= world_size
               else f"use at most {samples} ranks")
        raise ConfigError(f"{samples} train samples over {world_size} rank(s) make no batch of {batch_size} per rank: "
                          + fix, {"batch_size": "batch_size"})
    if split != "train" and samples < world_size:  # even_split: ranks samples.. get none
        empty = f"rank {samples}" if samples == world_size - 1 else f"ranks {samples} to {world_size - 1}"
        raise ConfigError(f"{samples} {split} samples over {world_size} ranks leave {empty} none: use at most "
                          f"{samples} ranks for validation")
