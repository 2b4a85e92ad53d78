"""Streamed analysis: decoded chunks in, one Report out, memory bounded by open connections.

The judge (`engine`) reads each connection's own packets only (MSS, round trips, neighbours,
medians: all per flow). So the stream holds the decoded rows of each 4-tuple while its
connection is open, and hands the rows of finished connections to `engine.judge` in batches
(in worker threads, `workers`); the batches' results are joined at the end (`results`).
Memory is the rows of connections still open, plus the batches in flight, plus the result
tables; it does not grow with the length of the capture. A connection that holds
`piece_rows` packets is judged in pieces (`pieces.Ledger`), so what is held of one that never
closes is bounded too.

A 4-tuple's life: open; closed (FIN seen from both ends, or a RST) or idle (`idle_s`
without a packet); finished once the capture clock (the latest timestamp read so far) has
moved `reorder_window_s` past its last packet; then handed on. That grace is also the
reorder window: records need not be in time order (`tcpdump -i any`, merged files), since
each connection's rows are sorted when it is judged, but a packet that turns up for a
connection already handed on (more than `reorder_window_s` after it closed, in capture
time) cannot join it. Such packets are left out, counted in a warning, and only then can the
result differ from the whole-capture analysis. A SYN with a new ISN on a finished 4-tuple
starts a new connection, as in the whole-capture analysis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import syns
from .columns import Columns
from .decode import ACK, SYN, TCP_COLUMNS
from .engine import judge, judge_ledger
from .lifecycle import TupleState
from .pieces import PIECE_ROWS, Ledger, in_time_order, last_connection
from .read import CaptureInfo
from .relay import MAX_ARRIVALS
from .report import Report
from .results import BATCH_FLOWS, Results
from .tables import capture_doc
from .tuples import RowsOf, TupleEnds, place_rows, take_rows, tally
from .verdicts import Limits
from .weirds import Weird
from .workers import TRIM_EVERY, TRIM_JOIN_ROWS, Workers, default_workers, release_free_memory

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

def _gather(chunks: list[Columns], which: np.ndarray, rows: np.ndarray
            ) -> Columns:
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

    cols: Columns
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
        self._workers: Workers = Workers(default_workers() if workers is None else workers)
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
        self._t = TupleState()  # per 4-tuple state, indexed by tuple id
        self._cuts = False  # whether any tuple has a cut (pieces make them)
        self._pending: list[_Held] = []
        self._parts = Results()

    # ------------------------------------------------------------------ input
    def feed(self, cols: Columns) -> None:
        """Take one chunk of decoded TCP rows (file order); analyse what has finished."""
        n = len(cols["frame"])
        if not n:
            return
        tid, from_low = self._t.table.ids(cols)
        self._t.grow()
        ts, flags = cols["ts_ns"], cols["flags"]
        # every row of this chunk comes at or after its earliest timestamp: connections
        # finished by then are handed on before the chunk's rows are taken
        self._tick(int(ts.min()))
        syn_only = (flags & (SYN | ACK)) == SYN

        if self._ledgers:
            reopened = self._t.pieced[tid] & syn_only
            for r in np.flatnonzero(reopened).tolist():  # (few) a SYN sent again is not new
                reopened[r] = int(cols["seq"][r]) != self._ledgers[int(tid[r])].syn_seq()
            self._answered_late(tid, cols)
            foreign = syns.fits_no_connection(tid, cols, np.flatnonzero(reopened),
                                              self._t.closed != 0, self._t.last_ts)
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
        reused, frame = self._t.same_isn(tid, syn_only, flags, cols)
        self.same_isn_reuse += reused
        if self.first_reuse_frame is None:
            self.first_reuse_frame = frame
        keep, old_syns = self._t.reopen(tid, syn_only, cols["seq"], ts)
        self.late_syns += old_syns
        self.late_packets += int(n - keep.sum())
        if self._cuts:
            older = keep & (ts < self._t.cut[tid])  # than what a piece of the connection decided
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

        self._t.saw(tid, from_low, flags, cols["seq"], syn_only)
        tally(tid, ts, self._t.rows, self._t.last_ts)
        self._pending.append(_Held({**{k: cols[k] for k in HELD if k != "from_low"},
                                    "from_low": from_low}, tid))
        held = int(self._t.rows.sum())
        self.peak_pending_rows = max(self.peak_pending_rows, held)
        self.peak_held_rows = max(self.peak_held_rows, held + self._carried)
        self.now = max(self.now, int(ts.max()))
        long = np.flatnonzero(self._t.rows >= self.piece_rows)
        if len(long):
            self._pieces(long)
        self._tick(int(ts.max()))

    def _answered_late(self, tid: np.ndarray, cols: Columns) -> None:
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

    def _reopen_pieced(self, cols: Columns, tid: np.ndarray,
                       from_low: np.ndarray, reopened: np.ndarray) -> None:
        """A SYN with a new initial sequence number arrived for connections analysed in
        pieces (a new connection on the same 4-tuple): each ends just before its first such
        SYN (its last piece is analysed now; packets older than the SYN that come later are
        late), and its rows from the SYN on start a new connection."""
        ts = cols["ts_ns"]
        first = np.full(len(self._t.rows), np.iinfo(np.int64).max)
        np.minimum.at(first, tid[reopened], ts[reopened])
        before = ts < first[tid]
        self.feed({k: v[before] for k, v in cols.items()})
        ended = np.flatnonzero(first < np.iinfo(np.int64).max)
        done = np.zeros(len(self._t.rows), dtype=bool)
        done[ended] = True
        self._hand_on(done & self._t.pieced, finished_only=True)
        self._t.handed_on[ended] = False
        self._t.closed[ended] = 0
        self._t.cut[ended] = first[ended]
        self._cuts = True
        self.feed({k: v[~before] for k, v in cols.items()})

    def _pieces(self, tids: np.ndarray) -> None:
        """Analyse the rows held of the 4-tuples `tids` as the next pieces of their
        connection (piece_rows rows each, in time order; the first makes its Ledger): rows
        older than the reorder window are decided, the state needed for the next piece
        carried."""
        rows = self._take_rows(tids)
        safe = self.now - self.reorder_window_ns
        ends = self._t.table.ends(tids)
        for j, t in enumerate(tids.tolist()):
            led = self._ledgers.get(t)
            one = _one_tuple(ends, j)
            mine = in_time_order(rows.pop(t))
            if led is None:
                mine, jumps = syns.without_foreign(mine)
                self._parts.syn_jumps.add(jumps)
                mine, ended = last_connection(mine)
                if ended is not None:  # connections before a new SYN: analysed whole now
                    self._parts.add(judge(ended, np.zeros(len(ended["frame"]), np.int64), one,
                                       self.origin_ns, self._parts.arrivals is not None))
                    self._t.cut[t] = int(mine["ts_ns"][0])
                    self._cuts = True
            else:
                self._carried -= led.held_rows
            n = len(mine["frame"])
            size = -(-n // -(-n // self.piece_rows)) if n else 1  # pieces of even size
            for at in range(0, n, size):
                piece = {k: v[at:at + size] for k, v in mine.items()}
                if led is None:
                    led = self._ledgers[t] = Ledger.first(piece, one, safe, self.piece_limits)
                    self._t.pieced[t] = True
                    if self._parts.arrivals is None:
                        led.arrivals = None
                else:
                    led.add(piece, one, safe)
                self.pieces += 1
                self._count_arrivals(led)
            del mine
            self._carried += led.held_rows
            self._t.cut[t] = led.cut
            self._cuts = True
        self.peak_held_rows = max(self.peak_held_rows, int(self._t.rows.sum()) + self._carried)
        release_free_memory()  # (a piece's working memory is large)

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

    def _take_rows(self, tids: np.ndarray) -> dict[int, Columns]:
        """The rows held of the 4-tuples `tids` (each one's columns), no longer held."""
        want = np.zeros(len(self._t.rows), dtype=bool)
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
        self._t.rows[tids] = 0
        return {t: ({k: np.concatenate([x[k] for x in p]) for k in p[0]} if p else
                    {k: np.zeros(0, dt) for k, dt in HELD.items()})
                for t, p in parts.items()}

    def _tick(self, ts: int) -> None:
        """Advance the capture clock to `ts`; analyse the connections finished by then once
        they fill a batch (or half of all rows held, so long connections' rows are not
        copied over and over)."""
        self.now = ts if self.now is None else max(self.now, ts)
        closed = self._t.is_closed()
        idle = self._t.last_ts + self.idle_ns <= self.now  # open, but silent that long
        done = ((closed | idle) & (self._t.last_ts + self.reorder_window_ns <= self.now)
                & ((self._t.rows > 0) | self._t.pieced))
        ready = int(self._t.rows[done].sum())
        enough = min(self.batch_rows, max(int(self._t.rows.sum()) // 2, 1))
        if self._workers.waiting:
            enough = min(enough, IDLE_BATCH_ROWS)  # the analysis threads wait: feed them
        if ready and ready >= enough:
            self.idle_flushed += int((done & ~closed).sum())
            self._hand_on(done)

    def _free_tuples(self) -> None:
        """Let go of the per-4-tuple state once everything is judged (a SYN flood's million
        tuples hold a lot of it), so that the joining of the results can use its memory, as
        it can the working memory of the last pieces of connections judged in pieces."""
        many = self._t.table.count >= TRIM_JOIN_ROWS or self.pieces > 0
        self._t = TupleState()
        self._left_out = {}
        if many:
            release_free_memory()

    def _hand_on(self, done: np.ndarray, finished_only: bool = False) -> None:
        """Analyse the rows of the finished tuples `done` (bool per tuple) in batches of about
        batch_rows rows (whole tuples each), and let go of them. Connections analysed in
        pieces have their last piece analysed (alone, with `finished_only`)."""
        pieced = np.flatnonzero(done & self._t.pieced)
        if len(pieced):
            done = done.copy()
            rows = self._take_rows(pieced)
            ends = self._t.table.ends(pieced)
            for j, t in enumerate(pieced.tolist()):
                led = self._ledgers.pop(t)
                self._carried -= led.held_rows
                self._parts.add(judge_ledger(led, rows[t], _one_tuple(ends, j), self.origin_ns),
                          counted=led.arrivals is not None)
                for why in led.inexact:
                    self.inexact[why] = self.inexact.get(why, 0) + 1
                self.pieced += 1
                self.pieces += 1
            self._t.pieced[pieced] = False
            self._t.cut[pieced] = np.iinfo(np.int64).min
            self._t.handed_on[pieced] = True
            done[pieced] = False
        if finished_only or not done.any():
            return
        # the rows of the finished tuples placed grouped by tuple (tuples in id order, each
        # one's rows in chunk and row order), cut into batches of whole tuples
        sizes = np.where(done, self._t.rows, 0)
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
        self._t.handed_on |= done
        self._t.rows[done] = 0
        # each row's tuple numbered within its batch
        tuples = np.repeat(np.arange(len(ids)) - np.repeat(bounds[:-1], np.diff(bounds)),
                           sizes[ids])
        for j in range(nbatch):
            a, b = int(at[j]), int(at[j + 1])
            if b > a:  # (a tuple of more than two batches' rows leaves a label unused)
                self._analyse(chunks, which[a:b], rows[a:b], tuples[a:b],
                              self._t.table.ends(ids[bounds[j]:bounds[j + 1]]))
            # a chunk no later batch takes rows from is held by its batches alone: let go of
            # it here, and it is freed as they are analysed (a SYN flood's chunks otherwise
            # stay until its last batch is)
            chunks = [c if k > j else _GONE for c, k in zip(chunks, last)]
        self._hand_ons += 1
        if self._hand_ons % TRIM_EVERY == 0:
            release_free_memory()

    def _analyse(self, chunks: list[Columns], which: np.ndarray,
                 rows: np.ndarray, tuples: np.ndarray, ends: TupleEnds) -> None:
        """Judge one batch: the rows `rows` of chunks `which` (see `_gather`), of the tuples
        `tuples` (numbered within the batch) whose endpoints are `ends` (gathered and judged
        in a worker thread when there are workers)."""
        self.batches += 1
        relays = self._parts.arrivals is not None
        origin_ns = self.origin_ns
        for part in self._workers.run(
                lambda: judge(_gather(chunks, which, rows), tuples, ends, origin_ns, relays)):
            self._parts.add(part)

    def close(self) -> None:
        """Stop the analysis threads (batches not yet begun are dropped)."""
        self._workers.close()

    # ------------------------------------------------------------------ output
    def finish(self, info: CaptureInfo, skipped: dict[str, int]) -> Report:
        """Analyse everything still held (end of input) and join the batches into a Report."""
        if self._pending or self._ledgers:
            self._hand_on((self._t.rows > 0) | self._t.pieced)
        self._free_tuples()  # while the last batches are analysed
        for part in self._workers.results(all=True):
            self._parts.add(part)
        self.close()
        p = self._parts
        if not p.flows:
            none = Columns.empty(ANALYSED)
            self._parts.add(judge(none, None, None, self.origin_ns))
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
        return p.report(capture)


def _one_tuple(ends: TupleEnds, j: int) -> TupleEnds:
    """The endpoints of the `j`th of several tuples, as the only one."""
    return TupleEnds(**{k: None if v is None else v[j:j + 1] for k, v in vars(ends).items()})


