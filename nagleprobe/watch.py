"""`nagleprobe watch`: stalls reported as a capture is written, from a pipe, a growing file or
tcpdump on an interface.

`LiveStream` reads input still being written; `events` feeds its records to a
`live.LiveAnalyzer` and yields its stall and summary events; `line` writes one event for
people or as JSON; `watch` runs it to the end of input (or Ctrl-C) and the final report.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import BinaryIO

import numpy as np

from .decode import decode
from .live import DEFAULT_SUMMARY_S, DEFAULT_WINDOW_ROWS, LiveAnalyzer
from .pipeline import DEFAULT_IDLE_S
from .read import CaptureReader
from .stream import ANALYSED
from .humanize import counted, human_count, human_ms

LIVE_CHUNK_BYTES = 1 << 20


class LiveStream:
    """A binary stream for `CaptureReader` over input that is still being written: a pipe
    (or terminal, socket) or a growing file (`follow`). A large read (a chunk) waits for
    some input and then returns what is there without waiting for more: the reader hands
    on every record it has, and carries a record cut at the end over to the next chunk. A
    small read (the file header) waits for all of it. A pipe ends at its end of input; a
    followed file only when `stop()` is called (or Ctrl-C)."""

    SMALL = 4096
    POLL_S = 0.1

    def __init__(self, raw: BinaryIO, follow: bool = False, name: str = "-") -> None:
        self.raw, self.follow, self.name = raw, follow, name
        self._fd = raw.fileno()
        self._got = False  # data returned since the last 'nothing more now'
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    @property
    def drained(self) -> bool:
        """The last chunk read took everything there was: nothing more right now."""
        return not self._got

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        buf = bytearray(n if n >= 0 else self.SMALL)
        k = self.readinto(memoryview(buf))
        return bytes(buf[:k])

    def readinto(self, b) -> int:
        mv = memoryview(b).cast("B")
        if len(mv) < self.SMALL:  # the file header: all of it, or the end of input
            total = 0
            while total < len(mv):
                k = self._read_some(mv[total:], wait=True)
                if not k:
                    break
                total += k
            return total
        k = self._read_some(mv, wait=not self._got)
        self._got = k > 0
        return k

    def _read_some(self, mv: memoryview, wait: bool) -> int:
        """Read what is there (at most len(mv)); if nothing and `wait`, wait for input.
        0: end of input, or nothing now when not waiting."""
        while True:
            if not self.follow and not wait:
                ready, _, _ = select.select([self._fd], [], [], 0)
                if not ready:
                    return 0
            k = os.readv(self._fd, [mv])
            if k or not self.follow:
                return k
            if not wait or self._stopped:
                return 0
            time.sleep(self.POLL_S)

    def close(self) -> None:
        self.raw.close()


def events(reader: CaptureReader, live: LiveAnalyzer, skipped: Counter,
           stream: LiveStream | None = None, min_interval_s: float = 0.05) -> Iterator[dict]:
    """Stall and summary events as the reader's records come in. The records of chunks
    that come faster than `min_interval_s` apart are analysed together (each analysis
    covers the connections that got packets), unless the input
    `stream` the reader reads has nothing more right now."""
    last = 0.0
    for batch in reader:
        cols = decode(batch, skipped)
        del batch
        quick = time.monotonic() - last < min_interval_s and live.packets > 0
        waits = stream is not None and stream.drained
        yield from live.feed(cols, analyse=not quick or waits)
        last = time.monotonic()
    yield from live.feed({k: np.zeros(0, t) for k, t in ANALYSED.items()})


def line(event: dict, fmt: str) -> str:
    """One output line for an event: JSON, or text for people -- short enough for a
    terminal (a stall names the held endpoint and its frames; the JSON has the rest), with
    counts and times written as in the text report (thousands separated, seconds from 1 s
    on, UTC time of day)."""
    if fmt == "jsonl":
        return json.dumps(event, separators=(",", ":"))
    kind = event["event"]
    when = event.get("time", "")[11:23]  # the time of day, to the ms
    if kind == "stall":
        s1, a, s2 = event["frames"]
        return (f"{when} stall flow {event['flow']} {event['sender']} {event['endpoint']}: "
                f"{human_count(event['held_bytes'])} B held {human_ms(event['delay_ms'])} "
                f"#{s1} #{a} #{s2}")
    if kind == "summary":
        return (f"{when} summary flow {event['flow']} {event['client']} -> "
                f"{event['server']}: {counted(event['stalls'], 'stall')}, "
                f"{human_ms(event['lost_ms'])} lost in the last {human_ms(1e3 * event['period_s'])} "
                f"(longest {human_ms(event['max_delay_ms'])})")
    out = [f"watch ended: {counted(event['packets'], 'packet')} read, "
           f"{human_count(event['tcp_packets'])} TCP in "
           f"{counted(event['connections'], 'connection')}; "
           f"{counted(event['stalls'], 'stall')} costing {human_ms(event['lost_ms'])}"]
    skipped = ", ".join(f"{k} {human_count(v)}" for k, v in sorted(event["skipped"].items())
                        if v)
    out.append(f"  skipped: {skipped or 'none'}")
    out += [f"  warning: {w['text']}" for w in event["warnings"]]
    out += [f"  flow {f['flow']} {f['client']} -> {f['server']}: "
            f"{counted(f['stalls'], 'stall')}, {human_ms(f['lost_ms'])} lost"
            for f in event["flows"]]
    return "\n".join(out)


def watch(reader: CaptureReader, emit: Callable[[str], None], fmt: str = "text",
          summary_s: float = DEFAULT_SUMMARY_S, window_rows: int = DEFAULT_WINDOW_ROWS,
          idle_s: float = DEFAULT_IDLE_S, stream: LiveStream | None = None,
          ports: tuple[int, ...] = (), hosts: tuple[str, ...] = (),
          min_confidence: float | None = None) -> dict:
    """Report the stalls of `reader`'s records as they come in, a summary every `summary_s`
    of capture time, and at the end of input or on Ctrl-C (KeyboardInterrupt) the final
    report; each through `emit` (one line or, for the text final report, a few). `stream`:
    the LiveStream the reader reads, if any (its pauses start an analysis at once).
    `ports`, `hosts`, `min_confidence`: only the stalls of this selection (see
    `LiveAnalyzer`). Returns the final event."""
    live = LiveAnalyzer(window_rows=window_rows, summary_s=summary_s, idle_s=idle_s,
                        ports=ports, hosts=hosts, min_confidence=min_confidence)
    skipped: Counter = Counter()
    try:
        for event in events(reader, live, skipped, stream):
            emit(line(event, fmt))
    except KeyboardInterrupt:
        pass
    for event in live.summary(final=True):
        emit(line(event, fmt))
    info = reader.info
    skipped.update(info.skipped)
    final = live.final({"packets": info.packets, "skipped": dict(skipped),
                        "warnings": list(info.warnings)})
    emit(line(final, fmt))
    return final
