"""--help as the stages' command lines print it: every option's default once, as one would type it."""

from __future__ import annotations

import argparse


def as_typed(value) -> str:
    """A value as one would type it on a command line: None (no policy, no ramp) as none, a sequence
    (a ramp's four numbers) spaced, a whole float as its integer (--warmup-epochs 5)."""
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return " ".join(map(as_typed, value)) if isinstance(value, (tuple, list)) else str(value)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's help with each option's default said once, as typed (`(default: none)`, not
    `(default: None)`). Where the help text says the default in words ("default: the training size"),
    a value set otherwise for an option that takes one (a recipe's, through set_defaults; $SLURM_TMPDIR's)
    is added as `(here: 232)`.
    Nothing for a required option, a list that starts empty (an option given once per item), or a flag
    that only clears a value another option sets (--no-ramp: its default is that option's)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = action.help or "", action.default
        clears = isinstance(action, argparse._StoreConstAction) and action.const is None  # argparse's own class
        if "%(default)" in text or action.required or default is argparse.SUPPRESS or default == [] or clears:
            return text
        if "default:" in text:
            return text if default is None or action.nargs == 0 else f"{text} (here: {as_typed(default)})"
        return f"{text} (default: {as_typed(default)})"


def at_least_one(text: str) -> int:
    """argparse's type for a count a command line divides by or takes the median of (a benchmark's rounds,
    repetitions, images, epochs): 0 or fewer would end in a traceback after minutes of set-up, so argparse
    refuses it in its one line."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"{count} is fewer than 1")
    return count
