"""The CPU device's normalisation (train/native/batches.c, through device_batches.normalised_on_host):
bit for bit torch's formula, `normalise(x.float(), ...)`, for every value of every channel, for any
mean and std the library accepts, in both memory formats and every floating dtype, with random
erasing after it; the public loader's real batches against its uint8 output; the output buffers
reused only once nobody holds them; the native module's refusals."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from train import ImageNetLoader
from train.augment.ops import erase
from train.device_batches import (IMAGENET_MEAN, IMAGENET_STD, HostOutputs, as_uint8, copied_on_host, native_batches,
                                  normalise, normalised_on_host, storage_holders)

SIZE = 32
CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
_draw = random.Random(32)
STATISTICS = [(IMAGENET_MEAN, IMAGENET_STD), CLIP, ((0.5,) * 3, (0.5,) * 3), ((0.0, 1.0, 0.5), (1e-6, 1.0, 0.3)),
              *[(tuple(_draw.random() for _ in range(3)), tuple(_draw.uniform(1e-4, 1) for _ in range(3)))
                for _ in range(12)]]
FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def every_value() -> torch.Tensor:
    """uint8 NCHW (a view of NHWC memory, as the loader's batches are): each channel takes all 256 values."""
    return torch.arange(256, dtype=torch.uint8).repeat_interleave(3).view(1, 16, 16, 3).permute(0, 3, 1, 2)


def odd_batch() -> torch.Tensor:
    """A batch whose value count is no multiple of any vector width: the native loops' tails."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (3, 5, 7, 3), dtype=torch.uint8, generator=generator).permute(0, 3, 1, 2)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal in dtype, shape, strides and every bit (torch.equal takes -0.0 for 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


@pytest.mark.parametrize("mean,std", STATISTICS)
def test_every_value_is_torchs_bit_for_bit_for_any_statistics_format_and_dtype(mean, std):
    for x in (every_value(), odd_batch()):
        for channels_last in (True, False):
            for dtype in FLOATS:
                reference = normalise(x.float(), channels_last, dtype, mean=mean, std=std)
                ours = normalised_on_host(x, channels_last, dtype, None, mean, std, HostOutputs(limit=2))
                assert same_bits(ours, reference), (mean, std, channels_last, dtype)


def test_erasing_after_the_native_normalisation_is_torchs():
    x = odd_batch()
    boxes = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0], [0, 0, 5, 7]], dtype=torch.int32)
    for channels_last in (True, False):
        reference = normalise(x.float(), channels_last, erasing=lambda images: erase(images, boxes), mean=CLIP[0],
                              std=CLIP[1])
        ours = normalised_on_host(x, channels_last, torch.float32, lambda images: erase(images, boxes), *CLIP,
                                  HostOutputs(limit=2))
        assert same_bits(ours, reference)
        assert (ours[2] == 0).all() and (ours[1] != 0).any()


def test_a_policys_output_in_another_memory_format_is_normalised_the_same():
    x = odd_batch().contiguous()  # NCHW memory, as a policy's ops may return it
    assert same_bits(normalised_on_host(x, True, torch.float32, None, *CLIP, HostOutputs(limit=1)),
                     normalise(x.float(), True, mean=CLIP[0], std=CLIP[1]))


# ---------------------------------------------------------------- real batches of the public loader

def loader(prepared, **options) -> ImageNetLoader:
    options = {"batch_size": 4, "image_size": SIZE, "device": "cpu", "workers": 2, **options}
    return ImageNetLoader(prepared, "train", **options)


def pass_of(prepared, keep=lambda images: images.clone(), **options) -> list[torch.Tensor]:
    with loader(prepared, **options) as data:
        data.set_epoch(1)
        return [keep(images) for images, _ in data]


@pytest.mark.parametrize("mean,std,channels_last,dtype", [(IMAGENET_MEAN, IMAGENET_STD, True, torch.float32),
                                                          (*CLIP, True, torch.float32), (*STATISTICS[5], False,
                                                                                         torch.float32),
                                                          ((0.5,) * 3, (0.5,) * 3, True, torch.bfloat16)])
def test_the_loaders_float_batches_are_its_uint8_batches_through_torchs_formula(prepared, mean, std, channels_last,
                                                                                 dtype):
    pixels = pass_of(prepared, dtype=torch.uint8)
    floats = pass_of(prepared, mean=mean, std=std, channels_last=channels_last, dtype=dtype)
    assert len(pixels) == len(floats) > 5
    for x, y in zip(pixels, floats):
        assert same_bits(y, normalise(x.float(), channels_last, dtype, mean=mean, std=std))


def test_batches_the_caller_keeps_are_never_overwritten_and_dropped_ones_are_reused(prepared):
    held = pass_of(prepared, keep=lambda images: images)  # every batch kept as yielded: no buffer is free
    copies = pass_of(prepared)
    assert len(held) == len(copies) > 2 * (2 + 3)
    assert all(same_bits(a, b) for a, b in zip(held, copies))
    addresses = pass_of(prepared, keep=lambda images: images.data_ptr())  # each batch dropped at once
    assert len(set(addresses)) <= 2 + 3  # prefetch 2: the pool's limit
    views = pass_of(prepared, keep=lambda images: images[:, :1])  # a view holds its batch's buffer too
    assert all(same_bits(a, b[:, :1]) for a, b in zip(views, copies))


@pytest.mark.parametrize("channels_last", [True, False])
def test_uint8_batches_are_copied_into_reused_buffers_and_kept_ones_never_overwritten(prepared, channels_last):
    held = pass_of(prepared, keep=lambda images: images, dtype=torch.uint8, channels_last=channels_last)
    copies = pass_of(prepared, dtype=torch.uint8, channels_last=channels_last)
    assert len(held) == len(copies) > 2 * (2 + 3)
    assert all(a.dtype == torch.uint8 and torch.equal(a, b) for a, b in zip(held, copies))
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    assert all(a.is_contiguous(memory_format=memory_format) for a in held)
    addresses = pass_of(prepared, keep=lambda images: images.data_ptr(), dtype=torch.uint8,
                        channels_last=channels_last)
    assert len(set(addresses)) <= 2 + 3  # dropped at once: the pool's buffers again
    floats = pass_of(prepared, channels_last=channels_last)  # the same pixels under the float path
    assert all(same_bits(y, normalise(x.float(), channels_last)) for x, y in zip(copies, floats))


def test_the_uint8_copy_is_as_uint8s_for_a_policys_planar_output_too():
    x = torch.randint(0, 256, (5, 3, 9, 7), dtype=torch.uint8)  # NCHW contiguous, as a policy's ops leave it
    nhwc = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # the loader's NHWC batch
    for source in (x, nhwc):
        for channels_last in (True, False):
            copied = copied_on_host(source, channels_last, HostOutputs(limit=1))
            expected = as_uint8(source, channels_last)
            assert torch.equal(copied, expected) and copied.stride() == expected.stride()


def test_a_buffer_is_reused_only_when_nothing_holds_its_memory():
    outputs = HostOutputs(limit=2)
    first = outputs.take(4, 8, 8, True)
    address = first.data_ptr()
    del first
    again = outputs.take(3, 8, 8, True)  # a smaller batch fits a buffer's first rows
    assert again.data_ptr() == address and again.shape == (3, 3, 8, 8)
    assert again.is_contiguous(memory_format=torch.channels_last)
    for holder in (lambda t: t[1:], lambda t: t.numpy(), lambda t: t.untyped_storage(), lambda t: [t]):
        kept = holder(again)
        del again
        other = outputs.take(4, 8, 8, True)
        assert other.data_ptr() != address, holder
        del other, kept
        again = outputs.take(4, 8, 8, True)
        assert again.data_ptr() == address
    held = [again] + [outputs.take(4, 8, 8, True) for _ in range(4)]  # beyond the limit: new tensors, not kept
    assert len({t.data_ptr() for t in held}) == 5 and len(outputs.buffers) == 2
    assert outputs.take(4, 8, 8, False).is_contiguous()  # another memory format: another buffer
    assert storage_holders(torch.empty(3)) is not None  # this torch can say: the pool is in use


# ---------------------------------------------------------------- the native module's refusals

def native_arguments(**changes):
    arguments = {"images": np.zeros((2, 4, 5, 3), np.uint8), "out": np.zeros((2, 4, 5, 3), np.float32),
                 "mean": np.array([120.0, 110.0, 100.0], np.float32), "std": np.array([60.0, 55.0, 57.0], np.float32)}
    return {**arguments, **changes}


@pytest.mark.parametrize("changes,error", [
    ({"images": np.zeros((2, 4, 5, 3), np.float32)}, TypeError),
    ({"images": np.zeros((2, 4, 5, 4), np.uint8)}, ValueError),
    ({"images": np.zeros((2, 4, 5, 3), np.uint8)[:, :, ::2]}, TypeError),  # not C-contiguous
    ({"images": np.zeros((4, 5, 3), np.uint8)}, ValueError),
    ({"out": np.zeros((2, 4, 5, 3), np.float64)}, TypeError),
    ({"out": np.zeros((2, 4, 6, 3), np.float32)}, ValueError),
    ({"out": np.zeros((2, 4, 5, 3), np.float32), "planar": True}, ValueError),  # planar wants (n, 3, h, w)
    ({"out": np.zeros((2, 3, 5, 4), np.float32).transpose(0, 3, 2, 1)}, TypeError),
    ({"out": np.zeros((2, 4, 5, 3), np.float32).view(np.int32)}, TypeError),
    ({"mean": np.zeros(4, np.float32)}, ValueError),
    ({"mean": np.array([np.nan, 1, 1], np.float32)}, ValueError),
    ({"std": np.array([1, 0, 1], np.float32)}, ValueError),
    ({"std": np.array([1, -2, 1], np.float32)}, ValueError),
    ({"std": np.array([1, np.inf, 1], np.float32)}, ValueError),
    ({"images": b"\0" * 120}, ValueError),
    ({"images": None}, TypeError),
])
def test_the_native_normalisation_refuses_what_it_cannot_take(changes, error):
    with pytest.raises(error):
        native_batches().normalise(**native_arguments(**changes))


def test_the_native_normalisation_refuses_a_read_only_out_and_takes_empty_batches():
    out = np.zeros((2, 4, 5, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        native_batches().normalise(**native_arguments(out=out))
    empty = np.zeros((0, 4, 5, 3), np.float32)
    native_batches().normalise(**native_arguments(images=np.zeros((0, 4, 5, 3), np.uint8), out=empty))
    planar = np.zeros((2, 3, 4, 5), np.float32)
    native_batches().normalise(**native_arguments(out=planar), planar=True)
    assert np.all(planar[:, 0] == np.float32(-120.0) / np.float32(60.0))


def test_the_stub_beside_the_native_module_names_its_function_and_every_argument():
    from test_decoder import test_the_stubs_beside_the_native_modules_name_what_they_hold_and_every_argument as check

    check(native_batches())
