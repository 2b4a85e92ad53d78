"""A 4-tuple's life in the stream: per-tuple state, and the SYNs that open a 4-tuple again.

Indexed by tuple id (`tuples.TupleTable`, in order of first appearance): the rows held, the
time of the last packet, the closing flags seen since the last SYN, that last SYN's sequence
number, whether the connection was handed on (judged) or is judged in pieces, and the time
before which its packets are late. A SYN with a new initial sequence number on a finished
4-tuple starts a new connection; one with the same number after a close cannot be told apart
from the connection before it (`same_isn`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import Columns
from .decode import FIN, RST
from .tuples import TupleTable

LOW_FIN, HIGH_FIN, RST_SEEN = 1, 2, 4  # closing flags seen of a 4-tuple (`TupleState.closed`)
_NEVER = np.iinfo(np.int64).min


def _grown(a: np.ndarray, k: int, fill) -> np.ndarray:
    return np.concatenate([a, np.full(k, fill, a.dtype)])


@dataclass
class TupleState:
    """The stream's state of every 4-tuple seen (arrays indexed by tuple id)."""

    table: TupleTable = field(default_factory=TupleTable)
    last_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    closed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))  # LOW_FIN | ...
    last_syn: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # raw seq, -1
    handed_on: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows held
    pieced: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # has a Ledger
    cut: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # older: late

    def grow(self) -> None:
        """State for the tuples the table has seen since (all starting empty)."""
        k = self.table.count - len(self.rows)
        if k <= 0:
            return
        self.last_ts = _grown(self.last_ts, k, _NEVER)
        self.closed = _grown(self.closed, k, 0)
        self.last_syn = _grown(self.last_syn, k, -1)
        self.handed_on = _grown(self.handed_on, k, False)
        self.rows = _grown(self.rows, k, 0)
        self.pieced = _grown(self.pieced, k, False)
        self.cut = _grown(self.cut, k, _NEVER)

    def is_closed(self) -> np.ndarray:
        """Per tuple: its connection closed (a RST, or a FIN from each end)."""
        return ((self.closed & RST_SEEN) != 0) | ((self.closed & 3) == 3)

    def saw(self, tid: np.ndarray, from_low: np.ndarray, flags: np.ndarray, seq: np.ndarray,
            syn_only: np.ndarray) -> None:
        """Note a chunk's SYNs (the last of each tuple: its sequence number; the closing flags
        start again) and the FINs and RSTs after them."""
        syn_rows = np.flatnonzero(syn_only)
        last_syn_row = np.full(len(self.rows), -1, dtype=np.int64)
        if len(syn_rows):
            last_syn_row[tid[syn_rows]] = syn_rows  # later rows win
            with_syn = np.flatnonzero(last_syn_row >= 0)
            self.last_syn[with_syn] = seq[last_syn_row[with_syn]].astype(np.int64)
            self.closed[with_syn] = 0
        fin_rows = np.flatnonzero((flags & (FIN | RST)) != 0)
        fin_rows = fin_rows[fin_rows > last_syn_row[tid[fin_rows]]]
        if len(fin_rows):
            f = flags[fin_rows]
            bits = np.where((f & RST) != 0, RST_SEEN, 0) | np.where(
                (f & FIN) != 0, np.where(from_low[fin_rows], LOW_FIN, HIGH_FIN), 0)
            np.bitwise_or.at(self.closed, tid[fin_rows], bits.astype(np.uint8))

    def same_isn(self, tid: np.ndarray, syn_only: np.ndarray, flags: np.ndarray,
                 cols: Columns) -> tuple[int, int | None]:
        """Count SYNs that open a 4-tuple again after its connection closed (FIN or RST)
        with the same ISN as the SYN before (`tcpreplay --loop`): the two connections cannot
        be told apart and are judged as one: how many, and the first one's frame. Only
        control rows are looked at."""
        ctl = np.flatnonzero(syn_only | ((flags & (FIN | RST)) != 0))
        if not len(ctl):
            return 0, None
        t = tid[ctl]
        order = np.lexsort((ctl, t))  # control rows by tuple, in file order
        ctl, t = ctl[order], t[order]
        syn = syn_only[ctl]
        fins = np.cumsum(~syn)  # FIN/RST rows up to and including each
        pos = np.flatnonzero(syn)
        if not len(pos):
            return 0, None
        seq = cols["seq"][ctl[pos]].astype(np.int64)
        prev = np.r_[-1, pos[:-1]]
        same_tuple = np.r_[False, t[pos[1:]] == t[pos[:-1]]]
        start = np.searchsorted(t, t[pos])  # first control row of each SYN's tuple
        before = np.where(start > 0, fins[np.maximum(start - 1, 0)], 0)
        c0 = self.closed[t[pos]]
        closed_at_start = ((c0 & RST_SEEN) != 0) | ((c0 & 3) == 3) | self.handed_on[t[pos]]
        closed = np.where(same_tuple, fins[pos] - fins[np.maximum(prev, 0)] > 0,
                          closed_at_start | (fins[pos] - before > 0))
        prev_seq = np.where(same_tuple, np.r_[-1, seq[:-1]], self.last_syn[t[pos]])
        # and newer than what came before it (a duplicated old SYN is not a new connection)
        ts = cols["ts_ns"][ctl]
        before_ts = np.where(pos > start, ts[np.maximum(pos - 1, 0)], self.last_ts[t[pos]])
        reuse = closed & (prev_seq >= 0) & (seq == prev_seq) & (ts[pos] > before_ts)
        if not reuse.any():
            return 0, None
        return int(reuse.sum()), int(cols["frame"][ctl[pos[np.argmax(reuse)]]])

    def reopen(self, tid: np.ndarray, syn_only: np.ndarray, seq: np.ndarray,
               ts: np.ndarray) -> tuple[np.ndarray, int]:
        """Rows to keep: a handed-on tuple takes rows again from a SYN with a new ISN on;
        rows of a handed-on connection before that are late (left out), and so is a SYN
        older than the last packet of the connection judged (how many: the second value)."""
        late = self.handed_on[tid]
        if not late.any():
            return np.ones(len(tid), dtype=bool), 0
        candidates = late & syn_only & (seq.astype(np.int64) != self.last_syn[tid])
        old = candidates & (ts < self.last_ts[tid])
        opens = np.flatnonzero(candidates & ~old)
        first_open = np.full(len(self.rows), len(tid), dtype=np.int64)
        first_open[tid[opens[::-1]]] = opens[::-1]  # earliest opening row per tuple
        keep = ~late | (np.arange(len(tid)) >= first_open[tid])
        again = np.unique(tid[opens])
        self.handed_on[again] = False
        self.closed[again] = 0
        return keep, int(old.sum())
