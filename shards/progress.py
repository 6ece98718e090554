"""Progress for people and for SLURM logs, for both stages: tqdm on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import Callable

from tqdm import tqdm


class Progress:
    """Counts units (bytes, images, steps) towards an optional total.

    On a terminal it draws a tqdm bar. In a log file (SLURM's stdout) a tqdm bar is one endless
    line of carriage returns, so there it prints a plain line every `interval` seconds (prepare)
    or every `every` units (train's steps), and one at the end. `values`, given to `update`, adds
    fields to the line (loss, lr); it is called only when a line is due, since it may sync a device.
    """

    def __init__(self, desc: str, total: float | None = None, unit: str = "it", *, interval: float | None = None,
                 every: int | None = None, initial: float = 0, enabled: bool = True, stream=None,
                 scale: float = 1.0):
        self.desc, self.total, self.unit, self.scale = desc, total, unit, scale
        self.interval, self.every, self.enabled = interval, every, enabled
        self.stream = stream or sys.stderr
        self.count = self.initial = initial
        self.start = self.last_line = time.monotonic()
        self.values: dict = {}
        self.printed = None  # the count at the last plain line
        self.bar = None
        if enabled and self.stream.isatty():
            self.bar = tqdm(total=total and total * scale, initial=initial * scale, desc=desc, unit=unit,
                            file=self.stream, unit_scale=scale != 1, dynamic_ncols=True)

    def update(self, n: float = 1, values: Callable[[], dict] | None = None) -> None:
        self.count += n
        if not self.enabled:
            return
        due = self._line_due()
        if due and values is not None:
            self.values = values()
        if self.bar is not None:
            self.bar.update(n * self.scale)
            if due and self.values:
                self.bar.set_postfix(self.values)
        elif due:
            self._print()

    def _line_due(self) -> bool:
        if self.every:
            return self.count % self.every == 0 or self.count == self.total
        return self.interval is not None and time.monotonic() - self.last_line >= self.interval

    def finish(self) -> None:
        """The work is complete: the line and bar end at 100%. (Prepare counts image bytes against
        the archive's size, which also holds tar headers and padding, or against a tree's size
        estimated from a sample of its files: the count alone ends short of the total or past it.)"""
        if self.total is None:
            return
        missing = max(self.total - self.count, 0)
        self.total = self.count = max(self.total, self.count)
        if self.bar is not None:
            self.bar.total = self.total * self.scale
            self.bar.update(missing * self.scale)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        done = self.count * self.scale
        rate = (self.count - self.initial) * self.scale / elapsed
        text = f"{self.desc} {done:,.0f}"
        if self.total:
            text += f"/{self.total * self.scale:,.0f} {self.unit} ({100 * self.count / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += f", {rate:,.1f} {self.unit}/s, {elapsed:,.0f} s"
        if self.values:
            text += ": " + " ".join(f"{k} {v}" for k, v in self.values.items())
        return text

    def _print(self) -> None:
        self.last_line, self.printed = time.monotonic(), self.count
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.printed != self.count:
            self._print()  # the last line, unless it was just printed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
