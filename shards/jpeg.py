"""What both stages read from a JPEG's header before PIL decodes it (the native modules keep their own
rules: shards/native/jpeg_rules.h)."""

from __future__ import annotations

# SOFn, the frame headers: every marker C0-CF but DHT (C4), JPG (C8) and DAC (CC)
FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
LOSSLESS_FRAMES = frozenset({0xC3, 0xC7, 0xCB, 0xCF})  # SOF3, 7, 11, 15: lossless, no DCT to scale in
NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RSTn: markers without a segment


def lossless(data: bytes) -> bool:
    """Whether the JPEG's frame header, the first SOFn as libjpeg finds it (bytes before a marker and fill
    bytes skipped, segments by their lengths), is a lossless one. PIL's draft() must not shrink such a JPEG:
    libjpeg-turbo 3 decodes it at full size whatever scale is asked, into the smaller image PIL made for
    the draft, a heap overflow that aborts the process (or a "broken data stream" for a valid image)."""
    i, end = 2, len(data)
    while i + 1 < end:
        if data[i] != 0xFF or data[i + 1] == 0xFF:  # not at a marker yet, or a fill byte before one
            i += 1
            continue
        marker = data[i + 1]
        if marker in FRAMES:
            return marker in LOSSLESS_FRAMES
        if marker in (0xDA, 0xD9) or i + 4 > end:  # a scan or the end before any frame: libjpeg fails on it
            return False
        i += 2 if marker in NO_LENGTH or marker == 0x00 else 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return False
