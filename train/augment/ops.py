"""Torchvision's per-sample augmentation ops (TrivialAugmentWide, RandAugment, AutoAugment) and
RandomErasing, applied to a whole uint8 batch at once with per-sample parameters, on any device.

Which op and which magnitude each sample gets is drawn elsewhere (train/augment/draws.py); this module
applies the draws, with results equal to torchvision.transforms.v2's
`_AutoAugmentBase._apply_image_or_video_transform` on each image alone, bit for bit. The draws are read
on the host (one device-to-host copy when they live on the device), which plans the call: samples are
sorted by kernel, each kernel runs once per group (on the CPU, a few samples at a time, so that its
intermediates stay in the caches), per-sample parameters are computed in float64 as torchvision's Python
computes them, and the results are put back in the batch's order. A sample's result does not depend on
the rest of the batch.

How torchvision's uint8 tensor kernels round, and how each op matches them:
- Brightness: trunc(min(f32(x * f32(1 + m)), 255)). A per-sample int32 x * K >> 22 when the host
  finds a K that reproduces all 256 levels (it nearly always does), else the same float32 product.
- Color, Contrast, Sharpness: `_blend` computes f32(x * ratio), then `add_(other, alpha=1 - ratio)`
  (adjust_sharpness adds `alpha=1 - factor` times (blurred - x)), which torch's CPU kernels (AVX2,
  AVX512) and CUDA evaluate as one fused multiply-add, then truncates to uint8. `_blend32` rounds that
  exact sum once (float64 and an exact correction of float64's own rounding), or twice where the
  device's kernel does not fuse (torch's CPU kernels without AVX2): `_fuses` asks the kernel.
  The grayscale is torchvision's own expression (the same torch ops), floored. Color is then a function
  of (grayscale, pixel) and Sharpness of (blurred - pixel, pixel), per magnitude: tables built on the
  host once per magnitude and kept on the device. Sharpness's blurred pixel is round((5 centre + 8
  neighbours) / 13), never a half, so exact in integers. Contrast's mean is torch.mean of the
  grayscale, and its blend a 256-entry table per sample.
- Posterize, Solarize, Invert: bitwise, or a comparison with ceil(f32(255 * m)), in uint8.
- AutoContrast, Equalize: torchvision's float32 scale and PIL-style histogram table per image and
  channel, applied as a table.
- Geometric ops: torchvision's inverse affine matrix (its own function, on the host), its grid (the
  same bmm per sample, which each CPU's BLAS rounds its own way: `_grids`), the same grid_sample, its
  fill (None: zeros padding; a number: a sampled ones mask, `where(mask < 0.5)` for nearest,
  `(v - fill) * mask + fill` for bilinear), then round half to even. Nearest samples an image of pixel
  numbers and gathers the pixels by them.
  Integer translations and identities (magnitude 0, a whole turn) move whole pixels in torchvision's
  result too (grid points within 1e-4 of pixel centres): they are copies here.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch.nn.functional import grid_sample
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

from train.augment import POLICY_INTERPOLATIONS

OPS: tuple[str, ...] = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
                        "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert")
# op id i means OPS[i]; -1 means no op (as Identity)

(IDENTITY, SHEAR_X, SHEAR_Y, TRANSLATE_X, TRANSLATE_Y, ROTATE, BRIGHTNESS, COLOR, CONTRAST, SHARPNESS, POSTERIZE,
 SOLARIZE, AUTO_CONTRAST, EQUALIZE, INVERT) = range(len(OPS))
_FIXED = 22  # fractional bits of the int32 fixed-point factors: 255 * 2**23 still fits


def apply_ops(images: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor, *, interpolation: str = "nearest",
              fill: float | None = None) -> torch.Tensor:
    """images: uint8 (N, 3, H, W) on any device, any memory format; ops: int (N,) op ids (OPS; -1 is no op);
    magnitudes: float (N,) (float64 or float32), each exactly the `magnitude` that torchvision.transforms.v2's
    _AutoAugmentBase._apply_image_or_video_transform receives for that sample (already signed; e.g. ShearX
    -0.33, TranslateX 12.8 -> int(magnitude), Posterize 5.0 -> bits int(magnitude), Solarize a fraction of
    255, ignored for Identity/AutoContrast/Equalize/Invert). interpolation "nearest" or "bilinear"; fill as
    torchvision's: None (its default: zeros padding) or a number in [0, 255] (a masked fill: with bilinear it
    differs from None along the borders). Returns a new uint8 (N, 3, H, W) tensor in the input's memory
    format: sample i equals _apply_image_or_video_transform(images[i], OPS[ops[i]], magnitudes[i],
    interpolation, fill). ops and magnitudes are read on the host: a device-to-host copy (a sync) when they
    live on the device; pass them on the CPU to avoid it."""
    _check_images(images)
    ops_h, mags_h = _draws_on_host(images, ops, magnitudes, 1)
    if interpolation not in POLICY_INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {POLICY_INTERPOLATIONS}, got {interpolation!r}")
    _check_fill(fill)
    return _apply(images, ops_h, mags_h, interpolation, fill)


def apply_policy_rounds(images: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor, **kw) -> torch.Tensor:
    """ops/magnitudes (N, K): K rounds applied in order (RandAugment's num_ops, AutoAugment's two ops of a
    sub-policy); -1 entries skip. Keyword arguments as apply_ops."""
    _check_images(images)
    ops_h, mags_h = _draws_on_host(images, ops, magnitudes, 2)
    interpolation, fill = kw.pop("interpolation", "nearest"), kw.pop("fill", None)
    if kw:
        raise ValueError(f"apply_policy_rounds: unexpected keyword arguments {sorted(kw)}")
    if interpolation not in POLICY_INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {POLICY_INTERPOLATIONS}, got {interpolation!r}")
    _check_fill(fill)
    for k in range(ops_h.shape[1]):
        _check_magnitudes(ops_h[:, k], mags_h[:, k])  # every round's draws checked before any work
    if _storage_dims(images) is None:
        images = images.contiguous()
    rounds = ops_h.shape[1]
    for k in range(rounds):  # the rounds before the last write into scratch space, alternately
        out = None if k == rounds - 1 else _workspace(images, f"round {k % 2}")
        images = _apply(images, ops_h[:, k], mags_h[:, k], interpolation, fill, out)
    return images


def erase(images: torch.Tensor, boxes: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """In place on float images (N, C, H, W) (normalised, after the policy, as torchvision's RandomErasing
    runs): boxes int (N, 4) = (top, left, height, width) per sample, height 0 = not erased; pixels inside set
    to `value` (torchvision's RandomErasing value=0 default). One batched mask, no per-sample loop. The boxes
    are checked to lie inside the image (a host sync when they live on the device). Returns images."""
    if not isinstance(images, torch.Tensor) or not images.is_floating_point() or images.dim() != 4:
        raise ValueError(f"erase: images must be a float (N, C, H, W) tensor, got {_describe(images)}")
    if not _is_int_tensor(boxes) or tuple(boxes.shape) != (len(images), 4):
        raise ValueError(f"erase: boxes must be an integer ({len(images)}, 4) tensor of (top, left, height, "
                         f"width), got {_describe(boxes)}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"erase: value must be a number, got {value!r}")
    height, width = images.shape[-2:]
    boxes = boxes.to(device=images.device, dtype=torch.int64)
    top, left, h, w = boxes.unbind(1)
    outside = (boxes < 0).any(1) | (top + h > height) | (left + w > width)
    erased = (h > 0) & (w > 0)
    # host sync (when on the device): a box outside the image would erase something else than torchvision;
    # and only the erased samples are touched (RandomErasing's p is small)
    bad, index = outside.nonzero().flatten().tolist(), erased.nonzero().flatten()
    if bad:
        raise ValueError(f"erase: box {boxes[bad[0]].tolist()} (top, left, height, width) of sample {bad[0]} is "
                         f"not inside the {height}x{width} image")
    if len(index) == 0:
        return images
    top, left, h, w = boxes[index].unbind(1)
    rows = torch.arange(height, device=images.device)
    cols = torch.arange(width, device=images.device)
    inside_rows = (rows >= top[:, None]) & (rows < (top + h)[:, None])  # (k, H)
    inside_cols = (cols >= left[:, None]) & (cols < (left + w)[:, None])  # (k, W)
    mask = inside_rows[:, None, :, None] & inside_cols[:, None, None, :]  # (k, 1, H, W)
    images[index] = images[index].masked_fill_(mask, value)
    return images


# ---------------------------------------------------------------- arguments, plan

@dataclass(frozen=True)
class DeviceOps:
    """The augmentation's device side as train/device_batches.py runs it on each batch, a stage passed in
    (Augment.on_device): the policy's rounds on the uint8 batch, with the run's interpolation, before
    normalisation; random erasing of the normalised batch after it."""
    policy_interpolation: str = "nearest"

    def apply_policy(self, images: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
        return apply_policy_rounds(images, ops, magnitudes, interpolation=self.policy_interpolation)

    def erase(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        return erase(images, boxes)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} tensor of shape {tuple(x.shape)} on {x.device}"
    return type(x).__name__


def _is_int_tensor(x) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool


def _check_images(images) -> None:
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4 \
            or images.shape[1] != 3:
        raise ValueError(f"images must be a uint8 (N, 3, H, W) tensor, got {_describe(images)}")


def _draws_on_host(images: torch.Tensor, ops, magnitudes, dims: int) -> tuple[np.ndarray, np.ndarray]:
    shape = "(N,)" if dims == 1 else "(N, K)"
    if not _is_int_tensor(ops) or ops.dim() != dims:
        raise ValueError(f"ops must be an integer {shape} tensor of op ids, got {_describe(ops)}")
    if not isinstance(magnitudes, torch.Tensor) or magnitudes.dtype not in (torch.float32, torch.float64) \
            or magnitudes.dim() != dims:
        raise ValueError(f"magnitudes must be a float32 or float64 {shape} tensor, got {_describe(magnitudes)}")
    if ops.shape[0] != len(images) or ops.shape != magnitudes.shape:
        raise ValueError(f"ops {tuple(ops.shape)} and magnitudes {tuple(magnitudes.shape)} must have the batch's "
                         f"length {len(images)} and the same shape")
    # a sync when they are on the device: the plan (group sizes, kernels, matrices) is made on the host
    return (ops.detach().to("cpu", torch.int64).numpy(), magnitudes.detach().to("cpu", torch.float64).numpy())


def _check_fill(fill) -> None:
    if fill is not None and (not isinstance(fill, (int, float)) or isinstance(fill, bool) or not 0 <= fill <= 255):
        raise ValueError(f"fill must be None or a number in [0, 255] (uint8 images), got {fill!r}")


def _check_magnitudes(ops: np.ndarray, m: np.ndarray) -> None:
    """Raises ValueError where torchvision would raise (or compute garbage from a NaN)."""
    wrong = ops[(ops < -1) | (ops >= len(OPS))]
    if len(wrong):
        raise ValueError(f"ops must be op ids in [-1, {len(OPS) - 1}] (OPS; -1 for none), got {wrong[:5].tolist()}")
    with np.errstate(invalid="ignore", over="ignore"):
        bad = (ops >= SHEAR_X) & (ops <= SOLARIZE) & ~np.isfinite(m)
        bad |= (ops >= BRIGHTNESS) & (ops <= SHARPNESS) & ~(1.0 + m >= 0)  # adjust_*: factor not non-negative
        bits = np.trunc(m)
        bad |= (ops == POSTERIZE) & ~((bits >= 0) & (bits <= 8))  # posterize: bits in [0, 8]
        bad |= (ops == SOLARIZE) & ~(255.0 * m <= 255)  # solarize: threshold at most 255
    if bad.any():
        where = np.flatnonzero(bad)[:5]
        raise ValueError("magnitudes outside torchvision's range for their op (factor 1 + m >= 0, Posterize bits "
                         "int(m) in [0, 8], Solarize m <= 1, finite): "
                         f"{[(OPS[o], float(v)) for o, v in zip(ops[where], m[where])]}")


def _kernel_keys(ops: np.ndarray, m: np.ndarray, interpolation: str, fill) -> np.ndarray:
    """Which kernel runs each sample: a key of _KERNELS. Geometric ops that move whole pixels in
    torchvision's result (grid points within 1e-4 of pixel centres: magnitude 0, a whole turn, an integer
    translation) are copies; rounding then cannot go the other way, except for a bilinear fill off the
    integers (97.5), which lands within float32 noise of a tie next to the image."""
    keys = np.where(ops <= IDENTITY, _COPY, ops)
    geometric = (ops >= SHEAR_X) & (ops <= ROTATE)
    translate = (ops == TRANSLATE_X) | (ops == TRANSLATE_Y)
    with np.errstate(invalid="ignore"):
        identity = np.where(translate, np.trunc(m) == 0, np.where(ops == ROTATE, np.remainder(m, 360) == 0, m == 0))
    whole_pixels = interpolation == "nearest" or fill is None or float(fill).is_integer()
    keys = np.where(geometric, np.where(identity, _COPY, np.where(translate & whole_pixels, _SHIFT, _WARP)), keys)
    return keys


def _apply(images: torch.Tensor, ops: np.ndarray, m: np.ndarray, interpolation: str, fill,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """The batch with the draws applied, into `out` when given (a tensor laid out as images)."""
    _check_magnitudes(ops, m)
    if len(images) == 0:
        return images.clone()
    keys = _kernel_keys(ops, m, interpolation, fill)
    order = np.argsort(keys, kind="stable")
    starts = np.searchsorted(keys[order], np.arange(_KEYS + 1)).tolist()
    dims = _storage_dims(images)
    if dims is None:
        images, dims = images.contiguous(), (0, 1, 2, 3)
    back = _inverse(dims)
    store = images.permute(dims)  # contiguous: whole samples are contiguous chunks
    result = _workspace(store, "sorted")  # the samples in `order`
    order_d = torch.from_numpy(order).to(images.device)
    step = _chunk(images)
    for key in range(_KEYS):
        first, end = starts[key], starts[key + 1]
        if key == _COPY:
            torch.index_select(store, 0, order_d[first:end], out=result[first:end])
            continue
        for a in range(first, end, step):  # on the CPU a few samples at a time: intermediates stay in cache
            b = min(a + step, end)
            x = store.index_select(0, order_d[a:b]).permute(back)
            rows = order[a:b]
            result[a:b].permute(back).copy_(_KERNELS[key](x, ops[rows], m[rows], interpolation, fill))
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    out = torch.empty_like(store) if out is None else out.permute(dims)
    return torch.index_select(result, 0, torch.from_numpy(inverse).to(images.device), out=out).permute(back)


_LOCAL = threading.local()


def _workspace(like: torch.Tensor, name: str) -> torch.Tensor:
    """A scratch tensor like `like` (same shape and layout), kept per thread and name on the CPU: a fresh
    batch-sized buffer costs a page fault per 4 KiB there (glibc maps allocations above 32 MiB anew each
    time, and a batch of 256 at 224x224 is 38 MiB: that alone cost as much as the policy's ops). CUDA's
    allocator caches."""
    if like.device.type != "cpu":
        return torch.empty_like(like)
    spaces = getattr(_LOCAL, "spaces", None)
    if spaces is None:
        spaces = _LOCAL.spaces = {}
    space = spaces.get(name)
    if space is None or space.shape != like.shape or space.dtype != like.dtype or space.stride() != like.stride():
        space = spaces[name] = torch.empty_like(like)
    return space


def _chunk(images: torch.Tensor) -> int:
    """Samples per kernel call: all of a group on a GPU; on the CPU about 1 MiB of pixels, so that a
    kernel's int32 and float32 intermediates (4x that) stay in the caches rather than stream from memory."""
    if images.device.type != "cpu":
        return len(images)
    return max(1, (1 << 20) // images[0].numel())


def _storage_dims(t: torch.Tensor) -> tuple[int, ...] | None:
    """The order of t's dims in memory for the two dense layouts (NCHW, channels_last), else None."""
    if t.is_contiguous():
        return (0, 1, 2, 3)
    if t.is_contiguous(memory_format=torch.channels_last):
        return (0, 2, 3, 1)
    return None


def _inverse(dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(dims))


def _flat(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """t's elements in memory order (a view for the dense layouts), and that order of t's dims."""
    dims = _storage_dims(t) or (0, 1, 2, 3)
    return t.permute(dims).reshape(-1), dims


def _unflat(flat: torch.Tensor, shape: torch.Size, dims: tuple[int, ...]) -> torch.Tensor:
    """flat laid out in memory order `dims` as a tensor of `shape` (the inverse of _flat)."""
    return flat.view([shape[d] for d in dims]).permute(_inverse(dims))


def _per_sample(values: np.ndarray, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Host values (n,) as an (n, 1, 1, 1) tensor on like's device."""
    return torch.from_numpy(np.ascontiguousarray(values)).to(device=like.device, dtype=dtype).view(-1, 1, 1, 1)


def _f32(values) -> np.ndarray:
    """Python floats (float64) as torch's kernels take a scalar argument on a float32 tensor: rounded."""
    return np.asarray(values, dtype=np.float64).astype(np.float32)


# ---------------------------------------------------------------- exact float32 arithmetic

def _blend32(p, a, b, fused: bool):
    """round_to_float32(p + a * b) as torch's `p.add_(b, alpha=a)` computes it for float32 p, a, b (torch
    tensors or numpy arrays, broadcast), with a per-sample a: rounded once where the device's kernel fuses
    the multiply-add (torch's AVX2/AVX512 CPU kernels, CUDA), else after the product too.

    Fused: a * b is exact in float64; p + a * b is rounded once to float64 (t), with its error e exact
    (TwoSum). Rounding t to float32 is right unless t lies exactly halfway between two float32 and e is
    nonzero and points away from the float32 that the tie chose: then the other neighbour is right."""
    xp = torch if isinstance(p, torch.Tensor) else np

    def cast(v, name):
        return v.to(getattr(torch, name)) if xp is torch else v.astype(getattr(np, name))

    if not fused:
        return cast(p, "float32") + cast(a, "float32") * cast(b, "float32")
    p64 = cast(p, "float64")
    prod = cast(a, "float64") * cast(b, "float64")
    t = p64 + prod
    bp = t - p64
    e = (p64 - (t - bp)) + (prod - bp)
    f = cast(t, "float32")
    near = cast(f, "float64")
    diff = t - near  # exact; half an ulp of float32 when t is a tie
    other = near + 2 * diff  # the float32 on t's other side when t is a tie
    fix = (diff != 0) & (xp.sign(e) == xp.sign(diff)) & (cast(cast(other, "float32"), "float64") == other)
    return xp.where(fix, cast(other, "float32"), f)


_FUSES: dict[str, bool] = {}


def _fuses(device: torch.device) -> bool:
    """Whether torch's float32 `add_(other, alpha=a)` rounds p + a * other once on this device (AVX2,
    AVX512 and CUDA kernels) or twice (the CPU's default kernels): asked once, of the kernel itself.
    -1 + (1 + 2**-12)**2 is 2**-11 + 2**-24 fused, 2**-11 when the product is rounded first."""
    key = str(device) if device.type != "cpu" else f"cpu-{torch.backends.cpu.get_cpu_capability()}"
    if key not in _FUSES:
        factor = float(1 + 2 ** -12)
        probe = torch.full((64,), -1.0, device=device).add_(torch.full((64,), factor, device=device), alpha=factor)
        _FUSES[key] = bool((probe == 2 ** -11 + 2 ** -24).all())
    return _FUSES[key]


def _fixed_point(levels: np.ndarray, scale: int = _FIXED) -> np.ndarray | None:
    """K (n,) int with min((x * K) >> scale, 255) == levels[i][x] for every x in 0..255 and sample i (levels:
    (n, 256) non-decreasing, in [0, 255]), or None when some sample has none (a float32 rounding quirk)."""
    x = np.arange(1, 256, dtype=np.int64)
    y = levels[:, 1:].astype(np.int64)
    lo = ((y << scale) + x - 1) // x  # K >= ceil(y 2^s / x)
    hi = np.where(y < 255, (((y + 1) << scale) + x - 1) // x - 1, np.iinfo(np.int64).max)  # K < (y + 1) 2^s / x
    k, k_hi = lo.max(axis=1), hi.min(axis=1)
    if (levels[:, 0] != 0).any() or (k > k_hi).any() or (k * 255 >= 2 ** 31).any():
        return None
    return k


# ---------------------------------------------------------------- tables

def _gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table uint8 (T,), index int32 (n, C, H, W) in [0, T) in either dense layout: table[index], laid out
    as index (gathered in memory order: no layout conversion)."""
    flat, dims = _flat(index)
    return _unflat(table.index_select(0, flat), index.shape, dims)


def _apply_table(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """table uint8 (n, 1 or C, 256): out[i, c] = table[i, c or 0][x[i, c]]."""
    n, c = table.shape[:2]
    offsets = torch.arange(n * c, dtype=torch.int32, device=x.device).mul_(256).view(n, c, 1, 1)
    return _gather(table.reshape(-1), x.to(torch.int32).add_(offsets))


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of keys (n, k) (sorted), and each row's number among them."""
    order = np.lexsort(keys.T[::-1])
    ordered = keys[order]
    new = np.ones(len(keys), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    number = np.empty(len(keys), dtype=np.int64)
    number[order] = np.cumsum(new) - 1
    return ordered[new], number


class _TableCache:
    """Tables of one op, each a function of the op's float32 parameters (their bits: the key), built on
    the host once per key and kept in one arena per device and thread (a slot is never rewritten under
    another thread's batch), least recently used first out: a batch reads them in place (per-sample
    offsets into the arena), nothing is copied per call."""

    def __init__(self, build, entries: int, slots: int = 128):
        self.build, self.entries, self.slots = build, entries, slots
        self.local = threading.local()

    def offsets(self, device: torch.device, keys: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        """(the arena, each row's table's offset in it) for keys (n, k) uint32."""
        unique, number = _unique_rows(keys)
        name = str(device)
        arenas = self.local.__dict__.setdefault("arenas", {})
        arena, where = arenas.get(name, (None, OrderedDict()))
        slots = max(self.slots, len(unique), len(where))
        if arena is None or arena.numel() < slots * self.entries:  # first use, or more keys in one call
            grown = torch.empty(slots * self.entries, dtype=torch.uint8, device=device)
            if arena is not None:
                grown[:arena.numel()].copy_(arena)
            arena = grown
        capacity = arena.numel() // self.entries
        slot_of = []
        for row in unique:
            key = tuple(int(v) for v in row)
            slot = where.get(key)
            if slot is None:
                slot = len(where) if len(where) < capacity else where.pop(next(iter(where)))  # evict the oldest
                table = self.build(*(int(v) for v in row))
                arena[slot * self.entries:(slot + 1) * self.entries].copy_(torch.from_numpy(table))
                where[key] = slot
            where.move_to_end(key)  # this call's keys are the newest: never evicted by its own later keys
            slot_of.append(slot)
        arenas[name] = (arena, where)
        return arena, np.asarray(slot_of, dtype=np.int64)[number] * self.entries


# ---------------------------------------------------------------- colour ops

def _grayscale(x: torch.Tensor) -> torch.Tensor:
    """torchvision's rgb_to_grayscale of uint8 (n, 3, H, W) in float32 (n, 1, H, W), floored, as
    adjust_saturation and adjust_contrast use it (the same expression: scalar weights, fused adds)."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).floor_().unsqueeze_(-3)


def _to_uint8(v: torch.Tensor) -> torch.Tensor:
    """Float32 already clamped to [0, 255] to uint8, truncating as .to(uint8) does (via int16: faster)."""
    return v.to(torch.int16).to(torch.uint8)


def _brightness(x, ops, m, interpolation, fill):
    factor = _f32(1.0 + m)
    with np.errstate(over="ignore"):
        levels = np.minimum(np.arange(256, dtype=np.float32) * factor[:, None], 255).astype(np.int64)
    k = _fixed_point(levels)
    if k is not None:
        v = x.to(torch.int32).mul_(_per_sample(k, x, torch.int32)).bitwise_right_shift_(_FIXED)
        return v.clamp_(max=255).to(torch.uint8)
    return _to_uint8(x.float().mul_(_per_sample(factor, x, torch.float32)).clamp_(0, 255))


def _bits_f32(bits: int) -> np.float32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def _color_table(factor: int, alpha: int, fused: int) -> np.ndarray:
    """Color's result for every (floored grayscale g, pixel x), at g * 256 + x: trunc(clamp(blend of
    f32(x * factor) with g * alpha)), from torchvision's float32 factor and alpha (their bits); 64 KiB."""
    factor, alpha = _bits_f32(factor), _bits_f32(alpha)
    p = np.arange(256, dtype=np.float32) * factor  # image.mul(ratio), float32
    v = _blend32(p[None, :], alpha, np.arange(256, dtype=np.float32)[:, None], bool(fused))
    return np.clip(v, 0, 255).astype(np.uint8).reshape(-1)


_COLOR_TABLES = _TableCache(_color_table, 256 * 256)


def _color(x, ops, m, interpolation, fill):
    ratio = 1.0 + m
    fused = np.full(len(m), _fuses(x.device), dtype=np.uint32)
    keys = np.stack([_f32(ratio).view(np.uint32), _f32(1.0 - ratio).view(np.uint32), fused], 1)
    tables, offsets = _COLOR_TABLES.offsets(x.device, keys)
    index = _grayscale(x).to(torch.int32).mul_(256).add_(_per_sample(offsets, x, torch.int32))
    return _gather(tables, x.to(torch.int32).add_(index))


def _contrast(x, ops, m, interpolation, fill):
    ratio = 1.0 + m
    mean = torch.mean(_grayscale(x), dim=(-3, -2, -1))  # (n,) float32, as torchvision's per image
    levels = torch.arange(256, dtype=torch.float32, device=x.device)
    p = levels * _per_sample(_f32(ratio), x, torch.float32).view(-1, 1)
    alpha = _per_sample(_f32(1.0 - ratio), x, torch.float32).view(-1, 1)
    table = _blend32(p, alpha, mean[:, None], _fuses(x.device))
    return _apply_table(x, table.clamp_(0, 255).to(torch.uint8)[:, None])


def _sharpness_table(alpha: int, fused: int) -> np.ndarray:
    """Sharpness's result for every (d = blurred - c, pixel c), at (d + 255) * 256 + c: trunc(clamp(blend of
    c with d * alpha)), from torchvision's float32 alpha (its bits); 128 KiB. (Mostly c + floor(alpha * d),
    but where alpha * d lies just below an integer, float32's rounding of the sum reaches it from some c
    on, depending on its distance.)"""
    alpha = _bits_f32(alpha)
    v = _blend32(np.arange(256, dtype=np.float32)[None, :], alpha, np.arange(-255, 256, dtype=np.float32)[:, None],
                 bool(fused))
    return np.clip(v, 0, 255).astype(np.uint8).reshape(-1)


_SHARPNESS_TABLES = _TableCache(_sharpness_table, 511 * 256)


def _sharpness(x, ops, m, interpolation, fill):
    height, width = x.shape[-2:]
    if height <= 2 or width <= 2:
        return x
    alpha = _f32(1.0 - (1.0 + m))  # add_(blurred - x, alpha=1 - sharpness_factor)
    fused = np.full(len(m), _fuses(x.device), dtype=np.uint32)
    tables, offsets = _SHARPNESS_TABLES.offsets(x.device, np.stack([alpha.view(np.uint32), fused], 1))
    v = x.to(torch.int16)
    rows = v[..., :-2, :] + v[..., 1:-1, :] + v[..., 2:, :]
    box = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]  # 3x3 sums, (n, 3, H - 2, W - 2)
    centre = v[..., 1:-1, 1:-1]
    # torchvision: round(conv2d, 1/13 around and 5/13 in the middle). (box + 4 centre) / 13 is never a
    # half and float32's error is far below 1/26: the exact rounding, k // 13 as (k * 5042) >> 16 (k < 3322)
    blurred = box.add_(centre, alpha=4).add_(6).to(torch.int32).mul_(5042).bitwise_right_shift_(16)
    # the table's index: (blurred - c + 255) * 256 + c = blurred * 256 - 255 c + 255 * 256
    index = blurred.mul_(256).sub_(centre, alpha=255).add_(_per_sample(offsets + 255 * 256, x, torch.int32))
    out = x.clone()
    out[..., 1:-1, 1:-1] = _gather(tables, index)
    return out


def _posterize(x, ops, m, interpolation, fill):
    bits = np.trunc(m).astype(np.int64)  # int(magnitude), checked to lie in [0, 8]
    mask = (255 << (8 - bits)) & 255  # ((1 << bits) - 1) << (8 - bits); 255 (unchanged) for 8 bits
    return x & _per_sample(mask, x, torch.uint8)


def _solarize(x, ops, m, interpolation, fill):
    # `image >= threshold` compares in float32: for integers, x >= ceil(f32(255 * m))
    first = np.clip(np.ceil(_f32(255.0 * m)), 0, 255).astype(np.int64)
    below = _per_sample(np.maximum(first - 1, 0), x, torch.uint8)
    flag = torch.maximum(x, below).sub_(below).clamp_(max=1)  # x >= first, for first >= 1
    flag |= _per_sample((first == 0).astype(np.uint8), x, torch.uint8)
    return x ^ flag.mul_(255)


def _autocontrast(x, ops, m, interpolation, fill):
    # torchvision's float32 arithmetic on the 256 levels of each image and channel, then a table
    minimum = x.amin(dim=(-2, -1)).float()
    maximum = x.amax(dim=(-2, -1)).float()
    equal = maximum == minimum
    inv_scale = torch.where(equal, 1.0, maximum.sub_(minimum).mul_(1.0 / 255))
    minimum = torch.where(equal, 0.0, minimum)
    levels = torch.arange(256, dtype=torch.float32, device=x.device)
    table = levels.sub(minimum[..., None]).div_(inv_scale[..., None]).clamp_(0, 255)
    return _apply_table(x, _to_uint8(table))


def _equalize(x, ops, m, interpolation, fill):
    # torchvision's equalize_image (PIL's table) per image and channel; the histogram by bincount
    n, c, height, width = x.shape
    offsets = torch.arange(n * c, dtype=torch.int32, device=x.device).mul_(256).view(n, c, 1, 1)
    index = x.to(torch.int32).add_(offsets)
    flat = _flat(index)[0]
    if x.device.type == "cpu":
        hist = torch.bincount(flat, minlength=n * c * 256)
    else:  # bincount reads the largest value back to the host
        hist = torch.zeros(n * c * 256, dtype=torch.int32, device=x.device)
        hist.index_add_(0, flat, torch.ones(1, dtype=torch.int32, device=x.device).expand(len(flat)))
    hist = hist.view(n, c, 256)
    cum_hist = hist.cumsum(dim=-1)
    last = cum_hist.argmax(dim=-1, keepdim=True)
    step = (height * width - hist.gather(-1, last)).div_(255, rounding_mode="floor")
    valid = step != 0
    table = cum_hist[..., :-1].add(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    table = torch.cat([torch.zeros_like(table[..., :1]), table], dim=-1)
    table = torch.where(valid, table, torch.arange(256, device=x.device)).to(torch.uint8)
    return _gather(table.view(-1), index)


def _invert(x, ops, m, interpolation, fill):
    return x.bitwise_not()


# ---------------------------------------------------------------- geometric ops

@lru_cache(maxsize=4096)
def _matrix(op: int, m: float, width: int, height: int) -> tuple[float, ...]:
    """The inverse affine matrix torchvision's rotate_image / affine_image build for this op: its own
    function, on the same Python floats (libm's trig: torch's vectorised trig can differ in the last bit,
    and a grid coordinate then rounds to the other float32)."""
    if op == ROTATE:
        return tuple(_get_inverse_affine_matrix([0.0, 0.0], -(m % 360), [0.0, 0.0], 1.0, [0.0, 0.0]))
    if op in (TRANSLATE_X, TRANSLATE_Y):  # center None: the image's centre
        shift = [float(int(m)), 0.0] if op == TRANSLATE_X else [0.0, float(int(m))]
        return tuple(_get_inverse_affine_matrix([0.0, 0.0], 0.0, shift, 1.0, [0.0, 0.0]))
    shear = math.degrees(math.atan(m))
    # affine's center=[0, 0], in the matrix's coordinates (0 at the image's centre)
    return tuple(_get_inverse_affine_matrix([0.0 - width * 0.5, 0.0 - height * 0.5], 0.0, [0.0, 0.0], 1.0,
                                            [shear, 0.0] if op == SHEAR_X else [0.0, shear]))


def _fill_value(fill) -> int:
    return 0 if fill is None else int(np.rint(fill))  # torchvision rounds half to even into uint8


def _shift(x, ops, m, interpolation, fill):
    """out[..., i, j] = x[..., i - dy, j - dx], fill outside: torchvision's result for an integer translate.
    Each sample (or plane) in memory order is padded with fill on both sides and read as one window at its
    own offset; columns that wrapped to the neighbouring row are refilled."""
    n, c, height, width = x.shape
    whole = np.clip(np.trunc(m), -2 ** 31, 2 ** 31).astype(np.int64)  # int(magnitude)
    dx = np.clip(np.where(ops == TRANSLATE_X, whole, 0), -width, width)  # beyond the image, all is fill
    dy = np.clip(np.where(ops == TRANSLATE_Y, whole, 0), -height, height)
    flat, dims = _flat(x)
    planar = dims[1] == 1  # NCHW: one plane per channel; channels_last: one plane of pixels per sample
    rows, unit = (n * c, 1) if planar else (n, c)
    plane = height * width * unit
    length = 3 * plane
    fill_value = _fill_value(fill)
    buffer = torch.full((rows * length + plane,), fill_value, dtype=torch.uint8, device=x.device)
    buffer[:rows * length].view(rows, length)[:, plane:2 * plane].copy_(flat.view(rows, plane))
    windows = buffer.as_strided((rows * length, plane), (1, 1))  # window k starts at element k
    offset = (dy * width + dx) * unit
    starts = np.arange(rows) * length + plane - (np.repeat(offset, c) if planar else offset)
    out = _unflat(windows.index_select(0, torch.from_numpy(starts).to(x.device)).view(-1), x.shape, dims)
    if (dx != 0).any():
        j = np.arange(width)
        keep = ((j >= dx[:, None]) & (j < width + dx[:, None])).astype(np.uint8)  # (n, W): j - dx inside
        keep_t = torch.from_numpy(keep).to(x.device).view(n, 1, 1, width)
        out.mul_(keep_t)
        if fill_value:
            out.add_((1 - keep_t) * fill_value)
    return out


def _grids(matrices: list[tuple[float, ...]], number: np.ndarray, width: int, height: int,
           device: torch.device) -> torch.Tensor:
    """(n, H, W, 2): sample i's sampling grid, for the matrix matrices[number[i]], as torchvision's
    _affine_grid computes it for one image: its base grid of pixel centres (H * W, 3) times the matrix
    (3, 2), divided by the half size, in one bmm of the same shapes and dtypes on a theta made as
    affine_image and rotate_image make theirs, once per distinct matrix (the base grid, which holds no
    rounding, made once per size). The bmm's rounding is the BLAS kernel's choice: MKL's AVX-512 sgemm
    (which it runs on Intel CPUs) computes fma(y, t1, x * t0) + t2, its AVX2 path (AMD, or MKL_CBWR=AVX2)
    (x * t0 + y * t1) + t2, and a sum on the other float32 moves a sample across a half-pixel tie (a
    nearest pick of another pixel, a bilinear level off by one). The same call rounds alike on any
    machine; each product lands in a tensor of its own, as torchvision's does."""
    base = _base_grid(width, height, device)
    half = torch.tensor([0.5 * width, 0.5 * height], dtype=torch.float32, device=device)
    products = [base.bmm(torch.tensor(matrix, dtype=torch.float32, device=device).reshape(1, 2, 3).transpose(1, 2)
                         .div_(half)) for matrix in matrices]
    return torch.cat([products[k] for k in number.tolist()]).view(len(number), height, width, 2)


@lru_cache(maxsize=64)
def _base_grid(width: int, height: int, device: torch.device) -> torch.Tensor:
    """torchvision's _affine_grid's base grid, (1, H * W, 3) rows of (x, y, 1) at the pixel centres, made
    by its own operations; read only."""
    grid = torch.empty(1, height, width, 3, dtype=torch.float32, device=device)
    grid[..., 0].copy_(torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=device))
    grid[..., 1].copy_(torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height,
                                      device=device).unsqueeze_(-1))
    grid[..., 2].fill_(1)
    return grid.view(1, height * width, 3)


_NUMBERS: dict[str, torch.Tensor] = {}


def _pixel_numbers(count: int, device: torch.device) -> torch.Tensor:
    """1, 2, ... count in float32 (exact below 2**24), kept per device and grown as needed."""
    numbers = _NUMBERS.get(str(device))
    if numbers is None or numbers.numel() < count:
        numbers = torch.arange(1, count + 1, dtype=torch.float32, device=device)
        _NUMBERS[str(device)] = numbers
    return numbers[:count]


def _warp(x, ops, m, interpolation, fill):
    """Each sample with its own matrix, in one grid and one grid_sample."""
    n, c, height, width = x.shape
    unique, number = _unique_rows(np.stack([ops, m.view(np.int64)], 1))
    matrices = [_matrix(op, v, width, height)  # once per distinct magnitude (and cached)
                for op, v in zip(unique[:, 0].tolist(), unique[:, 1].copy().view(np.float64).tolist())]
    grid = _grids(matrices, number, width, height, x.device)
    plane = height * width
    if interpolation == "nearest" and n * plane < 2 ** 24:  # pixel numbers exact in float32
        # grid_sample picks, with torchvision's grid, each output pixel's source in an image of pixel
        # numbers (1 + sample * plane + pixel; 0 outside, where torchvision's mask is 0 too); the pixels are
        # then gathered, in memory order, from the batch after one fill element
        numbers = _pixel_numbers(n * plane, x.device).view(n, 1, height, width)
        picked = grid_sample(numbers, grid, mode="nearest", padding_mode="zeros", align_corners=False)
        picked = picked.to(torch.int32)
        inside = picked.clamp(max=1)
        flat, dims = _flat(x)
        if dims[1] == 1:  # NCHW: element 1 + (s * c + ch) * plane + pixel = picked + s * (c - 1) * plane + ch * plane
            planes = torch.arange(n * c, dtype=torch.int32, device=x.device).view(n, c, 1, 1)  # s * c + ch
            samples = torch.arange(n, dtype=torch.int32, device=x.device).view(n, 1, 1, 1)
            offsets = planes.sub_(samples).mul_(plane)
            index = torch.addcmul(picked, inside, offsets)
        else:  # channels_last: element 1 + (s * plane + pixel) * c + ch = c * picked - (c - 1) + ch
            picked, inside = picked.view(n, height, width, 1), inside.view(n, height, width, 1)
            channel = torch.arange(1 - c, 1, dtype=torch.int32, device=x.device)
            index = picked.mul(c).add(channel).mul_(inside).permute(0, 3, 1, 2)
        source = torch.cat([torch.full((1,), _fill_value(fill), dtype=torch.uint8, device=x.device), flat])
        return _gather(source, index)
    image = x.float()
    if fill is not None:  # torchvision samples a ones channel beside the image to know what came from outside
        image = torch.cat([image, torch.ones_like(image[:, :1])], dim=1)
    image = grid_sample(image, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None:
        image, mask = image[:, :c], image[:, c:]
        fill_t = torch.tensor(float(fill), dtype=torch.float32, device=x.device)
        if interpolation == "nearest":
            image = torch.where(mask < 0.5, fill_t, image)
        else:
            image = image.sub_(fill_t).mul_(mask).add_(fill_t)
    return _to_uint8(image.round_())


_COPY, _SHIFT, _WARP = IDENTITY, TRANSLATE_X, SHEAR_X  # kernel keys of the geometric ops' kinds
_KERNELS = {_SHIFT: _shift, _WARP: _warp, BRIGHTNESS: _brightness, COLOR: _color, CONTRAST: _contrast,
            SHARPNESS: _sharpness, POSTERIZE: _posterize, SOLARIZE: _solarize, AUTO_CONTRAST: _autocontrast,
            EQUALIZE: _equalize, INVERT: _invert}
_KEYS = len(OPS)
