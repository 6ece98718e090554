"""The errors of the user's making and the environment's (a setting that cannot work, a missing or
damaged dataset, a source that is not ImageNet, a peer that died): each says in one line what to
change or run. Both command lines catch UserError in one place and print it without a traceback;
anything else is a bug and keeps its traceback."""


class UserError(Exception):
    """A mistake in the input, the settings or the environment, explained in one line."""
