"""The library's numeric settings, checked one way: a whole number or a real number, as a plain
Python int or float, or one ConfigError line naming the setting.

Python's, numpy's and 0-d torch tensors' numbers are taken as the plain number they equal, so that
np.int64(0) is the seed 0 (and not another stream) and a state holding them loads with
torch.load(weights_only=True). Refused: booleans (True is 1 to Python, but `erasing=True` is a
mistake, not a probability of 1), NaN and infinities, strings, None, arrays and tensors of more than
one number, and, where a whole number is meant, any float (64.0 from a division is 64 by luck: say
`//`). No torch or numpy import: the command line's help must not wait for them.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, SupportsFloat, SupportsIndex, TypeVar

from train.errors import about

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


def whole_number(name: str, value, *, least: int | None = None, most: int | None = None,
                 said: str | None = None, note: str = "") -> int:
    """`value` as a plain int: an int, a numpy integer or a 0-d integer tensor. ConfigError about the
    argument `name` (said as `said`, or as the name) for anything else (a bool, a float, None, a
    string) and outside [least, most]; `note` follows the name (what the value means)."""
    if number_kind(value) not in WHOLE_KINDS:
        hint = ": use // for a division" if number_kind(value) == "f" else ""
        raise about(name, said, f"must be a whole number, not {described(value)}{hint}", note)
    return within(name, int(operator.index(value)), least, most, said, note)


def flag(name: str, value) -> bool:
    """`value` as a plain bool: True, False, a numpy bool or a 0-d bool tensor. ConfigError about `name` for
    anything else: a string "no" or "False" is true to Python, and would turn the flag on."""
    if number_kind(value) != "b":
        raise about(name, None, f"must be True or False, not {described(value)}")
    return bool(value)


def real_number(name: str, value, *, least: float | None = None, most: float | None = None,
                above: float | None = None, said: str | None = None, note: str = "") -> float:
    """`value` as a plain float: an int or float of Python's or numpy's, or a 0-d tensor of either,
    finite. ConfigError about `name` (said and noted as in whole_number) for anything else (a bool,
    NaN, an infinity, None, a string),
    below `least`, at or below `above`, or above `most`."""
    if number_kind(value) not in REAL_KINDS:
        raise about(name, said, f"must be a number, not {described(value)}", note)
    number = float(value)
    if not math.isfinite(number):
        raise about(name, said, f"must be a finite number, not {number}", note)
    if above is not None and number <= above:
        raise about(name, said, f"must be more than {above}, not {number}", note)
    return within(name, number, least, most, said, note)


def within(name: str, number, least, most, said: str | None = None, note: str = ""):
    if least is not None and number < least:
        raise about(name, said, f"must be at least {least}, not {number}", note)
    if most is not None and number > most:
        raise about(name, said, f"must be at most {most}, not {number}", note)
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
        raise about(name, None, f"must be three numbers, one per channel (R, G, B), not {values!r}")
    a, b, c = (real_number(name, values[i], least=least, most=most, above=above, said=f"{name}[{i}]")
               for i in range(3))
    return a, b, c
