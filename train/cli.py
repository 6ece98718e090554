"""The command line of `python -m train`: parse, configure logging, call `loop.main`."""

from __future__ import annotations

import logging
import os
import socket
import sys

from shards.manifest import DatasetNotReady
from train.checkpoint import ResumeError
from train.cluster import ClusterError
from train.config import build_parser, config_from_args


def setup_logging() -> None:
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    logging.basicConfig(level=logging.INFO if rank == "0" else logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s [train {node} rank {rank}] %(levelname)s %(message)s", datefmt="%H:%M:%S")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    config = config_from_args(parser.parse_args(argv), parser)
    setup_logging()
    from train.loop import main as run  # after argument parsing: --help stays fast

    try:
        return run(config)
    except (DatasetNotReady, ClusterError, ResumeError, ValueError) as exn:
        logging.getLogger("train").error("%s", exn)
        return 2
