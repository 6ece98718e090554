"""The command line of `python -m train`, and its one typed configuration (TrainConfig): built from it,
passed explicitly, saved in checkpoints. The library's settings and their checks are not here: the
configuration holds the library's Augment (train/augment/choices.py), whose fields are the augmentation's
flags, built as they are; its settings are named flat (`SETTINGS`, `setting`, `to_dict`), as the command
line and checkpoints name them; the library's refusals are said with the flags (`in_flags`). Of the run,
only cli, loop and settings use more of it than TrainConfig; the library never imports it."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from shards.help import HelpFormatter
from shards.paths import default_dest, user_path
from train.augment import POLICIES, POLICY_INTERPOLATIONS
from train.augment.choices import AUGMENT_FIELDS, Augment
from train.device_types import DEVICE_TYPES
from train.errors import ConfigError
from train.run.flags import MAX_DIST_TIMEOUT_S, flag_of, in_flags, show

TRACKERS = ("none", "tensorboard", "wandb")  # --tracker (train/run/trackers.py)
LR_SCHEDULES = ("cosine", "linear")  # after the warm-up: cosine to 0, or linear to 0 (FFCV's)


@dataclass(frozen=True)
class TrainConfig:
    data: str
    run_dir: str
    arch: str = "resnet50"
    epochs: int = 90
    batch_size: int = 256  # per rank
    workers: int | None = None  # decoding threads per rank; None: its share of the CPUs, less one
    device: str | None = None  # cuda when available, else cpu
    image_size: int = 224
    decode: str = "cpu"  # "gpu": the threads only draw crops; the device decodes (nvJPEG) and resizes
    seed: int = 0
    resume: str | None = None  # "auto", a checkpoint path, or None
    lr: float = 0.1  # per 256 images of global batch: the peak rate is lr * global_batch / 256
    momentum: float = 0.9
    weight_decay: float = 1e-4  # not applied to norm layers and biases
    label_smoothing: float = 0.1
    warmup_epochs: float = 5.0
    amp: str = "auto"  # bf16 on GPU (fp16 on NVIDIA's before Ampere), off on CPU; or "bf16", "fp16", "off"
    channels_last: bool = True
    compile: bool = False
    shuffle_buffer: int = 1000  # the read plan's shuffle window, in samples: nothing is held (shards are mapped)
    log_every: int = 50  # steps between progress lines in logs
    signal: str = "USR1"  # preemption signal (SIGTERM is handled too)
    requeue: bool = False  # after a preemption checkpoint, `scontrol requeue` the SLURM job
    dist_timeout: float = 120.0  # seconds for the rendezvous and for any collective to complete
    max_steps: int = 0  # stop each epoch after this many steps (0: all); for smoke tests only
    max_bad_samples: int = 100  # per epoch and split, over all ranks: more stops the run
    tracker: str = "none"  # or "tensorboard", "wandb": rank 0 logs there too (metrics.jsonl either way)
    wandb_project: str = "imagenet-slurm"
    dataset_id: str = ""  # filled from the manifest: which dataset the run trains on
    # The recipe (train/run/recipes.py) and what it sets: schedule, augmentation, sizes, EMA
    recipe: str = "classic"
    lr_schedule: str = "cosine"
    warmup_start_factor: float = 0.0  # the warm-up's ramp starts at this fraction of the peak rate
    warmup_at: str = "end"  # each warm-up step (or epoch) runs at the ramp's value at its "start" or its "end"
    lr_update: str = "step"  # the rate changes every "step", or once an "epoch" (torchvision's reference)
    no_decay: str = "norm-and-bias"  # which parameters weight decay spares: "norm-and-bias", "norm", "bn-names"
    nesterov: bool = True
    # The augmentation: the library's Augment (train/augment/choices.py), as it is; its fields are the flags of the
    # same names, and settings of their own names here (`SETTINGS`): the policy, its options, erasing, MixUp, CutMix
    augment: Augment = field(default_factory=Augment)
    repeats: int = 1  # repeated augmentation: readings of each sample per epoch
    ramp: tuple[int, int, int, int] | None = None  # progressive resizing: start px, end px, start epoch, end epoch
    val_resize: int | None = None  # validation's Resize (None: val crop x 256/224, or as the fraction makes it)
    # validation's output side, or (height, width) (timm's input_size (3, H, W)); None: the training size, a ramp's last
    val_crop: int | tuple[int, int] | None = None
    val_crop_fraction: float | None = None  # timm's crop_pct: Resize(floor(val crop / it)); "ffcv": FFCV's ratio
    val_crop_mode: str = "center"  # "center" (torchvision's, timm's), "squash", "border" (timm's), "ffcv" (FFCV's)
    val_interpolation: str = "bilinear"  # validation's resize filter: "bilinear", "bicubic", "area"
    ema: bool = False  # evaluate and keep an exponential moving average of the weights too
    ema_steps: int = 32  # steps between EMA updates
    ema_decay: float = 0.99998  # per step of 1 image x 1 epoch, adjusted as torchvision's reference does

    def to_dict(self) -> dict:
        """Every setting by its name, flat (`SETTINGS`: the augmentation's where Augment lies): what
        checkpoints and config.json keep, as they always have."""
        return {name: self.setting(name) for name in SETTINGS}

    @classmethod
    def from_dict(cls, values: Mapping) -> "TrainConfig":
        """Settings a checkpoint or config.json kept, of any version: names it does not know are left out,
        missing ones take their defaults."""
        return cls.from_settings({name: value for name, value in values.items() if name in SETTINGS})

    @classmethod
    def from_settings(cls, values: Mapping) -> "TrainConfig":
        """The configuration of these settings by name (`SETTINGS`): the augmentation's build its Augment,
        whose checks raise a ConfigError naming the setting (which the command line says as its flag)."""
        values = dict(values)
        augment = Augment(**{name: values.pop(name) for name in AUGMENT_FIELDS if name in values})
        return cls(**values, augment=augment)

    def setting(self, name: str):
        """A setting's value by its name (an augmentation's is its Augment's field)."""
        return getattr(self.augment, name) if name in AUGMENT_FIELDS else getattr(self, name)

    def with_settings(self, **values) -> "TrainConfig":
        """This configuration with settings changed by name (an augmentation's in a new Augment, checked)."""
        augmented = {name: values.pop(name) for name in AUGMENT_FIELDS if name in values}
        return replace(self, **values, **({"augment": replace(self.augment, **augmented)} if augmented else {}))

    def image_size_or_ramp(self):
        """The library's image_size of the run's settings: a ResolutionRamp, or --image-size."""
        from train.transforms import ResolutionRamp

        return ResolutionRamp(*self.ramp) if self.ramp else self.image_size

    def peak_lr(self, global_batch: int) -> float:
        """The peak learning rate of a global batch of `global_batch` images (--lr is per 256 images). One
        expression for a run's start, its resumes and its start-up line: the same product in another order
        differs in its last bit (0.1 * 96 * 3 is not 0.1 * 288), and a resume then steps at other rates than
        the run it continues."""
        return self.lr * global_batch / 256


# Every setting's name, flat, in the order of TrainConfig's fields: Augment's fields where it lies (the names of the
# flags, the checkpoints' and config.json's keys)
SETTINGS = tuple(name for f in fields(TrainConfig) for name in (AUGMENT_FIELDS if f.name == "augment" else (f.name,)))


class OneLineParser(argparse.ArgumentParser):
    """argparse whose refusals are one line, not the usage block of every option above them: its own
    (an unknown flag, a bad choice) point to --help; `refuse` says a message that names what to type."""

    def error(self, message: str):
        self.refuse(f"{message} (`{self.prog} --help` lists every option)")

    def refuse(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> OneLineParser:
    d = TrainConfig("", "")
    p = OneLineParser(
        prog="python -m train", formatter_class=HelpFormatter,
        description="Streaming DDP training on ImageNet shards prepared by `python -m prepare`. Under srun, "
                    "one task per GPU; also under torchrun, or as one plain process.")
    dest = default_dest()
    p.add_argument("--data", type=user_path, default=str(dest) if dest else None,
                   help="the prepared dataset on node-local disk (default: $SLURM_TMPDIR/imagenet)")
    p.add_argument("--run-dir", type=user_path, default="runs/default",
                   help="checkpoints and metrics.jsonl (shared storage)")
    p.add_argument("--arch", default=d.arch,
                   help="any torchvision classification model name, or package.module:callable (found on PYTHONPATH or "
                        "in the current directory), called with num_classes=... and returning a torch.nn.Module")
    p.add_argument("--epochs", type=int, default=d.epochs, help="epochs of the run (the schedule's length)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per rank")
    p.add_argument("--workers", type=int, default=None,
                   help="decoding threads per rank (default: the rank's share of the task's CPUs, less one for the "
                        "training thread); batches are the same for any count")
    p.add_argument("--device", choices=DEVICE_TYPES, default=None,
                   help="cuda (NVIDIA's GPUs, and AMD's under ROCm's torch), xpu (Intel's) or cpu; default: the GPU "
                        "this torch build has, where one is visible")
    p.add_argument("--image-size", type=int, default=d.image_size,
                   help="the training crops' side (a --ramp sets it instead); validation follows it where neither "
                        "--val-* nor the recipe sets it: Resize(size x 256/224) + CenterCrop(size)")
    p.add_argument("--decode", choices=["cpu", "gpu"], default=d.decode,
                   help="gpu: batched nvJPEG decode and crop/resize/flip on the device, the threads only draw "
                        "crops (with --device cpu it runs the same path on the CPU, for testing)")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="the initial weights, the read plan, every crop, flip and policy draw")
    p.add_argument("--resume", default=None,
                   help="'auto' (the checkpoint in --run-dir, if any) or a path: the run continues with the "
                        "checkpoint's settings; a flag given that differs from them is refused (see --force-change) "
                        "(default: none, a new run)")
    p.add_argument("--force-change", action="append", default=[], metavar="FLAG",
                   help="on resume, let FLAG (e.g. --lr) differ from the checkpoint's setting: the change is logged "
                        "and recorded in RUN_DIR/config.json; give it once per flag, with the flag's new value typed "
                        "too (default: none)")
    p.add_argument("--lr", type=float, default=d.lr, help="learning rate per 256 images of global batch")
    p.add_argument("--momentum", type=float, default=d.momentum, help="SGD's momentum")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help="SGD's weight decay (which parameters it spares: the recipe's rule)")
    p.add_argument("--label-smoothing", type=float, default=d.label_smoothing,
                   help="of the cross-entropy loss (0: off)")
    p.add_argument("--warmup-epochs", type=float, default=d.warmup_epochs,
                   help="epochs of the learning rate's linear warm-up (0: none); at most --epochs. One not typed "
                        "(the default's, a recipe's) that leaves no decay in a shorter run is shortened to the same "
                        "share of it, and the log says so")
    p.add_argument("--amp", choices=["auto", "bf16", "fp16", "off"], default=d.amp,
                   help="mixed precision: auto is bf16 on a GPU (fp16 on NVIDIA's before Ampere: V100, T4) and off "
                        "(fp32) on the CPU; fp16 uses a GradScaler")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                   help="keep batches and the model in NCHW memory (default: channels_last)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--shuffle-buffer", type=int, default=d.shuffle_buffer,
                   help="the window of the read plan's shuffle: within a rank's run of samples, sample k is among "
                        "the first k + N (reads stay near-sequential; no bytes are held, shards are memory-mapped)")
    p.add_argument("--log-every", type=int, default=d.log_every, help="steps between progress lines in logs")
    p.add_argument("--signal", default=d.signal, help="preemption signal name (as sbatch --signal sends it)")
    p.add_argument("--requeue", action="store_true", help="requeue the SLURM job after a preemption checkpoint")
    p.add_argument("--dist-timeout", type=float, default=d.dist_timeout,
                   help="seconds to wait for peers at start-up and in any collective")
    p.add_argument("--max-steps", type=int, default=0,
                   help="cap this process's steps per epoch, for a smoke test (0: no cap); not a setting of the run: "
                        "a resume without it trains whole epochs")
    p.add_argument("--tracker", choices=TRACKERS, default=d.tracker,
                   help="also log each epoch, and loss, lr and images/s every --log-every steps, to TensorBoard "
                        "(RUN_DIR/tensorboard) or Weights & Biases (RUN_DIR/wandb; WANDB_MODE=offline without internet), "
                        "from rank 0")
    p.add_argument("--wandb-project", default=d.wandb_project, help="the Weights & Biases project (--tracker wandb)")
    add_recipe_arguments(p, d)
    p.add_argument("--max-bad-samples", type=int, default=d.max_bad_samples,
                   help="bad samples (damaged, over the pixel limit, or labelled with no class) are left out, named and "
                        "counted; more than this many in one "
                        "epoch's training or validation (all ranks) stops the run (0: stop at the first)")
    return p


def add_recipe_arguments(p: argparse.ArgumentParser, d: "TrainConfig") -> None:
    from train.decoder import INTERPOLATIONS
    from train.run.recipes import LR_UPDATES, NO_DECAY_RULES, RECIPES, WARMUP_AT
    from train.transforms import VAL_CROP_MODES

    def fraction(text: str) -> float:  # a number from 0 to 1
        value = float(text)
        if not 0 <= value <= 1:
            raise argparse.ArgumentTypeError(f"{text} is not from 0 to 1")
        return value

    def positive(text: str) -> float:  # a number above 0
        value = float(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value

    def share(text: str) -> float:  # a number above 0, at most 1
        value = float(text)
        if not 0 < value <= 1:
            raise argparse.ArgumentTypeError(f"{text} is not above 0 and at most 1")
        return value

    g = p.add_argument_group("recipe", "what --recipe sets (docs/training.md: Recipes); a flag given here overrides it")
    g.add_argument("--recipe", choices=sorted(RECIPES), default=d.recipe,
                   help="start from a published recipe's settings: classic (RandomResizedCrop + flip), "
                        "torchvision-v2 (ResNet-50 IMAGENET1K_V2's), ffcv-rn50 (FFCV's rn50_88_epochs)")
    g.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=d.lr_schedule,
                   help="after the linear warm-up, cosine or linear decay to 0")
    g.add_argument("--warmup-start-factor", type=fraction, default=d.warmup_start_factor,
                   help="the warm-up's linear ramp starts at this fraction of the peak rate (torch's LinearLR "
                        "start_factor, torchvision's --lr-warmup-decay) and reaches the peak after --warmup-epochs")
    g.add_argument("--warmup-at", choices=WARMUP_AT, default=d.warmup_at,
                   help="each warm-up step (or epoch) runs at the ramp's value at its start (torch's LinearLR, "
                        "FFCV: the first at the start factor) or at its end (the classic: the last one at the peak)")
    g.add_argument("--lr-update", choices=LR_UPDATES, default=d.lr_update,
                   help="the learning rate changes every step, or once an epoch (as torchvision's reference steps "
                        "its schedulers); warm-up and decay alike")
    g.add_argument("--no-decay", choices=NO_DECAY_RULES, default=d.no_decay,
                   help="which parameters weight decay spares: norm-and-bias (every 1-d parameter: norm layers and "
                        "biases), norm (norm layers' parameters: torchvision's --norm-weight-decay 0.0), bn-names "
                        "(parameters whose names contain 'bn': FFCV's)")
    g.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=d.nesterov,
                   help="Nesterov momentum (torchvision's and FFCV's recipes use plain momentum)")
    g.add_argument("--policy", type=policy_choice, default=d.augment.policy, metavar="{none," + ",".join(POLICIES) + "}",
                   help="torchvision's per-sample augmentation policy, on each training crop (none: no policy)")
    g.add_argument("--num-ops", type=int, default=d.augment.num_ops,
                   help="randaugment: ops per sample (default: RandAugment's own, 2)")
    g.add_argument("--magnitude", type=int, default=d.augment.magnitude,
                   help="randaugment: the magnitude bin (default: RandAugment's own, 9)")
    g.add_argument("--num-magnitude-bins", type=int, default=d.augment.num_magnitude_bins,
                   help="randaugment, trivialaugment: the magnitude bins (default: their own, 31)")
    g.add_argument("--policy-interpolation", choices=POLICY_INTERPOLATIONS, default=d.augment.policy_interpolation,
                   help="of the policy's geometric ops (torchvision's default is nearest; its reference "
                        "recipes pass bilinear)")
    g.add_argument("--erasing", type=float, default=d.augment.erasing, help="RandomErasing's probability")
    g.add_argument("--mixup", type=float, default=d.augment.mixup, help="MixUp's alpha (0: off)")
    g.add_argument("--cutmix", type=float, default=d.augment.cutmix, help="CutMix's alpha (0: off)")
    g.add_argument("--repeats", type=int, default=d.repeats,
                   help="repeated augmentation: each sample read this many times an epoch (torchvision's --ra-reps)")
    g.add_argument("--ramp", type=int, nargs=4, metavar=("START_PX", "END_PX", "START_EPOCH", "END_EPOCH"),
                   default=d.ramp, help="progressive resizing, as FFCV's: the training size from START_PX to END_PX "
                                        "between the epochs, in steps of 32, instead of --image-size (default: "
                                        "none, --image-size throughout)")
    g.add_argument("--no-ramp", dest="ramp", action="store_const", const=None, help="no progressive resizing")
    g.add_argument("--val-resize", type=int, default=d.val_resize,
                   help="validation's Resize, torchvision's (default: --val-crop x 256/224, or as --val-crop-fraction "
                        "makes it); not with --val-crop-fraction nor --val-crop-mode ffcv")
    g.add_argument("--val-crop", type=int, nargs="+", metavar="PX", default=d.val_crop,
                   help="validation's output side, its CenterCrop, or its HEIGHT WIDTH (timm's input_size 3 H W; "
                        "resized by --val-crop-fraction) (default: the training size, a ramp's end)")
    g.add_argument("--val-crop-fraction", type=positive, default=d.val_crop_fraction,
                   help="the crop's share of the resized image, timm's crop_pct: Resize(floor(--val-crop / it)) (e.g. "
                        "0.875, 0.95; above 1, volo_d5_512's 1.15, pads); with --val-crop-mode ffcv the share of the "
                        "short side kept, at most 1 (default: none: Resize from --val-resize or 256/224; with "
                        "--val-crop-mode ffcv, 224/256)")
    g.add_argument("--no-val-crop-fraction", dest="val_crop_fraction", action="store_const", const=None,
                   help="no --val-crop-fraction (a recipe's): validation's Resize from --val-resize or 256/224")
    g.add_argument("--val-crop-mode", choices=VAL_CROP_MODES, default=d.val_crop_mode,
                   help="center: Resize of the short side, then CenterCrop (torchvision's; timm's crop_mode center); "
                        "squash: Resize to a square, then CenterCrop (timm's); border: the long side resized, the "
                        "ratio kept, padded to a square in the mean's colour (timm's); ffcv: the centre square of "
                        "--val-crop-fraction x the short side, resized to --val-crop (FFCV's CenterCropRGBImageDecoder)")
    g.add_argument("--val-interpolation", choices=INTERPOLATIONS, default=d.val_interpolation,
                   help="validation's resize filter: bilinear (PIL's, antialiased: torchvision's default), bicubic "
                        "(PIL's: timm's default, and some torchvision weights'), area (OpenCV's INTER_AREA: FFCV's)")
    g.add_argument("--ema", action=argparse.BooleanOptionalAction, default=d.ema,
                   help="keep an EMA of the weights (torch's AveragedModel), evaluated and checkpointed too")
    g.add_argument("--ema-steps", type=int, default=d.ema_steps, help="steps between EMA updates")
    g.add_argument("--ema-decay", type=float, default=d.ema_decay,
                   help="torchvision's --model-ema-decay (adjusted by the global batch, --ema-steps and --epochs)")


@dataclass(frozen=True)
class CommandLine:
    """What `python -m train` was asked: the settings, which of them were typed (a typed flag beats the
    recipe, and on resume must agree with the checkpoint), and the flags allowed to differ on resume.
    `config`: a new run's settings, checked; a resume's run control (its data, run directory, device, ...),
    whose other settings are the checkpoint's, compared with `values` (its augmentation the default
    Augment: what the command line types of it may be checked only against the checkpoint's)."""
    config: TrainConfig
    given: frozenset[str]  # settings (SETTINGS) whose flag was typed
    force_change: frozenset[str] = frozenset()  # settings --force-change names
    notes: tuple[str, ...] = ()  # what replaced a recipe's or a default's value, for the start-up log
    origin: Mapping[str, str] = field(default_factory=dict)  # field -> "typed", "--recipe NAME's", "the default"
    source_epochs: int = TrainConfig("", "").epochs  # the length the recipe (or the defaults) set its warm-up for
    # typed fields whose value is the one they would have untyped (`--recipe ffcv-rn50 --image-size 192`): typed,
    # but they ask for nothing the run would ignore
    typed_as_default: frozenset[str] = frozenset()
    values: Mapping[str, object] = field(default_factory=dict)  # every setting by name, as the command line gives it

    def meant(self) -> frozenset[str]:
        """The typed fields that ask for something other than their default."""
        return self.given - self.typed_as_default


# Flags renamed since they were published -> their names now (the library's Augment fields' names)
RENAMED_FLAGS = {"--random-erase": "--erasing", "--mixup-alpha": "--mixup", "--cutmix-alpha": "--cutmix",
                 "--policy-ops": "--num-ops", "--policy-magnitude": "--magnitude"}


def parse_command_line(argv: list[str] | None = None) -> CommandLine:
    """The command line: --recipe's values first, then every flag given (shown by --help too: with
    --recipe NAME, --help shows that recipe's values). A new run's values nobody typed are fitted to it
    (`fit_untyped`) before the settings are checked."""
    from train.run.recipes import recipe

    argv = flags_as_values(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    renamed = renamed_flag(argv)
    if renamed:
        parser.refuse(renamed)
    early = recipe_parser().parse_known_args(argv)[0]
    chosen, values = early.recipe, recipe(early.recipe, early.epochs)  # a recipe's ramp follows --epochs
    parser.set_defaults(**values)
    args = parser.parse_args(argv)
    args.val_crop = side_or_sides(args.val_crop, parser)  # nargs: a list, as one side or (height, width)
    given = given_fields(argv)
    notes = replace_recipe_values(args, given, values, chosen)
    settings = TrainConfig("", "").to_dict() | settings_from_args(args, parser)  # every setting, by name
    config = config_of(settings, args.resume, parser)
    forced = forced_fields(args.force_change, parser)
    untyped = forced - given
    if untyped:
        flag = flag_of(sorted(untyped)[0])
        parser.refuse(f"--force-change {flag} names a flag this command line does not type: type the value to change "
                     f"it to as well ({flag} VALUE --force-change {flag})")
    defaults = TrainConfig("", "").to_dict() | values
    command = CommandLine(
        config, frozenset(given), frozenset(forced), tuple(notes),
        origins(given, chosen, {name: v for name, v in values.items() if settings[name] == v}),
        defaults["epochs"],
        frozenset(name for name in given if name in defaults and settings[name] == defaults[name]), settings)
    if config.resume is None:  # a resume's settings are known once the checkpoint's are read: loop.main checks them
        config, fitted = fit_untyped(config, command.given, command.origin, command.source_epochs)
        problem = settings_problem(config, command.meant(), command.origin)
        if problem:
            parser.refuse(problem)
        command = replace(command, config=config, notes=command.notes + tuple(fitted))
    return command


def renamed_flag(argv: list[str]) -> str | None:
    """The refusal of a flag typed by its old name (alone, or as --force-change's), naming the new one;
    None where none is."""
    for i, arg in enumerate(argv):
        forced = arg.startswith("--force-change=")
        old = arg.removeprefix("--force-change=").split("=", 1)[0]
        if old in RENAMED_FLAGS:
            new = RENAMED_FLAGS[old]
            value = arg.removeprefix("--force-change=")[len(old):]
            if not value and not forced and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = " " + argv[i + 1]
            typed = f"--force-change {new}" if forced else f"{new}{value}"
            return f"{old} is now {new} (the same setting, named as the library's Augment field): type {typed}"
    return None


def origins(given: set[str] | frozenset[str], recipe_name: str, recipe_values: dict) -> dict[str, str]:
    """Where each setting's value came from, as the messages say it. Pure."""
    return {name: "typed" if name in given else f"--recipe {recipe_name}'s" if name in recipe_values
            else "the default" for name in SETTINGS}


def flags_as_values(argv: list[str]) -> list[str]:
    """`--force-change --lr` as `--force-change=--lr`: argparse takes a value that starts with a dash
    for another option."""
    out, args = [], iter(argv)
    for arg in args:
        out.append(f"{arg}={next(args, '')}" if arg == "--force-change" else arg)
    return out


def recipe_parser() -> argparse.ArgumentParser:
    """--recipe (and --epochs, which some recipes scale with) alone, read before the parser is built:
    the recipe's values become the parser's defaults."""
    from train.run.recipes import RECIPES

    p = OneLineParser(prog="python -m train", add_help=False)
    p.add_argument("--recipe", choices=sorted(RECIPES), default=TrainConfig("", "").recipe)
    p.add_argument("--epochs", type=whole_or_none, default=None)  # a bad one: the full parser says so
    return p


def whole_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def given_fields(argv: list[str] | None) -> set[str]:
    """The TrainConfig fields whose flags the command line typed: the parser again, every default
    suppressed, so that only what was given lands in the namespace."""
    parser = build_parser()
    for action in parser._actions:  # argparse keeps its actions here; SUPPRESS leaves untyped ones out
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"force_change"}


def policy_choice(text: str) -> str | None:
    """--policy's value: a policy's name, or none, which is no policy (None, as Augment says it)."""
    if text == "none":
        return None
    if text not in POLICIES:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from none, {', '.join(POLICIES)})")
    return text


def forced_fields(flags: list[str], parser: OneLineParser) -> set[str]:
    """--force-change's FLAGs as TrainConfig fields; an unknown flag is refused."""
    known = {flag_of(name): name for name in SETTINGS}
    known |= {option: action.dest for action in parser._actions for option in action.option_strings}
    unknown = [flag for flag in flags if ("--" + flag.lstrip("-")) not in known]
    if unknown:
        parser.refuse(f"--force-change {unknown[0]}: no such flag (give a flag of python -m train, e.g. --lr)")
    return {known["--" + flag.lstrip("-")] for flag in flags}


# a typed flag -> the recipe's values it makes moot: the sizes set for the recipe's own training size; the
# validation values that would set the same thing twice (the resize: given, or from the crop fraction, or none
# in FFCV's mode)
MOOTS = {"image_size": ("ramp", "val_resize", "val_crop"), "val_crop": ("val_resize",),
         "val_resize": ("val_crop_fraction", "val_crop_mode"), "val_crop_fraction": ("val_resize",),
         "val_crop_mode": ("val_resize",)}


def replace_recipe_values(args: argparse.Namespace, given: set[str], values: dict, name: str) -> list[str]:
    """Typed flags beat the recipe, and so do the recipe's values a typed flag makes moot (MOOTS), unless
    typed too: they take their defaults. A typed value equal to the recipe's (--image-size 176 with
    torchvision-v2) moots nothing.
    Returns the log lines that say what was replaced. Pure but for `args`."""
    defaults = TrainConfig("", "")
    typed = [item for item in MOOTS if item in given and getattr(args, item) != values.get(item, defaults.setting(item))]
    moot = [item for cause in typed for item in MOOTS[cause]]
    replaced = [item for item in dict.fromkeys(moot) if item in values and item not in given
                and values[item] != defaults.setting(item)]
    for item in replaced:
        setattr(args, item, defaults.setting(item))
    if not replaced:
        return []
    causes = ", ".join(f"{flag_of(item)} {show(getattr(args, item))}" for item in typed)
    said = ", ".join(f"{flag_of(item)} {show(values[item])}" for item in replaced)
    return [f"{causes} replaces --recipe {name}'s {said} (give them too to keep them)"]


def settings_problem(config: TrainConfig, meant: frozenset[str] | set[str],
                     origin: Mapping[str, str] | None = None) -> str | None:
    """What cannot work, or would be ignored, in the settings that run (a resumed run's once resolved),
    in one line naming the flags, where each value came from and what to type; None where nothing.
    `meant`: the fields typed with a value other than their default; `origin`: field -> where its value
    came from ("typed", "the default", "--recipe NAME's", "the checkpoint's")."""
    said = Origins(origin or {})
    return schedule_problem(config, said) or ignored_flag(config, meant, said) or library_problem(config)


@dataclass(frozen=True)
class Origins:
    """Where the settings' values came from, as a refusal says them and says what to type instead."""
    origin: Mapping[str, str]

    def value(self, config: TrainConfig, name: str) -> str:
        """`--flag value (where it came from)`."""
        where, value, flag = self.origin.get(name), config.setting(name), flag_of(name)
        typed = (flag if value else "--no-" + flag[2:]) if isinstance(value, bool) else f"{flag} {show(value)}"
        return typed + (f" ({where})" if where else "")

    def forcing(self, name: str) -> str:
        """What else to type to change `name`: on a resume, the checkpoint's value needs --force-change."""
        return f" with --force-change {flag_of(name)}" if self.origin.get(name) == "the checkpoint's" else ""


def warmup_ramps_by_step(warmup_epochs: float, lr_update: str) -> bool:
    """A warm-up shorter than an epoch, where the rate changes once an epoch: held for its epoch, the ramp's
    first value would last all of epoch 0 and the peak would never run (`--recipe torchvision-v2 --epochs 3`
    shortens the warm-up to 0.025 epochs). Such a warm-up ramps by the step instead (train/run/loop.py's
    lr_factor). Pure."""
    return lr_update == "epoch" and 0 < warmup_epochs < 1


def whole_warmup_epochs(warmup_epochs: float) -> int:
    """The warm-up where the rate changes once an epoch, an epoch or more: whole epochs (a typed 1.6: 2), as the
    rate that changes every step takes whole steps. Pure."""
    return round(warmup_epochs)


def warmup_steps(warmup_epochs: float, steps: int, lr_update: str) -> int:
    """The steps the warm-up's ramp takes (`steps` an epoch): whole steps, or whole epochs where the rate changes
    once an epoch (an epoch or more). The EMA restarts over them (train/run/ema.py). Pure."""
    if lr_update == "epoch" and not warmup_ramps_by_step(warmup_epochs, lr_update):
        return whole_warmup_epochs(warmup_epochs) * steps
    return round(warmup_epochs * steps)


def never_reaches_the_peak(config: TrainConfig) -> bool:
    """Whether the warm-up, as the schedule runs it (whole epochs where the rate changes once an epoch), leaves
    the run no step at the peak: longer than the run, or as long with each step at the ramp's value at its start
    (torch's LinearLR, FFCV). Pure."""
    warmup = config.warmup_epochs
    if config.lr_update == "epoch" and not warmup_ramps_by_step(warmup, config.lr_update):
        warmup = whole_warmup_epochs(warmup)
    return warmup > config.epochs or (config.warmup_at == "start" and 0 < warmup and warmup >= config.epochs)


def schedule_problem(config: TrainConfig, said: Origins) -> str | None:
    if not 0 <= config.warmup_epochs or never_reaches_the_peak(config):
        at_start = config.warmup_at == "start"
        whole = config.lr_update == "epoch" and config.epochs > 1  # (under 1 epoch, a warm-up ramps by the step)
        most = (f"{config.epochs - 1} or less" if at_start and whole else
                f"under {config.epochs}" if at_start else f"{config.epochs} or less")
        why = " (each of its steps runs at the ramp's value at its start: the peak comes after it)" if at_start else ""
        as_long = "longer than" if config.warmup_epochs > config.epochs else "as long as"
        return (f"{said.value(config, 'warmup_epochs')} is {as_long} the run, "
                f"{said.value(config, 'epochs')}: it would never reach the peak rate{why}. Give --warmup-epochs "
                f"{most} (0: none){said.forcing('warmup_epochs')}")
    # END_EPOCH is the first epoch at END_PX, and a run's epochs count from 0: one of --epochs N ends at N - 1. A ramp
    # ending at N (END_EPOCH typed as the run's last, counting from 1) trained its end size only where rounding
    # reached it before (128 to 256 px over 2 epochs trained 128 and 192), and validation ran at it
    if config.ramp is not None and config.ramp[3] >= config.epochs:
        return (f"{said.value(config, 'ramp')} ends at epoch {config.ramp[3]}, after the run's "
                f"{said.value(config, 'epochs')} (epochs 0 to {config.epochs - 1}): its end size would never be "
                f"reached. Give a ramp that ends within the run (--ramp START_PX END_PX START_EPOCH END_EPOCH, "
                f"END_EPOCH at most {config.epochs - 1}), or --no-ramp{said.forcing('ramp')}")
    return None


@dataclass(frozen=True)
class NeededFor:
    """What a flag is used with: what must be on, said as the flags that turn it on."""
    needs: str  # "a --policy"
    in_use: Callable[[TrainConfig], bool]
    has: str  # the field that says what the run has instead
    turn_on: str  # what to type to have it


# a flag -> what must be on for the run to use it (a policy's own options: Augment refuses them with another)
USED_ONLY_WITH = {
    "policy_interpolation": NeededFor("a --policy", lambda c: c.augment.policy is not None, "policy",
                                      "--policy trivialaugment, randaugment or autoaugment"),
    "ema_steps": NeededFor("--ema", lambda c: c.ema, "ema", "--ema"),
    "ema_decay": NeededFor("--ema", lambda c: c.ema, "ema", "--ema"),
    "image_size": NeededFor("no --ramp (a ramp sets the training size)", lambda c: c.ramp is None, "ramp",
                            "--no-ramp"),
}


def ignored_flag(config: TrainConfig, meant: frozenset[str] | set[str], said: Origins) -> str | None:
    """A typed flag that the run would ignore: it was meant to do something. (One typed with the value
    it has anyway, the recipe's or the default, asks for nothing: `--recipe ffcv-rn50 --image-size 192`.)"""
    for name, needed in USED_ONLY_WITH.items():
        if name in meant and not needed.in_use(config):
            has, turn_on = said.value(config, needed.has), needed.turn_on + said.forcing(needed.has)
            return (f"{flag_of(name)} {show(config.setting(name))} is used only with {needed.needs}, and this run has "
                    f"{has}: leave {flag_of(name)} out, or add {turn_on}")
    return None


def fit_untyped(config: TrainConfig, given: frozenset[str] | set[str], origin: Mapping[str, str],
                source_epochs: int) -> tuple[TrainConfig, list[str]]:
    """A new run's settings with the values nobody typed (the default's, a recipe's) fitted to the run,
    and a log line for each. A warm-up that would leave the run no decay (as long as the run or longer:
    the default 5 epochs in `--epochs 1`) is shortened to the share of the run it has in the length its
    source set it for (5 of 90 epochs: 0.0556 of a 1-epoch run). A typed value is the user's: checked,
    never changed. Pure."""
    if "warmup_epochs" in given or config.warmup_epochs < config.epochs or source_epochs <= config.epochs:
        return config, []
    fitted = float(f"{config.warmup_epochs * config.epochs / source_epochs:.3g}")
    where = origin.get("warmup_epochs", "the default")
    line = (f"--warmup-epochs {config.warmup_epochs:g} ({where}, for {source_epochs} epochs) shortened to {fitted:g}, "
            f"the same share of this run of --epochs {config.epochs}: type --warmup-epochs to choose another")
    return replace(config, warmup_epochs=fitted), [line]


def library_problem(config: TrainConfig) -> str | None:
    """The library's own checks of what the run hands it (the ramp, the validation transform; the
    augmentation's are Augment's, made with the configuration), in flags (`in_flags`): the command line
    checks none of these itself."""
    from train.loader_arguments import checked_image_size, checked_validation

    try:
        checked_validation(checked_image_size(config.image_size_or_ramp()), config.val_crop, config.val_resize,
                           config.val_crop_fraction, config.val_crop_mode, config.val_interpolation)
    except ConfigError as exn:
        return in_flags(exn)
    return None


def config_of(settings: dict, resume: str | None, parser: OneLineParser) -> TrainConfig:
    """The command line's configuration (CommandLine.config): a new run's, its Augment checked here (a
    refusal said in flags); a resume's with the default Augment, its own coming from the checkpoint."""
    if resume is not None:
        return TrainConfig.from_settings({**settings, **Augment().to_dict()})
    try:
        return TrainConfig.from_settings(settings)
    except ConfigError as exn:
        parser.refuse(in_flags(exn))


def side_or_sides(values, parser: OneLineParser) -> int | tuple[int, int] | None:
    """--val-crop's one side (an int), or HEIGHT WIDTH (a pair; a square one is its side)."""
    if values is None or isinstance(values, (int, tuple)):
        return values
    if len(values) > 2:
        parser.refuse(f"--val-crop takes one side or HEIGHT WIDTH, not {len(values)} numbers")
    return values[0] if len(values) == 1 or values[0] == values[1] else tuple(values)


def sides(value: int | tuple[int, int]) -> tuple[int, ...]:
    return value if isinstance(value, tuple) else (value,)


def preemption_signal(name: str) -> signal.Signals | None:
    """The signal --signal names, as sbatch --signal takes it (USR1, SIGUSR1, or its number); None where it is
    none a process can catch (KILL and STOP cannot be; SIG_DFL is no signal). Pure."""
    try:
        chosen = signal.Signals(int(name)) if name.strip().isdigit() else signal.Signals[
            "SIG" + name.strip().upper().removeprefix("SIG")]
    except (KeyError, ValueError):
        return None
    return None if chosen in (signal.SIGKILL, signal.SIGSTOP) else chosen


def settings_from_args(args: argparse.Namespace, parser: OneLineParser) -> dict:
    """Every setting by name (SETTINGS) as the command line gives it, after the parse's own refusals."""
    if args.data is None:
        parser.refuse("--data is required outside a SLURM job (no $SLURM_TMPDIR): the folder prepare wrote")
    for name in ("epochs", "batch_size", "image_size", "shuffle_buffer", "log_every", "repeats", "ema_steps"):
        if getattr(args, name) < 1:
            parser.refuse(f"--{name.replace('_', '-')} must be at least 1")
    if args.batch_size < 2:  # the step refuses a batch of one (train/run/loop.py): said here, not as damage
        parser.refuse("--batch-size must be at least 2: batch norm cannot train on one sample a rank")
    for name in ("val_resize", "val_crop"):
        if getattr(args, name) is not None and min(sides(getattr(args, name))) < 1:
            parser.refuse(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 < args.ema_decay < 1:
        parser.refuse("--ema-decay is between 0 and 1")
    if args.max_bad_samples < 0:
        parser.refuse("--max-bad-samples must be 0 or more")
    if args.workers is not None and args.workers < 1:
        parser.refuse("--workers must be at least 1 (or left out: the rank's share of the CPUs, less one)")
    if preemption_signal(args.signal) is None:
        parser.refuse(f"--signal {args.signal}: no signal a process can catch (give a name or number, as sbatch "
                      "--signal takes it: USR1, 10)")
    if args.max_steps < 0:
        parser.refuse(f"--max-steps must be 0 (no cap) or more, not {args.max_steps}")
    if not -2 ** 63 <= args.seed < 2 ** 64:
        parser.refuse(f"--seed must be from -2**63 to 2**64 - 1 (torch's seeds), not {args.seed}")
    for name in ("lr", "momentum", "weight_decay", "warmup_epochs", "dist_timeout"):
        if not (math.isfinite(getattr(args, name)) and getattr(args, name) >= 0):
            parser.refuse(f"{flag_of(name)} must be a finite number of 0 or more, not {getattr(args, name)}")
    if args.momentum >= 1:
        parser.refuse(f"--momentum must be below 1 (SGD's velocity would never decay, and the run diverge), not "
                      f"{args.momentum}")
    if args.dist_timeout == 0:
        parser.refuse("--dist-timeout must be more than 0 s: no rendezvous or collective completes in none")
    if args.dist_timeout > MAX_DIST_TIMEOUT_S:
        parser.refuse(f"--dist-timeout must be at most {MAX_DIST_TIMEOUT_S:.0e} s (31 years), "
                      f"not {args.dist_timeout:g}: torch's gloo and timedelta overflow past it")
    if not 0 <= args.label_smoothing < 1:
        parser.refuse(f"--label-smoothing must be from 0 to below 1, not {args.label_smoothing}")
    values = {k: v for k, v in vars(args).items() if k != "force_change"}
    values["data"], values["run_dir"] = str(Path(args.data)), str(Path(args.run_dir))
    values["ramp"] = tuple(args.ramp) if args.ramp is not None else None
    return values
