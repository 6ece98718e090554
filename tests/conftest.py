"""Shared fixtures: the sample ImageNet in every layout, prepared once per session."""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

# OpenMP threads that wait for work sleep instead of spinning, in every process the suite starts (set before any
# of them loads torch's libgomp, which reads it once; pytest-xdist's workers, the warm server, SLURM jobs and
# launchers inherit it). Two workers on 2 vCPUs each run processes with torch's 2 intra-op threads: spinning,
# two ranks of the library's example under torchrun with OMP_NUM_THREADS=2 took 84 CPU-seconds and 45 s
# instead of 15 and 9 (AMD EPYC, 2026-12-06). Results do not change: only how an idle thread waits.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from prepare.builder import prepare  # noqa: E402
from prepare.config import PrepareConfig  # noqa: E402
from prepare.sample import WRITERS, SampleImages, SampleSpec, sample_images  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Small images keep the suite fast; the quirks (CMYK, grayscale, PNG named .JPEG) are all there.
SPEC = SampleSpec(classes=6, train_per_class=30, val_per_class=5, max_width=160)
SHARD_MB = 0.12  # a few shards per split from the small sample
# A download of 1,020 photos of ImageNet's sizes: prepare reads it for seconds, to be killed or stopped in the
# middle, or read in shares by several nodes.
BIG_SPEC = SampleSpec(classes=6, train_per_class=150, val_per_class=20)
# The training tests' model, small and fast on two CPU cores: a torchvision model with batch norm and 0.35M
# parameters (resnet18's steps and gloo all-reduces of 11M took twice test_train.py's time) on 32-px crops.
ARCH = "shufflenet_v2_x0_5"


# The files whose tests take longest, started first. pytest-xdist's loadgroup (pyproject's addopts) hands each
# slow test to whichever of the two workers is free, and a group of tests as one: the SLURM tests (one local
# cluster), a file's tests that share a module-scoped fixture (built once, on one worker), and a file's quick
# tests. A group goes where its first test stands in this order, so the long ones start first and the two
# workers end together.
LONGEST_FIRST = ("test_slurm.py", "test_install.py", "test_train.py", "test_shared_read.py", "test_launchers.py",
                 "test_settings.py", "test_native_fuzz.py", "test_prepare.py", "test_gpu_check.py")
SHARE_A_WORKER = {"test_slurm.py": "slurm"}  # tests that must run on one worker, one at a time
# The release tier's start: pytest-xdist gives each worker two tests at first, then one as each ends. The wheels'
# build (about 3 minutes, in the session fixture every install test waits for) starts on one worker with the first
# bare system after it; the GPU script and the full fuzz corpus (about 3 minutes together) keep the other worker busy
# meanwhile, instead of it waiting on the build. Measured (AMD EPYC, 2 vCPUs): 12:52 in the files' order, 11:13 in this.
RELEASE_FIRST = ("test_the_wheels_are_manylinux", "test_the_gpu_check_runs",
                 "test_the_readme_install_lines_as_written_run_the_demo_on_a_bare_system_as_a_user_who_is_not_root[bookworm]",
                 "test_hostile_inputs_give_a_status_never_a_crash_and_the_same_pixels_in_any_chunking[full]")


# What a whole run holds at once in the temporary folder, rounded up (measured 2026-11-28: 0.5 GB of tmp_path,
# passed tests' deleted as they end (pyproject.toml), and about 1 GB of SLURM state, prepared datasets and logs).
NEEDS_FREE_GB = 3


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to start on a nearly full disk, in one line: a run that fills it fails in a hundred places, each
    with an OSError that hides why."""
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller checked
        return
    import shutil
    import tempfile

    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free / 1e9
    if free < NEEDS_FREE_GB:
        pytest.exit(f"the test suite needs about {NEEDS_FREE_GB} GB free in {folder} and there are {free:.1f}: "
                    "free some (old pytest-of-* folders are safe to delete), or set TMPDIR to a larger disk",
                    returncode=3)


def shares_a_module_fixture(item: pytest.Item) -> bool:
    definitions = getattr(item, "_fixtureinfo", None)
    return definitions is not None and any(d.scope == "module" for defs in definitions.name2fixturedefs.values()
                                           for d in defs)


def worker_group(item: pytest.Item) -> str | None:
    """The xdist_group `item` joins, if it must share a worker: see LONGEST_FIRST."""
    name = item.path.name
    if name in SHARE_A_WORKER:
        return SHARE_A_WORKER[name]
    # a file's quick tests go together too: handed out one at a time, each of 2,000 quick tests paid a round trip
    # to the controller (-m "not slow" took 100 s that way)
    quick = item.get_closest_marker("slow") is None
    return name if quick or shares_a_module_fixture(item) else None


def join_group(item: pytest.Item) -> None:
    """What pytest-xdist's loadgroup does to a test of an xdist_group (its node id gets an @GROUP, which
    its scheduler reads), where pytest-xdist itself did not: up to 3.8 it sets item._nodeid, which pytest 9
    no longer reads (the node id is item._id, a NodeId)."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None or "@" in item.nodeid:
        return
    grouped = f"{item.nodeid}@{mark.args[0]}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(grouped)
    else:
        item._nodeid = grouped


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks that follow from others, set as each test is collected: before any pytest_collection_modifyitems
    (pytest-xdist's reads the xdist_group marks in its own, -m deselects in its own)."""
    if item.get_closest_marker("release"):
        item.add_marker(pytest.mark.slow)  # -m "not slow" leaves the release tier out too
    group = worker_group(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


def release_position(item: pytest.Item) -> int:
    """Where RELEASE_FIRST puts `item` (after it, for every other test)."""
    return next((at for at, start in enumerate(RELEASE_FIRST) if item.name.startswith(start)), len(RELEASE_FIRST))


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "loadgroup", False):  # in a pytest-xdist worker, under --dist loadgroup
        for item in items:
            join_group(item)
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    # the slow tests of the long files first, then every other slow test, then the quick ones; stable: in-file order kept
    items.sort(key=lambda item: (release_position(item), item.get_closest_marker("slow") is None,
                                 rank.get(item.path.name, len(rank))))


FULL_PASSES_EVERY = 100  # gen-1 passes a full pass waits for (Python's default: 10)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fewer full passes of the garbage collector in the test process: it holds torch, the test modules and ~2,700
    items (~450,000 objects), and each full pass walked them all, 0.2 s a pass, about a seventh of the time of the
    prepare files' quick tests (perf). Frozen, what collection made is never walked again, and what the tests make
    is still collected, in rarer full passes. A test that needs its garbage gone (a dropped loader's buffers) calls
    gc.collect() itself, as before. This process and what it forks (an in-process prepare's workers) only: a
    process started afresh (python -m ..., warm.py's server) keeps Python's default."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASSES_EVERY)


@pytest.fixture(scope="session")
def images():
    return drawn(SPEC)


@pytest.fixture(scope="session")
def sources(tmp_path_factory, images) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    layouts = ("official", "imagefolder", "kaggle")
    for layout in layouts:
        WRITERS[layout](root / layout, images)
    return {layout: root / layout for layout in layouts}


@functools.cache
def drawn(spec: SampleSpec) -> SampleImages:
    """make_sample's images of `spec`, drawn once a test process (BIG_SPEC's take 7 s to draw, and nine tests
    write them): the same bytes in every process, since each image comes from its own seeded stream."""
    return sample_images(spec)


def write_sample(out: Path, layout: str = "official", spec: SampleSpec = SPEC) -> Path:
    """make_sample(out, layout, spec), through `drawn`."""
    WRITERS[layout](Path(out), drawn(spec))
    return Path(out)


def config(source: Path, dest: Path, **options) -> PrepareConfig:
    return PrepareConfig(source=source, dest=dest, shard_size_mb=options.pop("shard_size_mb", SHARD_MB),
                         progress_interval=options.pop("progress_interval", 60), **options)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, sources) -> Path:
    """The official sample, prepared with default options: shared read-only by many tests."""
    dest = tmp_path_factory.mktemp("prepared") / "imagenet"
    prepare(config(sources["official"], dest))
    return dest


def shard_set(prepared: Path, split: str = "train"):
    """The prepared sample dataset's ShardSet of `split`."""
    from shards.manifest import read_manifest
    from train.shard_index import ShardSet

    return ShardSet.of(prepared, read_manifest(prepared), split)


def write_shard(path: Path, samples: list[tuple[str, bytes, int | bytes]]) -> None:
    """A shard of (key, image bytes, label) samples, as prepare lays them out (KEY.jpg, KEY.cls,
    KEY.json); a label given as bytes is written as it is."""
    import webdataset as wds

    with wds.TarWriter(str(path), encoder=False) as writer:
        for key, data, label in samples:
            cls = label if isinstance(label, bytes) else str(label).encode()
            writer.write({"__key__": key, "jpg": data, "cls": cls, "json": b"{}"})


def run_module(*args, env=None, timeout=300, **kwargs) -> subprocess.CompletedProcess:
    """Run `python -m ...` as a user would, from the repository root."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", *map(str, args)], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def process_state() -> tuple:
    """What a command's main(argv) run in the test process could leave changed for the tests after it."""
    root, prepare_log = logging.getLogger(), logging.getLogger("prepare")
    return (os.getcwd(), dict(os.environ), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT),
            list(root.handlers), root.level, list(prepare_log.handlers), prepare_log.level)


@pytest.fixture
def run_here(capfd, caplog, monkeypatch) -> Callable[..., subprocess.CompletedProcess]:
    """run_module's in-process twin: run_here(prepare.cli.main, *args) is `python -m prepare ARGS` without the new
    interpreter's 0.4-0.8 s of imports (issue #48), for tests of what the command says, not of its process. Its
    stderr holds every log line, the forked workers' too (their records reach only their own copy of caplog), in
    one format (the command's own logging set-up is a no-op under pytest, whose handlers are already there), and
    whatever a worker prints to the descriptors it inherits (a traceback). Fails if main left the process changed."""
    caplog.set_level(logging.INFO, logger="prepare")  # what the command's setup_logging would show
    # prepare.cli.main sets it for good (before torch's import, in its own process): undone after the test
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR"))

    def run(main: Callable[[list[str]], int], *args) -> subprocess.CompletedProcess:
        capfd.readouterr()  # what came before is not the command's
        before = process_state()
        handler = logging.StreamHandler(sys.stderr)  # capfd's file, which forked workers write to as well
        handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s %(message)s"))
        logging.getLogger().addHandler(handler)
        try:
            code = main([str(arg) for arg in args])
        finally:
            logging.getLogger().removeHandler(handler)
        out, err = capfd.readouterr()
        assert process_state() == before, "the command's main left this process changed for the tests after it"
        return subprocess.CompletedProcess([main.__module__, *args], code, out, err)

    return run


@pytest.fixture
def ctrl_c_delivered():
    """SIGINT as an interactive session has it (Python's KeyboardInterrupt), for a test that presses Ctrl-C: a suite
    started as a shell's background job (`pytest &`, nohup, a script's `&`) inherits it ignored, which the commands
    keep so (prepare leaves an ignored SIGINT ignored; _thread.interrupt_main does nothing then), and the test saw no
    Ctrl-C at all. Put back as it was after the test."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def as_one_srun_task(monkeypatch, **more: str) -> None:
    """This process's environment as srun sets a job's one task's (SLURM 22.05's variables), and no torchrun's: none
    of the job's the tests may run in (`srun pytest`: its SLURM_CPUS_PER_TASK, SLURM_HINT, ... would be this task's)."""
    for name in [name for name in os.environ if name.startswith(("SLURM_", "SLURMD_", "SRUN_"))]:
        monkeypatch.delenv(name)
    for name, value in {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77",
                        "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NODELIST": "node1",
                        "SLURM_JOB_NODELIST": "node1", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "1",
                        "SLURMD_NODENAME": "node1", **more}.items():
        monkeypatch.setenv(name, value)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every shard of a prepared dataset, for byte-for-byte comparison."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("*/*.tar"))}


def damage_jpeg(shard: Path, sample: int) -> str:
    """Overwrite 200 bytes at the start of the entropy-coded data of sample `sample`'s JPEG with
    bogus markers, in place (the shard keeps its size, so a stat-only check passes): every crop's
    decode reads through them, and libjpeg (ours, and torchvision's for --decode gpu) reports the
    damage. Returns the sample's key."""
    from train.shard_index import tar_index

    data = bytearray(shard.read_bytes())
    key_at, key_len, jpg_at, jpg_len, _, _ = tar_index(bytes(data))[sample].tolist()
    jpeg = bytes(data[jpg_at:jpg_at + jpg_len])
    sos = jpeg.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")  # first byte of the entropy-coded data
    data[jpg_at + start + 8:jpg_at + start + 208] = b"\xff\x05" * 100
    shard.write_bytes(bytes(data))
    return data[key_at:key_at + key_len].decode()


def member(shard: Path, sample: int, field: int) -> tuple[bytearray, int, int, str]:
    """(the shard's bytes, where member `field` of sample `sample` lies and how long it is, its key);
    field 2 is the .jpg, 4 the .cls (shard_index.tar_index's columns)."""
    from train.shard_index import tar_index

    data = bytearray(shard.read_bytes())
    row = tar_index(bytes(data))[sample].tolist()
    return data, row[field], row[field + 1], data[row[0]:row[0] + row[1]].decode()


def oversize_jpeg(shard: Path, sample: int, width: int = 9000, height: int = 9000) -> str:
    """Make sample `sample`'s JPEG header claim width x height (81 Mpx: more than shards.limits
    allows), in place and at the same size. Returns its key."""
    from jpegs import with_size

    data, at, length, key = member(shard, sample, 2)
    data[at:at + length] = with_size(bytes(data[at:at + length]), width, height)
    shard.write_bytes(bytes(data))
    return key


def relabel(shard: Path, sample: int, text: bytes) -> str:
    """Overwrite sample `sample`'s .cls in place with `text`, padded with spaces to the same length.
    Returns its key."""
    data, at, length, key = member(shard, sample, 4)
    data[at:at + length] = text[:length].ljust(length)
    shard.write_bytes(bytes(data))
    return key


def copy_dataset(prepared: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(prepared, to)
    return to
