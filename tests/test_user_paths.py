"""Paths as users type them into the command lines: `--dest=~/imagenet` (the shell expands `~` at a word's start,
not after `--dest=`, nor inside a variable such as TRAIN_ARGS) is the home, never a folder named `~` made in the
working directory."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import prepare.cli
import train.bench.cli
import train.run.evaluation
import train.run.report
from conftest import SHARD_MB
from shards.manifest import DatasetNotReady, read_complete_manifest
from train import ImageNetLoader, RealLabels
from train.run.config import parse_command_line


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home dir ü"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


def test_train_takes_tilde_after_the_equals_sign_as_the_home(home):
    config = parse_command_line(["--data=~/imagenet", "--run-dir=~/runs/a", "--device", "cpu"]).config
    assert (config.data, config.run_dir) == (f"{home}/imagenet", f"{home}/runs/a")
    config = parse_command_line(["--data", "data/imagenet", "--run-dir", "runs/a", "--device", "cpu"]).config
    assert (config.data, config.run_dir) == ("data/imagenet", "runs/a")  # relative stays relative (recorded so)


def test_the_other_command_lines_take_tilde_as_the_home(home):
    args = prepare.cli.build_parser().parse_args(["--source=~/src", "--dest=~/imagenet", "--eval-source=~/v2.tar.gz",
                                                  "--real-labels=~/real.json"])
    assert (args.source, args.dest, args.eval_source, args.real_labels) == (
        home / "src", home / "imagenet", [home / "v2.tar.gz"], home / "real.json")
    args = train.run.evaluation.build_parser().parse_args(["~/run", "--data=~/imagenet", "--checkpoint=~/a.pt"])
    assert (args.run_dir, args.data, args.checkpoint) == (home / "run", home / "imagenet", home / "a.pt")
    args = train.bench.cli.build_parser().parse_args(["--data=~/a", "--baseline-data=~/b", "--run-dir=~/c"])
    assert (args.data, args.baseline_data, args.run_dir) == (home / "a", home / "b", home / "c")


def test_report_reads_a_run_directory_given_with_tilde(home, capsys):
    (home / "run").mkdir()
    assert train.run.report.main(["~/run"]) == 2
    assert capsys.readouterr().err == f"no epochs in {home}/run/metrics.jsonl yet\n"


@pytest.mark.slow  # (prepares a dataset)
def test_prepare_writes_dest_with_tilde_in_the_home(home, sources, tmp_path):
    assert prepare.cli.main([f"--source={sources['official']}", "--dest=~/imagenet", f"--shard-size={SHARD_MB}",
                             "--workers=1"]) == 0
    assert read_complete_manifest(home / "imagenet").splits["train"]
    assert not (tmp_path / "~").exists()


def test_the_command_a_message_gives_keeps_a_path_with_a_space_one_word(tmp_path):
    root = tmp_path / "node disk" / "imagenet"
    with pytest.raises(DatasetNotReady) as refused:
        ImageNetLoader(root, batch_size=8, image_size=32, device="cpu")
    command = re.search("`([^`]*)`", str(refused.value)).group(1)
    assert shlex.split(command)[-2:] == ["--dest", str(root)], command


@pytest.mark.parametrize("spelling", [str, Path])
def test_the_library_takes_tilde_as_the_home_as_torchvision_does(home, prepared, spelling):
    (home / "imagenet").symlink_to(prepared)  # (a dataset folder that is a link to another disk, too)
    loader = ImageNetLoader(spelling("~/imagenet"), batch_size=8, image_size=32, device="cpu")
    assert loader.root == home / "imagenet"
    images, labels = next(iter(loader))
    assert images.shape[0] == labels.shape[0] == 8
    assert RealLabels.of(spelling("~/imagenet")) is None  # (prepared without them)
