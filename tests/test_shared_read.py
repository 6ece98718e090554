"""The shared read (prepare on several nodes, each reading a share of the source): the pure share
assignment and stream framing, and real `python -m prepare` processes joined over gloo, each given
the variables srun gives a task (tests/test_slurm.py runs the same through a real srun)."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import warm
from conftest import ROOT, SHARD_MB, run_module, tree_bytes, write_sample
from prepare.config import PrepareError
from prepare.exchange import OUTCOME, RECORD, SAMPLE, SPLIT, Demux, chunk_bytes
from prepare.node_group import node_group_env
from prepare.sample import SampleSpec
from prepare.shares import assign_shares, split_shares
from shards.manifest import read_complete_manifest
from shards.slurm import PORT_RANGES, PORT_SPAN, SlurmEnvError, slurm_port
from test_prepare import (PREMATURE_END, big_source, copy_official, damaged_val_source, replace_an_image_with_junk,
                          truncate_second_class_tar)

# ---------------------------------------------------------------- which node reads which parts

SIZES = {
    "equal": [100] * 40,
    "imagenet-like": [size * 10**6 for size in random.Random(1).choices(range(50, 161), k=1000)],  # one Random
    "one huge part": [10**9] + [10**6] * 30,
    "small parts, then one as large as them all": [1, 1, 1, 1, 4],
    "zeros": [0] * 9,
    "fewer parts than nodes": [5, 3],
    "none": [],
}


@pytest.mark.parametrize("nodes", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("kind", SIZES)
def test_shares_are_disjoint_complete_in_source_order_and_balanced_by_bytes(kind, nodes):
    sizes = SIZES[kind]
    shares = assign_shares(sizes, nodes)
    assert len(shares) == nodes
    assert sorted(i for share in shares for i in share) == list(range(len(sizes)))  # disjoint and complete
    assert all(share == sorted(share) for share in shares)  # each node reads its parts in source order
    loads = [sum(sizes[i] for i in share) for share in shares]
    largest = max(sizes, default=0)
    # greedy, largest first: no node more than one part above the lightest, and within 4/3 of the optimum
    assert max(loads) - min(loads) <= largest
    assert max(loads) <= 4 / 3 * max(sum(sizes) / nodes, largest) + 1e-9
    # a pure function of the sizes and the node count: every node computes the same answer alone
    assert assign_shares(tuple(sizes), nodes) == shares == assign_shares(list(sizes), nodes)


def test_the_splits_balance_together():
    """The val parts go first to the node that read less of train: 24 bytes against 26, where each
    split balanced alone would give node 0 the extra train part and the extra val part (32 against 18)."""
    shares = split_shares({"train": [10, 10, 10], "val": [4] * 5}, 2)
    assert shares == {"train": [[0, 2], [1]], "val": [[3], [0, 1, 2, 4]]}
    assert [10 * len(shares["train"][n]) + 4 * len(shares["val"][n]) for n in range(2)] == [24, 26]
    alone = [assign_shares([10, 10, 10], 2), assign_shares([4] * 5, 2)]
    assert [10 * len(alone[0][n]) + 4 * len(alone[1][n]) for n in range(2)] == [32, 18]


def test_share_arguments_are_checked():
    with pytest.raises(ValueError, match="at least 1"):
        assign_shares([1], 0)
    with pytest.raises(ValueError, match="negative"):
        assign_shares([1, -1], 2)
    with pytest.raises(ValueError, match="2 loads for 3 nodes"):
        assign_shares([1], 3, [0, 0])


def test_loads_for_more_nodes_or_none_are_refused_too():
    """Only too few loads were tried: a check of `len(loads) < nodes` passed, and 3 loads for 2 nodes went through
    (the extra node's load ignored, or its parts lost), as did [] (falsy, so read as no loads at all)."""
    with pytest.raises(ValueError, match="3 loads for 2 nodes"):
        assign_shares([1], 2, [0, 0, 0])
    with pytest.raises(ValueError, match="0 loads for 2 nodes"):
        assign_shares([1], 2, [])


def test_a_third_split_balances_against_both_before_it():
    """Node 0 reads a's 10 bytes, node 1 b's 3: c's 5 go to node 1 (10 against 8), by the loads of a and b together.
    Two splits never told carried loads from the last split's alone (the first starts from zero), so loads that
    forgot all but the last split passed: they gave c to node 0 (15 against 3)."""
    shares = split_shares({"a": [10], "b": [3], "c": [5]}, 2)
    assert shares == {"a": [[0], []], "b": [[], [0]], "c": [[], [0]]}


# ---------------------------------------------------------------- the stream, cut anywhere

def stream_of(records: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(RECORD.pack(kind, number, len(body)) + body for kind, number, body in records)


def test_a_stream_cut_into_chunks_of_any_size_gives_back_the_same_records():
    rng = random.Random(0)
    records = [(SAMPLE, rng.randrange(100), rng.randbytes(rng.randrange(0, 3000))) for _ in range(40)]
    records += [(OUTCOME, 7, b"outcomes"), (SAMPLE, 3, b"")]
    data = stream_of(records)
    for size in [1, 2, 12, 13, 14, 511, 4096, len(data)]:
        got = []
        demux = Demux("node9", lambda b, body, split: got.append((SAMPLE, b, bytes(body))),
                      lambda p, body: got.append((OUTCOME, p, bytes(body))))
        for start in range(0, len(data), size):
            demux.feed(memoryview(data)[start:start + size])
        demux.finish()
        assert got == records, size


def test_a_stream_ending_inside_a_record_or_of_an_unknown_kind_is_an_error():
    data = stream_of([(SAMPLE, 1, b"abcdef")])
    demux = Demux("node9", lambda *a: None, lambda *a: None)
    demux.feed(data[:-2])
    with pytest.raises(RuntimeError, match="from node9 ended inside a record"):
        demux.finish()
    with pytest.raises(RuntimeError, match="from node9 is corrupt"):
        Demux("node9", lambda *a: None, lambda *a: None).feed(stream_of([(9, 1, b"x")]))


def test_a_pass_of_several_splits_sends_each_sample_to_its_splits_spills():
    """winter21's first job: val and train from one inflation, in one stream; a SPLIT record says whose
    samples follow (a stream starts in its pass's first split)."""
    records = [(SAMPLE, 4, b"v0"), (SPLIT, 1, b""), (SAMPLE, 4, b"t0"), (SAMPLE, 2, b"t1"), (SPLIT, 0, b""),
               (SAMPLE, 3, b"v1"), (OUTCOME, 0, b"outcomes")]
    got, outcomes = [], []
    demux = Demux("node9", lambda bucket, body, split: got.append((split, bucket, bytes(body))),
                  lambda part, body: outcomes.append(bytes(body)))
    demux.feed(stream_of(records))
    demux.finish()
    assert got == [(0, 4, b"v0"), (1, 4, b"t0"), (1, 2, b"t1"), (0, 3, b"v1")] and outcomes == [b"outcomes"]


def test_a_part_stream_is_written_in_segments_and_sent_as_they_come(tmp_path):
    """The sender reads a part's segments while its worker writes them: the worker waits while PENDING of
    them are unsent, so a part of any size holds a few segments of --dest, never itself whole."""
    import threading
    from concurrent.futures import Future

    from prepare.exchange import PartStream, part_segments

    samples = [{"__key__": f"k{i}", "jpg": bytes([i]) * 1000} for i in range(60)]
    path, written, most_on_disk = tmp_path / "000003.stream", Future(), []

    def worker():
        with PartStream(path, pending=2, segment_bytes=4000) as out:
            for i, sample in enumerate(samples):
                out.for_split(i % 2).write(i, sample)
            out.finish(3, ["outcome"])
        written.set_result(None)

    thread = threading.Thread(target=worker)
    thread.start()
    received, outcomes = [], []
    demux = Demux("here", lambda bucket, body, split: received.append((split, bucket, pickle.loads(body))),
                  lambda part, body: outcomes.append((part, pickle.loads(body))))
    segments = 0
    for segment in part_segments(path, written):
        time.sleep(0.02)  # a slow exchange: the worker must wait for it
        most_on_disk.append(len([f for f in tmp_path.iterdir() if not f.name.endswith(".partial")]))
        demux.feed(segment.read_bytes())
        segment.unlink()
        segments += 1
    thread.join()
    demux.finish()
    assert received == [(i % 2, i, sample) for i, sample in enumerate(samples)] and outcomes == [(3, ["outcome"])]
    assert segments >= 10 and max(most_on_disk) <= 2 and not list(tmp_path.iterdir())


def test_a_worker_waiting_to_stream_stops_when_the_failed_run_removes_its_folder(tmp_path):
    from prepare.exchange import PartStream

    work = tmp_path / "parts"
    work.mkdir()
    import threading

    threading.Timer(0.2, shutil.rmtree, (work,)).start()  # the run failed: its clean-up removes the scratch
    with pytest.raises(FileNotFoundError):
        with PartStream(work / "000000.stream", pending=1, segment_bytes=10) as out:
            out.write(0, {"__key__": "a", "jpg": b"x" * 100})  # a whole segment: the next waits for the sender
            out.write(0, {"__key__": "b", "jpg": b"x" * 100})


@pytest.mark.parametrize("nodes, expected", [(2, 4 << 20), (16, 4 << 20), (17, 4 << 20), (65, 1 << 20),
                                             (257, 256 << 10), (10_000, 256 << 10)])
def test_a_rounds_receive_buffers_stay_within_64_mib_up_to_257_nodes(nodes, expected):
    assert chunk_bytes(nodes) == expected
    assert (nodes - 1) * chunk_bytes(nodes) <= 64 << 20 or nodes > 257


# ---------------------------------------------------------------- the group, from srun's variables

STEP = {"SLURM_STEP_NUM_NODES": "3", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "gpu[07-08],cpu1",
        "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu08"}


def test_the_group_is_the_steps_nodes_with_the_first_as_rendezvous():
    env = node_group_env(STEP)
    assert (env.rank, env.size, env.addr, env.node) == (1, 3, "gpu07", "gpu08")
    assert env.port == slurm_port(4242, 0, "prepare")
    assert PORT_RANGES["prepare"] <= env.port < PORT_RANGES["prepare"] + PORT_SPAN


@pytest.mark.parametrize("environ", [{}, {**STEP, "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "gpu07",
                                          "SLURM_NODEID": "0"},
                                     {k: v for k, v in STEP.items() if k != "SLURM_STEP_NUM_NODES"}])
def test_without_an_srun_step_over_several_nodes_a_node_reads_alone(environ):
    assert node_group_env(environ) is None


def test_a_nodes_rank_is_its_place_in_the_node_list_where_the_node_ids_follow_a_heterogeneous_jobs_components():
    """srun --het-group=0,1 with component 0 on node2 (SLURM 22.05's variables): SLURM_NODEID 0 is node2, but the
    rendezvous is the sorted node list's first, node1. Node2 held the store as rank 0 while node1 knocked at node1
    until the rendezvous timed out (on the local cluster both names are this machine: it worked by chance)."""
    het = {"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_JOB_ID": "268",
           "SLURM_STEP_ID": "0", "SLURM_HET_SIZE": "2"}
    node2 = node_group_env({**het, "SLURM_NODEID": "0", "SLURMD_NODENAME": "node2"})
    node1 = node_group_env({**het, "SLURM_NODEID": "1", "SLURMD_NODENAME": "node1"})
    assert (node1.rank, node1.addr, node2.rank, node2.addr) == (0, "node1", 1, "node1")


def test_a_node_list_that_contradicts_the_step_is_refused():
    with pytest.raises(SlurmEnvError, match="do not match SLURM_STEP_NUM_NODES=3"):
        node_group_env({**STEP, "SLURM_STEP_NODELIST": "gpu[07-08]"})
    with pytest.raises(SlurmEnvError, match="do not match"):
        node_group_env({**STEP, "SLURM_NODEID": "3"})


# ---------------------------------------------------------------- nodes as processes, over gloo

def node_env(rank: int, nodes: int, job: int) -> dict:
    """What srun gives the task of node `rank`: these processes all run here, so the node list
    names this machine twice (hostlist would fold 'localhost,localhost' into one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    return {**env, "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_NODEID": str(rank), "SLURM_JOB_ID": str(job),
            "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank), "SLURM_LOCALID": "0", "SLURMD_NODENAME": f"n{rank}",
            "SLURM_STEP_NODELIST": ",".join(["127.0.0.1", "localhost", "127.0.0.2"][:nodes])}


def start_nodes(source: Path, dests: list[Path], *extra, workers: int = 1, per_node: list[list] | None = None,
                cold: bool = False) -> list[subprocess.Popen | warm.Popen]:
    """A `python -m prepare` process a node, forked warm (torch, which the group needs, imported
    already) unless `cold`: a warm one's torch has read TORCH_CPP_LOG_LEVEL as the server started,
    so the check that a peer's death leaves no C++ lines in the survivors' logs needs cold ones."""
    job = random.Random().randrange(10**6)  # a port of its own, clear of earlier runs' sockets
    procs = []
    for rank, dest in enumerate(dests):
        args = ["--source", source, "--dest", dest, "--shard-size", SHARD_MB, "--workers", workers,
                "--group-timeout", 60, *extra, *(per_node[rank] if per_node else [])]
        env = node_env(rank, len(dests), job)
        if cold:
            procs.append(subprocess.Popen([sys.executable, "-m", "prepare", *map(str, args)], cwd=ROOT, env=env,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
        else:  # a new session, as the cold ones: a node and its workers can be paused together
            procs.append(warm.Popen("prepare", args, env=env, cwd=ROOT, new_session=True))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[tuple[int, str]]:
    """Each node's exit code and log; nodes still running after `timeout` are killed, and their logs
    so far make the failure's message (a hang must say where each node was)."""
    deadline = time.monotonic() + timeout
    try:
        logs = [p.communicate(timeout=max(0.0, deadline - time.monotonic()))[1] for p in procs]
    except subprocess.TimeoutExpired:
        codes = [p.poll() for p in procs]
        for p in procs:
            p.kill()
        logs = [p.communicate()[1] for p in procs]
        raise AssertionError(f"nodes still running after {timeout} s:\n" + "\n".join(
            f"--- node {rank} ({'running' if code is None else f'exit {code}'}):\n{log[-3000:]}"
            for rank, (code, log) in enumerate(zip(codes, logs)))) from None
    return [(p.returncode, log) for p, log in zip(procs, logs)]


def errors_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if " ERROR " in line]


def manifest_without_run_stats(dest: Path) -> dict:
    manifest = json.loads((dest / "manifest.json").read_text())
    return {k: v for k, v in manifest.items() if k != "stats"}


@pytest.fixture(scope="module")
def one_node(sources, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("one-node") / "imagenet"
    assert run_module("prepare", "--source", sources["official"], "--dest", dest, "--shard-size", SHARD_MB,
                      "--workers", 1).returncode == 0
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [2, 3])
def test_nodes_each_read_a_share_and_all_write_the_bytes_of_a_one_node_prepare(sources, one_node, tmp_path, nodes):
    dests = [tmp_path / f"n{rank}" for rank in range(nodes)]
    results = finish(start_nodes(sources["official"], dests, workers=2))
    assert [code for code, _ in results] == [0] * nodes, results
    reads = []
    for dest, (_, log) in zip(dests, results):
        assert tree_bytes(dest) == tree_bytes(one_node)
        assert manifest_without_run_stats(dest) == manifest_without_run_stats(one_node)
        stats = read_complete_manifest(dest).stats
        reads.append(stats["read_from_source_bytes"])
        assert stats["nodes"] == nodes and stats["received_from_nodes_bytes"] > 0
        assert f"shared read: {nodes} of {nodes} nodes" in log and "train: read" in log
        assert not (dest / ".prepare-tmp").exists()
    whole = read_complete_manifest(one_node).stats["read_from_source_bytes"]
    assert sum(reads) == whole and min(reads) > 0.6 * whole / nodes  # 6 class tars of similar size, and val


@pytest.mark.slow
def test_a_node_that_holds_the_dataset_still_reads_its_share_and_only_the_other_receives(sources, one_node,
                                                                                       tmp_path):
    holder, needer = tmp_path / "n0", tmp_path / "n1"
    shutil.copytree(one_node, holder)
    before = {p: p.stat().st_mtime_ns for p in holder.rglob("*.tar")}
    results = finish(start_nodes(sources["official"], [holder, needer]))
    assert [code for code, _ in results] == [0, 0], results
    assert "n1 needs the dataset" in results[0][1] and "served: read" in results[0][1]
    assert {p: p.stat().st_mtime_ns for p in holder.rglob("*.tar")} == before  # the holder wrote nothing
    assert not (holder / ".prepare-tmp").exists()
    assert tree_bytes(needer) == tree_bytes(one_node)
    stats = read_complete_manifest(needer).stats
    whole = read_complete_manifest(one_node).stats["read_from_source_bytes"]
    assert 0 < stats["read_from_source_bytes"] < whole and stats["received_from_nodes_bytes"] > 0


@pytest.mark.slow
def test_when_every_node_holds_the_dataset_nothing_is_read(sources, one_node, tmp_path):
    dests = [tmp_path / "n0", tmp_path / "n1"]
    for dest in dests:
        shutil.copytree(one_node, dest)
    results = finish(start_nodes(sources["official"], dests))
    assert [code for code, _ in results] == [0, 0], results
    assert all("nothing to do" in log and "shared read" not in log for _, log in results)


@pytest.mark.slow
def test_a_damaged_part_stops_every_node_with_its_one_line_error(sources, tmp_path):
    source = copy_official(sources, tmp_path)
    name = truncate_second_class_tar(source)
    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(source, dests))
    assert [code for code, _ in results] == [2, 2], results
    errors = [errors_in(log) for _, log in results]
    assert all(len(e) == 1 and f"{name} is truncated" in e[0] for e in errors), errors
    assert sum("failed: " in e[0] for e in errors) == 1  # the other node names the one where it happened
    assert all("Traceback" not in log for _, log in results)
    for dest in dests:
        assert not (dest / "manifest.json").exists() and not (dest / ".prepare-tmp").exists()
        assert not any((dest / "train").iterdir())


@pytest.mark.slow
def test_a_bad_image_stops_every_node_as_soon_as_its_part_is_read(sources, tmp_path):
    """Without --skip-bad, the node that reads the part stops the run there (one node's prepare
    stops on it too); every node names the image."""
    source = copy_official(sources, tmp_path)
    bad = {"key": replace_an_image_with_junk(source)}
    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(source, dests))
    assert [code for code, _ in results] == [2, 2], results
    errors = [errors_in(log)[0] for _, log in results]
    assert all(f"{bad['key']}.JPEG does not decode" in e and "--skip-bad" in e for e in errors), errors
    assert sum(" failed: " in e for e in errors) == 1  # found by its reader, announced to the other
    results = finish(start_nodes(source, dests, "--skip-bad"))
    assert [code for code, _ in results] == [0, 0], results
    assert all(list(read_complete_manifest(d).skipped) == [bad["key"]] for d in dests)


@pytest.mark.slow
def test_damaged_jpegs_reach_every_nodes_manifest_as_in_a_one_node_prepare(sources, images, tmp_path):
    """A damaged JPEG is found by the node that reads its part; every node names it in its log and
    lists it in its manifest (as `damaged`, or with --skip-bad as `skipped`), as one node alone does."""
    source, (key,), _ = damaged_val_source(sources, images, tmp_path)
    for extra in ([], ["--skip-bad"]):
        reference = tmp_path / f"one{len(extra)}"
        alone = run_module("prepare", "--source", source, "--dest", reference, "--shard-size", SHARD_MB,
                           "--workers", 1, *extra)
        assert alone.returncode == 0, alone.stderr
        manifest = read_complete_manifest(reference)
        if extra:
            assert list(manifest.skipped) == [key] and PREMATURE_END in manifest.skipped[key] and not manifest.damaged
        else:
            assert manifest.damaged == {key: PREMATURE_END} and not manifest.skipped
        dests = [tmp_path / f"n{rank}-{len(extra)}" for rank in range(2)]
        results = finish(start_nodes(source, dests, *extra, workers=2))
        assert [code for code, _ in results] == [0, 0], results
        for dest, (_, log) in zip(dests, results):
            assert manifest_without_run_stats(dest) == manifest_without_run_stats(reference)
            assert tree_bytes(dest) == tree_bytes(reference)
            assert f"{key}.JPEG: " in log and PREMATURE_END in log, log


@pytest.mark.slow
def test_a_node_refusing_its_destination_stops_the_others_before_anything_is_read(sources, one_node, tmp_path):
    dests = [tmp_path / "n0", tmp_path / "n1"]
    shutil.copytree(one_node, dests[1])
    results = finish(start_nodes(sources["official"], dests, "--seed", 1))  # n1's dataset has seed 0
    assert [code for code, _ in results] == [2, 2], results
    assert "was prepared differently: seed was 0, now 1" in errors_in(results[1][1])[0]
    assert errors_in(results[0][1])[0].split(" ERROR ")[1].startswith("n1 failed: ")
    assert "prepared differently" in errors_in(results[0][1])[0]
    assert not (dests[0] / ".prepare-tmp").exists() and not any((dests[0] / "train").iterdir())


@pytest.mark.slow
def test_a_loader_reading_one_nodes_dataset_stops_every_nodes_force_before_any_removes_its_own(sources, one_node,
                                                                                              tmp_path):
    """A --force on two nodes while a loader reads n1's dataset: n1 refused in its build, after the nodes had agreed to
    rebuild, and n0 had removed its own dataset by then. The readers lock is taken as the nodes compare what they hold:
    both stop, naming n1's reader in one line, and n0's dataset stays as it was (nor says it was being replaced)."""
    from train import ImageNetLoader

    dests = [tmp_path / "n0", tmp_path / "n1"]
    for dest in dests:
        shutil.copytree(one_node, dest)
    with ImageNetLoader(dests[1], "train", batch_size=4, image_size=32, device="cpu", workers=1):
        results = finish(start_nodes(sources["official"], dests, "--force", "--seed", 1))  # their datasets: seed 0
    assert [code for code, _ in results] == [2, 2], results
    reader = f"{dests[1]} is being read by a training run or loader on this node (pid {os.getpid()})"
    (refused,) = errors_in(results[1][1])
    assert reader in refused
    (error,) = errors_in(results[0][1])
    assert error.split(" ERROR ")[1].startswith(f"n1 failed: {reader}"), error
    for dest in dests:
        assert tree_bytes(dest) == tree_bytes(one_node) and (dest / "manifest.json").exists()
    assert all("replacing the dataset" not in log for _, log in results), results


def wait_for(condition, procs, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "the run ended first"
        time.sleep(0.002)


@pytest.mark.slow
def test_a_node_killed_mid_exchange_stops_the_other_which_names_it_and_a_rerun_completes(tmp_path):
    source = big_source(tmp_path)
    dests = [tmp_path / "n0", tmp_path / "n1"]
    procs = start_nodes(source, dests, "--shard-size", 0.5)
    wait_for(lambda: any((dests[0] / ".prepare-tmp" / "train").glob("bucket-*")), procs)
    os.kill(procs[1].pid, signal.SIGKILL)
    start = time.monotonic()
    code, log = finish(procs[:1], timeout=60)[0]
    assert code == 2 and time.monotonic() - start < 30, log
    errors = errors_in(log)
    assert len(errors) == 1 and "n1 stopped answering" in errors[0] and "rerun" in errors[0], log
    assert "Traceback" not in log
    assert not (dests[0] / ".prepare-tmp").exists()  # the survivor removed its scratch
    assert (dests[1] / ".prepare-tmp").exists()  # the killed one left its own, for the rerun
    procs[1].communicate()
    results = finish(start_nodes(source, dests, "--shard-size", 0.5))
    assert [c for c, _ in results] == [0, 0], results
    reference = tmp_path / "reference"
    assert run_module("prepare", "--source", source, "--dest", reference, "--shard-size", 0.5).returncode == 0
    assert tree_bytes(dests[0]) == tree_bytes(dests[1]) == tree_bytes(reference)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["at the start", "mid-exchange"])
def test_a_disk_too_small_or_filling_on_one_node_stops_both_in_one_line(tmp_path, when):
    from test_prepare import fill_while_paused, small_tmpfs

    source = tmp_path / "source"
    write_sample(source, "official", SampleSpec(classes=6, train_per_class=120, val_per_class=20, max_width=320))
    mount = tmp_path / "small"
    reason = small_tmpfs(mount, 80 if when == "mid-exchange" else 10)
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the full-disk test, but: {reason}")
        pytest.skip(reason)
    try:
        dests = [tmp_path / "n0", mount / "imagenet"]
        procs = start_nodes(source, dests, "--shard-size", 0.5)
        if when == "mid-exchange":
            wait_for(lambda: any((dests[1] / ".prepare-tmp" / "train").glob("bucket-*")), procs)
            fill_while_paused(procs[1], mount)
        results = finish(procs)
        assert [c for c, _ in results] == [2, 2], results
        full, other = errors_in(results[1][1]), errors_in(results[0][1])
        said = "ran out of space while" if when == "mid-exchange" else "has 0.01 GB free; the dataset"
        assert len(full) == 1 and f"{dests[1]} {said}" in full[0], results[1][1]
        assert len(other) == 1 and f"n1 failed: {dests[1]} {said}" in other[0], results[0][1]
        for dest in dests:
            assert not (dest / ".prepare-tmp").exists() and not (dest / "manifest.json").exists()
    finally:
        subprocess.run(["umount", mount], check=True)


@pytest.mark.slow
def test_a_node_without_room_stops_every_nodes_force_before_any_removes_its_own(sources, one_node, tmp_path):
    """--force on two nodes where n1's --dest has no room for the build: n1 refused in its build, after the nodes had
    agreed to rebuild, and n0 had removed its own dataset by then. The room is checked as the nodes compare what they
    hold: both stop, naming n1's disk in one line, and n0's dataset stays as it was."""
    from test_prepare import a_small_disk

    n0 = tmp_path / "n0"
    shutil.copytree(one_node, n0)
    with a_small_disk(tmp_path / "small", 10) as mount:
        dests = [n0, mount / "imagenet"]
        results = finish(start_nodes(sources["official"], dests, "--force", "--seed", 1))  # n0's dataset: seed 0
        assert [code for code, _ in results] == [2, 2], results
        said = f"{dests[1]} has 0.01 GB free; the dataset"
        (full,), (other,) = errors_in(results[1][1]), errors_in(results[0][1])
        assert said in full and f"n1 failed: {said}" in other, results
        assert not (dests[1] / "manifest.json").exists() and not (dests[1] / ".prepare-tmp").exists()
    assert tree_bytes(n0) == tree_bytes(one_node) and (n0 / "manifest.json").exists()


# ---------------------------------------------------------------- agreeing before anything is read

@pytest.mark.slow
def test_a_node_that_cannot_set_up_stops_the_others_at_once_with_its_reason(sources, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    dests = [tmp_path / "n0", tmp_path / "a-file" / "imagenet"]
    start = time.monotonic()
    results = finish(start_nodes(sources["official"], dests))
    assert [code for code, _ in results] == [2, 2], results
    assert time.monotonic() - start < 30  # not the group timeout (60 s here, 30 min by default)
    assert "cannot create --dest" in errors_in(results[1][1])[0]
    (error,) = errors_in(results[0][1])
    assert "n1 failed: cannot create --dest" in error and "Not a directory" in error
    assert not (dests[0] / ".prepare-tmp").exists() and not any((dests[0] / "train").iterdir())


@pytest.mark.slow
def test_a_dest_that_is_one_folder_on_two_nodes_is_refused_on_both(sources, tmp_path):
    dest = tmp_path / "shared-storage" / "imagenet"
    start = time.monotonic()
    results = finish(start_nodes(sources["official"], [dest, dest]))
    assert [code for code, _ in results] == [2, 2], results
    assert time.monotonic() - start < 30
    for _, log in results:
        (error,) = errors_in(log)
        assert f"--dest {dest} is one directory on nodes n0, n1" in error and "--no-shared-read" in error
    assert not (dest / "manifest.json").exists()


@pytest.mark.slow
def test_nodes_that_would_build_different_datasets_are_refused(sources, tmp_path):
    dests = [tmp_path / "n0", tmp_path / "n1"]
    results = finish(start_nodes(sources["official"], dests, per_node=[[], ["--quality", 80]]))
    assert [code for code, _ in results] == [2, 2], results
    for dest, (_, log) in zip(dests, results):
        (error,) = errors_in(log)
        assert "nodes n1 see another source or other options than n0" in error
        assert not (dest / "manifest.json").exists() and not (dest / ".prepare-tmp").exists()


@pytest.mark.slow
def test_further_tasks_of_a_node_wait_for_its_first_task_then_verify(sources, one_node, tmp_path):
    dests = [tmp_path / "n0", tmp_path / "n1"]
    job = random.Random().randrange(10**6)
    args = ["--source", sources["official"], "--shard-size", SHARD_MB, "--workers", 1, "--group-timeout", 60]

    def task(rank: int, local: int) -> warm.Popen:
        env = {**node_env(rank, 2, job), "SLURM_LOCALID": str(local)}
        return warm.Popen("prepare", [*args, "--dest", dests[rank]], env=env, cwd=ROOT)

    early = task(0, 1)  # before the node's first task has even started
    time.sleep(1)
    firsts = [task(0, 0), task(1, 0)]
    results = finish(firsts)
    assert [code for code, _ in results] == [0, 0], results
    late = task(1, 1)  # after it has finished
    for proc in (early, late):
        code, log = finish([proc], timeout=60)[0]
        assert code == 0 and "the node's first task prepares" in log and "shared read" not in log, log
    assert tree_bytes(dests[0]) == tree_bytes(dests[1]) == tree_bytes(one_node)


def test_a_requeued_jobs_step_is_told_from_the_same_step_of_its_earlier_start():
    """A requeued job keeps its id and numbers its steps from 0 again: the mark its failed start left in --dest
    must not pass for this start's (the node's further tasks reported the old failure and exited 2)."""
    assert node_group_env(STEP).step == "4242.0" == node_group_env({**STEP, "SLURM_RESTART_COUNT": "0"}).step
    assert node_group_env({**STEP, "SLURM_RESTART_COUNT": "2"}).step == "4242.0 restart 2"


@pytest.mark.slow
def test_further_tasks_wait_for_this_starts_first_task_not_a_requeued_jobs_earlier_one(sources, one_node, tmp_path):
    """The first start failed (a stray file in n0's --dest): its mark says so. The job is requeued, the stray file
    gone: the node's further task waits for this start's first task and verifies, as the others succeed."""
    dests = [tmp_path / "n0", tmp_path / "n1"]
    (dests[0] / "train").mkdir(parents=True)
    (dests[0] / "train" / "stray.txt").write_text("not prepare's")
    job = random.Random().randrange(10**6)

    def task(rank: int, local: int, restart: int) -> warm.Popen:
        env = {**node_env(rank, 2, job), "SLURM_LOCALID": str(local), "SLURM_RESTART_COUNT": str(restart)}
        return warm.Popen("prepare", ["--source", sources["official"], "--dest", dests[rank], "--shard-size", SHARD_MB,
                                      "--workers", 1, "--group-timeout", 60], env=env, cwd=ROOT)

    first = finish([task(0, 0, 0), task(1, 0, 0)])
    assert [code for code, _ in first] == [2, 2] and "stray.txt" in first[0][1], first
    assert json.loads((dests[0] / ".prepare-step").read_text())["state"] == "failed"
    (dests[0] / "train" / "stray.txt").unlink()
    further = task(0, 1, 1)  # the requeue's: before its first task has started
    time.sleep(1)
    results = finish([task(0, 0, 1), task(1, 0, 1), further])
    assert [code for code, _ in results] == [0, 0, 0], results
    assert "the node's first task prepares" in results[2][1]
    assert tree_bytes(dests[0]) == tree_bytes(dests[1]) == tree_bytes(one_node)


@pytest.mark.slow
def test_a_first_task_that_fails_at_the_rendezvous_is_reported_by_its_nodes_other_tasks_at_once(sources, tmp_path):
    """The rendezvous was outside the failure's mark: a node's further task waited the whole --group-timeout, then
    said its first task 'did not start'. The port taken by another program fails the rendezvous at once."""
    import socket

    from shards.slurm import slurm_port

    dest, job = tmp_path / "n0", random.Random().randrange(10**6)
    taken = socket.socket()
    taken.bind(("0.0.0.0", slurm_port(job, 0, "prepare")))
    taken.listen()
    try:
        def task(local: int) -> warm.Popen:
            env = {**node_env(0, 2, job), "SLURM_LOCALID": str(local)}
            return warm.Popen("prepare", ["--source", sources["official"], "--dest", dest, "--workers", 1,
                                          "--group-timeout", 120], env=env, cwd=ROOT)

        started = time.monotonic()
        further = task(1)
        results = finish([task(0), further], timeout=90)
        assert time.monotonic() - started < 60, results
    finally:
        taken.close()
    assert [code for code, _ in results] == [2, 2], results
    (error,) = errors_in(results[1][1])
    # (the first task's own line, since the port-in-use refusal: it was 'the nodes' rendezvous at ... failed after')
    port = slurm_port(job, 0, "prepare")
    assert f"this node's first prepare task failed: n0: the nodes' rendezvous port {port} is in use on n0" in error
    assert error.endswith("or prepare each node alone with --no-shared-read")
    assert not (dest / ".prepare-node.n0").exists()


@pytest.mark.slow
def test_a_node_whose_dataset_is_complete_says_so_when_another_fails(sources, one_node, tmp_path):
    """docs/clusters.md: it reports the failure and says its dataset stays (it did only where the failure came in
    the last round, not where it came as the nodes compared what they hold)."""
    dests = [tmp_path / "n0", tmp_path / "n1"]
    shutil.copytree(one_node, dests[0])
    (dests[1] / "train").mkdir(parents=True)
    (dests[1] / "train" / "stray.txt").write_text("not prepare's")
    results = finish(start_nodes(sources["official"], dests))
    assert [code for code, _ in results] == [2, 2], results
    (error,) = errors_in(results[0][1])
    assert "n1 failed: " in error and "stray.txt" in error
    assert error.endswith(f"(this node's own dataset in {dests[0]} is complete)")
    assert tree_bytes(dests[0]) == tree_bytes(one_node)


@pytest.mark.slow
def test_a_node_whose_dest_is_full_at_its_lock_is_named_by_the_others(sources, tmp_path):
    """The lock was taken outside the failure the nodes tell each other: the other node said n1 'stopped
    answering (killed, lost, or out of time)'. A real full tmpfs as n1's --dest."""
    from test_prepare import a_small_disk, fill

    with a_small_disk(tmp_path / "full", 1) as mount:
        dests = [tmp_path / "n0", mount / "imagenet"]
        for split in ("train", "val"):
            (dests[1] / split).mkdir(parents=True)
        fill(mount)
        results = finish(start_nodes(sources["official"], dests))
        assert [code for code, _ in results] == [2, 2], results
        (error,) = errors_in(results[0][1])
        assert f"n1 failed: cannot write the lock file {dests[1] / '.prepare.lock'} (No space left on device)" in error
        left = [path.name for path in dests[1].iterdir()]
        assert not any(name.startswith((".prepare-tmp", ".prepare-step", "manifest")) for name in left), left


def test_a_census_names_the_nodes_whose_heartbeat_stopped_but_not_those_that_left_seeing_it():
    """A survivor that saw the death at once leaves (its heartbeat stops too); one that came to the round
    later and waited out --group-timeout counts the heartbeats then: the one that left said so on the store."""
    from prepare.node_group import gone_from

    assert gone_from(before=[5, 9, 7], after=[5, 9, 7], left=[0, 1, 0], rank=0) == [2]
    assert gone_from(before=[5, 9, 7], after=[8, 9, 7], left=[0, 0, 0], rank=0) == [1, 2]
    assert gone_from(before=[5, 9, 7], after=[8, 12, 9], left=[0, 0, 0], rank=1) == []


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 2])
def test_of_three_nodes_the_one_killed_is_the_one_named(tmp_path, victim):
    source = big_source(tmp_path)
    dests = [tmp_path / f"n{rank}" for rank in range(3)]
    # A survivor mostly sees the death at once; sometimes (about 1 run in 20 under load: 2026-12-02 and -06)
    # one reaches its next round after the other survivor saw the death and left, and waits there until
    # --group-timeout instead, then names the victim by the census (the survivor that left said so on the
    # store, `NodeGroup.leaving`): so a timeout the test outlasts, and the same naming either way.
    procs = start_nodes(source, dests, "--shard-size", 0.5, "--group-timeout", 20, cold=True)
    wait_for(lambda: any((dests[1] / ".prepare-tmp" / "train").glob("bucket-*")), procs)
    os.kill(procs[victim].pid, signal.SIGKILL)
    survivors = [rank for rank in range(3) if rank != victim]
    results = finish([procs[rank] for rank in survivors], timeout=60)
    procs[victim].communicate()
    for rank, (code, log) in zip(survivors, results):
        errors = errors_in(log)
        assert code == 2 and len(errors) == 1, log
        assert f"ERROR n{victim} stopped answering" in errors[0], errors[0]
        # one line each: no C++ frames or warnings from torch's store around it
        assert all(line.startswith(("[prepare", "train:", "val:")) or " [prepare n" in line
                   for line in log.splitlines()), log
        assert not (dests[rank] / ".prepare-tmp").exists()


@pytest.mark.slow
def test_a_holder_without_room_to_read_ahead_reads_nothing_and_the_others_share_its_part(sources, one_node,
                                                                                       tmp_path):
    from test_prepare import small_tmpfs

    mount = tmp_path / "small"
    reason = small_tmpfs(mount, 8)
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this test, but: {reason}")
        pytest.skip(reason)
    try:
        holder, needer = mount / "imagenet", tmp_path / "n1"
        shutil.copytree(one_node, holder)
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'other-job.bin'}", "bs=64k"], capture_output=True)
        results = finish(start_nodes(sources["official"], [holder, needer]))
        assert [code for code, _ in results] == [0, 0], results
        assert "shared read: 1 of 2 nodes read a share" in results[1][1]
        assert "served: read 0.0 MB" in results[0][1]
        assert tree_bytes(needer) == tree_bytes(one_node) and tree_bytes(holder) == tree_bytes(one_node)
        stats = read_complete_manifest(needer).stats
        assert stats["read_from_source_bytes"] == read_complete_manifest(one_node).stats["read_from_source_bytes"]
    finally:
        subprocess.run(["umount", mount], check=True)


GB = 10**9


@pytest.mark.parametrize("sizes,workers,budget,expected", [
    ([140 * 10**6] * 1000, 16, 100 * GB, 17),  # the official class tars: every worker busy, and one more
    ([140 * 10**6] * 1000, 16, 1 * GB, 5),  # a tight disk: fewer streams, 1.05 x 6 of them fit in 1 GB
    ([27 * GB] * 6, 16, 1000 * GB, 5),  # the hub's gzipped archives on a roomy disk: all the others ahead
    ([27 * GB] * 6, 16, 10 * GB, 5),  # ... on 10 GB: each is sent as it is read, a few segments on disk at a time
    ([27 * GB] * 6, 16, 2 * GB, 3),  # ... 4 streams of 6 x 64 MiB fit in 2 GB
    ([27 * GB] * 6, 1, 100 * GB, 2),  # one worker streams a part whole before it is sent: 1.05 x 3 archives
    ([27 * GB] * 6, 1, 10 * GB, 1),  # at least one, whatever the disk: then the free-space check speaks
    ([5, 1, 9, 3], 1, 100, 2),  # any order
])
def test_parts_read_ahead_keep_the_workers_busy_as_far_as_the_disk_holds_them(sizes, workers, budget, expected):
    from prepare.shared_read import parts_ahead, read_ahead_bytes

    ahead = parts_ahead(workers, sizes, budget)
    assert ahead == min(expected, workers + 1)
    assert ahead == 1 or read_ahead_bytes(sizes, ahead, workers) <= budget
    assert ahead == workers + 1 or ahead == len(sizes) - 1 or read_ahead_bytes(sizes, ahead + 1, workers) > budget


@pytest.mark.parametrize("failure", [None, PrepareError("disk full")])
def test_a_first_task_marks_how_it_ended_before_it_lets_the_nodes_lock_go(tmp_path, failure):
    """The node's other tasks poll the step file and take a free lock with a step still 'running' for
    a first task that died: the mark must come first, or a task that ended well is called killed."""
    import contextlib
    from types import SimpleNamespace

    from prepare.shared_read import mark_step, read_step, step_marker

    env, seen_at_release = SimpleNamespace(step="41.0"), []

    @contextlib.contextmanager
    def lock():
        try:
            yield
        finally:
            seen_at_release.append(read_step(tmp_path))

    with contextlib.suppress(PrepareError), contextlib.ExitStack() as stack:
        stack.enter_context(lock())
        stack.push(step_marker(tmp_path, env))
        mark_step(tmp_path, env, "running")
        if failure:
            raise failure
    expected = {"step": "41.0", "state": "failed" if failure else "done", "error": "disk full" if failure else None}
    assert seen_at_release == [expected]


def test_a_rendezvous_port_another_process_holds_is_said_so_with_what_to_do():
    """The first node could not listen on the step's port (another job's group on the node, or any other process):
    it was told as a node that never arrived."""
    import socket

    from prepare.node_group import NodeGroup, NodeGroupEnv, PeerFailed

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = NodeGroupEnv(rank=0, size=2, addr="127.0.0.1", port=port, node="gpu07", step="4242.0")
        with pytest.raises(PeerFailed) as refused:
            NodeGroup(env, 5)
    said = str(refused.value)
    assert f"port {port} is in use on gpu07" in said and "--no-shared-read" in said and "never arrived" not in said
