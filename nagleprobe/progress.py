"""A one-line progress display on standard error for long analyses.

Hand-written rather than tqdm or rich, for what they do not do: on a terminal the line is
redrawn in place, and in a log (`--progress` off a terminal, e.g. a CI job) it becomes a
plain line every LOG_INTERVAL_S seconds and one at the end -- tqdm writes carriage-return
redraws into such a log, rich shows nothing there; and one line carries packets, bytes and
an ETA by input bytes, which a single-counter bar does not. Both displays stay silent for
runs shorter than DELAY_S, so a quick analysis prints nothing but its report.
"""

from __future__ import annotations

import io
import os
import sys
import time
from typing import TextIO

from .read import CaptureReader

DELAY_S = 0.5  # nothing is drawn before a run has taken this long
LOG_INTERVAL_S = 10.0  # between the lines written to a log (not a terminal)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _columns(out: TextIO) -> int:
    """The columns of the terminal `out` is (80 if it cannot be asked)."""
    try:
        return os.get_terminal_size(out.fileno()).columns or 80
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return 80


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """Packets and bytes read, rate, and the ETA when the input's size is known: on a
    terminal (`in_place`, default: whether `out` is one) redrawn in place at most every
    `interval` seconds, else a line every LOG_INTERVAL_S; nothing before `delay` seconds.
    Call it after each chunk (`pipeline.analyze`'s `progress` hook), then `close()`."""

    def __init__(self, out: TextIO | None = None, interval: float | None = None,
                 width: int | None = None, delay: float = DELAY_S,
                 in_place: bool | None = None) -> None:
        self.out = sys.stderr if out is None else out  # the stderr of the moment
        self.in_place = _is_terminal(self.out) if in_place is None else in_place
        if interval is None:
            interval = 0.2 if self.in_place else LOG_INTERVAL_S
        self.interval = interval
        self.fixed_width = width  # None: the terminal's, asked at each redraw (it may resize)
        self.start = time.monotonic()
        self.last = self.start + delay - interval  # the first draw once `delay` has passed
        self.shown = False

    def __call__(self, reader: CaptureReader, frames: int) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        text = self.line(frames, *reader.input_progress(), now - self.start)
        if self.in_place:
            # one column short of the width: a line that reaches the last column (or wraps)
            # would leave the cursor on the next row, and "\r" would then redraw below a stale
            # copy
            self.out.write("\r" + text[:max(self.width() - 1, 1)] + "\x1b[K")
        else:
            self.out.write(f"nagleprobe: {text}\n")
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
        return _columns(self.out)

    def close(self) -> None:
        """Erase the line on a terminal (the report follows on standard output)."""
        if self.shown and self.in_place:
            self.out.write("\r\x1b[K")
            self.out.flush()


class FleetProgress:
    """Captures done of the total, packets/s over all of them, and failures so far, for
    `check` / `analyze_many` over many captures: call it with each verdict as it arrives,
    then `close()`. On a terminal the line is redrawn in place; elsewhere (a CI log, with
    `check --progress`) a line is written at most every `interval` seconds, and at the end.
    Nothing is drawn before `delay` seconds but that last line."""

    def __init__(self, total: int, out: TextIO | None = None, interval: float | None = None,
                 in_place: bool | None = None, delay: float = DELAY_S) -> None:
        out = sys.stderr if out is None else out  # the stderr of the moment (not import's)
        self.total, self.out = total, out
        self.in_place = _is_terminal(out) if in_place is None else in_place
        self.interval = interval if interval is not None else (
            0.2 if self.in_place else LOG_INTERVAL_S)
        self.start = time.monotonic()
        self.last = self.start + delay - self.interval  # the first draw once `delay` passed
        self.done = self.failed = self.packets = 0
        self.shown = False

    def __call__(self, verdict: object) -> None:
        self.done += 1
        self.packets += int(getattr(verdict, "packets", 0) or 0)
        self.failed += bool(getattr(verdict, "error", None))
        now = time.monotonic()
        if now - self.last >= self.interval or (self.done == self.total
                                                 and not self.in_place):
            self.last = now
            self._draw(now)

    def line(self, elapsed: float) -> str:
        """e.g. '37 of 200 captures, 1.52 M packets/s, 2 failed, ETA 1:05' (failed: could
        not be analysed; captures over budget are not failures here)."""
        rate = self.packets / elapsed if elapsed > 0 else 0.0
        speed = f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate:,.0f}"
        text = (f"{self.done:,} of {self.total:,} captures, {speed} packets/s, "
                f"{self.failed:,} failed")
        if 0 < self.done < self.total:
            text += f", ETA {_duration(elapsed / self.done * (self.total - self.done))}"
        return text

    def _draw(self, now: float) -> None:
        text = self.line(now - self.start)
        if self.in_place:
            self.out.write("\r" + text[:max(_columns(self.out) - 1, 1)] + "\x1b[K")
        else:
            self.out.write(f"nagleprobe: {text}\n")
        self.out.flush()
        self.shown = True

    def close(self) -> None:
        """Erase the line on a terminal (the verdicts follow)."""
        if self.shown and self.in_place:
            self.out.write("\r\x1b[K")
            self.out.flush()
