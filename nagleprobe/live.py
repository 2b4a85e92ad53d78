"""Live analysis: each stall reported as soon as it is proven, in bounded memory per connection.

`nagleprobe watch` reads a capture that is still being written (a pipe from tcpdump, a
growing file, or tcpdump run on an interface) and cannot wait for connections to close: a
connection pool or a gRPC channel lives for days. So every open connection is analysed
again and again on a sliding window of its packets:

* per 4-tuple the analyser holds its handshake (`handshake.handshake_mask`: its first packet
  and the first HANDSHAKE_ROWS packets without payload: SYN, SYN/ACK, the ACK; they carry
  the MSS, the window scale, the roles and the handshake's round trips) and the last
  `window_rows` packets after it (the tail). Nothing
  else: what is held per connection is at most `window_rows + HANDSHAKE_ROWS` packets of
  `ANALYSED` columns (about 70 bytes each), whatever the connection's length;
* each analysis runs the judge (`engine.judge_window`: `build_flows` -> `detect`) on the handshake and
  the tail of the connections that received packets. Once the tail no longer follows the
  handshake, the handshake's sequence and acknowledgement numbers are moved to just before
  the tail (`_rebased`, with `handshake.rebased`), so the sequence space of a connection that sent gigabytes since its
  SYN is still read right;
* a stall is reported once: the released segment's (S2's) frame number is remembered per
  connection while it is held, and a stall found again in a later window is not reported
  again.

What a window cannot know: facts of the packets before the tail (a lower round trip, a
Nagle-off proof, the stalls that set a confidence) count only while they are held. A
connection shorter than the window is analysed whole, so its live verdicts equal the
whole-connection analysis up to what it had sent when the stall was reported (see
tests/test_live.py, which compares them on every sample).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import syns
from .decode import ACK, FIN, RST, SYN
from .engine import judge_window
from .handshake import handshake_mask, rebased
from .pipeline import DEFAULT_IDLE_S
from .selection import selected_stalls
from .stream import ANALYSED
from .tuples import TupleTable

DEFAULT_WINDOW_ROWS = 4096  # packets of a connection's tail held and analysed
DEFAULT_SUMMARY_S = 10.0
CLOSED_GRACE_S = 2.0  # a closed connection's packets are let go of this long after its last
# rows fed without an analysis (input coming faster than the analyses): then analyse anyway,
# so what is held stays bounded when a file or a burst is read at full speed
MAX_UNANALYSED_ROWS = 1 << 14
_HELD = {**ANALYSED, "tid": np.int64, "from_low": np.bool_, "hs": np.bool_}
_LOW_FIN, _HIGH_FIN, _RST = 1, 2, 4


def _utc(ns: int) -> str:
    """ISO 8601 UTC time with microseconds, e.g. 2026-11-23T21:04:53.123456Z."""
    s, us = divmod(int(ns) // 1000, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{us:06d}Z"


@dataclass
class _FlowTotals:
    """What was reported of one 4-tuple: its names, and its stalls in all and in the period."""

    client: str
    server: str
    stalls: int = 0
    lost_ms: float = 0.0
    period_stalls: int = 0
    period_lost_ms: float = 0.0
    period_max_ms: float = 0.0


@dataclass
class LiveAnalyzer:
    """Feed decoded TCP columns in capture order (`feed`); get the stalls proven so far as
    event dicts (`"event": "stall"`); `summary` and `final` give the other events.

    `window_rows`: tail of each connection held and analysed (the memory bound).
    `summary_s`: capture time between summaries (`summary` returns [] before that).
    `ports`, `hosts`, `min_confidence`: report only these flows' stalls, as `analyze`'s
    selection (`nagleprobe.selection`); a stall below the confidence is looked at again
    while it is held, and reported once its repeats raise its confidence.
    """

    window_rows: int = DEFAULT_WINDOW_ROWS
    ports: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    min_confidence: float | None = None
    summary_s: float = DEFAULT_SUMMARY_S
    idle_s: float = DEFAULT_IDLE_S
    packets: int = 0  # TCP packets fed
    now: int | None = None  # capture clock: latest timestamp fed (ns)
    peak_held_rows: int = 0
    _tuples: TupleTable = field(default_factory=TupleTable)
    _held: dict[str, np.ndarray] = field(
        default_factory=lambda: {k: np.zeros(0, t) for k, t in _HELD.items()})
    _new_rows: int = 0  # rows fed since the last analysis
    _seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows per tuple
    _trimmed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # tail cut
    _closed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    _last_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _touched: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # (tuple id << 40 | S2 frame) of the stalls reported whose S2 is still held, sorted
    _reported: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # the same keys of the candidates judged no stall whose S2 is still held, sorted: once
    # its tuple's tail is cut, such a candidate is never judged again (see `_stalls`)
    _judged: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _flows: dict[int, _FlowTotals] = field(default_factory=dict)
    _period_end: int | None = None
    syn_jumps: syns.Tally = field(default_factory=syns.Tally)  # SYNs left out
    # per tuple, the last frame of those counted (a window sees them again)
    _jump_top: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    # ------------------------------------------------------------------ input
    def feed(self, cols: dict[str, np.ndarray], analyse: bool = True) -> list[dict]:
        """Take decoded TCP rows; with `analyse` (or once MAX_UNANALYSED_ROWS rows wait),
        run the analysis and return the new stalls and the summaries due (else they wait
        for the next call that analyses)."""
        n = len(cols["frame"])
        if n:
            self._take(cols)
        if not self._new_rows or not (analyse or self._new_rows >= MAX_UNANALYSED_ROWS):
            return []
        return self.analyse()

    def _take(self, cols: dict[str, np.ndarray]) -> None:
        n = len(cols["frame"])
        tid, from_low = self._tuples.ids(cols)
        grow = self._tuples.count - len(self._seen)
        if grow > 0:
            self._seen = np.r_[self._seen, np.zeros(grow, np.int64)]
            self._trimmed = np.r_[self._trimmed, np.zeros(grow, bool)]
            self._closed = np.r_[self._closed, np.zeros(grow, np.uint8)]
            self._last_ts = np.r_[self._last_ts, np.full(grow, np.iinfo(np.int64).min)]
            self._touched = np.r_[self._touched, np.zeros(grow, bool)]
            self._jump_top = np.r_[self._jump_top, np.full(grow, -1, np.int64)]
        # each row's rank among the rows of its tuple so far: the first few control packets
        # (the handshake) are held for the connection's life
        order = np.argsort(tid, kind="stable")
        st = tid[order]
        first = np.r_[True, st[1:] != st[:-1]]
        rank_sorted = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
        rank = np.empty(n, np.int64)
        rank[order] = rank_sorted
        rank += self._seen[tid]
        flags = cols["flags"]
        hs = handshake_mask(rank, cols["payload"], flags)
        self._seen += np.bincount(tid, minlength=len(self._seen))
        # a SYN opens the 4-tuple again; FIN from both ends or RST closes it
        syn = (flags & (SYN | ACK)) == SYN
        self._closed[tid[syn]] = 0
        end = (flags & (FIN | RST)) != 0
        bits = np.where((flags & RST) != 0, _RST, np.where(from_low, _LOW_FIN, _HIGH_FIN))
        np.bitwise_or.at(self._closed, tid[end], bits[end].astype(np.uint8))
        np.maximum.at(self._last_ts, tid, cols["ts_ns"])
        self._touched[tid] = True
        ts_max = int(cols["ts_ns"].max())
        self.now = ts_max if self.now is None else max(self.now, ts_max)
        self.start_clock(int(cols["ts_ns"].min()))
        new = {k: np.asarray(cols[k], dtype=t) for k, t in ANALYSED.items()}
        new.update(tid=tid, from_low=from_low, hs=hs)
        self._held = {k: np.concatenate([self._held[k], new[k]]) for k in _HELD}
        self.packets += n
        self._new_rows += n
        self.peak_held_rows = max(self.peak_held_rows, len(self._held["tid"]))

    # ------------------------------------------------------------------ analysis
    def analyse(self) -> list[dict]:
        """Analyse the connections that received packets since the last call on their
        window; return the stalls not reported before; let go of what is no longer needed."""
        self._new_rows = 0
        h = self._held
        touched = self._touched[h["tid"]]
        self._touched[:] = False
        found: list[tuple[int, dict]] = []
        if touched.any():
            window = {k: v[touched] for k, v in h.items()}
            found = self._stalls(self._rebased(window))
        self._trim()
        return self._in_periods(found)

    def _in_periods(self, found: list[tuple[int, dict]]) -> list[dict]:
        """The stalls found (S2's time, event), each counted in the summary period of its
        S2 (or the current one, if that period's summary is out already), with the
        summaries of the periods that ended before each, in time order."""
        out = []
        for ns, event in sorted(found, key=lambda x: x[0]):
            out += self.summary(at=ns)
            tot = self._flows[event["flow"]]
            tot.period_stalls += 1
            tot.period_lost_ms += event["delay_ms"]
            tot.period_max_ms = max(tot.period_max_ms, event["delay_ms"])
            out.append(event)
        return out + self.summary()

    def _rebased(self, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The window with the handshake of each connection whose tail was cut moved in
        sequence space to just before the tail (`handshake.rebased`): per direction, its
        sequence numbers (and the peer's acknowledgements of them) shifted so the handshake
        ends where the tail's first packet of that direction starts."""
        tid, hs, fl = w["tid"], w["hs"], w["from_low"]
        cut = self._trimmed[tid]
        if not (cut & hs).any():
            return w
        k = tid * 2 + fl  # (tuple, direction) of each row's sender
        size = 2 * len(self._trimmed)
        tail = np.flatnonzero(cut & ~hs)
        first_tail = np.full(size, -1, np.int64)
        first_tail[k[tail[::-1]]] = w["seq"][tail[::-1]]  # the first tail row of each direction
        return rebased(w, np.flatnonzero(cut & hs), k, size, first_tail)

    def _count_syn_jumps(self, w: dict[str, np.ndarray], frames: np.ndarray) -> None:
        """Count the SYNs a window left out that no earlier window counted: per 4-tuple,
        those after the last one counted (frame numbers only grow)."""
        by_frame = np.argsort(w["frame"])
        tid = w["tid"][by_frame[np.searchsorted(w["frame"], frames, sorter=by_frame)]]
        new = frames > self._jump_top[tid]
        self.syn_jumps.add(frames[new])
        np.maximum.at(self._jump_top, tid[new], frames[new])

    def _stalls(self, w: dict[str, np.ndarray]) -> list[tuple[int, dict]]:
        """Run flows and detection on the window; the stalls not reported yet, as (S2's
        time, event)."""
        _, local = np.unique(w["tid"], return_inverse=True)
        f, ev, _, det = judge_window({k: w[k] for k in ANALYSED}, local)
        if len(f.syn_jumps):
            self._count_syn_jumps(w, f.syn_jumps)
        st = det.stalls
        by_frame = np.argsort(w["frame"])
        first_row = np.searchsorted(w["frame"], f.seg["frame"][f.starts], sorter=by_frame)
        flow_tid = w["tid"][by_frame[first_row]]
        judged = self._judged
        cand = ev.candidates
        rejected = np.setdiff1d((flow_tid[cand["key"] >> 1] << 40)
                                | cand["released_frame"].astype(np.int64),
                                (flow_tid[st["flow"]] << 40)
                                | st["released_frame"].astype(np.int64))
        self._judged = np.union1d(judged, rejected)
        if not len(st["flow"]):
            return []
        order = np.lexsort((st["released_frame"], st["released_ns"]))
        flow = st["flow"][order]
        tid = flow_tid[flow]
        key = (tid << 40) | st["released_frame"][order].astype(np.int64)
        done = self._reported
        pos = np.minimum(np.searchsorted(done, key), max(len(done) - 1, 0))
        seen = done[pos] == key if len(done) else np.zeros(len(key), bool)
        # judged no stall before, and the tail cut since: what ruled it out (the window it
        # was sent into, the path's round trips) may no longer be held, and the whole
        # connection's analysis keeps that "no"
        pos = np.minimum(np.searchsorted(judged, key), max(len(judged) - 1, 0))
        seen |= (judged[pos] == key if len(judged) else False) & self._trimmed[tid]
        new, tid, flow, key = order[~seen], tid[~seen], flow[~seen], key[~seen]
        fl = f.flow
        if len(new) and (self.ports or self.hosts or self.min_confidence):
            keep = selected_stalls(fl["client"][flow], fl["server"][flow],
                                   st["confidence"][new], self.ports, self.hosts,
                                   self.min_confidence)
            new, tid, flow, key = new[keep], tid[keep], flow[keep], key[keep]
        if not len(new):
            return []
        self._reported = np.union1d(self._reported, key)
        client = fl["client"][flow].tolist()
        server = fl["server"][flow].tolist()
        col = {k: st[k][new].tolist() for k in ("dir", "released_ns", "stall_ns", "ack_delay_ns",
                                                "small_frame", "ack_frame", "released_frame",
                                                "held_bytes", "confidence")}
        events = []
        for j, t in enumerate(tid.tolist()):
            sender = "client" if col["dir"][j] == 0 else "server"
            delay = col["stall_ns"][j] / 1e6
            totals = self._flows.setdefault(t, _FlowTotals(client[j], server[j]))
            totals.stalls += 1
            totals.lost_ms += delay
            events.append((col["released_ns"][j], {
                "event": "stall", "time": _utc(col["released_ns"][j]), "flow": t,
                "client": client[j], "server": server[j], "sender": sender,
                "endpoint": client[j] if sender == "client" else server[j],
                "delay_ms": round(delay, 3),
                "peer_ack_delay_ms": round(col["ack_delay_ns"][j] / 1e6, 3),
                "frames": [col["small_frame"][j], col["ack_frame"][j], col["released_frame"][j]],
                "held_bytes": col["held_bytes"][j], "confidence": col["confidence"][j]}))
        return events

    def _trim(self) -> None:
        """Keep per 4-tuple its handshake and its last window_rows other rows; let go of
        connections closed (or silent) long enough, and of remembered S2 frames no longer
        held."""
        h = self._held
        tid = h["tid"]
        if not len(tid):
            return
        closed = ((self._closed & _RST) != 0) | ((self._closed & 3) == 3)
        now = self.now if self.now is not None else 0
        gone = (closed & (self._last_ts + int(CLOSED_GRACE_S * 1e9) <= now)) | (
            self._last_ts + int(self.idle_s * 1e9) <= now)
        # rank of each tail row counted from its tuple's newest
        tail = ~h["hs"]
        rows = np.flatnonzero(tail)
        t = tid[rows]
        order = np.argsort(t, kind="stable")
        ts_ = t[order]
        last = np.r_[ts_[1:] != ts_[:-1], True] if len(ts_) else np.zeros(0, bool)
        idx = np.arange(len(ts_))
        group_end = np.minimum.accumulate(np.where(last, idx, len(ts_))[::-1])[::-1]
        from_end = np.empty(len(rows), np.int64)
        from_end[order] = group_end - idx
        keep = ~gone[tid]
        drop_tail = np.zeros(len(tid), bool)
        drop_tail[rows] = from_end >= self.window_rows
        if drop_tail.any():
            self._trimmed[np.unique(tid[drop_tail])] = True
        keep &= ~drop_tail
        if not keep.all():
            self._held = {k: v[keep] for k, v in h.items()}
            self._seen[gone] = 0  # a later packet starts over: its first rows are a handshake
            self._trimmed[gone] = False
            self._closed[gone] = 0
            if len(self._reported) or len(self._judged):  # forget S2 frames no longer held
                oldest = np.full(len(self._seen), np.iinfo(np.int64).max)
                tail = ~self._held["hs"]
                np.minimum.at(oldest, self._held["tid"][tail],
                              self._held["frame"][tail].astype(np.int64))
                r, j = self._reported, self._judged
                self._reported = r[(r & ((1 << 40) - 1)) >= oldest[r >> 40]]
                self._judged = j[(j & ((1 << 40) - 1)) >= oldest[j >> 40]]

    @property
    def remembered_stalls(self) -> int:
        """Stalls remembered as reported (those whose S2 is still held)."""
        return len(self._reported)

    # ------------------------------------------------------------------ summaries
    def start_clock(self, ts_ns: int) -> None:
        """The first summary period starts at `ts_ns` (the first packet's time), unless
        started already."""
        if self._period_end is None:
            self._period_end = ts_ns + int(self.summary_s * 1e9)

    def summary(self, final: bool = False, at: int | None = None) -> list[dict]:
        """Once `summary_s` of capture time has passed since the last summary (the clock is
        at `at` if given, else the latest packet's time), or with `final`: one event per
        connection with stalls reported in the period."""
        clock = at if at is not None else (self.now or 0)
        if self._period_end is None or (not final and clock < self._period_end):
            return []
        end = self.now if final else self._period_end
        step = int(self.summary_s * 1e9)
        # the final summary's period is the part of a period up to the last packet
        span = round(max(end - self._period_end + step, 0) / 1e9, 6) if final else self.summary_s
        out = []
        for t, tot in self._flows.items():
            if tot.period_stalls:
                out.append({"event": "summary", "time": _utc(end), "period_s": span,
                            "flow": t, "client": tot.client, "server": tot.server,
                            "stalls": tot.period_stalls,
                            "lost_ms": round(tot.period_lost_ms, 3),
                            "max_delay_ms": round(tot.period_max_ms, 3)})
                tot.period_stalls, tot.period_lost_ms, tot.period_max_ms = 0, 0.0, 0.0
        if not final:  # the next period ends after the clock
            self._period_end += step * ((clock - self._period_end) // step + 1)
        return out

    def final(self, capture: dict) -> dict:
        """The final report: totals of everything reported, per connection with stalls.
        `capture`: what the reader says (packets read, skipped by reason, warnings)."""
        flows = [{"flow": t, "client": tot.client, "server": tot.server, "stalls": tot.stalls,
                  "lost_ms": round(tot.lost_ms, 3)}
                 for t, tot in sorted(self._flows.items())]
        skipped, warnings = self.syn_jumps.told(capture.get("skipped", {}),
                                                capture.get("warnings", []))
        capture = {**capture, "skipped": skipped, "warnings": warnings}
        return {"event": "final", **capture, "tcp_packets": self.packets,
                "connections": self._tuples.count,
                "stalls": sum(f["stalls"] for f in flows),
                "lost_ms": round(sum(tot.lost_ms for tot in self._flows.values()), 3),
                "flows": flows}
