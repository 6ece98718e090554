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
    `(default: None)`): not again where the help text says it ("default: ..."), nor for a required
    option, a flag that only clears a value (--no-ramp) or a list that starts empty (an option given
    once per item)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default:" in text or action.required or action.default is argparse.SUPPRESS or action.default == []
                or (action.nargs == 0 and action.default is None)):
            return text
        return f"{text} (default: {as_typed(action.default)})"
