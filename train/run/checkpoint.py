"""Checkpoints: one typed definition of what `last.pt` holds, how it is checked before a resume and
how it is restored. Written atomically by rank 0, loaded safely (weights_only). A checkpoint of an
earlier version (another CHECKPOINT_FORMAT) is refused, not converted."""

from __future__ import annotations

import random
import zipfile
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import torch

from shards.errors import UserError
from shards.manifest import write_file_atomic
from shards.plan import per_rank_batch, seeded_rng
from train.imagenet_loader import canonical_of
from train.run.config import TrainConfig
from train.errors import ResumeError
from train.run.settings import FIXED

CHECKPOINT_NAME = "last.pt"
CHECKPOINT_FORMAT = "imagenet-train-checkpoint/2"  # what this version writes and reads
# What a checkpoint must share with the run that resumes it (after the settings are resolved: its dataset too).
MUST_MATCH_ON_RESUME = FIXED + ("dataset_id",)


@dataclass(kw_only=True)
class Checkpoint:
    """Everything needed to continue a run exactly, at an epoch's end or in its middle."""
    model: dict  # state_dict of the unwrapped model
    optimizer: dict
    scheduler: dict
    scaler: dict
    epoch: int  # the epoch to run (next, or the one interrupted)
    step: int  # steps of `epoch` already taken; 0 at an epoch boundary
    world_size: int
    ranks: list[dict]  # per rank {"rng": rng_state(), "sums": EpochSums as a dict}; read only mid-epoch
    config: dict  # TrainConfig.to_dict() of the run that wrote it
    loader: dict | None = None  # mid-epoch: the train ImageNetLoader's state_dict() after `step` steps
    ema: dict | None = None  # --ema: the AveragedModel's state_dict (its weights, buffers and n_averaged)
    dataset: dict | None = None  # what the run trained on (dataset_of): named where a resume finds another
    # the run's step (the trackers' axis, metrics.jsonl's "step") at the save; None: one written before it was kept,
    # whose step is its position, epoch x the steps an epoch + step
    global_step: int | None = None
    format: str = CHECKPOINT_FORMAT

    def to_state(self) -> dict:
        """A plain dict for torch.save (not dataclasses.asdict: that would deep-copy every tensor)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: dict, path: Path) -> "Checkpoint":
        """The checkpoint in `state`, of this version's format: one of an earlier version is refused."""
        missing = [f.name for f in fields(cls) if f.name not in state and f.default is MISSING]
        if missing:
            raise ResumeError(f"{path} is not a checkpoint of this trainer (no {', '.join(missing)}): "
                              "start a new run in another --run-dir (or delete this file)")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ResumeError(f"{path} was written by an earlier version of python -m train (format "
                              f"{state.get('format', 'unnamed')}; this version reads {CHECKPOINT_FORMAT}): checkpoints "
                              "from before it are refused: start the run again in another --run-dir (or delete this "
                              "file)")
        return cls(**{f.name: state.get(f.name, f.default) for f in fields(cls)})  # (the missing have defaults)

    @property
    def mid_epoch(self) -> bool:
        return self.step > 0

    @property
    def settings(self) -> TrainConfig:
        """The configuration of the run that wrote it."""
        return TrainConfig.from_dict(self.config)

    @property
    def layout(self) -> tuple[int, int]:
        """The run's layout: the world size its epochs are laid out for and each rank's batch there. The train
        loader's state says it (a run resumed on another world size keeps the layout it started on); a
        checkpoint without one (an epoch's end, before #52) is laid out for its own world and --batch-size."""
        if self.loader is not None:
            return canonical_of(self.loader)
        return self.world_size, self.settings.batch_size

    def step_offset(self, steps: int) -> int:
        """What the run's step adds to a position (epoch x `steps` + step) on the layout that resumes it: 0 but where
        a resume on another world changed the global batch, and so the steps an epoch (`batch_on`): the run's step
        goes on from the count it reached, where the new layout's position went back (TensorBoard then dropped the
        epochs logged past it, W&B the steps under it). Pure."""
        return 0 if self.global_step is None else self.global_step - (self.epoch * steps + self.step)

    def batch_on(self, world_size: int) -> int:
        """Each rank's batch when the run continues on `world_size` ranks: the run's global batch shared
        equally, so that its global batches and learning rate schedule go on unchanged (an elastic resume,
        #52). Where `world_size` does not divide it: mid-epoch refused, naming the world sizes that do; at an
        epoch's end each rank keeps the run's --batch-size, and the global batch changes (layout_change says
        so)."""
        world, batch = self.layout
        try:
            return per_rank_batch(world * batch, world_size)
        except ValueError:
            if self.mid_epoch:
                # the world sizes that give each rank 2 samples or more: the run refuses a batch of one a rank
                fitting = ", ".join(str(n) for n in range(1, world * batch // 2 + 1) if world * batch % n == 0)
                raise ResumeError(f"the checkpoint stopped mid-epoch on a run laid out for {world} ranks x "
                                  f"{batch}: {world_size} ranks cannot share the run's global batch of {world * batch} "
                                  f"equally: resume it on {fitting} ranks (the epoch's remaining global batches are "
                                  "read exactly on those)") from None
            return self.settings.batch_size

    def loader_to_load(self, world_size: int, batch_size: int, shuffle_buffer: int) -> dict | None:
        """The train loader's state a resume on `world_size` ranks of `batch_size` loads: mid-epoch, where it
        stopped; at an epoch's end, the run's layout where this world reads it (another world that keeps the
        global batch; on its own layout, or on a new one, nothing to load), with this run's `shuffle_buffer`
        (nothing of the epoch is left: a window --force-change set reads the next one). Pure."""
        if self.mid_epoch:
            return self.loader
        world, batch = self.layout
        keeps = world * batch == world_size * batch_size
        if self.loader is None or not keeps or (world, batch) == (world_size, batch_size):
            return None
        return {**self.loader, "shuffle_buffer": shuffle_buffer}

    def layout_change(self, world_size: int, batch_norm: bool = True) -> list[str]:
        """What continuing on `world_size` ranks changes, as a resume's start says it; nothing on the
        checkpoint's own world. `batch_norm`: whether the model normalises over each rank's batch. The
        loader says the batches' side (ImageNetLoader.load_state_dict)."""
        if world_size == self.world_size:
            return []
        config, (world, batch) = self.settings, self.layout
        before, now = self.loader["batch_size"] if self.loader else config.batch_size, self.batch_on(world_size)
        if now * world_size != world * batch:
            return [f"the run's global batch of {world * batch} ({world} x {batch}) is not shared equally by "
                    f"{ranks(world_size)}: from epoch {self.epoch}, each rank takes --batch-size {now}, a global batch "
                    f"of {now * world_size}; the learning rate follows it (--lr is per 256 images), and the schedule "
                    "the epoch's steps"]
        differ = [f"BatchNorm's statistics are over {now} samples a rank ({before} before)"] if batch_norm else []
        if (config.augment.mixup or config.augment.cutmix) and world % world_size:
            differ.append(f"MixUp/CutMix pair samples within parts of the run's per-rank batches of {batch}")
        if self.mid_epoch:
            differ.append(f"each rank's random state (dropout, stochastic depth) for the rest of epoch {self.epoch} is "
                          "seeded for its place on this world")
        return [f"resumed on {ranks(world_size)} from {self.world_size}, the same global batches of {world * batch}: "
                f"the same samples at every step, augmented the same; not the same: {'; '.join(differ) or 'nothing'}"]

    def check_resumable(self, config: TrainConfig, dataset: dict | None = None) -> None:
        """Refuse checkpoints of another model or dataset. `dataset`: dataset_of the data this run reads, to
        name a copy prepared again with other options. (A world size that cannot continue a mid-epoch
        checkpoint: `batch_on`.)"""
        saved = self.settings
        if saved.dataset_id != config.dataset_id and self.dataset and dataset:
            relabelled = labelled_again_in(self.dataset, dataset)
            if relabelled:
                raise ResumeError(f"{config.data} holds the run's source labelled in another class table: {relabelled}")
            prepared_again = prepared_again_with(self.dataset, dataset)
            if prepared_again:
                raise ResumeError(f"{config.data} holds the run's source prepared again with other options "
                                  f"({prepared_again}): the same images in other shards, which the run's read plan "
                                  "cannot continue. To resume, prepare it again with the run's options ("
                                  f"{prepare_flags(self.dataset['options'])}), or point --data at the copy it trained "
                                  "on; or start a new run in another --run-dir (python -m train.evaluate reads any copy)")
            # another dataset: what each is, so that a run moved to another cluster (its source at another path)
            # or a --data mistyped is told from a checkpoint of another run
            raise ResumeError(f"{config.data} holds another dataset than the run trained on: "
                              f"{dataset_change(self.dataset, dataset)}. To resume, point --data at the run's dataset "
                              "(its source prepared with its options); or start a new run in another --run-dir")
        diffs = [f"{name}: checkpoint {saved.setting(name)!r}, now {config.setting(name)!r}"
                 for name in MUST_MATCH_ON_RESUME if saved.setting(name) != config.setting(name)]
        if diffs:
            raise ResumeError(f"the checkpoint belongs to another run ({'; '.join(diffs)}): use another --run-dir, "
                              "or the settings it was made with")

    def restore(self, model: torch.nn.Module, optimizer, scheduler, scaler, rank: int, device: torch.device,
                ema: torch.nn.Module | None = None, world_size: int | None = None) -> dict:
        """Load the training state (and the weights' average, with --ema); mid-epoch, also this rank's
        RNG state. Returns this rank's epoch sums (empty at an epoch boundary). On another `world_size`
        (an elastic resume), the epoch's sums are shared out (`sums_on_world`) and each rank's generators
        are seeded for its place in this world: no rank of the checkpoint's had it."""
        model.load_state_dict(self.model)
        if ema is not None and self.ema is None:  # --ema forced on a run without one: it starts at these weights
            ema.module.load_state_dict(model.state_dict())
            ema.n_averaged.zero_()  # (its first update copies the weights then trained: AveragedModel's rule)
        elif ema is not None:
            ema.load_state_dict(self.ema)
        optimizer.load_state_dict(self.optimizer)
        scheduler.load_state_dict(self.scheduler)
        if self.scaler:  # empty where the checkpoint's run had no GradScaler (bf16, fp32): this one starts afresh
            scaler.load_state_dict(self.scaler)
        if not self.mid_epoch:
            return {}
        if world_size is not None and world_size != self.world_size:
            seed = self.settings.seed
            torch.manual_seed(seeded_rng(seed, "elastic", self.epoch, self.step, world_size, rank).getrandbits(63))
            random.seed(seeded_rng(seed, "elastic python", self.epoch, self.step, world_size, rank).getrandbits(63))
            return sums_on_world([saved["sums"] for saved in self.ranks], world_size, rank)
        set_rng_state(self.ranks[rank]["rng"], device)
        return self.ranks[rank]["sums"]


def ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


# An epoch's sums (loop.EpochSums) by how they combine over ranks: counts add up, timings are each rank's own
# (averaged over the ranks, the epoch's record), steps are the same on every rank.
ADDED_OVER_RANKS = ("loss", "correct", "samples", "key_hash", "bad_samples", "skipped_samples")
EACH_RANKS_OWN = ("data_wait", "elapsed")


def sums_on_world(saved: list[dict], world_size: int, rank: int) -> dict:
    """Rank `rank`'s share, on `world_size` ranks, of a mid-epoch checkpoint's per-rank sums: rank 0 carries
    every count the saved ranks added up (their sum over the new ranks is the epoch's so far), each rank the
    saved ranks' mean timings (so their mean is the epoch's), and every rank the steps. The key hashes' sum is
    reduced modulo by the epoch's record, as at every step. Pure."""
    share = {name: sum(sums.get(name, 0) for sums in saved) if rank == 0 else 0 for name in ADDED_OVER_RANKS}
    share |= {name: sum(sums.get(name, 0.0) for sums in saved) / len(saved) for name in EACH_RANKS_OWN}
    return share | {"steps_here": saved[0].get("steps_here", 0)}


# prepare's options that decide the shards' bytes (the manifest's "options"), by the flags that set them
PREPARE_FLAGS = {"seed": "--seed", "shard_size_mb": "--shard-size", "resize": "--resize", "quality": "--quality",
                 "restart_mcus": "--restart-mcus", "skip_bad": "--skip-bad"}


def dataset_of(manifest) -> dict:
    """What a checkpoint keeps of the dataset its run trained on: enough to tell, on a resume that finds
    another dataset_id, the same source prepared again with other options. Pure."""
    return {"source": {name: manifest.source.get(name) for name in ("path", "layout")},
            "options": dict(manifest.options), "classes": [c.wnid for c in manifest.classes],
            "samples": {name: split.samples for name, split in manifest.splits.items() if name in ("train", "val")}}


TABLE_FLAGS = {21841: "--class-table imagenet-22k", 19167: "--class-table imagenet-w21"}  # winter21's two tables


def labelled_again_in(trained: dict, now: dict) -> str:
    """Where `now` is `trained`'s source (the same layout, wherever it lies now: an archive moved or mounted
    elsewhere is the same release) labelled in winter21's other class table: what each holds and the prepare flag
    that gives the run's (winter21's default became its own 19,167 classes, where it was 22k's 21,841: a run on
    node-local disk prepared anew each job meets it); "" otherwise. Pure."""
    counts = len(trained["classes"]), len(now["classes"])
    if trained["source"].get("layout") != now["source"].get("layout") or set(counts) != set(TABLE_FLAGS):
        return ""
    return (f"{counts[1]:,} classes, where the run trained on {counts[0]:,}. To resume, prepare it with "
            f"{TABLE_FLAGS[counts[0]]} (the run's table), or point --data at the copy it trained on; or start a new "
            "run in another --run-dir")


def prepared_again_with(trained: dict, now: dict) -> str:
    """"--shard-size 0.12 -> 0.05, ..." where `now` is `trained`'s source (the same path, layout, classes and
    sample counts) prepared with other options; "" otherwise. Pure."""
    same_source = all(trained[name] == now[name] for name in ("source", "classes", "samples"))
    options = sorted(set(trained["options"]) | set(now["options"]))
    changed = [f"{PREPARE_FLAGS.get(name, name)} {trained['options'].get(name)} -> {now['options'].get(name)}"
               for name in options if trained["options"].get(name) != now["options"].get(name)]
    return ", ".join(changed) if same_source else ""


def dataset_change(trained: dict, now: dict) -> str:
    """What the run trained on and what --data holds now, as a refusal says them (the source's path, classes, images
    and prepare's options), where it is neither the run's source prepared again nor labelled again. Pure."""
    def described(dataset: dict) -> str:
        classes, samples, source = len(dataset["classes"]), dataset["samples"], dataset["source"]
        return (f"{classes:,} class{'es' * (classes != 1)}, {samples.get('train', 0):,} train and "
                f"{samples.get('val', 0):,} val images, from {source.get('path')} ({source.get('layout')}) prepared "
                f"with {prepare_flags(dataset['options'])}")
    if described(trained) == described(now):  # the same description, other shards
        return (f"{described(trained)}, as the run's, into other shards (the source's files changed since the run's "
                "was prepared?)")
    return f"the run's: {described(trained)}; now: {described(now)}"


def prepare_flags(options: dict) -> str:
    """The prepare flags that give `options`, every one said (a flag for a true switch, none for an option unset).
    Pure."""
    words = []
    for name, flag in PREPARE_FLAGS.items():
        value = options.get(name)
        if isinstance(value, bool):
            words += [flag] if value else []
        elif value is not None:
            words += [f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"]
    return " ".join(words)


def rng_state(device: torch.device) -> dict:
    """The host's generators, and the accelerator's under its own type (NVIDIA's and AMD's GPUs share one)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type != "cpu":
        state[device.type] = torch.get_device_module(device.type).get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type != "cpu" and device.type in state:
        torch.get_device_module(device.type).set_rng_state(state[device.type], device)


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_NAME


def reason(exn: Exception) -> str:
    """Why a read or write failed, in a few words: an OSError's strerror, else the first line of torch's
    message (its C++ frames follow), at most 160 characters."""
    if isinstance(exn, OSError) and exn.strerror:
        return exn.strerror
    return (str(exn).strip().splitlines() or [""])[0][:160]


class CheckpointUnwritable(UserError):
    """The checkpoint could not be written (a full file system, a quota): the previous one is kept."""


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Atomically (temporary file, fsync, rename): a reader sees the old or the new checkpoint, whole.
    CheckpointUnwritable, in one line, where it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, lambda f: torch.save(checkpoint.to_state(), f))
    except (OSError, RuntimeError) as exn:  # torch's zip writer says a short write as a RuntimeError
        raise CheckpointUnwritable(f"cannot write the checkpoint {path} ({reason(exn)}): is its file system full, or "
                                   "over its quota? The previous checkpoint is kept: make room, then resume "
                                   "(--resume auto)") from None


def find_checkpoint(run_dir: str, resume: str | None) -> Path | None:
    """The checkpoint to resume from: --resume auto takes the run directory's, if there is one. A new
    run (no --resume), or --resume of another file, into a run directory that holds one is refused: its
    first save would replace it."""
    if resume is None:
        if (existing := checkpoint_path(run_dir)).exists():
            raise ResumeError(f"--run-dir {run_dir} holds a run's checkpoint ({existing.name}), which a new "
                              "run would overwrite: add --resume auto to continue that run, or give another --run-dir "
                              "(or delete that one) to start a new one")
        return None
    if resume == "auto":
        path = checkpoint_path(run_dir)
        return path if path.exists() else None
    path = Path(resume)
    if path.is_dir():  # a run directory: "no such checkpoint file" of a folder that is there said nothing of it
        raise ResumeError(f"--resume {resume} is a folder, not a checkpoint file: give one of its checkpoints "
                          f"(--resume {checkpoint_path(path)}), or continue the run there with --run-dir "
                          f"{resume} --resume auto")
    if not path.is_file():
        raise ResumeError(f"--resume {resume}: no such checkpoint file")
    existing = checkpoint_path(run_dir)
    if existing.exists() and not existing.samefile(path):
        raise ResumeError(f"--run-dir {run_dir} holds a run's checkpoint ({existing.name}), which continuing --resume "
                          f"{resume} there would overwrite: give that run an empty --run-dir, or continue the one "
                          f"there with --resume auto (to go back to {path.name} in this run, move {existing.name} "
                          "aside first)")
    return path


def damaged_member(path: Path) -> str | None:
    """The first member of the checkpoint's zip whose bytes fail the CRC-32 torch.save wrote with them (a bit
    flipped, a block zeroed, on the way to the disk or on it), which torch.load does not check: it loads the
    damaged weights as they are, and the run resumes silently on them. None where every member is whole, or where
    the file is no zip (torch.load names that). A member whose stored CRC-32 is 0 was written without one (torch's
    `serialization.config.save.compute_crc32` off): nothing to check it against, where testzip() called it damaged."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.CRC == 0 and info.file_size:
                    continue
                try:
                    with archive.open(info) as member:  # zipfile checks the CRC-32 as the member's end is read
                        while member.read(1 << 24):
                            pass
                except zipfile.BadZipFile:
                    return info.filename
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None
    return None


def load_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at `path`; ResumeError, in one line, for a file that cannot be read or is not one (cut
    short, emptied, another program's, bytes changed since it was written). weights_only: a checkpoint on shared
    storage must not be able to run code when loaded."""
    if (member := damaged_member(path)) is not None:
        raise ResumeError(f"{path} is damaged ({member} fails its checksum: its bytes changed after it was written): "
                          "put back a copy of it, or start the run again in another --run-dir (or delete this file)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exn:  # torch's for bytes that are no checkpoint: RuntimeError, EOFError, UnpicklingError,
        # an OSError of its zip reader for a file cut short (EINVAL), or the disk's (EIO)
        raise ResumeError(f"{path} is damaged or not a checkpoint ({type(exn).__name__}: {reason(exn)}): put back a "
                          "copy of it, or start the run again in another --run-dir (or delete this file)") from None
    if not isinstance(state, dict):
        raise ResumeError(f"{path} is not a checkpoint of this trainer (it holds a {type(state).__name__}): start a "
                          "new run in another --run-dir (or delete this file)")
    return Checkpoint.from_state(state, path)
