"""A one-line progress display on standard error for long analyses."""

from __future__ import annotations

import io
import os
import sys
import time
from typing import TextIO

from .read import CaptureReader


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class ProgressBar:
    """Packets and bytes read, rate, and the ETA when the input's size is known; redrawn in
    place at most every `interval` seconds. Call it after each chunk (`pipeline.analyze`'s
    `progress` hook), then `close()`."""

    def __init__(self, out: TextIO = sys.stderr, interval: float = 0.2,
                 width: int | None = None) -> None:
        self.out, self.interval = out, interval
        self.fixed_width = width  # None: the terminal's, asked at each redraw (it may resize)
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, reader: CaptureReader, frames: int) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        text = self.line(frames, *reader.input_progress(), now - self.start)
        # one column short of the width: a line that reaches the last column (or wraps) would
        # leave the cursor on the next row, and "\r" would then redraw below a stale copy
        self.out.write("\r" + text[:max(self.width() - 1, 1)] + "\x1b[K")
        self.out.flush()
        self.shown = True

    @staticmethod
    def line(frames: int, done: int, size: int | None, elapsed: float) -> str:
        """The text shown: e.g. '1,204,000 packets, 110.2 MB of 453.0 MB (24%), 1.20 M
        packets/s, 110.1 MB/s, ETA 0:03'."""
        rate = frames / elapsed if elapsed > 0 else 0.0
        speed = done / elapsed if elapsed > 0 else 0.0
        text = f"{frames:,} packets, {_size(done)}"
        if size:
            text += f" of {_size(size)} ({100 * done / size:.0f}%)"
        text += f", {rate / 1e6:.2f} M packets/s, {_size(speed)}/s"
        if size and speed > 0:
            text += f", ETA {_duration(max(size - done, 0) / speed)}"
        return text

    def width(self) -> int:
        """The columns of the terminal the line is drawn on (80 if it cannot be asked)."""
        if self.fixed_width is not None:
            return self.fixed_width
        try:
            return os.get_terminal_size(self.out.fileno()).columns or 80
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return 80

    def close(self) -> None:
        """Erase the line (the report follows on standard output)."""
        if self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
