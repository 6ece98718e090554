"""Types of prepare._restarts (prepare/native/restarts.c), the lossless rewrite of a JPEG with
restart markers that prepare/images.py wraps; the functions' docstrings hold the contract.
`data` is any bytes-like object (bytes, memoryview, ...)."""

from typing import Final

from typing_extensions import Buffer

# Statuses (the same numbers as train._jpegcrop: shards/native/jpeg_rules.h)
OK: Final[int]
REFUSED: Final[int]
CORRUPT: Final[int]
NOT_JPEG: Final[int]
TOO_LARGE: Final[int]
OUT_OF_MEMORY: Final[int]

MAX_SCANS: Final[int]  # scans past this many: CORRUPT, as the training decoder stops


def add_restarts(data: Buffer, most: int, max_pixels: int) -> tuple[int, bytes | None, int]:
    """(status, the rewritten JPEG or None, its restart interval in MCUs or 0)."""


def add_restarts_with_reason(data: Buffer, most: int, max_pixels: int) -> tuple[int, bytes | None, int, str | None]:
    """add_restarts, and why the status is not OK (None where it is)."""


def restart_interval(mcus_per_row: int, most: int) -> int: ...
