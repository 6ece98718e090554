"""One training crop on the CPU path, stage by stage, per image on one core (python -m train.bench.stages
without CUDA, or with --cpu).

The first --images training samples of DATA (seekable shards: prepare's default) and, with --plain,
of the same source prepared with --restart-mcus 0 (the original bytes), with the loader's
RandomResizedCrop boxes and flips (seed 0, epoch 0), 224 px. Each row is measured so:

- the decoder's stages: decode_crops told to stop after each stage (stop_after, PROFILE_STAGES:
  each does the work of those before it), a row being its stage's time less the one before's;
- the floor: the Huffman decode alone of the iMCU rows the crop reads (stop_after="entropy": of
  the seek's small JPEG, or of the whole image from its top), no IDCT; beside the decode of the rows;
- the flip: the whole crop with every flip on less with every flip off (the flip is folded into
  the horizontal pass, and the vertical pass writes the batch's slot: there is no copy);
- what the batch adds before the decode: the index lookup (ShardSet.images), the header read for
  the draws (image_sizes) and the draws (train_crops), timed as the loader calls them, a batch of
  256 at a time; and the loader's own remainder: its epoch at one thread less all the rows above;
- the fastest full decode of the original file (decoders.full_decoders on the plain shards' bytes,
  or DATA's where no --plain is given), the crop's reference per core: every full decoder installed
  here is measured, the fastest is the reference.

Every measurement runs once a round, the rounds interleaved (the decoder's stages and the full
decodes chunk by chunk, side by side); the figures are medians of CPU time (the calling thread's;
the process's for the loader), so that time spent waiting for a core on a shared machine is not
counted. With --perf the decode of the rows is split further, into Huffman, IDCT, upsampling and
colour conversion, by perf's samples of libjpeg's functions while the rows are decoded (perf must
be installed, and libjpeg's own symbols known to it: LD_LIBRARY_PATH at a libjpeg-turbo built with
-g; Debian's is stripped of its internal functions).
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from shards.manifest import read_complete_manifest
from train.bench.decoders import full_decoders
from train.decoder import decode_crops, image_sizes
from train.loader import Loader, PlanArgs
from train.shard_index import ShardSet
from train.transforms import train_crops

SIZE, BATCH = 224, 256
CHUNK = 50  # images a measurement decodes before the next measurement's turn
# (row, the stage it stops after, the stage before it)
DECODER_ROWS = (("header parse (jpeg_read_header, checks)", "header", None),
                ("the resize's filter weights", "filters", "header"),
                ("seek: the scan's walk, the small JPEG, its header", "seek", "filters"),
                ("decode of the rows: Huffman, IDCT, upsampling, colour", "pixels", "seek"),
                ("resize, horizontal pass (flip folded in)", "rows", "pixels"),
                ("resize, vertical pass, into the batch's slot", "all", "rows"))
# perf's split of the decode of the rows: libjpeg-turbo 2.x/3.x function names by what they do
PERF_GROUPS = (("Huffman decode", r"decode_mcu|fill_bit_buffer|huff_decode|process_restart|read_restart"),
               ("IDCT (and the coefficient buffer)", r"idct|decompress_onepass|decompress_data|decompress_smooth"
                                                     r"|jzero|start_iMCU_row"),
               ("upsampling", r"upsample|fullsize|h2v1|h2v2|int_upsample"),
               ("colour conversion", r"ycc|rgb|color_convert|null_convert|gray|cmyk"))


class Timings:
    """CPU seconds of each measurement, a list a name: one entry a round. CPU time, not wall time: on a
    shared machine a thread waiting for a core costs none (the calling thread's own; the process's for
    the loader, whose threads decode)."""

    def __init__(self):
        self.seconds: dict[str, list[float]] = {}

    def run(self, name: str, work: Callable[[], object], clock: Callable[[], float] = time.thread_time) -> None:
        start = clock()
        work()
        self.seconds.setdefault(name, []).append(clock() - start)

    def ms(self, name: str, count: int) -> float:
        return 1000 * statistics.median(self.seconds[name]) / count


class Dataset:
    """The first `count` training samples of a prepared dataset, their crops and the measurements of them."""

    def __init__(self, root: Path, count: int):
        self.root = root
        self.shards = ShardSet.of(root, read_complete_manifest(root), "train")
        self.ids = np.arange(min(count, sum(self.shards.sizes)))
        self.shards.ensure_indexed(self.ids)
        self.images = self.shards.images(self.ids)
        dims, _ = image_sizes(self.images)
        self.boxes, self.flips = train_crops(self.shards.hashes[self.ids], dims[:, 0], dims[:, 1], seed=0, epoch=0)
        self.out = np.zeros((len(self.ids), SIZE, SIZE, 3), np.uint8)
        self.jpegs = [self.images.data(i) for i in range(len(self.ids))]

    def __len__(self) -> int:
        return len(self.ids)

    def stage(self, stop: str, flips: np.ndarray | None = None) -> Callable[[int, int], object]:
        """Images [lo, hi)'s crops, stopped after `stop`."""
        flips = self.flips if flips is None else flips
        return lambda lo, hi: decode_crops(self.images[lo:hi], self.boxes[lo:hi], flips[lo:hi], self.out, lo,
                                           stop_after=stop)

    def batch_work(self) -> dict[str, Callable[[], object]]:
        """What the loader does for each batch before the decode, a batch of BATCH at a time."""
        batches = [self.ids[i:i + BATCH] for i in range(0, len(self.ids), BATCH)]
        looked_up = [self.shards.images(b) for b in batches]
        sized = [image_sizes(images)[0] for images in looked_up]
        hashes = [self.shards.hashes[b] for b in batches]
        return {"index lookup (ShardSet.images)": lambda: [self.shards.images(b) for b in batches],
                "header read for the draws (image_sizes)": lambda: [image_sizes(i) for i in looked_up],
                "crop draws (train_crops)": lambda: [train_crops(h, d[:, 0], d[:, 1], 0, 0)
                                                     for h, d in zip(hashes, sized)]}

    def loader_epoch(self) -> Callable[[], object]:
        """One epoch of the loader at one thread (every sample of the split, less a partial batch)."""
        total = sum(self.shards.sizes)
        batch = min(BATCH, total)
        loader = Loader({"train": self.shards}, batch_size=batch, image_size=SIZE, threads=1, decode="cpu",
                        pin_memory=False)
        args = PlanArgs(split="train", epoch=0, seed=0, world_size=1, rank=0, batch_size=batch, shuffle_buffer=1000,
                        size=SIZE)
        self.loader, self.loader_images = loader, (total // batch) * batch
        return lambda: sum(1 for _ in loader.epoch(args))


def measure(datasets: dict[str, Dataset], reference: Dataset, rounds: int) -> dict:
    """Every measurement once a round, the rounds interleaved; medians, ms per image. The decoder's
    stages and the full decodes run CHUNK images at a time, every one of them on a chunk before the
    next chunk (in an order turned by one each chunk), so that the stages whose difference is a row
    ran under the same load of the machine."""
    whole, chunked = [], []
    for label, data in datasets.items():
        for name, work in data.batch_work().items():
            whole.append((label, name, work, len(data)))
        whole.append((label, "loader epoch", data.loader_epoch(), data.loader_images))
        for stop in ("header", "filters", "seek", "entropy", "pixels", "rows", "all"):
            chunked.append((f"{label}/{stop}", data.stage(stop)))
        chunked.append((f"{label}/all, no flips", data.stage("all", np.zeros(len(data), np.bool_))))
        chunked.append((f"{label}/all, every flip", data.stage("all", np.ones(len(data), np.bool_))))
    for name, decode in full_decoders().items():
        chunked.append((f"full decode/{name}", lambda lo, hi, decode=decode: [decode(j) for j in reference.jpegs[lo:hi]]))
    timings, n = Timings(), len(reference)
    for _ in range(rounds + 1):  # the first round warms up
        for label, name, work, _count in whole:
            timings.run(f"{label}/{name}", work, time.process_time if name == "loader epoch" else time.thread_time)
        spent = {key: 0.0 for key, _work in chunked}
        for c, lo in enumerate(range(0, n, CHUNK)):
            turned = chunked[c % len(chunked):] + chunked[:c % len(chunked)]
            for key, work in turned:
                start = time.thread_time()
                work(lo, min(lo + CHUNK, n))
                spent[key] += time.thread_time() - start
        for key, seconds in spent.items():
            timings.seconds.setdefault(key, []).append(seconds)
    for times in timings.seconds.values():
        del times[0]
    ms = {f"{label}/{name}": timings.ms(f"{label}/{name}", count) for label, name, _work, count in whole}
    ms.update({key: timings.ms(key, n) for key, _work in chunked})
    for data in datasets.values():
        data.loader.close()
    fulls = {name.split("/", 1)[1]: v for name, v in ms.items() if name.startswith("full decode/")}
    fastest = min(fulls, key=fulls.get)
    return {"full_decoder": fastest, "full_decodes": fulls, "ms": ms}


def rows_of(ms: dict[str, float], label: str, perf: dict[str, float] | None) -> list[tuple[str, float]]:
    """The table's rows for one dataset: (row, ms per image)."""
    m = {name.split("/", 1)[1]: v for name, v in ms.items() if name.startswith(label + "/")}
    rows = [(name, m[name]) for name in ("index lookup (ShardSet.images)", "header read for the draws (image_sizes)",
                                         "crop draws (train_crops)")]
    for row, stop, before in DECODER_ROWS:
        rows.append((row, m[stop] - (m[before] if before else 0.0)))
        if stop == "pixels" and perf:
            rows += [(f"  {group} (its share of perf's samples)", share * rows[-1][1]) for group, share in perf.items()]
    rows.append(("flip (every flip on less every flip off)", m["all, every flip"] - m["all, no flips"]))
    before_decode = sum(v for _, v in rows[:3])
    rows.append(("the loader's remainder (its epoch at 1 thread less the rows above)",
                 m["loader epoch"] - before_decode - m["all"]))
    return rows


def perf_split(data: Dataset, seconds: float = 5.0) -> dict[str, float] | None:
    """Shares of PERF_GROUPS among perf's samples in libjpeg's decode functions while the rows of the
    crops are decoded (stop_after="pixels"), or None where perf does not run here."""
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp, "perf.data")
        try:
            perf = subprocess.Popen(["perf", "record", "-F", "2999", "-p", str(os.getpid()), "-o", str(record)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            return None
        time.sleep(1.0)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            data.stage("pixels")(0, len(data))
        perf.send_signal(signal.SIGINT)
        perf.wait()
        report = subprocess.run(["perf", "report", "-i", str(record), "--stdio", "--no-children", "--sort", "sym",
                                 "-q", "--percent-limit", "0.05"], capture_output=True, text=True).stdout
    found = {group: 0.0 for group, _ in PERF_GROUPS}
    for line in report.splitlines():
        hit = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        for group, pattern in PERF_GROUPS:
            if hit and re.search(pattern, hit.group(2)):
                found[group] += float(hit.group(1))
                break
    total = sum(found.values())
    return {group: share / total for group, share in found.items()} if total else None


def print_table(result: dict, labels: list[str]) -> None:
    ms, tables = result["ms"], {label: dict(result["rows"][label]) for label in labels}
    print(f"{'ms per image, one core':72s}" + "".join(f"{label:>12s}" for label in labels))
    for row in tables[labels[0]]:
        print(f"{row:72s}" + "".join(f"{tables[label].get(row, float('nan')):12.4f}" for label in labels))
    crop = {label: ms[f"{label}/all"] for label in labels}
    total = {label: ms[f"{label}/loader epoch"] for label in labels}
    floor = {label: ms[f"{label}/entropy"] - ms[f"{label}/seek"] for label in labels}
    full = result["full_decodes"][result["full_decoder"]]
    lines = [("the crop (decode_crops, every stage)", crop), ("the loader at 1 thread, per image", total),
             ("floor: Huffman decode alone of the same rows (no IDCT)", floor)]
    for name, values in lines:
        print(f"{name:72s}" + "".join(f"{values[label]:12.4f}" for label in labels))
    print(f"{'full decode of the original file, ' + result['full_decoder']:72s}{full:12.4f}")
    print(f"{'full decode / the crop (goal >= 2x)':72s}" + "".join(f"{full / crop[label]:11.2f}x" for label in labels))
    print(f"{'full decode / the loader per image':72s}" + "".join(f"{full / total[label]:11.2f}x" for label in labels))
    print(f"{'floor / the decode of the rows':72s}"
          + "".join(f"{floor[label] / tables[label][DECODER_ROWS[3][0]]:11.2f}x" for label in labels))


def profile(data: Path, plain: Path | None, images: int, rounds: int, with_perf: bool) -> int:
    from train.bench.report import cpu_model

    datasets = {"seekable": Dataset(data, images)}
    if plain is not None:
        datasets["plain"] = Dataset(plain, images)
        if not np.array_equal(datasets["plain"].shards.hashes[datasets["plain"].ids],
                              datasets["seekable"].shards.hashes[datasets["seekable"].ids]):
            raise SystemExit("DATA and --plain do not hold the same samples in the same order (prepare both from "
                             "one source with one seed)")
    reference = datasets.get("plain", datasets["seekable"])
    perf = {label: perf_split(d) for label, d in datasets.items()} if with_perf else {}
    result = measure(datasets, reference, rounds)  # (which closes the shards: the loaders own them)
    result["perf"] = perf
    result["rows"] = {label: rows_of(result["ms"], label, perf.get(label)) for label in datasets}
    labels = list(datasets)
    print(f"{len(reference)} training crops of {data}" + (f" and {plain}" if plain else "")
          + f", {SIZE} px, one core of {cpu_model()}; medians of {rounds} interleaved rounds")
    print_table(result, labels)
    print(json.dumps({"cpu": cpu_model(), "images": len(reference), **result}))
    return 0
