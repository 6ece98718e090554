"""The model a run trains: a torchvision classification model by name, or your own by import path.

    --arch resnet50                         torchvision.models.get_model("resnet50", num_classes=...)
    --arch mymodels.vit:small_vit           mymodels/vit.py's small_vit(num_classes=...), found on
                                            PYTHONPATH or in the current directory
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

import torch
import torchvision

from train.errors import ConfigError


# torchvision's models with auxiliary classifiers, whose training-mode output is a namedtuple the loss cannot take
# (torchvision's reference trains neither): built without them, the main classifier's loss alone
WITHOUT_AUX_LOGITS = {arch: {"aux_logits": False, "init_weights": True} for arch in ("googlenet", "inception_v3")}


def build_model(arch: str, num_classes: int, image_size: int | None = None) -> torch.nn.Module:
    """A model with fresh weights for `num_classes` classes; ConfigError saying what to change where
    `arch` names none. `image_size`: the one size the run trains and validates at (None: several), which a
    Vision Transformer's position embeddings are made for."""
    if ":" in arch:
        return model_from_import_path(arch, num_classes)
    # torchvision's classification models alone: get_model builds its detection, segmentation, video and optical
    # flow models too (a traceback at the first step, or a download of a backbone's weights), and a ValueError of a
    # builder is its own refusal, not an unknown name
    names = torchvision.models.list_models(module=torchvision.models)
    if arch not in names:
        raise ConfigError(f"--arch {arch}: not a torchvision classification model (e.g. {', '.join(names[:8])} ...), "
                          "nor an import path package.module:callable")
    options = WITHOUT_AUX_LOGITS.get(arch, {}) | vit_size(arch, image_size)
    return torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **options)


def vit_size(arch: str, image_size: int | None) -> dict:
    """torchvision's Vision Transformers take images of one size, 224 unless told (their position embeddings):
    the run's, where it has one; a ConfigError where it trains or validates at several. Pure."""
    if not arch.startswith("vit_"):
        return {}
    if image_size is None:
        raise ConfigError(f"--arch {arch} takes images of one size (its position embeddings are made for it): train "
                          "and validate at one (--image-size S, a --val-crop of S or none, no --ramp)")
    patch = int(arch.rsplit("_", 1)[1])  # vit_b_16: 16 px patches
    if image_size % patch:
        raise ConfigError(f"--arch {arch} cuts images into {patch} px patches: give an --image-size that is a "
                          f"multiple of {patch}, not {image_size}")
    return {"image_size": image_size}


def model_from_import_path(arch: str, num_classes: int) -> torch.nn.Module:
    """`package.module:callable`, called with num_classes=...; the current directory is searched as
    `python -m` searches it, also where the launcher started the run elsewhere."""
    module_name, _, name = arch.partition(":")
    if not module_name or not name:
        raise ConfigError(f"--arch {arch}: an import path is package.module:callable, e.g. mymodels.vit:small_vit")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exn:
        if exn.name == module_name or module_name.startswith(f"{exn.name}."):  # it, not a module it imports
            raise ConfigError(f"--arch {arch}: no module {module_name} on PYTHONPATH or in {os.getcwd()}") from None
        raise
    make = getattr(module, name, None)
    if not callable(make):
        raise ConfigError(f"--arch {arch}: {module_name} has no callable {name}")
    if not takes_num_classes(make):  # its TypeError, in a traceback, said no more
        raise ConfigError(f"--arch {arch}: {name} takes no num_classes argument, which the run calls it with "
                          f"({name}(num_classes={num_classes})): give it one")
    model = make(num_classes=num_classes)
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"--arch {arch}: {name}(num_classes={num_classes}) returned a {type(model).__name__}, "
                          "not a torch.nn.Module")
    return model


def takes_num_classes(make) -> bool:
    """Whether `make(num_classes=...)` binds (a signature Python cannot read, a builtin's: assumed to)."""
    try:
        inspect.signature(make).bind(num_classes=1)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def check_takes(model: torch.nn.Module, arch: str, sizes: list[tuple[int, int]], num_classes: int,
                device: torch.device) -> None:
    """A ConfigError, before any data is read, where the model cannot take images of one of `sizes` (height,
    width: each a run feeds it), its pooling or its partitions too large for them (alexnet at 32 px, inception_v3
    under 75, maxvit_t off its one size), or where it answers other than one logit a class: one forward of PROBE
    blank images each, in eval mode without gradients (batch norm's statistics untouched; the mode restored), where
    it ended in a traceback at the first step. (Two images, not one: a model that squeezes its batch answers one
    image without its batch dimension. The device's out-of-memory error is the device's, not the size's: raised.)"""
    was_training = model.training
    model.eval()
    try:
        for height, width in dict.fromkeys(sizes):
            try:
                with torch.no_grad():
                    out = model(torch.zeros(PROBE, 3, height, width, device=device))
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, AssertionError, ValueError) as exn:  # torch's shape checks; a model's own asserts
                raise ConfigError(f"--arch {arch} cannot take {height} x {width} px images ({first_line(exn)}): give "
                                  "an --image-size (and --val-crop, --ramp) it takes; 224 suits every torchvision "
                                  "model") from None
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (PROBE, num_classes):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
                raise ConfigError(f"--arch {arch}: its model answers a batch of {PROBE} images with {got}, not "
                                  f"({PROBE}, {num_classes}), one logit a class: make it return num_classes outputs "
                                  "an image")
    finally:
        model.train(was_training)


PROBE = 2  # images in check_takes' batch


def first_line(exn: Exception) -> str:
    return (str(exn).strip().splitlines() or [type(exn).__name__])[0]
