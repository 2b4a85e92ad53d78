"""The held message of each flow's first stalls, for the reports (JSON, text, HTML and the
stalls table): their payloads read back from the capture within a bound, named by
`messages.recognise`.

Bounded, so that a large capture costs a few reads, not a second pass: the first
SAMPLE_STALLS stalls of each of the MAX_FLOWS flows with stalls that lost the most time are
read (the other flows say NOT_READ); per stall its outstanding segment (S1), the segment
released after the delayed ACK (S2) and the CONTEXT_RECORDS records before S1, where the
same direction's earlier bytes are looked for (contiguous up to S1, else none). A plain pcap
file is read by seeking (its reader's `read.FrameIndex`); one without an index (pcapng, gzip)
in one pass up to the last frame wanted when it is at most FORWARD_BYTES; standard input,
URLs, file sets and larger files are not read again (NOT_SEEKABLE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .columns import Columns
from .messages import NOT_CAPTURED, Message, recognise
from .read import FrameIndex, url_scheme
from .selection import worst_order

SAMPLE_STALLS = 3  # stalls read per flow, its first
MAX_FLOWS = 50  # flows with stalls read, those that lost the most time first
CONTEXT_RECORDS = 32  # records before S1 searched for its direction's earlier bytes
FORWARD_BYTES = 64 << 20  # the largest file without an index read again from its start
NOT_SEEKABLE = "payload not read (input not seekable)"
NOT_READ = f"payload not read (only the {MAX_FLOWS} flows that lost the most are)"
FLOW_KEYS = ("protocol", "held_message", "before_message", "split", "fix", "advice")
STALL_KEYS = FLOW_KEYS[:3]  # a stall's: the stalls table's columns and its JSON "message"


@dataclass(frozen=True)
class Held:
    """Per flow id the message of its first recognised stall (FLOW_KEYS), or a note in
    held_message (NOT_CAPTURED, NOT_READ, NOT_SEEKABLE) with the other keys None; per stall
    row (its position in the stalls table) STALL_KEYS where read and recognised or not
    captured. Flows and stalls whose protocol is unknown are absent."""

    flows: dict[int, dict[str, Any]]
    stalls: dict[int, dict[str, Any]]


def held_messages(capture: dict[str, Any], flows: Columns, stalls: Columns,
                  index: FrameIndex | None) -> Held:
    """The held messages of a report's stalls (its capture document and tables; `index`:
    where its file's records lie, None when not known)."""
    stalled = worst_order(flows["stall_ms"], flows["id"], flows["stalls"] > 0)
    ids = flows["id"][stalled].tolist()
    if not ids:
        return Held({}, {})
    why = _unreadable(capture, index)
    if why:
        return Held({i: _note(why) for i in ids}, {})
    chosen = ids[:MAX_FLOWS]
    rows = _first_stalls(stalls["flow"], np.asarray(chosen, np.int64))
    s1, s2 = (stalls[c][rows].astype(np.int64) for c in ("small_frame", "released_frame"))
    frames = np.concatenate([s2, *(s1 - k for k in range(CONTEXT_RECORDS + 1))])
    from .payloads import segments  # (with the decoder: only when a report asks)

    try:
        cols, got = segments(capture["path"], frames[frames > 0], index)
    except (OSError, ValueError):  # gone, or changed since it was analysed
        return Held({i: _note(NOT_SEEKABLE) for i in ids}, {})
    per_stall: dict[int, dict[str, Any]] = {}
    per_flow: dict[int, dict[str, Any]] = {i: _note(NOT_READ) for i in ids[MAX_FLOWS:]}
    for r, a, b in zip(rows.tolist(), s1.tolist(), s2.tolist()):
        out, held = got.get(a, b""), got.get(b, b"")
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
    return Held({i: per_flow[i] for i in ids if i in per_flow}, per_stall)


def _unreadable(capture: dict[str, Any], index: FrameIndex | None) -> str | None:
    """Why the capture's payloads cannot be read again (None: they can)."""
    path = capture["path"]
    if capture.get("files") or path == "-" or url_scheme(path) or not os.path.isfile(path):
        return NOT_SEEKABLE
    if index is None and os.path.getsize(path) > FORWARD_BYTES:
        return NOT_SEEKABLE
    return None


def _first_stalls(flow: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Rows of the first SAMPLE_STALLS stalls (in table order) of each chosen flow."""
    order = np.argsort(flow, kind="stable")
    f = flow[order]
    rank = np.arange(len(f)) - np.searchsorted(f, f)
    keep = (rank < SAMPLE_STALLS) & np.isin(f, chosen)
    return np.sort(order[keep])


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
    return line if len(line) <= width else f"held: {message['held_message']} ({message['protocol']})"


PROTOCOL_NAMES = {"dns": "DNS", "tls": "TLS", "http/1.1": "HTTP/1", "postgresql": "PostgreSQL",
                  "smtp": "SMTP", "mqtt": "MQTT"}


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
    return (f"In {name} terms, from the {side}'s first stalls: {message['fix']}. The held "
            f"message says {call}{' too' if agree else ' instead'}: {why}.")
