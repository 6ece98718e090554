"""The library's numeric settings, checked one way: a whole number or a real number, as a plain
Python int or float, or one ConfigError line naming the setting.

Python's, numpy's and 0-d torch tensors' numbers are taken as the plain number they equal, so that
np.int64(0) is the seed 0 (and not another stream) and a state holding them loads with
torch.load(weights_only=True). Refused: booleans (True is 1 to Python, but `erasing=True` is a
mistake, not a probability of 1), NaN and infinities, strings, None, arrays and tensors of more than
one number, and, where a whole number is meant, any float (64.0 from a division is 64 by luck: say
`//`). No torch or numpy import: `python -m train --help` must not wait for them.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, SupportsFloat, SupportsIndex, TypeVar

from train.errors import ConfigError

# What a type checker lets through where the library takes a number: ints, numpy integers and
# tensors have __index__; floats, numpy floats and tensors __float__ (the run-time checks are below).
Whole = SupportsIndex
Real = SupportsFloat

WHOLE_KINDS = frozenset("iu")  # numpy's dtype kinds of integers
REAL_KINDS = frozenset("iuf")  # and of floats


def number_kind(value) -> str | None:
    """numpy's dtype kind of a single number ("b", "i", "u", "f", "c"), or None where `value` is not
    one: Python's bool, int and float, numpy scalars and 0-d arrays, 0-d torch tensors."""
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "i"
    if isinstance(value, float):
        return "f"
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is None or shape is None or tuple(shape) != ():
        return None  # not a number, or more than one (a 1-element tensor is still a tensor: say .item())
    kind = getattr(dtype, "kind", None)  # numpy's
    if isinstance(kind, str):
        return kind
    return torch_kind(dtype)


def torch_kind(dtype) -> str | None:
    """A torch dtype's kind in numpy's letters, read from its attributes (no torch import)."""
    if not hasattr(dtype, "is_floating_point"):
        return None
    if str(dtype) == "torch.bool":
        return "b"
    if dtype.is_complex:
        return "c"
    return "f" if dtype.is_floating_point else "i"


def described(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def whole_number(name: str, value, *, least: int | None = None, most: int | None = None) -> int:
    """`value` as a plain int: an int, a numpy integer or a 0-d integer tensor. ConfigError naming
    `name` for anything else (a bool, a float, None, a string) and outside [least, most]."""
    if number_kind(value) not in WHOLE_KINDS:
        hint = ": use // for a division" if number_kind(value) == "f" else ""
        raise ConfigError(f"{name} must be a whole number, not {described(value)}{hint}")
    return within(name, int(operator.index(value)), least, most)


def real_number(name: str, value, *, least: float | None = None, most: float | None = None,
                above: float | None = None) -> float:
    """`value` as a plain float: an int or float of Python's or numpy's, or a 0-d tensor of either,
    finite. ConfigError naming `name` for anything else (a bool, NaN, an infinity, None, a string),
    below `least`, at or below `above`, or above `most`."""
    if number_kind(value) not in REAL_KINDS:
        raise ConfigError(f"{name} must be a number, not {described(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, not {number}")
    if above is not None and number <= above:
        raise ConfigError(f"{name} must be more than {above}, not {number}")
    return within(name, number, least, most)


def within(name: str, number, least, most):
    if least is not None and number < least:
        raise ConfigError(f"{name} must be at least {least}, not {number}")
    if most is not None and number > most:
        raise ConfigError(f"{name} must be at most {most}, not {number}")
    return number


T = TypeVar("T")


def optional(check: Callable[..., T], name: str, value, **bounds) -> T | None:
    """None, or `check(name, value, **bounds)`: a setting whose None means its default."""
    return None if value is None else check(name, value, **bounds)


def real_triple(name: str, values, *, least: float | None = None, most: float | None = None,
                above: float | None = None) -> tuple[float, float, float]:
    """Three real numbers, one per colour channel (R, G, B), as a tuple of plain floats: a list, a
    tuple, or a numpy array or tensor of shape (3,)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) != 3:
        raise ConfigError(f"{name} must be three numbers, one per channel (R, G, B), not {values!r}")
    a, b, c = (real_number(f"{name}[{i}]", values[i], least=least, most=most, above=above) for i in range(3))
    return a, b, c
