"""The native modules under hostile inputs, decoded in worker processes (tests/native_fuzz_worker.py)
restarted after a crash, so that a crash is a failure with the case named, not a dead test run.

The corpus is built here: truncations at every header byte, seeded bit and byte flips, frame
headers that lie about the size or the sampling factors (4x2, 4x1, 1x4 and impossible ones),
seekable JPEGs (prepare's rewrite with restart markers) with markers swapped, dropped, added or
replaced, restart intervals that lie, megabytes between two markers and a megabyte of header,
grids broken by an interval emptied, lost or added (the later markers renumbered), two markers
swapped or a DRI that halves the interval (at every interval in the slow run),
progressive, arithmetic-coded, CMYK, YCCK and two-component JPEGs, JPEGs of 100, 101 and 190
scans, JPEGs without their quantisation or Huffman tables next to JPEGs with optimised ones,
images at the pixel limit and one pixel over it, bytes that are no JPEG at all, boxes that are
NaN, infinite or outside the image, damaged tar shards, and calls with every argument drawn from
good and bad values (the resize's filter and the IDCT included). The corpus is decoded with each
resize filter (bilinear; bicubic, whose taps reach twice as far; area with the fast IDCT). Asserted: no crash and no hang; every image decodes to the same status and
pixels alone and in chunks of any size on several threads, and whatever garbage fresh allocations
hold (glibc's MALLOC_PERTURB_); a seekable JPEG whose markers lie decodes as with seeking off
(the same status, and pixels where decoded); no allocation past the stated bound (the workers cap
their address space at memory_bound(max_pixels) a thread over their base: a larger malloc would
fail and show as OUT_OF_MEMORY) and the peak resident memory under it. The fast subset runs the corpus with a
limit of 2**20 pixels (seconds); the slow one, more cases, real images at the dataset's own limit
(shards.limits.MAX_PIXELS) in two threads at once, and the PIL path's bytes a pixel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from PIL import Image

from conftest import ROOT
from jpegs import (DHT, DQT, broken_grids, cjpeg, cmyk, hostile_restarts, jpeg, many_scans, photo, restart_intervals,
                   segments, two_components, with_restart_interval, with_sampling, with_size, without, ycck)
from prepare.images import with_restarts
from shards.limits import MAX_PIXELS
from train import _jpegcrop, decoder

WORKER = Path(__file__).with_name("native_fuzz_worker.py")
FUZZ_PIXELS = 1 << 20  # the fast corpus's limit: images at it and just over it stay small and quick
OK, TOO_LARGE, MAX_SCANS = decoder.DECODED, decoder.TOO_LARGE, _jpegcrop.MAX_SCANS


@dataclass
class Corpus:
    names: list[str] = field(default_factory=list)
    blobs: list[bytes] = field(default_factory=list)
    boxes: dict[int, list[float]] = field(default_factory=dict)  # a case's own crop (else boxes_for's)
    as_whole: list[int] = field(default_factory=list)  # cases whose crop must be the same with seek off

    def add(self, name: str, data: bytes, box: list[float] | None = None, as_whole: bool = False) -> None:
        if box is not None:
            self.boxes[len(self.names)] = box
        if as_whole:
            self.as_whole.append(len(self.names))
        self.names.append(name)
        self.blobs.append(data)

    def index(self, name: str) -> int:
        return self.names.index(name)


def header_end(data: bytes) -> int:
    """Where the first scan's entropy-coded data starts."""
    return segments(data)[-1][2]


def bases(full: bool) -> dict[str, bytes]:
    """Valid JPEGs of every kind the corpus damages."""
    picture = photo(96, 72, seed=1)
    found = {"baseline 4:2:0": jpeg(96, 72), "progressive 4:4:4": jpeg(96, 72, progressive=True, subsampling=0),
             "optimised tables": jpeg(96, 72, optimize=True, seed=2), "arithmetic": cjpeg(picture, "-arithmetic"),
             "4x2 sampling": cjpeg(picture, "-sample", "4x2,1x1,1x1"),
             "seekable 4:2:0": with_restarts(jpeg(96, 72), 1, MAX_PIXELS)[0],
             "seekable grey": with_restarts(jpeg(96, 72, mode="L"), 2, MAX_PIXELS)[0]}
    if full:
        found |= {"grey": jpeg(96, 72, mode="L"), "4:2:2": jpeg(96, 72, subsampling=1),
                  "restart markers": jpeg(96, 72, restart=1), "EXIF": jpeg(96, 72, exif=True),
                  "4x1 sampling": cjpeg(picture, "-sample", "4x1,1x1,1x1"),
                  "1x4 sampling": cjpeg(picture, "-sample", "1x4,1x1,1x1"),
                  "progressive arithmetic 4x2": cjpeg(picture, "-progressive", "-arithmetic", "-sample", "4x2,1x1,1x1"),
                  "CMYK": cmyk(jpeg(96, 72)), "YCCK": ycck(cmyk(jpeg(96, 72, progressive=True))),
                  "two components": two_components(jpeg(96, 72))}
    return found


def build_corpus(full: bool, seed: int = 0) -> Corpus:
    rng = np.random.default_rng(seed)
    corpus = Corpus()
    found = bases(full)
    for name, data in found.items():
        corpus.add(name, data)
    truncated = found if full else {k: found[k] for k in ("baseline 4:2:0", "progressive 4:4:4", "arithmetic")}
    for name, data in truncated.items():
        end = header_end(data)
        for cut in range(end + 1):  # every header byte
            corpus.add(f"{name} cut at {cut}", data[:cut])
        for cut in np.linspace(end + 1, len(data) - 1, 12).astype(int).tolist():  # into the entropy-coded data
            corpus.add(f"{name} cut at {cut}", data[:cut])
    names = list(found)
    for k in range(30000 if full else 600):
        name = names[k % len(names)]
        data = bytearray(found[name])
        in_header = k % 2 == 0  # half the damage where the parsers are
        at = int(rng.integers(0, header_end(data) if in_header else len(data)))
        if k % 3:
            bit = int(rng.integers(8))
            data[at] ^= 1 << bit
            corpus.add(f"{name}: bit {bit} of byte {at} flipped", bytes(data))
        else:
            value = int(rng.integers(256))
            data[at] = value
            corpus.add(f"{name}: byte {at} set to {value}", bytes(data))
    for name in ("baseline 4:2:0", "progressive 4:4:4", "arithmetic", "4x2 sampling", "seekable 4:2:0"):
        for width, height in [(65500, 65500), (65500, 16), (65500, 15), (15, 65500), (0, 0), (0, 100), (1, 1),
                              (1000, 1000), (1024, 1024), (1025, 1024), (8200, 8200)]:
            corpus.add(f"{name} claiming {width} x {height}", with_size(found[name], width, height))
    for name, data in hostile_restarts(found["seekable 4:2:0"]).items():
        corpus.add(name, data, as_whole=True)
    add_broken_grids(corpus, full)
    baseline = found["baseline 4:2:0"]
    for factors in [[(4, 2), (1, 1), (1, 1)], [(4, 1), (1, 1), (1, 1)], [(1, 4), (1, 1), (1, 1)], [(4, 4), (1, 1), (1, 1)],
                    [(3, 3), (1, 1), (1, 1)], [(0, 1), (1, 1), (1, 1)], [(1, 1), (4, 2), (1, 1)], [(2, 2), (2, 2), (2, 2)],
                    [(15, 15), (1, 1), (1, 1)]]:
        label = ", ".join(f"{h}x{v}" for h, v in factors)
        corpus.add(f"claiming sampling {label}", with_sampling(baseline, factors))
        corpus.add(f"claiming sampling {label} and 65500 x 15", with_sampling(with_size(baseline, 65500, 15), factors))
    standard = jpeg(96, 72, seed=3)
    for k, data in enumerate([without(standard, DQT), without(standard, DHT), without(without(standard, DQT), DHT),
                              without(found["progressive 4:4:4"], DHT), without(found["arithmetic"], DQT)]):
        corpus.add(f"optimised tables before abbreviated {k}", jpeg(64, 48, optimize=True, seed=10 + k, quality=50 + k))
        corpus.add(f"abbreviated {k}", data)
    at_limit = Image.new("RGB", (1024, 1024), (90, 140, 30))
    for progressive in (False, True):
        for width, height in [(1024, 1024), (1025, 1024)]:
            image = at_limit.resize((width, height))
            data = _encode(image, progressive=progressive, subsampling=0)
            corpus.add(f"real {width} x {height}{' progressive' if progressive else ''}", data)
    picture = photo(64, 48, seed=4)
    for scans in (MAX_SCANS, MAX_SCANS + 1, 190):
        corpus.add(f"{scans} scans", many_scans(picture, scans))
    for name, data in [("empty", b""), ("SOI only", b"\xff\xd8"), ("SOI EOI", b"\xff\xd8\xff\xd9"),
                       ("zeros", bytes(300)), ("random", rng.bytes(2000)), ("SOI + random", b"\xff\xd8" + rng.bytes(2000)),
                       ("PNG", _encode(photo(40, 30), format="PNG")), ("GIF", _encode(photo(40, 30), format="GIF")),
                       ("tables only", without(standard, 0xC0)[:header_end(standard) - 20] + b"\xff\xd9")]:
        corpus.add(name, data)
    return corpus


def add_broken_grids(corpus: Corpus, full: bool) -> None:
    """Seekable JPEGs (intervals of 2 MCUs, 12 MCUs a row) whose grid is not the one their header
    promises (tests/jpegs.py's broken_grids; in the slow run at every interval, with every other
    restart interval that divides a row, and a random box more), cropped above, over and below the
    damage: the seek must give the whole image path's status and pixels."""
    rng = np.random.default_rng(1)
    shares = [(0.1, 0.0, 0.5, 0.25), (0.0, 0.3, 0.3, 0.5), (0.4, 0.5, 0.9, 0.8), (0.0, 0.8, 0.5, 1.0)]
    for name, (data, width, height) in {"grey": (with_restarts(jpeg(96, 72, mode="L"), 2, MAX_PIXELS)[0], 96, 72),
                                        "4:2:0": (with_restarts(jpeg(192, 144), 2, MAX_PIXELS)[0], 192, 144)}.items():
        intervals = len(restart_intervals(data)[1])
        damaged = {}
        for at in range(intervals - 2) if full else (1, intervals // 2, intervals - 3):
            damaged |= {f"seekable {name}, {kind} at {at}": bad for kind, bad in broken_grids(data, at).items()}
        for mcus in (1, 3, 4, 6, 12) if full else ():
            damaged[f"seekable {name}, a DRI of {mcus}"] = with_restart_interval(data, mcus)
        for label, bad in damaged.items():
            boxes = list(shares)
            if full:
                (left, right), (top, bottom) = np.sort(rng.uniform(0, 1, (2, 2)), axis=1).tolist()
                boxes.append((left, top, right, bottom))
            for left, top, right, bottom in boxes:
                box = [left * width, top * height, right * width, bottom * height]
                corpus.add(f"{label}, box {[round(v) for v in box]}", bad, box=box, as_whole=True)


def _encode(image: Image.Image, format: str = "JPEG", **options) -> bytes:
    import io

    out = io.BytesIO()
    image.save(out, format, **options)
    return out.getvalue()


def boxes_for(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A crop per case: whole images, boxes inside and outside, NaN, infinite, reversed, tiny."""
    rng = np.random.default_rng(seed)
    kinds = [[0, 0, 1e9, 1e9], [np.nan, 0, 10, 10], [-5, -5, 20, 20], [0, 0, np.inf, np.inf], [30, 30, 10, 10],
             [10, 10, 10.001, 10.001], [0, 0, 65500, 65500]]
    boxes = np.empty((n, 4), np.float32)
    for i in range(n):
        if i % 3 == 0:
            boxes[i] = kinds[(i // 3) % len(kinds)]
        else:
            left, top = rng.uniform(0, 60, 2)
            boxes[i] = [left, top, left + rng.uniform(1, 90), top + rng.uniform(1, 70)]
    return boxes, rng.integers(0, 2, n).astype(bool)


def shard_bytes(tmp_path: Path) -> bytes:
    path = tmp_path / "shard.tar"
    with wds.TarWriter(str(path), encoder=False) as writer:
        for k in range(5):
            writer.write({"__key__": f"key{k}", "jpg": jpeg(40, 30, seed=k), "cls": str(k).encode(), "json": b"{}"})
    return path.read_bytes()


def write_corpus(corpus: Corpus, tmp_path: Path, seed: int, tar_flips: int) -> Path:
    lengths = np.array([len(b) for b in corpus.blobs], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    boxes, flips = boxes_for(len(corpus.blobs), seed)
    for case, box in corpus.boxes.items():
        boxes[case] = box
    tar = shard_bytes(tmp_path)
    cuts = sorted(set(range(0, 1100)) | {c + d for c in range(512, len(tar), 512) for d in (-1, 0, 1)})
    rng = np.random.default_rng(seed)
    flips_at = np.stack([rng.integers(0, len(tar), tar_flips), rng.integers(0, 8, tar_flips)], axis=1)
    path = tmp_path / "corpus.npz"
    np.savez(path, blob=np.frombuffer(b"".join(corpus.blobs), np.uint8), offsets=offsets, lengths=lengths, boxes=boxes,
             flips=flips, tar=np.frombuffer(tar, np.uint8), tar_cuts=np.array([c for c in cuts if c <= len(tar)]),
             tar_flips=flips_at, as_whole=np.isin(np.arange(len(corpus.blobs)), corpus.as_whole))
    return path


@dataclass
class Report:
    statuses: dict[int, int] = field(default_factory=dict)
    digests: dict[int, str] = field(default_factory=dict)  # of each case's slot, decoded alone
    rewrites: dict[int, list] = field(default_factory=dict)  # prepare's rewrite with restart markers: status, digest
    lossy: list[int] = field(default_factory=list)  # rewritten, but the seek's crop differs from the original's
    not_as_whole: list[int] = field(default_factory=list)  # of Corpus.as_whole: other than with seek off
    differ: list[int] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    memory: list[tuple[int, int]] = field(default_factory=list)  # (base, peak) of each worker process
    tar_cases: int = 0
    argument_calls: int = 0


def run_worker(corpus_path: Path, count: int, tmp_path: Path, *, max_pixels: int, threads: int, size: int,
               timeout: float, perturb: int = 0, interpolation: str = "bilinear", fast_dct: bool = False) -> Report:
    """The corpus through worker processes: a crash or a hang is recorded with the case it was on,
    and the next process starts after it. `perturb`: glibc fills every allocation with this byte's
    complement (MALLOC_PERTURB_), so a result that read memory no one wrote shows as a change.
    `interpolation` and `fast_dct`: the resize's filter and the IDCT of every crop."""
    report, start, run = Report(), 0, 0
    env = {**os.environ, "MALLOC_PERTURB_": str(perturb)} if perturb else None
    while True:
        results = tmp_path / f"results{run}-{perturb}-{interpolation}-{int(fast_dct)}.jsonl"
        command = [sys.executable, str(WORKER), str(corpus_path), str(start), str(results), str(max_pixels), str(threads),
                   str(size), interpolation, str(int(fast_dct))]
        try:
            returncode = subprocess.run(command, cwd=ROOT, timeout=timeout, capture_output=True, env=env).returncode
            how = f"exit status {returncode}"
        except subprocess.TimeoutExpired:
            returncode, how = -1, f"no end within {timeout} s (a hang)"
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        where = None
        for record in records:
            where = record.get("next", where)
            if "case" in record:
                report.statuses[record["case"]] = record["status"]
                report.digests[record["case"]] = record["digest"]
                report.rewrites[record["case"]] = record["rewrite"]
                if record["lossless"] is False:
                    report.lossy.append(record["case"])
                if record.get("as_whole") is False:
                    report.not_as_whole.append(record["case"])
            report.differ += record.get("differ", [])
            report.tar_cases += record.get("tar_cases", 0)
            report.argument_calls += record.get("argument_calls", 0)
            if "peak_rss" in record:
                report.memory.append((record["base_rss"], record["peak_rss"]))
        if returncode == 0:
            return report
        report.crashes.append(f"{how} at {where}")
        if isinstance(where, int):
            start = where + 1
        elif isinstance(where, dict):
            start = where["chunks"][1]
        else:
            start = count + 1  # the tar cases or the random arguments: the last phases
        run += 1


def check(report: Report, corpus: Corpus, max_pixels: int, threads: int) -> None:
    named = lambda cases: [corpus.names[c] if isinstance(c, int) and c < len(corpus.names) else c for c in cases]
    assert not report.crashes, report.crashes
    assert len(report.statuses) == len(corpus.names)
    assert set(report.statuses.values()) <= {0, 1, 2, 3, 4}  # no OUT_OF_MEMORY (5): nothing past the bound
    assert {status for status, _ in report.rewrites.values()} <= {0, 1, 2, 3, 4}
    assert not report.differ, f"decoded or rewritten differently in chunks and threads: {named(report.differ)[:20]}"
    assert not report.lossy, f"rewritten with restart markers, but decoded differently: {named(report.lossy)[:20]}"
    assert not report.not_as_whole, f"a seek unlike the whole image path: {named(report.not_as_whole)[:20]}"
    bound = threads * _jpegcrop.memory_bound(max_pixels)
    for base, peak in report.memory:
        assert peak <= base + bound, f"peak RSS {peak / 2**20:.0f} MiB, base {base / 2**20:.0f} MiB + {bound / 2**20:.0f}"
    assert report.tar_cases > 1000 and report.argument_calls == 800


def expect(report: Report, corpus: Corpus, name: str) -> int:
    return report.statuses[corpus.index(name)]


# the fast corpus (fixed seeds) in the behaviour tier, every run; the full one is a release check (pytest -m release)
@pytest.mark.parametrize("full", [pytest.param(False, id="fast", marks=pytest.mark.slow),
                                  pytest.param(True, id="full", marks=[pytest.mark.slow, pytest.mark.release])])
def test_hostile_inputs_give_a_status_never_a_crash_and_the_same_pixels_in_any_chunking(tmp_path, full):
    threads = 3
    corpus = build_corpus(full)
    path = write_corpus(corpus, tmp_path, seed=0, tar_flips=2000 if full else 300)
    report = run_worker(path, len(corpus.names), tmp_path, max_pixels=FUZZ_PIXELS, threads=threads, size=24,
                        timeout=600 if full else 120)
    check(report, corpus, FUZZ_PIXELS, threads)
    perturbed = run_worker(path, len(corpus.names), tmp_path, max_pixels=FUZZ_PIXELS, threads=threads, size=24,
                           timeout=600 if full else 120, perturb=0xA5)
    check(perturbed, corpus, FUZZ_PIXELS, threads)
    changed = [corpus.names[c] for c in report.digests if perturbed.digests[c] != report.digests[c]]
    assert perturbed.statuses == report.statuses and not changed, f"pixels from memory no one wrote: {changed[:20]}"
    expect_statuses(report, corpus)
    # validation's other filters (bicubic's taps reach twice as far) and FFCV's fast IDCT: statuses
    # may differ from bilinear's where damage lies in the rows only one of them decodes
    for interpolation, fast_dct in (("bicubic", False), ("area", True)):
        other = run_worker(path, len(corpus.names), tmp_path, max_pixels=FUZZ_PIXELS, threads=threads, size=24,
                           timeout=600 if full else 120, interpolation=interpolation, fast_dct=fast_dct)
        check(other, corpus, FUZZ_PIXELS, threads)
        expect_statuses(other, corpus)


def expect_statuses(report: Report, corpus: Corpus) -> None:
    """The statuses of the cases whose outcome is known, whatever the filter."""
    for name in ("baseline 4:2:0", "progressive 4:4:4", "arithmetic", "4x2 sampling", "real 1024 x 1024",
                 "real 1024 x 1024 progressive", "abbreviated 1", "seekable 4:2:0", "seekable grey",
                 "a megabyte of header"):
        assert expect(report, corpus, name) == OK, name
    for name in ("real 1025 x 1024", "real 1025 x 1024 progressive", "baseline 4:2:0 claiming 65500 x 65500",
                 "4x2 sampling claiming 65500 x 65500", "progressive 4:4:4 claiming 1025 x 1024",
                 "4x2 sampling claiming 8200 x 8200"):
        assert expect(report, corpus, name) == TOO_LARGE, name
    assert expect(report, corpus, "abbreviated 0") == decoder.CORRUPT  # no quantisation tables, as alone
    assert expect(report, corpus, "PNG") == decoder.NOT_JPEG
    assert expect(report, corpus, f"{MAX_SCANS} scans") == OK
    assert expect(report, corpus, f"{MAX_SCANS + 1} scans") == expect(report, corpus, "190 scans") == decoder.CORRUPT


@pytest.mark.slow
def test_images_at_the_datasets_own_limit_decode_in_two_threads_within_the_stated_bound(tmp_path):
    """Progressive 4:4:4 JPEGs of exactly shards.limits.MAX_PIXELS: libjpeg holds their whole
    coefficients (6 bytes a pixel); two threads at once stay under twice memory_bound(MAX_PIXELS)
    over the process's base. One pixel row more is refused from the header."""
    side = 1 << 13  # 8192 x 8192 = MAX_PIXELS
    assert side * side == MAX_PIXELS
    image = Image.linear_gradient("L").resize((side, side)).convert("RGB")
    at_limit = _encode(image, progressive=True, subsampling=0, quality=90)
    del image
    corpus = Corpus()
    corpus.add("at the limit, one", at_limit)
    corpus.add("at the limit, two", at_limit)
    corpus.add("one row over", with_size(at_limit, side, side + 1))
    path = write_corpus(corpus, tmp_path, seed=1, tar_flips=10)
    # bicubic: the widest filter, the most scratch (jpegcrop.c: OWN_SCRATCH)
    report = run_worker(path, 3, tmp_path, max_pixels=MAX_PIXELS, threads=2, size=64, timeout=600,
                        interpolation="bicubic")
    check(report, corpus, MAX_PIXELS, threads=2)
    assert [report.statuses[i] for i in range(3)] == [OK, OK, TOO_LARGE]
    ((base, peak),) = report.memory
    assert peak - base > 1.5 * 6 * MAX_PIXELS  # the two coefficient buffers were really held at once


@pytest.mark.slow
@pytest.mark.parametrize("mode, fmt", [("RGBA", "PNG"), ("I;16", "PNG"), ("P", "PNG"), ("CMYK", "TIFF"), ("LA", "PNG")])
def test_the_pil_path_stays_within_its_stated_bytes_a_pixel(tmp_path, mode, fmt):
    """Images that are not JPEGs go to PIL (after their header's size is checked): its own buffers
    for the decode and the RGB conversion stay under decoder.PIL_BYTES_PER_PIXEL a pixel, plus the
    file."""
    side = 4096
    gradient = Image.linear_gradient("L").resize((side, side))
    image = gradient.convert(mode) if mode != "I;16" else gradient.convert("I").point(lambda v: v * 200).convert("I;16")
    path = tmp_path / f"image.{fmt.lower()}"
    image.save(path, fmt)
    result = subprocess.run([sys.executable, str(WORKER), "--pil", str(path), "64"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout)
    assert measured["shape"] == [64, 64, 3]
    assert measured["peak_over_base"] <= decoder.PIL_BYTES_PER_PIXEL * side * side + measured["file"] + (16 << 20)
