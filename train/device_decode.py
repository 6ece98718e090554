"""decode='gpu': each JPEG's crop region decoded on the device in one batched call, then the whole
batch cropped, resized and flipped by two batched matrix products per group of windows (each
window is still copied into its group's padded tensor by a call of its own).

    DeviceDecoder      NVIDIA nvImageCodec's batched decode of each image's window (its crop box
                       plus the filter's margin, see transforms.decode_windows): nvJPEG's region
                       decode on the GPU (the hardware JPEG decoder where the GPU has one), its
                       CPU libjpeg-turbo backend for what those refuse; PIL on the host, counted,
                       for what nvImageCodec refuses. On a CPU device (the tests) the CPU backend.
    crop_resize_flip   the CPU decoder's resize of every box to size x size (PIL's antialiased
                       bilinear or bicubic, OpenCV's area: train/decoder.py's INTERPOLATIONS)
                       as two batched matrix products per group of windows padded to one size:
                       the filter's weights for a box are a (size x window) matrix per axis,
                       zero outside the box's taps, with the flip folded into the row order.
"""

from __future__ import annotations

import contextlib
import logging
import os

import numpy as np
import torch

from train.decoder import pil_open

log = logging.getLogger("train")

# Fancy (smooth) chroma upsampling, as libjpeg-turbo and PIL do it; nvJPEG before 13.2 may get a
# region's outermost pixel wrong with it, which the windows' one-pixel margin leaves unused.
OPTIONS = ":fancy_upsampling=1 :enable_roi_fancy_upsampling=1"
# nvImageCodec's own host threads (Huffman decoding of the hybrid path): 4 rather than one per core
# leaves the cores to the training thread and the loader's (H100, 16 vCPUs: full/model 0.85
# against 0.83, BENCHMARKS.md).
CPU_THREADS = 4
GROUP_BYTES = 1 << 28  # padded windows per matrix-product group (fp16): few groups, bounded memory


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 to /dev/null: nvImageCodec's import complains about codecs (JPEG 2000,
    TIFF) whose libraries are not installed, which we never use."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def nvimgcodec():
    """The nvImageCodec module; ImportError saying what to install where it is missing."""
    try:
        with quiet_stderr():
            from nvidia import nvimgcodec as module
    except ImportError:
        raise ImportError("the device decode needs NVIDIA nvImageCodec: pip install 'nvidia-nvimgcodec-cu13[nvjpeg]' "
                          "(nvidia-nvimgcodec-cu12 for CUDA 12)") from None
    return module


class DeviceDecoder:
    """The decoder of decode='gpu' for a run. `decode` returns each image's window as a uint8 HWC tensor
    on the device, or None where no decoder takes it (damaged). The images nvImageCodec refuses are
    decoded by PIL on the host: the first is logged, all are counted (`fallbacks`)."""

    def __init__(self, options: str = OPTIONS):
        self.fallbacks, self.options = 0, options
        self.decoders: dict[torch.device, object] = {}
        self.module = nvimgcodec()
        self.params = self.module.DecodeParams(apply_exif_orientation=False,  # as the CPU decoder: pixels as stored
                                               color_spec=self.module.ColorSpec.SRGB,
                                               sample_format=self.module.SampleFormat.I_RGB)

    def describe(self) -> str:
        return f"nvImageCodec {getattr(self.module, '__version__', '')}".strip()

    def _decoder(self, device: torch.device):
        if device not in self.decoders:
            m = self.module
            with quiet_stderr():
                if device.type == "cuda":
                    index = device.index if device.index is not None else torch.cuda.current_device()
                    self.decoders[device] = m.Decoder(device_id=index, max_num_cpu_threads=CPU_THREADS,
                                                      options=self.options)
                else:
                    self.decoders[device] = m.Decoder(device_id=m.NVIMGCODEC_DEVICE_CPU_ONLY,
                                                      backends=[m.Backend(m.BackendKind.CPU_ONLY)],
                                                      options=self.options)
        return self.decoders[device]

    def decode(self, jpegs: list, windows: np.ndarray, device: torch.device) -> list[torch.Tensor | None]:
        """Image i's window (int (n, 4): left, top, right, bottom) of the JPEG bytes jpegs[i]."""
        streams = self.code_streams(jpegs, windows)
        known = [s for s in streams if s is not None]
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        decoded = iter(self._decoder(device).decode(known, params=self.params, cuda_stream=stream) if known else [])
        out: list[torch.Tensor | None] = []
        for i, code_stream in enumerate(streams):
            image = None if code_stream is None else next(decoded)
            if image is None:
                out.append(self._on_host(jpegs[i], windows[i], device))
            elif device.type == "cuda":
                out.append(torch.as_tensor(image, device=device))
            else:
                out.append(torch.from_numpy(np.asarray(image.cpu())))
        return out

    def code_streams(self, jpegs: list, windows: np.ndarray) -> list:
        """nvImageCodec's view of each image's window; None for what it does not know."""
        m = self.module
        streams = []
        for data, (left, top, right, bottom) in zip(jpegs, windows.tolist()):
            try:
                whole = m.CodeStream(np.frombuffer(data, np.uint8))
                streams.append(whole.get_sub_code_stream(region=m.Region(top, left, bottom, right)))
            except RuntimeError:  # not an image nvImageCodec knows
                streams.append(None)
        return streams

    def _on_host(self, data, window: np.ndarray, device: torch.device) -> torch.Tensor | None:
        """PIL's decode of an image nvImageCodec refuses, cut to its window; None if PIL refuses it too
        (its size checked against the pixel limit before it is decoded)."""
        try:
            image = pil_open(bytes(data))
            left, top, right, bottom = window.tolist()
            pixels = np.array(image.convert("RGB").crop((left, top, right, bottom)), dtype=np.uint8)
        except MemoryError:
            raise
        except Exception:  # PilFailure, or PIL's decode of hostile bytes: any other error it raises is about them
            return None
        if not self.fallbacks:
            log.warning("decode='gpu': an image nvImageCodec does not decode went through PIL on the host; further "
                        "ones are only counted (device_decode_fallbacks in metrics.jsonl)")
        self.fallbacks += 1
        return torch.from_numpy(pixels).to(device)


def bicubic(x: torch.Tensor) -> torch.Tensor:
    """PIL's bicubic_filter: Keys' cubic convolution with a = -0.5."""
    a, x = -0.5, x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def resize_weights(start: torch.Tensor, stop: torch.Tensor, length: torch.Tensor, size: int,
                   padded: int, interpolation: str = "bilinear", offset: torch.Tensor | None = None,
                   extent: torch.Tensor | None = None, flip: torch.Tensor | None = None) -> torch.Tensor:
    """(n, size, padded) float32: the weights that resize [start, stop) of a line of `length`
    pixels (per image, float tensors (n,)) to `size` pixels, as train/native/resample.c makes them:
    PIL's antialiased bilinear (triangle) or bicubic kernel, stretched by the downscale, or OpenCV's
    area (each pixel weighted by how much of the output pixel's cell it covers); taps clamped to the
    line, each row summing to 1 (where any weight is left); columns from `length` to `padded` are zero.
    With `offset` and `extent` (per image), to the `extent` outputs from `offset` alone, the others'
    rows zero (a region of the output: the padding's); with `flip` (bool, per image), in reverse order
    within them."""
    n = len(start)
    offset = torch.zeros(n, device=start.device) if offset is None else offset.float()
    extent = torch.full((n,), float(size), device=start.device) if extent is None else extent.float()
    scale = ((stop - start) / extent)[:, None, None]
    local = torch.arange(size, device=start.device)[None, :, None] - offset[:, None, None]  # within the region
    inside = (local >= 0) & (local < extent[:, None, None])
    if flip is not None:
        local = torch.where(flip[:, None, None], extent[:, None, None] - 1 - local, local)
    taps = torch.arange(padded, device=start.device)[None, None, :]
    if interpolation == "area":
        cell = start[:, None, None] + local * scale
        weights = (torch.minimum(taps + 1, cell + scale) - torch.maximum(taps, cell)).clamp(min=0)
    else:
        centre = start[:, None, None] + (local + 0.5) * scale
        x = (taps + 0.5 - centre) / scale.clamp(min=1.0)
        weights = bicubic(x) if interpolation == "bicubic" else (1 - x.abs()).clamp(min=0)
    weights = weights * (taps < length[:, None, None]) * inside
    total = weights.sum(-1, keepdim=True)
    return weights / torch.where(total.abs() < 1e-12, torch.ones_like(total), total)


def resize_groups(heights: np.ndarray, widths: np.ndarray, budget: int = GROUP_BYTES) -> list[np.ndarray]:
    """Images in groups to pad to one size: by area, each group's padded fp16 windows within
    `budget` bytes (an image larger than the budget is a group of its own)."""
    groups, current, most_h, most_w = [], [], 0, 0
    for i in np.argsort(heights.astype(np.int64) * widths, kind="stable").tolist():
        h, w = max(most_h, int(heights[i])), max(most_w, int(widths[i]))
        if current and (len(current) + 1) * h * w * 3 * 2 > budget:
            groups.append(np.array(current))
            current, h, w = [], int(heights[i]), int(widths[i])
        current.append(i)
        most_h, most_w = h, w
    if current:
        groups.append(np.array(current))
    return groups


def crop_resize_flip(images: list[torch.Tensor], boxes: torch.Tensor, flips: torch.Tensor,
                     size: int | tuple[int, int], group_bytes: int = GROUP_BYTES, interpolation: str = "bilinear",
                     regions: torch.Tensor | None = None, fill: tuple[int, int, int] = (0, 0, 0)) -> torch.Tensor:
    """Each HWC uint8 image's box (float (n, 4) left, top, right, bottom in its own pixels) resized
    to size x size (or a (height, width) size) as the CPU decoder does (PIL's resize(box=...) with its
    bilinear or bicubic filter, or OpenCV's area), or with `regions` (int (n, 4): top, left, height,
    width) to that region of it, the rest `fill` (RGB), flipped where `flips`: float NCHW (channels_last
    memory) in 0-255 on the images' device. Per group of windows: one padded copy, two batched matrix products (fp16 on
    a GPU: exact for pixels, weights to 11 bits), columns first and each clipped to 0-255, as PIL
    resizes and clips (bicubic's negative lobes overshoot: clipped in the other order, a pixel by a
    sharp edge near 0 or 255 would differ by 10 levels and more); the fractions are kept."""
    device = images[0].device
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    heights = np.array([image.shape[0] for image in images])
    widths = np.array([image.shape[1] for image in images])
    boxes, flips = boxes.to(device, torch.float32), flips.to(device)
    regions = None if regions is None else regions.to(device)
    out_h, out_w = (size, size) if isinstance(size, int) else size
    out = torch.empty((len(images), out_h, out_w, 3), dtype=dtype, device=device)  # NHWC
    for group in resize_groups(heights, widths, group_bytes):
        g, h, w = len(group), int(heights[group].max()), int(widths[group].max())
        padded = torch.empty((g, 3, h, w), dtype=torch.uint8, device=device)  # CHW; outside each window: weight 0
        for k, i in enumerate(group.tolist()):
            padded[k, :, :heights[i], :widths[i]] = images[i].permute(2, 0, 1)
        at = torch.from_numpy(group).to(device)
        box = boxes[at]
        region = None if regions is None else regions[at]
        rows = resize_weights(box[:, 1], box[:, 3], torch.from_numpy(heights[group]).to(device), out_h, h,
                              interpolation, *(() if region is None else (region[:, 0], region[:, 2])))
        cols = resize_weights(box[:, 0], box[:, 2], torch.from_numpy(widths[group]).to(device), out_w, w,
                              interpolation, *((None, None) if region is None else (region[:, 1], region[:, 3])),
                              flip=flips[at])
        # columns: (g, 3h, w) @ (g, w, out_w) -> (g, 3h, out_w); then rows: (g, out_h, h) @ (g, h, 3 out_w)
        wide = torch.bmm(padded.view(g, 3 * h, w).to(dtype), cols.transpose(1, 2).to(dtype)).clamp_(0, 255)
        wide = wide.view(g, 3, h, out_w).transpose(1, 2).reshape(g, h, 3 * out_w)
        out[at] = torch.bmm(rows.to(dtype), wide).clamp_(0, 255).view(g, out_h, 3, out_w).transpose(2, 3)
    if regions is not None:  # the padding: zero weights left it black; in `fill` where that is another colour
        out = torch.where(outside_regions(regions, (out_h, out_w))[..., None],
                          torch.tensor(fill, dtype=dtype, device=device), out)
    return out.permute(0, 3, 1, 2).float()


def outside_regions(regions: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """bool (n, height, width): the pixels of each output outside its region (top, left, height, width)."""
    down, across = torch.arange(shape[0], device=regions.device), torch.arange(shape[1], device=regions.device)
    rows = (down[None, :] >= regions[:, 0:1]) & (down[None, :] < regions[:, 0:1] + regions[:, 2:3])
    cols = (across[None, :] >= regions[:, 1:2]) & (across[None, :] < regions[:, 1:2] + regions[:, 3:4])
    return ~(rows[:, :, None] & cols[:, None, :])
