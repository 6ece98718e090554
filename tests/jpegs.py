"""Images of every kind the decoders meet (JPEGs made with PIL, or cjpeg where PIL cannot), and images
made hostile byte by byte, for the decoder, loader, prepare and fuzz tests."""

from __future__ import annotations

import functools
import io

import numpy as np
from PIL import Image

from train.decoder import Images


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth shading with edges and some grain: interpolation differences stay small but real. A new image
    each call (the caller may change it), of pixels drawn once."""
    return Image.fromarray(photo_pixels(width, height, seed))  # (an RGB array's bytes are copied)


# Drawn once a size and seed: the quick tier asked for 2,575 photos of 150 kinds (117 million pixels drawn, 16.5
# million of them distinct: 50 MB kept a worker), and drawing them was a tenth of its tests' time. Read-only, so no
# caller changes them.
@functools.cache
def photo_pixels(width: int, height: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([128 + 100 * np.sin(x / (7 + seed)), 128 + 100 * np.cos(y / 11), (x + y) % 256], axis=-1)
    base[(x // 37 + y // 29) % 2 == 0] *= 0.6  # hard edges
    noisy = base + rng.normal(0, 6, base.shape)
    pixels = np.clip(noisy, 0, 255).astype(np.uint8)
    pixels.flags.writeable = False
    return pixels


# Encoded once a set of arguments too (bytes: no caller can change them): a fake of winter21's 19,167 class tars
# asked for 19,274 JPEGs of 8 kinds.
@functools.lru_cache(maxsize=1024)
def jpeg(width: int = 333, height: int = 217, *, mode: str = "RGB", subsampling: int = 2, progressive: bool = False,
         restart: int = 0, exif: bool = False, quality: int = 92, seed: int = 0, optimize: bool = False) -> bytes:
    """subsampling: 0 is 4:4:4, 1 is 4:2:2, 2 is 4:2:0; restart: restart marker every N MCU blocks;
    optimize: Huffman tables made for this image (else libjpeg's standard ones)."""
    image = photo(width, height, seed).convert(mode)
    options = {"quality": quality, "progressive": progressive, "optimize": optimize}
    if mode != "L":
        options["subsampling"] = subsampling
    if restart:
        options["restart_marker_blocks"] = restart
    if exif:
        data = Image.Exif()
        data[0x0112] = 1  # orientation: as stored
        data[0x010F] = "a camera maker"
        options["exif"] = data.tobytes()
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def as_images(blobs: list[bytes]) -> Images:
    """The blobs end to end in one buffer, as the decoder reads them from a shard."""
    return Images.from_blobs(blobs)


# ---------------------------------------------------------------- JPEGs made hostile, byte by byte

SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA, 0xCB}
DQT, DHT = 0xDB, 0xC4


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, start, end) of each marker segment before the first scan's entropy-coded data."""
    found, i = [], 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        found.append((marker, i, i + 2 + length))
        if marker == 0xDA:
            break
        i += 2 + length
    return found


def without(data: bytes, marker: int) -> bytes:
    """The JPEG with every segment of `marker` before the first scan removed (DQT, DHT: an
    abbreviated JPEG that relies on tables it does not carry)."""
    drop = [(start, end) for m, start, end in segments(data) if m == marker]
    out, at = [], 0
    for start, end in drop:
        out.append(data[at:start])
        at = end
    return b"".join(out) + data[at:]


def sof_at(data: bytes) -> int:
    return next(start for m, start, _ in segments(data) if m in SOF_MARKERS)


def with_size(data: bytes, width: int, height: int) -> bytes:
    """The JPEG whose frame header claims width x height: a lying header."""
    at = sof_at(data)
    return data[:at + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[at + 9:]


def with_sampling(data: bytes, factors: list[tuple[int, int]]) -> bytes:
    """The JPEG whose frame header claims these (h, v) sampling factors for its components."""
    at, out = sof_at(data), bytearray(data)
    for c, (h, v) in enumerate(factors[:data[at + 9]]):
        out[at + 11 + 3 * c] = h << 4 | v
    return bytes(out)


def cjpeg(image: Image.Image, *options: str) -> bytes:
    """libjpeg-turbo's own encoder (Debian's libjpeg-turbo-progs, installed by jobs/install.sh --dev),
    for what PIL cannot write: arithmetic coding, 4x2, 4x1 and 1x4 sampling."""
    import shutil
    import subprocess

    if shutil.which("cjpeg") is None:
        raise RuntimeError("cjpeg is missing: run `bash jobs/install.sh --dev` (Debian's libjpeg-turbo-progs)")
    ppm = io.BytesIO()
    image.convert("RGB").save(ppm, "PPM")
    return subprocess.run(["cjpeg", *options], input=ppm.getvalue(), capture_output=True, check=True).stdout


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with a few bytes of pixels."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def bmp_claiming(width: int, height: int) -> bytes:
    import struct

    return b"BM" + struct.pack("<IHHI", 54 + 64, 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 64,
                                                                         2835, 2835, 0, 0) + bytes(64)


def cmyk(data: bytes) -> bytes:
    """The JPEG's picture as a CMYK JPEG, as PIL writes one (Adobe marker, inverted samples)."""
    out = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("CMYK").save(out, "JPEG")
    return out.getvalue()


def ycck(data: bytes) -> bytes:
    """A CMYK JPEG whose Adobe marker says YCCK (transform 2): decoders convert its samples as
    YCCK, so it is another picture, but a valid YCCK JPEG to compare decoders on."""
    at = next(start for marker, start, _ in segments(data) if marker == 0xEE and data[start + 4:start + 9] == b"Adobe")
    return data[:at + 15] + b"\x02" + data[at + 16:]  # FF EE, length, "Adobe", version, flags0, flags1, transform


def two_components(data: bytes) -> bytes:
    """The frame and scan headers of a three-component JPEG cut to two components: a colour space
    (JCS_UNKNOWN) that no decoder here takes."""
    out = bytearray(data)
    for marker, start, end in reversed(segments(data)):
        if marker in SOF_MARKERS:  # length(2) P(1) Y(2) X(2) Nf(1), then 3 bytes a component
            del out[start + 10 + 2 * 3:start + 10 + 3 * 3]
            out[start + 9] = 2
        elif marker == 0xDA:  # length(2) Ns(1), then 2 bytes a component
            del out[start + 5 + 2 * 2:start + 5 + 3 * 2]
            out[start + 4] = 2
        else:
            continue
        length = int.from_bytes(out[start + 2:start + 4], "big")
        out[start + 2:start + 4] = (length - (3 if marker in SOF_MARKERS else 2)).to_bytes(2, "big")
    return bytes(out)


def entropy_end(data: bytes, at: int) -> int:
    """Where the entropy-coded data starting at `at` ends: the next marker that is neither a
    stuffed 0xFF00 nor a restart."""
    while True:
        at = data.index(b"\xff", at)
        if data[at + 1] == 0x00 or 0xD0 <= data[at + 1] <= 0xD7:
            at += 2
        else:
            return at


def many_scans(image: Image.Image, scans: int) -> bytes:
    """A legal progressive JPEG of `scans` scans: the DC scan, then single AC coefficients of the
    luma, then of the chroma (up to 190). cjpeg writes at most 100 scans a file, so several files
    of the same picture and tables are written and their AC scans spliced after the first's."""
    import os
    import tempfile

    bands = [f"{c}: {k} {k} 0 0;" for c in (0, 1, 2) for k in range(1, 64)][:scans - 1]
    files = []
    for group in range(0, max(len(bands), 1), 99):
        with tempfile.NamedTemporaryFile("w", suffix=".scans", delete=False) as f:
            f.write("\n".join(["0,1,2: 0 0 0 0;"] + bands[group:group + 99]))
        try:
            files.append(cjpeg(image, "-quality", "90", "-scans", f.name))
        finally:
            os.unlink(f.name)
    spliced = files[0][:-2]  # without its EOI
    for data in files[1:]:
        dc_scan = next(start for marker, start, _ in segments(data) if marker == 0xDA)
        after_dc = entropy_end(data, dc_scan + 2 + int.from_bytes(data[dc_scan + 2:dc_scan + 4], "big"))
        spliced += data[after_dc:-2]
    return spliced + b"\xff\xd9"


def restart_markers(data: bytes) -> list[int]:
    """Where each RSTn marker of a JPEG's entropy-coded data starts."""
    return [i for i in range(segments(data)[-1][2], len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]


def with_restart_interval(data: bytes, mcus: int) -> bytes:
    """The JPEG whose DRI segment says a restart interval of `mcus`, whatever its markers say."""
    dri = next(start for marker, start, _ in segments(data) if marker == 0xDD)
    return data[:dri + 4] + mcus.to_bytes(2, "big") + data[dri + 6:]


def restart_intervals(data: bytes) -> tuple[bytes, list[bytes]]:
    """A JPEG with restart markers as its header (up to the scan's entropy-coded data) and each
    restart interval's entropy-coded bytes, without the marker that ends it."""
    start = segments(data)[-1][2]
    ends = restart_markers(data) + [entropy_end(data, start)]
    return data[:start], [data[a:b] for a, b in zip([start] + [end + 2 for end in ends[:-1]], ends)]


def with_intervals(header: bytes, intervals: list[bytes]) -> bytes:
    """The JPEG of these intervals after this header, numbered in order: RST0, RST1, ... (mod 8)
    between them, EOI after the last."""
    markers = [bytes([0xFF, 0xD0 + k % 8]) for k in range(len(intervals) - 1)] + [b"\xff\xd9"]
    return header + b"".join(interval + marker for interval, marker in zip(intervals, markers))


def broken_grids(seekable: bytes, at: int) -> dict[str, bytes]:
    """A seekable JPEG (restart intervals of 2 MCUs or more) whose intervals no longer make the
    grid its header promises, its markers in order but for the swap: interval `at` emptied, lost
    or doubled (the later markers renumbered), the markers after it and after the next swapped, a
    DRI of half the interval. libjpeg decodes some of them without a warning, into shifted MCUs."""
    header, intervals = restart_intervals(seekable)
    empty, lost, added = list(intervals), list(intervals), list(intervals)
    empty[at] = b""
    del lost[at]
    added.insert(at, intervals[at])
    swapped = bytearray(seekable)  # the markers after intervals at and at + 1
    a, b = restart_markers(seekable)[at:at + 2]
    swapped[a + 1], swapped[b + 1] = seekable[b + 1], seekable[a + 1]
    dri_end = next(end for marker, _, end in segments(seekable) if marker == 0xDD)
    interval = int.from_bytes(seekable[dri_end - 2:dri_end], "big")
    return {"an empty interval": with_intervals(header, empty), "a lost interval": with_intervals(header, lost),
            "an added interval": with_intervals(header, added), "renumbered markers": bytes(swapped),
            "a DRI that lies": with_restart_interval(seekable, interval // 2)}  # each interval read as its first MCUs


def hostile_restarts(seekable: bytes) -> dict[str, bytes]:
    """A seekable JPEG (restart marker every MCU, 6 MCUs a row) whose grid of intervals lies."""
    rst = restart_markers(seekable)
    with_dri = lambda n: with_restart_interval(seekable, n)
    a, b = rst[7], rst[8]
    swapped = bytearray(seekable)
    swapped[a + 1], swapped[b + 1] = seekable[b + 1], seekable[a + 1]
    app = b"\xff\xe5\xff\xff" + bytes(0xFFFD)  # an APP5 segment of 64 KiB
    return {"restart markers swapped": bytes(swapped),
            "a restart marker dropped": seekable[:a] + seekable[a + 2:],
            "a restart marker added": seekable[:a] + b"\xff\xd0" + seekable[a:],
            "a restart marker replaced by EOI": seekable[:a] + b"\xff\xd9" + seekable[a + 2:],
            "a restart marker replaced by DHT": seekable[:a] + b"\xff\xc4" + seekable[a + 2:],
            "every restart marker gone": bytes(np.delete(np.frombuffer(seekable, np.uint8),
                                                         [i + d for i in rst for d in (0, 1)])),
            "interval 5 that does not divide 6": with_dri(5), "interval 2 over markers every 1": with_dri(2),
            "interval 65535": with_dri(65535), "interval 0": with_dri(0),
            "2 MiB of data between two markers": seekable[:a] + bytes(2 << 20) + seekable[a:],
            "a megabyte of header": seekable[:2] + app * 17 + seekable[2:],
            "cut after a restart marker": seekable[:b + 2]}


# ---------------------------------------------------------------- lossless JPEGs (SOF3), which PIL cannot write

LOSSLESS_DC_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]  # the standard luminance DC table's code lengths


def lossless_jpeg(pixels: np.ndarray) -> bytes:
    """A lossless JPEG (SOF3, 8 bits, predictor 1: the sample to the left, above in the first column) of uint8
    (h, w) or (h, w, 3) pixels, every component 1x1, Huffman-coded with the standard luminance DC table."""
    height, width = pixels.shape[:2]
    comps = 1 if pixels.ndim == 2 else pixels.shape[2]
    samples = pixels.reshape(height, width, comps).astype(int).tolist()
    codes, code = [], 0
    for length, count in enumerate(LOSSLESS_DC_BITS, 1):
        codes += [(code + k, length) for k in range(count)]
        code = (code + count) << 1
    bits = []
    for y in range(height):
        for x in range(width):
            for c in range(comps):
                left, above = samples[y][x - 1][c] if x else None, samples[y - 1][x][c] if y else None
                difference = samples[y][x][c] - (left if left is not None else above if above is not None else 128)
                size = abs(difference).bit_length()
                value = difference if difference >= 0 else difference + (1 << size) - 1
                bits += f"{codes[size][0]:0{codes[size][1]}b}" + (f"{value:0{size}b}" if size else "")
    bits += "1" * (-len(bits) % 8)
    data = b"".join(b"\xff\x00" if byte == 0xFF else bytes([byte])
                    for byte in (int("".join(bits[i:i + 8]), 2) for i in range(0, len(bits), 8)))
    segment = lambda marker, body: bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body
    components = b"".join(bytes([c + 1, 0x11, 0]) for c in range(comps))
    frame = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([comps]) + components
    scan = bytes([comps]) + b"".join(bytes([c + 1, 0]) for c in range(comps)) + bytes([1, 0, 0])
    return (b"\xff\xd8" + segment(0xC3, frame) + segment(0xC4, bytes([0, *LOSSLESS_DC_BITS, *range(12)]))
            + segment(0xDA, scan) + data + b"\xff\xd9")
