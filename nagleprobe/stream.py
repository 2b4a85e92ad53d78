"""Streamed analysis: decoded chunks in, one Report out, memory bounded by open connections.

`build_flows` and `detect` judge every TCP connection from its own packets only (MSS,
round trips, neighbours, medians: all per flow). So the stream holds the decoded rows of
each 4-tuple while its connection is open, and hands the rows of finished connections to
build_flows -> detect -> build_report in batches; the per-batch tables are joined at the end
and the flows renumbered as the whole-file analysis numbers them (by first packet time, then
frame number). Memory is the rows of connections still open, plus one batch, plus the result
tables; it does not grow with the length of the capture.

The batches are independent, so on a machine with several cores they are analysed in
worker threads while the calling thread reads and decodes on (numpy lets go of the GIL for
its array work, so the threads really run at once).

A 4-tuple is finished once its connection closed (FIN seen from both ends, or a RST) and the
capture clock (the latest timestamp read so far) has moved `reorder_window_s` past its last packet.
That grace is also the reorder window: records need not be in time order (`tcpdump -i any`,
merged files), since each connection's rows are sorted when it is analysed, but a packet that
turns up for a connection already handed on (more than `reorder_window_s` after it closed, in capture
time) cannot join it. Such packets are left out, counted in a warning, and only then can the
result differ from the whole-file analysis. A SYN with a new ISN on a finished 4-tuple starts
a new connection, as in the whole-file analysis.

Over 500 lines: a 4-tuple's life here (open, closed, past the reorder window, idle, reused
with a new ISN), the batches handed to worker threads and the joining of their results in
the whole-file analysis's order, and the hand-on of long connections' pieces, all read
and write the same per-tuple arrays; split apart,
each piece would need the others' state.
"""

from __future__ import annotations

import ctypes
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import syns
from .decode import ACK, FIN, RST, SYN, TCP_COLUMNS, empty_columns
from .detect import Detection, detect
from .flows import Flows, build_flows
from .jsonrows import factorize
from .pieces import PIECE_ROWS, Ledger, Limits, in_time_order, last_connection
from .read import CaptureInfo
from .relay import MAX_ARRIVALS, arrivals, link, relay_warning
from .report import Report
from .tables import capture_doc, report_columns
from .tuples import RowsOf, TupleEnds, TupleTable, place_rows, take_rows, tally
from .weirds import Weird
from .wireshark import add_tcp_streams

# the decoded columns the analysis reads (SACK permission is not)
ANALYSED = {k: t for k, t in TCP_COLUMNS.items() if k != "sack_ok"}
# held and gathered per row: addresses and ports are held once per 4-tuple (tuples.TupleEnds),
# each row only says which way it travels
ADDRESSES = ("ipver", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport", "tunnel")
HELD = {**{k: t for k, t in ANALYSED.items() if k not in ADDRESSES},
        "from_low": np.dtype(bool)}
# held columns build_flows reads at a few rows only (SYNs, candidates for copies of a packet):
# a batch leaves them in its chunks
READ_AT_FEW = frozenset({"mss", "wscale", "tsval", "has_ts", "ipid"})
# in a batch's list of chunks, one it takes no rows from
_GONE = {k: np.zeros(0, t) for k, t in HELD.items()}
DEFAULT_BATCH_ROWS = 1 << 18
# ... or this many already when no batch is being analysed (the start of a capture)
IDLE_BATCH_ROWS = 1 << 16
# and at most this many connections per batch: a batch's working memory and its result
# grow with its connections, and a SYN flood hands on a million one-packet ones at once
BATCH_FLOWS = 1 << 14

_LOW_FIN, _HIGH_FIN, _RST = 1, 2, 4
# text columns of the results with a handful of values, made a str per row: each row is made
# to refer to one shared str (a million flows held "handshake" a million times, 60 bytes
# each). The others (side, nagle, nagle_flavour, fix_side, ...) are made of shared str.
_FEW_VALUES = frozenset({"roles", "mss_how", "mss_from", "vantage", "vantage_basis"})


def _interned(col: np.ndarray) -> np.ndarray:
    """An object column whose equal strings are one object."""
    if col.dtype != object or len(col) < 2:
        return col
    codes, uniques = factorize(col)  # code -1 (None, NaN) picks the None after them
    return np.array(uniques + [None], dtype=object)[codes].reshape(col.shape)


def _libc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (AttributeError, OSError, TypeError):  # other C libraries, Windows
        return None


_malloc_trim = _libc_trim()
TRIM_EVERY = 16
TRIM_ROWS = 1 << 20  # joined stall columns this long give their copies back at once
# the flows' and endpoints' columns from this long on (a trim costs milliseconds; a
# million flows' parts kept by the heap took 0.5 GB more at the peak)
TRIM_JOIN_ROWS = 1 << 18


def release_free_memory() -> None:
    """Give the heap's free pages back to the system. glibc keeps the memory of freed numpy
    arrays and tables in its heaps (one per thread), so without this the process's RSS
    keeps the high-water mark of every batch: 760 MB instead of 480 MB after 50 M packets.
    It costs the page faults of memory used again (after every hand-on: 3.5 s more per 50 M
    packets), so the stream does it only every TRIM_EVERY hand-ons."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def default_workers() -> int:
    """Threads to analyse batches in: one per core (up to 4), none on a single core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(cores or 1, 4) if (cores or 1) > 1 else 0


@dataclass
class _Part:
    """One batch's result: its tables as `tables.report_columns` gives them."""

    flows: dict[str, np.ndarray]
    stalls: dict[str, np.ndarray]
    endpoints: dict[str, np.ndarray]
    first_ns: np.ndarray
    first_frame: np.ndarray
    tcp_packets: int
    arrivals: dict[str, np.ndarray]
    duplicates: int
    # frames of the SYNs that fit no connection (`nagleprobe.syns`), left out
    syn_jumps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _gather(chunks: list[dict[str, np.ndarray]], which: np.ndarray, rows: np.ndarray
            ) -> dict[str, np.ndarray]:
    """One table of a batch's rows: row i is row rows[i] of chunk which[i] (in the order
    `StreamAnalyzer._hand_on` placed them: grouped by 4-tuple, in time order within, as
    `build_flows` reads them in place). The columns it reads at a few rows only
    (READ_AT_FEW) stay in the chunks (`tuples.RowsOf`)."""
    gathered = {k: np.empty(len(rows), t) for k, t in HELD.items() if k not in READ_AT_FEW}
    take_rows([[cols[k] for cols in chunks] for k in gathered], which, rows,
              list(gathered.values()))
    return {k: gathered[k] if k in gathered else RowsOf([cols[k] for cols in chunks], which, rows)
            for k in HELD}


@dataclass
class _Held:
    """A decoded chunk held for its open connections: its rows still held are `live`
    (None: all of them)."""

    cols: dict[str, np.ndarray]
    tid: np.ndarray
    live: np.ndarray | None = None
    count: int = 0

    def without(self, gone: np.ndarray, k: int) -> _Held | None:
        """This chunk less the rows `gone` (k of them); copied smaller once fewer than half
        its rows are held, so it keeps no more than twice its live rows' memory."""
        live = ~gone if self.live is None else self.live & ~gone
        count = (len(self.tid) if self.live is None else self.count) - k
        if count == 0:
            return None
        if count * 2 >= len(self.tid):
            return _Held(self.cols, self.tid, live, count)
        keep = np.flatnonzero(live)
        return _Held({c: v[keep] for c, v in self.cols.items()}, self.tid[keep])


def _analyse(cols: dict[str, np.ndarray], tuples: np.ndarray | None, ends: TupleEnds | None,
             origin_ns: int, relays: bool = True) -> _Part:
    """build_flows -> detect -> report columns for one batch of whole connections, and its
    data arrivals for linking relays (unless `relays` is off: too many kept already)."""
    flows = build_flows(cols, tuples, ends)
    return _part(flows, detect(flows), origin_ns, flows.seg["frame"][flows.starts],
                 len(flows.seg["flow"]),
                 arrivals(flows) if relays else {"flow": np.zeros(0, np.int64)},
                 flows.duplicates, flows.syn_jumps)


def _part(flows: Flows, det: Detection, origin_ns: int, first_frame: np.ndarray,
          tcp_packets: int, arrived: dict[str, np.ndarray], duplicates: int,
          syn_jumps: np.ndarray | None = None) -> _Part:
    """The report columns of analysed flows as one batch's result."""
    out = report_columns(flows, det, origin_ns)
    for table_ in (out["flows"], out["endpoints"]):  # one str object per distinct value
        for k in _FEW_VALUES.intersection(table_):
            table_[k] = _interned(table_[k])
    return _Part(out["flows"], out["stalls"], out["endpoints"], flows.flow["first_ns"],
                 first_frame, tcp_packets, arrived, duplicates,
                 np.zeros(0, np.int64) if syn_jumps is None else syn_jumps)


def _finished(ledger: Ledger, rows: dict[str, np.ndarray] | None, ends: TupleEnds,
              origin_ns: int) -> _Part:
    """The last piece of a connection analysed in pieces, and its result."""
    ledger.add(rows if rows is not None else {k: v[:0] for k, v in ledger.hs.items()}, ends,
               None)
    flows, det = ledger.result()
    arrived = ({k: np.concatenate([a[k] for a in ledger.arrivals]) for k in ledger.arrivals[0]}
               if ledger.arrivals else {"flow": np.zeros(0, np.int64)})
    ledger.arrivals = None
    return _part(flows, det, origin_ns, np.array([ledger.start_frame]), ledger.packets,
                 arrived, ledger.duplicates)


@dataclass
class _Parts:
    """Per-batch result columns and, per flow, the key that orders flows globally."""

    flows: list[dict[str, np.ndarray]] = field(default_factory=list)
    stalls: list[dict[str, np.ndarray]] = field(default_factory=list)
    endpoints: list[dict[str, np.ndarray]] = field(default_factory=list)
    first_ns: list[np.ndarray] = field(default_factory=list)
    first_frame: list[np.ndarray] = field(default_factory=list)
    tcp_packets: int = 0
    arrivals: list[dict[str, np.ndarray]] | None = field(default_factory=list)  # None: too many
    arrival_count: int = 0
    duplicates: int = 0  # copies of packets build_flows dropped
    syn_jumps: syns.Tally = field(default_factory=syns.Tally)  # SYNs left out


class StreamAnalyzer:
    """Feed decoded column chunks in file order (`feed`), then `finish` for the Report.

    `reorder_window_s`: capture time a closed connection waits for stragglers (the reorder window).
    `batch_rows`: rows of finished connections gathered before they are analysed together.
    `workers`: threads analysing batches in parallel (0: all in the calling thread).
    `piece_rows`: a connection holding this many packets is analysed as a piece
    (`nagleprobe.pieces`), its state carried to the next; `piece_limits` bound that state.
    Call `finish` for the report, or `close` to stop the threads without one.
    """

    def __init__(self, origin_ns: int, reorder_window_s: float, idle_s: float,
                 batch_rows: int = DEFAULT_BATCH_ROWS, workers: int | None = None,
                 piece_rows: int = PIECE_ROWS, piece_limits: Limits | None = None) -> None:
        self.origin_ns = origin_ns
        workers = default_workers() if workers is None else workers
        self._pool = ThreadPoolExecutor(workers, "nagleprobe-analyse") if workers > 0 else None
        self._running: deque[Future] = deque()  # batches being analysed, oldest first
        self._max_running = 2 * workers  # then wait: bounds the memory of batches in flight
        self.reorder_window_ns = int(reorder_window_s * 1e9)
        self.idle_ns = int(min(idle_s, 1e9) * 1e9)
        self.idle_flushed = 0  # connections analysed because they were idle, not closed
        self.batch_rows = max(int(batch_rows), 1)
        self.now = None  # latest timestamp read (the capture clock)
        self.late_packets = 0
        self.first_late_frame: int | None = None  # frame number of the first late packet
        self.late_syns = 0  # SYNs (of them) older than the end of their analysed connection
        self.same_isn_reuse = 0  # SYNs reusing a closed connection's 4-tuple and ISN
        self.first_reuse_frame: int | None = None
        self.peak_pending_rows = 0
        self.piece_rows = max(int(piece_rows), 1)
        self.piece_limits = piece_limits or Limits()
        self.pieced = 0  # connections analysed in pieces (finished)
        self.pieces = 0  # pieces analysed
        self.inexact: dict[str, int] = {}  # why pieced results may differ: connections
        self._left_out: dict[int, set[int]] = {}  # per tuple: seq of SYNs `feed` left out
        self.late_in_pieces = 0  # packets older than what a piece of their connection decided
        self.peak_held_rows = 0  # rows held (not yet analysed, or carried by a piece)
        self._carried = 0  # rows carried by the ledgers
        self._ledgers: dict[int, Ledger] = {}
        self.batches = 0  # analysed so far
        self._hand_ons = 0
        # per 4-tuple state, indexed by tuple id (first appearance)
        self._tuples = TupleTable()
        self._last_ts = np.zeros(0, dtype=np.int64)
        self._closed = np.zeros(0, dtype=np.uint8)  # _LOW_FIN | _HIGH_FIN | _RST seen
        self._last_syn = np.zeros(0, dtype=np.int64)  # raw seq of its last SYN, -1 if none
        self._handed_on = np.zeros(0, dtype=bool)
        self._rows = np.zeros(0, dtype=np.int64)  # rows held
        self._pieced = np.zeros(0, dtype=bool)  # analysed in pieces so far (has a Ledger)
        self._cut = np.zeros(0, dtype=np.int64)  # rows older than this are late
        self._cuts = False  # whether any tuple has a cut (pieces make them)
        self._pending: list[_Held] = []
        self._parts = _Parts()

    # ------------------------------------------------------------------ input
    def feed(self, cols: dict[str, np.ndarray]) -> None:
        """Take one chunk of decoded TCP rows (file order); analyse what has finished."""
        n = len(cols["frame"])
        if not n:
            return
        tid, from_low = self._tuples.ids(cols)
        if self._tuples.count > len(self._rows):
            self._grow(self._tuples.count - len(self._rows))
        ts, flags = cols["ts_ns"], cols["flags"]
        # every row of this chunk comes at or after its earliest timestamp: connections
        # finished by then are handed on before the chunk's rows are taken
        self._tick(int(ts.min()))
        syn_only = (flags & (SYN | ACK)) == SYN

        if self._ledgers:
            reopened = self._pieced[tid] & syn_only
            for r in np.flatnonzero(reopened).tolist():  # (few) a SYN sent again is not new
                reopened[r] = int(cols["seq"][r]) != self._ledgers[int(tid[r])].syn_seq()
            self._answered_late(tid, cols)
            foreign = self._foreign_syns(tid, cols, reopened)
            if foreign.any():  # SYNs that fit no connection: as if they were not there
                keep = ~foreign
                self._parts.syn_jumps.add(cols["frame"][foreign])
                for r in np.flatnonzero(foreign).tolist():
                    self._left_out.setdefault(int(tid[r]), set()).add(int(cols["seq"][r]))
                cols = {k: v[keep] for k, v in cols.items()}
                tid, from_low, syn_only, reopened = (tid[keep], from_low[keep], syn_only[keep],
                                                     reopened[keep])
                ts, flags, n = ts[keep], flags[keep], int(keep.sum())
                if not n:
                    return
            if reopened.any():  # a SYN with a new ISN on a connection analysed in pieces
                self._reopen_pieced(cols, tid, from_low, reopened)
                return
        self._same_isn(tid, syn_only, flags, cols)
        keep = self._reopen(tid, syn_only, cols["seq"], ts)
        self.late_packets += int(n - keep.sum())
        if self._cuts:
            older = keep & (ts < self._cut[tid])  # than what a piece of the connection decided
            if older.any():
                self.late_in_pieces += int(older.sum())
                keep &= ~older
        if not keep.all():
            if self.first_late_frame is None:
                self.first_late_frame = int(cols["frame"][np.argmin(keep)])
            cols = {k: v[keep] for k, v in cols.items()}
            tid, from_low, syn_only, ts, flags = (tid[keep], from_low[keep], syn_only[keep],
                                                  ts[keep], flags[keep])
            n = len(tid)
            if not n:
                return

        # last SYN of each tuple in this chunk: its seq, and the closing flags after it
        syn_rows = np.flatnonzero(syn_only)
        last_syn_row = np.full(len(self._rows), -1, dtype=np.int64)
        if len(syn_rows):
            last_syn_row[tid[syn_rows]] = syn_rows  # later rows win
            with_syn = np.flatnonzero(last_syn_row >= 0)
            self._last_syn[with_syn] = cols["seq"][last_syn_row[with_syn]].astype(np.int64)
            self._closed[with_syn] = 0
        fin_rows = np.flatnonzero((flags & (FIN | RST)) != 0)
        fin_rows = fin_rows[fin_rows > last_syn_row[tid[fin_rows]]]
        if len(fin_rows):
            f = flags[fin_rows]
            bits = np.where((f & RST) != 0, _RST, 0) | np.where(
                (f & FIN) != 0, np.where(from_low[fin_rows], _LOW_FIN, _HIGH_FIN), 0)
            np.bitwise_or.at(self._closed, tid[fin_rows], bits.astype(np.uint8))
        tally(tid, ts, self._rows, self._last_ts)
        self._pending.append(_Held({**{k: cols[k] for k in HELD if k != "from_low"},
                                    "from_low": from_low}, tid))
        held = int(self._rows.sum())
        self.peak_pending_rows = max(self.peak_pending_rows, held)
        self.peak_held_rows = max(self.peak_held_rows, held + self._carried)
        self.now = max(self.now, int(ts.max()))
        long = np.flatnonzero(self._rows >= self.piece_rows)
        if len(long):
            self._pieces(long)
        self._tick(int(ts.max()))

    def _foreign_syns(self, tid: np.ndarray, cols: dict[str, np.ndarray],
                      reopened: np.ndarray) -> np.ndarray:
        """Of the SYNs with a new ISN on connections analysed in pieces (`reopened`; long,
        so established), those that fit no connection (`nagleprobe.syns`): no FIN or RST
        since the connection's SYN, the 4-tuple silent less than syns.REUSE_IDLE_S, and no
        SYN-ACK answering it in this chunk (one in a later chunk comes too late: the SYN was
        left out)."""
        out = np.zeros(len(tid), dtype=bool)
        ts, flags = cols["ts_ns"], cols["flags"]
        synack = (flags & (SYN | ACK)) == (SYN | ACK)
        for r in np.flatnonzero(reopened).tolist():  # (few)
            t = int(tid[r])
            earlier = (tid == t) & ((ts < ts[r]) | ((ts == ts[r]) & (np.arange(len(tid)) < r)))
            closed = self._closed[t] != 0 or bool(((flags[earlier] & (FIN | RST)) != 0).any())
            last = max(int(self._last_ts[t]), int(ts[earlier].max()) if earlier.any() else 0)
            answered = bool((synack & (tid == t) & ~earlier & (cols["ack"] == (
                (int(cols["seq"][r]) + 1) & 0xFFFFFFFF))).any())
            quiet = int(ts[r]) - last >= syns.REUSE_IDLE_S * 1_000_000_000
            out[r] = not (closed or answered or quiet)
        return out

    def _answered_late(self, tid: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        """A SYN-ACK answering a SYN `feed` left out of a connection analysed in pieces:
        the whole analysis, which sees the answer, starts a new connection at that SYN (its
        connection's FIN or RST was not captured); here the connection may differ."""
        if not self._left_out:
            return
        synack = np.flatnonzero((cols["flags"] & (SYN | ACK)) == (SYN | ACK))
        for r in synack.tolist():  # (few)
            seqs = self._left_out.get(int(tid[r]))
            if seqs and (int(cols["ack"][r]) - 1) & 0xFFFFFFFF in seqs:
                seqs.discard((int(cols["ack"][r]) - 1) & 0xFFFFFFFF)
                why = ("where a new connection began (a SYN left out of it as not fitting was "
                       "answered by a SYN-ACK in a later chunk)")
                self.inexact[why] = self.inexact.get(why, 0) + 1

    def _reopen_pieced(self, cols: dict[str, np.ndarray], tid: np.ndarray,
                       from_low: np.ndarray, reopened: np.ndarray) -> None:
        """A SYN with a new initial sequence number arrived for connections analysed in
        pieces (a new connection on the same 4-tuple): each ends just before its first such
        SYN (its last piece is analysed now; packets older than the SYN that come later are
        late), and its rows from the SYN on start a new connection."""
        ts = cols["ts_ns"]
        first = np.full(len(self._rows), np.iinfo(np.int64).max)
        np.minimum.at(first, tid[reopened], ts[reopened])
        before = ts < first[tid]
        self.feed({k: v[before] for k, v in cols.items()})
        ended = np.flatnonzero(first < np.iinfo(np.int64).max)
        done = np.zeros(len(self._rows), dtype=bool)
        done[ended] = True
        self._hand_on(done & self._pieced, finished_only=True)
        self._handed_on[ended] = False
        self._closed[ended] = 0
        self._cut[ended] = first[ended]
        self._cuts = True
        self.feed({k: v[~before] for k, v in cols.items()})

    def _pieces(self, tids: np.ndarray) -> None:
        """Analyse the rows held of the 4-tuples `tids` as the next pieces of their
        connection (piece_rows rows each, in time order; the first makes its Ledger): rows
        older than the reorder window are decided, the state needed for the next piece
        carried."""
        rows = self._take_rows(tids)
        safe = self.now - self.reorder_window_ns
        ends = self._tuples.ends(tids)
        for j, t in enumerate(tids.tolist()):
            led = self._ledgers.get(t)
            one = _one_tuple(ends, j)
            mine = in_time_order(rows.pop(t))
            if led is None:
                mine, jumps = syns.without_foreign(mine)
                self._parts.syn_jumps.add(jumps)
                mine, ended = last_connection(mine)
                if ended is not None:  # connections before a new SYN: analysed whole now
                    self._add(_analyse(ended, np.zeros(len(ended["frame"]), np.int64), one,
                                       self.origin_ns, self._parts.arrivals is not None))
                    self._cut[t] = int(mine["ts_ns"][0])
                    self._cuts = True
            else:
                self._carried -= led.held_rows
            n = len(mine["frame"])
            size = -(-n // -(-n // self.piece_rows)) if n else 1  # pieces of even size
            for at in range(0, n, size):
                piece = {k: v[at:at + size] for k, v in mine.items()}
                if led is None:
                    led = self._ledgers[t] = Ledger.first(piece, one, safe, self.piece_limits)
                    self._pieced[t] = True
                    if self._parts.arrivals is None:
                        led.arrivals = None
                else:
                    led.add(piece, one, safe)
                self.pieces += 1
                self._count_arrivals(led)
            del mine
            self._carried += led.held_rows
            self._cut[t] = led.cut
            self._cuts = True
        self.peak_held_rows = max(self.peak_held_rows, int(self._rows.sum()) + self._carried)
        release_free_memory()  # (a piece's working memory is tens of MB)

    def _count_arrivals(self, led: Ledger) -> None:
        """Count the data arrivals a piece kept for linking relays against MAX_ARRIVALS."""
        p = self._parts
        if led.arrivals is None or p.arrivals is None:
            led.arrivals = None
            return
        p.arrival_count += len(led.arrivals[-1]["flow"]) if led.arrivals else 0
        if p.arrival_count > MAX_ARRIVALS:
            p.arrivals = None
            for other in self._ledgers.values():
                other.arrivals = None

    def _take_rows(self, tids: np.ndarray) -> dict[int, dict[str, np.ndarray]]:
        """The rows held of the 4-tuples `tids` (each one's columns), no longer held."""
        want = np.zeros(len(self._rows), dtype=bool)
        want[tids] = True
        parts: dict[int, list] = {t: [] for t in tids.tolist()}
        pending = []
        for part in self._pending:
            take = want[part.tid]
            if part.live is not None:
                take &= part.live
            out = np.flatnonzero(take)
            if len(out):
                t_of = part.tid[out]
                order = np.argsort(t_of, kind="stable")
                out, t_of = out[order], t_of[order]
                cuts = np.flatnonzero(np.r_[True, t_of[1:] != t_of[:-1]])
                for a, b in zip(cuts, np.r_[cuts[1:], len(out)]):
                    parts[int(t_of[a])].append({k: v[out[a:b]] for k, v in part.cols.items()})
                part = part.without(take, len(out))
            if part is not None:
                pending.append(part)
        self._pending = pending
        self._rows[tids] = 0
        return {t: ({k: np.concatenate([x[k] for x in p]) for k in p[0]} if p else
                    {k: np.zeros(0, dt) for k, dt in HELD.items()})
                for t, p in parts.items()}

    def _tick(self, ts: int) -> None:
        """Advance the capture clock to `ts`; analyse the connections finished by then once
        they fill a batch (or half of all rows held, so long connections' rows are not
        copied over and over)."""
        self.now = ts if self.now is None else max(self.now, ts)
        closed = ((self._closed & _RST) != 0) | ((self._closed & 3) == 3)
        idle = self._last_ts + self.idle_ns <= self.now  # open, but silent that long
        done = ((closed | idle) & (self._last_ts + self.reorder_window_ns <= self.now)
                & ((self._rows > 0) | self._pieced))
        ready = int(self._rows[done].sum())
        enough = min(self.batch_rows, max(int(self._rows.sum()) // 2, 1))
        if self._pool is not None and all(job.done() for job in self._running):
            enough = min(enough, IDLE_BATCH_ROWS)  # the analysis threads wait: feed them
        if ready and ready >= enough:
            self.idle_flushed += int((done & ~closed).sum())
            self._hand_on(done)

    def _free_tuples(self) -> None:
        """Let go of the per-4-tuple state once everything is analysed (a SYN flood's million
        tuples hold 150 MB of it, which the joining of the results can use, as it can the
        working memory of the last pieces of connections analysed in pieces). Else not worth
        the trim: it runs while the last batches are analysed (3 % of a 10 M-packet run)."""
        many = self._tuples.count >= TRIM_JOIN_ROWS or self.pieces > 0
        self._tuples = TupleTable()
        self._last_ts = self._last_syn = self._rows = np.zeros(0, dtype=np.int64)
        self._closed = np.zeros(0, dtype=np.uint8)
        self._handed_on = self._pieced = np.zeros(0, dtype=bool)
        self._cut = np.zeros(0, dtype=np.int64)
        self._left_out = {}
        if many:
            release_free_memory()

    def _grow(self, k: int) -> None:
        """State for `k` new tuples."""
        self._last_ts = np.concatenate([self._last_ts, np.full(k, np.iinfo(np.int64).min)])
        self._closed = np.concatenate([self._closed, np.zeros(k, np.uint8)])
        self._last_syn = np.concatenate([self._last_syn, np.full(k, -1, np.int64)])
        self._handed_on = np.concatenate([self._handed_on, np.zeros(k, bool)])
        self._rows = np.concatenate([self._rows, np.zeros(k, np.int64)])
        self._pieced = np.concatenate([self._pieced, np.zeros(k, bool)])
        self._cut = np.concatenate([self._cut, np.full(k, np.iinfo(np.int64).min)])

    def _same_isn(self, tid: np.ndarray, syn_only: np.ndarray, flags: np.ndarray,
                  cols: dict[str, np.ndarray]) -> None:
        """Count SYNs that open a 4-tuple again after its connection closed (FIN or RST)
        with the same ISN as the SYN before (`tcpreplay --loop`): the two connections cannot
        be told apart and are analysed as one. Only control rows are looked at."""
        ctl = np.flatnonzero(syn_only | ((flags & (FIN | RST)) != 0))
        if not len(ctl):
            return
        t = tid[ctl]
        order = np.lexsort((ctl, t))  # control rows by tuple, in file order
        ctl, t = ctl[order], t[order]
        syn = syn_only[ctl]
        fins = np.cumsum(~syn)  # FIN/RST rows up to and including each
        pos = np.flatnonzero(syn)
        if not len(pos):
            return
        seq = cols["seq"][ctl[pos]].astype(np.int64)
        prev = np.r_[-1, pos[:-1]]
        same_tuple = np.r_[False, t[pos[1:]] == t[pos[:-1]]]
        start = np.searchsorted(t, t[pos])  # first control row of each SYN's tuple
        before = np.where(start > 0, fins[np.maximum(start - 1, 0)], 0)
        c0 = self._closed[t[pos]]
        closed_at_start = ((c0 & _RST) != 0) | ((c0 & 3) == 3) | self._handed_on[t[pos]]
        closed = np.where(same_tuple, fins[pos] - fins[np.maximum(prev, 0)] > 0,
                          closed_at_start | (fins[pos] - before > 0))
        prev_seq = np.where(same_tuple, np.r_[-1, seq[:-1]], self._last_syn[t[pos]])
        # and newer than what came before it (a duplicated old SYN is not a new connection)
        ts = cols["ts_ns"][ctl]
        before_ts = np.where(pos > start, ts[np.maximum(pos - 1, 0)], self._last_ts[t[pos]])
        reuse = closed & (prev_seq >= 0) & (seq == prev_seq) & (ts[pos] > before_ts)
        if reuse.any():
            self.same_isn_reuse += int(reuse.sum())
            if self.first_reuse_frame is None:
                self.first_reuse_frame = int(cols["frame"][ctl[pos[np.argmax(reuse)]]])

    def _reopen(self, tid: np.ndarray, syn_only: np.ndarray, seq: np.ndarray,
                ts: np.ndarray) -> np.ndarray:
        """Rows to keep: a handed-on tuple takes rows again from a SYN with a new ISN on;
        rows of a handed-on connection before that are late (left out), and so is a SYN
        older than the last packet of the connection analysed (counted in late_syns)."""
        late = self._handed_on[tid]
        if not late.any():
            return np.ones(len(tid), dtype=bool)
        candidates = late & syn_only & (seq.astype(np.int64) != self._last_syn[tid])
        old = candidates & (ts < self._last_ts[tid])
        if old.any():
            self.late_syns += int(old.sum())
        opens = np.flatnonzero(candidates & ~old)
        first_open = np.full(len(self._rows), len(tid), dtype=np.int64)
        first_open[tid[opens[::-1]]] = opens[::-1]  # earliest opening row per tuple
        keep = ~late | (np.arange(len(tid)) >= first_open[tid])
        again = np.unique(tid[opens])
        self._handed_on[again] = False
        self._closed[again] = 0
        return keep

    def _hand_on(self, done: np.ndarray, finished_only: bool = False) -> None:
        """Analyse the rows of the finished tuples `done` (bool per tuple) in batches of about
        batch_rows rows (whole tuples each), and let go of them. Connections analysed in
        pieces have their last piece analysed (alone, with `finished_only`)."""
        pieced = np.flatnonzero(done & self._pieced)
        if len(pieced):
            done = done.copy()
            rows = self._take_rows(pieced)
            ends = self._tuples.ends(pieced)
            for j, t in enumerate(pieced.tolist()):
                led = self._ledgers.pop(t)
                self._carried -= led.held_rows
                self._add(_finished(led, rows[t], _one_tuple(ends, j), self.origin_ns),
                          counted=led.arrivals is not None)
                for why in led.inexact:
                    self.inexact[why] = self.inexact.get(why, 0) + 1
                self.pieced += 1
                self.pieces += 1
            self._pieced[pieced] = False
            self._cut[pieced] = np.iinfo(np.int64).min
            self._handed_on[pieced] = True
            done[pieced] = False
        if finished_only or not done.any():
            return
        # the rows of the finished tuples placed grouped by tuple (tuples in id order, each
        # one's rows in chunk and row order), cut into batches of whole tuples
        sizes = np.where(done, self._rows, 0)
        end = np.cumsum(sizes)
        start = end - sizes
        before = np.cumsum(done) - done  # finished tuples before each
        label = np.where(done, np.maximum(start // self.batch_rows, before // BATCH_FLOWS), -1)
        nbatch = int(label.max()) + 1
        ids = np.flatnonzero(done)
        bounds = np.searchsorted(label[ids], np.arange(nbatch + 1))  # each batch's ids
        at = np.r_[start[ids[bounds[:-1]]], end[ids[-1]]]  # each batch's places
        cursor = np.where(done, start, -1)
        which, rows = np.empty(int(at[-1]), np.int32), np.empty(int(at[-1]), np.int64)
        chunks, last, pending = [], [], []
        for part in self._pending:
            k, taken, top = place_rows(part.tid, part.live, cursor, len(chunks), which, rows)
            if k:
                chunks.append(part.cols)
                last.append(int(np.searchsorted(at, top, side="right")) - 1)  # its last batch
                part = part.without(taken, k)
            if part is not None:
                pending.append(part)
        if not np.array_equal(cursor[ids], end[ids]):
            raise RuntimeError("rows held and rows counted differ")  # (a bug, not the input)
        self._pending = pending
        self._handed_on |= done
        self._rows[done] = 0
        # each row's tuple numbered within its batch
        tuples = np.repeat(np.arange(len(ids)) - np.repeat(bounds[:-1], np.diff(bounds)),
                           sizes[ids])
        for j in range(nbatch):
            a, b = int(at[j]), int(at[j + 1])
            if b > a:  # (a tuple of more than two batches' rows leaves a label unused)
                self._analyse(chunks, which[a:b], rows[a:b], tuples[a:b],
                              self._tuples.ends(ids[bounds[j]:bounds[j + 1]]))
            # a chunk no later batch takes rows from is held by its batches alone: let go of
            # it here, and it is freed as they are analysed (a SYN flood's chunks otherwise
            # stay until its last batch is)
            chunks = [c if k > j else _GONE for c, k in zip(chunks, last)]
        self._hand_ons += 1
        if self._hand_ons % TRIM_EVERY == 0:
            release_free_memory()

    def _analyse(self, chunks: list[dict[str, np.ndarray]], which: np.ndarray,
                 rows: np.ndarray, tuples: np.ndarray, ends: TupleEnds) -> None:
        """Analyse one batch: the rows `rows` of chunks `which` (see `_gather`), of the
        tuples `tuples` (numbered within the batch) whose endpoints are `ends` (gathered and
        analysed in a worker thread when there are workers)."""
        self.batches += 1
        relays = self._parts.arrivals is not None
        if self._pool is None:
            self._add(_analyse(_gather(chunks, which, rows), tuples, ends, self.origin_ns,
                               relays))
            return
        job = self._pool.submit(
            lambda: _analyse(_gather(chunks, which, rows), tuples, ends, self.origin_ns, relays))
        self._running.append(job)
        self._take_results(wait=len(self._running) > self._max_running)

    def _take_results(self, wait: bool = False, all: bool = False) -> None:
        """Add the results of the analysed batches, in the order they were handed on (wait
        for the oldest if `wait`, for every one if `all`)."""
        while self._running and (wait or all or self._running[0].done()):
            self._add(self._running.popleft().result())
            wait = False

    def close(self) -> None:
        """Stop the analysis threads (batches not yet begun are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _add(self, part: _Part, counted: bool = False) -> None:
        """Keep one batch's result (`counted`: its arrivals were counted already)."""
        p = self._parts
        p.flows.append(part.flows)
        p.stalls.append(part.stalls)
        p.endpoints.append(part.endpoints)
        p.first_ns.append(part.first_ns)
        p.first_frame.append(part.first_frame)
        p.tcp_packets += part.tcp_packets
        p.duplicates += part.duplicates
        p.syn_jumps.add(part.syn_jumps)
        if len(part.first_ns) >= BATCH_FLOWS // 2:
            # a batch of many small connections (a scan): its working memory was about as
            # large as its result, and the heaps keep it (0.3 GB at the peak of 1 M SYNs)
            release_free_memory()
        if p.arrivals is not None:  # kept for relay linking while there are not too many
            p.arrival_count += 0 if counted else len(part.arrivals["flow"])
            p.arrivals.append(part.arrivals)
            if p.arrival_count > MAX_ARRIVALS:
                p.arrivals = None

    # ------------------------------------------------------------------ output
    def finish(self, info: CaptureInfo, skipped: dict[str, int]) -> Report:
        """Analyse everything still held (end of input) and join the batches into a Report."""
        if self._pending or self._ledgers:
            self._hand_on((self._rows > 0) | self._pieced)
        self._free_tuples()  # while the last batches are analysed
        self._take_results(all=True)
        self.close()
        p = self._parts
        if not p.flows:
            none = empty_columns()
            self._add(_analyse({k: none[k] for k in ANALYSED}, None, None, self.origin_ns))
        warnings = list(info.warnings)
        if self.late_packets:
            warnings.append(Weird("late-packet", f"{self.late_packets} TCP packets arrived more "
                                  f"than {self.reorder_window_ns / 1e9:g} s (capture time) after "
                                  "their connection closed and were left out of it",
                                  self.late_packets))
        if self.late_syns:
            warnings.append(Weird("late-syn", f"{self.late_syns} of them SYNs older than the last "
                                  "packet of their analysed connection: the streamed result "
                                  "differs from the whole file's (raise --reorder-window)",
                                  self.late_syns))
        if self.idle_flushed:
            warnings.append(Weird("idle-flushed", f"{self.idle_flushed} connections were idle for "
                                  f"more than {self.idle_ns / 1e9:g} s (capture time) and were "
                                  "analysed before they closed (raise --idle-timeout to wait "
                                  "longer)", self.idle_flushed))
        for why, n in sorted(self.inexact.items()):
            warnings.append(Weird("inexact-pieces", f"{n} of the connections analysed in pieces "
                                  f"may differ from the whole-connection analysis in {why}", n))
        if self.late_in_pieces:
            warnings.append(Weird("late-in-pieces", f"{self.late_in_pieces} TCP packets arrived "
                                  f"more than {self.reorder_window_ns / 1e9:g} s (capture time) "
                                  "after later packets of their connection, which was being "
                                  "analysed in pieces, and were left out of it",
                                  self.late_in_pieces))
        if self.same_isn_reuse:
            warnings.append(Weird("same-isn-reuse", f"{self.same_isn_reuse} connections reuse the "
                                  "4-tuple and the initial sequence number of one that closed "
                                  f"before them (first: frame {self.first_reuse_frame}; a "
                                  "replayed capture?): they cannot be told apart and are "
                                  "analysed as one", self.same_isn_reuse))
        if p.duplicates:
            skipped = {**skipped, "duplicate": skipped.get("duplicate", 0) + p.duplicates}
        skipped, warnings = p.syn_jumps.told(skipped, warnings)
        capture = capture_doc(info, skipped, p.tcp_packets, self.origin_ns, warnings)
        return _join(p, capture)


def _one_tuple(ends: TupleEnds, j: int) -> TupleEnds:
    """The endpoints of the `j`th of several tuples, as the only one."""
    return TupleEnds(**{k: None if v is None else v[j:j + 1] for k, v in vars(ends).items()})


def _join(p: _Parts, capture: dict) -> Report:
    """One Report from the batches: flows numbered by (first packet time, frame)."""
    first_ns, first_frame = np.concatenate(p.first_ns), np.concatenate(p.first_frame)
    order = np.lexsort((first_frame, first_ns))  # old (concatenated) id of each new id
    new_id = np.empty(len(order), dtype=np.int64)
    new_id[order] = np.arange(len(order))
    offsets = np.cumsum([0] + [len(f) for f in p.first_ns])

    # a column at a time, each batch's copy let go of at once (a million flows of a port
    # scan held twice took hundreds of MB)
    flows = {k: _take([f.pop(k) for f in p.flows], order) for k in list(p.flows[0])}
    flows["id"] = np.arange(len(order))
    both_ends = np.stack([2 * order, 2 * order + 1], axis=1).reshape(-1)
    endpoints = {k: _take([e.pop(k) for e in p.endpoints], both_ends)
                 for k in list(p.endpoints[0])}
    endpoints["flow"] = np.arange(len(order)).repeat(2)
    p.flows, p.endpoints = [], []
    flow_ids = [new_id[offsets[j]:offsets[j + 1]] for j in range(len(p.stalls))]
    stalls = _join_stalls(p.stalls, order, offsets)
    add_tcp_streams(flows, capture)
    arr = None
    if p.arrivals is None:
        capture["warnings"].append(relay_warning())
    else:
        arr = {k: np.concatenate([a[k] for a in p.arrivals]) for k in p.arrivals[0]}
        arr["flow"] = np.concatenate([ids[a["flow"]] for a, ids in zip(p.arrivals, flow_ids)])
        p.arrivals = []
    flows.update(link(flows, stalls, arr))
    return Report(capture, flows, stalls, endpoints)


def _take(parts: list[np.ndarray], order: np.ndarray, trim_rows: int = TRIM_JOIN_ROWS
          ) -> np.ndarray:
    """The parts joined, rows in `order`; the parts let go of (and, for a column of
    `trim_rows` or more, their memory given back at once: the heap otherwise keeps every
    column's parts, 0.5 GB more at the peak for a million flows)."""
    col = np.concatenate(parts)
    parts.clear()
    out = col[order]
    del col
    if len(out) >= trim_rows:
        release_free_memory()
    return out


def _join_stalls(parts: list[dict[str, np.ndarray]], order: np.ndarray, offsets: np.ndarray
                 ) -> dict[str, np.ndarray]:
    """The batches' stall columns as one set of columns, flows renumbered (`order`: the old,
    concatenated id of each new flow id; `offsets[j]`: batch j's first old id) and sorted by
    (flow, released frame). Each batch's stalls come sorted so (`report_columns`) and a flow
    is in one batch, so each new flow's stalls are one run of the concatenated columns: their
    order is those runs in new-id order, no sort. Joined a column at a time, each batch's copy
    of a column let go of as soon as it is joined, so the stalls are never held twice: with
    millions of stalls a copy is hundreds of MB."""
    names = list(parts[0])
    counts = np.concatenate([np.bincount(st.pop("flow"), minlength=offsets[j + 1] - offsets[j])
                             for j, st in enumerate(parts)])  # stalls per old flow id
    first = np.cumsum(counts) - counts  # each old flow's first stall in the concatenation
    n = counts[order]
    rows = np.repeat(first[order] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
    columns = {}
    for name in names:
        if name == "flow":
            columns[name] = np.repeat(np.arange(len(order)), n)
            continue
        columns[name] = _take([st.pop(name) for st in parts], rows, TRIM_ROWS)
    parts.clear()
    return columns
