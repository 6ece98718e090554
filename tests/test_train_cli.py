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


@pytest.mark.slow  # three torchvision models built (inception_v3: 27M parameters)
def test_models_with_auxiliary_classifiers_train_on_their_main_one_and_a_vit_at_the_runs_one_size():
    """--arch googlenet and inception_v3 gave the loss a namedtuple in training mode (a traceback at the first
    step); a Vision Transformer at other than 224 px failed its position embeddings' assertion."""
    import torch

    from train.run.models import build_model

    for arch, size in [("googlenet", 64), ("inception_v3", 75), ("vit_b_32", 64)]:
        model = build_model(arch, 4, size).train()
        assert isinstance(model(torch.zeros(2, 3, size, size)), torch.Tensor), arch
    with pytest.raises(ConfigError, match="--arch vit_b_16 takes images of one size .*no --ramp"):
        build_model("vit_b_16", 4, None)
    with pytest.raises(ConfigError, match="--arch vit_b_16 cuts images into 16 px patches: give an --image-size that "
                                          "is a multiple of 16, not 40"):
        build_model("vit_b_16", 4, 40)


def test_a_run_has_one_image_size_without_a_ramp_or_a_val_crop_of_another():
    from train.run.config import TrainConfig
    from train.run.loop import one_image_size

    def size(**settings) -> int | None:
        return one_image_size(TrainConfig.from_settings({"data": "", "run_dir": "", "image_size": 64, **settings}))

    assert size() == size(val_crop=64) == size(val_resize=73) == 64
    assert size(val_crop=72) is size(ramp=(32, 64, 0, 2)) is size(val_crop=(64, 48)) is None


@pytest.mark.parametrize("arch", ["fcn_resnet50", "r3d_18", "raft_small", "fasterrcnn_resnet50_fpn"])
def test_a_torchvision_model_that_is_no_classifier_is_refused_in_one_line(arch):
    """torchvision's get_model builds its segmentation, video, optical flow and detection models too: --arch
    fcn_resnet50 downloaded its backbone's weights (a URLError traceback offline), r3d_18 failed channels_last,
    raft_small the num_classes argument, each in a traceback."""
    from train.run.models import build_model

    with pytest.raises(ConfigError, match=f"--arch {arch}: not a torchvision classification model"):
        build_model(arch, 4, 32)


def test_an_image_size_the_arch_cannot_take_is_refused_in_one_line_before_the_data_is_read(prepared, tmp_path,
                                                                                           caplog, monkeypatch):
    """--arch squeezenet1_1 at 16 px (alexnet at 32, inception_v3 under 75, maxvit_t off 224) ended in a traceback
    from its pooling at the first training step, after the data were read: refused in one line, exit status 2."""
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    with caplog.at_level(logging.ERROR, logger="train"):
        code = main(["--data", str(prepared), "--run-dir", str(tmp_path), "--arch", "squeezenet1_1",
                     "--image-size", "16", "--batch-size", "4", "--max-steps", "1", "--workers", "1", "--device", "cpu",
                     "--epochs", "1", "--warmup-epochs", "0"])
    assert code == 2
    assert "--arch squeezenet1_1 cannot take 16 x 16 px images (Given input size" in caplog.text
    assert "give an --image-size (and --val-crop, --ramp) it takes" in caplog.text


def test_a_model_is_probed_at_every_size_the_run_feeds_it_and_left_as_it_was():
    """Validation's size and a ramp's every one are the model's too; a model of another width than the classes
    (an import path's that ignores num_classes) trained silently on 1000 logits, or ended in an IndexError."""
    import torch

    from train.run.config import TrainConfig
    from train.run.loop import input_sizes
    from train.run.models import build_model, check_takes

    def sizes(**settings) -> list[tuple[int, int]]:
        return input_sizes(TrainConfig.from_settings({"data": "", "run_dir": "", **settings}))

    assert sizes(image_size=64, val_crop=(48, 80)) == [(64, 64), (48, 80)]
    assert sizes(ramp=(32, 96, 0, 3)) == [(32, 32), (64, 64), (96, 96), (96, 96)]
    model = build_model("squeezenet1_1", 4).train()
    with pytest.raises(ConfigError, match="--arch squeezenet1_1 cannot take 16 x 16 px images"):
        check_takes(model, "squeezenet1_1", [(64, 64), (16, 16)], 4, torch.device("cpu"))
    assert model.training
    with pytest.raises(ConfigError, match=r"--arch m:f: its model answers a batch of 2 images with \(2, 1000\), "
                                          r"not \(2, 4\), one logit a class"):
        check_takes(build_model("squeezenet1_1", 1000), "m:f", [(64, 64)], 4, torch.device("cpu"))
    # a model that squeezes its batch answers one image without it: probed with two, it is taken (a review's finding)
    class Squeezing(torch.nn.Module):  # a head ending in .squeeze(), as some do
        def __init__(self):
            super().__init__()
            self.net = build_model("resnet18", 4)

        def forward(self, x):
            return self.net(x).squeeze()

    check_takes(Squeezing(), "m:squeezing", [(32, 32)], 4, torch.device("cpu"))
    model = build_model("resnet18", 4).train()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    check_takes(model, "resnet18", [(32, 32), (48, 64)], 4, torch.device("cpu"))
    assert model.training and all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_a_batch_of_one_a_rank_is_refused_at_the_parse_not_called_damage(capsys):
    """--batch-size 1 read the data, then stopped at the first step with 'a training batch kept fewer than 2 of
    its 1 samples: the dataset is damaged; run prepare with --verify on this node'."""
    from train.run.config import parse_command_line

    with pytest.raises(SystemExit) as stopped:
        parse_command_line(["--data", "/nowhere", "--batch-size", "1"])
    assert stopped.value.code == 2
    assert "--batch-size must be at least 2: batch norm cannot train on one sample a rank" in capsys.readouterr().err


def test_an_import_path_whose_callable_takes_no_num_classes_is_refused_in_one_line(tmp_path, monkeypatch):
    """`--arch mymodels:net` of a def net() ended in a TypeError traceback; a class, a **kwargs and a partial bind."""
    from train.run.models import build_model

    (tmp_path / "no_classes_models.py").write_text(
        "import functools\nimport torch\n\n\ndef net():\n    return torch.nn.Linear(3, 4)\n\n\n"
        "def loose(**kwargs):\n    return torch.nn.Linear(3, kwargs['num_classes'])\n\n\n"
        "class Net(torch.nn.Linear):\n    def __init__(self, num_classes):\n"
        "        super().__init__(3, num_classes)\n\n\n"
        "def sized(width, num_classes):\n    return torch.nn.Linear(width, num_classes)\n\n\n"
        "partial = functools.partial(sized, 3)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"--arch no_classes_models:net: net takes no num_classes argument, which the "
                                          r"run calls it with \(net\(num_classes=4\)\): give it one"):
        build_model("no_classes_models:net", 4)
    for name in ("loose", "Net", "partial"):
        assert build_model(f"no_classes_models:{name}", 4).out_features == 4


def test_a_diverged_run_says_which_ranks_in_a_line_of_any_world_size():
    from train.run.loop import which_ranks

    assert which_ranks([1], 2) == "rank 1" and which_ranks([0], 1) == "rank 0"
    assert which_ranks([0, 1], 2) == "every rank" and which_ranks([3, 5], 8) == "ranks 3, 5"
    assert which_ranks(list(range(0, 1000, 2)), 1024) == "ranks 0, 2, 4, 6, 8, 10, 12, 14 and 492 more"


def test_a_diverged_run_says_how_to_go_on_from_the_checkpoint_it_holds(tmp_path):
    """From the run directory's checkpoint: --resume auto; from one elsewhere that no save replaced yet: its path, as
    one word to paste; fp16 (which overflows where bf16 does not): bf16. A resume refuses a changed flag without its
    --force-change: each change says it (the warm-up's and bf16's were said without)."""
    from train.run.checkpoint import checkpoint_path
    from train.run.loop import how_to_go_on

    run_dir = str(tmp_path / "run")
    assert how_to_go_on(None, run_dir, fp16=False) == ("No checkpoint was saved before it: start again with a lower "
                                                       "--lr, a longer --warmup-epochs")
    assert how_to_go_on((checkpoint_path(run_dir), 3, 0), run_dir, fp16=True) == (
        f"{run_dir}/last.pt still holds epoch 3 step 0, before it: resume from it with --resume auto and a lower rate "
        "(--lr RATE --force-change --lr), a longer warm-up (--warmup-epochs N --force-change --warmup-epochs), or bf16 "
        "where fp16 overflowed (--amp bf16 --force-change --amp)")
    elsewhere = tmp_path / "old runs" / "last.pt"
    assert how_to_go_on((elsewhere, 2, 40), run_dir, fp16=False) == (
        f"{elsewhere} still holds epoch 2 step 40, before it: resume from it with --resume '{elsewhere}' and a lower "
        "rate (--lr RATE --force-change --lr), a longer warm-up (--warmup-epochs N --force-change --warmup-epochs)")
