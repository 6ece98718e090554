"""The recipes equal their sources: torchvision's schedule (LinearLR + CosineAnnealingLR in SequentialLR,
stepped once an epoch) and weight-decay groups (set_weight_decay with norm_weight_decay=0.0), FFCV's
get_lr, its parameter groups and its six per-length configurations; and the classic stays as it was.
Pure functions on dummy optimizers and on torchvision's resnet50: no data, no processes."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torchvision
from torchvision.ops._utils import split_normalization_params

from train.run.checkpoint import Checkpoint, load_checkpoint, rng_state, save_checkpoint
from train.run.config import TrainConfig, build_parser, parse_command_line
from train.run.loop import (
    SCHEDULES,
    exempt_from_decay,
    lr_factor,
    parameter_groups,
    warmup_cosine,
    warmup_linear,
)
from train.run.recipes import (
    LR_UPDATES,
    NO_DECAY_RULES,
    RECIPES,
    WARMUP_AT,
    ffcv_ramp,
    recipe,
)
from train.transforms import ResolutionRamp

DEFAULTS = TrainConfig("", "")


def schedule_of(config: TrainConfig, steps: int):
    """The run's factor per step, as build_run makes it from the settings."""
    return lr_factor(config.lr_schedule, config.warmup_epochs, config.epochs, steps, config.warmup_start_factor,
                     config.warmup_at, config.lr_update)


def settings(*flags: str) -> TrainConfig:
    return parse_command_line(["--data", "data", *flags]).config


# ---------------------------------------------------------------- the classic, pinned

def classic_before(warmup_steps: int, total_steps: int, decay: str):
    """The classic's per-step factor as train/run/loop.py computed it before the recipes stated their schedules."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        if decay == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return max(0.0, 1 - progress)
    return factor


@pytest.mark.parametrize("decay", ["cosine", "linear"])
@pytest.mark.parametrize("warmup_epochs,epochs,steps", [(5.0, 90, 7), (0.0, 3, 5), (1.0, 1, 4), (2.5, 6, 3),
                                                        (5.0, 5, 2), (0.3, 4, 10)])
def test_the_classic_schedule_is_the_one_it_always_was(decay, warmup_epochs, epochs, steps):
    config = TrainConfig("", "", lr_schedule=decay, warmup_epochs=warmup_epochs, epochs=epochs)
    before = classic_before(round(warmup_epochs * steps), epochs * steps, decay)
    ours = schedule_of(config, steps)
    assert [ours(s) for s in range(epochs * steps)] == [before(s) for s in range(epochs * steps)]
    wrapper = {"cosine": warmup_cosine, "linear": warmup_linear}[decay](round(warmup_epochs * steps), epochs * steps)
    assert [wrapper(s) for s in range(epochs * steps)] == [before(s) for s in range(epochs * steps)]


def test_the_classic_recipe_states_the_defaults():
    assert recipe("classic") == {name: getattr(DEFAULTS, name) for name in recipe("classic")}
    assert (DEFAULTS.warmup_start_factor, DEFAULTS.warmup_at, DEFAULTS.lr_update, DEFAULTS.no_decay) == \
        (0.0, "end", "step", "norm-and-bias")
    assert settings() == settings("--recipe", "classic") == TrainConfig("data", "runs/default")


# ---------------------------------------------------------------- torchvision's schedule

def torchvision_lrs(epochs: int, warmup: int, start_factor: float, lr: float) -> list[float]:
    """The rate of each epoch as torchvision's references/classification/train.py builds and steps it."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    main = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs - warmup, eta_min=0.0)
    ramp = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=start_factor, total_iters=warmup)
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers=[ramp, main], milestones=[warmup])
    rates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimizer.step() before lr_scheduler.step()": no step is taken here
        for _ in range(epochs):
            rates.append(optimizer.param_groups[0]["lr"])
            scheduler.step()
    return rates


@pytest.mark.parametrize("epochs,warmup", [(600, 5), (90, 5), (10, 5), (6, 5), (7, 1), (20, 3), (12, 2)])
@pytest.mark.parametrize("steps", [1, 3, 8])
def test_torchvision_v2s_rate_is_torchs_sequential_schedule_held_for_each_epoch(epochs, warmup, steps):
    config = TrainConfig.from_settings({"data": "", "run_dir": "", **recipe("torchvision-v2"), "epochs": epochs,
                                         "warmup_epochs": float(warmup)})
    peak = 0.5  # its --lr at 1024 images a step
    ours = schedule_of(config, steps)
    reference = torchvision_lrs(epochs, warmup, 0.01, peak)
    for epoch, rate in enumerate(reference):
        within = [peak * ours(epoch * steps + i) for i in range(steps)]
        assert within == [within[0]] * steps  # constant within the epoch
        assert within[0] == pytest.approx(rate, rel=1e-13, abs=1e-16)
    assert reference[:2] == pytest.approx([0.005, 0.5 * (0.01 + 0.99 / warmup)], rel=1e-13)


def test_a_warm_up_under_one_step_is_said_as_none():
    """--epochs 2 fits the default 5 of 90 to 0.111 epochs: 0.44 of a 4-step epoch, no step of ramp; the log said
    a warm-up all the same (a review's finding)."""
    from train.run.settings import warmup

    config = settings("--epochs", "2")
    assert schedule_of(config, 4)(0) == 1.0
    assert warmup(config, 4) == "no warm-up (0.111 epochs of 4 steps is under one: the first step runs at the peak),"
    assert warmup(config, 100).startswith("0.111 warm-up epochs") and warmup(config).startswith("0.111 warm-up")


def test_the_rate_reported_is_the_one_the_last_step_trained_with():
    """An epoch's record, the progress line and the tracker read get_last_lr() after scheduler.step(): the next
    step's rate (an epoch's record said the next epoch's, the run's last 0). torchvision's reference logs the
    rate each step used."""
    from train.run.loop import rate_of_last_step

    config = TrainConfig.from_settings({"data": "", "run_dir": "", **recipe("torchvision-v2"), "epochs": 3,
                                         "warmup_epochs": 1.0})
    steps, peak = 4, 0.5
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_of(config, steps))
    for _ in range(3 * steps):
        used = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        assert rate_of_last_step(scheduler) == pytest.approx(used, rel=1e-15)
    assert rate_of_last_step(scheduler) > 0 == pytest.approx(scheduler.get_last_lr()[0])  # the last: not 0


@pytest.mark.parametrize("warmup", [1.5, 1.6, 2.5, 4.4])
@pytest.mark.parametrize("warmup_at", ["start", "end"])
def test_a_warmup_of_a_fraction_of_epochs_over_one_is_whole_epochs_where_the_rate_changes_once_an_epoch(warmup,
                                                                                                       warmup_at):
    """Held an epoch each, 1.5 warm-up epochs ran epoch 1 at 4/3 of the peak (at each epoch's end) or never reached
    it (at its start). Whole epochs, as torch's LinearLR counts them, and as the rate that changes every step takes
    whole steps: never above the peak."""
    from train.run.settings import warmup as said

    config = TrainConfig.from_settings({"data": "", "run_dir": "", **recipe("torchvision-v2"), "epochs": 10,
                                         "warmup_epochs": warmup, "warmup_at": warmup_at})
    ours, steps, whole = schedule_of(config, 3), 3, round(warmup)
    rates = [ours(step) for step in range(10 * steps)]
    assert max(rates) == pytest.approx(1.0, rel=1e-13) and all(rate <= 1.0 + 1e-13 for rate in rates)
    if warmup_at == "start":
        reference = torchvision_lrs(10, whole, 0.01, 1.0)
        assert [ours(epoch * steps) for epoch in range(10)] == pytest.approx(reference, rel=1e-13, abs=1e-16)
    assert f"(at each epoch's {warmup_at}: {whole} whole epochs, the rate changing once an epoch)" in said(config)


def test_a_warmup_shorter_than_an_epoch_ramps_by_the_step_under_a_recipe_that_updates_once_an_epoch():
    """`--recipe torchvision-v2 --epochs 3` shortens its 5 warm-up epochs of 600 to 0.025: held for its epoch, the
    ramp's first value (1% of the peak) lasted all of epoch 0 and the peak never ran. It ramps by the step, the
    peak runs to epoch 0's end, and each later epoch is held at the schedule's value of it, as before."""
    from train.run.settings import describe

    config = settings("--recipe", "torchvision-v2", "--epochs", "3")
    assert (config.warmup_epochs, config.lr_update) == (0.025, "epoch")
    steps = 200  # 0.025 epochs: 5 steps
    ours = schedule_of(config, steps)
    assert [ours(s) for s in range(5)] == pytest.approx([0.01 + 0.99 * i / 5 for i in range(5)], rel=1e-13)
    assert [ours(s) for s in range(5, steps)] == [1.0] * (steps - 5)
    for epoch in (1, 2):  # each held at torch's SequentialLR value for it
        progress = (epoch - 0.025) / (3 - 0.025)
        within = {ours(epoch * steps + i) for i in range(steps)}
        assert len(within) == 1 and within.pop() == pytest.approx(0.5 * (1 + math.cos(math.pi * progress)), rel=1e-13)
    line = describe(config, 1, "val", "fp32")[0]
    assert ("0.025 warm-up epochs from 0.01 x the peak (at each step's start: shorter than an epoch, it ramps by the "
            "step), the peak to epoch 0's end, then cosine decay, changing every epoch") in line
    whole = settings("--recipe", "torchvision-v2", "--epochs", "3", "--warmup-epochs", "1")  # an epoch: as it was
    assert {schedule_of(whole, steps)(s) for s in range(steps)} == {0.01}
    assert "1 warm-up epochs from 0.01 x the peak (at each epoch's start)" in describe(whole, 1, "val", "fp32")[0]


def test_the_torchvision_v2_recipe_states_torchvisions_warmup_and_groups():
    config = settings("--recipe", "torchvision-v2")
    assert (config.warmup_start_factor, config.warmup_at, config.lr_update, config.no_decay, config.lr_schedule) == \
        (0.01, "start", "epoch", "norm", "cosine")
    assert (config.epochs, config.warmup_epochs, config.lr * 1024 / 256, config.weight_decay) == (600, 5, 0.5, 2e-5)


# ---------------------------------------------------------------- FFCV's schedule

def ffcv_step_lrs(epochs: int, steps: int, lr: float, lr_peak_epoch: int = 2) -> list[float]:
    """FFCV's train_imagenet.py: get_cyclic_lr, and train_loop's per-step interpolation, transcribed."""
    def get_lr(epoch):
        return np.interp([epoch], [0, lr_peak_epoch, epochs], [1e-4 * lr, lr, 0])[0]
    rates = []
    for epoch in range(epochs):
        lr_start, lr_end = get_lr(epoch), get_lr(epoch + 1)
        rates += list(np.interp(np.arange(steps), [0, steps], [lr_start, lr_end]))
    return rates


@pytest.mark.parametrize("epochs", [16, 24, 88, 3, 7])
@pytest.mark.parametrize("steps", [1, 5, 313])
def test_ffcvs_rate_is_its_get_lr_interpolated_per_step(epochs, steps):
    config = TrainConfig.from_settings({"data": "", "run_dir": "", **recipe("ffcv-rn50", epochs), "epochs": epochs})
    peak = 1.7  # its lr at 4096 images a step
    ours = schedule_of(config, steps)
    assert [peak * ours(s) for s in range(epochs * steps)] == \
        pytest.approx(ffcv_step_lrs(epochs, steps, peak), rel=1e-12, abs=1e-15)
    assert peak * ours(0) == pytest.approx(1.7e-4, rel=1e-15) and ours(2 * steps) == 1.0


def test_the_ffcv_recipe_states_ffcvs_schedule_and_groups():
    config = settings("--recipe", "ffcv-rn50")
    assert (config.warmup_start_factor, config.warmup_at, config.lr_update, config.no_decay, config.lr_schedule) == \
        (1e-4, "start", "step", "bn-names", "linear")
    assert (config.epochs, config.warmup_epochs, config.ramp) == (88, 2.0, (160, 192, 65, 76))
    assert config.lr * 4096 / 256 == pytest.approx(1.7) and config.nesterov is False


def test_the_ffcv_recipe_validates_as_ffcvs_center_crop_decoder():
    """CenterCropRGBImageDecoder((256, 256), ratio=224/256): the centre 224/256 of the short side,
    resized to 256 with OpenCV's INTER_AREA; a typed --image-size keeps the ratio at its own size."""
    from train.loader_arguments import checked_validation

    config = settings("--recipe", "ffcv-rn50")
    val = (config.val_crop, config.val_resize, config.val_crop_fraction, config.val_crop_mode, config.val_interpolation)
    assert val == (256, None, 224 / 256, "ffcv", "area")
    validation = checked_validation(config.image_size, *val)
    assert validation.boxes(np.array([500]), np.array([375])).tolist() == [[86, 23, 414, 351]]  # int(0.875 * 375)
    typed = settings("--recipe", "ffcv-rn50", "--image-size", "224")
    assert (typed.val_crop, typed.val_crop_fraction, typed.val_crop_mode) == (None, 224 / 256, "ffcv")
    assert settings("--recipe", "ffcv-rn50", "--val-crop-mode", "center").val_crop_fraction == 224 / 256


# ---------------------------------------------------------------- FFCV's six configurations

# rn50_configs/rn50_{N}_epochs.yaml (libffcv/ffcv-imagenet): every other value is the same in all six (lr 1.7,
# batch_size 512 x world_size 8, momentum 0.9, weight_decay 1e-4, label_smoothing 0.1, min_res 160, max_res 192,
# validation resolution 256, lr_peak_epoch left at its default 2).
FFCV_CONFIGS = {16: (11, 13), 24: (17, 20), 32: (23, 27), 40: (29, 34), 56: (41, 48), 88: (65, 76)}


@pytest.mark.parametrize("epochs", sorted(FFCV_CONFIGS))
def test_the_ffcv_recipe_at_each_published_length_equals_its_config(epochs):
    start_ramp, end_ramp = FFCV_CONFIGS[epochs]
    values = recipe("ffcv-rn50", epochs)
    assert values["ramp"] == ffcv_ramp(epochs) == (160, 192, start_ramp, end_ramp)
    assert values["lr"] * 512 * 8 / 256 == pytest.approx(1.7) and values["weight_decay"] == 1e-4
    assert (values["label_smoothing"], values["warmup_epochs"], values["val_crop"]) == (0.1, 2.0, 256)
    assert DEFAULTS.momentum == 0.9 and values["nesterov"] is False


def ffcv_resolution(epoch: int, min_res: int, max_res: int, end_ramp: int, start_ramp: int) -> int:
    """FFCV's get_resolution, transcribed."""
    if epoch <= start_ramp:
        return min_res
    if epoch >= end_ramp:
        return max_res
    interp = np.interp([epoch], [start_ramp, end_ramp], [min_res, max_res])
    return int(np.round(interp[0] / 32)) * 32


@pytest.mark.parametrize("epochs", list(range(1, 130)))
def test_the_ffcv_ramp_at_any_length_ends_within_the_run_and_sizes_as_ffcv_does(epochs):
    start, end, start_epoch, end_epoch = ffcv_ramp(epochs)
    assert (start, end) == (160, 192) and 0 <= start_epoch <= end_epoch < epochs
    ramp = ResolutionRamp(start, end, start_epoch, end_epoch)
    assert [ramp.size(e) for e in range(epochs)] == \
        [ffcv_resolution(e, 160, 192, end_epoch, start_epoch) for e in range(epochs)]


def test_the_ffcv_recipe_without_a_length_is_its_88_epoch_config():
    assert recipe("ffcv-rn50") == recipe("ffcv-rn50", 88) == RECIPES["ffcv-rn50"]
    assert recipe("torchvision-v2", 300) == recipe("torchvision-v2")  # nothing of torchvision's follows --epochs


# ---------------------------------------------------------------- weight-decay groups

RESNET50 = torchvision.models.resnet50()


def names_of(model: torch.nn.Module, params) -> set[str]:
    ids = {id(p) for p in params}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def test_resnet50_exempt_under_each_rule():
    names = [name for name, _ in RESNET50.named_parameters()]
    batch_norms = {n for n in names if ".bn" in f".{n}" or ".downsample.1." in n}
    assert len(batch_norms) == 106  # 53 batch norms, weight and bias
    assert set(exempt_from_decay(RESNET50, "norm-and-bias")) == batch_norms | {"fc.bias"}
    assert set(exempt_from_decay(RESNET50, "norm")) == batch_norms  # the fc bias is decayed
    ffcv = set(exempt_from_decay(RESNET50, "bn-names"))
    assert ffcv == {n for n in batch_norms if "downsample" not in n} and len(ffcv) == 98
    assert "layer1.0.downsample.1.weight" in batch_norms - ffcv  # FFCV decays the downsample batch norms


@pytest.mark.parametrize("arch", ["resnet50", "mobilenet_v3_small", "convnext_tiny", "regnet_x_400mf"])
def test_the_norm_rule_is_torchvisions_norm_split(arch):
    model = RESNET50 if arch == "resnet50" else torchvision.models.get_model(arch)
    norm, _ = split_normalization_params(model)
    assert set(exempt_from_decay(model, "norm")) == names_of(model, norm)
    # what norm-and-bias spares beyond it: biases of convolutions and linear layers, and nothing of 2 dims or more
    extra = set(exempt_from_decay(model, "norm-and-bias")) - set(exempt_from_decay(model, "norm"))
    assert extra and all(name.endswith("bias") for name in extra)


class Norms(torch.nn.Module):
    """One of each norm layer torchvision's set_weight_decay knows, beside a conv and a linear layer."""
    def __init__(self):
        super().__init__()
        self.conv, self.linear = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 2)
        self.group, self.layer = torch.nn.GroupNorm(2, 4), torch.nn.LayerNorm(4)
        self.instance, self.batch = torch.nn.InstanceNorm2d(4, affine=True), torch.nn.BatchNorm1d(4)
        self.lrn = torch.nn.LocalResponseNorm(2)


@pytest.mark.parametrize("rule,exempt", [
    ("norm-and-bias", {"conv.bias", "linear.bias", "group.weight", "group.bias", "layer.weight", "layer.bias",
                       "instance.weight", "instance.bias", "batch.weight", "batch.bias"}),
    ("norm", {"group.weight", "group.bias", "layer.weight", "layer.bias", "instance.weight", "instance.bias",
              "batch.weight", "batch.bias"}),
    ("bn-names", set()),
])
def test_each_rule_on_every_kind_of_norm_layer(rule, exempt):
    assert set(exempt_from_decay(Norms(), rule)) == exempt


@pytest.mark.parametrize("rule", NO_DECAY_RULES)
def test_the_groups_hold_every_parameter_once_decayed_first(rule):
    groups = parameter_groups(RESNET50, 3e-5, rule)
    assert [g["weight_decay"] for g in groups] == [3e-5, 0.0]
    assert names_of(RESNET50, groups[1]["params"]) == set(exempt_from_decay(RESNET50, rule))
    listed = [id(p) for g in groups for p in g["params"]]
    assert sorted(listed) == sorted(id(p) for p in RESNET50.parameters())


def test_the_classic_groups_are_the_1d_parameters_as_before():
    decay, spared = parameter_groups(RESNET50, 1e-4)
    assert [id(p) for p in decay["params"]] == [id(p) for p in RESNET50.parameters() if p.ndim > 1]
    assert [id(p) for p in spared["params"]] == [id(p) for p in RESNET50.parameters() if p.ndim <= 1]


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="no --no-decay rule"):
        exempt_from_decay(RESNET50, "biases")


# ---------------------------------------------------------------- resume: the same rates

def rates(optimizer, scheduler, steps: int) -> list[float]:
    """Each step's rate, stepped as train_step steps it: the optimizer, then the scheduler."""
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def fresh(config: TrainConfig, steps: int):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(parameter_groups(model, 1e-4, config.no_decay), lr=0.4, momentum=0.9)
    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_of(config, steps))


@pytest.mark.parametrize("name", sorted(RECIPES))
@pytest.mark.parametrize("stop", [1, 5, 6, 7, 17])  # mid-epoch in and after the warm-up, at an epoch's end
def test_a_checkpoint_mid_epoch_resumes_the_same_rates(name, stop, tmp_path):
    config = TrainConfig.from_settings({"data": "", "run_dir": "", **recipe(name), "epochs": 8, "warmup_epochs": 3.0})
    steps = 6
    _, optimizer, scheduler = fresh(config, steps)
    whole = rates(optimizer, scheduler, 8 * steps)
    model, optimizer, scheduler = fresh(config, steps)
    first = rates(optimizer, scheduler, stop)
    saved = Checkpoint(model=model.state_dict(), optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                       scaler=torch.amp.GradScaler("cpu", enabled=False).state_dict(), epoch=stop // steps,
                       step=stop % steps, world_size=1, ranks=[{"rng": rng_state(torch.device("cpu")), "sums": {}}],
                       config=config.to_dict())
    save_checkpoint(tmp_path / "last.pt", saved)
    model, optimizer, scheduler = fresh(config, steps)
    load_checkpoint(tmp_path / "last.pt").restore(model, optimizer, scheduler,
                                                  torch.amp.GradScaler("cpu", enabled=False), 0, torch.device("cpu"))
    assert first + rates(optimizer, scheduler, 8 * steps - stop) == whole


# ---------------------------------------------------------------- the settings

def test_each_schedule_and_decay_flag_has_a_help_and_its_default():
    """A help string, so that ArgumentDefaultsHelpFormatter shows the default in --help."""
    actions = {option: action for action in build_parser()._actions for option in action.option_strings}
    for flag, default, choices in (("--warmup-start-factor", 0.0, None), ("--warmup-at", "end", WARMUP_AT),
                                   ("--lr-update", "step", LR_UPDATES),
                                   ("--no-decay", "norm-and-bias", NO_DECAY_RULES)):
        action = actions[flag]
        assert action.help and action.default == default and action.choices == choices
    assert "(default: norm-and-bias)" in " ".join(build_parser().format_help().split())
    assert set(SCHEDULES) == {"cosine", "linear"}


@pytest.mark.parametrize("flags,field,value", [
    (["--recipe", "torchvision-v2", "--lr-update", "step"], "lr_update", "step"),
    (["--recipe", "ffcv-rn50", "--no-decay", "norm"], "no_decay", "norm"),
    (["--warmup-start-factor", "0.1", "--warmup-at", "start"], "warmup_start_factor", 0.1),
])
def test_a_typed_flag_beats_the_recipe(flags, field, value):
    assert getattr(settings(*flags), field) == value


@pytest.mark.parametrize("flags", [["--warmup-start-factor", "1.5"], ["--warmup-start-factor", "-0.1"],
                                   ["--warmup-start-factor", "x"], ["--no-decay", "bias"], ["--lr-update", "batch"],
                                   ["--warmup-at", "middle"]])
def test_a_setting_out_of_its_range_is_refused(flags, capsys):
    with pytest.raises(SystemExit) as exit:
        settings(*flags)
    assert exit.value.code == 2 and flags[0] in capsys.readouterr().err
