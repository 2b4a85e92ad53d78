"""The held message of each flow's first stalls, for the reports (JSON, text, HTML and the
stalls table): their payloads read back from the capture within a bound, named by
`messages.recognise`.

Bounded, so that a large capture costs a few reads, not a second pass: the first
SAMPLE_STALLS stalls of each of the MAX_FLOWS flows with stalls that lost the most time are
read (the other flows say NOT_READ); per stall its outstanding segment (S1), the segment
released after the delayed ACK (S2) and the CONTEXT_RECORDS records before S1, where the
same direction's earlier bytes are looked for (contiguous up to S1, else none). A plain pcap
file is read by seeking (its reader's `read.FrameIndex`); anything else that can be read
again -- a pcapng or gzip file, the files of a set, a URL, a seekable stream given to
`analyze` (from where it stood, then left where it was) -- in one pass from its start that
stops after the last frame wanted, or once it has read FORWARD_BYTES (TOO_LARGE). Standard
input and pipes are not read again (NOT_SEEKABLE); an input that fails the second reading
(gone, closed, changed) says NOT_REREAD.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from .columns import Columns
from .errors import CaptureError
from .messages import NOT_CAPTURED, Message, recognise
from .payloads import ReadTooFar, segments
from .read import FrameIndex, url_scheme
from .selection import worst_order

SAMPLE_STALLS = 3  # stalls read per flow, its first
MAX_FLOWS = 50  # flows with stalls read, those that lost the most time first
CONTEXT_RECORDS = 32  # records before S1 searched for its direction's earlier bytes
FORWARD_BYTES = 64 << 20  # the most of an input without an index read again from its start
NOT_SEEKABLE = "payload not read (input not seekable)"
TOO_LARGE = f"payload not read (no record index, and beyond its first {FORWARD_BYTES >> 20} MB)"
NOT_REREAD = "payload not read (input could not be read again)"
NOT_READ = f"payload not read (only the {MAX_FLOWS} flows that lost the most are)"
FLOW_KEYS = ("protocol", "held_message", "before_message", "split", "fix", "advice")
STALL_KEYS = FLOW_KEYS[:3]  # a stall's: the stalls table's columns and its JSON "message"


@dataclass(frozen=True)
class Held:
    """Per flow id read the message of its first recognised stall (FLOW_KEYS), or
    NOT_CAPTURED in held_message with the other keys None; `rest`, that note for every other
    flow with stalls (NOT_READ, NOT_SEEKABLE, TOO_LARGE or NOT_REREAD; None: all were
    read); per stall row (its position in the stalls table) STALL_KEYS where read and
    recognised or not captured. Flows and stalls whose protocol is unknown are absent."""

    flows: dict[int, dict[str, Any]]
    stalls: dict[int, dict[str, Any]]
    rest: dict[str, Any] | None = None
    read: frozenset[int] = frozenset()  # the ids of the flows read

    def of(self, flow: int, stalls: int) -> dict[str, Any] | None:
        """Flow `flow`'s entry (it has `stalls` stalls), None where there is nothing to say."""
        if flow in self.flows:
            return self.flows[flow]
        return self.rest if stalls and flow not in self.read else None


def held_messages(capture: dict[str, Any], flows: Columns, stalls: Columns,
                  index: FrameIndex | None,
                  stream: tuple[BinaryIO, int] | None = None) -> Held:
    """The held messages of a report's stalls (its capture document and tables; `index`:
    where its file's records lie, None when not known; `stream`: a seekable stream it was
    read from and where it started, read again from there when its name is no file)."""
    stalled = worst_order(flows["stall_ms"], flows["id"], flows["stalls"] > 0)
    ids = flows["id"][stalled].tolist()
    if not ids:
        return Held({}, {})
    files = [f["path"] for f in capture.get("files") or ()] or [capture["path"]]
    index = index if len(files) == 1 else None
    if stream is not None and not os.path.isfile(files[0]):
        why = _unseekable(stream[0])
    else:
        why, stream = _unreadable(files, capture["path"]), None
    if why:
        return Held({}, {}, _note(why))
    chosen = ids[:MAX_FLOWS]
    rows = _first_stalls(stalls["flow"], np.asarray(chosen, np.int64))
    # each stall's S1 and S2 as (file, frame): a file set's frames count in their own file
    s1, s2 = ((stalls[f"{k}_file"][rows] if "small_file" in stalls
               else np.full(len(rows), files[0], object),
               stalls[f"{k}_frame"][rows].astype(np.int64)) for k in ("small", "released"))
    read: dict[str, tuple[Columns, dict[int, bytes]]] = {}
    try:
        for name in files:
            frames = np.concatenate([s2[1][s2[0] == name], *(s1[1][s1[0] == name] - k
                                                             for k in range(CONTEXT_RECORDS + 1))])
            if len(frames):
                read[name] = _segments(name, frames[frames > 0], index, stream)
    except ReadTooFar:
        return Held({}, {}, _note(TOO_LARGE))
    except (OSError, ValueError, CaptureError):  # gone, closed or changed since
        return Held({}, {}, _note(NOT_REREAD))
    per_stall: dict[int, dict[str, Any]] = {}
    per_flow: dict[int, dict[str, Any]] = {}
    none: tuple[Columns, dict[int, bytes]] = ({"frame": np.zeros(0, np.int64)}, {})
    for r, fa, a, fb, b in zip(rows.tolist(), *(x.tolist() for x in (*s1, *s2))):
        cols, got = read.get(fa, none)
        out, held = got.get(a, b""), read.get(fb, none)[1].get(b, b"")
        flow = int(stalls["flow"][r])
        if len(out) < int(stalls["small_bytes"][r]) or not held:
            per_stall[r] = dict(zip(STALL_KEYS, (None, NOT_CAPTURED, NOT_CAPTURED)))
            per_flow.setdefault(flow, _note(NOT_CAPTURED))
            continue
        m = recognise(out, held, _earlier(cols, got, a))
        if m is None:
            continue
        per_stall[r] = dict(zip(STALL_KEYS, (m.protocol, m.held, m.before)))
        if per_flow.get(flow, {}).get("protocol") is None:
            per_flow[flow] = _said(m)
    return Held({i: per_flow[i] for i in chosen if i in per_flow}, per_stall,
                _note(NOT_READ) if len(ids) > MAX_FLOWS else None, frozenset(chosen))


def _unreadable(files: list[str], path: str) -> str | None:
    """Why the capture's payloads cannot be read again (None: they can): `files` the files
    read (`path` itself, or a file set's)."""
    if url_scheme(path):
        return None
    if path == "-" or not all(map(os.path.isfile, files)):
        return NOT_SEEKABLE
    return None


def _unseekable(stream: BinaryIO) -> str | None:
    """Why a stream's payloads cannot be read again (None: they can)."""
    try:
        return None if stream.seekable() else NOT_SEEKABLE
    except (OSError, ValueError):
        return NOT_REREAD


def _segments(path: str, frames: np.ndarray, index: FrameIndex | None,
              stream: tuple[BinaryIO, int] | None) -> tuple[Columns, dict[int, bytes]]:
    """`payloads.segments` of the file, or of the stream read from its start and left where
    it stood."""
    if stream is None:
        return segments(path, frames, index, limit=FORWARD_BYTES)
    s, start = stream
    at = s.tell()
    try:
        s.seek(start)
        return segments(path, frames, None, s, limit=FORWARD_BYTES)
    finally:
        s.seek(at)


def _first_stalls(flow: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Rows of the first SAMPLE_STALLS stalls (in table order) of each chosen flow."""
    order = None if (np.diff(flow) >= 0).all() else np.argsort(flow, kind="stable")
    f = flow if order is None else flow[order]  # (a stalls table is in flow order)
    at = (np.searchsorted(f, chosen)[:, None] + np.arange(SAMPLE_STALLS)).reshape(-1)
    at = at[at < len(f)]
    at = at[np.isin(f[at], chosen)]
    return np.sort(at if order is None else order[at])


def _earlier(cols: Columns, got: dict[int, bytes], s1: int) -> bytes:
    """S1's direction's bytes just before it among the records read: the segments that end
    where the next begins, back from S1 to the first gap (each captured whole)."""
    at = np.flatnonzero(cols["frame"] == s1)
    if not len(at):
        return b""
    i = int(at[0])
    same = np.ones(len(cols["frame"]), bool)
    for k in ("src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport"):
        same &= cols[k] == cols[k][i]
    mine = np.flatnonzero(same & (cols["frame"] < s1) & (cols["payload"] > 0))
    mine = mine[np.argsort(cols["frame"][mine])][::-1]
    expect, kept = int(cols["seq"][i]), []
    for j in mine.tolist():
        n, data = int(cols["payload"][j]), got.get(int(cols["frame"][j]), b"")
        if (int(cols["seq"][j]) + n) & 0xFFFFFFFF != expect:
            continue  # a retransmission or keepalive: not the bytes right before
        if len(data) < n:
            break
        kept.append(data)
        expect = int(cols["seq"][j])
    return b"".join(kept[::-1])


def _note(why: str) -> dict[str, Any]:
    return {k: why if k == "held_message" else None for k in FLOW_KEYS}


def _said(m: Message) -> dict[str, Any]:
    return dict(zip(FLOW_KEYS, (m.protocol, m.held, m.before, m.split, m.fix, m.advice)))


def held_line(message: dict[str, Any], width: int) -> str:
    """The text report's line for a flow: "held: the 36-byte DNS query behind its 2-byte
    length prefix (dns)" (without what it was behind where that is wider than `width`), or
    the note."""
    if message["protocol"] is None:
        return f"held: {message['held_message']}"
    line = (f"held: {message['held_message']} behind {message['before_message']} "
            f"({message['protocol']})")
    short = f"held: {message['held_message']} ({message['protocol']})"
    return line if len(line) <= width else short


def group_message(said: dict[int, dict[str, Any]], ids: list[int]) -> dict[str, Any] | None:
    """The named message of the first of a fix group's flows (`ids`, worst first) that has
    one (`said`: `Held.flows`), or None."""
    return next((said[i] for i in ids if said.get(i, {}).get("protocol")), None)


PROTOCOL_NAMES = {"dns": "DNS", "tls": "TLS", "http/1.1": "HTTP/1", "postgresql": "PostgreSQL",
                  "smtp": "SMTP", "mqtt": "MQTT", "http/2": "HTTP/2"}


def fix_line(message: dict[str, Any], side: str, action: str) -> str:
    """The FIX block's sentence in the application's terms (what the `side` wrote apart),
    then what the held message calls for (coalesce or TCP_NODELAY) against the block's
    `action`."""
    nodelay = message["advice"] == "nodelay"
    call = "set TCP_NODELAY" if nodelay else "coalesce"
    why = ("whole messages waited for each other" if nodelay
           else "the held bytes belong with the outstanding ones")
    agree = (action == "set-tcp-nodelay") == nodelay
    name = PROTOCOL_NAMES.get(message["protocol"], message["protocol"])
    return (f"In {name} terms (the {side}'s writes): {message['fix']}. The held message says "
            f"{call}{' too' if agree else ' instead'}: {why}.")
