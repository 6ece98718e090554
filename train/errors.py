"""The library's errors, below the command line: what `from train import ConfigError, ResumeError` gives,
and what the loader, the checkpoint, the models and the command line raise alike. Both derive from
shards.errors.UserError: caught once by `python -m train`, one line, exit status 2."""

from __future__ import annotations

from collections.abc import Mapping

from shards.errors import UserError


class ConfigError(UserError):
    """A setting that cannot work (an unknown model, a batch larger than the data): the message says
    which one and what to change.

    The arguments it is about travel with it as data: `arguments` maps each one's key (the name the
    caller passed it under: `magnitude`, `val_crop`, `ramp.start_epoch`) to the words the library says
    it with ("augment magnitude"), and the message holds `{key}` where it names one. str() gives the
    library's words; a caller with names of its own (`python -m train`'s flags) gives them to
    `said_with`, so that no caller ever reads the message back."""

    def __init__(self, message: str, arguments: Mapping[str, str] | None = None):
        self.template = message
        self.arguments = dict(arguments or {})
        super().__init__(self.said_with({}))

    def said_with(self, names: Mapping[str, str]) -> str:
        """The message, each argument said as `names` has it (the library's words where it has none)."""
        text = self.template
        for key, words in self.arguments.items():
            text = text.replace("{" + key + "}", names.get(key, words))
        return text

    def __reduce__(self):  # a pickled one (from a worker process) keeps its arguments
        return type(self), (self.template, self.arguments)


def about(key: str, words: str | None, rest: str, note: str = "") -> ConfigError:
    """ConfigError whose message starts with the argument `key` (said as `words`, or as the key),
    then `note` (what the value means, said whatever the argument's name), then `rest`."""
    return ConfigError("{" + key + "}" + note + " " + rest, {key: words or key})


class ResumeError(UserError, RuntimeError):
    """A checkpoint or loader state cannot continue this run: the message says why and what to do."""
