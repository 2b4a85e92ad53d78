"""SYNs that do not fit their 4-tuple's connection: an anomaly, not a new connection.

A SYN with a new initial sequence number on a 4-tuple starts a new connection
(`flows.build_flows`), except a SYN that cannot be one (Zeek's `SYN_seq_jump` is the model):

* `established`: the connection on the 4-tuple was answered by a SYN-ACK (or, without one,
  carried data since the capture began), no FIN or RST came since, the 4-tuple was silent
  less than REUSE_IDLE_S before the SYN, the SYN's sequence number is not the connection's
  ISN (the one its SYN-ACK acknowledged, or its first SYN's), and no SYN-ACK answers it (one
  that does says the peer took it for a new connection: the FIN or RST before it was not
  captured);
* `unanswered`: SYNs with different ISNs sent before a SYN-ACK (a SYN sent again with
  another ISN, or a crafted one): the SYN-ACK acknowledges one of them, that one is the
  connection, any other is the anomaly.

Such a SYN is left out of the analysis (counted as `syn-seq-jump` in `capture.skipped`, and
named in a warning), so the connection it fell into is analysed as if it were not there. A
SYN after a FIN or RST, or after REUSE_IDLE_S of silence, is a new connection on a reused
4-tuple. Everything here is numpy over the rows as given, no per-packet Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .columns import Columns
from .decode import ACK, FIN, RST, SYN
from .weirds import Weird

# A 4-tuple silent this long may be reused without a FIN or RST (TIME_WAIT is 60 s on Linux,
# and state tables forget idle connections): a SYN after that is a new connection.
REUSE_IDLE_S = 60
_REUSE_IDLE_NS = REUSE_IDLE_S * 1_000_000_000
SKIPPED_KIND = "syn-seq-jump"  # the name of the count in `capture.skipped`
_MASK32 = (1 << 32) - 1


Column = Callable[[np.ndarray], np.ndarray]  # a column's values at the positions passed


def foreign_syns(tup: np.ndarray, flags: np.ndarray, from_low: np.ndarray, seq: Column,
                 ack: Column, payload: Column, ts: Column) -> np.ndarray:
    """Positions of the SYNs that do not fit their connection (see the module's rules).

    Rows are grouped by 4-tuple (`tup`), in time order within. `flags` and `from_low` are
    whole columns; `seq`, `ack`, `payload` and `ts` are callables giving a column's values
    at the positions passed (whole columns are read only where a SYN changes its ISN)."""
    n = len(tup)
    syn = np.flatnonzero((flags & (SYN | ACK)) == SYN)
    if len(syn) < 2:
        return syn[:0]
    syn_seq = np.asarray(seq(syn)).astype(np.int64)
    changed = (tup[syn[1:]] == tup[syn[:-1]]) & (syn_seq[1:] != syn_seq[:-1])
    if not changed.any():  # no 4-tuple saw two ISNs: nothing to judge (almost every capture)
        return syn[:0]
    # judged: the rows of the 4-tuples that saw two ISNs (few), renumbered 0..
    sub = np.flatnonzero(np.isin(tup, np.unique(tup[syn[1:][changed]])))
    if len(sub) < n:
        return sub[foreign_syns(tup[sub], flags[sub], from_low[sub],
                                *(lambda at, get=get: get(sub[at])
                                  for get in (seq, ack, payload, ts)))]
    all_rows = np.arange(n)
    t_start = np.r_[True, tup[1:] != tup[:-1]]
    synack = np.flatnonzero((flags & (SYN | ACK)) == (SYN | ACK))
    bound = t_start.copy()
    bound[synack] = True  # a run: from a 4-tuple's first row or a SYN-ACK to the next one
    run_start = np.flatnonzero(bound)
    run = np.cumsum(bound) - 1
    r = run[syn]
    s = run_start[r]

    # unanswered: the SYN-ACK ending the SYN's run acknowledges another SYN of the run
    e = np.r_[run_start[1:], n][r]
    e_ok = np.minimum(e, n - 1)
    answered = (e < n) & ~t_start[e_ok] & (from_low[e_ok] != from_low[syn])
    acked = (np.asarray(ack(e_ok)).astype(np.int64) - 1) & _MASK32
    carries = answered & (syn_seq == acked)  # the SYN the SYN-ACK acknowledges
    run_has = np.zeros(len(run_start), dtype=bool)
    run_has[r[carries]] = True
    unanswered = answered & run_has[r] & (syn_seq != acked)

    # established: a SYN-ACK began the run or data came since, no FIN/RST since, not silent
    # long, a new ISN, unanswered
    pay = np.asarray(payload(all_rows)) > 0
    data = np.r_[0, np.cumsum(pay)]
    fins = np.r_[0, np.cumsum((flags & (FIN | RST)) != 0)]
    t = np.asarray(ts(all_rows)).astype(np.int64)
    first = ~t_start[syn]
    prev = np.maximum(syn - 1, 0)
    s_flags = flags[s]
    s_isn = np.where((s_flags & (SYN | ACK)) == (SYN | ACK),
                     (np.asarray(ack(s)).astype(np.int64) - 1) & _MASK32,
                     np.where((s_flags & (SYN | ACK)) == SYN,
                              np.asarray(seq(s)).astype(np.int64), -1))
    opened = ((s_flags & (SYN | ACK)) == (SYN | ACK)) | (data[syn] - data[s] > 0)
    established = (first & opened & (fins[syn] - fins[s] == 0)
                   & (t[syn] - t[prev] < _REUSE_IDLE_NS) & (syn_seq != s_isn) & ~carries)
    return syn[unanswered | established]


@dataclass
class Tally:
    """The SYNs left out, counted as they are found: how many, the first's frame number."""

    count: int = 0
    first: int = -1

    def add(self, frames: np.ndarray) -> None:
        if len(frames):
            self.count += len(frames)
            low = int(frames.min())
            self.first = low if self.first < 0 else min(self.first, low)

    def told(self, skipped: dict[str, int], warnings: list[Weird]
             ) -> tuple[dict[str, int], list[Weird]]:
        """`skipped` and `warnings` with the count and its warning added (new ones; the same
        without any)."""
        if not self.count:
            return skipped, warnings
        return ({**skipped, SKIPPED_KIND: skipped.get(SKIPPED_KIND, 0) + self.count},
                [*warnings, warning(self.count, self.first)])


def warning(count: int, first_frame: int) -> Weird:
    """The warning naming the SYNs left out (`count`, the first by frame number)."""
    one = count == 1
    return Weird("syn-seq-jump",
                 f"{count} SYN{'' if one else 's'} with a new initial sequence number "
                 f"fit{'s' if one else ''} no connection on {'its' if one else 'their'} "
                 f"4-tuple (first: frame {first_frame}; an established connection, no FIN or "
                 "RST before, or another SYN the SYN-ACK acknowledged): not a new connection, "
                 f"left out of the analysis ({SKIPPED_KIND})", count)


def fits_no_connection(tid: np.ndarray, cols: Columns, rows: np.ndarray,
                       closed_before: np.ndarray, last_before_ns: np.ndarray) -> np.ndarray:
    """Which of the SYNs at `rows` (positions; each with a new ISN on an established
    connection) fit no connection, each judged on its 4-tuple's rows in `cols` (`tid`: each
    row's tuple): no FIN or RST since the connection's SYN (`closed_before[t]`: one came
    before these rows), the 4-tuple silent less than REUSE_IDLE_S before it
    (`last_before_ns[t]`: its last packet before these rows), and no SYN-ACK among the rows
    after it answering it. A boolean per row."""
    out = np.zeros(len(tid), dtype=bool)
    ts, flags = cols["ts_ns"], cols["flags"]
    for r in rows.tolist():  # (few)
        t = int(tid[r])
        mine = np.flatnonzero(tid == t)
        mine = mine[np.lexsort((mine, ts[mine]))]  # its rows, in time order
        at = int(np.flatnonzero(mine == r)[0])
        before, after = mine[:at], mine[at + 1:]
        closed = bool(closed_before[t]) or bool(((flags[before] & (FIN | RST)) != 0).any())
        last = max(int(last_before_ns[t]), int(ts[before].max()) if at else -1 << 62)
        answered = bool((((flags[after] & (SYN | ACK)) == (SYN | ACK))
                         & (cols["ack"][after] == ((int(cols["seq"][r]) + 1) & _MASK32))).any())
        quiet = int(ts[r]) - last >= _REUSE_IDLE_NS
        out[r] = not (closed or answered or quiet)
    return out


def without_foreign(rows: Columns) -> tuple[Columns, np.ndarray]:
    """One 4-tuple's rows (in time order) less its SYNs that fit no connection, and the
    frame numbers of those."""
    n = len(rows["frame"])
    foreign = foreign_syns(np.zeros(n, np.int64), rows["flags"], rows["from_low"],
                           *(lambda at, k=k: rows[k][at]
                             for k in ("seq", "ack", "payload", "ts_ns")))
    if not len(foreign):
        return rows, foreign
    keep = np.ones(n, dtype=bool)
    keep[foreign] = False
    return {k: v[keep] for k, v in rows.items()}, rows["frame"][foreign]
