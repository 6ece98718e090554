"""The checkpoint's one schema: what it holds, what it refuses to resume, what it restores."""

import pytest
import torch

from train.run.checkpoint import Checkpoint, ResumeError, load_checkpoint, rng_state, save_checkpoint
from train.run.config import TrainConfig


def checkpoint(model: torch.nn.Module, **changes) -> Checkpoint:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    values = dict(model=model.state_dict(), optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                  scaler=torch.amp.GradScaler("cpu", enabled=False).state_dict(), epoch=2, step=5, world_size=2,
                  ranks=[{"rng": rng_state(torch.device("cpu")), "sums": {"samples": 40}}] * 2,
                  config=TrainConfig("data", "run", arch="resnet18").to_dict())
    return Checkpoint(**(values | changes))


def test_a_saved_checkpoint_loads_as_the_same_schema(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "last.pt", checkpoint(model))
    loaded = load_checkpoint(tmp_path / "last.pt")
    assert (loaded.epoch, loaded.step, loaded.world_size) == (2, 5, 2)
    assert loaded.mid_epoch and torch.equal(loaded.model["weight"], model.weight.detach())


def test_a_file_of_another_trainer_is_refused_by_name(tmp_path):
    torch.save({"model": {}, "epoch": 1}, tmp_path / "other.pt")
    with pytest.raises(ResumeError, match="not a checkpoint of this trainer .*optimizer"):
        load_checkpoint(tmp_path / "other.pt")


def test_a_checkpoint_of_an_earlier_version_is_refused_in_one_line(tmp_path):
    """Checkpoints written before this version (no format; some settings named otherwise) are refused,
    not converted."""
    state = checkpoint(torch.nn.Linear(3, 2)).to_state()
    del state["format"]
    torch.save(state, tmp_path / "old.pt")
    with pytest.raises(ResumeError, match=r"old.pt was written by an earlier version of python -m train \(format "
                                          r"unnamed; .*refused: start the run again"):
        load_checkpoint(tmp_path / "old.pt")


def test_resume_refuses_another_model_and_mid_epoch_another_world_size():
    saved = checkpoint(torch.nn.Linear(3, 2))
    with pytest.raises(ResumeError, match="arch: checkpoint 'resnet18', now 'resnet50'"):
        saved.check_resumable(TrainConfig("data", "run", arch="resnet50"), world_size=2)
    with pytest.raises(ResumeError, match="stopped mid-epoch with 2 ranks; this run has 4"):
        saved.check_resumable(TrainConfig("data", "run", arch="resnet18"), world_size=4)
    at_boundary = checkpoint(torch.nn.Linear(3, 2), step=0)
    at_boundary.check_resumable(TrainConfig("data", "run", arch="resnet18"), world_size=4)


def test_the_same_source_prepared_again_is_told_apart_from_another_dataset():
    from train.run.checkpoint import prepare_flags, prepared_again_with

    trained = {"source": {"path": "/data/ILSVRC", "layout": "official"}, "classes": ["n01", "n02"],
               "samples": {"train": 10, "val": 4},
               "options": {"seed": 0, "shard_size_mb": 200.0, "resize": None, "quality": 90, "restart_mcus": 4,
                           "skip_bad": False}}
    again = trained | {"options": trained["options"] | {"shard_size_mb": 50.0, "resize": 512}}
    assert prepared_again_with(trained, again) == "--resize None -> 512, --shard-size 200.0 -> 50.0"
    assert prepare_flags(trained["options"]) == "--seed 0 --shard-size 200 --quality 90 --restart-mcus 4"
    for other in ({"source": {"path": "/data/other", "layout": "official"}}, {"classes": ["n01"]},
                  {"samples": {"train": 9, "val": 4}}):  # another source, or other images: another dataset
        assert prepared_again_with(trained, again | other) == ""
    saved = checkpoint(torch.nn.Linear(3, 2))
    saved.dataset = trained
    refused = TrainConfig("/scratch/again", "run", arch="resnet18", dataset_id="new")
    with pytest.raises(ResumeError, match=r"/scratch/again holds the run's source prepared again with other options "
                                          r"\(--resize None -> 512, --shard-size 200.0 -> 50.0\)"):
        saved.check_resumable(refused, world_size=2, dataset=again)
    with pytest.raises(ResumeError, match="belongs to another run"):  # not the same source: as before
        saved.check_resumable(refused, world_size=2, dataset=again | {"classes": ["n09"]})


def test_restore_loads_the_weights_and_this_ranks_sums():
    model = torch.nn.Linear(3, 2)
    saved = checkpoint(model)
    fresh = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    sums = saved.restore(fresh, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False), rank=1,
                         device=torch.device("cpu"))
    assert sums == {"samples": 40} and torch.equal(fresh.weight, model.weight)


def test_a_new_run_is_refused_where_its_run_dir_holds_a_checkpoint(tmp_path):
    from train.run.checkpoint import find_checkpoint

    assert find_checkpoint(str(tmp_path), None) is None and find_checkpoint(str(tmp_path), "auto") is None
    (tmp_path / "last.pt").write_bytes(b"a run's checkpoint")
    with pytest.raises(ResumeError, match="holds a run's checkpoint \\(last.pt\\), which a new run would overwrite"):
        find_checkpoint(str(tmp_path), None)
    assert find_checkpoint(str(tmp_path), "auto") == tmp_path / "last.pt"
