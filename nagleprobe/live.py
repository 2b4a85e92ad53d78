"""Live analysis: each stall reported as soon as it is proven, in bounded memory per connection.

`nagleprobe watch` reads a capture that is still being written (a pipe from tcpdump, a
growing file, or tcpdump run on an interface) and cannot wait for connections to close: a
connection pool or a gRPC channel lives for days. So every open connection is judged again
each time it received packets, by the judge every other way of running nagleprobe uses
(`engine`):

* a connection is held whole while it is short (at most `window_rows` packets): each
  analysis judges the connections that received packets (`engine.judge_window`), so its live
  verdicts equal the whole-connection analysis up to what it had sent;
* once longer, its packets beyond the last `window_rows` are handed to its `pieces.Ledger`
  (as the stream does with a connection too long to hold), deciding about the rows before
  the window; the window stays held, so packets out of time order can still join it. Its
  verdicts are the Ledger's: judged as if the connection ended now with the window as its
  last piece (`Ledger.provisional`), and for good once it is let go of (`Ledger.finish`:
  closed, or idle). What is held per connection is at most `window_rows` packets of
  `ANALYSED` columns (95 bytes each with the tuple and direction) plus the rows the Ledger
  carries, whatever the connection's length;
* a stall is reported once: its released segment's (S2's) frame is remembered per connection
  until the Ledger has decided about S2's rows; a candidate the Ledger decided about before
  it was reported is remembered while the Ledger keeps it raw, and reported if the Ledger's
  later facts (a shorter round trip, more repeats) make it a stall.

A SYN with a new initial sequence number on a connection carried by a Ledger ends it (its
final verdicts are judged) and starts a new one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import syns
from .columns import Columns, take
from .decode import ACK, FIN, RST, SYN
from .engine import judge_window
from .pieces import Ledger, last_connection
from .pipeline import DEFAULT_IDLE_S
from .selection import selected_stalls
from .stream import ANALYSED, HELD
from .tuples import TupleTable
from .verdicts import Limits
from .weirds import Weird, fact

DEFAULT_WINDOW_ROWS = 4096  # packets of a connection held whole and analysed
DEFAULT_SUMMARY_S = 10.0
CLOSED_GRACE_S = 2.0  # a closed connection's packets are let go of this long after its last
# rows fed without an analysis (input coming faster than the analyses): then analyse anyway,
# so what is held stays bounded when a file or a burst is read at full speed
MAX_UNANALYSED_ROWS = 1 << 14
_HELD = {**ANALYSED, "tid": np.int64, "from_low": np.bool_}
_LOW_FIN, _HIGH_FIN, _RST = 1, 2, 4
_NEVER = np.iinfo(np.int64).min
_STALL_COLUMNS = ("dir", "released_ns", "stall_ns", "ack_delay_ns", "small_frame",
                  "ack_frame", "released_frame", "held_bytes", "confidence")


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

    `window_rows`: packets of each connection held (the memory bound); a longer connection's
    older packets are carried by its `pieces.Ledger` (bounded by `piece_limits`).
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
    piece_limits: Limits = field(default_factory=Limits)
    packets: int = 0  # TCP packets fed
    now: int | None = None  # capture clock: latest timestamp fed (ns)
    peak_held_rows: int = 0  # rows held (not yet handed to a Ledger, or carried by one)
    late_in_pieces: int = 0  # rows left out: older than what their connection's Ledger decided
    # why a Ledger's verdicts may differ from the whole-connection analysis: connections
    inexact: dict[str, int] = field(default_factory=dict)
    _tuples: TupleTable = field(default_factory=TupleTable)
    _held: Columns = field(
        default_factory=lambda: {k: np.zeros(0, t) for k, t in _HELD.items()})
    _new_rows: int = 0  # rows fed since the last analysis
    _closed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    _last_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _touched: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    _ledgers: dict[int, Ledger] = field(default_factory=dict)  # the long connections'
    # per tuple: rows before this time are decided by its Ledger (_NEVER: no Ledger)
    _decided: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # (tuple id << 40 | S2 frame) of the stalls reported, sorted, and their S2's times:
    # kept while the tuple is held and S2 is not decided by its Ledger
    _reported: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _reported_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # the same keys of the candidates a Ledger decided about while they were not reported
    # and still keeps raw, sorted: one its later facts make a stall is reported then
    _unreported: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _flows: dict[int, _FlowTotals] = field(default_factory=dict)
    _period_end: int | None = None
    syn_jumps: syns.Tally = field(default_factory=syns.Tally)  # SYNs left out
    # per tuple, the last frame of those counted (an analysis sees them again)
    _jump_top: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    # ------------------------------------------------------------------ input
    def feed(self, cols: Columns, analyse: bool = True) -> list[dict]:
        """Take decoded TCP rows; with `analyse` (or once MAX_UNANALYSED_ROWS rows wait),
        run the analysis and return the new stalls and the summaries due (else they wait
        for the next call that analyses)."""
        n = len(cols["frame"])
        if n:
            self._take(cols)
        if not self._new_rows or not (analyse or self._new_rows >= MAX_UNANALYSED_ROWS):
            return []
        return self.analyse()

    def _take(self, cols: Columns) -> None:
        self.packets += len(cols["frame"])
        tid, from_low = self._tuples.ids(cols)
        grow = self._tuples.count - len(self._closed)
        if grow > 0:
            self._closed = np.r_[self._closed, np.zeros(grow, np.uint8)]
            self._last_ts = np.r_[self._last_ts, np.full(grow, np.iinfo(np.int64).min)]
            self._touched = np.r_[self._touched, np.zeros(grow, bool)]
            self._decided = np.r_[self._decided, np.full(grow, _NEVER, np.int64)]
            self._jump_top = np.r_[self._jump_top, np.full(grow, -1, np.int64)]
        if self._ledgers:
            cols, tid, from_low = self._without_foreign_syns(cols, tid, from_low)
        flags = cols["flags"]
        # a SYN opens the 4-tuple again; FIN from both ends or RST closes it
        syn = (flags & (SYN | ACK)) == SYN
        self._closed[tid[syn]] = 0
        end = (flags & (FIN | RST)) != 0
        bits = np.where((flags & RST) != 0, _RST, np.where(from_low, _LOW_FIN, _HIGH_FIN))
        np.bitwise_or.at(self._closed, tid[end], bits[end].astype(np.uint8))
        np.maximum.at(self._last_ts, tid, cols["ts_ns"])
        self._touched[tid] = True
        # rows older than what a Ledger decided of their connection cannot join it
        older = cols["ts_ns"] < self._decided[tid]
        if older.any():
            self.late_in_pieces += int(older.sum())
            cols = {k: v[~older] for k, v in cols.items()}
            tid, from_low = tid[~older], from_low[~older]
        n = len(tid)
        if not n:
            return
        ts_max = int(cols["ts_ns"].max())
        self.now = ts_max if self.now is None else max(self.now, ts_max)
        self.start_clock(int(cols["ts_ns"].min()))
        new = {k: np.asarray(cols[k], dtype=t) for k, t in ANALYSED.items()}
        new.update(tid=tid, from_low=from_low)
        self._held = {k: np.concatenate([self._held[k], new[k]]) for k in _HELD}
        self._new_rows += n
        self._note_held()

    def _without_foreign_syns(self, cols: Columns, tid: np.ndarray, from_low: np.ndarray
                              ) -> tuple[Columns, np.ndarray, np.ndarray]:
        """The rows less the SYNs with a new ISN on connections carried by a Ledger (long,
        so established) that fit no connection (`syns.fits_no_connection`, judged on this
        chunk's rows, as the stream does): left out and counted."""
        syn = np.flatnonzero((cols["flags"] & (SYN | ACK)) == SYN)
        new_isn = [r for r in syn.tolist()  # (few)
                   if (led := self._ledgers.get(int(tid[r]))) is not None
                   and int(cols["seq"][r]) != led.syn_seq()]
        foreign = np.flatnonzero(syns.fits_no_connection(
            tid, cols, np.array(new_isn, np.int64), self._closed != 0, self._last_ts))
        if not len(foreign):
            return cols, tid, from_low
        self._count_syn_jumps(tid[foreign], cols["frame"][foreign].astype(np.int64))
        keep = np.ones(len(tid), bool)
        keep[foreign] = False
        return {k: v[keep] for k, v in cols.items()}, tid[keep], from_low[keep]

    def _note_held(self) -> None:
        """Note the rows held now: not yet handed to a Ledger, and carried by the Ledgers."""
        carried = sum(led.held_rows for led in self._ledgers.values())
        self.peak_held_rows = max(self.peak_held_rows, len(self._held["tid"]) + carried)

    def _count_inexact(self, led: Ledger, into: dict[str, int] | None = None) -> dict[str, int]:
        """Count the reasons why `led`'s verdicts may differ from the whole analysis'."""
        into = self.inexact if into is None else into
        for why in led.inexact:
            into[why] = into.get(why, 0) + 1
        return into

    def _all_inexact(self) -> dict[str, int]:
        """`inexact` with the connections still carried by a Ledger."""
        out = dict(self.inexact)
        for led in self._ledgers.values():
            self._count_inexact(led, out)
        return out

    # ------------------------------------------------------------------ analysis
    def analyse(self) -> list[dict]:
        """Judge the connections that received packets since the last call; return the
        stalls not reported before; hand the rows beyond the window to the Ledgers; let go
        of what is no longer needed."""
        self._new_rows = 0
        touched = np.flatnonzero(self._touched)
        self._touched[:] = False
        found: list[tuple[int, dict]] = []
        for t in [t for t in touched.tolist() if t in self._ledgers]:  # (few: long ones)
            found += self._pieced_stalls(t)
        short = self._touched_rows(touched)
        if short.any():
            found += self._stalls(take(self._held, np.flatnonzero(short)))
        self._hand_over()
        found += self._let_go()
        return self._in_periods(found)

    def _touched_rows(self, touched: np.ndarray) -> np.ndarray:
        """Which held rows are of the tuples `touched` held whole (no Ledger)."""
        mine = np.zeros(len(self._closed), bool)
        mine[touched] = True
        mine[list(self._ledgers)] = False
        return mine[self._held["tid"]]

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

    def _count_syn_jumps(self, tid: np.ndarray, frames: np.ndarray) -> None:
        """Count the SYNs left out (`tid`: their tuples) that no earlier analysis counted:
        per 4-tuple, those after the last one counted (frame numbers only grow)."""
        new = frames > self._jump_top[tid]
        self.syn_jumps.add(frames[new])
        np.maximum.at(self._jump_top, tid[new], frames[new])

    def _stalls(self, w: Columns) -> list[tuple[int, dict]]:
        """Judge the connections held whole whose rows are `w`; their stalls not reported
        yet, as (S2's time, event)."""
        _, local = np.unique(w["tid"], return_inverse=True)
        f, _, _, det = judge_window({k: w[k] for k in ANALYSED}, local)
        by_frame = np.argsort(w["frame"])
        if len(f.syn_jumps):
            at = by_frame[np.searchsorted(w["frame"], f.syn_jumps, sorter=by_frame)]
            self._count_syn_jumps(w["tid"][at], f.syn_jumps)
        first_row = np.searchsorted(w["frame"], f.seg["frame"][f.starts], sorter=by_frame)
        flow_tid = w["tid"][by_frame[first_row]]
        return self._events(det.stalls, flow_tid, f.flow)

    def _rows_of(self, t: int) -> tuple[Columns, np.ndarray]:
        """The rows held of tuple `t` in time order (HELD columns), and their positions."""
        at = np.flatnonzero(self._held["tid"] == t)
        at = at[np.lexsort((self._held["frame"][at], self._held["ts_ns"][at]))]
        return {k: self._held[k][at] for k in HELD}, at

    def _pieced_stalls(self, t: int) -> list[tuple[int, dict]]:
        """Judge the connection carried by tuple `t`'s Ledger as if it ended now; its
        stalls not reported yet. A SYN with a new initial sequence number among its rows
        held ends it: judged for good with the rows before the SYN, the rest held whole."""
        led = self._ledgers[t]
        rows, at = self._rows_of(t)
        isn = led.syn_seq()
        syn = np.flatnonzero(((rows["flags"] & (SYN | ACK)) == SYN)
                             & ((rows["seq"] != isn) if isn is not None else True))
        one = self._tuples.ends(np.array([t]))
        if not len(syn):
            f, det = led.provisional(rows, one)
            return self._events(det.stalls, np.full(1, t), f.flow)
        cut = int(syn[0])
        f, det = led.finish(take(rows, np.arange(cut)), one)
        found = self._events(det.stalls, np.full(1, t), f.flow)
        self._count_inexact(self._ledgers.pop(t))
        self._decided[t] = _NEVER
        self._unreported = self._unreported[(self._unreported >> 40) != t]
        gone = np.zeros(len(self._held["tid"]), bool)
        gone[at[:cut]] = True
        self._held = {k: v[~gone] for k, v in self._held.items()}
        return found

    def _events(self, st: Columns, flow_tid: np.ndarray,
                fl: Columns) -> list[tuple[int, dict]]:
        """Of the stalls `st` (of flows `fl`, flow i of tuple flow_tid[i]), those not
        reported before and selected, as (S2's time, event); remembered as reported."""
        if not len(st["flow"]):
            return []
        order = np.lexsort((st["released_frame"], st["released_ns"]))
        flow = st["flow"][order]
        tid = flow_tid[flow]
        ns = st["released_ns"][order].astype(np.int64)
        key = (tid << 40) | st["released_frame"][order].astype(np.int64)
        seen = np.isin(key, self._reported) | (
            (ns < self._decided[tid]) & ~np.isin(key, self._unreported))
        new, tid, flow, key, ns = (order[~seen], tid[~seen], flow[~seen], key[~seen],
                                   ns[~seen])
        if len(new) and (self.ports or self.hosts or self.min_confidence):
            keep = selected_stalls(fl["client"][flow], fl["server"][flow],
                                   st["confidence"][new], self.ports, self.hosts,
                                   self.min_confidence)
            new, tid, flow, key, ns = new[keep], tid[keep], flow[keep], key[keep], ns[keep]
        if not len(new):
            return []
        self._unreported = np.setdiff1d(self._unreported, key)
        keys, ns = np.r_[self._reported, key], np.r_[self._reported_ns, ns]
        by_key = np.argsort(keys)
        self._reported, self._reported_ns = keys[by_key], ns[by_key]
        client = fl["client"][flow].tolist()
        server = fl["server"][flow].tolist()
        col = {k: st[k][new].tolist() for k in _STALL_COLUMNS}
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

    def _hand_over(self) -> None:
        """Hand each tuple's rows beyond its last window_rows to its Ledger (made for the
        first): the Ledger decides about those before the window (`safe_ns`: the window's
        first packet's time; the window can still be joined by packets out of time order)."""
        tid = self._held["tid"]
        count = np.bincount(tid, minlength=len(self._closed))
        long = np.flatnonzero(count > self.window_rows)
        if not len(long):
            return
        given = np.zeros(len(tid), bool)
        for t in long.tolist():  # (few: long ones)
            rows, at = self._rows_of(t)
            led = self._ledgers.get(t)
            if led is None:  # connections before a SYN with a new ISN were judged whole
                rows, jumps = syns.without_foreign(rows)  # (as the stream's first piece)
                if len(jumps):
                    self._count_syn_jumps(np.full(len(jumps), t), jumps.astype(np.int64))
                    left = np.isin(self._held["frame"][at], jumps)
                    given[at[left]] = True  # (let go of: left out)
                    at = at[~left]
                rows, ended = last_connection(rows)
                before = 0 if ended is None else len(ended["frame"])
                given[at[:before]] = True
                at = at[before:]
            n = len(at)
            if n <= self.window_rows:
                continue
            piece = take(rows, np.arange(n - self.window_rows))
            safe = int(rows["ts_ns"][n - self.window_rows])
            one = self._tuples.ends(np.array([t]))
            if led is None:
                led = self._ledgers[t] = Ledger.first(piece, one, safe, self.piece_limits)
                led.arrivals = None  # (relays are not linked live)
            else:
                led.add(piece, one, safe)
            self._note_unreported(t, led)
            self._decided[t] = led.cut
            mine = self._unreported[(self._unreported >> 40) == t]
            led.verdicts.forget(led.cut, mine & ((1 << 40) - 1))  # (those reported)
            given[at[:n - self.window_rows]] = True
        self._held = {k: v[~given] for k, v in self._held.items()}
        self._note_held()
        if len(self._reported):  # forget S2 frames decided by a Ledger
            keep = self._reported_ns >= self._decided[self._reported >> 40]
            self._reported, self._reported_ns = self._reported[keep], self._reported_ns[keep]

    def _note_unreported(self, t: int, led: Ledger) -> None:
        """Of tuple `t`'s candidates its Ledger keeps raw, remember those it has just decided
        about (before `led.cut`, not before `_decided[t]`) that were not reported; forget
        those it no longer keeps raw."""
        frame, ns = led.verdicts.kept()
        key = (np.int64(t) << 40) | frame
        mine = (self._unreported >> 40) == t
        keep = np.isin(self._unreported, key) | ~mine
        now_decided = (ns >= self._decided[t]) & (ns < led.cut)
        new = key[now_decided & ~np.isin(key, self._reported)]
        self._unreported = np.union1d(self._unreported[keep], new)

    def _let_go(self) -> list[tuple[int, dict]]:
        """Let go of connections closed (or silent) long enough: their rows, their Ledger
        (its final verdicts judged first: `Ledger.finish`; stalls not reported yet
        returned), the S2 frames remembered."""
        closed = ((self._closed & _RST) != 0) | ((self._closed & 3) == 3)
        now = self.now if self.now is not None else 0
        gone = (closed & (self._last_ts + int(CLOSED_GRACE_S * 1e9) <= now)) | (
            self._last_ts + int(self.idle_s * 1e9) <= now)
        if not gone.any():
            return []
        found: list[tuple[int, dict]] = []
        for t in [t for t in self._ledgers if gone[t]]:  # (few: long ones)
            led = self._ledgers.pop(t)
            f, det = led.finish(self._rows_of(t)[0], self._tuples.ends(np.array([t])))
            found += self._events(det.stalls, np.full(1, t), f.flow)
            self._count_inexact(led)
        self._decided[gone] = _NEVER
        self._closed[gone] = 0
        keep = ~gone[self._held["tid"]]
        if not keep.all():
            self._held = {k: v[keep] for k, v in self._held.items()}
        if len(self._reported):
            keep = ~gone[self._reported >> 40]
            self._reported, self._reported_ns = self._reported[keep], self._reported_ns[keep]
        self._unreported = self._unreported[~gone[self._unreported >> 40]]
        return found

    @property
    def pieced(self) -> int:
        """Connections carried by a Ledger now (longer than the window)."""
        return len(self._ledgers)

    @property
    def remembered_stalls(self) -> int:
        """Stalls remembered as reported (of connections held, those whose S2 their Ledger
        has not decided about)."""
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
        `capture`: what the reader says (packets read, skipped by reason, warnings); each
        warning a fact: {"code", "count", "text"}, as in the report's JSON."""
        flows = [{"flow": t, "client": tot.client, "server": tot.server, "stalls": tot.stalls,
                  "lost_ms": round(tot.lost_ms, 3)}
                 for t, tot in sorted(self._flows.items())]
        skipped, warnings = self.syn_jumps.told(capture.get("skipped", {}),
                                                capture.get("warnings", []))
        warnings = warnings + [
            Weird("inexact-pieces", f"{n} of the connections analysed in pieces may differ "
                  f"from the whole-connection analysis in {why}", n)
            for why, n in sorted(self._all_inexact().items())]
        if self.late_in_pieces:
            warnings.append(Weird(
                "late-in-pieces", f"{self.late_in_pieces} TCP packets arrived after later "
                "packets of their connection, which was being analysed in pieces, had been "
                "decided, and were left out of it", self.late_in_pieces))
        capture = {**capture, "skipped": skipped, "warnings": [fact(w) for w in warnings]}
        return {"event": "final", **capture, "tcp_packets": self.packets,
                "connections": self._tuples.count,
                "stalls": sum(f["stalls"] for f in flows),
                "lost_ms": round(sum(tot.lost_ms for tot in self._flows.values()), 3),
                "flows": flows}
