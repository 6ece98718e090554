"""The command line of `python -m prepare`: parse, configure logging, call `prepare` (one node) or, under srun
on several nodes, `prepare_in_group` (the shared read)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from prepare.builder import prepare
from prepare.config import PrepareConfig
from prepare.images import MAX_RESTART_MCUS, RESTART_MCUS
from prepare.node_group import node_group_env
from prepare.shared_read import prepare_in_group
from shards.errors import UserError
from shards.help import HelpFormatter
from shards.paths import default_dest, user_path
from shards.resources import available_cpus
from shards.slurm import SlurmEnvError

MAX_GROUP_TIMEOUT_S = 1e9


def source_path(text: str) -> Path:
    """--source's value: shards.paths.user_path's rule (a leading `~` made the home), kept in this module: the path
    of the source reaches its first image through as few modules as can carry it (tests/source_walk.py)."""
    return Path(text).expanduser()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m prepare",
        description="Write ImageNet as globally shuffled WebDataset shards to node-local disk. "
                    "Run once per node: srun --ntasks-per-node=1 python -m prepare --source DIR.",
        formatter_class=HelpFormatter)
    p.add_argument("--source", type=source_path, required=True,
                   help="folder with the official archives (ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, "
                        "ILSVRC2012_devkit_t12.tar.gz), an extracted train/ and val/ tree, Kaggle's layout, or a "
                        "download from the Hugging Face hub (ILSVRC/imagenet-1k, timm/imagenet-1k-wds, -12k-wds, "
                        "-22k-wds), or image-net.org's full release (fall11_whole.tar, winter21_whole.tar.gz)")
    p.add_argument("--dest", type=user_path, default=default_dest(),
                   help="where the shards go (node-local disk) (default: $SLURM_TMPDIR/imagenet)")
    p.add_argument("--eval-source", type=user_path, action="append", default=[], metavar="PATH",
                   help="an ImageNetV2 variant as downloaded (imagenetv2-matched-frequency.tar.gz, "
                        "imagenetv2-threshold0.7.tar.gz, imagenetv2-top-images.tar.gz) or the folder it extracts to, "
                        "prepared as a further split evaluated as val is (v2, v2-threshold, v2-top-images); give it "
                        "once per variant. Added to a dataset prepared without it, only it is prepared")
    p.add_argument("--real-labels", type=user_path, default=None, metavar="FILE",
                   help="ReaL's real.json (the val images' label sets), kept with the dataset: training then reports "
                        "real_top1. Added to a dataset prepared without it, only it is prepared")
    p.add_argument("--class-table", choices=("imagenet-w21", "imagenet-22k"), default=None,
                   help="ImageNet-21k's winter21 release (winter21_whole.tar.gz, timm/imagenet-w21-wds) only: the "
                        "class table its labels index: imagenet-w21, its own 19,167 synsets as timm's w21 shards "
                        "number them (the default), or imagenet-22k, fall11's 21,841 (to combine it with fall11 or "
                        "timm/imagenet-22k-wds). A dataset at --dest prepared from the same download keeps its table "
                        "without it. The manifest maps either table into the other (class_maps)")
    p.add_argument("--seed", type=int, default=0, help="seed of the global shuffle")
    p.add_argument("--shard-size", type=float, default=200.0, metavar="MB",
                   help="target shard size; the shard count is the source size divided by it")
    p.add_argument("--resize", type=int, default=None, metavar="N",
                   help="re-encode every image with its longer side at most N pixels (FFCV-style, e.g. 512); "
                        "smaller images are kept as they are (default: none, every image at its own size)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images (1-100)")
    p.add_argument("--restart-mcus", type=int, default=RESTART_MCUS, metavar="N",
                   help="make the JPEGs seekable: rewrite each one losslessly (the same pixels) with a restart "
                        "marker every at most N MCUs (blocks of 8 to 16 px a side), so that the loader decodes only the "
                        "part of an image its crop covers; 0 keeps the original bytes, their data not decoded (so "
                        "damage in it is not checked: see docs/reliability.md)")
    p.add_argument("--skip-bad", action="store_true",
                   help="leave out images that do not decode (listed in the manifest) instead of stopping, and JPEGs "
                        "whose data libjpeg finds damaged (without it they are stored and listed as damaged)")
    p.add_argument("--allow-partial", action="store_true",
                   help="prepare what is there of a download that lacks what it declares (an archive, shard, Parquet "
                        "file, class folder or image: without it prepare refuses, naming them); the manifest records "
                        "what is missing under \"partial\"")
    p.add_argument("--force", action="store_true",
                   help="replace a dataset at --dest that was prepared with other options or is damaged")
    p.add_argument("--verify", action="store_true",
                   help="read every shard of the dataset at --dest against its checksums (in parallel) and rebuild "
                        "it, to the same bytes, if one is damaged; without it a rerun checks shard sizes only")
    p.add_argument("--workers", type=int, default=available_cpus(),
                   help="processes that read the source's parts, check and re-encode images (--resize) and "
                        "write shards (default: the CPUs this task was given)")
    p.add_argument("--no-shared-read", action="store_true",
                   help="under srun on several nodes, each node reads the whole source itself instead of a share "
                        "of it (by default the nodes share one read, exchanging what each read over "
                        "torch.distributed: see docs/clusters.md)")
    p.add_argument("--group-timeout", type=float, default=1800.0, metavar="S",
                   help="shared read: the longest wait for another node in any round before this node gives up "
                        "(at the rendezvous, at most 600 s of it); a node that dies is noticed at once")
    p.add_argument("--progress-interval", type=float, default=10.0, metavar="S",
                   help="seconds between progress lines when not on a terminal (SLURM logs)")
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> PrepareConfig:
    if args.dest is None:
        parser.error("--dest is required outside a SLURM job (no $SLURM_TMPDIR): give node-local disk, "
                     "e.g. --dest /tmp/imagenet; a shared home is slow and may be too small")
    if args.resize is not None and args.resize < 16:
        parser.error("--resize must be at least 16 pixels")
    if not 1 <= args.quality <= 100:
        parser.error("--quality must be between 1 and 100")
    if not 0 <= args.restart_mcus <= MAX_RESTART_MCUS:
        parser.error(f"--restart-mcus must be between 0 (no markers) and {MAX_RESTART_MCUS}")
    # finite too: a NaN shard size or an infinite timeout ("wait forever") passed `> 0` and ended in a traceback (the
    # shard count) or in the rendezvous's OverflowError, told as a node that never arrived
    if not (0 < args.shard_size < math.inf and args.workers >= 1 and 0 < args.group_timeout < math.inf):
        parser.error("--shard-size, --workers and --group-timeout must be positive (and finite)")
    # NaN printed no progress line at all, silently (no time is `>= nan` past the last)
    if not 0 <= args.progress_interval < math.inf:
        parser.error(f"--progress-interval must be a finite number of seconds, 0 or more, not {args.progress_interval}")
    # 1e14 s failed gloo's check of its timeout and 1e308 timedelta's, on several nodes only: a traceback
    if args.group_timeout > MAX_GROUP_TIMEOUT_S:
        parser.error(f"--group-timeout must be at most {MAX_GROUP_TIMEOUT_S:.0e} s (31 years), "
                     f"not {args.group_timeout:g}")
    try:
        group = None if args.no_shared_read else node_group_env(os.environ)
    except SlurmEnvError as exn:
        parser.error(f"{exn}; or rerun with --no-shared-read")
    return PrepareConfig(source=args.source, dest=args.dest, seed=args.seed, shard_size_mb=args.shard_size,
                         resize=args.resize, quality=args.quality, restart_mcus=args.restart_mcus,
                         skip_bad=args.skip_bad, force=args.force, verify=args.verify, workers=args.workers,
                         progress_interval=args.progress_interval, group=group, group_timeout_s=args.group_timeout,
                         eval_sources=tuple(args.eval_source), real_labels=args.real_labels,
                         allow_partial=args.allow_partial, class_table=args.class_table)


def setup_logging() -> None:
    where = socket.gethostname().split(".")[0]
    if "SLURM_PROCID" in os.environ:
        where = f"{os.environ.get('SLURMD_NODENAME', where)} task {os.environ['SLURM_PROCID']}"
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [prepare {where}] %(levelname)s %(message)s", datefmt="%H:%M:%S")


class Stopped(BaseException):
    """SIGTERM (SLURM's time limit, scancel), raised where the run is, as KeyboardInterrupt is for SIGINT: the
    run unwinds through its clean-up instead of ending where it stood. A BaseException: no handler of
    failures takes it for one."""


@contextlib.contextmanager
def stopped_by_sigterm():
    """SIGTERM raises Stopped while the run is under way, and SIGINT KeyboardInterrupt, as ever (in the main thread;
    SIGINT only where it is not ignored, as in a shell's background job). After either, both are ignored, so that the
    clean-up finishes before SLURM's SIGKILL: a second Ctrl-C cut it short, leaving the scratch and shards the
    message says are removed. The handlers before are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        for number in watched:
            signal.signal(number, signal.SIG_IGN)
        raise Stopped if signum == signal.SIGTERM else KeyboardInterrupt

    watched = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # (a shell's background job ignores it: left so)
        watched.append(signal.SIGINT)
    before = {number: signal.signal(number, stop) for number in watched}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def main(argv: list[str] | None = None) -> int:
    # before torch is imported: a peer's death is this node's one-line error, not 20 lines of C++ frames
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    parser = build_parser()
    config = config_from_args(parser.parse_args(argv), parser)
    setup_logging()
    try:
        with stopped_by_sigterm():
            (prepare if config.group is None else prepare_in_group)(config)
    except UserError as exn:
        logging.getLogger("prepare").error("%s", exn)
        return 2
    except (Stopped, KeyboardInterrupt) as exn:
        number = signal.SIGTERM if isinstance(exn, Stopped) else signal.SIGINT
        logging.getLogger("prepare").error("stopped by %s, its scratch and unfinished shards removed: rerun the same "
                                           "command to prepare %s", number.name, config.dest)
        return 128 + number
    return 0
