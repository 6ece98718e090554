"""The errors of the user's making and the environment's (a setting that cannot work, a missing or
damaged dataset, a source that is not ImageNet, a peer that died): each says in one line what to
change or run. Both command lines catch UserError in one place and print it without a traceback;
anything else is a bug and keeps its traceback."""


class UserError(Exception):
    """A mistake in the input, the settings or the environment, explained in one line."""


def user_errors_in_one_line(program: str):
    """A command's `main(argv) -> int` whose UserError (a missing dataset, a setting that cannot work) is printed as
    one line, `PROGRAM: error: MESSAGE`, exit status 2, as argparse's refusals are; anything else keeps its traceback
    (a bug). For the commands that are not the product's two (the benchmarks), which have no error handling of
    their own."""
    import functools
    import sys

    def guard(main):
        @functools.wraps(main)
        def guarded(argv: list[str] | None = None) -> int:
            try:
                return main(argv)
            except UserError as exn:
                print(f"{program}: error: {exn}", file=sys.stderr)
                return 2
        return guarded
    return guard
