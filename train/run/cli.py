"""The command line of `python -m train`: parse, read the environment, configure logging, call `loop.main`."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from shards.errors import UserError
from train.run.config import parse_command_line
from train.run.flags import in_flags

if TYPE_CHECKING:
    from train.cluster import DistEnv


def setup_logging(env: DistEnv) -> None:
    logging.basicConfig(level=logging.INFO if env.is_main else logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s [train {env.node} rank {env.rank}] %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")


def main(argv: list[str] | None = None) -> int:
    command = parse_command_line(argv)
    # torch (train.cluster imports it) only after argument parsing: --help and a refused flag do not wait seconds
    # for it on a cluster's shared file system
    from train.cluster import dist_env

    try:
        env = dist_env(os.environ)
        setup_logging(env)
        from train.run.loop import main as run  # after argument parsing: --help stays fast

        return run(command, env)
    except UserError as exn:  # the user's mistakes and the environment's: one line, exit 2 (a bug keeps its traceback)
        logging.getLogger("train").error("%s", in_flags(exn))  # the library's arguments as flags
        return 2
