"""#53: every distinct published evaluation transform (timm's pretrained data configs, torchvision's weights'
presets) gives the reference pixels through the loader's arguments (train.eval_transform_arguments): the
whole sweep of tests/eval_transforms_all.py, about 10 s."""

import pytest

from eval_transforms_all import main


@pytest.mark.slow
def test_every_published_eval_transform_gives_its_reference_pixels(capsys):
    pytest.importorskip("timm")
    assert main([]) == 0, capsys.readouterr().out
    said = capsys.readouterr().out.strip().splitlines()[-1]
    assert said.startswith("201 of 201 evaluation transforms give the reference pixels (28 torchvision presets, 173 "
                           "timm data configs)"), said


def test_the_helper_takes_a_pretrained_cfg_a_data_config_or_a_torchvision_preset():
    pytest.importorskip("timm")
    from timm.data import resolve_data_config
    from timm.models import get_pretrained_cfg
    from torchvision.models import ResNet50_Weights

    from train import ConfigError, eval_transform_arguments

    cfg = get_pretrained_cfg("vit_5b_patch16_sapiens2.fb")
    assert eval_transform_arguments(cfg)["val_crop"] == (1024, 768)  # a PretrainedCfg, non-square
    assert eval_transform_arguments(resolve_data_config({}, pretrained_cfg=cfg.to_dict())) == \
        eval_transform_arguments(cfg.to_dict())
    assert eval_transform_arguments(ResNet50_Weights.IMAGENET1K_V2.transforms()) == {
        "val_crop": 224, "val_resize": 232, "val_crop_mode": "center", "val_interpolation": "bilinear",
        "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
    with pytest.raises(ConfigError, match="takes a timm data config .* not str"):
        eval_transform_arguments("resnet50")
