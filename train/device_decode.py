"""--decode gpu: each JPEG's crop region decoded on the device in one batched call, then the whole
batch cropped, resized and flipped by two batched matrix products per group of windows (each
window is still copied into its group's padded tensor by a call of its own).

    DeviceDecoder      NVIDIA nvImageCodec's batched decode of each image's window (its crop box
                       plus the filter's margin, see transforms.decode_windows): nvJPEG's region
                       decode on the GPU (the hardware JPEG decoder where the GPU has one), its
                       CPU libjpeg-turbo backend for what those refuse; PIL on the host, counted,
                       for what nvImageCodec refuses. On a CPU device (the tests) the CPU backend.
    crop_resize_flip   PIL's antialiased bilinear resize of every box to size x size as two
                       batched matrix products per group of windows padded to one size: the
                       triangle filter's weights for a box are a (size x window) matrix per axis,
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
        raise ImportError("--decode gpu needs NVIDIA nvImageCodec: pip install 'nvidia-nvimgcodec-cu13[nvjpeg]' "
                          "(nvidia-nvimgcodec-cu12 for CUDA 12), or use --decode cpu") from None
    return module


class DeviceDecoder:
    """--decode gpu's decoder for a run. `decode` returns each image's window as a uint8 HWC tensor
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
            log.warning("--decode gpu: an image nvImageCodec does not decode went through PIL on the host; further "
                        "ones are only counted (device_decode_fallbacks in metrics.jsonl)")
        self.fallbacks += 1
        return torch.from_numpy(pixels).to(device)


def resize_weights(start: torch.Tensor, stop: torch.Tensor, length: torch.Tensor, size: int,
                   padded: int) -> torch.Tensor:
    """(n, size, padded) float32: PIL's antialiased bilinear weights that resize [start, stop) of a
    line of `length` pixels (per image, float tensors (n,)) to `size` pixels: a triangle filter
    whose support grows with the downscale, taps clamped to the line, each row summing to 1;
    columns from `length` to `padded` are zero."""
    scale = ((stop - start) / size)[:, None, None]
    support = scale.clamp(min=1.0)
    centre = start[:, None, None] + (torch.arange(size, device=start.device)[None, :, None] + 0.5) * scale
    taps = torch.arange(padded, device=start.device)[None, None, :]
    weights = (1 - ((taps + 0.5 - centre) / support).abs()).clamp(min=0)
    weights = weights * (taps < length[:, None, None])
    return weights / weights.sum(-1, keepdim=True).clamp(min=1e-12)


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


def crop_resize_flip(images: list[torch.Tensor], boxes: torch.Tensor, flips: torch.Tensor, size: int,
                     group_bytes: int = GROUP_BYTES) -> torch.Tensor:
    """Each HWC uint8 image's box (float (n, 4) left, top, right, bottom in its own pixels) resized
    to size x size as PIL's bilinear resize(box=...) does, flipped where `flips`: float NCHW
    (channels_last memory) in 0-255 on the images' device. Per group of windows: one padded copy,
    two batched matrix products (fp16 on a GPU: exact for pixels, weights to 11 bits)."""
    device = images[0].device
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    heights = np.array([image.shape[0] for image in images])
    widths = np.array([image.shape[1] for image in images])
    boxes, flips = boxes.to(device, torch.float32), flips.to(device)
    out = torch.empty((len(images), size, size, 3), dtype=dtype, device=device)  # NHWC
    for group in resize_groups(heights, widths, group_bytes):
        h, w = int(heights[group].max()), int(widths[group].max())
        padded = torch.empty((len(group), h, w, 3), dtype=torch.uint8, device=device)  # outside each window: weight 0
        for k, i in enumerate(group.tolist()):
            padded[k, :heights[i], :widths[i]] = images[i]
        at = torch.from_numpy(group).to(device)
        box = boxes[at]
        rows = resize_weights(box[:, 1], box[:, 3], torch.from_numpy(heights[group]).to(device), size, h)
        cols = resize_weights(box[:, 0], box[:, 2], torch.from_numpy(widths[group]).to(device), size, w)
        cols = torch.where(flips[at].view(-1, 1, 1), cols.flip(1), cols)
        # rows: (g, size, h) @ (g, h, w*3) -> (g, size, w*3); then columns, with the image transposed
        tall = torch.bmm(rows.to(dtype), padded.view(len(group), h, w * 3).to(dtype))
        across = tall.view(len(group), size, w, 3).transpose(1, 2).reshape(len(group), w, size * 3)
        out[at] = torch.bmm(cols.to(dtype), across).view(len(group), size, size, 3).transpose(1, 2)
    return out.permute(0, 3, 1, 2).float()
