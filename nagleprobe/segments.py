"""A flow's segments: relative, unwrapped sequence and acknowledgement numbers, what each
segment is (new data, a retransmission, a keepalive), and the ACK links between directions.

The loops are compiled (`_flows.c`) when built; each has its numpy twin here, the reference
the tests hold it to.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .columns import Columns
from .decode import ACK, FIN, RST, SYN, TCP_COLUMNS
from .tuples import group_order, group_starts

try:
    from . import _flows as _compiled
except ImportError:  # built without a C compiler
    _compiled = None


class Sorted(Protocol):
    """Decoded columns seen through a row order (`flows.build_flows`'s view of its rows)."""

    cols: dict
    order: np.ndarray

    def __getitem__(self, name: str) -> np.ndarray: ...


def _as_signed32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32).view(np.int32).astype(np.int64)


def grouped_cummax(values: np.ndarray, group: np.ndarray, exclusive: bool = False,
                   floor: int = -(1 << 40)) -> np.ndarray:
    """Running maximum of int64 `values` within each group of sorted `group` ids.

    With `exclusive`, each row gets the maximum of the rows before it (`floor` if none).
    """
    n = len(values)
    if n == 0:
        return values.astype(np.int64)
    v = values.astype(np.int64)
    np.maximum(v, floor, out=v)
    v -= floor  # >= 0
    span = int(v.max()) + 1
    g = group.astype(np.int64)
    g -= int(group.min())
    if span * (int(g.max()) + 1) < (1 << 62):
        g *= span
        v += g
        acc = np.maximum.accumulate(v, out=v)
        acc -= g
    else:  # offsets would overflow: run the accumulation group by group
        acc = np.empty(n, dtype=np.int64)
        starts = group_starts(group)
        bounds = np.r_[starts, n]
        for a, b in zip(bounds[:-1], bounds[1:]):
            acc[a:b] = np.maximum.accumulate(v[a:b])
    acc += floor
    if exclusive:
        prev = np.r_[floor, acc[:-1]]
        first = np.r_[True, group[1:] != group[:-1]]
        prev[first] = floor
        return prev
    return acc


SEG_COLUMNS = ("seq", "ack", "end", "sent_before", "new_data", "retrans", "keepalive", "flow",
               "dir", "frame", "ts_ns", "payload", "has_data", "flags", "window", "ack_max",
               "acked_by")


def segments(c: Sorted, fid: np.ndarray, d: np.ndarray, flags: np.ndarray, nflows: int
              ) -> tuple[Columns, np.ndarray]:
    """Flows.seg: each row's flow, direction and decoded fields in flow order, its
    relative, unwrapped seq/ack, classification and ACK links (`_sequence_space_numpy`,
    `_ack_links_numpy`); and the largest payload of each flow * 2 + dir. One compiled pass
    per connection (nagleprobe/_flows.c) when built, else `_segments_numpy`. Rows the
    stream handed in flow order already are not copied."""
    seg = {"flow": fid, "dir": d, "frame": c["frame"], "ts_ns": c["ts_ns"], "flags": flags,
           "window": c["window"]}
    if _compiled is None:
        made, maxpay = _segments_numpy(c, seg, nflows)
    else:
        n = len(fid)
        made = {k: np.empty(n, dtype=np.int64) for k in ("seq", "ack", "end", "sent_before")}
        made.update({k: np.empty(n, dtype=bool) for k in ("new_data", "retrans", "keepalive")})
        made.update({k: np.empty(n, dtype=np.int64) for k in ("payload", "ack_max", "acked_by")})
        maxpay = np.zeros(nflows * 2, dtype=np.int64)
        _compiled.segments(
            np.ascontiguousarray(c.order, np.int64), np.ascontiguousarray(fid, np.int64),
            np.ascontiguousarray(d).view(np.uint8), np.ascontiguousarray(flags, np.uint16),
            *(np.ascontiguousarray(c.cols[k], TCP_COLUMNS[k]) for k in ("seq", "ack", "payload")),
            *made.values(), maxpay)
    seg.update(made)
    seg["has_data"] = seg["payload"] > 0
    return {k: seg[k] for k in SEG_COLUMNS}, maxpay


def _segments_numpy(c: Sorted, seg: Columns, nflows: int
                    ) -> tuple[Columns, np.ndarray]:
    """`_segments`' computed columns with numpy alone (the reference for the compiled
    version), from `seg`'s flow, dir and flags."""
    dgroup = seg["flow"] * 2 + seg["dir"]
    by_dir = group_order(dgroup)  # each direction's rows in time order
    made = _sequence_space_numpy(c, by_dir, dgroup, nflows)
    made["payload"] = c["payload"].astype(np.int64)
    made.update(_ack_links_numpy({**seg, **made}, by_dir))
    maxpay = np.zeros(nflows * 2, dtype=np.int64)
    np.maximum.at(maxpay, dgroup, made["payload"])
    return made, maxpay


def _sequence_space_numpy(c, by_dir, dgroup, nflows) -> Columns:
    """Relative, unwrapped seq/ack per direction, and segment classification (`by_dir`:
    the rows in (flow, direction, time) order, `dgroup` each row's flow * 2 + direction)."""
    n = len(dgroup)
    ob = c.order[by_dir]  # decoded rows in (flow, direction, time) order
    g = dgroup[by_dir]
    flags_d = c.cols["flags"][ob]
    gstart = np.r_[True, g[1:] != g[:-1]] if n else np.zeros(0, bool)
    raw_seq = c.cols["seq"][ob]
    step = np.diff(raw_seq, prepend=raw_seq[:1]).view(np.int32)  # uint32 diff wraps: mod 2**32
    step[gstart] = 0
    seq_d = np.cumsum(step, dtype=np.int64)
    # relative to the direction's ISN: 0 at its SYN, or 1 at its first seen segment
    anchor = np.where((flags_d[gstart] & SYN) != 0, 0, 1)
    gi = np.cumsum(gstart) - 1
    seq_d -= (seq_d[gstart] - anchor)[gi]
    seq_rel = np.empty(n, dtype=np.int64)
    seq_rel[by_dir] = seq_d

    # ISN of each direction in raw numbers: raw seq of its first row minus its anchor
    isn = np.zeros(nflows * 2, dtype=np.int64)
    has_dir = np.zeros(nflows * 2, dtype=bool)
    isn[g[gstart]] = (raw_seq[gstart].astype(np.int64) - anchor) % (1 << 32)
    has_dir[g[gstart]] = True

    # ACK numbers relative to the peer's ISN, unwrapped along the rows that carry ACK
    ack_rel = np.full(n, -1, dtype=np.int64)
    with_ack = (flags_d & ACK) != 0
    rows = by_dir[with_ack]
    if len(rows):
        ga = g[with_ack]
        raw_ack = c.cols["ack"][ob[with_ack]]
        astart = np.r_[True, ga[1:] != ga[:-1]]
        first_raw = raw_ack[astart].astype(np.int64)
        peer_first = ga[astart] ^ 1
        base_a = np.where(has_dir[peer_first], isn[peer_first], (first_raw - 1) % (1 << 32))
        first_rel = _as_signed32(first_raw - base_a)
        stp = np.diff(raw_ack, prepend=raw_ack[:1]).view(np.int32)
        stp[astart] = 0
        run = np.cumsum(stp, dtype=np.int64)
        ai = np.cumsum(astart) - 1
        run += (first_rel - run[astart])[ai]
        ack_rel[rows] = run

    # classification along each direction's rows, then back to flow order
    payload_d = c.cols["payload"][ob].astype(np.int64)
    end_d = seq_d + payload_d + ((flags_d & SYN) != 0) + ((flags_d & FIN) != 0)
    sent_d = grouped_cummax(end_d, g, exclusive=True, floor=0)  # highest end sent earlier
    new_d = (payload_d > 0) & (seq_d >= sent_d)
    keepalive_d = ((payload_d <= 1) & (seq_d == sent_d - 1)
                   & ((flags_d & (SYN | FIN | RST)) == 0))
    retrans_d = (payload_d > 0) & (seq_d < sent_d) & ~keepalive_d
    out = {"seq": seq_rel, "ack": ack_rel}
    for name, col in (("end", end_d), ("sent_before", sent_d), ("new_data", new_d),
                      ("retrans", retrans_d), ("keepalive", keepalive_d)):
        out[name] = np.empty(n, dtype=col.dtype)
        out[name][by_dir] = col
    return out


def _ack_links_numpy(seg: Columns, by_dir: np.ndarray) -> Columns:
    """ack_max: highest ACK this direction had sent up to and including the row.
    acked_by: for new sequence space, the first row of the other direction acknowledging all
    of it (-1 if none)."""
    n = len(seg["flow"])
    fid, d = seg["flow"], seg["dir"]
    dgroup = fid * 2 + d
    ack_max = np.empty(n, dtype=np.int64)
    ack_max[by_dir] = grouped_cummax(seg["ack"][by_dir], dgroup[by_dir], floor=-1)

    # first row of the other direction whose running ACK covers the data's end:
    # search the (group, ack_max) keys, which increase along by_dir order
    acked_by = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(seg["end"] > seg["sent_before"])  # new sequence space, SYN/FIN too
    if len(rows) and n:
        span = int(max(ack_max.max(), seg["end"].max())) + 2
        keys = dgroup[by_dir].astype(np.int64) * span + (ack_max[by_dir] + 1)
        want = (dgroup[rows] ^ 1).astype(np.int64) * span + (seg["end"][rows] + 1)
        pos = np.searchsorted(keys, want, side="left")
        ok = pos < n
        hit = by_dir[np.minimum(pos, n - 1)]
        ok &= dgroup[hit] == (dgroup[rows] ^ 1)
        acked_by[rows[ok]] = hit[ok]
    return {"ack_max": ack_max, "acked_by": acked_by}
