"""The command line's names for a run's settings, for the messages of the command line and of a resume:
the flag of each TrainConfig field (its name, dashed: `batch_size` is --batch-size) and a value as one
would type it. Imports nothing of train's."""

from __future__ import annotations

from shards.help import as_typed

FLAG_OF = {"channels_last": "--no-channels-last"}  # a field whose flag is not --its-name


def flag_of(field: str) -> str:
    return FLAG_OF.get(field, "--" + field.replace("_", "-"))


show = as_typed  # a setting's value as one would type it: none, a ramp's four numbers spaced, 5 for 5.0
