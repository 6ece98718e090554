"""What you asked is what runs: the command line's settings (typed flags beat the recipe, ignored
flags refused, --help shows every default and a recipe's values), and a resumed run's settings (the
checkpoint's, a differing flag refused by name unless --force-change, which is recorded)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from conftest import ARCH
from train.run.config import CommandLine, TrainConfig, build_parser, parse_command_line
from train.errors import ResumeError
from train.run.flags import show
from train.run.recipes import recipe
from train.run.settings import (
    FIXED, RUN_CONTROL, Change, describe, record_settings, recorded_changes, settings_on_resume, train_size,
)

BASE = ["--data", "d", "--run-dir", "r"]


def parsed(*argv) -> CommandLine:
    return parse_command_line([*BASE, *map(str, argv)])


def refused(capsys, *argv) -> str:
    """The refusal: one line on stderr (no usage block), exit 2."""
    with pytest.raises(SystemExit) as stopped:
        parsed(*argv)
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m train: error: "), lines
    return lines[0]


# ---------------------------------------------------------------- the command line

def test_the_fields_typed_are_known_and_nothing_else():
    command = parsed("--lr", 0.2, "--no-channels-last", "--recipe", "classic", "--no-ramp")
    assert command.given == {"data", "run_dir", "lr", "channels_last", "recipe", "ramp"}
    assert parsed().given == {"data", "run_dir"}


def test_help_shows_every_options_default_once_as_typed(capsys):
    from shards.help import HelpFormatter

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: (" not in text
    formatter = HelpFormatter("python -m train")
    options = [a for a in build_parser()._actions if a.option_strings and a.dest != "help"]
    # every option says its default, once; a flag that only clears a value (--no-ramp) has none of its own
    clears = {"--no-ramp", "--no-val-crop-fraction"}
    said = {a.option_strings[0]: formatter._get_help_string(a).count("default:") for a in options}
    assert {option: n for option, n in said.items() if n != (option not in clears)} == {}
    assert "--policy {none,trivialaugment,randaugment,autoaugment} torchvision's" in text
    assert "(no policy) (default: none)" in text or "(none: no policy) (default: none)" in text


def help_of(capsys, *argv) -> dict[str, str]:
    """--help's text of each option, by its first flag."""
    with pytest.raises(SystemExit):
        parse_command_line([*map(str, argv), "--help"])
    entries: dict[str, list[str]] = {}
    flag = None
    for line in capsys.readouterr().out.splitlines():
        if re.match(r"  -", line):  # an option's first line; its help goes on in deeper-indented lines
            flag = line.split()[0].rstrip(",")
            entries[flag] = [line]
        elif flag and line.startswith("   "):
            entries[flag].append(line)
    return {flag: " ".join(" ".join(lines).split()) for flag, lines in entries.items()}


def test_help_with_a_recipe_shows_that_recipes_values(capsys):
    ffcv = help_of(capsys, "--recipe", "ffcv-rn50", "--epochs", 16)
    assert "(default: 88)" in ffcv["--epochs"] and "(here: 160 192 11 13)" in ffcv["--ramp"]  # its ramp for 16
    assert "(here: 256)" in ffcv["--val-crop"] and "default:" not in ffcv["--no-ramp"]
    v2 = help_of(capsys, "--recipe", "torchvision-v2")
    assert "(here: 232)" in v2["--val-resize"] and "(here: 224)" in v2["--val-crop"] and "(default: 600)" in v2["--epochs"]
    assert "(default: True)" in v2["--ema"] and "(default: False)" in v2["--nesterov"]
    classic = help_of(capsys)
    assert "here:" not in classic["--val-resize"] and "(default: none, --image-size throughout)" in classic["--ramp"]


@pytest.mark.parametrize("command", ["prepare", "prepare.sample", "train"])
def test_every_option_of_each_command_line_has_help_and_its_default_said_once(command):
    import importlib

    from shards.help import HelpFormatter

    parser = importlib.import_module(command if command == "prepare.sample" else f"{command}.cli").build_parser() \
        if command != "train" else build_parser()
    formatter = HelpFormatter(parser.prog)
    actions = [a for a in parser._actions if a.dest != "help"]
    assert not [a.dest for a in actions if not a.help]
    helps = {a.dest: formatter._get_help_string(a) for a in actions}
    assert not [dest for dest, text in helps.items() if "(default: None)" in text or text.count("default:") > 1]


def test_prepares_no_shared_read_help_says_that_the_exchange_is_what_it_turns_off():
    """--no-shared-read's help said the nodes 'then exchange what they read', as if the flag made them: it is the
    default's exchange that the flag turns off."""
    from prepare.cli import build_parser as prepare_parser

    action = next(a for a in prepare_parser()._actions if "--no-shared-read" in a.option_strings)
    assert "then exchange" not in action.help and "by default the nodes share one read" in action.help


@pytest.mark.parametrize("name,argv,ramp,val", [
    ("ffcv-rn50", ["--image-size", 64], None, (None, None)),
    ("torchvision-v2", ["--image-size", 64], None, (None, None)),
    ("torchvision-v2", ["--image-size", 176], None, (232, 224)),  # the recipe's own size: nothing moot
    ("torchvision-v2", ["--val-crop", 224], None, (232, 224)),  # the recipe's own crop: its resize stays
    ("torchvision-v2", ["--val-crop", 256], None, (None, 256)),  # its --val-resize 232 made moot
    ("torchvision-v2", ["--image-size", 64, "--val-crop", 60], None, (None, 60)),
    ("torchvision-v2", [], None, (232, 224)),
])
def test_a_typed_image_size_beats_the_recipes_sizes(name, argv, ramp, val):
    command = parsed("--recipe", name, *argv)
    config = command.config
    assert config.ramp == ramp and (config.val_resize, config.val_crop) == val
    if argv and argv not in (["--image-size", 176], ["--val-crop", 224]):
        assert len(command.notes) == 1 and f"replaces --recipe {name}'s" in command.notes[0], command.notes
        assert ("--ramp 160 192 65 76" in command.notes[0]) == (name == "ffcv-rn50")


@pytest.mark.parametrize("argv,said", [
    (["--policy-interpolation", "bilinear"], "--policy-interpolation bilinear is used only with a --policy, and this "
     "run has --policy none (the default): leave --policy-interpolation out, or add --policy trivialaugment, "
     "randaugment or autoaugment"),
    (["--ema-decay", 0.9], "--ema-decay 0.9 is used only with --ema, and this run has --no-ema (the default): leave "
     "--ema-decay out, or add --ema"),
    (["--image-size", 64, "--ramp", 64, 96, 1, 2, "--epochs", 4, "--warmup-epochs", 1],
     "--image-size 64 is used only with no --ramp (a ramp sets the training size), and this run has --ramp 64 96 1 2 "
     "(typed): leave --image-size out, or add --no-ramp"),
    (["--recipe", "torchvision-v2", "--no-ema", "--ema-steps", 8], "--ema-steps 8 is used only with --ema, and this "
     "run has --no-ema (typed)"),
])
def test_a_typed_flag_the_run_would_ignore_is_refused_saying_where_each_value_came_from(capsys, argv, said):
    assert said in refused(capsys, *argv)


@pytest.mark.parametrize("argv", [["--recipe", "ffcv-rn50", "--image-size", 192],  # its --help's default
                                  ["--recipe", "torchvision-v2", "--ema-steps", 32, "--ema-decay", 0.99998],
                                  ["--ema-steps", 32], ["--policy-interpolation", "nearest"]])
def test_a_value_typed_as_its_default_asks_for_nothing_and_is_accepted(argv):
    command = parsed(*argv)
    assert command.meant() == {"data", "run_dir"} | ({"recipe"} if "--recipe" in argv else set())
    assert command.config.ramp == (recipe("ffcv-rn50")["ramp"] if "ffcv-rn50" in argv else None)


@pytest.mark.parametrize("old,new", [("--random-erase", "--erasing"), ("--mixup-alpha", "--mixup"),
                                     ("--cutmix-alpha", "--cutmix"), ("--policy-ops", "--num-ops"),
                                     ("--policy-magnitude", "--magnitude")])
def test_a_renamed_flag_is_answered_with_its_new_name(capsys, old, new):
    assert f"{old} is now {new} (the same setting" in refused(capsys, old, 1)
    assert refused(capsys, old, 1).endswith(f"type {new} 1")
    assert f"type {new}=2" in refused(capsys, f"{old}=2")
    assert refused(capsys, "--resume", "auto", "--force-change", old).endswith(f"type --force-change {new}")
    assert refused(capsys, old).endswith(f"type {new}")  # the last word typed: no value to name, nor a traceback
    assert refused(capsys, old, "--epochs", 3).endswith(f"type {new}")  # followed by another flag, not its value
    assert new in {option for action in build_parser()._actions for option in action.option_strings}


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
    assert parsed("--policy", "randaugment", "--num-ops", 3).config.augment.num_ops == 3
    assert parsed("--recipe", "torchvision-v2").config.augment.policy_interpolation == "bilinear"  # the recipe's, not typed


def test_the_augmentation_flags_are_augments_fields_and_build_it_as_they_are():
    """One set of names: the run's configuration holds an Augment, each of whose fields is a setting of its
    name and --its-name (declared once, in Augment); --policy none is None."""
    from train.augment.choices import AUGMENT_FIELDS, Augment
    from train.run.config import SETTINGS

    options = {option for action in build_parser()._actions for option in action.option_strings}
    assert dataclasses.fields(TrainConfig)[[f.name for f in dataclasses.fields(TrainConfig)].index("augment")].type \
        == "Augment" and not set(AUGMENT_FIELDS) & {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(AUGMENT_FIELDS) <= set(SETTINGS)
    assert {"--" + name.replace("_", "-") for name in AUGMENT_FIELDS} <= options
    config = parsed("--policy", "randaugment", "--num-ops", 3, "--magnitude", 5, "--num-magnitude-bins", 11,
                    "--policy-interpolation", "bilinear", "--erasing", 0.25, "--mixup", 0.2, "--cutmix", 1).config
    assert config.augment == Augment(policy="randaugment", num_ops=3, magnitude=5, num_magnitude_bins=11,
                                     policy_interpolation="bilinear", erasing=0.25, mixup=0.2, cutmix=1.0)
    assert parsed("--policy", "none").config.augment.policy is None and parsed().config.augment == Augment()
    assert parsed("--recipe", "torchvision-v2").config.augment == Augment(
        policy="trivialaugment", policy_interpolation="bilinear", erasing=0.1, mixup=0.2, cutmix=1.0)


def test_an_unknown_policy_is_refused_with_the_choices(capsys):
    assert "invalid choice: 'augmix' (choose from none, trivialaugment, randaugment, autoaugment)" in \
        refused(capsys, "--policy", "augmix")


@pytest.mark.parametrize("argv,said", [
    (["--epochs", 3, "--warmup-epochs", 5], "--warmup-epochs 5 (typed) is longer than the run, --epochs 3 (typed): "
     "it would never reach the peak rate. Give --warmup-epochs 3 or less (0: none)"),
    (["--recipe", "torchvision-v2", "--warmup-epochs", 601], "--warmup-epochs 601 (typed) is longer than the run, "
     "--epochs 600 (--recipe torchvision-v2's)"),
    (["--epochs", 3, "--warmup-epochs", -1], "--warmup-epochs must be a finite number of 0 or more, not -1.0"),
    (["--ramp", 64, 96, 1, 9, "--epochs", 8], "--ramp 64 96 1 9 (typed) ends at epoch 9, after the run's --epochs 8 "
     "(typed) (epochs 0 to 7): its end size would never be reached. Give a ramp that ends within the run (--ramp "
     "START_PX END_PX START_EPOCH END_EPOCH, END_EPOCH at most 7)"),
    # END_EPOCH typed as the run's last counting from 1: it trained 128 and 192 px, and validated at 256
    (["--ramp", 128, 256, 0, 2, "--epochs", 2], "--ramp 128 256 0 2 (typed) ends at epoch 2, after the run's "
     "--epochs 2 (typed) (epochs 0 to 1): its end size would never be reached"),
    (["--lr", "nan"], "--lr must be a finite number of 0 or more, not nan"),
    (["--weight-decay", -1], "--weight-decay must be a finite number of 0 or more"),
    (["--label-smoothing", 1], "--label-smoothing must be from 0 to below 1, not 1.0"),
    (["--force-change", "--learning-rate"], "--force-change --learning-rate: no such flag"),
    # a review's: each ran set-up, or a whole epoch, before a traceback (or, for the timeout, a rendezvous failed
    # blaming a peer)
    (["--max-steps", -1], "--max-steps must be 0 (no cap) or more, not -1"),
    (["--signal", "KILL"], "--signal KILL: no signal a process can catch"),
    (["--signal", "SIGSTOP"], "--signal SIGSTOP: no signal a process can catch"),
    (["--signal", "_DFL"], "--signal _DFL: no signal a process can catch"),
    (["--seed", 2 ** 64], f"--seed must be from -2**63 to 2**64 - 1 (torch's seeds), not {2 ** 64}"),
    (["--dist-timeout", 0], "--dist-timeout must be more than 0 s"),
    # on several ranks 1e14 failed gloo's check and 1e308 timedelta's: a traceback after the set-up
    (["--dist-timeout", 1e14], "--dist-timeout must be at most 1e+09 s (31 years), not 1e+14"),
    (["--dist-timeout", 1e308], "--dist-timeout must be at most 1e+09 s"),
    # each warm-up step at the ramp's value at its start (torchvision-v2's): a warm-up as long as the run never
    # reaches the peak; where the rate changes once an epoch, one that rounds to the run's length neither
    (["--recipe", "torchvision-v2", "--epochs", 3, "--warmup-epochs", 3], "--warmup-epochs 3 (typed) is as long as the "
     "run, --epochs 3 (typed): it would never reach the peak rate (each of its steps runs at the ramp's value at its "
     "start: the peak comes after it). Give --warmup-epochs 2 or less (0: none)"),
    (["--recipe", "torchvision-v2", "--epochs", 3, "--warmup-epochs", 2.6], "--warmup-epochs 2.6 (typed) is as long as "
     "the run"),
    (["--epochs", 3, "--warmup-epochs", 3, "--warmup-at", "start"], "Give --warmup-epochs under 3 (0: none)"),
    (["--momentum", 1.5], "--momentum must be below 1 (SGD's velocity would never decay, and the run diverge), not "
                          "1.5"),
    # each at the edge of what it takes
    (["--momentum", 1], "--momentum must be below 1"),
    (["--epochs", 1, "--warmup-epochs", 1, "--warmup-at", "start"], "--warmup-epochs 1 (typed) is as long as the run"),
    (["--epochs", 0], "--epochs must be at least 1"),
    (["--shuffle-buffer", 0], "--shuffle-buffer must be at least 1"),
    (["--workers", 0], "--workers must be at least 1"),
    (["--ema-decay", 0], "--ema-decay is between 0 and 1"),
    (["--ema-decay", 1], "--ema-decay is between 0 and 1"),
    (["--max-bad-samples", -1], "--max-bad-samples must be 0 or more"),
    (["--seed", -2 ** 63 - 1], "--seed must be from -2**63 to 2**64 - 1"),
    (["--lr", "inf"], "--lr must be a finite number of 0 or more, not inf"),
    (["--label-smoothing", -0.1], "--label-smoothing must be from 0 to below 1, not -0.1"),
])
def test_settings_that_cannot_work_are_refused_naming_the_flags(capsys, argv, said):
    assert said in refused(capsys, *argv)


@pytest.mark.parametrize("argv,values", [
    (["--label-smoothing", 0, "--max-bad-samples", 0, "--workers", 1],  # 0: off; 0: stop at the first bad sample
     {"label_smoothing": 0, "max_bad_samples": 0, "workers": 1}),
    (["--seed", 1], {"seed": 1}), (["--seed", -2 ** 63], {"seed": -2 ** 63}),  # torch's seeds, from end to end
    (["--seed", 2 ** 64 - 1], {"seed": 2 ** 64 - 1}),
    # rounded to whole epochs (2, the run's length) only where the rate changes once an epoch
    (["--epochs", 2, "--warmup-epochs", 1.6, "--warmup-at", "start"], {"warmup_epochs": 1.6}),
    (["--ramp", 128, 256, 0, 1, "--epochs", 2], {"ramp": (128, 256, 0, 1)}),  # 256 px from epoch 1, the run's last
])
def test_settings_at_the_edge_of_what_they_take_are_accepted(argv, values):
    config = parsed(*argv).config
    assert {name: config.setting(name) for name in values} == values


def test_the_command_line_is_the_processes_where_none_is_given(monkeypatch):
    """`python -m train` reads its flags from sys.argv, past the program's name."""
    import sys

    monkeypatch.setattr(sys, "argv", ["python -m train", *BASE, "--lr", "0.2"])
    assert parse_command_line().config.lr == 0.2


def test_data_is_required_outside_a_slurm_job(capsys, monkeypatch):
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    with pytest.raises(SystemExit):
        parse_command_line(["--run-dir", "r"])
    assert "--data is required outside a SLURM job (no $SLURM_TMPDIR)" in capsys.readouterr().err


def test_a_resumes_augmentation_flags_are_held_against_the_checkpoints_not_refused_on_their_own():
    """--num-ops without --policy is refused in a new run (no policy takes it), but a resume's policy is its
    checkpoint's: the typed value is compared with that run's, as every flag of a resume is."""
    from train import Augment

    command = parsed("--num-ops", 3, "--resume", "auto")
    assert command.config.augment == Augment() and command.values["num_ops"] == 3


def test_the_warmups_steps_are_whole_steps_or_whole_epochs_as_the_rate_changes():
    """What the EMA restarts over (train/run/ema.py) and the start-up line says: where the rate changes once an
    epoch, a warm-up of an epoch or more takes whole epochs, a shorter one ramps by the step."""
    from train.run.config import warmup_ramps_by_step, warmup_steps

    assert warmup_steps(1.6, 100, "step") == 160 and warmup_steps(1.6, 100, "epoch") == 200
    assert warmup_steps(0.5, 100, "epoch") == 50 and warmup_steps(0, 100, "epoch") == 0
    assert warmup_ramps_by_step(0.5, "epoch") and not warmup_ramps_by_step(0.5, "step")
    assert not warmup_ramps_by_step(0, "epoch") and not warmup_ramps_by_step(1, "epoch")


def test_the_preemption_signal_is_named_or_numbered_as_sbatch_takes_it():
    import signal

    from train.run.config import preemption_signal

    assert preemption_signal("USR1") == preemption_signal("sigusr1") == preemption_signal(str(int(signal.SIGUSR1))) \
        == signal.SIGUSR1
    assert parsed("--signal", int(signal.SIGUSR2)).config.signal == str(int(signal.SIGUSR2))
    assert preemption_signal("KILL") is preemption_signal("9") is preemption_signal("NOPE") is None


def test_force_change_names_fields_by_their_flags():
    assert parsed("--lr", 0.2, "--epochs", 4, "--warmup-epochs", 1, "--no-channels-last", "--resume", "auto",
                  "--force-change", "--lr", "--force-change", "epochs", "--force-change", "--no-channels-last"
                  ).force_change == {"lr", "epochs", "channels_last"}


def test_force_change_of_a_flag_not_typed_is_refused_naming_what_to_type(capsys):
    assert "--force-change --lr names a flag this command line does not type: type the value to change it to as " \
        "well (--lr VALUE --force-change --lr)" in refused(capsys, "--resume", "auto", "--force-change", "--lr")


@pytest.mark.parametrize("argv,warmup,said", [
    (["--epochs", 1], 0.0556, "--warmup-epochs 5 (the default, for 90 epochs) shortened to 0.0556, the same share of "
                              "this run of --epochs 1: type --warmup-epochs to choose another"),
    (["--epochs", 5], 0.278, "--warmup-epochs 5 (the default, for 90 epochs) shortened to 0.278"),
    (["--recipe", "torchvision-v2", "--epochs", 3], 0.025, "--warmup-epochs 5 (--recipe torchvision-v2's, for 600 "
                                                           "epochs) shortened to 0.025"),
    (["--recipe", "ffcv-rn50", "--epochs", 1], 0.0227, "--warmup-epochs 2 (--recipe ffcv-rn50's, for 88 epochs) "
                                                       "shortened to 0.0227"),
    (["--epochs", 6], 5.0, None),  # it fits: left as it is
    (["--epochs", 1, "--warmup-epochs", 1], 1.0, None),  # typed: the user's, as long as the run is allowed
    (["--epochs", 1, "--warmup-epochs", 0], 0.0, None),
])
def test_a_warmup_nobody_typed_is_fitted_to_a_short_run_and_said(argv, warmup, said):
    command = parsed(*argv)
    assert command.config.warmup_epochs == warmup
    assert [line for line in command.notes if "--warmup-epochs" in line] == ([] if said is None else [
        next(line for line in command.notes if line.startswith(said))])
    assert command.config.ramp is None or command.config.ramp[3] <= command.config.epochs  # ffcv's ramp follows


def test_the_settings_the_command_line_checked_are_not_checked_again_where_they_run():
    """A new run's settings are checked once, as the command line is read; loop.main checks what it knows only
    later: a resume's (the checkpoint's), and a new run's fitted to the data since."""
    from train.run.loop import checked_already

    command = parsed()
    assert checked_already(command, dataclasses.replace(command.config, dataset_id="x"))
    assert not checked_already(command, dataclasses.replace(command.config, dataset_id="x", repeats=2))
    resumed = parsed("--resume", "auto")
    assert not checked_already(resumed, dataclasses.replace(resumed.config, dataset_id="x"))


def test_checkpoints_keep_the_settings_flat_as_before_and_load_into_the_augment_the_config_holds():
    """A checkpoint's (and config.json's) settings: every setting by its flag's name, the augmentation's among
    them where its fields were declared before the configuration held an Augment, so that checkpoints
    written before load, and ones written now read as before."""
    from train.augment.choices import Augment

    written = {**V2.to_dict(), "policy": "randaugment", "magnitude": 5, "erasing": 0.25, "a_setting_of_old": 1}
    del written["cutmix"]  # a setting added since: its default
    loaded = TrainConfig.from_dict(written)
    assert loaded.augment == Augment(policy="randaugment", magnitude=5, policy_interpolation="bilinear", erasing=0.25,
                                     mixup=0.2)
    assert loaded.to_dict() == {**{k: v for k, v in written.items() if k != "a_setting_of_old"}, "cutmix": 0.0}
    names = list(V2.to_dict())
    assert names[names.index("nesterov") + 1:names.index("repeats")] == [
        "policy", "num_ops", "magnitude", "num_magnitude_bins", "policy_interpolation", "erasing", "mixup", "cutmix"]
    assert "augment" not in names and TrainConfig.from_dict(V2.to_dict()) == V2


def test_the_runs_augment_is_built_once_for_each_value_of_its_settings():
    """The check, the start-up lines and the loader use the Augment the configuration holds: one object,
    built as the command line is read and carried. A setting that changes it gives another; a refusal is
    said each time it is asked."""
    from train.errors import ConfigError

    config = parsed("--policy", "randaugment", "--magnitude", "7").config
    assert config.augment is dataclasses.replace(config, lr=0.5, dataset_id="x").augment
    assert config.augment is config.with_settings(lr=0.5).augment
    assert config.augment is not config.with_settings(magnitude=8).augment
    assert config.with_settings(magnitude=8).augment.option("magnitude") == 8
    assert config.augment.option("magnitude") == 7
    for _ in range(2):
        with pytest.raises(ConfigError, match="magnitude"):
            config.with_settings(policy="autoaugment")


# ---------------------------------------------------------------- resuming

def config(**values) -> TrainConfig:
    return TrainConfig.from_settings({"data": "d", "run_dir": "r", **values})


V2 = config(**recipe("torchvision-v2"), recipe="torchvision-v2", dataset_id="x")


def like_v2(**values) -> TrainConfig:
    return V2.with_settings(**values)


def test_a_resume_without_the_recipe_keeps_it_and_everything_it_set():
    now = config(dataset_id="x", workers=3, log_every=7)  # the classic defaults, nothing typed but paths
    resumed, changes = settings_on_resume(now, V2, frozenset({"data", "run_dir", "workers", "log_every"}),
                                          frozenset())
    assert changes == [] and resumed.recipe == "torchvision-v2" and resumed.ema and resumed.repeats == 4
    assert resumed.augment.policy == "trivialaugment" and resumed.image_size == 176 and resumed.augment.mixup == 0.2
    assert (resumed.workers, resumed.log_every) == (3, 7)  # how this process runs: the command line's


@pytest.mark.parametrize("field,value", [("lr", 0.3), ("epochs", 700), ("image_size", 160), ("policy", None),
                                         ("ema", False), ("amp", "fp16")])
def test_a_typed_flag_that_differs_is_refused_by_name_unless_forced(field, value):
    now = like_v2(**{field: value})
    with pytest.raises(ResumeError) as stopped:
        settings_on_resume(now, V2, frozenset({field}), frozenset())
    message = str(stopped.value)
    flag = "--" + field.replace("_", "-")
    assert f"{flag} {V2.setting(field)} there, {show(value)} here" in message and f"--force-change {flag}" in message
    resumed, changes = settings_on_resume(now, V2, frozenset({field}), frozenset({field}))
    assert resumed.setting(field) == value and changes == [Change(field, V2.setting(field), value)]
    assert changes[0].line() == f"{flag} {V2.setting(field)} -> {show(value)}"


@pytest.mark.parametrize("field,value", [("shuffle_buffer", 100), ("image_size", 160), ("repeats", 2), ("mixup", 0.5),
                                         ("policy", None), ("ramp", (128, 160, 0, 2))])
def test_what_reads_the_rest_of_an_epoch_cannot_be_forced_in_its_middle(field, value):
    """A checkpoint at step 5 of epoch 3 (a preemption's): its rest is read as it began. The forced change was
    said as made ('recorded in config.json'), then the loader refused its own state in its own words (a
    review's finding). Refused here, naming the flag; from the checkpoint at the epoch's end it is made."""
    now, flag = like_v2(**{field: value}), "--" + field.replace("_", "-")
    with pytest.raises(ResumeError) as stopped:
        settings_on_resume(now, V2, frozenset({field}), frozenset({field}), epoch=3, step=5)
    assert str(stopped.value).startswith(f"{flag} {show(V2.setting(field))} -> {show(value)} (forced): the checkpoint "
                                         "is at step 5 of epoch 3, whose rest is read and augmented as it began. "
                                         f"Resume without --force-change {flag} to finish the epoch")
    resumed, _ = settings_on_resume(now, V2, frozenset({field}), frozenset({field}), epoch=3, step=0)
    assert resumed.setting(field) == value
    lr, _ = settings_on_resume(like_v2(lr=0.3), V2, frozenset({"lr"}), frozenset({"lr"}), epoch=3, step=5)
    assert lr.lr == 0.3  # the optimizer's settings change mid-epoch


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


def test_what_only_this_process_does_is_never_inherited_by_a_resume():
    capped = like_v2(max_steps=2, workers=5, log_every=1, tracker="tensorboard")
    resumed, changes = settings_on_resume(config(dataset_id="x"), capped, frozenset({"data", "run_dir"}), frozenset())
    assert (resumed.max_steps, resumed.workers, resumed.log_every, resumed.tracker) == (0, None, 50, "none")
    assert changes == [] and {"max_steps", "workers", "log_every", "tracker", "wandb_project"} <= set(RUN_CONTROL)


def test_the_settings_a_resume_carries_over_are_named():
    from train.run.settings import carried_over

    said = carried_over(config(dataset_id="x"), like_v2(lr=0.3, max_steps=2), frozenset({"data", "run_dir", "ema"}))
    assert "--lr 0.3" in said and "--recipe torchvision-v2" in said and "--epochs 600" in said
    assert not [item for item in said if item.startswith(("--ema ", "--max-steps", "--data", "--dataset-id"))]
    # what the command line would give the same (torchvision-v2's momentum and seed are the classic's) is not news
    assert not [item for item in said if item.startswith(("--momentum ", "--seed "))]


def test_a_forced_epochs_must_leave_the_run_an_epoch_to_train():
    three = like_v2(epochs=3)
    with pytest.raises(ResumeError, match=r"--epochs 2 \(forced\): the run's checkpoint is at epoch 3 of 3, so nothing "
                                          r"would train.*--epochs 4 or more"):
        settings_on_resume(like_v2(epochs=2), three, frozenset({"epochs"}), frozenset({"epochs"}), epoch=3)
    with pytest.raises(ResumeError, match="at epoch 2 of 3"):  # the epoch it stopped in would not be finished
        settings_on_resume(like_v2(epochs=2), three, frozenset({"epochs"}), frozenset({"epochs"}), epoch=2)
    longer, changes = settings_on_resume(like_v2(epochs=5), three, frozenset({"epochs"}), frozenset({"epochs"}), epoch=3)
    assert longer.epochs == 5 and changes == [Change("epochs", 3, 5)]


def test_a_forced_change_on_a_finished_run_is_refused_as_a_forced_epochs_is():
    """config.json would record it while last.pt, with nothing left to train, keeps the old value."""
    three = like_v2(epochs=3, lr=0.5)
    with pytest.raises(ResumeError, match=r"--lr 0.5 -> 0.2 \(forced\): the run has finished its 3 epochs, so nothing "
                                          r"would train with it.*--epochs 4 --force-change --epochs"):
        settings_on_resume(like_v2(epochs=3, lr=0.2), three, frozenset({"lr"}), frozenset({"lr"}), epoch=3)
    more, changes = settings_on_resume(like_v2(epochs=4, lr=0.2), three, frozenset({"lr", "epochs"}),
                                       frozenset({"lr", "epochs"}), epoch=3)  # with a longer run: both taken
    assert (more.lr, more.epochs) == (0.2, 4) and {c.field for c in changes} == {"lr", "epochs"}
    mid, _ = settings_on_resume(like_v2(epochs=3, lr=0.2), three, frozenset({"lr"}), frozenset({"lr"}), epoch=2)
    assert mid.lr == 0.2  # an epoch left: the change trains
    # nothing forced: a job requeued, or run again, after the run's end resumes to say it finished
    same, changes = settings_on_resume(like_v2(epochs=3, lr=0.5), three, frozenset({"lr"}), frozenset(), epoch=3)
    assert same == three and changes == []


def test_a_resume_holds_the_typed_flags_and_only_them_against_the_checkpoint():
    """run_settings hands settings_on_resume what was typed and what was forced, each as itself: a typed --lr that
    differs is refused (taken as forced, it changed the run; taken as untyped, the checkpoint's value ran without a
    word), and what the run keeps of its own is said, once there is something to say."""
    from train.run.settings import run_settings

    checkpoint = (like_v2(), 4)  # its settings and epoch
    command = parsed("--recipe", "torchvision-v2", "--lr", 0.3, "--resume", "auto")
    with pytest.raises(ResumeError, match=r"--lr 0.125 there, 0.3 here.*add --force-change --lr"):
        run_settings(command, command.config, *checkpoint, 1000, 1)
    command = parsed("--recipe", "torchvision-v2", "--lr", 0.3, "--force-change", "--lr", "--resume", "auto")
    assert run_settings(command, command.config, *checkpoint, 1000, 1).config.lr == 0.3
    command = parsed("--resume", "auto")  # no --recipe: the run's, and all it set, are kept and said
    notes = run_settings(command, command.config, *checkpoint, 1000, 1).notes
    assert [note for note in notes if note.startswith("resumed with the run's own ") and "--recipe torchvision-v2" in
            note]
    command = parsed("--recipe", "torchvision-v2", "--resume", "auto")  # as the run began: nothing to say
    assert not run_settings(command, command.config, *checkpoint, 1000, 1).notes


def test_a_forced_flag_the_checkpoint_already_has_changes_nothing_and_is_said():
    """A requeued job repeats the command line that forced a change: its checkpoints have the value already."""
    from train.run.settings import run_settings

    checkpoint = (like_v2(lr=0.3), 4)  # its settings and epoch
    command = parsed("--recipe", "torchvision-v2", "--lr", 0.3, "--force-change", "--lr", "--resume", "auto")
    settings = run_settings(command, command.config, *checkpoint, 1000, 1)
    assert settings.config.lr == 0.3 and settings.changes == [] and settings.meant == frozenset()
    assert settings.origin["epochs"] == settings.origin["lr"] == "the checkpoint's"
    assert "--force-change --lr: the run has --lr 0.3 already" in settings.notes
    # a flag of how this process runs is this command line's anyway: said so, not "the run has --workers none"
    command = parsed("--recipe", "torchvision-v2", "--workers", 2, "--force-change", "--workers", "--resume", "auto")
    notes = run_settings(command, command.config, *checkpoint, 1000, 1).notes
    assert "--force-change --workers: not needed, --workers is this command line's on every resume" in notes
    assert not [note for note in notes if "the run has --workers" in note]


def test_a_forced_change_is_checked_as_meant_even_where_it_is_this_command_lines_default():
    """Forcing --image-size 224 (the classic default) onto an ffcv-rn50 run keeps its ramp: refused, not ignored."""
    from train.run.config import settings_problem
    from train.run.settings import run_settings

    ffcv = config(**recipe("ffcv-rn50"), recipe="ffcv-rn50", dataset_id="x")
    checkpoint = (ffcv, 2)  # its settings and epoch
    command = parsed("--image-size", 224, "--force-change", "--image-size", "--resume", "auto")
    settings = run_settings(command, command.config, *checkpoint, 1000, 1)
    assert settings.meant == {"image_size"} and settings.origin["image_size"] == "forced"
    assert settings_problem(settings.config, settings.meant, settings.origin) == (
        "--image-size 224 is used only with no --ramp (a ramp sets the training size), and this run has --ramp 160 192 "
        "65 76 (the checkpoint's): leave --image-size out, or add --no-ramp with --force-change --ramp")


def test_on_a_resume_a_value_typed_as_the_checkpoints_is_named_as_the_checkpoints():
    """So that the remedy says --force-change: typing the value the message suggests must not be refused."""
    from train.run.config import settings_problem
    from train.run.settings import run_settings

    checkpoint = (config(epochs=90, warmup_epochs=5.0, dataset_id="x"), 2)  # its settings and epoch
    command = parsed("--epochs", 4, "--force-change", "--epochs", "--warmup-epochs", 5, "--resume", "auto")
    settings = run_settings(command, command.config, *checkpoint, 1000, 1)
    assert settings_problem(settings.config, settings.meant, settings.origin) == (
        "--warmup-epochs 5 (the checkpoint's) is longer than the run, --epochs 4 (forced): it would never reach the "
        "peak rate. Give --warmup-epochs 4 or less (0: none) with --force-change --warmup-epochs")


def test_a_first_start_with_resume_auto_fits_its_warmup_once_the_checkpoint_is_known_to_be_missing():
    """A job script that always passes --resume auto: its first start is a new run, fitted as one."""
    from train.run.settings import run_settings

    command = parsed("--epochs", 1, "--resume", "auto")
    assert command.config.warmup_epochs == 5.0 and command.notes == ()  # a resume's values come from its checkpoint
    settings = run_settings(command, command.config, None, 0, 1000, 1)
    assert settings.config.warmup_epochs == 0.0556 and settings.changes == []
    assert settings.origin["warmup_epochs"] == "the default"
    assert settings.notes == ("--warmup-epochs 5 (the default, for 90 epochs) shortened to 0.0556, the same share of this run "
                     "of --epochs 1: type --warmup-epochs to choose another",)


def test_force_change_without_a_checkpoint_to_change_is_refused():
    from train.errors import ConfigError
    from train.run.settings import run_settings

    command = parsed("--lr", 0.3, "--force-change", "--lr", "--resume", "auto")
    with pytest.raises(ConfigError, match=r"--force-change --lr: there is no checkpoint to change \(--resume auto, "
                                          r"--run-dir r\): a new run takes every flag as typed"):
        run_settings(command, command.config, None, 0, 1000, 1)


@pytest.mark.parametrize("argv,samples,world,fitted,said", [
    (["--recipe", "torchvision-v2", "--batch-size", 8, "--epochs", 3], 120, 2, {"ema_steps": 7},
     ["--ema-steps 32 (--recipe torchvision-v2's) is more than the 7 steps of an epoch here"]),
    (["--recipe", "torchvision-v2", "--batch-size", 2, "--epochs", 3], 5, 2, {"ema_steps": 1, "repeats": 2},
     ["--ema-steps 32 (--recipe torchvision-v2's) is more than the 1 steps of an epoch here",
      "--repeats 4 (--recipe torchvision-v2's) is more than the 2 samples a rank reads an epoch here"]),
    (["--recipe", "torchvision-v2", "--epochs", 3], 1_281_167, 8, {"ema_steps": 32, "repeats": 4}, []),
    (["--recipe", "torchvision-v2", "--batch-size", 8, "--epochs", 3, "--ema-steps", 32], 120, 2, {"ema_steps": 32},
     []),  # typed: the user's
    # as many steps as the interval, as many samples as the readings: they fit, nothing to say
    (["--recipe", "torchvision-v2", "--batch-size", 2, "--epochs", 3], 64, 1, {"ema_steps": 32, "repeats": 4}, []),
    (["--recipe", "torchvision-v2", "--batch-size", 2, "--epochs", 3], 4, 1, {"ema_steps": 2, "repeats": 4},
     ["--ema-steps 32 (--recipe torchvision-v2's) is more than the 2 steps of an epoch here"]),
])
def test_values_nobody_typed_are_fitted_to_the_data(argv, samples, world, fitted, said):
    from train.run.settings import run_settings

    command = parsed(*argv)
    settings = run_settings(command, command.config, None, 0, samples, world)
    assert {name: getattr(settings.config, name) for name in fitted} == fitted
    lines = [line for line in settings.notes if line.startswith(("--ema-steps", "--repeats"))]
    assert len(lines) == len(said) and all(map(str.startswith, lines, said)), settings.notes


def test_a_cap_of_max_steps_is_said_new_or_resumed():
    from train.run.settings import run_settings

    said = "--max-steps 2: each epoch of this process stops after 2 steps (a smoke test), and so do the epochs its " \
           "checkpoints record"
    command = parsed("--epochs", 10, "--max-steps", 2, "--resume", "auto")
    assert said in run_settings(command, command.config, None, 0, 1000, 1).notes
    checkpoint = (config(epochs=10, dataset_id="x"), 3)  # its settings and epoch
    assert said in run_settings(command, command.config, *checkpoint, 1000, 1).notes
    assert not [line for line in run_settings(parsed("--epochs", 10), config(epochs=10), None, 0, 1000, 1).notes
                if "--max-steps" in line]


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
    assert record_settings(tmp_path, V2, [], 0, 0) == []  # (none recorded, none moved)
    assert record_settings(tmp_path, V2, [Change("lr", 0.125, 0.2)], 3, 10) == []
    path = tmp_path / "config.json"
    document = json.loads(path.read_text())
    assert document["settings"]["recipe"] == "torchvision-v2"
    assert document["changes"] == [{"epoch": 3, "step": 10, "flag": "--lr", "from": 0.125, "to": 0.2}]
    record_settings(tmp_path, V2, [Change("epochs", 600, 700)], 5, 0)
    assert [c["flag"] for c in recorded_changes(path)] == ["--lr", "--epochs"]
    # that start was killed before its first checkpoint: the next resumes from the same one, and is recorded once
    record_settings(tmp_path, V2, [Change("epochs", 600, 700)], 5, 0)
    assert [(c["flag"], c["epoch"]) for c in recorded_changes(path)] == [("--lr", 3), ("--epochs", 5)]


def test_a_forced_change_the_run_does_not_carry_leaves_config_jsons_changes(tmp_path, caplog):
    """config.json listed the --force-change records of an earlier run whose last.pt went (deleted, as a refusal
    advises, or not copied) beside a new run's settings that contradict them, and those of a start past an older
    last.pt put back (a review's finding). They move to its "superseded", said in a warning."""
    from train.run.loop import tidy_run_dir

    run = dataclasses.replace(V2, run_dir=str(tmp_path))
    record_settings(tmp_path, V2, [Change("lr", 0.125, 0.2)], 3, 10)
    path = tmp_path / "config.json"
    record_settings(tmp_path, V2, [Change("epochs", 600, 700)], 5, 0)
    tidy_run_dir(run, [], 5, 0)  # a resume from the checkpoint the last change was made at: both carried
    assert [c["flag"] for c in recorded_changes(path)] == ["--lr", "--epochs"] and not caplog.records
    tidy_run_dir(run, [], 4, 0)  # an older last.pt put back
    assert [c["flag"] for c in recorded_changes(path)] == ["--lr"]
    assert [c["flag"] for c in json.loads(path.read_text())["superseded"]] == ["--epochs"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: --force-change --epochs (to 700), recorded by the start past this run's checkpoint (an older "
        "last.pt put back?), which this run does not carry: moved to its \"superseded\""]
    document = json.loads(path.read_text())
    path.write_text(json.dumps(document | {"changes": document["changes"] + ["a hand edit's"]}))
    tidy_run_dir(run, [], 0, 0, resumed=False)  # a new run: its last.pt gone
    document = json.loads(path.read_text())
    assert document["changes"] == [] and document["superseded"][-1] == "a hand edit's"
    assert [c["flag"] for c in document["superseded"][:2]] == ["--epochs", "--lr"]
    assert caplog.records[-1].getMessage().endswith("recorded by an earlier run whose last.pt is not here, which "
                                                   "this run does not carry: moved to its \"superseded\"")


@pytest.mark.parametrize("damage", ["cut short", "not a settings document"])
def test_a_config_json_that_does_not_read_is_set_aside_with_its_changes_not_overwritten(tmp_path, damage):
    """A resume writes config.json again with the earlier starts' --force-change records it reads from it: one that
    did not read (damaged, a hand edit's bad JSON) was replaced, its records dropped without a word (a review's
    finding)."""
    from train.run.loop import tidy_run_dir

    record_settings(tmp_path, V2, [Change("lr", 0.125, 0.2)], 3, 10)
    path = tmp_path / "config.json"
    damaged = path.read_bytes()[:200] if damage == "cut short" else b"[1, 2]\n"
    path.write_bytes(damaged)
    tidy_run_dir(dataclasses.replace(V2, run_dir=str(tmp_path)), [Change("epochs", 600, 700)], 5, 0)
    assert (tmp_path / "config.json.unreadable").read_bytes() == damaged
    assert [c["flag"] for c in recorded_changes(path)] == ["--epochs"]
    path.write_bytes(damaged)  # again: the first set-aside file kept
    tidy_run_dir(dataclasses.replace(V2, run_dir=str(tmp_path)), [], 6, 0)
    assert (tmp_path / "config.json.unreadable.1").read_bytes() == damaged
    assert (tmp_path / "config.json.unreadable").read_bytes() == damaged


# ---------------------------------------------------------------- a real run, resumed

@pytest.mark.slow
def test_a_resume_without_the_recipe_keeps_it_and_the_ema_and_a_forced_change_is_recorded(prepared, tmp_path):
    import warm
    from test_train import train_args
    from train.run.checkpoint import checkpoint_path, load_checkpoint
    from train.run.metrics import read_metrics

    run = tmp_path / "run"
    # (its warm-up at each epoch's start: 1 epoch of a 1-epoch run would never reach the peak, and is refused)
    steps = ["--max-steps", 2, "--workers", 1, "--val-crop", 32, "--val-resize", 37, "--warmup-epochs", 0.5]
    first = warm.run("train", *train_args(prepared, run, "--recipe", "torchvision-v2", "--epochs", 1, *steps))
    assert first.returncode == 0, first.stderr
    assert f"recipe torchvision-v2: {ARCH}, 1 epochs" in first.stderr and "EMA every 32 steps" in first.stderr
    refused = warm.run("train", *train_args(prepared, run, "--epochs", 2, "--resume", "auto", *steps))
    assert refused.returncode == 2
    assert "--epochs 1 there, 2 here" in refused.stderr and "add --force-change --epochs" in refused.stderr
    resumed = warm.run("train", *train_args(prepared, run, "--epochs", 2, "--force-change", "--epochs",
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


NO_WARMUP_TYPED = ["--arch", ARCH, "--image-size", 32, "--batch-size", 4, "--log-every", 1, "--shuffle-buffer", 16,
                   "--workers", 1, "--val-crop", 32, "--val-resize", 37]


@pytest.mark.slow
@pytest.mark.parametrize("argv,said", [
    (["--epochs", 1, "--max-steps", 2], "--warmup-epochs 5 (the default, for 90 epochs) shortened to 0.0556, the "
                                        "same share of this run of --epochs 1"),
    (["--recipe", "ffcv-rn50", "--epochs", 1, "--max-steps", 2], "--warmup-epochs 2 (--recipe ffcv-rn50's, for 88 "
                                                                 "epochs) shortened to 0.0227"),
    (["--recipe", "torchvision-v2", "--epochs", 3, "--max-steps", 1], "--warmup-epochs 5 (--recipe torchvision-v2's, "
                                                                      "for 600 epochs) shortened to 0.025"),
])
def test_a_short_first_run_runs_with_its_warmup_fitted_and_says_so(prepared, tmp_path, argv, said):
    import warm
    from train.run.metrics import read_metrics

    run = tmp_path / "run"
    result = warm.run("train", "--data", prepared, "--run-dir", run, *NO_WARMUP_TYPED, *argv)
    assert result.returncode == 0, result.stderr
    assert said in result.stderr
    document = json.loads((run / "config.json").read_text())
    assert document["settings"]["warmup_epochs"] == float(said.split("shortened to ")[1].split(",")[0])
    assert len(read_metrics(run)) == document["settings"]["epochs"]


def test_a_typed_warmup_longer_than_the_run_is_refused_in_one_line(prepared, tmp_path, capsys):
    from train.run.cli import main

    with pytest.raises(SystemExit) as stopped:  # in the parse, as `python -m train` exits
        main([str(a) for a in ("--data", prepared, "--run-dir", tmp_path / "run", *NO_WARMUP_TYPED, "--epochs", 1,
                               "--warmup-epochs", 5)])
    assert stopped.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [
        "python -m train: error: --warmup-epochs 5 (typed) is longer than the run, --epochs 1 (typed): it would never "
        "reach the peak rate. Give --warmup-epochs 1 or less (0: none)"]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_resume_without_max_steps_after_a_capped_run_trains_whole_epochs(prepared, tmp_path):
    import warm
    from shards.manifest import read_manifest
    from shards.plan import steps_per_epoch
    from train.run.metrics import read_metrics

    run = tmp_path / "run"
    capped = warm.run("train", "--data", prepared, "--run-dir", run, *NO_WARMUP_TYPED, "--epochs", 1,
                      "--warmup-epochs", 0, "--max-steps", 2)
    assert capped.returncode == 0, capped.stderr
    resumed = warm.run("train", "--data", prepared, "--run-dir", run, *NO_WARMUP_TYPED, "--epochs", 2,
                       "--force-change", "--epochs", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    whole = steps_per_epoch(read_manifest(prepared).splits["train"].samples, 1, 4)
    assert [(r["steps"], r["train_images"]) for r in read_metrics(run)] == [(2, 8), (whole, whole * 4)]
    # what the resume kept of the run is said, and a smoke test's cap is not among it
    kept = next(line for line in resumed.stderr.splitlines() if "resumed with the run's own" in line)
    assert "--warmup-epochs 0" in kept and "--max-steps" not in kept.split("(")[0]
    assert json.loads((run / "config.json").read_text())["settings"]["max_steps"] == 0


@pytest.mark.slow
def test_force_change_that_cannot_be_kept_is_refused_and_the_records_stay_true(prepared, tmp_path):
    import warm
    from train.run.checkpoint import checkpoint_path, load_checkpoint

    run = tmp_path / "run"
    fresh = warm.run("train", "--data", prepared, "--run-dir", run, *NO_WARMUP_TYPED, "--epochs", 2,
                     "--warmup-epochs", 0, "--max-steps", 1, "--lr", 0.2, "--force-change", "--lr")
    assert fresh.returncode == 2 and "--force-change --lr: there is no checkpoint to change" in fresh.stderr
    assert not run.exists()
    done = warm.run("train", "--data", prepared, "--run-dir", run, *NO_WARMUP_TYPED, "--epochs", 2,
                    "--warmup-epochs", 0, "--max-steps", 1)
    assert done.returncode == 0, done.stderr
    shorter = warm.run("train", "--data", prepared, "--run-dir", run, *NO_WARMUP_TYPED, "--epochs", 1,
                       "--force-change", "--epochs", "--resume", "auto", "--max-steps", 1)
    assert shorter.returncode == 2 and "--epochs 1 (forced): the run's checkpoint is at epoch 2 of 2" in shorter.stderr
    document = json.loads((run / "config.json").read_text())
    assert document["settings"]["epochs"] == 2 and document["changes"] == []
    assert TrainConfig.from_dict(load_checkpoint(checkpoint_path(run)).config).epochs == 2


# ---------------------------------------------------------------- the library's refusals in flags

@pytest.mark.parametrize("argv,said", [
    (["--policy", "randaugment", "--magnitude", 40], "--magnitude must be below the policy's 31 magnitude bins"),
    (["--policy", "randaugment", "--num-ops", 0], "--num-ops must be at least 1, not 0"),
    (["--erasing", 1.5], "--erasing must be at most 1, not 1.5"),
    (["--mixup", -1], "--mixup (an alpha, 0: off) must be at least 0, not -1.0"),
    (["--cutmix", "nan"], "--cutmix (an alpha, 0: off) must be a finite number, not nan"),
    (["--ramp", 0, 192, 1, 2, "--epochs", 8], "--ramp START_PX must be at least 1, not 0"),
    (["--ramp", 160, 192, 5, 2, "--epochs", 8], "--ramp END_EPOCH must be at least 5, not 2"),
    (["--val-crop", 300, "--val-resize", 0], "--val-resize must be at least 1"),
    (["--val-crop-mode", "ffcv", "--val-crop-fraction", 1.15], "--val-crop-fraction must be at most 1, not 1.15"),
    (["--val-resize", 256, "--val-crop-fraction", 0.9], "--val-resize=256 and --val-crop-fraction=0.9 both set"),
])
def test_the_librarys_refusals_name_the_flags(capsys, argv, said):
    line = refused(capsys, *argv)
    assert said in line and "augment" not in line and "resolution ramp" not in line and "val_resize" not in line


def test_a_refusal_while_the_run_is_built_names_the_flag_too(prepared, tmp_path, caplog):
    """(And a run called in-process puts back the signal handlers it found: the preemption's stayed, so Ctrl-C in a
    notebook after it, or a test's SIGINT, set a flag instead of interrupting.)"""
    import logging
    import signal

    from train.run.cli import main

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    with caplog.at_level(logging.ERROR, logger="train"):
        code = main(["--data", str(prepared), "--run-dir", str(tmp_path), "--arch", "resnet18", "--device", "cpu",
                     "--epochs", "1", "--warmup-epochs", "0", "--batch-size", "4", "--repeats", "1000",
                     "--workers", "1"])
    assert code == 2 and "--repeats=1000 is more than" in caplog.text and " repeats=1000" not in caplog.text
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_a_run_whose_srun_task_is_pinned_to_fewer_cpus_than_the_job_holds_for_it_says_what_to_give_srun(
        prepared, tmp_path, caplog, monkeypatch):
    """srun without --cpus-per-task in a job of 2 CPUs on its node: pinned to 1 (a real affinity mask, this
    thread's), rank 0 says so as the run starts (the same words as the library's: tests/test_library.py), before
    a refusal made as the run is built (--repeats) ends it."""
    import logging
    import os

    from conftest import as_one_srun_task
    from train.run.cli import main

    as_one_srun_task(monkeypatch, SLURM_JOB_CPUS_PER_NODE="2")
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mask)})
        with caplog.at_level(logging.WARNING, logger="train"):
            code = main(["--data", str(prepared), "--run-dir", str(tmp_path), "--device", "cpu", "--epochs", "1",
                         "--warmup-epochs", "0", "--batch-size", "4", "--repeats", "1000"])
    finally:
        os.sched_setaffinity(0, mask)
    assert code == 2 and "--repeats=1000 is more than" in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "srun" in r.getMessage()] == [
        "this task may use 1 of the 2 CPUs the job has on node1, which its 1 task there share: srun pins each task "
        "to --cpus-per-task CPUs, 1 unless asked: its loader decodes on 1 thread, and a GPU waits on it. Give srun "
        "--cpus-per-task=2"]


def test_a_library_refusal_carries_its_arguments_and_the_run_reads_them_not_the_words():
    """The library's words and the run's flags come from the arguments the error carries: a message
    reworded in the library still says the flag, and one that only looks like an argument stays as it is."""
    import pickle

    from shards.manifest import DatasetNotReady
    from train.augment.choices import Augment
    from train.errors import ConfigError
    from train.run.flags import in_flags

    with pytest.raises(ConfigError) as caught:
        Augment(policy="randaugment", magnitude=40)
    exn = caught.value
    assert exn.arguments == {"magnitude": "augment magnitude"}
    assert str(exn) == "augment magnitude must be below the policy's 31 magnitude bins, not 40"
    assert in_flags(exn) == "--magnitude must be below the policy's 31 magnitude bins, not 40"
    again = pickle.loads(pickle.dumps(exn))  # as from a worker process
    assert (type(again), again.arguments, str(again), in_flags(again)) == (ConfigError, exn.arguments, str(exn),
                                                                           in_flags(exn))
    reworded = ConfigError("the policy cannot take {magnitude} 40", {"magnitude": "augment magnitude"})
    assert in_flags(reworded) == "the policy cannot take --magnitude 40"
    assert in_flags(ConfigError("{ramp.end_epoch} must be at least 5", {"ramp.end_epoch": "x"})).startswith(
        "--ramp END_EPOCH must")
    for plain in (DatasetNotReady("val_crop image_size repeats: no such files"), ConfigError("augment magnitude {x}")):
        assert in_flags(plain) == str(plain)


def test_the_run_reads_no_message_and_the_library_names_no_flag():
    """No regular expression in the run (train/run/); no flag of `python -m train` in any string or
    comment of the library (its messages name its own arguments)."""
    import ast

    from import_graph import REPO, modules

    for path in sorted((REPO / "train" / "run").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "re" not in imported, path
    flags = {option for action in build_parser()._actions for option in action.option_strings
             if option.startswith("--")}
    assert {"--decode", "--magnitude", "--help", "--ramp"} <= flags
    library = {name: path for name, path in modules("train", leave_out=("train.bench", "train.run")).items()
               if name not in ("train.__main__", "train.report")}
    for name, path in library.items():
        text = path.read_text()
        strings = [node.value for node in ast.walk(ast.parse(text))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        comments = [line[line.index("#"):] for line in text.splitlines() if "#" in line]
        named = {word for piece in strings + comments for word in re.findall(r"--[a-z][a-z-]*", piece)} & flags
        assert not named, (name, named)


@pytest.mark.parametrize("epochs,ramp", [(None, (160, 192, 65, 76)), (16, (160, 192, 11, 13)), (40, (160, 192, 29, 34))])
def test_ffcvs_ramp_follows_the_typed_epochs_as_its_per_length_configs(epochs, ramp):
    command = parsed("--recipe", "ffcv-rn50", *(["--epochs", epochs] if epochs else []))
    assert command.config.ramp == ramp and "ramp" not in command.given


# ---------------------------------------------------------------- a forced change takes effect at the resume

def optimizer_and_schedule(config: TrainConfig, world_size: int, steps: int):
    """What build_run makes of a config: a small model's SGD and its LambdaLR, run for `ran` steps."""
    import torch

    from train.run.loop import build_optimizer, lr_factor

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    peak = config.lr * (config.batch_size * world_size) / 256  # build_run's: --lr per 256 images of the global batch
    optimizer = build_optimizer(model, peak, config.momentum, config.weight_decay, config.nesterov, config.no_decay)
    schedule = lr_factor(config.lr_schedule, config.warmup_epochs, config.epochs, steps, config.warmup_start_factor,
                         config.warmup_at, config.lr_update)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def restored_run(saved: TrainConfig, now: TrainConfig, world: tuple[int, int], steps: tuple[int, int], epoch: int,
                 step: int):
    """A run of `saved` stepped to (epoch, step), its state restored into one built from `now`, and
    follow_settings applied: the optimizer and schedule the resumed run steps with."""
    from types import SimpleNamespace

    from train.run.loop import follow_settings

    optimizer, scheduler = optimizer_and_schedule(saved, world[0], steps[0])
    for _ in range(epoch * steps[0] + step):
        optimizer.step()
        scheduler.step()
    state = (optimizer.state_dict(), scheduler.state_dict())
    resumed_optimizer, resumed_scheduler = optimizer_and_schedule(now, world[1], steps[1])
    resumed_optimizer.load_state_dict(state[0])
    resumed_scheduler.load_state_dict(state[1])
    run = SimpleNamespace(config=now, optimizer=resumed_optimizer, scheduler=resumed_scheduler,
                          env=SimpleNamespace(world_size=world[1]), steps=steps[1], batch_size=now.batch_size)
    follow_settings(run, epoch, step)
    return (optimizer, scheduler), (resumed_optimizer, resumed_scheduler)


SHORT = config(epochs=10, warmup_epochs=2, batch_size=32)


def test_without_a_change_the_restored_optimizer_and_schedule_are_the_checkpoints_exactly():
    (before, before_schedule), (after, after_schedule) = restored_run(SHORT, SHORT, (2, 2), (7, 7), 3, 4)
    assert after.state_dict()["param_groups"] == before.state_dict()["param_groups"]
    assert after_schedule.get_last_lr() == before_schedule.get_last_lr()
    assert after_schedule.state_dict() == before_schedule.state_dict()


def test_a_resume_on_a_world_whose_global_batch_rounds_steps_at_the_uninterrupted_runs_rates():
    """3 ranks of 96: lr x 96 x 3 and lr x 288 differ in their last bit; the resume's peak is the run's start's."""
    run = config(epochs=10, warmup_epochs=2, batch_size=96)
    (before, before_schedule), (after, after_schedule) = restored_run(run, run, (3, 3), (7, 7), 3, 4)
    assert after.state_dict()["param_groups"] == before.state_dict()["param_groups"]
    assert after_schedule.get_last_lr() == before_schedule.get_last_lr()


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
    from train.run.config import settings_problem

    command = parsed("--ema-decay", 0.9999, "--force-change", "--ema-decay", "--resume", "auto")  # not refused yet
    resumed, _ = settings_on_resume(command.config, V2, command.given, command.force_change)
    assert resumed.ema and resumed.ema_decay == 0.9999 and settings_problem(resumed, command.given) is None
    ffcv = config(**recipe("ffcv-rn50"), recipe="ffcv-rn50")
    shorter, _ = settings_on_resume(config(epochs=16), ffcv, frozenset({"epochs"}), frozenset({"epochs"}))
    origin = {"epochs": "typed", "ramp": "the checkpoint's", "ema": "the checkpoint's"}
    assert "--ramp 160 192 65 76 (the checkpoint's) ends at epoch 76, after the run's --epochs 16 (typed) (epochs 0 " \
        "to 15): its end size would never be reached. Give a ramp that ends within the run (--ramp START_PX END_PX " \
        "START_EPOCH END_EPOCH, END_EPOCH at most 15), or --no-ramp with --force-change --ramp" in \
        settings_problem(shorter, {"epochs"}, origin)
    bigger, _ = settings_on_resume(config(image_size=224), ffcv, frozenset({"image_size"}), frozenset({"image_size"}))
    assert "--image-size 224 is used only with no --ramp (a ramp sets the training size), and this run has --ramp 160 " \
        "192 65 76 (the checkpoint's): leave --image-size out, or add --no-ramp with --force-change --ramp" in \
        settings_problem(bigger, {"image_size"}, origin | {"ramp": "the checkpoint's"})


def test_numpy_strings_are_stored_as_the_plain_strings_they_equal():
    import numpy as np

    from train.augment.choices import Augment

    augment = Augment(policy=np.str_("randaugment"), policy_interpolation=np.str_("bilinear"))
    assert type(augment.policy) is str and type(augment.policy_interpolation) is str


def test_timms_border_mode_and_a_crop_pct_above_1_are_flags_of_python_m_train():
    """#53: --val-crop-mode border (padded in ImageNet's mean colour: python -m train normalises with it) and
    --val-crop-fraction above 1 (volo_d5_512's 1.15: Resize(445) + CenterCrop(512), padded in black)."""
    from train.loader_arguments import checked_validation

    border = parsed("--val-crop-mode", "border", "--val-crop", 392, "--val-crop-fraction", 1.0).config
    validation = checked_validation(224, border.val_crop, border.val_resize, border.val_crop_fraction,
                                    border.val_crop_mode, border.val_interpolation)
    assert (validation.mode, validation.resize, validation.fill) == ("border", 392, (124, 116, 104))
    assert validation.describe() == ("ResizeKeepRatio(392, bilinear, longest=1) + CenterCropOrPad(392, fill=[124, 116, "
                                     "104]) (timm's crop_mode border)")
    volo = parsed("--val-crop", 512, "--val-crop-fraction", 1.15).config
    assert checked_validation(224, volo.val_crop, None, volo.val_crop_fraction).resize == 445


def test_a_non_square_validation_size_is_height_then_width(capsys):
    """#53: --val-crop HEIGHT WIDTH (timm's input_size 3 H W); one number, or a square pair, is the side."""
    assert parsed("--val-crop", 1024, 768, "--val-crop-fraction", 1.0).config.val_crop == (1024, 768)
    assert parsed("--val-crop", 256, 256).config.val_crop == 256 and parsed("--val-crop", 256).config.val_crop == 256
    assert "--val-crop takes one side or HEIGHT WIDTH, not 3 numbers" in refused(capsys, "--val-crop", 1, 2, 3)
    assert "--val-crop must be at least 1" in refused(capsys, "--val-crop", 0, 768)
    assert "--val-crop=(300, 200), not square, with --val-resize=300" in refused(capsys, "--val-crop", 300, 200,
                                                                                 "--val-resize", 300)
