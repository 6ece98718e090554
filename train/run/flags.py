"""The command line's names for a run's settings, for the messages of the command line and of a resume:
the flag of each TrainConfig field (its name, dashed: `batch_size` is --batch-size) and a value as one
would type it; and the library's refusals said with the flags (`in_flags`), from the arguments they
carry, never from their words. Imports nothing of train's but the library's errors."""

from __future__ import annotations

from shards.errors import UserError
from shards.help import as_typed
from train.errors import ConfigError

# --dist-timeout's largest (python -m train's and train.evaluate's): 1e14 s failed gloo's check of its timeout and
# 1e308 timedelta's, on several ranks only (a traceback, after the set-up), where 1e9 s (31 years) passes both
MAX_DIST_TIMEOUT_S = 1e9
FLAG_OF = {"channels_last": "--no-channels-last"}  # a field whose flag is not --its-name
# The library's arguments that are no TrainConfig field of their own name -> the flag that sets them. Every
# other argument a library refusal carries is a field's own name (magnitude, val_crop, repeats, decode).
FLAG_OF_ARGUMENT = {"ramp.start": "--ramp START_PX", "ramp.end": "--ramp END_PX",
                    "ramp.start_epoch": "--ramp START_EPOCH", "ramp.end_epoch": "--ramp END_EPOCH",
                    "image_size.ramp": "--ramp"}


def flag_of(field: str) -> str:
    return FLAG_OF.get(field, "--" + field.replace("_", "-"))


def in_flags(exn: UserError) -> str:
    """A refusal as the command line says it: each argument a library ConfigError is about, as its flag
    ("augment magnitude must be below ..." -> "--magnitude must be below ...")."""
    if not isinstance(exn, ConfigError):
        return str(exn)
    return exn.said_with({key: FLAG_OF_ARGUMENT.get(key) or flag_of(key) for key in exn.arguments})


show = as_typed  # a setting's value as one would type it: none, a ramp's four numbers spaced, 5 for 5.0
