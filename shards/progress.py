"""Progress for people and for SLURM logs: tqdm on a terminal, a plain line every few seconds elsewhere."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """Counts units (bytes, images, steps) towards an optional total.

    On a terminal it draws a tqdm bar. In a log file (SLURM's stdout) a tqdm bar is one endless
    line of carriage returns, so there it prints a plain line every `interval` seconds instead.
    """

    def __init__(self, desc: str, total: float | None = None, unit: str = "it", *,
                 interval: float = 10.0, enabled: bool = True, stream=None, scale: float = 1.0):
        self.desc, self.total, self.unit, self.scale = desc, total, unit, scale
        self.stream = stream or sys.stderr
        self.count = 0.0
        self.start = self.last_line = time.monotonic()
        self.interval = interval
        self.enabled = enabled
        self.bar = None
        if enabled and self.stream.isatty():
            self.bar = tqdm(total=total and total * scale, desc=desc, unit=unit, file=self.stream,
                            unit_scale=True, dynamic_ncols=True)

    def update(self, n: float = 1) -> None:
        self.count += n
        if self.bar is not None:
            self.bar.update(n * self.scale)
        elif self.enabled and time.monotonic() - self.last_line >= self.interval:
            self.last_line = time.monotonic()
            print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        done = self.count * self.scale
        rate = done / elapsed
        text = f"{self.desc}: {done:,.0f}"
        if self.total:
            text += f"/{self.total * self.scale:,.0f} {self.unit} ({100 * self.count / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        return text + f", {rate:,.1f} {self.unit}/s, {elapsed:,.0f} s"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print(self.line(), file=self.stream, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
