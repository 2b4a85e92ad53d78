"""Packets seen twice: the copies `tcpdump -i any` (or a merged capture) holds of one packet.

A copy is a row identical to an earlier one of its 4-tuple and direction within
DUPLICATE_WINDOW_NS; `find_copies` finds them, and the flows keep the first copy only.
"""

from __future__ import annotations

import numpy as np

from .columns import Columns, distinct

# `tcpdump -i any` on a host with bridges, veth pairs or tunnels sees each packet on two (or
# more) interfaces, microseconds apart. A row identical to an earlier one of its 4-tuple and
# direction (seq, ack, flags, window, payload, IPv4 ID, TSval) within this time is such a copy:
# a real retransmission so soon is implausible (even a fast retransmit waits for the peer's
# duplicate ACKs) and would carry a new IP ID, and a new TSval once a millisecond has passed.
DUPLICATE_WINDOW_NS = 2_000_000
# Copies of a burst interleave (A B C A' B' C': the second interface sees them after a
# queue), so a copy is looked for among this many earlier rows of its 4-tuple (both
# directions): enough for a burst of a fast flow whose copies come a few microseconds late.
DUPLICATE_LOOKBACK = 32
DUPLICATE_FIRST = 4  # rows looked back first: further only where copies were found that near


def find_copies(cols: Columns, order: np.ndarray | None, tup: np.ndarray,
                from_low: np.ndarray, far: bool = False) -> tuple[np.ndarray, int]:
    """Positions in `order` (rows grouped by 4-tuple, in time order within; None: the rows
    as they are; `tup` and `from_low` in that order) of rows that repeat one of the
    DUPLICATE_LOOKBACK rows before them of the same 4-tuple and direction within
    DUPLICATE_WINDOW_NS: same seq, ack, flags, window, payload, IP ID and TCP timestamp (or
    none). Candidates are the pairs of rows whose
    32-bit mix of seq and ack is the same (few: a pure ACK and the data after it, duplicate
    ACKs); only they are compared field by field. Rows further back than DUPLICATE_FIRST
    are looked at only where a copy was found nearer, or with `far`. Also returns how many
    copies were found that near."""
    n = len(tup)
    if n < 2:
        return np.zeros(0, dtype=np.int64), 0
    key = cols["ack"] * np.uint32(0x9E3779B1)  # wraps: a mix, equal for equal pairs
    key ^= cols["seq"]
    if order is not None:
        key = key[order]  # one gather instead of two
    found = [_copies(cols, order, tup, from_low, key, range(1, min(DUPLICATE_FIRST, n - 1) + 1))]
    if len(found[0]) or far:  # copies come close together: without one nearby there are none
        found.append(_copies(cols, order, tup, from_low, key,
                             range(DUPLICATE_FIRST + 1, min(DUPLICATE_LOOKBACK, n - 1) + 1)))
    return distinct(np.concatenate(found)), len(distinct(found[0]))


def _copies(cols: Columns, order: np.ndarray | None, tup: np.ndarray,
            from_low: np.ndarray, key: np.ndarray, lags: range) -> np.ndarray:
    """`_duplicates` for the rows `lags` rows apart (may repeat a position)."""
    later, earlier = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for lag in lags:
        i = np.flatnonzero(key[lag:] == key[:-lag]) + lag
        later.append(i)
        earlier.append(i - lag)
    i, j = np.concatenate(later), np.concatenate(earlier)
    same = (tup[i] == tup[j]) & (from_low[i] == from_low[j])
    i, j = i[same], j[same]
    ri, rj = (i, j) if order is None else (order[i], order[j])
    # payload first: it tells a pure ACK from the data after it, the most common candidates
    same = ((cols["payload"][ri] == cols["payload"][rj])
            & (cols["ts_ns"][ri] - cols["ts_ns"][rj] <= DUPLICATE_WINDOW_NS))
    i, ri, rj = i[same], ri[same], rj[same]
    same = (cols["tsval"][ri] == cols["tsval"][rj]) | (cols["has_ts"][ri] == 0)
    for name in ("seq", "ack", "flags", "window", "ipid", "has_ts"):
        same &= cols[name][ri] == cols[name][rj]
    return i[same]
