"""The TCP payload bytes of chosen frames, read back from the capture, and the application
messages of the stalls named from them (`messages.recognise`).

With the file's `read.FrameIndex` (a plain pcap file) the frames are read by seeking;
otherwise in one pass over the capture, each batch's records filtered to the frames asked
for with numpy. Only those are decoded (`decode.decode`), and only their payloads copied out.
The decoder gives the TCP ports, sequence and acknowledgement numbers and the payload length
(from the IP lengths) but not where the TCP header starts; it is found as the first place in
the record holding those 12 header bytes (outer tunnel headers never carry the inner TCP
ports and numbers), its data offset read there. A payload cut by the snap length is what
the record holds of it: possibly nothing.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from .columns import Columns, distinct
from .decode import TCP_COLUMNS, decode
from .messages import NOT_CAPTURED, Message, recognise
from .read import CaptureReader, FrameIndex, RecordBatch

if TYPE_CHECKING:
    import pandas as pd  # for the notebook's stall_messages only: the reports never load it

CONTEXT_BYTES = 4096  # how much of a direction's stream before the outstanding segment is read


def payloads(path: str, frames: Iterable[int]) -> dict[int, bytes]:
    """{frame: its TCP payload bytes as captured} for those of `frames` that are TCP
    segments (a frame that is not, or not in the capture, is absent)."""
    return segments(path, frames)[1]


class ReadTooFar(Exception):
    """A pass from the start would read more than its limit to reach the frames asked for."""


def segments(path: str, frames: Iterable[int], index: FrameIndex | None = None,
             stream: BinaryIO | None = None, limit: int | None = None
             ) -> tuple[dict[str, np.ndarray], dict[int, bytes]]:
    """(the decoded TCP columns of those of `frames` that are TCP segments, {frame: its
    payload as captured}): read by seeking with the file's `index` when given, else in one
    pass from the start (of `path`, a file or URL, or of `stream` from where it stands,
    named `path`) that stops after the last frame asked for; ReadTooFar once that pass has
    read more than `limit` bytes of its input."""
    wanted = distinct(np.fromiter((int(f) for f in frames), np.int64))
    skipped: collections.Counter = collections.Counter()
    if not len(wanted):
        return Columns.empty(TCP_COLUMNS), {}
    if index is not None:
        return segment_payloads(index.read(wanted), skipped)
    parts, out = [], {}
    reader = CaptureReader(path, stream=stream)
    try:
        for batch in reader:
            if limit is not None and reader.input_progress()[0] > limit:
                raise ReadTooFar(path)
            hit = np.flatnonzero(np.isin(batch.frame, wanted))
            if len(hit):
                cols, got = segment_payloads(batch.rows(hit), skipped)
                parts.append(cols)
                out.update(got)
            if len(batch.frame) and batch.frame[-1] >= wanted[-1]:
                break  # past the last frame asked for: the rest is not read
    finally:
        reader.close()
    return ({k: np.concatenate([p[k] for p in parts]) for k in TCP_COLUMNS} if parts
            else Columns.empty(TCP_COLUMNS)), out


def segment_payloads(batch: RecordBatch, skipped: collections.Counter
                     ) -> tuple[dict[str, np.ndarray], dict[int, bytes]]:
    """(the decoded TCP columns of a batch's records, {frame: its payload as captured})."""
    cols = decode(batch, skipped)
    where = {int(f): i for i, f in enumerate(batch.frame)}
    out = {}
    for k in range(len(cols["frame"])):
        i = where[int(cols["frame"][k])]
        start = int(batch.offset[i])
        record = bytes(batch.data[start:start + int(batch.caplen[i])])
        key = (int(cols["sport"][k]).to_bytes(2, "big") + int(cols["dport"][k]).to_bytes(2, "big")
               + int(cols["seq"][k]).to_bytes(4, "big") + int(cols["ack"][k]).to_bytes(4, "big"))
        at = record.find(key)
        if at < 0 or at + 13 > len(record):  # header cut before its data offset
            out[int(cols["frame"][k])] = b""
            continue
        body = at + (record[at + 12] >> 4) * 4
        out[int(cols["frame"][k])] = record[body:body + max(int(cols["payload"][k]), 0)]
    return cols, out


CONTEXT_FRAMES = 64  # nor more segments than this


class _Streams:
    """Each direction's segments of new data (retransmissions and keepalives left out), by
    (flow, sender): frames in order and the bytes sent up to each, for looking back."""

    def __init__(self, segments: pd.DataFrame) -> None:
        s = segments[(segments["payload"] > 0) & ~segments["retransmission"]
                     & ~segments["keepalive"]]
        self.by = {}
        for key, part in s.groupby(["flow", "sender"], sort=False):
            frames = part["frame"].to_numpy(np.int64)
            order = np.argsort(frames, kind="stable")
            sizes = part["payload"].to_numpy(np.int64)[order]
            self.by[key] = (frames[order], sizes, np.cumsum(sizes))

    def before(self, flow: int, sender: str, upto: int, limit: int) -> list[tuple[int, int]]:
        """(frame, payload length) of the direction's new data before frame `upto`, oldest
        first, going back until `limit` bytes or CONTEXT_FRAMES segments."""
        if (flow, sender) not in self.by:
            return []
        frames, sizes, sent = self.by[(flow, sender)]
        end = int(np.searchsorted(frames, upto))
        if not end:
            return []
        # from the oldest segment ending less than `limit` bytes before frame `upto`
        start = int(np.searchsorted(sent, sent[end - 1] - limit, side="right"))
        start = max(start, end - CONTEXT_FRAMES)
        return [(int(f), int(n)) for f, n in zip(frames[start:end], sizes[start:end])]


def stall_messages(report, path: str, context: int = CONTEXT_BYTES) -> pd.DataFrame:
    """One row per stall of `report` (an `analyze` Report of `path`), in its order:
    protocol, held_message, before_message, split, fix, advice (None where the protocol is
    not recognised; held_message says "payload not captured" where the capture has none)."""
    streams = _Streams(report.segments)
    plan = []
    for row in report.stalls.itertuples(index=False):
        earlier = streams.before(int(row.flow), row.sender, int(row.small_frame), context)
        plan.append((earlier, int(row.small_frame), int(row.released_frame),
                     int(row.small_bytes), int(row.held_bytes)))
    need = {f for earlier, s1, s2, _, _ in plan for f in (s1, s2, *(e for e, _ in earlier))}
    got = payloads(path, need)
    rows = []
    for earlier, s1, s2, n1, n2 in plan:
        out, held = got.get(s1, b""), got.get(s2, b"")
        whole = [got.get(f, b"") for f, size in earlier]
        if len(out) < n1 or not held:
            rows.append(_row(None, NOT_CAPTURED if not held or not out else None))
            continue
        # the stream before is only trusted back to the last segment captured whole
        kept: list[bytes] = []
        for data, (_, size) in zip(whole[::-1], earlier[::-1]):
            if len(data) < size:
                break
            kept.append(data)
        rows.append(_row(recognise(out, held, b"".join(kept[::-1])), None))
    import pandas as pd

    return pd.DataFrame(rows, columns=["protocol", "held_message", "before_message", "split",
                                       "fix", "advice"])


def _row(m: Message | None, note: str | None) -> dict:
    if m is None:
        return {"protocol": None, "held_message": note, "before_message": note, "split": None,
                "fix": None, "advice": None}
    return {"protocol": m.protocol, "held_message": m.held, "before_message": m.before,
            "split": m.split, "fix": m.fix, "advice": m.advice}
