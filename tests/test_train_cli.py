"""The command line catches the project's own errors only: a bug keeps its traceback."""

import logging

import pytest

import train.run.loop
from train.run.cli import main
from train.errors import ConfigError


def test_a_users_mistake_is_one_line_and_exit_2(prepared, tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    with caplog.at_level(logging.ERROR, logger="train"):
        code = main(["--data", str(prepared), "--run-dir", str(tmp_path), "--arch", "resnet_nonsense",
                     "--device", "cpu", "--epochs", "1", "--warmup-epochs", "0"])
    assert code == 2
    assert "--arch resnet_nonsense: not a torchvision classification model" in caplog.text


def test_a_programming_error_is_not_swallowed(prepared, tmp_path, monkeypatch):
    def broken(config, env):
        raise ValueError("a bug")

    monkeypatch.setattr(train.run.loop, "main", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["--data", str(prepared), "--run-dir", str(tmp_path)])


def test_config_errors_are_not_value_errors():
    assert not issubclass(ConfigError, ValueError)  # an `except ValueError` elsewhere must not eat them
