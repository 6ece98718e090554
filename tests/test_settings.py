"""What you asked is what runs: the command line's settings (typed flags beat the recipe, ignored
flags refused, --help shows every default and a recipe's values), and a resumed run's settings (the
checkpoint's, a differing flag refused by name unless --force-change, which is recorded)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from train.config import CommandLine, TrainConfig, build_parser, parse_command_line
from train.errors import ResumeError
from train.flags import show
from train.recipes import recipe
from train.settings import (
    FIXED, RUN_CONTROL, Change, describe, record_settings, recorded_changes, settings_on_resume, train_size,
)

BASE = ["--data", "d", "--run-dir", "r"]


def parsed(*argv) -> CommandLine:
    return parse_command_line([*BASE, *map(str, argv)])


def refused(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as stopped:
        parsed(*argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# ---------------------------------------------------------------- the command line

def test_the_fields_typed_are_known_and_nothing_else():
    command = parsed("--lr", 0.2, "--no-channels-last", "--recipe", "classic", "--no-ramp")
    assert command.given == {"data", "run_dir", "lr", "channels_last", "recipe", "ramp"}
    assert parsed().given == {"data", "run_dir"}


def test_help_shows_every_options_default(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    options = [a for a in build_parser()._actions if a.option_strings and a.dest != "help"]
    missing = [a.option_strings[0] for a in options if a.help is None or "%(default)" in (a.help or "")]
    assert not missing and text.count("(default:") >= len(options) - 1  # --data's default is $SLURM_TMPDIR's


def test_help_with_a_recipe_shows_that_recipes_values(capsys):
    with pytest.raises(SystemExit):
        parse_command_line(["--recipe", "ffcv-rn50", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the schedule's length) (default: 88)" in text and "(default: (160, 192, 65, 76))" in text


@pytest.mark.parametrize("name,argv,ramp,val", [
    ("ffcv-rn50", ["--image-size", 64], None, (None, None)),
    ("torchvision-v2", ["--image-size", 64], None, (None, None)),
    ("torchvision-v2", ["--image-size", 176], None, (232, 224)),  # the recipe's own size: nothing moot
    ("torchvision-v2", ["--val-crop", 256], None, (None, 256)),  # its --val-resize 232 made moot
    ("torchvision-v2", ["--image-size", 64, "--val-crop", 60], None, (None, 60)),
    ("torchvision-v2", [], None, (232, 224)),
])
def test_a_typed_image_size_beats_the_recipes_sizes(name, argv, ramp, val):
    command = parsed("--recipe", name, *argv)
    config = command.config
    assert config.ramp == ramp and (config.val_resize, config.val_crop) == val
    if argv and argv != ["--image-size", 176]:
        assert len(command.notes) == 1 and f"replaces --recipe {name}'s" in command.notes[0], command.notes
        assert ("--ramp 160 192 65 76" in command.notes[0]) == (name == "ffcv-rn50")


@pytest.mark.parametrize("argv,flag,needs", [
    (["--policy-interpolation", "bilinear"], "--policy-interpolation", "a --policy"),
    (["--ema-decay", 0.9], "--ema-decay", "--ema"),
    (["--image-size", 64, "--ramp", 64, 96, 1, 2, "--epochs", 4, "--warmup-epochs", 1], "--image-size", "no --ramp"),
    (["--recipe", "torchvision-v2", "--no-ema", "--ema-steps", 8], "--ema-steps", "--ema"),
])
def test_a_typed_flag_the_run_would_ignore_is_refused(capsys, argv, flag, needs):
    line = refused(capsys, *argv)
    assert f"{flag} is used only with {needs}" in line


@pytest.mark.parametrize("argv,said", [
    (["--policy", "trivialaugment", "--num-ops", 3],
     "--num-ops would be ignored by policy 'trivialaugment' (it takes --num-magnitude-bins)"),
    (["--magnitude", 5], "--magnitude would be ignored by policy None (it takes none)"),
    (["--policy", "autoaugment", "--num-ops", 1, "--num-magnitude-bins", 5],
     "--num-ops, --num-magnitude-bins would be ignored by policy 'autoaugment'"),
])
def test_a_policy_option_the_policy_does_not_take_is_refused_by_augment_naming_the_flag(capsys, argv, said):
    line = refused(capsys, *argv)
    assert said in line and " augment " not in line


def test_options_a_policy_takes_are_accepted_and_a_recipes_are_not_typed():
    assert parsed("--policy", "randaugment", "--num-ops", 3).config.num_ops == 3
    assert parsed("--recipe", "torchvision-v2").config.policy_interpolation == "bilinear"  # the recipe's, not typed


def test_the_augmentation_flags_are_augments_fields_and_build_it_as_they_are():
    """One set of names: each Augment field is a TrainConfig field and --its-name; --policy none is None."""
    from train.augment.draws import AUGMENT_FIELDS, Augment

    options = {option for action in build_parser()._actions for option in action.option_strings}
    assert set(AUGMENT_FIELDS) <= {f.name for f in dataclasses.fields(TrainConfig)}
    assert {"--" + name.replace("_", "-") for name in AUGMENT_FIELDS} <= options
    config = parsed("--policy", "randaugment", "--num-ops", 3, "--magnitude", 5, "--num-magnitude-bins", 11,
                    "--policy-interpolation", "bilinear", "--erasing", 0.25, "--mixup", 0.2, "--cutmix", 1).config
    assert config.augment() == Augment(policy="randaugment", num_ops=3, magnitude=5, num_magnitude_bins=11,
                                       policy_interpolation="bilinear", erasing=0.25, mixup=0.2, cutmix=1.0)
    assert parsed("--policy", "none").config.policy is None and parsed().config.augment() == Augment()
    assert parsed("--recipe", "torchvision-v2").config.augment() == Augment(
        policy="trivialaugment", policy_interpolation="bilinear", erasing=0.1, mixup=0.2, cutmix=1.0)


def test_an_unknown_policy_is_refused_with_the_choices(capsys):
    assert "invalid choice: 'augmix' (choose from none, trivialaugment, randaugment, autoaugment)" in \
        refused(capsys, "--policy", "augmix")


@pytest.mark.parametrize("argv,said", [
    (["--epochs", 3], "--warmup-epochs 5 must be from 0 to --epochs 3"),
    (["--epochs", 3, "--warmup-epochs", -1], "--warmup-epochs must be a finite number of 0 or more, not -1.0"),
    (["--ramp", 64, 96, 1, 9, "--epochs", 8], "--ramp 64 96 1 9 ends at epoch 9, after --epochs 8"),
    (["--lr", "nan"], "--lr must be a finite number of 0 or more, not nan"),
    (["--weight-decay", -1], "--weight-decay must be a finite number of 0 or more"),
    (["--label-smoothing", 1], "--label-smoothing must be from 0 to below 1, not 1.0"),
    (["--force-change", "--learning-rate"], "--force-change --learning-rate: no such flag"),
])
def test_settings_that_cannot_work_are_refused_naming_the_flags(capsys, argv, said):
    assert said in refused(capsys, *argv)


def test_force_change_names_fields_by_their_flags():
    assert parsed("--force-change", "--lr", "--force-change", "epochs", "--force-change", "--no-channels-last"
                  ).force_change == {"lr", "epochs", "channels_last"}


# ---------------------------------------------------------------- resuming

def config(**values) -> TrainConfig:
    return TrainConfig("d", "r", **values)


V2 = config(**recipe("torchvision-v2"), recipe="torchvision-v2", dataset_id="x")


def like_v2(**values) -> TrainConfig:
    return dataclasses.replace(V2, **values)


def test_a_resume_without_the_recipe_keeps_it_and_everything_it_set():
    now = config(dataset_id="x", workers=3, log_every=7)  # the classic defaults, nothing typed but paths
    resumed, changes = settings_on_resume(now, V2, frozenset({"data", "run_dir", "workers", "log_every"}),
                                          frozenset())
    assert changes == [] and resumed.recipe == "torchvision-v2" and resumed.ema and resumed.repeats == 4
    assert resumed.policy == "trivialaugment" and resumed.image_size == 176 and resumed.mixup == 0.2
    assert (resumed.workers, resumed.log_every) == (3, 7)  # how this process runs: the command line's


@pytest.mark.parametrize("field,value", [("lr", 0.3), ("epochs", 700), ("image_size", 160), ("policy", None),
                                         ("ema", False), ("amp", "fp16"), ("max_steps", 5)])
def test_a_typed_flag_that_differs_is_refused_by_name_unless_forced(field, value):
    now = like_v2(**{field: value})
    with pytest.raises(ResumeError) as stopped:
        settings_on_resume(now, V2, frozenset({field}), frozenset())
    message = str(stopped.value)
    flag = "--" + field.replace("_", "-")
    assert f"{flag} {getattr(V2, field)} there, {show(value)} here" in message and f"--force-change {flag}" in message
    resumed, changes = settings_on_resume(now, V2, frozenset({field}), frozenset({field}))
    assert getattr(resumed, field) == value and changes == [Change(field, getattr(V2, field), value)]
    assert changes[0].line() == f"{flag} {getattr(V2, field)} -> {show(value)}"


@pytest.mark.parametrize("field,value", [("arch", "resnet18"), ("seed", 1), ("batch_size", 64), ("recipe", "classic"),
                                         ("no_decay", "norm-and-bias")])
def test_what_the_checkpoint_is_cannot_be_forced(field, value):
    now = like_v2(**{field: value})
    with pytest.raises(ResumeError, match="cannot change within a run"):
        settings_on_resume(now, V2, frozenset({field}), frozenset({field}))


def test_a_typed_flag_equal_to_the_checkpoints_and_the_run_controls_pass():
    now = like_v2(device="cpu", workers=3, decode="gpu")
    resumed, changes = settings_on_resume(now, V2, frozenset({"lr", "device", "workers", "decode"}), frozenset())
    assert changes == [] and (resumed.device, resumed.workers, resumed.decode) == ("cpu", 3, "gpu")


def test_every_field_is_a_setting_a_run_control_or_fixed():
    from dataclasses import fields

    names = {f.name for f in fields(TrainConfig)}
    assert set(RUN_CONTROL) <= names and set(FIXED) <= names and not set(RUN_CONTROL) & set(FIXED)


# ---------------------------------------------------------------- what the run says and records

def test_the_start_up_lines_name_the_recipe_augmentation_sizes_and_precision():
    lines = describe(V2, world_size=8, validation="Resize(232) + CenterCrop(224)", precision="bf16 autocast (--amp auto)")
    assert len(lines) == 4
    assert lines[0].startswith("recipe torchvision-v2: resnet50, 600 epochs of batch 2048 (8 x 256), lr 1")
    assert "trivialaugment (bilinear)" in lines[1] and "MixUp 0.2" in lines[1] and "EMA every 32 steps" in lines[1]
    assert lines[2] == "sizes: train 176 px; validation Resize(232) + CenterCrop(224)"
    ffcv = config(**recipe("ffcv-rn50"))
    assert "160 px to epoch 65, then ramping to 192 px at epoch 76" in describe(ffcv, 1, "x", "fp32")[2]
    assert [train_size(ffcv, e) for e in (0, 65, 76, 87)] == [160, 160, 192, 192]


def test_config_json_holds_the_settings_and_every_forced_change(tmp_path):
    record_settings(tmp_path, V2, [], 0, 0)
    path = record_settings(tmp_path, V2, [Change("lr", 0.125, 0.2)], 3, 10)
    document = json.loads(path.read_text())
    assert document["settings"]["recipe"] == "torchvision-v2"
    assert document["changes"] == [{"epoch": 3, "step": 10, "flag": "--lr", "from": 0.125, "to": 0.2}]
    record_settings(tmp_path, V2, [Change("epochs", 600, 700)], 5, 0)
    assert [c["flag"] for c in recorded_changes(path)] == ["--lr", "--epochs"]


# ---------------------------------------------------------------- a real run, resumed

@pytest.mark.slow
def test_a_resume_without_the_recipe_keeps_it_and_the_ema_and_a_forced_change_is_recorded(prepared, tmp_path):
    from conftest import run_module
    from test_train import train_args
    from train.checkpoint import checkpoint_path, load_checkpoint
    from train.metrics import read_metrics

    run = tmp_path / "run"
    steps = ["--max-steps", 2, "--workers", 1, "--val-crop", 32, "--val-resize", 37]
    first = run_module("train", *train_args(prepared, run, "--recipe", "torchvision-v2", "--epochs", 1, *steps))
    assert first.returncode == 0, first.stderr
    assert "recipe torchvision-v2: resnet18, 1 epochs" in first.stderr and "EMA every 32 steps" in first.stderr
    refused = run_module("train", *train_args(prepared, run, "--epochs", 2, "--resume", "auto", *steps))
    assert refused.returncode == 2
    assert "--epochs 1 there, 2 here" in refused.stderr and "add --force-change --epochs" in refused.stderr
    resumed = run_module("train", *train_args(prepared, run, "--epochs", 2, "--force-change", "--epochs",
                                              "--resume", "auto", *steps))
    assert resumed.returncode == 0, resumed.stderr
    assert "--force-change: --epochs 1 -> 2 on resume" in resumed.stderr
    assert "recipe torchvision-v2" in resumed.stderr and "trivialaugment (bilinear)" in resumed.stderr
    saved = load_checkpoint(checkpoint_path(run))
    assert saved.ema is not None and TrainConfig.from_dict(saved.config).recipe == "torchvision-v2"
    document = json.loads((run / "config.json").read_text())
    assert document["settings"]["epochs"] == 2 and document["settings"]["repeats"] == 4
    assert document["changes"] == [{"epoch": 1, "step": 0, "flag": "--epochs", "from": 1, "to": 2}]
    assert [r["image_size"] for r in read_metrics(run)] == [32, 32]


# ---------------------------------------------------------------- the library's refusals in flags

@pytest.mark.parametrize("argv,said", [
    (["--policy", "randaugment", "--magnitude", 40], "--magnitude must be below the policy's 31 magnitude bins"),
    (["--policy", "randaugment", "--num-ops", 0], "--num-ops must be at least 1, not 0"),
    (["--erasing", 1.5], "--erasing must be at most 1, not 1.5"),
    (["--mixup", -1], "--mixup (an alpha, 0: off) must be at least 0, not -1.0"),
    (["--cutmix", "nan"], "--cutmix (an alpha, 0: off) must be a finite number, not nan"),
    (["--ramp", 0, 192, 1, 2, "--epochs", 8], "--ramp START_PX must be at least 1, not 0"),
    (["--ramp", 160, 192, 5, 2, "--epochs", 8], "--ramp END_EPOCH must be at least 5, not 2"),
    (["--val-crop", 300, "--val-resize", 200], "--val-resize must be at least 300, not 200"),
    (["--val-resize", 256, "--val-crop-fraction", 0.9], "--val-resize=256 and --val-crop-fraction=0.9 both set"),
])
def test_the_librarys_refusals_name_the_flags(capsys, argv, said):
    line = refused(capsys, *argv)
    assert said in line and "augment" not in line and "resolution ramp" not in line and "val_resize" not in line


def test_a_refusal_while_the_run_is_built_names_the_flag_too(prepared, tmp_path, caplog):
    import logging

    from train.cli import main

    with caplog.at_level(logging.ERROR, logger="train"):
        code = main(["--data", str(prepared), "--run-dir", str(tmp_path), "--arch", "resnet18", "--device", "cpu",
                     "--epochs", "1", "--warmup-epochs", "0", "--batch-size", "4", "--repeats", "1000",
                     "--workers", "1"])
    assert code == 2 and "--repeats=1000 is more than" in caplog.text and " repeats=1000" not in caplog.text


@pytest.mark.parametrize("epochs,ramp", [(None, (160, 192, 65, 76)), (16, (160, 192, 11, 13)), (40, (160, 192, 29, 34))])
def test_ffcvs_ramp_follows_the_typed_epochs_as_its_per_length_configs(epochs, ramp):
    command = parsed("--recipe", "ffcv-rn50", *(["--epochs", epochs] if epochs else []))
    assert command.config.ramp == ramp and "ramp" not in command.given


# ---------------------------------------------------------------- a forced change takes effect at the resume

def optimizer_and_schedule(config: TrainConfig, world_size: int, steps: int):
    """What build_run makes of a config: a small model's SGD and its LambdaLR, run for `ran` steps."""
    import torch

    from train.loop import build_optimizer, lr_factor

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    peak = config.lr * config.batch_size * world_size / 256
    optimizer = build_optimizer(model, peak, config.momentum, config.weight_decay, config.nesterov, config.no_decay)
    schedule = lr_factor(config.lr_schedule, config.warmup_epochs, config.epochs, steps, config.warmup_start_factor,
                         config.warmup_at, config.lr_update)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def restored_run(saved: TrainConfig, now: TrainConfig, world: tuple[int, int], steps: tuple[int, int], epoch: int,
                 step: int):
    """A run of `saved` stepped to (epoch, step), its state restored into one built from `now`, and
    follow_settings applied: the optimizer and schedule the resumed run steps with."""
    from types import SimpleNamespace

    from train.loop import follow_settings

    optimizer, scheduler = optimizer_and_schedule(saved, world[0], steps[0])
    for _ in range(epoch * steps[0] + step):
        optimizer.step()
        scheduler.step()
    state = (optimizer.state_dict(), scheduler.state_dict())
    resumed_optimizer, resumed_scheduler = optimizer_and_schedule(now, world[1], steps[1])
    resumed_optimizer.load_state_dict(state[0])
    resumed_scheduler.load_state_dict(state[1])
    run = SimpleNamespace(config=now, optimizer=resumed_optimizer, scheduler=resumed_scheduler,
                          env=SimpleNamespace(world_size=world[1]), steps=steps[1])
    follow_settings(run, epoch, step)
    return (optimizer, scheduler), (resumed_optimizer, resumed_scheduler)


SHORT = config(epochs=10, warmup_epochs=2, batch_size=32)


def test_without_a_change_the_restored_optimizer_and_schedule_are_the_checkpoints_exactly():
    (before, before_schedule), (after, after_schedule) = restored_run(SHORT, SHORT, (2, 2), (7, 7), 3, 4)
    assert after.state_dict()["param_groups"] == before.state_dict()["param_groups"]
    assert after_schedule.get_last_lr() == before_schedule.get_last_lr()
    assert after_schedule.state_dict() == before_schedule.state_dict()


@pytest.mark.parametrize("change", [{"lr": 0.3}, {"momentum": 0.5}, {"weight_decay": 5e-4}, {"nesterov": False},
                                    {"epochs": 20}])
def test_a_forced_optimizer_or_schedule_setting_takes_effect_at_the_resume(change):
    now = dataclasses.replace(SHORT, **change)
    _, (after, schedule) = restored_run(SHORT, now, (2, 2), (7, 7), 3, 4)
    fresh, fresh_schedule = optimizer_and_schedule(now, 2, 7)
    for _ in range(3 * 7 + 4):
        fresh.step()
        fresh_schedule.step()
    for key in ("lr", "initial_lr", "momentum", "weight_decay", "nesterov"):
        assert [g[key] for g in after.param_groups] == [g[key] for g in fresh.param_groups], key
    assert schedule.get_last_lr() == fresh_schedule.get_last_lr() and schedule.last_epoch == 3 * 7 + 4


def test_another_world_size_at_an_epoch_boundary_follows_the_new_global_batch_and_steps():
    _, (after, schedule) = restored_run(SHORT, SHORT, (2, 4), (7, 3), 5, 0)
    assert schedule.base_lrs == [SHORT.lr * SHORT.batch_size * 4 / 256] * 2 and schedule.last_epoch == 5 * 3


def test_a_resumes_flags_are_checked_on_the_settings_that_will_run():
    from train.config import settings_problem

    command = parsed("--ema-decay", 0.9999, "--force-change", "--ema-decay", "--resume", "auto")  # not refused yet
    resumed, _ = settings_on_resume(command.config, V2, command.given, command.force_change)
    assert resumed.ema and resumed.ema_decay == 0.9999 and settings_problem(resumed, command.given) is None
    ffcv = config(**recipe("ffcv-rn50"), recipe="ffcv-rn50")
    shorter, _ = settings_on_resume(config(epochs=16), ffcv, frozenset({"epochs"}), frozenset({"epochs"}))
    assert "--ramp 160 192 65 76 ends at epoch 76, after --epochs 16" in settings_problem(shorter, {"epochs"})
    bigger, _ = settings_on_resume(config(image_size=224), ffcv, frozenset({"image_size"}), frozenset({"image_size"}))
    assert "--image-size is used only with no --ramp" in settings_problem(bigger, {"image_size"})


def test_numpy_strings_are_stored_as_the_plain_strings_they_equal():
    import numpy as np

    from train.augment.draws import Augment

    augment = Augment(policy=np.str_("randaugment"), policy_interpolation=np.str_("bilinear"))
    assert type(augment.policy) is str and type(augment.policy_interpolation) is str
