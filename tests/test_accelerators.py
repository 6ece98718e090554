"""Every GPU kind through one device-generic path (train/accelerators.py): the decisions for the CPU, NVIDIA's
CUDA, AMD's ROCm (whose torch keeps the type "cuda") and Intel's XPU, as pure functions checked against torch's own
tables; and, on this machine (no GPU), what asking for one that is not here says, from the command line and the
library alike. Nothing here has run on an AMD or Intel GPU: docs/clusters.md and BENCHMARKS.md say so."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.distributed as dist

from train import ConfigError, ImageNetLoader
from train.accelerators import (ACCELERATORS, XPU_TORCH, accelerator_here, autocast_default, autotunes_convolutions,
                                backend_for, pins_memory, platform, rank_device, streams_of)
from train.cluster import ClusterError, DistEnv
from train.loader_arguments import check_device_decode
from train.run.devices import device_for

CPU, CUDA, XPU = torch.device("cpu"), torch.device("cuda", 0), torch.device("xpu", 0)


def test_each_kind_joins_the_process_group_torch_maps_it_to():
    table = dist.Backend.default_device_backend_map
    assert {kind: backend_for(device) for kind, device in (("cpu", CPU), ("cuda", CUDA), ("xpu", XPU))} == \
        {"cpu": table["cpu"], "cuda": table["cuda"], "xpu": table["xpu"]} == {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl"}
    assert backend_for(torch.device("meta")) == "gloo"  # a type torch does not map


@pytest.mark.parametrize("kind,local_rank,count,device", [
    ("cuda", 0, 4, "cuda:0"), ("cuda", 5, 4, "cuda:1"), ("cuda", 3, 1, "cuda:0"),  # --gpus-per-task 1: index 0
    ("xpu", 7, 8, "xpu:7"), ("xpu", 9, 8, "xpu:1"),  # DAWN: two stacks a GPU, eight devices a node
    ("cpu", 3, 0, "cpu"),
])
def test_a_rank_takes_its_local_rank_among_the_devices_it_sees(kind, local_rank, count, device):
    assert rank_device(kind, local_rank, count) == torch.device(device)


def test_pinned_memory_and_autocast_follow_the_device_not_its_vendor():
    assert [pins_memory(d) for d in (CPU, CUDA, XPU)] == [False, True, True]
    assert [autocast_default(d) for d in (CPU, CUDA, XPU)] == [None, torch.bfloat16, torch.bfloat16]
    assert [autocast_default(d, bf16=False) for d in (CPU, CUDA, XPU)] == [None, torch.float16, torch.float16]
    assert set(ACCELERATORS) == {"cuda", "xpu"}


@pytest.mark.parametrize("capability,hip,precision", [
    ((7, 0), None, torch.float16), ((7, 5), None, torch.float16),  # V100, T4: fp16, with a GradScaler
    ((8, 0), None, torch.bfloat16), ((9, 0), None, torch.bfloat16),  # A100, H100
    ((7, 0), "6.4.1", torch.bfloat16),  # ROCm's torch: AMD's numbering is not NVIDIA's
])
def test_amp_auto_is_fp16_on_nvidias_gpus_before_ampere(monkeypatch, capability, hip, precision):
    """--amp auto was bf16 on every GPU: a V100 or T4 takes bf16 (torch's autocast lets it), but cuDNN's bf16
    convolutions need Ampere, and torch convolves in its own im2col kernels instead: ResNet-50 ran slower than in
    fp32, silently. There auto is fp16 with a GradScaler, the precision torchvision's and FFCV's runs take."""
    from train.accelerators import computes_in_bf16
    from train.run.loop import amp_dtype_for

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    assert amp_dtype_for("auto", CUDA) == precision
    assert asked == ([] if hip else [CUDA])  # the rank's own GPU, not the current one
    assert computes_in_bf16(XPU) and computes_in_bf16(CPU) and amp_dtype_for("auto", CPU) is None
    assert [amp_dtype_for(amp, CUDA) for amp in ("bf16", "fp16", "off")] == [torch.bfloat16, torch.float16, None]


def test_the_side_stream_and_the_timings_go_through_each_accelerators_own_torch_module():
    """DeviceBatches' stream, its events and the consumer's stream, and the benchmark's synchronisation, through the
    module torch itself names for the type: torch.cuda on NVIDIA's and AMD's GPUs (the very calls they made before
    this was generic), torch.xpu on Intel's, each with the same five calls; none on the CPU."""
    assert streams_of(CUDA) is torch.get_device_module("cuda") is torch.cuda
    assert streams_of(XPU) is torch.get_device_module("xpu") is torch.xpu
    assert streams_of(CPU) is None and streams_of(torch.device("meta")) is None
    for module in (torch.cuda, torch.xpu):
        for call in ("Stream", "Event", "stream", "current_stream", "synchronize"):
            assert callable(getattr(module, call)), (module.__name__, call)


def test_convolutions_are_autotuned_where_cudnn_benchmark_reaches_them():
    """torch.backends.cudnn.benchmark: cuDNN's search on NVIDIA's GPUs and MIOpen's on AMD's, both of type cuda;
    Intel's oneDNN and the CPU have none (the flag is left alone there)."""
    assert [autotunes_convolutions(d) for d in (CPU, CUDA, XPU)] == [False, True, False]


def test_the_device_types_are_one_table_the_parsers_read_without_torch():
    """--device's choices, in python -m train, train.evaluate and train.bench, are train/device_types.py's, which
    imports nothing (the parsers answer --help and refusals without torch)."""
    import subprocess
    import sys

    from conftest import ROOT
    from train.bench.cli import build_parser as bench_parser
    from train.device_types import DEVICE_TYPES
    from train.run.config import build_parser
    from train.run.evaluation import build_parser as evaluate_parser

    assert DEVICE_TYPES == (*ACCELERATORS, "cpu")
    for made in (build_parser(), evaluate_parser(), bench_parser()):
        (device,) = [action for action in made._actions if "--device" in action.option_strings]
        assert tuple(device.choices) == DEVICE_TYPES
    imported = subprocess.run([sys.executable, "-c", "import sys, train.device_types; print(sorted(sys.modules))"],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "'torch'" not in imported and "'numpy'" not in imported


def test_the_type_nvidias_and_amds_gpus_share_is_named_only_by_the_table_and_nvidias_decode():
    """#51: `grep -rn '"cuda"' train/` finds the type's name in train/device_types.py (the one table every decision
    reads) and in NVIDIA's decode path alone (the batched nvJPEG decode and its check, its stage benchmark)."""
    import ast

    from conftest import ROOT

    found = set()
    for path in sorted((ROOT / "train").rglob("*.py")):
        text = path.read_text()
        if '"cuda"' not in text:
            continue
        functions = [node for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        for number, line in enumerate(text.splitlines(), 1):
            if '"cuda"' in line:
                around = [f.name for f in functions if f.lineno <= number <= f.end_lineno]
                found.add((path.relative_to(ROOT).as_posix(), around[0] if around else "<module>"))
    assert found == {("train/device_types.py", "<module>"),
                     ("train/loader_arguments.py", "check_device_decode"),
                     ("train/device_decode.py", "DeviceDecoder"), ("train/device_decode.py", "crop_resize_flip"),
                     ("train/bench/stages.py", "gpu_stages")}, found


def test_the_emas_count_on_the_host_goes_through_the_gloo_group_not_the_gpus_backend(monkeypatch):
    """NCCL and XCCL, the default group's backends on a GPU, take device tensors only: a host tensor on the default
    group raises torch's "No backend type associated with device type cpu" (emulated here, the model on the meta
    device in the GPU's place). AveragedModel keeps its n_averaged on the host beside weights on the GPU: the
    buffers' broadcast before each evaluation raised it, at the first epoch's end of every run of several GPUs with
    --ema (the torchvision-v2 recipe's), and of python -m train.evaluate of such a run on several."""
    from train.run.ema import ema_of
    from train.run.loop import take_rank_0s_buffers

    sent = []

    def broadcast(tensor, src, group=None):
        if group is None and tensor.device.type == "cpu":
            raise RuntimeError("No backend type associated with device type cpu")
        sent.append((tensor.device.type, group))

    monkeypatch.setattr(dist, "broadcast", broadcast)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4)).to("meta")
    ema = ema_of(model, decay=0.99998, every=32, epochs=600, global_batch=1024)
    take_rank_0s_buffers([model, ema], control="the gloo group")
    # BatchNorm's three buffers, the model's and the average's, on the device; the count through the gloo group
    assert sorted(sent, key=str) == [("cpu", "the gloo group")] + [("meta", None)] * 6


def test_the_start_up_line_names_the_platform_rocm_included():
    assert platform(CUDA) == "NVIDIA CUDA" and platform(CUDA, hip="6.4.1") == "AMD ROCm 6.4.1"
    assert platform(XPU) == "Intel XPU" and platform(CPU) == "CPU"


def test_the_gpu_decode_is_nvidias_and_refused_elsewhere_in_one_line():
    check_device_decode("gpu", CUDA, None)  # NVIDIA's: the path it is for
    check_device_decode("gpu", CPU, None)  # the same path on the CPU, for testing
    check_device_decode("cpu", XPU, None)  # the CPU decode feeds every device
    for device, hip, where in ((XPU, None, "Intel XPU (xpu:0)"), (CUDA, "6.4.1", "AMD's GPUs (ROCm 6.4.1)")):
        with pytest.raises(ConfigError) as refused:
            check_device_decode("gpu", device, hip)
        said = refused.value.said_with({"decode": "--decode"})
        assert said == (f"--decode gpu is NVIDIA's JPEG decode (nvJPEG, through nvImageCodec), which {where} does "
                        "not have: use --decode cpu, the decode that feeds every device")
        assert str(refused.value).startswith("decode gpu is NVIDIA's")  # the library's words


@pytest.mark.skipif(accelerator_here() is not None, reason="a machine with a GPU: the refusals are of a GPU-less one")
def test_asking_for_a_gpu_that_is_not_here_says_what_to_do():
    env = DistEnv(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="single",
                  node="here")
    assert device_for(env, None) == CPU  # nothing asked, nothing here: the CPU
    with pytest.raises(ClusterError, match=r"--device cuda, but no GPU is visible to this task"):
        device_for(env, "cuda")
    with pytest.raises(ClusterError) as refused:
        device_for(env, "xpu")
    assert str(refused.value) == ("--device xpu, but this torch sees no Intel GPU (torch.xpu.is_available() is "
                                  f"False): on a node with Intel GPUs, install torch's XPU build ({XPU_TORCH}); "
                                  "elsewhere use --device cuda or cpu")


@pytest.mark.skipif(accelerator_here() is not None, reason="a machine with a GPU: the refusals are of a GPU-less one")
def test_device_xpu_without_xpu_support_is_refused_in_one_line_by_the_command_and_the_library(prepared, tmp_path,
                                                                                            caplog):
    from train.run.cli import main

    with caplog.at_level(logging.ERROR, logger="train"):
        assert main(["--data", str(prepared), "--run-dir", str(tmp_path / "run"), "--device", "xpu"]) == 2
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert said.startswith("--device xpu, but this torch sees no Intel GPU") and XPU_TORCH in said
    assert not (tmp_path / "run").exists()  # refused before anything is written
    with pytest.raises(ConfigError, match=r"device 'xpu', but this torch sees no Intel GPU .* use device='cpu'"):
        ImageNetLoader(prepared, device="xpu", batch_size=4, image_size=32)


def test_the_torch_floor_admits_no_release_without_the_accelerator_api_the_device_choice_calls():
    """pyproject's floor is what pip checks a venv's torch against: one older than torch.accelerator's
    current_accelerator(check_available=...) (2.7) would satisfy a lower floor and fail every run at its start."""
    import inspect
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    from conftest import ROOT

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {r.name: r.specifier for r in map(Requirement, listed) if r.name in ("torch", "torchvision")}
    assert "check_available" in inspect.signature(torch.accelerator.current_accelerator).parameters
    assert not floors["torch"].contains(Version("2.6.99")) and floors["torch"].contains(Version("2.7.0"))
    assert not floors["torchvision"].contains(Version("0.21.99")) and floors["torchvision"].contains(Version("0.22.0"))
    assert floors["torch"].contains(Version(torch.__version__.split("+")[0]))


@pytest.mark.skipif(accelerator_here() is not None, reason="a machine with a GPU: the refusals are of a GPU-less one")
def test_device_cuda_with_a_cpu_only_torch_says_so_not_to_check_gpus_per_task(monkeypatch):
    """A CPU-only torch (the cpu wheel, conda's cpuonly) on a GPU node was told 'no GPU is visible to this task
    (check --gpus-per-task)': the job's GPUs were there, the torch could not use them."""
    env = DistEnv(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="single",
                  node="here")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "xpu", None)
    with pytest.raises(ClusterError, match=r"--device cuda, but this torch is a CPU-only build \(.*: neither CUDA nor "
                                           r"ROCm\): install torch's CUDA build"):
        device_for(env, "cuda")


@pytest.mark.skipif(accelerator_here() is not None, reason="a machine with a GPU: the refusals are of a GPU-less one")
def test_device_cuda_with_torchs_xpu_build_names_xpu_not_a_cpu_only_build(monkeypatch):
    """On an Intel GPU node (DAWN), --device cuda (a TRAIN_ARGS copied from a CUDA cluster's job) with torch's XPU
    build was told 'this torch is a CPU-only build: install torch's CUDA build': the torch could use the node's
    GPUs, as --device xpu."""
    env = DistEnv(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="single",
                  node="here")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "xpu", "20250101")  # (torch.version.xpu of the XPU wheels: a SYCL date)
    with pytest.raises(ClusterError) as refused:
        device_for(env, "cuda")
    assert str(refused.value) == (f"--device cuda, but this torch is the build for Intel's GPUs ({torch.__version__}: "
                                  "neither CUDA nor ROCm): on Intel's GPUs use --device xpu (or leave --device out); "
                                  "on NVIDIA's install torch's CUDA build (pip install torch)")


def place(launcher: str, local_world_size: int) -> DistEnv:
    return DistEnv(rank=0, world_size=2 * local_world_size, local_rank=0, master_addr="node1", master_port=20000,
                   launcher=launcher, node="node1", local_world_size=local_world_size)


@pytest.mark.parametrize("env, count, said", [
    # sbatch --ntasks-per-node=1 --gpus-per-node=4, then srun: one rank a node, on cuda:0
    (place("slurm", 1), 4, "3 of the 4 cuda devices this process sees stay idle: its node runs 1 rank of the job, "
                           "one device a rank: run one a device (srun --ntasks-per-node=4 --gpus-per-task=1)"),
    (place("torchrun", 2), 8, "6 of the 8 cuda devices this process sees stay idle: its node runs 2 ranks of the job, "
                              "one device a rank: run one a device (torchrun --nproc-per-node=8)"),
    (DistEnv(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="single",
             node="node1"), 2, "1 of the 2 cuda devices this process sees stay idle: `python -m train` alone is one "
                               "rank: run one a device (srun --ntasks-per-node=2 --gpus-per-task=1 in a SLURM job, "
                               "torchrun --nproc-per-node=2 elsewhere)"),
    (place("slurm", 4), 4, None),  # one rank a device
    (place("slurm", 4), 1, None),  # --gpus-per-task=1: each task sees its own, as cuda:0
    (place("slurm", 1), 0, None),  # the CPU
])
def test_devices_no_rank_of_the_node_takes_are_said_to_stay_idle(env, count, said):
    """Each rank trains on one device: a task that saw 4 GPUs with one rank on its node trained on cuda:0 alone, at a
    quarter of the job's speed, and nothing said so."""
    from train.run.devices import idle_devices

    device = rank_device("cuda" if count else "cpu", env.local_rank, count)
    assert idle_devices(env, device, count) == said
