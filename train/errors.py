"""The library's errors, below the command line: what `from train import ConfigError, ResumeError` gives,
and what the loader, the checkpoint, the models and the command line raise alike. Both derive from
shards.errors.UserError: caught once by `python -m train`, one line, exit status 2."""

from __future__ import annotations

from shards.errors import UserError


class ConfigError(UserError):
    """A setting that cannot work (an unknown model, a batch larger than the data): the message says
    which one and what to change."""


class ResumeError(UserError, RuntimeError):
    """A checkpoint or loader state cannot continue this run: the message says why and what to do."""
