"""The checkpoint's one schema: what it holds, what it refuses to resume, what it restores."""

import pytest
import torch

from train.run.checkpoint import Checkpoint, ResumeError, load_checkpoint, rng_state, save_checkpoint
from train import Augment
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


def test_the_runs_step_goes_on_from_the_checkpoints_and_one_written_before_it_was_kept_still_loads(tmp_path):
    """global_step: where a resume changes the steps an epoch (36 -> 18), the run's step goes on from the count
    the checkpoint reached; a checkpoint of this format without it (written before it was kept) loads, its step
    its position."""
    saved = checkpoint(torch.nn.Linear(2, 3), epoch=1, step=0, global_step=36)
    assert saved.step_offset(36) == 0 and saved.step_offset(18) == 18
    mid = checkpoint(torch.nn.Linear(2, 3), epoch=1, step=4, global_step=40)  # 4 steps into epoch 1
    assert mid.step_offset(36) == 0 and mid.step_offset(18) == 18
    state = saved.to_state()
    del state["global_step"]
    torch.save(state, tmp_path / "last.pt")
    older = load_checkpoint(tmp_path / "last.pt")
    assert older.global_step is None and older.step_offset(18) == 0


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


def test_resume_refuses_another_model():
    saved = checkpoint(torch.nn.Linear(3, 2))
    with pytest.raises(ResumeError, match="arch: checkpoint 'resnet18', now 'resnet50'"):
        saved.check_resumable(TrainConfig("data", "run", arch="resnet50"))
    saved.check_resumable(TrainConfig("data", "run", arch="resnet18"))


# ---------------------------------------------------------------- another world size (#52)

def loader_state(world: int, batch: int, canonical: tuple[int, int] | None = None) -> dict:
    """The parts of a train loader's state a checkpoint reads its layout from (canonical: an earlier
    elastic resume's; None: a state from before #52, its own)."""
    state = {"split": "train", "world_size": world, "batch_size": batch}
    return state | ({"canonical_world_size": canonical[0], "canonical_batch_size": canonical[1]} if canonical else {})


def test_another_world_size_shares_the_runs_global_batch_and_mid_epoch_refuses_one_that_cannot():
    """The run's layout is its loader state's (kept over earlier resumes), or, without one, its own world and
    --batch-size (a checkpoint at an epoch's end from before #52)."""
    with_batch = TrainConfig("data", "run", arch="resnet18", batch_size=16).to_dict()
    mid = checkpoint(torch.nn.Linear(3, 2), config=with_batch, loader=loader_state(2, 16))
    assert mid.layout == (2, 16) and [mid.batch_on(w) for w in (1, 2, 4, 8, 32)] == [32, 16, 8, 4, 1]
    four = checkpoint(torch.nn.Linear(3, 2), world_size=4, loader=loader_state(4, 8))  # the example
    # the world sizes named give each rank 2 samples or more: 32 ranks, named before, were then refused, one sample a
    # rank (a review's finding)
    with pytest.raises(ResumeError, match=r"stopped mid-epoch on a run laid out for 4 ranks x 8: 3 ranks cannot "
                                          r"share the run's global batch of 32 equally: resume it on 1, 2, 4, 8, 16 "
                                          r"ranks \(the epoch's remaining"):
        four.batch_on(3)
    resumed_before = checkpoint(torch.nn.Linear(3, 2), config=with_batch, world_size=1,
                                loader=loader_state(1, 32, canonical=(2, 16)))
    assert resumed_before.layout == (2, 16) and resumed_before.batch_on(4) == 8
    at_end = checkpoint(torch.nn.Linear(3, 2), config=with_batch, step=0)  # no loader state: before #52
    assert at_end.layout == (2, 16) and at_end.batch_on(4) == 8
    assert at_end.batch_on(3) == 16  # an epoch's end: the run's --batch-size, a global batch of 48


def test_a_resume_loads_the_loaders_state_mid_epoch_and_at_an_epochs_end_only_to_keep_the_runs_layout():
    with_batch = TrainConfig("data", "run", arch="resnet18", batch_size=6).to_dict()
    mid = checkpoint(torch.nn.Linear(3, 2), config=with_batch, loader=loader_state(2, 6))
    assert mid.loader_to_load(2, 6, 16) is mid.loader and mid.loader_to_load(1, 12, 16) is mid.loader
    elastic = loader_state(1, 12, canonical=(2, 6)) | {"shuffle_buffer": 16}  # an earlier resume on one rank
    end = checkpoint(torch.nn.Linear(3, 2), config=with_batch, world_size=1, step=0, loader=elastic)
    assert end.loader_to_load(4, 3, 16) == elastic and end.loader_to_load(1, 12, 16) == elastic  # another world
    assert end.loader_to_load(4, 3, 17) == elastic | {"shuffle_buffer": 17}  # a forced window: the next epoch's
    assert end.loader_to_load(2, 6, 16) is None  # the run's own world: its own plan
    assert end.loader_to_load(5, 6, 16) is None  # a world that cannot keep the batch: a new layout, nothing to load
    before = checkpoint(torch.nn.Linear(3, 2), config=with_batch, step=0)  # no state (before #52)
    assert before.loader_to_load(1, 12, 16) is None
    first = checkpoint(torch.nn.Linear(3, 2), config=with_batch, step=1, loader=loader_state(2, 6))
    assert first.mid_epoch and first.loader_to_load(2, 6, 16) is first.loader  # after the epoch's first step


def test_a_resume_on_another_world_says_what_stays_the_same_and_what_does_not():
    mixing = TrainConfig("data", "run", arch="resnet18", batch_size=4, augment=Augment(mixup=0.2)).to_dict()
    mid = checkpoint(torch.nn.Linear(3, 2), config=mixing, world_size=4, loader=loader_state(4, 4))
    assert mid.layout_change(4) == []
    assert mid.layout_change(2) == [
        "resumed on 2 ranks from 4, the same global batches of 16: the same samples at every step, augmented the "
        "same; not the same: BatchNorm's statistics are over 8 samples a rank (4 before); each rank's random state "
        "(dropout, stochastic depth) for the rest of epoch 2 is seeded for its place on this world"]
    assert "MixUp/CutMix pair samples within parts of the run's per-rank batches of 4" in mid.layout_change(8)[0]
    at_end = checkpoint(torch.nn.Linear(3, 2), config=mixing, world_size=4, step=0, loader=loader_state(4, 4))
    assert at_end.layout_change(3) == [
        "the run's global batch of 16 (4 x 4) is not shared equally by 3 ranks: from epoch 2, each rank takes "
        "--batch-size 4, a global batch of 12; the learning rate follows it (--lr is per 256 images), and the "
        "schedule the epoch's steps"]


def test_a_mid_epoch_resume_on_another_world_shares_the_epochs_sums_out_and_seeds_each_ranks_generators():
    from train.run.checkpoint import sums_on_world

    saved = [{"loss": 2.0, "correct": 3, "samples": 8, "key_hash": 5, "bad_samples": 1, "data_wait": 1.0,
              "elapsed": 4.0, "steps_here": 2, "skipped_samples": 4},
             {"loss": 1.0, "correct": 1, "samples": 8, "key_hash": 7, "bad_samples": 0, "data_wait": 3.0,
              "elapsed": 6.0, "steps_here": 2, "skipped_samples": 0}]
    shares = [sums_on_world(saved, 4, rank) for rank in range(4)]
    for name in ("loss", "correct", "samples", "key_hash", "bad_samples", "skipped_samples"):
        assert sum(share[name] for share in shares) == sum(s[name] for s in saved)
    for name in ("data_wait", "elapsed"):  # the epoch's record averages them over the ranks: as before
        assert sum(share[name] for share in shares) / 4 == sum(s[name] for s in saved) / 2
    assert {share["steps_here"] for share in shares} == {2}
    assert sums_on_world(saved, 1, 0) == {"loss": 3.0, "correct": 4, "samples": 16, "key_hash": 12, "bad_samples": 1,
                                          "skipped_samples": 4, "data_wait": 2.0, "elapsed": 5.0,
                                          "steps_here": 2}  # onto one rank: all
    one = [{"loss": 2.0, "samples": 8, "steps_here": 2}]  # one rank's sums, some never recorded: none counted
    assert [sums_on_world(one, 2, rank) for rank in (0, 1)] == [
        {"loss": 2.0, "correct": 0, "samples": 8, "key_hash": 0, "bad_samples": 0, "skipped_samples": 0,
         "data_wait": 0.0, "elapsed": 0.0, "steps_here": 2},
        {"loss": 0, "correct": 0, "samples": 0, "key_hash": 0, "bad_samples": 0, "skipped_samples": 0,
         "data_wait": 0.0, "elapsed": 0.0, "steps_here": 2}]
    assert sums_on_world([{"loss": 2.0}], 2, 0)["steps_here"] == 0
    model = torch.nn.Linear(3, 2)
    mid = checkpoint(model, ranks=[{"rng": rng_state(torch.device("cpu")), "sums": sums} for sums in saved])
    draws = []
    for rank in (0, 1, 0):
        fresh = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        sums = mid.restore(fresh, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False), rank=rank,
                           device=torch.device("cpu"), world_size=4)
        assert sums == shares[rank]
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[2]) and not torch.equal(draws[0], draws[1])  # per rank, reproducible


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
        saved.check_resumable(refused, dataset=again)
    # another dataset (not the same source): what each is, where it said 'the checkpoint belongs to another run
    # (dataset_id: ...): use ... the settings it was made with' (a review's finding: a run moved to another cluster,
    # its source at another path prepared with another --shard-size, or a mistyped --data, was told nothing)
    with pytest.raises(ResumeError) as refusal:
        saved.check_resumable(refused, dataset=again | {"classes": ["n09"]})
    assert str(refusal.value) == (
        "/scratch/again holds another dataset than the run trained on: the run's: 2 classes, 10 train and 4 val "
        "images, from /data/ILSVRC (official) prepared with --seed 0 --shard-size 200 --quality 90 --restart-mcus 4; "
        "now: 1 class, 10 train and 4 val images, from /data/ILSVRC (official) prepared with --seed 0 --shard-size 50 "
        "--resize 512 --quality 90 --restart-mcus 4. To resume, point --data at the run's dataset (its source prepared "
        "with its options); or start a new run in another --run-dir")
    moved = again | {"source": {"path": "/cluster2/ILSVRC", "layout": "official"}}
    with pytest.raises(ResumeError, match=r"the run's: .* from /data/ILSVRC \(official\) prepared with --seed 0 "
                                          r"--shard-size 200 .*; now: .* from /cluster2/ILSVRC \(official\) prepared "
                                          r"with --seed 0 --shard-size 50 --resize 512"):
        saved.check_resumable(refused, dataset=moved)
    with pytest.raises(ResumeError, match=r"holds another dataset than the run trained on: 2 classes, .*, as the "
                                          r"run's, into other shards \(the source's files changed since"):
        saved.check_resumable(refused, dataset=trained)  # the same description, another dataset id
    saved.check_resumable(TrainConfig("/scratch/same", "run", arch="resnet18"), dataset=trained)  # its own: resumes
    saved.dataset = None  # a checkpoint from before the dataset was kept: as before
    with pytest.raises(ResumeError, match="belongs to another run"):
        saved.check_resumable(refused, dataset=again)


def test_a_resume_on_winter21_labelled_in_its_other_table_names_the_flag_that_gives_the_runs():
    """A run trained on winter21 in 22k's table (the default before #53), resumed by a job that prepared its node-local
    disk anew in winter21's own: refused naming --class-table imagenet-22k; and the other way round."""
    from train.run.checkpoint import labelled_again_in

    source = {"path": "/data/winter21_whole.tar.gz", "layout": "imagenet-full"}
    in_22k = {"source": source, "classes": [f"n{i:08d}" for i in range(21841)], "samples": {}, "options": {}}
    in_w21 = in_22k | {"classes": in_22k["classes"][:19167]}
    assert labelled_again_in(in_22k, in_w21) == ("19,167 classes, where the run trained on 21,841. To resume, prepare "
                                                 "it with --class-table imagenet-22k (the run's table), or point --data "
                                                 "at the copy it trained on; or start a new run in another --run-dir")
    assert "--class-table imagenet-w21" in labelled_again_in(in_w21, in_22k)
    assert labelled_again_in(in_22k, in_22k) == labelled_again_in(in_22k, in_w21 | {"source": {"path": "/x"}}) == ""
    # the archive moved, or mounted elsewhere: the same release, the same advice (a review found it lost)
    moved = in_w21 | {"source": {"path": "/mnt/new/winter21_whole.tar.gz", "layout": "imagenet-full"}}
    assert labelled_again_in(in_22k, moved) == labelled_again_in(in_22k, in_w21) != ""
    saved = checkpoint(torch.nn.Linear(3, 2))
    saved.dataset = in_22k
    with pytest.raises(ResumeError, match="/scratch/w21 holds the run's source labelled in another class table: 19,167 "
                                          "classes, .* --class-table imagenet-22k"):
        saved.check_resumable(TrainConfig("/scratch/w21", "run", arch="resnet18", dataset_id="new"), dataset=in_w21)


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


def test_resuming_another_runs_checkpoint_where_a_run_dir_holds_its_own_is_refused(tmp_path):
    """--resume PATH into a run directory holding another checkpoint replaced it at the first save, and mixed
    the two runs' metrics: refused, as a new run there is. PATH being that checkpoint (by any name) is a resume."""
    from train.run.checkpoint import find_checkpoint

    other, run = tmp_path / "other" / "last.pt", tmp_path / "run"
    other.parent.mkdir()
    other.write_bytes(b"another run's checkpoint")
    assert find_checkpoint(str(run), str(other)) == other  # an empty --run-dir continues it
    run.mkdir()
    (run / "last.pt").write_bytes(b"this run's checkpoint")
    with pytest.raises(ResumeError, match=f"--run-dir {run} holds a run's checkpoint \\(last.pt\\), which "
                                          f"continuing --resume {other} there would overwrite: give that run an empty "
                                          "--run-dir, or continue the one there with --resume auto"):
        find_checkpoint(str(run), str(other))
    (tmp_path / "link.pt").symlink_to(run / "last.pt")
    assert find_checkpoint(str(run), str(run / "last.pt")) == run / "last.pt"
    assert find_checkpoint(str(run), str(tmp_path / "link.pt")) == tmp_path / "link.pt"


def test_a_run_directory_given_to_resume_says_which_file_or_flags_to_give(tmp_path):
    """--resume RUN_DIR (the folder, not its last.pt) was "no such checkpoint file", of a folder that is there."""
    from train.run.checkpoint import find_checkpoint

    (tmp_path / "old").mkdir()
    with pytest.raises(ResumeError) as refused:
        find_checkpoint(str(tmp_path / "new"), str(tmp_path / "old"))
    assert str(refused.value) == (f"--resume {tmp_path / 'old'} is a folder, not a checkpoint file: give one of its "
                                  f"checkpoints (--resume {tmp_path / 'old' / 'last.pt'}), or continue the run there "
                                  f"with --run-dir {tmp_path / 'old'} --resume auto")
    with pytest.raises(ResumeError, match=f"^--resume {tmp_path / 'old.pt'}: no such checkpoint file$"):
        find_checkpoint(str(tmp_path / "new"), str(tmp_path / "old.pt"))  # a path mistyped


@pytest.mark.parametrize("damage", ["cut short", "emptied", "random bytes", "a tensor"])
def test_a_damaged_or_foreign_checkpoint_is_refused_in_one_line(tmp_path, damage):
    """--resume auto reads RUN_DIR/last.pt: a file cut short (a copy interrupted), emptied, garbage or another
    program's is a ResumeError saying what to do, never torch's traceback."""
    import random

    path = tmp_path / "last.pt"
    save_checkpoint(path, checkpoint(torch.nn.Linear(2, 3)))
    data = path.read_bytes()
    if damage == "a tensor":
        torch.save(torch.zeros(3), path)
    else:
        path.write_bytes({"cut short": data[:len(data) // 2], "emptied": b"",
                          "random bytes": random.Random(0).randbytes(4096)}[damage])
    said = (r"is not a checkpoint of this trainer \(it holds a Tensor\)" if damage == "a tensor" else
            r"is damaged or not a checkpoint \(\w+: .*\): put back a copy of it, or start the run again")
    with pytest.raises(ResumeError, match=said) as refused:
        load_checkpoint(path)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("damage", ["a bit flipped", "a block zeroed"])
def test_a_checkpoint_whose_weights_changed_on_disk_is_refused_not_resumed_on(tmp_path, damage):
    """torch.load does not check the CRC-32 of the zip's members: a checkpoint whose tensor bytes were damaged
    after it was written (a bit flipped, a block zeroed) loaded, and the run resumed, or was evaluated, on the
    damaged weights without a word (a review's finding)."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, checkpoint(torch.nn.Linear(256, 64)))
    data = bytearray(path.read_bytes())
    middle = len(data) // 2  # inside the weight's 64 KiB
    if damage == "a bit flipped":
        data[middle] ^= 0x10
    else:
        data[middle:middle + 4096] = bytes(4096)
    path.write_bytes(bytes(data))
    with pytest.raises(ResumeError, match=r"last.pt is damaged \(archive/data/\d+ fails its checksum: its bytes "
                                          r"changed after it was written\): put back a copy of it") as refused:
        load_checkpoint(path)
    assert "\n" not in str(refused.value)


def test_a_checkpoint_written_without_checksums_is_not_called_damaged(tmp_path):
    """torch.save writes no CRC-32 (0) under its serialization config's compute_crc32 off: the check has nothing to
    compare, where it refused the whole file as damaged (a review's finding)."""
    from torch.utils.serialization import config as serialization

    path, before = tmp_path / "last.pt", serialization.save.compute_crc32
    serialization.save.compute_crc32 = False  # (set and put back by hand: monkeypatch's undo deleted torch's key)
    try:
        save_checkpoint(path, checkpoint(torch.nn.Linear(256, 64)))
    finally:
        serialization.save.compute_crc32 = before
    assert load_checkpoint(path).epoch == checkpoint(torch.nn.Linear(2, 2)).epoch


def test_a_requeued_job_continues_its_wandb_run_and_an_empty_id_file_is_replaced(tmp_path):
    """RUN_DIR/wandb-id keeps the W&B run a requeued job continues: read where it holds one, drawn and written
    whole where there is none, or an empty one (an earlier version's plain write cut by a crash), which W&B
    would refuse at every start."""
    from train.run.trackers import WANDB_ID_NAME, run_id_of

    first = run_id_of(tmp_path / "run")
    assert len(first) == 8 and (tmp_path / "run" / WANDB_ID_NAME).read_text() == first
    assert run_id_of(tmp_path / "run") == first
    (tmp_path / "run" / WANDB_ID_NAME).write_text("")
    again = run_id_of(tmp_path / "run")
    assert again and (tmp_path / "run" / WANDB_ID_NAME).read_text() == again


def test_a_new_run_where_an_earlier_one_left_its_wandb_id_logs_to_a_wandb_run_of_its_own(tmp_path, caplog):
    """A new run in a run directory whose last.pt went (deleted, as a refusal advises, or not copied) continued the
    earlier run's W&B run, which ignores every step it logs until they pass the earlier run's last (a review's
    finding): it draws an id of its own, and says so; its resumes continue it."""
    from train.run.trackers import WANDB_ID_NAME, run_id_of

    earlier = run_id_of(tmp_path / "run", resumed=False)
    assert not caplog.records  # a first run: nothing to say
    new = run_id_of(tmp_path / "run", resumed=False)
    assert new != earlier and (tmp_path / "run" / WANDB_ID_NAME).read_text() == new
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'run' / WANDB_ID_NAME}: W&B run {earlier} was an earlier start's, whose last.pt is not here: "
        f"this new run logs to W&B run {new} (continued, {earlier} would ignore its steps up to its own last)"]
    assert run_id_of(tmp_path / "run") == new


@pytest.mark.parametrize("fills", ["before it opens", "as it logs"])
def test_a_tracker_whose_file_system_fills_stops_in_one_warning_and_the_run_goes_on(tmp_path, caplog, fills,
                                                                                       monkeypatch):
    """--tracker tensorboard on a run directory that fills (another job, a quota): TensorBoard's writer thread
    raised the OSError at its next flush, rank 0's traceback in the middle of an epoch while the other ranks
    waited in the step's collective (a review's finding). Now one warning, and the tracker logs nothing more:
    no traceback either (the writer thread's own, which threading's hook printed beside the warning)."""
    import threading

    from test_prepare import a_small_disk, fill
    from train.run.trackers import open_tracker

    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    with a_small_disk(tmp_path / "small", 1) as mount:
        run = mount / "run"
        run.mkdir()
        if fills == "before it opens":
            fill(mount, "1k")
        tracker = open_tracker("tensorboard", str(run), is_main=True, resumed_step=0, project="p", config={})
        tracker.log({"train/loss": 1.0}, 1)
        fill(mount, "1k")
        for step in range(2, 400):  # past the last page the event file holds
            tracker.log({f"train/{name}": float(step) for name in ("loss", "lr", "images_per_sec")}, step)
        tracker.close()
        for thread in threading.enumerate():
            if type(thread).__name__ == "_AsyncWriterThread":
                thread.join(10)
    assert [type(e.exc_value) for e in thread_errors] == []
    warned = [r for r in caplog.records if "--tracker tensorboard" in r.getMessage()]
    assert [r.levelname for r in warned] == ["WARNING"]
    assert warned[0].getMessage() == (
        f"--tracker tensorboard: cannot write {run / 'tensorboard'} (No space left on device): is its file system "
        "full, or over its quota? It logs nothing more until the run is resumed; metrics.jsonl still records every "
        "epoch (python -m train.report RUN_DIR draws them)")


def test_ranks_whose_data_differ_are_named_before_any_collective_of_the_run():
    """Each node reads its own copy ($SLURM_TMPDIR's): ranks that read another dataset, other evaluation sets
    or other ReaL labels would count other images, or pair their collectives wrongly. Pure: the decision."""
    from train.run.loop import first_disagreement

    same = {"dataset": "ab12", "evaluation sets": ["v2"], "ReaL labels": "9f"}
    assert first_disagreement([same, dict(same)], ["n1", "n2"]) is None
    no_real = {**same, "ReaL labels": None}
    assert first_disagreement([same, same, no_real], ["n1", "n1", "n2"]) == (
        "rank 2 (on n2) reads another ReaL labels at --data than rank 0 (on n1): every rank must read the same "
        "dataset. Prepare each node's copy with the same command (srun --ntasks-per-node=1 python -m prepare ...), "
        "or point --data at the same one")
    other = {"dataset": "cd34", "evaluation sets": [], "ReaL labels": "9f"}
    assert first_disagreement([same, other], ["n1", "n2"]).startswith(
        "rank 1 (on n2) reads another dataset and evaluation sets at --data than rank 0 (on n1)")


def test_a_checkpoint_that_does_not_fit_is_one_line_and_the_previous_one_is_kept(tmp_path):
    """The run directory's file system fills (or its quota): the save is refused in one line (torch's writer says
    a short write as a RuntimeError of its C++ frames), the previous last.pt whole, no temporary file left."""
    import subprocess

    from test_prepare import small_tmpfs
    from train.run.checkpoint import CheckpointUnwritable

    mount = tmp_path / "small"
    reason = small_tmpfs(mount, 2)
    if reason:
        pytest.skip(reason)
    try:
        path = mount / "run" / "last.pt"
        save_checkpoint(path, checkpoint(torch.nn.Linear(2, 3)))
        before = path.read_bytes()
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'other-job.bin'}", "bs=64k"], capture_output=True)
        with pytest.raises(CheckpointUnwritable, match=rf"^cannot write the checkpoint {path} \(.+\): is its file "
                                                       r"system full, or over its quota\? The previous checkpoint is "
                                                       r"kept: make room, then resume \(--resume auto\)$"):
            save_checkpoint(path, checkpoint(torch.nn.Linear(200, 300)))
        assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]
    finally:
        subprocess.run(["umount", mount]).returncode == 0 or subprocess.run(["umount", "-l", mount], check=True)


def test_what_a_kill_left_of_the_run_directorys_atomic_writes_is_removed_and_nothing_else(tmp_path):
    """A kill during torch.save leaves `.last.pt.XXXXXXXX.tmp`, as large as a checkpoint (each one, on storage with a
    quota): the next start removes the run's own such files, and no other file of the folder."""
    from train.run.loop import remove_killed_writes

    killed = [".last.pt.k9x1ab.tmp", ".config.json.a1b2c3.tmp", ".metrics.jsonl.d4e5f6.tmp", ".wandb-id.g7h8i9.tmp"]
    kept = ["last.pt", "metrics.jsonl", ".notes.txt.j1k2l3.tmp", "last.pt.tmp"]
    for name in killed + kept:
        (tmp_path / name).write_bytes(b"x")
    assert remove_killed_writes(tmp_path) == killed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
    assert remove_killed_writes(tmp_path) == []
