"""Rebuild TCP connections from decoded packet columns.

Input is the columnar output of `decode` (one row per TCP packet, any order).
Output is a `Flows` object: every segment sorted by (flow, time) with its
direction, relative sequence/ack numbers and classification, plus per-flow
facts (endpoints, roles, MSS, window scale, RTT seen from the capture point,
vantage). Everything is vectorised: per-packet work is numpy, per-flow work
may be Python (flows are few compared with packets).

Over 500 lines: each compiled loop of `_flows.c` (sequence space, ACK links, neighbours,
round-trip samples) has its numpy twin here, the reference the tests hold it to; the
twins belong next to the code that calls them. Which connection a packet belongs to is
`nagleprobe.tuples`; which SYNs fit no connection (left out), `nagleprobe.syns`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .decode import ACK, FIN, RST, SYN, TCP_COLUMNS, format_address
from .syns import foreign_syns
from .tuples import TupleEnds, endpoints, group_order, lower, tuple_ids

try:
    from . import _flows as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

DEFAULT_MSS_FLOOR = 536  # RFC 1122 default: an MSS inferred from traffic is never below it
GUESSED_MSS = 1460  # without a SYN or a repeated largest segment: Ethernet's usual MSS
UNDELAYED_MS = 25.0  # a data -> pure ACK turnaround below this cannot include a delayed ACK
NEAR_MS = 0.1  # a round trip this short (ms) means the capture point sits at that endpoint
EPHEMERAL_FROM = 32768
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


@dataclass
class Flows:
    """Segments of every flow, sorted by (flow, time), and per-flow facts.

    `seg` columns (numpy arrays, one row per TCP segment):
      flow, dir (0 client->server, 1 server->client), frame, ts_ns, seq, ack
      (relative, unwrapped, int64; ack -1 without the ACK flag), payload,
      has_data, flags, window (raw), end (seq + payload + SYN + FIN), sent_before (highest
      end sent earlier in the direction), new_data (carries bytes never sent
      before), retrans, keepalive, ack_max (highest ACK the direction had sent up
      to and including the row), acked_by (for new sequence space: the first row
      of the other direction acknowledging all of it, else -1).
    `flow` columns (numpy arrays, one entry per flow): see `_flow_facts`.
    Row neighbours (`before`, `after`) are computed on demand for the rows asked about.
    """

    seg: dict[str, np.ndarray]
    flow: dict[str, np.ndarray]
    starts: np.ndarray  # first row of each flow in `seg`; ends = starts[1:] + [len]
    duplicates: int = 0  # copies of a packet (see DUPLICATE_WINDOW_NS) dropped, not in `seg`
    near_copies: int = 0  # ... of them found within DUPLICATE_FIRST rows of the packet
    # frame numbers of the SYNs that fit no connection (`nagleprobe.syns`), dropped, not in `seg`
    syn_jumps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _runs: dict = field(default_factory=dict, repr=False)  # neighbour lookups, built on demand

    @property
    def count(self) -> int:
        return len(self.starts)

    def rows(self, i: int) -> slice:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.seg["flow"])
        return slice(int(self.starts[i]), int(end))

    def before(self, rows: np.ndarray, data: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """For each of `rows`: the last earlier row of its flow sent in the same direction,
        and the last one sent in the other direction (-1 if none); with `data`, among rows
        carrying payload only."""
        return self._neighbours(rows, data, after=False)

    def after(self, rows: np.ndarray, data: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Like `before`, for the first later row in the same / the other direction."""
        return self._neighbours(rows, data, after=True)

    def _neighbours(self, rows: np.ndarray, data: bool, after: bool
                    ) -> tuple[np.ndarray, np.ndarray]:
        if _compiled is not None:  # every row's neighbours in one pass, kept for later asks
            key = ("all rows", data, after)
            if key not in self._runs:
                n = len(self.seg["flow"])
                same, other = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
                _compiled.neighbours(np.ascontiguousarray(self.seg["flow"], np.int64),
                                     np.ascontiguousarray(self.seg["dir"], np.int8).view(np.uint8),
                                     np.ascontiguousarray(self.seg["has_data"]).view(np.uint8),
                                     data, after, same, other)
                self._runs[key] = same, other
            same, other = self._runs[key]
            return same[rows], other[rows]
        # The nearest candidate row N answers one direction; the other direction's answer
        # is the row just outside N's run of same-direction candidates.
        idx, md, mf, outside, count = self._run_index(data, after)
        fid, d = self.seg["flow"], self.seg["dir"]
        rows = np.asarray(rows, dtype=np.int64)
        none = np.full(len(rows), -1, dtype=np.int64)
        if not len(md) or not len(rows):
            return none, none.copy()
        # position of N among the candidates: `count` is the running count of candidates
        if after:
            k = rows + 1 if count is None else count[rows]
        else:
            k = rows - 1 if count is None else count[rows] - self.seg["has_data"][rows] - 1
        kk = np.clip(k, 0, len(md) - 1)
        ok = (k == kk) & (mf[kk] == fid[rows])
        same_dir = md[kk] == d[rows]
        near, far = (kk if idx is None else idx[kk]), outside[kk]
        return (np.where(ok, np.where(same_dir, near, far), -1),
                np.where(ok, np.where(same_dir, far, near), -1))

    def _run_index(self, data: bool, after: bool):
        """Candidate rows (all, or those carrying payload: None stands for all rows) with
        their direction and flow, for each the candidate just before (or after) its run of
        same-direction candidates in the same flow (-1 if none), and the running count of
        candidates up to each row (None for all rows)."""
        if (data, after) not in self._runs:
            fid, d = self.seg["flow"], self.seg["dir"]
            if data:
                has = self.seg["has_data"]
                idx, count = np.flatnonzero(has), np.cumsum(has)
                md, mf = d[idx], fid[idx]
            else:
                idx = count = None
                md, mf = d, fid
            pos = np.arange(len(md)) if idx is None else idx
            m = len(md)
            new_flow = np.r_[True, mf[1:] != mf[:-1]] if m else np.zeros(0, bool)
            run_first = np.flatnonzero(new_flow | np.r_[False, md[1:] != md[:-1]]) if m else pos
            lens = np.diff(np.r_[run_first, m])
            if after:
                run_last = run_first + lens - 1
                nxt = np.minimum(run_last + 1, m - 1)
                last_in_flow = np.r_[new_flow[1:], True][run_last]
                outside = np.repeat(np.where(last_in_flow, -1, pos[nxt]), lens)
            else:
                outside = np.repeat(np.where(new_flow[run_first], -1, pos[run_first - 1]), lens)
            self._runs[(data, after)] = (idx, md, mf, outside, count)
        return self._runs[(data, after)]


def _as_signed32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32).view(np.int32).astype(np.int64)


def _group_starts(group: np.ndarray) -> np.ndarray:
    """Row index where each run of equal values in a sorted `group` begins."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, group[1:] != group[:-1]])


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
        starts = _group_starts(group)
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


class _Sorted:
    """Decoded columns seen through a row order: whole columns are gathered (once) only
    when asked for; `at` gathers just a few rows (flow starts, SYNs). Addresses and ports
    not held per row come from the tuples' endpoints (`ends`, with each row's tuple
    `tup` and direction column `from_low`)."""

    def __init__(self, cols: dict[str, np.ndarray], order: np.ndarray,
                 ends: TupleEnds | None = None, tup: np.ndarray | None = None,
                 identity: bool = False) -> None:
        self.cols, self.order, self.cache = cols, order, {}
        self.ends, self.tup = ends, tup
        if identity:  # `order` is every row in place: the columns as they are
            self.cache = {k: v for k, v in cols.items() if isinstance(v, np.ndarray)}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.cache:
            self.cache[name] = self.cols[name][self.order]
        return self.cache[name]

    def at(self, name: str, rows: np.ndarray) -> np.ndarray:
        raw = self.order[rows]
        if name in self.cols or self.ends is None:
            return self.cols[name][raw]
        return self.ends.column(name, self.tup[raw], self.cols["from_low"][raw])


def build_flows(cols: dict[str, np.ndarray], tuples: np.ndarray | None = None,
                ends: TupleEnds | None = None, far_copies: bool = False) -> Flows:
    """Group decoded TCP packets into connections and classify every segment.

    `tuples`: each row's 4-tuple as an id 0..k-1, if the caller already knows them (the
    stream does); it saves finding them. Flows are numbered in the order of these ids (by
    default: by first appearance in time order), unless a 4-tuple is reused. `ends`: the
    endpoints of each of those tuples; `cols` then holds each row's direction (`from_low`)
    instead of its addresses and ports. `far_copies`: look for copies of a packet up to
    DUPLICATE_LOOKBACK rows back even where none is found nearer (`Flows.near_copies` then
    says how many were found within DUPLICATE_FIRST rows).
    """
    n = len(cols["frame"])
    ts = cols["ts_ns"]
    # rows the caller grouped by 4-tuple (the stream does) need only be in time order within
    grouped = tuples is not None and bool(np.all(tuples[1:] >= tuples[:-1]))
    in_order = ts[1:] >= ts[:-1]
    if grouped:
        in_order |= tuples[1:] != tuples[:-1]
    # time order (records need not be in time order: -i any, merged files); ties keep file order
    if n and not np.all(in_order):
        t_order = np.argsort(ts, kind="stable")
        cols = {k: v[t_order] for k, v in cols.items()}
        tuples = None if tuples is None else tuples[t_order]
        grouped = False
    if tuples is None:
        tup, from_low = tuple_ids(cols)
    else:
        tup = np.asarray(tuples, dtype=np.int64)
        from_low = cols["from_low"] if ends is not None else lower(*endpoints(cols))
    raw_tup = tup
    if grouped:  # as group_order would leave them
        order = np.arange(n)
    else:
        order = group_order(tup)  # rows grouped by 4-tuple, in time order within
        tup, from_low = tup[order], from_low[order]
    copies, near = _duplicates(cols, None if grouped else order, tup, from_low, far_copies)
    if "known" in cols:  # rows already judged (a connection analysed in pieces: its context)
        known = cols["known"][order]
        copies = np.union1d(copies[known[copies] < 0], np.flatnonzero(known > 0))
    if len(copies):  # the same packet seen twice: keep the first copy only
        keep = np.ones(n, dtype=bool)
        keep[copies] = False
        order, tup, from_low = order[keep], tup[keep], from_low[keep]
        n = len(order)
    c = _Sorted(cols, order, ends, raw_tup, identity=grouped and not len(copies))
    flags = c["flags"]
    foreign = foreign_syns(tup, flags, from_low, *(lambda rows, k=k: c.at(k, rows)
                                                    for k in ("seq", "ack", "payload", "ts_ns")))
    foreign_frames = c.at("frame", foreign).astype(np.int64)
    if len(foreign):  # as if they were not there
        keep = np.ones(n, dtype=bool)
        keep[foreign] = False
        order, tup, from_low = order[keep], tup[keep], from_low[keep]
        n = len(order)
        c = _Sorted(cols, order, ends, raw_tup)
        flags = c["flags"]
    syns = _Syns(flags)

    # A new connection on the same 4-tuple starts at a SYN with a new ISN (of those that
    # fit no connection none is left: see above)
    new_conn = np.r_[True, tup[1:] != tup[:-1]] if n else np.zeros(0, bool)
    ntuples = int(np.count_nonzero(new_conn))
    syn_only = syns.only
    syn_seq = c.at("seq", syn_only)
    repeated = np.r_[False, (tup[syn_only[1:]] == tup[syn_only[:-1]])
                     & (syn_seq[1:] == syn_seq[:-1])] if len(syn_only) else np.zeros(0, bool)
    new_conn[syn_only[~repeated]] = True
    starts = np.flatnonzero(new_conn)
    if len(starts) == ntuples and n and tup[0] == 0 and tup[-1] == ntuples - 1:
        fid = tup  # one connection per tuple, numbered 0.. already (the stream's batches)
    else:
        fid = np.cumsum(new_conn) - 1 if n else np.zeros(0, np.int64)
    if len(starts) > ntuples:
        # a reused 4-tuple: renumber its later connections by their first packet's time
        first_order = np.lexsort((c.at("frame", starts), c.at("ts_ns", starts)))
        rank = np.empty(len(starts), dtype=np.int64)
        rank[first_order] = np.arange(len(starts))
        regroup = np.argsort(rank[fid], kind="stable")
        order, fid = order[regroup], rank[fid][regroup]
        from_low, flags = from_low[regroup], flags[regroup]
        syns = _Syns(flags)
        c = _Sorted(cols, order, ends, raw_tup)
        starts = _group_starts(fid)
    nflows = len(starts)
    ends = np.r_[starts[1:], n].astype(np.int64) if nflows else starts

    client_is_low, handshake = _roles(c, fid, starts, from_low, syns)
    d = (from_low != client_is_low[fid]).astype(np.int8)  # 0: client -> server
    seg, maxpay = _segments(c, fid, d, flags, nflows)
    flow = _flow_facts(c, seg, maxpay, starts, ends, handshake, syns)
    return Flows(seg=seg, flow=flow, starts=starts, duplicates=len(copies), near_copies=near,
                 syn_jumps=foreign_frames)


def _duplicates(cols: dict[str, np.ndarray], order: np.ndarray | None, tup: np.ndarray,
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
    return _distinct(np.concatenate(found)), len(_distinct(found[0]))


def _distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a) for integers (numpy's looks for a masked array first, importing numpy.ma
    once: 10 ms of the first batch)."""
    a = np.sort(a)
    return a[_group_starts(a)]


def _copies(cols: dict[str, np.ndarray], order: np.ndarray | None, tup: np.ndarray,
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


class _Syns:
    """The rows carrying SYN (`all`), of them those without ACK (`only`) and with it
    (`synack`), ascending: found in one pass over the flags."""

    def __init__(self, flags: np.ndarray) -> None:
        self.all = np.flatnonzero((flags & SYN) != 0)  # (a bool mask: 6 times quicker)
        acked = (flags[self.all] & ACK) != 0
        self.only, self.synack = self.all[~acked], self.all[acked]


def _roles(c, fid, starts, from_low, syns: _Syns):
    """Which endpoint is the client (per flow), and whether the handshake says so."""
    nflows = len(starts)
    first_syn = _first_in_flow(syns.only, fid, nflows)
    first_synack = _first_in_flow(syns.synack, fid, nflows)
    # no handshake: the ephemeral port is the client's, else the higher port, else the first sender
    sport, dport = c.at("sport", starts), c.at("dport", starts)
    low_port = np.where(from_low[starts], sport, dport).astype(np.int64)
    high_port = np.where(from_low[starts], dport, sport).astype(np.int64)
    one_ephemeral = (low_port >= EPHEMERAL_FROM) != (high_port >= EPHEMERAL_FROM)
    guess = np.where(one_ephemeral, low_port >= EPHEMERAL_FROM,
                     np.where(low_port != high_port, low_port > high_port, from_low[starts]))
    client_is_low = np.where(first_syn >= 0, from_low[np.maximum(first_syn, 0)],
                             np.where(first_synack >= 0, ~from_low[np.maximum(first_synack, 0)],
                                      guess))
    handshake = (first_syn >= 0) | (first_synack >= 0)
    return client_is_low.astype(bool), handshake


def _first_in_flow(rows: np.ndarray, fid: np.ndarray, nflows: int) -> np.ndarray:
    """The first of `rows` (ascending) in each flow, -1 if none."""
    out = np.full(nflows, -1, dtype=np.int64)
    rows = rows[::-1]
    out[fid[rows]] = rows  # later assignments (earlier rows) win
    return out


# the columns of Flows.seg, in their order
SEG_COLUMNS = ("seq", "ack", "end", "sent_before", "new_data", "retrans", "keepalive", "flow",
               "dir", "frame", "ts_ns", "payload", "has_data", "flags", "window", "ack_max",
               "acked_by")


def _segments(c: _Sorted, fid: np.ndarray, d: np.ndarray, flags: np.ndarray, nflows: int
              ) -> tuple[dict[str, np.ndarray], np.ndarray]:
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


def _segments_numpy(c: _Sorted, seg: dict[str, np.ndarray], nflows: int
                    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
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


def _sequence_space_numpy(c, by_dir, dgroup, nflows) -> dict[str, np.ndarray]:
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


def _ack_links_numpy(seg: dict[str, np.ndarray], by_dir: np.ndarray) -> dict[str, np.ndarray]:
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


def _flow_facts(c, seg, maxpay, starts, ends, handshake, syns: _Syns) -> dict[str, np.ndarray]:
    """Per-flow endpoints, MSS, window scale, round trips and vantage (numpy arrays;
    `maxpay`: the largest payload of each flow * 2 + dir)."""
    nflows = len(starts)
    fid, d, ts = seg["flow"], seg["dir"], seg["ts_ns"]

    def key(rows: np.ndarray) -> np.ndarray:  # flow * 2 + dir of some rows
        return fid[rows] * 2 + d[rows]
    out: dict[str, np.ndarray] = {}

    # endpoints: the first row's source is the client iff that row goes client -> server
    r = starts
    to_server = d[r] == 0
    for side, mine in (("client", to_server), ("server", ~to_server)):
        pick = {k: np.where(mine, c.at(f"src_{k}", r), c.at(f"dst_{k}", r)) for k in ("hi", "lo")}
        port = np.where(mine, c.at("sport", r), c.at("dport", r)).astype(np.int64)
        addr = _format_addresses(c.at("ipver", r), pick["hi"], pick["lo"])
        out[f"{side}_addr"] = addr
        out[f"{side}_port"] = port
        out[side] = np.array([f"[{a}]:{p}" if ":" in a else f"{a}:{p}"
                              for a, p in zip(addr.tolist(), port.tolist())], dtype=object)
    out["roles"] = np.where(handshake, "handshake", "guessed").astype(object)
    out["tunnel"] = np.asarray(c.at("tunnel", r), dtype=np.int64) if "tunnel" in c.cols or \
        c.ends is not None else np.zeros(nflows, np.int64)
    out["packets"] = (ends - starts).astype(np.int64)
    out["pieces"] = np.ones(nflows, np.int64)  # analysed whole (nagleprobe.pieces: more)
    out["first_ns"] = ts[starts]
    out["last_ns"] = ts[ends - 1]

    # options announced in each direction's first SYN; largest payload per direction
    syn_rows = syns.all
    first_syn_of = np.full(nflows * 2, -1, dtype=np.int64)
    first_syn_of[key(syn_rows[::-1])] = syn_rows[::-1]
    has = first_syn_of >= 0
    fs = np.maximum(first_syn_of, 0)
    mss_opt = np.where(has, c.at("mss", fs), -1).astype(np.int64)
    wscale = np.where(has, c.at("wscale", fs), -1).astype(np.int64)
    syn_ts = has & (c.at("has_ts", fs) != 0)

    # send MSS of each direction (see send_mss)
    at_max = np.zeros(nflows * 2, dtype=np.int64)
    peer_mss = mss_opt.reshape(-1, 2)[:, ::-1].reshape(-1)
    no_syn = (peer_mss.reshape(-1, 2) <= 0).any(axis=1)
    if no_syn.any():  # count the largest segments only in the flows that need it
        observed = np.maximum(maxpay[0::2], maxpay[1::2])
        rows = np.flatnonzero(no_syn[fid])
        at_max = np.bincount(key(rows[(seg["payload"][rows] == observed[fid[rows]])
                                      & (seg["payload"][rows] > 0)]), minlength=nflows * 2)
    out["mss"], out["mss_how"] = send_mss(mss_opt, syn_ts, maxpay, at_max)
    out["mss_option"], out["syn_timestamps"] = mss_opt.reshape(-1, 2), syn_ts.reshape(-1, 2)
    ws = np.minimum(wscale.reshape(-1, 2), 14)  # RFC 7323: a larger shift counts as 14
    both_syn = (first_syn_of.reshape(-1, 2) >= 0).all(axis=1)
    out["wscale"] = np.where((ws >= 0).all(axis=1)[:, None], ws,
                             np.where(both_syn[:, None], 0, -1))

    # round trips from the capture point: SYN -> SYN/ACK is to the server and back,
    # SYN/ACK -> the client's ACK of it is to the client and back
    nan = np.full(nflows, np.nan)
    sa = _first_in_flow(syns.synack, fid, nflows)
    sa0 = np.maximum(sa, 0)
    syn_rows = syns.only
    at = np.searchsorted(syn_rows, sa0, side="right") - 1  # the last SYN at or before
    syn_before = syn_rows[np.maximum(at, 0)] if len(syn_rows) else sa0
    syn_before = np.where((sa >= 0) & (at >= 0) & (fid[syn_before] == fid[sa0]), syn_before, -1)
    rs = np.where(syn_before >= 0, (ts[sa0] - ts[np.maximum(syn_before, 0)]) / 1e6, nan)
    hs_ack = np.where(sa >= 0, seg["acked_by"][sa0], -1)
    rc = np.where(hs_ack >= 0, (ts[np.maximum(hs_ack, 0)] - ts[sa0]) / 1e6, nan)
    # and the data -> pure ACK turnarounds that are the path (see round_trips)
    count, smallest, upper, late = _turn_stats(seg, nflows * 2)
    # the other pairs (a delayed ACK, an answer) matter only where a direction has no path
    # sample (long paths, excerpts, answers only): their neighbours are looked up nearby
    late = late[count[key(late)] == 0]
    late, late_ns = late_samples(seg, late, out["mss"].reshape(-1)[key(late)])
    out["rtt_handshake_ms"] = np.stack([rc, rs], axis=1)  # [client, server]
    out.update(round_trips(rs, rc, count, smallest, upper, *sample_stats(key(late), late_ns)))
    # per flow: segments resent, keepalives and window probes, first and last frame numbers
    out["retransmissions"] = np.bincount(fid[seg["retrans"]], minlength=nflows)
    out["keepalives"] = np.bincount(fid[seg["keepalive"]], minlength=nflows)
    frame = np.asarray(seg["frame"], dtype=np.int64)
    out["first_frame"] = np.minimum.reduceat(frame, starts) if nflows else frame[:0]
    out["last_frame"] = np.maximum.reduceat(frame, starts) if nflows else frame[:0]
    return out


def send_mss(mss_opt: np.ndarray, syn_ts: np.ndarray, maxpay: np.ndarray, at_max: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The send MSS of each direction and how it is known ([flow, dir] arrays), from per
    flow * 2 + dir: the MSS option of its first SYN (-1 without), whether that SYN carried
    timestamps, its largest payload and how many of its segments had the flow's largest
    payload (counted only where a SYN is missing). The MSS is what the peer announced, less
    12 bytes of timestamps. Without it, the largest segment of the flow if it was sent at
    least twice (a sender fills segments to the MSS again and again; one large segment may
    just be a message), else a guess: the usual Ethernet MSS, or the largest segment if
    larger."""
    both_ts = (syn_ts[0::2] & syn_ts[1::2]).repeat(2)
    peer_mss = mss_opt.reshape(-1, 2)[:, ::-1].reshape(-1)
    observed = np.maximum(maxpay[0::2], maxpay[1::2])
    repeated = ((at_max[0::2] >= 2) | (at_max[1::2] >= 2)) & (observed >= DEFAULT_MSS_FLOOR)
    observed, repeated = observed.repeat(2), repeated.repeat(2)
    # (not below 1: an announced MSS of 12 or less stays as it is)
    mss = np.where(peer_mss > 12, peer_mss - 12 * both_ts,
                   np.where(peer_mss > 0, peer_mss,
                            np.where(repeated, observed, np.maximum(observed, GUESSED_MSS))))
    how = np.select([peer_mss > 0, repeated], ["syn", "inferred"], "guessed").astype(object)
    return mss.reshape(-1, 2), how.reshape(-1, 2)


def round_trips(rs: np.ndarray, rc: np.ndarray, count: np.ndarray, smallest: np.ndarray,
                upper: np.ndarray, late_keys: np.ndarray, late_low: np.ndarray,
                late_high: np.ndarray) -> dict[str, np.ndarray]:
    """The round trips from the capture point and the vantage, per flow: from the
    handshake's (`rs` to the server and back, `rc` to the client, ms, NaN if unknown) and
    the data -> pure ACK turnarounds of each flow * 2 + dir that are the path (`_turn_stats`:
    how many, the smallest and the upper quartile, ns). Where a direction has none, the
    other turnarounds (`late_samples`: their keys, smallest and upper quartile) bound the
    path from above only: an answer includes the peer's application, an ACK may have been
    delayed. The smallest sample of each side counts: one inflated by ARP, a queue or the
    peer's think time cannot hide the path. `rtt_typical_ms` is the reaction window's upper
    end: how long the path usually takes at most, the upper quartile of the path's data
    samples (one inflated sample does not move it) or the handshake's if slower, or where
    only bounds are known the smallest of them. `rtt_bound` marks those sides (no handshake, no path
    sample): their round trip may be anything up to the bound."""
    path = np.full(len(count), np.nan)
    known = count > 0
    path[known] = smallest[known] / 1e6
    hs = np.stack([rs, rc], axis=1).reshape(-1)  # per flow * 2 + dir: its receiver's side
    bound = np.full(len(count), np.nan)
    bound[late_keys] = late_low / 1e6
    bound_only = np.isnan(path) & np.isnan(hs) & ~np.isnan(bound)
    turn = np.where(known, path, bound)
    typical = np.where(known, np.fmax(upper / 1e6, hs), np.where(np.isnan(hs), bound, hs))
    has_data = ~np.isnan(turn)
    from_hs = ~np.isnan(rc) & ~np.isnan(rs)
    from_data = has_data[1::2] & has_data[0::2]
    rc = np.fmin(rc, turn[1::2])
    rs = np.fmin(rs, turn[0::2])
    out = {"rtt_client_ms": rc, "rtt_server_ms": rs, "rtt_ms": rc + rs,
           "rtt_typical_ms": typical.reshape(-1, 2)[:, ::-1],  # [client, server]
           "rtt_bound": bound_only.reshape(-1, 2)[:, ::-1],
           "rtt_how": np.select([from_hs, from_data | ~np.isnan(rc + rs)],
                                ["handshake", "data/ACK pairs"], "none").astype(object)}
    total = rc + rs
    near_c = rc <= np.maximum(NEAR_MS, 0.1 * total)
    near_s = rs <= np.maximum(NEAR_MS, 0.1 * total)
    out["vantage"] = np.select([np.isnan(total), near_c, near_s], ["unknown", "client", "server"],
                               "middle").astype(object)
    out["both_near"] = near_c & near_s
    return out


def late_samples(seg: dict[str, np.ndarray], late: np.ndarray, mss: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The data rows `late` whose first ACK is not the path (`turn_samples`; `mss`: each
    one's send MSS), as upper bounds on it: where that ACK acknowledged two full segments or
    more (sent at once), it; else the peer's answer that acknowledges the row (the ACK
    itself if it carries data, else the peer's next data). The usable rows and their
    turnarounds (ns), in row order."""
    if not len(late):
        return late, np.zeros(0, dtype=np.int64)
    ts = seg["ts_ns"]
    by = seg["acked_by"][late]
    turn_ns = ts[by] - ts[late]
    answer = by.copy()  # an ACK that carries data is the answer (its neighbours unneeded)
    pure = np.flatnonzero(seg["payload"][by] == 0)
    two_full = np.zeros(len(late), dtype=bool)
    two_full[pure] = _acks_two_full(seg, by[pure], mss[pure])
    pure = pure[~two_full[pure]]
    answer[pure] = _next_in_direction(seg, by[pure], data=True)
    ok = ~two_full & (answer >= 0)
    ok[ok] = seg["ack"][answer[ok]] >= seg["end"][late[ok]]
    turn_ns[ok] = ts[answer[ok]] - ts[late[ok]]
    use = two_full | ok
    return late[use], turn_ns[use]


def _turn_stats(seg: dict[str, np.ndarray], ngroups: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The data -> pure ACK turnarounds that are the path (`turn_samples`), per direction
    group (flow * 2 + dir): how many, the smallest and the upper quartile (`sample_stats`),
    in nanoseconds; and the other rows with data and an ACK (later, or carried by data), in
    row order. Compiled (nagleprobe/_flows.c) when built, else `_turn_stats_numpy`."""
    if _compiled is None:
        return _turn_stats_numpy(seg, ngroups)
    n = len(seg["flow"])
    count, smallest, upper = (np.zeros(ngroups, dtype=np.int64) for _ in range(3))
    late = np.empty(n, dtype=np.int64)
    k = _compiled.turn_stats(
        np.ascontiguousarray(seg["flow"], np.int64), np.ascontiguousarray(seg["dir"], np.uint8),
        *(np.ascontiguousarray(seg[c], np.int64) for c in ("ts_ns", "payload", "acked_by")),
        int(UNDELAYED_MS * 1e6), TYPICAL_SAMPLES, count, smallest, upper, late)
    return count, smallest, upper, late[:k]


def _turn_stats_numpy(seg: dict[str, np.ndarray], ngroups: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`_turn_stats` with numpy alone (the reference for the compiled version)."""
    paired, _, turn_ns, undelayed = turn_samples(seg)
    key = seg["flow"][paired[undelayed]] * 2 + seg["dir"][paired[undelayed]]
    groups, low, high = sample_stats(key, turn_ns[undelayed])
    count = np.bincount(key, minlength=ngroups).astype(np.int64)
    smallest, upper = np.zeros(ngroups, dtype=np.int64), np.zeros(ngroups, dtype=np.int64)
    smallest[groups], upper[groups] = low, high
    return count, smallest, upper, paired[~undelayed]


def turn_samples(seg: dict[str, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every data -> ACK turnaround: the rows with payload whose first covering ACK
    (`acked_by`) came at or after them (in row order), those ACK rows, the turnarounds (ns),
    and which are the path itself: a pure ACK within UNDELAYED_MS (it cannot hold a delayed
    ACK, nor the peer's application, as an ACK carried by an answer does)."""
    ts = seg["ts_ns"]
    paired = np.flatnonzero((seg["acked_by"] >= 0) & (seg["payload"] > 0))
    by = seg["acked_by"][paired]
    turn_ns = ts[by] - ts[paired]
    keep = turn_ns >= 0
    paired, by, turn_ns = paired[keep], by[keep], turn_ns[keep]
    undelayed = (seg["payload"][by] == 0) & (turn_ns < UNDELAYED_MS * 1e6)
    return paired, by, turn_ns, undelayed


def vantage_basis(rtt_how: str, rc: float, rs: float, both_near: bool) -> str:
    """Why we think the capture was taken where `vantage` says (for the report)."""
    if rtt_how == "none":
        return "no handshake and no data/ACK pairs in both directions"
    text = (f"{rtt_how}: capture point to client and back {rc:.3f} ms, "
            f"to server and back {rs:.3f} ms")
    if both_near:
        text += " (both ends at the capture point: same host or loopback)"
    return text


def _format_addresses(ver: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Text of each address, formatting each distinct address once."""
    if not len(ver):
        return np.zeros(0, dtype=object)
    if not hi.any() and (ver == ver[0]).all():  # one version, one word (IPv4): quicker
        uniq_lo, inv = np.unique(lo, return_inverse=True)
        uniq = [(int(ver[0]), 0, int(x)) for x in uniq_lo.tolist()]
    else:
        keys = np.stack([ver.astype(np.uint64), hi, lo], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    text = np.array([format_address(int(v), int(h), int(l)) for v, h, l in uniq], dtype=object)
    return text[np.asarray(inv).reshape(-1)]


def grouped_median(values: np.ndarray, groups: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct `groups` (ascending); for each, the median of its `values` (the mean of
    the middle two for an even count, as pandas computes it) and their count; and for each
    value, the index of its group among them."""
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
    new = np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, bool)
    first = np.flatnonzero(new)
    count = np.diff(np.r_[first, len(g)])
    upper, lower = v[first + count // 2], v[first + (count - 1) // 2]
    inverse = np.empty(len(g), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return g[first], (upper + lower) / 2, count, inverse


TYPICAL_SAMPLES = 16  # the upper quartile is taken over a direction's first this many samples


def sample_stats(keys: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct `keys` (ascending) and, for each, the smallest of its samples `ns`
    (non-negative int64 nanoseconds, in time order within a key) and the upper quartile of
    its first TYPICAL_SAMPLES samples (the sample at rank floor(0.75 * (count - 1))): what
    the path usually takes, from the start of the connection, without sorting them all."""
    order = np.argsort(keys, kind="stable")  # rows come grouped by flow: nearly sorted
    k, v = keys[order], ns[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
    count = np.diff(np.r_[first, len(k)])
    smallest = np.minimum.reduceat(v, first) if len(v) else v
    # the first samples of each key, packed with their key in one word and sorted
    take = np.minimum(count, TYPICAL_SAMPLES)
    at = np.repeat(first, take) + (np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take))
    packed = np.sort((k[at].astype(np.int64) << 32) | np.minimum(v[at], (1 << 32) - 1))
    upper = (packed & ((1 << 32) - 1))[np.cumsum(take) - take + (3 * (take - 1)) // 4]
    return k[first], smallest, upper


NEARBY = 8  # rows looked at around a row for its neighbours in one direction


def _acks_two_full(seg: dict[str, np.ndarray], rows: np.ndarray, mss: np.ndarray) -> np.ndarray:
    """Whether each ACK row acknowledged two full segments or more at once (which a receiver
    must ACK at once): its ACK less the previous row's of its direction (looked for among
    the NEARBY rows before; if not found, not known to)."""
    prev = _next_in_direction(seg, rows, data=False, step=-1)
    ok = prev >= 0
    out = np.zeros(len(rows), dtype=bool)
    out[ok] = seg["ack"][rows[ok]] - seg["ack_max"][prev[ok]] >= 2 * mss[ok]
    return out


def _next_in_direction(seg: dict[str, np.ndarray], rows: np.ndarray, data: bool,
                       step: int = 1) -> np.ndarray:
    """For each row, the next (step -1: previous) row of its flow in its direction, with
    data if `data`, among the NEARBY rows that way; -1 if none."""
    n = len(seg["flow"])
    if not len(rows) or not n:
        return np.full(len(rows), -1, dtype=np.int64)
    near = rows[:, None] + step * np.arange(1, NEARBY + 1)  # (rows, NEARBY) candidates
    inside = (near >= 0) & (near < n)
    near = np.clip(near, 0, n - 1)
    hit = (inside & (seg["flow"][near] == seg["flow"][rows, None])
           & (seg["dir"][near] == seg["dir"][rows, None]))
    if data:
        hit &= seg["payload"][near] > 0
    first = hit.argmax(axis=1)
    pick = np.arange(len(rows))
    return np.where(hit[pick, first], near[pick, first], -1)
