"""The subprocess side of tests/test_native_fuzz.py: decodes a corpus of hostile inputs with the
native modules, so that a crash kills only this process. Not a test module; run as

    python tests/native_fuzz_worker.py CORPUS.npz START RESULTS.jsonl MAX_PIXELS THREADS SIZE [FILTER [FAST_DCT]]
    python tests/native_fuzz_worker.py --pil IMAGE SIZE

It writes one JSON line per case decoded alone (status, digest of the slot; prepare's rewrite with
restart markers: its status, digest, and where it succeeded whether the rewritten JPEG, decoded by
seeking, gives the original's pixels; for the cases the corpus marks as_whole, whether the crop is
the same with seeking off: its status, and its pixels where decoded), flushed before the next case
starts (after a crash the last line tells the parent which case was next), then per batch of cases
the cases whose status or pixels differ when decoded (or rewritten) in chunks of other sizes on
THREADS threads, then the tar cases and random arguments, and last the process's peak resident
memory. FILTER is the resize's (bilinear by default, bicubic, area), FAST_DCT 1 for libjpeg's fast
IDCT: every crop of the run is decoded with them.
Before decoding it caps its address space (RLIMIT_AS) at what it holds plus the stated bound for
every thread: an allocation past the bound fails (OUT_OF_MEMORY), even one never touched, which
resident memory alone would not show. With --pil it decodes one image file by the PIL path and
prints its peak memory over its base, in bytes.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from prepare import _restarts
from train import _jpegcrop, _tarindex

BATCH = 64  # cases per chunked comparison
THREAD_OVERHEAD = 96 << 20  # address space of a thread beyond its decode: a malloc arena (64 MiB), its stack
CHUNKS = (1, 3, 8, BATCH)  # chunk sizes, on THREADS threads, compared with one image per call in one thread
RESTART_MCUS = 1  # the rewrite's interval: the most markers, the most for the decoder's seek to parse


def proc_status(field: str) -> int:
    """A figure of /proc/self/status, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss() -> int:
    """This process's peak resident memory: VmHWM, which starts afresh at exec (getrusage's
    ru_maxrss does not on Linux: it keeps the forking parent's, here a pytest process with torch)."""
    return proc_status("VmHWM")


def cap_address_space(threads: int, max_pixels: int) -> int:
    """What the process maps now, plus the bound for every decoding thread and the main one."""
    limit = proc_status("VmSize") + (threads + 1) * (_jpegcrop.memory_bound(max_pixels) + THREAD_OVERHEAD)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


class Corpus:
    def __init__(self, path: str, interpolation: str = "bilinear", fast_dct: bool = False):
        self.resize = {"interpolation": interpolation, "fast_dct": fast_dct}  # every decode's
        with np.load(path) as npz:
            self.blob, self.offsets, self.lengths = npz["blob"].tobytes(), npz["offsets"], npz["lengths"]
            self.boxes, self.flips = npz["boxes"], npz["flips"]
            self.tar, self.tar_cuts = npz["tar"].tobytes(), npz["tar_cuts"]
            self.tar_flips = npz["tar_flips"]
            self.as_whole = npz["as_whole"]

    def __len__(self) -> int:
        return len(self.offsets)

    def data(self, case: int) -> bytes:
        return self.blob[self.offsets[case]:self.offsets[case] + self.lengths[case]]

    def decode(self, start: int, stop: int, out: np.ndarray, first: int, max_pixels: int,
               seek: bool = True) -> np.ndarray:
        n = stop - start
        status = np.zeros(n, np.int32)
        _jpegcrop.decode_crops((self.blob,), np.zeros(n, np.int32), self.offsets[start:stop], self.lengths[start:stop],
                               boxes=self.boxes[start:stop], flips=self.flips[start:stop], out=out, first=first,
                               status=status, max_pixels=max_pixels, seek=seek, **self.resize)
        return status

    def rewrite(self, case: int, max_pixels: int) -> list:
        """prepare's rewrite with restart markers: [status, digest of its bytes or None]."""
        status, data, _ = _restarts.add_restarts(self.data(case), RESTART_MCUS, max_pixels)
        return [status, None if data is None else digest(np.frombuffer(data, np.uint8))]

    def rewrite_is_lossless(self, case: int, max_pixels: int, size: int) -> bool:
        """Whether the rewritten JPEG, decoded by seeking where it can, gives the original's crop."""
        original = self.data(case)
        _, rewritten, _ = _restarts.add_restarts(original, RESTART_MCUS, max_pixels)
        slots, status = np.zeros((2, size, size, 3), np.uint8), np.zeros(2, np.int32)
        blob = original + rewritten
        _jpegcrop.decode_crops((blob,), np.zeros(2, np.int32), np.array([0, len(original)], np.int64),
                               np.array([len(original), len(rewritten)], np.int64), boxes=self.boxes[[case, case]],
                               flips=self.flips[[case, case]], out=slots, first=0, status=status,
                               max_pixels=max_pixels, **self.resize)
        return bool(status[0] == status[1] and np.array_equal(slots[0], slots[1]))


def digest(slot: np.ndarray) -> str:
    return hashlib.blake2b(slot.tobytes(), digest_size=8).hexdigest()


def chunked_differences(corpus: Corpus, start: int, stop: int, alone: dict, rewritten: dict, max_pixels: int,
                        size: int, threads: int) -> list[int]:
    """Cases of [start, stop) whose status or pixels differ from alone when decoded in chunks, or
    whose rewrite differs when done on several threads at once."""
    differ = set()
    with ThreadPoolExecutor(threads) as pool:
        cases = range(start, stop)
        for case, result in zip(cases, pool.map(lambda c: corpus.rewrite(c, max_pixels), cases)):
            if result != rewritten[case]:
                differ.add(case)
        for chunk in CHUNKS:
            out = np.full((stop - start, size, size, 3), 77, np.uint8)
            firsts = list(range(start, stop, chunk))
            statuses = pool.map(lambda a: corpus.decode(a, min(a + chunk, stop), out, a - start, max_pixels), firsts)
            for a, status in zip(firsts, statuses):
                for i, s in enumerate(status.tolist()):
                    case = a + i
                    if [s, digest(out[case - start])] != alone[case]:
                        differ.add(case)
    return sorted(differ)


def tar_cases(corpus: Corpus) -> int:
    """The shard cut short at many points and with bits flipped: rows or a ValueError, never a crash."""
    checked = 0
    variants = [corpus.tar[:cut] for cut in corpus.tar_cuts.tolist()]
    for at, bit in corpus.tar_flips.tolist():
        damaged = bytearray(corpus.tar)
        damaged[at] ^= 1 << bit
        variants.append(bytes(damaged))
    for data in variants:
        try:
            rows = np.frombuffer(_tarindex.tar_index(data), np.int64).reshape(-1, 6)
            assert ((rows[:, 2] < 0) | (rows[:, 2] + rows[:, 3] <= len(data))).all()
        except ValueError:
            pass
        checked += 1
    return checked


def random_arguments(corpus: Corpus, seed: int, calls: int, max_pixels: int) -> int:
    """decode_crops with every argument drawn from good and bad values: an exception or a result."""
    rng = np.random.default_rng(seed)
    n = 4
    pools = {
        "buffers": [(corpus.blob,), (corpus.blob, b"x"), [corpus.blob], (), (7,)],
        "which": [np.zeros(n, np.int32), np.array([0, 1, 2, -1], np.int32), np.zeros(n, np.int64), np.zeros(n - 1, np.int32)],
        "offsets": [corpus.offsets[:n].copy(), np.full(n, 2**62, np.int64), np.array([-1, 0, 0, 0], np.int64),
                    rng.integers(0, len(corpus.blob), n).astype(np.int64), np.zeros(n, np.int32)],
        "lengths": [corpus.lengths[:n].copy(), np.full(n, 2**62, np.int64), np.full(n, len(corpus.blob), np.int64),
                    np.array([0, 1, 2, -5], np.int64)],
        "boxes": [corpus.boxes[:n].copy(), np.full((n, 4), np.nan, np.float32), np.zeros((n, 4), np.float64),
                  np.array([[0, 0, 1e30, 1e30]] * n, np.float32), np.zeros((n, 3), np.float32)],
        "flips": [corpus.flips[:n].copy(), np.ones(n, np.uint8), np.ones(n, np.float32), np.ones(n + 1, bool)],
        "out": [np.zeros((n, 16, 16, 3), np.uint8), np.zeros((n + 2, 9, 9, 3), np.uint8), np.zeros((n, 16, 8, 3), np.uint8),
                np.zeros((n, 16, 16, 3), np.float32), np.zeros((1, 16, 16, 3), np.uint8), np.zeros(12, np.uint8)],
        "first": [0, 1, 2, -1, 2**62, 2**31],
        "status": [np.zeros(n, np.int32), np.zeros(n, np.int16), np.zeros(n - 1, np.int32)],
        "max_pixels": [max_pixels, 0, -1, 2**40, 1],
        "simd": [None, "C", "SSE2", "bogus"],
        "seek": [True, False, 2, None],
        "interpolation": [None, "bilinear", "bicubic", "area", "nearest", "", 7, b"area"],
        "fast_dct": [False, True, 2, None],
        "seeked": [None, np.zeros(n, np.bool_), np.zeros(n, np.uint8), np.zeros(n - 1, np.bool_), np.zeros(n, np.int32),
                   np.zeros((n, 2), np.bool_)],
        # a letterbox's or a padded crop's region of the slot, and the padding's colour (#53)
        "regions": [None, np.array([[0, 0, 16, 16]] * n, np.int32), np.array([[2, 3, 9, 5]] * n, np.int32),
                    np.array([[0, 0, 9, 9]] * n, np.int32), rng.integers(-3, 20, (n, 4)).astype(np.int32),
                    np.array([[2**31 - 1] * 4] * n, np.int32), np.zeros((n, 4), np.int64), np.zeros((n, 3), np.int32)],
        "fill": [None, np.array([124, 116, 104], np.uint8), np.zeros(3, np.uint8), np.zeros(4, np.uint8),
                 np.zeros(3, np.float32), b"abc"],
    }
    for _ in range(calls):
        kwargs = {name: values[rng.integers(len(values))] for name, values in pools.items()}
        if kwargs["simd"] not in (None, "C", "bogus") and kwargs["simd"] not in _jpegcrop.SIMD:
            kwargs["simd"] = None
        try:
            _jpegcrop.decode_crops(**kwargs)
        except (TypeError, ValueError, IndexError):
            pass
    rewrite_pools = {"data": [corpus.data(0), bytearray(corpus.data(1)), memoryview(corpus.data(2)), b"", "text", None, 7,
                              np.zeros(5, np.int64)],
                     "most": [1, 2, 65535, 0, 65536, -1, 2**40, 1.5], "max_pixels": [max_pixels, 0, -1, 2**40, 1, "x"]}
    for _ in range(calls):
        kwargs = {name: values[rng.integers(len(values))] for name, values in rewrite_pools.items()}
        try:
            status, data, interval = _restarts.add_restarts(**kwargs)
            assert (data is None) == (status != _restarts.OK) and (interval == 0) == (data is None)
        except (TypeError, ValueError, OverflowError):
            pass
    return 2 * calls


def main(corpus_path: str, start: int, results: str, max_pixels: int, threads: int, size: int,
         interpolation: str = "bilinear", fast_dct: bool = False) -> None:
    corpus = Corpus(corpus_path, interpolation, fast_dct)
    slot = np.zeros((1, size, size, 3), np.uint8)
    with open(results, "a") as out:
        def emit(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        base = peak_rss()
        emit({"base_rss": base, "address_space": cap_address_space(threads, max_pixels)})
        for batch in range(start, len(corpus), BATCH):
            stop = min(batch + BATCH, len(corpus))
            alone, rewritten = {}, {}
            for case in range(batch, stop):
                emit({"next": case})  # a crash from here on is this case's
                slot[:] = 55
                status = int(corpus.decode(case, case + 1, slot, 0, max_pixels)[0])
                alone[case] = [status, digest(slot[0])]
                rewritten[case] = corpus.rewrite(case, max_pixels)
                lossless = corpus.rewrite_is_lossless(case, max_pixels, size) if rewritten[case][1] else None
                as_whole = None
                if corpus.as_whole[case]:
                    slot[:] = 55
                    usual = int(corpus.decode(case, case + 1, slot, 0, max_pixels, seek=False)[0])
                    as_whole = usual == status and (status != _jpegcrop.OK or digest(slot[0]) == alone[case][1])
                emit({"case": case, "status": status, "digest": alone[case][1], "rewrite": rewritten[case],
                      "lossless": lossless, "as_whole": as_whole})
            emit({"next": {"chunks": [batch, stop]}})
            emit({"batch": [batch, stop], "differ": chunked_differences(corpus, batch, stop, alone, rewritten,
                                                                         max_pixels, size, threads)})
        if start <= len(corpus):
            emit({"next": "tar"})
            emit({"tar_cases": tar_cases(corpus)})
            emit({"next": "random arguments"})
            emit({"argument_calls": random_arguments(corpus, seed=len(corpus), calls=400, max_pixels=max_pixels)})
        emit({"peak_rss": peak_rss(), "base_rss": base})


def pil_peak(path: str, size: int) -> None:
    """The PIL path's peak memory for one image (a whole-image box), over the process's base."""
    import io

    from PIL import Image

    from train import decoder

    with open(path, "rb") as f:
        data = f.read()
    width, height = Image.open(io.BytesIO(data)).size
    base = peak_rss()
    pixels = decoder.pil_decode_crop(data, (0, 0, width, height), False, size)
    print(json.dumps({"peak_over_base": peak_rss() - base, "file": len(data), "shape": list(pixels.shape)}))


if __name__ == "__main__":
    if sys.argv[1] == "--pil":
        pil_peak(sys.argv[2], int(sys.argv[3]))
    else:
        path, start, results, max_pixels, threads, size = sys.argv[1:7]
        interpolation, fast_dct = (sys.argv[7:] + ["bilinear", "0"][len(sys.argv[7:]):])[:2]
        main(path, int(start), results, int(max_pixels), int(threads), int(size), interpolation, fast_dct == "1")
