"""The benchmarks run end to end on the sample data and report what they promise (tiny sizes:
these check behaviour, not speed; BENCHMARKS.md has the measured figures)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conftest import run_module
from shards.manifest import read_manifest
from train.bench.loaders import dali_batches, dali_loader, worker_rss_mb
from train.bench.measure import time_batches

DALI = importlib.util.find_spec("nvidia.dali") is not None  # (importing it to find out took 0.4 s of each collection)

def last_json(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_loader_benchmark_reports_ours_baseline_ceiling_model_feed_and_full(prepared, sources, tmp_path):
    from conftest import config
    from prepare.builder import prepare

    plain = tmp_path / "plain"
    prepare(config(sources["official"], plain, restart_mcus=0))  # the original JPEGs' bytes: the peers' shards
    result = run_module("train.bench", "--data", prepared, "--baseline-data", plain, "--run-dir", tmp_path / "run",
                        "--workers", "1,2", "--images", 48, "--batch-size", 8, "--warmup-batches", 1, "--arch",
                        "resnet18", "--image-size", 32, "--model-batch-size", 8, "--steps", 2, "--no-dali",
                        "--rounds", 2, "--modes", "data,model,feed,full")
    assert result.returncode == 0, result.stderr
    record = last_json(result.stdout)
    for key in ("images_per_sec", "baseline_images_per_sec", "decode_ceiling_images_per_sec", "speedup_vs_baseline",
                "ratio_to_ceiling", "cold_images_per_sec", "memory_mb", "pil_images_per_sec", "pil_worker_rss_mb",
                "baseline_worker_rss_mb", "model_images_per_sec", "library_images_per_sec", "normalise_ms_per_image",
                "feed_images_per_sec", "full_images_per_sec", "workers", "image_stats", "ours_on_peers_images_per_sec"):
        assert key in record, key
    assert [(row["round"], row["workers"]) for row in record["sweep"]] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert record["workers"] == 2 and record["rounds"] == 2
    assert record["memory_mb"] > 0 and record["baseline_worker_rss_mb"] > 0
    assert record["image_stats"]["train_images"] == read_manifest(prepared).splits["train"].samples
    assert "ours (2 threads, warm)" in result.stdout and "baseline ImageFolder" in result.stdout
    assert "today's PIL path" in result.stdout and "ImageNetLoader (ours, normalised)" in result.stdout
    assert all(row["library"] > 0 and row["normalise_ms_per_image"] > 0 and row["ours_on_peers"] > 0
               for row in record["sweep"])
    # the summary block: every loader ratio of BENCHMARKS.md's table, the median of the rounds and each round's
    ratios = record["ratios"]
    assert set(ratios) == {"ours_vs_baseline", "ours_vs_pil", "per_core_vs_fastest_decode", "ours_vs_ours_on_peers",
                           "library_vs_ours", "library_vs_baseline"}
    top = [row for row in record["sweep"] if row["workers"] == 2]
    assert ratios["library_vs_ours"]["rounds"] == [row["library"] / row["ours"] for row in top]
    assert record["speedup_vs_baseline"] == ratios["ours_vs_baseline"]["median"]
    assert set(record["ratios_by_workers"]) == {"1", "2"}
    summary = result.stdout[result.stdout.index("ratios at 2 threads, medians of 2 interleaved rounds"):]
    for label in ("ours (uint8) / the ImageFolder baseline", "ImageNetLoader / the ImageFolder baseline",
                  "the fastest full decode's", ", 1 thread ", ", 2 threads ",
                  "ours, seekable / plain shards", "ImageNetLoader (CPU device, normalised) / ours (the Loader)"):
        assert label in summary, label
    assert (tmp_path / "run" / "benchmark.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "run" / "benchmark.jsonl").read_text().splitlines()[-1]) == record


def test_the_summary_block_gives_each_ratio_as_the_median_of_the_rounds():
    from train.bench.report import summarise, table

    def row(round_, workers, ours, **others):
        return {"round": round_, "workers": workers, "ours": ours, "library": 0.9 * ours, "pil": 100.0,
                "baseline": 200.0, "ceiling_per_core": 250.0, "ceiling_decoder": "simplejpeg",
                "normalise_ms_per_image": 0.05, "ours_memory_mb": 30.0, "pil_worker_rss_mb": 1000.0,
                "baseline_worker_rss_mb": 900.0, **others}

    sweep = [row(0, 1, 400.0, dali=160.0, ours_on_peers=300.0), row(0, 2, 800.0, dali=320.0, ours_on_peers=600.0),
             row(1, 1, 500.0, dali=200.0, ours_on_peers=400.0), row(1, 2, 700.0, dali=350.0, ours_on_peers=560.0),
             row(2, 1, 450.0, dali=150.0, ours_on_peers=300.0), row(2, 2, 900.0, dali=300.0, ours_on_peers=600.0)]
    record = summarise({"sweep": sweep, "cold": {"ours": 1.0, "baseline": 1.0}}, {},
                       {"arch": "resnet18", "decode": "cpu", "data_restart_mcus": 2, "baseline_restart_mcus": 0})
    ratios = record["ratios"]
    assert ratios["ours_vs_baseline"] == {"median": 4.0, "rounds": [4.0, 3.5, 4.5]}
    assert ratios["ours_vs_dali"]["rounds"] == [2.5, 2.0, 3.0] and record["ratio_to_dali"] == 2.5
    assert ratios["per_core_vs_fastest_decode"]["rounds"] == [1.6, 1.4, 1.8]
    assert record["per_core_ratio_to_ceiling"] == {1: 1.8, 2: 1.6}
    assert ratios["ours_vs_ours_on_peers"]["median"] == pytest.approx(4 / 3)
    assert ratios["library_vs_ours"]["median"] == pytest.approx(0.9)
    assert record["images_per_sec"] == 800.0 and record["dali_images_per_sec"] == 320.0 and record["rounds"] == 3
    text = table(record)
    assert "ratios at 2 threads, medians of 3 interleaved rounds" in text
    assert "ours / DALI's CPU pipeline" in text and "2.50x  [2.50 2.00 3.00]" in text
    assert "ours, seekable / plain shards" in text and "1 thread " in text
    assert table(json.loads(json.dumps(record))) == text  # a record read back from benchmark.jsonl


def test_the_summary_gives_the_baseline_ratio_of_like_outputs():
    """Ours hands over uint8 batches; the baseline ends in ToTensor + Normalize, float32 batches of four times the
    bytes (about 30% of its CPU an image on the demo's images), and the summary gave only ours / the baseline, as
    if the outputs were alike: the ImageNetLoader's normalised float32 batches against the baseline's are given
    beside it, and the first says what it compares."""
    from train.bench.report import summarise, table

    rows = [{"round": r, "workers": 2, "ours": 800.0, "library": library, "pil": 300.0, "baseline": 200.0,
             "ceiling_per_core": 300.0, "ceiling_decoder": "simplejpeg", "normalise_ms_per_image": 0.05,
             "ours_memory_mb": 30.0, "pil_worker_rss_mb": 1000.0, "baseline_worker_rss_mb": 900.0}
            for r, library in enumerate((600.0, 500.0, 700.0))]
    record = summarise({"sweep": rows, "cold": {"ours": 1.0, "baseline": 1.0}}, {},
                       {"arch": "resnet18", "decode": "cpu", "data_restart_mcus": 2, "baseline_restart_mcus": 0})
    assert record["ratios"]["library_vs_baseline"] == {"median": 3.0, "rounds": [3.0, 2.5, 3.5]}
    text = table(record)
    assert "ours (uint8) / the ImageFolder baseline (normalised float32)" in text
    assert "ImageNetLoader / the ImageFolder baseline, both normalised float32" in text
    assert "3.00x  [3.00 2.50 3.50]" in text and "the ImageNetLoader, normalised as it: 3.00x" in text


@pytest.mark.parametrize("peers_restart_mcus,said", [
    (2, "the peers on seekable shards, not the original JPEGs"), (0, "the peers on plain shards")])
def test_the_summary_says_which_images_the_peers_read(peers_restart_mcus, said):
    """`train.bench --data demo/imagenet` (README's line, no --baseline-data) ran the peers on the demo's seekable
    shards and printed the ratios as if on the original JPEGs: their restart markers cost DALI's and the full
    decoders' libjpeg-turbo about 4% and 10% more a decode, so ours / DALI and ours per core read that much high."""
    from train.bench.report import summarise, table

    row = {"round": 0, "workers": 2, "ours": 800.0, "library": 700.0, "pil": 300.0, "baseline": 200.0, "dali": 250.0,
           "ceiling_per_core": 300.0, "ceiling_decoder": "simplejpeg", "normalise_ms_per_image": 0.05,
           "ours_memory_mb": 30.0, "pil_worker_rss_mb": 1000.0, "baseline_worker_rss_mb": 900.0}
    record = summarise({"sweep": [row], "cold": {"ours": 1.0, "baseline": 1.0}}, {},
                       {"arch": "resnet18", "decode": "cpu", "data_restart_mcus": 2,
                        "baseline_restart_mcus": peers_restart_mcus})
    summary = table(record).split("ratios at 2 threads", 1)[1].splitlines()[0]
    assert said in summary


@pytest.mark.slow
def test_prepare_benchmark_compares_with_extraction_and_copy(sources, tmp_path):
    result = run_module("prepare.bench", "--source", sources["official"], "--scratch", tmp_path / "scratch",
                        "--workers", 1)
    assert result.returncode == 0, result.stderr
    record = last_json(result.stdout)
    assert record["images"] == 210
    assert set(record["seconds"]) == {"copy", "extract", "prepare"}
    assert record["prepare_images_per_sec"] > 0 and record["speedup_vs_extract"] > 0
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == ["prepare-benchmark.jsonl"]  # cleaned up


@pytest.mark.slow
def test_part_threads_benchmark_compares_one_thread_with_several_on_one_gzip_part(tmp_path):
    result = run_module("prepare.bench.part_threads", tmp_path / "scratch", "--threads", 2, "--val-per-class", 3,
                        "--rounds", 1)
    assert result.returncode == 0, result.stderr
    record = last_json(result.stdout)
    assert record["images"] == 30 and record["threads"] == 2
    assert record["alone_images_per_sec"] > 0 and record["threaded_images_per_sec"] > 0 and record["ratio"] > 0


@pytest.mark.slow  # its start-up lines import torch
def test_the_gpu_benchmark_script_runs_the_clones_venv_as_the_readme_gives_it(tmp_path):
    """`bash jobs/gpu_benchmark.sh` as README.md and BENCHMARKS.md give it, no PYTHON set: the clone's .venv, where
    it ran python3 (no torch: every step failed). With no budget its steps are skipped: its start-up lines say
    what it runs on."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    result = subprocess.run(["bash", "jobs/gpu_benchmark.sh"], cwd=root, capture_output=True, text=True, timeout=300,
                            env={**env, "BUDGET": "0", "OUT": str(tmp_path / "out"), "SCRATCH": str(tmp_path / "s")})
    assert "ModuleNotFoundError" not in result.stdout + result.stderr, result  # (exit 1: its steps were skipped)
    assert "torch 2." in result.stdout and "failed: none" in result.stdout


def test_timing_excludes_warm_up_and_needs_enough_batches():
    batches = [([0] * 4, [0] * 4) for _ in range(5)]
    rate = time_batches(iter(batches), images=8, warmup=2)
    assert rate.images == 8
    with pytest.raises(ValueError, match="fewer batches than the warm-up"):
        time_batches(iter(batches), images=100, warmup=10)
    # no DataLoader workers now: what it measures are this process's other children (tests/warm.py's server,
    # multiprocessing's resource tracker, where a warm test ran in this pytest worker before), one size each
    children = [pid for task in Path("/proc/self/task").iterdir() for pid in (task / "children").read_text().split()]
    assert len(worker_rss_mb()) == len(children)


@pytest.mark.skipif(not DALI, reason="NVIDIA DALI is an optional extra: pip install nvidia-dali-cuda130")
def test_dali_reads_the_same_shards(prepared, tmp_path):
    batches = dali_batches(dali_loader(read_manifest(prepared), prepared, tmp_path, 1, 8, 32))
    images, labels = next(batches)
    assert tuple(images.shape) == (8, 32, 32, 3) and str(images.dtype) == "torch.uint8"
    assert time_batches(batches, 16, 1).per_sec > 0


def test_the_ranks_rates_are_summed_through_gloo_where_the_default_group_takes_device_tensors_only(tmp_path):
    """`srun python -m train.bench` on several GPUs: the default group is NCCL's (XCCL's on Intel's), which refuses a
    host tensor ("No backend type associated with device type cpu"): the sum of the ranks' images/s after the data
    mode stopped the benchmark there. The default group here is gloo serving the GPU's type alone, as NCCL does."""
    import torch.distributed as dist

    from train.bench.measure import global_rate
    from train.cluster import DistEnv

    dist.init_process_group("cuda:gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        host_group = dist.new_group(backend="gloo")
        env = DistEnv(rank=0, world_size=2, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="slurm",
                      node="here")  # (a world of 2 as the benchmark sees it: this one rank sums alone)
        assert global_rate(1234.5, env, host_group) == 1234.5
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not DALI, reason="NVIDIA DALI is an optional extra: pip install nvidia-dali-cuda130")
def test_dali_reads_labels_of_several_digits(images, tmp_path):
    """ImageNet's .cls holds 1 to 3 digits: a batch of labels of several lengths is not one tensor, which
    DALI's iterator refused (every dataset of more than 10 classes, python -m train.bench's default peer)."""
    import torch

    from conftest import write_shard
    from shards.manifest import Manifest, ShardInfo, SplitInfo

    labels = [0, 12, 5, 999, 1, 10, 3, 100]
    (tmp_path / "train").mkdir()
    write_shard(tmp_path / "train" / "train-000000.tar",
                [(key, data, label) for (key, _, data), label in zip(images.train, labels)])
    shard = ShardInfo("train/train-000000.tar", len(labels), (tmp_path / "train" / "train-000000.tar").stat().st_size)
    manifest = Manifest({}, {}, [], {"train": SplitInfo(len(labels), shard.bytes, [shard])})
    batches = dali_batches(dali_loader(manifest, tmp_path, tmp_path, 1, 8, 32))
    for _ in range(3):
        _, got = next(batches)
        assert got.dtype == torch.int64 and sorted(got.tolist()) == sorted(labels)


@pytest.mark.skipif(not DALI, reason="NVIDIA DALI is an optional extra: pip install nvidia-dali-cuda130")
def test_dali_hands_over_every_batch_it_decodes(prepared, tmp_path, monkeypatch):
    """DALI's rate counts every batch its pipeline decoded: with the iterator's DROP policy it decoded each epoch's
    last, partial batch and threw it away uncounted (on the demo's 400 images a batch of 64 in 7: its rate about a
    tenth low, ours / DALI as much too high), where ours plans whole batches and decodes nothing it drops."""
    from nvidia.dali.pipeline import Pipeline

    taken, share_outputs = [], Pipeline.share_outputs
    monkeypatch.setattr(Pipeline, "share_outputs",
                        lambda self, *a, **k: taken.append(1) or share_outputs(self, *a, **k))
    samples, batch = read_manifest(prepared).splits["train"].samples, 8
    assert samples % batch  # an epoch ends in a partial batch
    batches = dali_batches(dali_loader(read_manifest(prepared), prepared, tmp_path, 1, batch, 32))
    next(batches)  # (the iterator took its first batch from the pipeline as it was made)
    before = len(taken)
    handed = sum(len(next(batches)[1]) for _ in range(3 * samples // batch))  # three epochs' ends crossed
    assert handed == 3 * samples // batch * batch and len(taken) - before == handed // batch


def test_a_cold_pass_evicts_files_just_written(tmp_path):
    """train.bench's cold pass of the baseline reads the ImageFolder it extracted moments before: fadvise DONTNEED
    alone drops only clean pages, so those files, still dirty, stayed cached and the "cold" baseline read memory."""
    import shutil
    import subprocess

    from shards.resources import evict_from_page_cache

    fincore = shutil.which("fincore")  # util-linux
    if fincore is None or subprocess.run(["stat", "-f", "-c", "%T", tmp_path], capture_output=True,
                                         text=True).stdout.strip() == "tmpfs":
        pytest.skip("needs util-linux's fincore, and a file system whose pages can leave memory (not tmpfs)")
    files = [tmp_path / f"{i}.JPEG" for i in range(20)]
    for path in files:
        path.write_bytes(bytes(range(256)) * 256)
    evict_from_page_cache(files)
    resident = subprocess.run([fincore, "--bytes", "--noheadings", "--output", "RES", *files], capture_output=True,
                              text=True, check=True).stdout.split()
    assert resident == ["0"] * len(files)


def test_model_modes_are_the_default_only_on_a_gpu():
    import torch

    from train.bench.cli import chosen_modes

    assert chosen_modes(None, torch.device("cpu")) == {"data"}
    assert chosen_modes(None, torch.device("cuda")) == {"data", "model", "feed", "full"}
    assert chosen_modes("model,full", torch.device("cpu")) == {"model", "full"}
    with pytest.raises(SystemExit, match="unknown \\['fast'\\]"):
        chosen_modes("data,fast", torch.device("cpu"))


def test_the_plot_of_one_worker_count_has_integer_ticks_and_the_ceiling():
    from train.bench.report import figure

    fig = figure({"sweep": [{"workers": 2, "ours": 500.0, "baseline": 400.0}], "decode_ceiling_per_core": 700.0,
                  "decoder": "PIL"})
    ax = fig.axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    (ceiling,) = [line for line in ax.get_lines() if line.get_label().startswith("decode ceiling")]
    assert list(ceiling.get_xdata()) == [0, 2] and list(ceiling.get_ydata()) == [0, 1400.0]


def test_the_pil_paths_workers_split_an_epoch_into_round_robin_runs_of_whole_batches():
    """The previous loader's DataLoader takes batch j from worker j % W: each worker's run of
    whole batches, disjoint, together the epoch's batches."""
    from itertools import product

    from shards.plan import steps_per_epoch
    from train.bench.pil_loader import batches_of_worker, worker_plan

    for steps, workers in product(range(12), range(4)):
        w = max(1, workers)
        owners = [j % w for j in range(steps)]
        assert [owners.count(v) for v in range(w)] == [batches_of_worker(steps, workers, v) for v in range(w)]
    sizes, batch = [7, 6, 6, 4], 3
    for workers in (0, 1, 2, 3):
        plans = [worker_plan(sizes, epoch=1, seed=0, workers=workers, worker=v, batch_size=batch, shuffle_buffer=4)
                 for v in range(max(1, workers))]
        read = [(p.shard, i) for plan in plans for p in plan.pieces for i in range(p.start, p.stop)]
        assert len(read) == len(set(read)) == steps_per_epoch(sum(sizes), 1, batch) * batch
        assert all(plan.num_samples % batch == 0 for plan in plans)


@pytest.mark.parametrize("nodes", [1, 2, 8, 64, 256])
def test_the_job_start_model_reads_the_source_once_and_is_never_slower_on_a_fast_network(nodes):
    from prepare.bench.startup_model import DATASETS, PARAMS, shared, today

    for dataset in DATASETS.values():
        alone, together = today(nodes, dataset, PARAMS), shared(nodes, dataset, PARAMS)
        assert alone["fs_bytes"] == nodes * dataset["source"] and together["fs_bytes"] == dataset["source"]
        assert together["total"] <= alone["total"] + 1e-9  # the network (5 GB/s) outruns the disk (2 GB/s)
        if nodes == 1:
            assert together["total"] == alone["total"]
        slow = dict(PARAMS, net=1.0)  # gloo at one TCP stream's rate: the exchange binds
        assert shared(nodes, dataset, slow)["total"] >= together["total"]


@pytest.mark.slow
def test_the_inflate_benchmark_reads_one_stream_with_zlib_and_rapidgzip(tmp_path):
    result = run_module("prepare.bench.inflate", tmp_path, "--mb", 2, "--rounds", 1)
    assert result.returncode == 0, result.stderr[-2000:]
    rounds = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["reader"].split()[0] for r in rounds[:2]] == ["zlib", "rapidgzip"]
    assert rounds[0]["bytes"] == rounds[1]["bytes"] > 2 << 20  # the same stream, read whole by each
    assert rounds[2]["ratio"] > 0 and rounds[3]["crc32_mb_per_s"] > 0
    shares = [r for r in rounds if "median_node_mb_per_s" in r]
    assert [r["nodes"] for r in shares] == [2, 4, 8] and all(r["job_against_zlib"] > 0 for r in shares)


@pytest.mark.slow
def test_the_full_scale_benchmark_prepares_22k_classes_and_measures_memory(tmp_path):
    result = run_module("prepare.bench.full_scale", tmp_path, "--images", 1500, "--workers", 1, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    (figures,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert figures["classes"] == 21841 and figures["val"] == 50 * 2  # two classes over the held-out threshold
    assert figures["train"] + figures["val"] >= 1500 - 21841 and figures["peak_rss_mb"] > 50


def test_the_pil_builds_benchmark_times_the_same_work_in_each_interpreter(capsys):
    from prepare.bench.pil_builds import main

    assert main([sys.executable, "--images", "12", "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    table, result = lines[:-1], json.loads(lines[-1])
    assert [line.split()[0] for line in table] == ["reencode", "crop"]
    assert all("libjpeg-turbo" in line and " 1.00x " in line and line.endswith(f"({sys.executable})") for line in table)
    for work in ("reencode", "crop"):
        assert result[work][sys.executable]["images_per_s"] > 0


def test_the_elastic_benchmark_times_a_resumed_epoch_against_an_ordinary_one(prepared, capsys):
    from train.bench.elastic import main

    assert main(["--data", str(prepared), "--image-size", "32", "--rounds", "2", "--epochs", "1",
                 "--cases", "2:4:1,2:4:4"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(c["run_world"], c["run_batch"], c["world"], c["batch"]) for c in record["cases"]] == [(2, 4, 1, 8),
                                                                                                 (2, 4, 4, 2)]
    for case in record["cases"]:
        assert len(case["ratios"]) == 2 and case["ratio"] > 0 and case["resumed_images_per_sec"] > 0


@pytest.mark.parametrize("module,argv,flag", [
    ("train.bench.elastic", ["--data", "DATA", "--rounds", "0"], "--rounds"),
    ("train.bench.elastic", ["--data", "DATA", "--epochs", "0"], "--epochs"),
    ("train.bench.augment", ["--sizes", "8", "--batch-size", "2", "--policies", "trivialaugment", "--threads", "1",
                             "--no-tensor", "--repeats", "0"], "--repeats"),
    ("train.bench.stages", ["DATA", "--plain", "PLAIN", "--rounds", "0"], "--rounds"),
    ("train.bench.stages", ["DATA", "--plain", "PLAIN", "--images", "0"], "--images"),
    ("train.bench.recipes", ["--data", "DATA", "--repeats", "0"], "--repeats"),
    ("train.bench.recipes", ["--data", "DATA", "--images", "-1"], "--images"),
    ("prepare.bench.extraction", ["--source", "SOURCE", "--scratch", "SCRATCH", "--repeats", "0"], "--repeats"),
    ("prepare.bench.layouts", ["SCRATCH", "--layouts", "official", "--classes", "4", "--train-per-class", "2",
                               "--val-per-class", "1", "--max-width", "64", "--rounds", "0"], "--rounds"),
])
def test_a_benchmarks_count_under_one_is_refused_in_one_line_before_anything_runs(module, argv, flag, tmp_path,
                                                                                   capsys):
    """Rounds, repetitions, images and epochs are divided by or take a median: 0 ended each of these in a
    traceback (StatisticsError, ZeroDivisionError, ValueError, KeyError) after its set-up, prepare.bench's
    after timing the copy and the extraction."""
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / word) if word.isupper() else word for word in argv])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert f"argument {flag}:" in error and "fewer than 1" in error, error


@pytest.mark.parametrize("module,argv", [
    ("train.bench", ["--data", "DATA"]), ("train.bench.decoders", ["--data", "DATA"]),
    ("train.bench.elastic", ["--data", "DATA"]), ("train.bench.recipes", ["--data", "DATA"]),
    ("train.bench.huffman", ["--data", "DATA"]), ("train.bench.stages", ["DATA", "--plain", "PLAIN"]),
])
def test_a_benchmark_given_no_prepared_dataset_says_so_in_one_line(module, argv, tmp_path, capsys, monkeypatch):
    """A mistyped --data ended each benchmark in a traceback whose last line was the DatasetNotReady that python -m
    train prints alone: now as one line too, exit status 2, and before any build (train.bench.huffman built its
    reference decoder first: 15 s from a clean clone before the line)."""
    import importlib

    import train.bench.reference_build as reference_build

    monkeypatch.setattr(reference_build, "reference_jpegcrop", lambda: pytest.fail("built before --data was read"))
    main = importlib.import_module(module if module != "train.bench" else "train.bench.cli").main
    assert main([str(tmp_path / word) if word.isupper() else word for word in argv]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"python -m {module}: error: no prepared dataset at "), error


def test_prepare_bench_given_a_folder_without_the_official_archives_says_so_in_one_line(tmp_path, capsys):
    """It times a copy and an extraction of the official archives: given another layout (a Kaggle tree, say) or a
    mistyped path it ended in a FileNotFoundError traceback, after making --scratch."""
    from prepare.bench.extraction import main

    (tmp_path / "kaggle").mkdir()
    with pytest.raises(SystemExit) as stopped:
        main(["--source", str(tmp_path / "kaggle"), "--scratch", str(tmp_path / "scratch")])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"python -m prepare.bench: error: --source {tmp_path / 'kaggle'} lacks "
                            "ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, ILSVRC2012_devkit_t12.tar.gz"), error
    assert not (tmp_path / "scratch").exists()
