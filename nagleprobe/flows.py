"""Rebuild TCP connections from decoded packet columns.

Input is the columnar output of `decode` (one row per TCP packet, any order).
Output is a `Flows` object: every segment sorted by (flow, time) with its
direction, relative sequence/ack numbers and classification, plus per-flow
facts (endpoints, roles, MSS, window scale, RTT seen from the capture point,
vantage). Everything is vectorised: per-packet work is numpy, per-flow work
may be Python (flows are few compared with packets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .decode import format_address

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
DEFAULT_MSS_FLOOR = 536  # RFC 1122 default: an MSS inferred from traffic is never below it
NEAR_MS = 0.1  # a round trip this short (ms) means the capture point sits at that endpoint
EPHEMERAL_FROM = 32768


@dataclass
class Flows:
    """Segments of every flow, sorted by (flow, time), and per-flow facts.

    `seg` columns (numpy arrays, one row per TCP segment):
      flow, dir (0 client->server, 1 server->client), frame, ts_ns, seq, ack
      (relative, unwrapped, int64; ack -1 without the ACK flag), payload,
      flags, window (raw), end (seq + payload + SYN + FIN), new_data (carries
      bytes never sent before), retrans, keepalive.
    `flow` columns (numpy arrays or lists, one entry per flow): see `build_flows`.
    """

    seg: dict[str, np.ndarray]
    flow: dict[str, np.ndarray]
    starts: np.ndarray  # first row of each flow in `seg`; ends = starts[1:] + [len]

    @property
    def count(self) -> int:
        return len(self.starts)

    def rows(self, i: int) -> slice:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.seg["flow"])
        return slice(int(self.starts[i]), int(end))


def _as_signed32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32).view(np.int32).astype(np.int64)


def _direction_order(fid: np.ndarray, d: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Rows reordered so each flow's client->server rows come first, then its server->client
    rows, both in time order: argsort(fid * 2 + d, kind="stable") in O(n) for flow-sorted rows."""
    n = len(fid)
    idx = np.arange(n)
    is1 = (d == 1).astype(np.int64)
    ones_before = np.cumsum(is1) - is1  # direction-1 rows before each row
    base1 = ones_before[starts][fid]  # ...before the row's flow
    rank1 = ones_before - base1
    rank0 = (idx - starts[fid]) - rank1
    size = np.diff(np.r_[starts, n])
    n0 = size - (np.r_[ones_before[starts[1:]], ones_before[-1] + is1[-1]] - ones_before[starts]
                 if n else 0)
    dest = starts[fid] + np.where(d == 0, rank0, n0[fid] + rank1)
    out = np.empty(n, dtype=np.int64)
    out[dest] = idx
    return out


def _group_starts(group: np.ndarray) -> np.ndarray:
    """Row index where each run of equal values in a sorted `group` begins."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, group[1:] != group[:-1]])


def _ffill_index(mask: np.ndarray, group: np.ndarray, inclusive: bool) -> np.ndarray:
    """For each row, index of the latest row at or before it (or strictly before) where `mask`
    holds within the same group; -1 if none. Rows must be sorted by group."""
    n = len(mask)
    idx = np.where(mask, np.arange(n), -1)
    last = np.maximum.accumulate(idx) if n else idx
    if not inclusive:
        last = np.r_[-1, last[:-1]] if n else last
    ok = last >= 0
    ok[ok] = group[last[ok]] == group[ok]
    return np.where(ok, last, -1)


def grouped_cummax(values: np.ndarray, group: np.ndarray, exclusive: bool = False,
                   floor: int = -(1 << 40)) -> np.ndarray:
    """Running maximum of int64 `values` within each group of sorted `group` ids.

    With `exclusive`, each row gets the maximum of the rows before it (`floor` if none).
    """
    n = len(values)
    if n == 0:
        return values.astype(np.int64)
    v = np.maximum(values.astype(np.int64), floor) - floor  # >= 0
    span = int(v.max()) + 1
    g = group.astype(np.int64) - int(group.min())
    if span * (int(g.max()) + 1) < (1 << 62):
        acc = np.maximum.accumulate(g * span + v) - g * span
    else:  # offsets would overflow: run the accumulation group by group
        acc = np.empty(n, dtype=np.int64)
        starts = _group_starts(group)
        bounds = np.r_[starts, n]
        for a, b in zip(bounds[:-1], bounds[1:]):
            acc[a:b] = np.maximum.accumulate(v[a:b])
    acc = acc + floor
    if exclusive:
        prev = np.r_[floor, acc[:-1]]
        first = np.r_[True, group[1:] != group[:-1]]
        prev[first] = floor
        return prev
    return acc


class _Sorted:
    """Decoded columns seen through a row order: whole columns are gathered (once) only
    when asked for; `at` gathers just a few rows (flow starts, SYNs)."""

    def __init__(self, cols: dict[str, np.ndarray], order: np.ndarray) -> None:
        self.cols, self.order, self.cache = cols, order, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.cache:
            self.cache[name] = self.cols[name][self.order]
        return self.cache[name]

    def at(self, name: str, rows: np.ndarray) -> np.ndarray:
        return self.cols[name][self.order[rows]]


def _tuple_ids(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Id of each packet's unordered 4-tuple, numbered by first appearance in record order,
    and whether the packet travels from the 'lower' endpoint."""
    a = (c["src_hi"], c["src_lo"], c["sport"].astype(np.uint64))
    b = (c["dst_hi"], c["dst_lo"], c["dport"].astype(np.uint64))
    # a < b lexicographically on (hi, lo, port)
    a_low = (a[0] < b[0]) | ((a[0] == b[0]) & ((a[1] < b[1]) | ((a[1] == b[1]) & (a[2] <= b[2]))))
    lo = [np.where(a_low, x, y) for x, y in zip(a, b)]
    hi = [np.where(a_low, y, x) for x, y in zip(a, b)]
    cols = [lo[0], lo[1], hi[0], hi[1], (lo[2] << np.uint64(16)) | hi[2]]
    # 64-bit mix of the five words; collisions are checked below
    h = np.zeros(len(a_low), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in cols:
            h = (h ^ col) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
    ids = pd.factorize(h)[0].astype(np.int64)  # numbered by first appearance
    first = np.flatnonzero(ids > np.maximum.accumulate(np.r_[-1, ids[:-1]])) if len(ids) else ids
    if not all(np.array_equal(col, col[first][ids]) for col in cols):  # hash collision: exact path
        ids = pd.MultiIndex.from_arrays(cols).factorize()[0].astype(np.int64)
    return ids, a_low


def build_flows(cols: dict[str, np.ndarray]) -> Flows:
    """Group decoded TCP packets into connections and classify every segment."""
    n = len(cols["frame"])
    ts = cols["ts_ns"]
    # time order (records need not be in time order: -i any, merged files); ties keep file order
    if n and not np.all(ts[1:] >= ts[:-1]):
        t_order = np.argsort(ts, kind="stable")
        cols = {k: v[t_order] for k, v in cols.items()}
    tup, from_low = _tuple_ids(cols)
    order = np.argsort(tup, kind="stable")  # rows grouped by 4-tuple, in time order within
    c = _Sorted(cols, order)
    tup, from_low = tup[order], from_low[order]
    flags = c["flags"].astype(np.int64)
    syn_only = (flags & (SYN | ACK)) == SYN

    # A new connection on the same 4-tuple starts at a SYN with a new ISN.
    seq = c["seq"].astype(np.int64)
    prev_syn = _ffill_index(syn_only, tup, inclusive=False)
    tuple_first = np.r_[True, tup[1:] != tup[:-1]] if n else np.zeros(0, bool)
    new_conn = tuple_first | (syn_only & ((prev_syn < 0) | (seq != seq[np.maximum(prev_syn, 0)])))
    fid = np.cumsum(new_conn) - 1 if n else np.zeros(0, np.int64)
    starts = np.flatnonzero(new_conn)
    if len(starts) > (tup[-1] + 1 if n else 0):
        # a reused 4-tuple: renumber its later connections by their first packet's time
        first_order = np.lexsort((c.at("frame", starts), c.at("ts_ns", starts)))
        rank = np.empty(len(starts), dtype=np.int64)
        rank[first_order] = np.arange(len(starts))
        regroup = np.argsort(rank[fid], kind="stable")
        order, fid = order[regroup], rank[fid][regroup]
        from_low, flags, syn_only = from_low[regroup], flags[regroup], syn_only[regroup]
        c = _Sorted(cols, order)
        starts = _group_starts(fid)
    nflows = len(starts)
    ends = np.r_[starts[1:], n].astype(np.int64) if nflows else starts

    client_is_low, handshake = _roles(c, fid, starts, from_low, flags)
    d = (from_low != client_is_low[fid]).astype(np.int8)  # 0: client -> server
    dgroup = fid * 2 + d
    by_dir = _direction_order(fid, d, starts)  # each direction's rows in time order

    seg = _sequence_space(c, by_dir, dgroup, flags, nflows)
    seg["flow"] = fid
    seg["dir"] = d
    seg["frame"] = c["frame"]
    seg["ts_ns"] = c["ts_ns"]
    seg["payload"] = c["payload"].astype(np.int64)
    seg["flags"] = c["flags"]
    seg["window"] = c["window"]
    seg.update(_row_links(seg, by_dir))

    flow = _flow_facts(c, seg, starts, ends, handshake, syn_only, flags)
    return Flows(seg=seg, flow=flow, starts=starts)


def _roles(c, fid, starts, from_low, flags):
    """Which endpoint is the client (per flow), and whether the handshake says so."""
    nflows = len(starts)
    first_syn = _first_in_flow((flags & (SYN | ACK)) == SYN, fid, nflows)
    first_synack = _first_in_flow((flags & (SYN | ACK)) == (SYN | ACK), fid, nflows)
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


def _first_in_flow(mask: np.ndarray, fid: np.ndarray, nflows: int) -> np.ndarray:
    """Row of the first `mask` row of each flow, -1 if none."""
    out = np.full(nflows, -1, dtype=np.int64)
    rows = np.flatnonzero(mask)[::-1]
    out[fid[rows]] = rows  # later assignments (earlier rows) win
    return out


def _sequence_space(c, by_dir, dgroup, flags, nflows) -> dict[str, np.ndarray]:
    """Relative, unwrapped seq/ack per direction, and segment classification."""
    n = len(dgroup)
    g = dgroup[by_dir]
    raw_seq = c["seq"][by_dir].astype(np.int64)
    gstart = np.r_[True, g[1:] != g[:-1]] if n else np.zeros(0, bool)
    step = np.r_[0, _as_signed32(np.diff(raw_seq))] if n else raw_seq
    step[gstart] = 0
    seq_d = np.cumsum(step)
    # relative to the direction's ISN: 0 at its SYN, or 1 at its first seen segment
    base = seq_d[gstart]
    is_syn_d = ((flags[by_dir] & SYN) != 0)
    anchor = np.where(is_syn_d[gstart], 0, 1)
    gi = np.cumsum(gstart) - 1
    seq_rel_d = seq_d - base[gi] + anchor[gi]
    seq_rel = np.empty(n, dtype=np.int64)
    seq_rel[by_dir] = seq_rel_d

    # ISN of each direction in raw numbers: raw seq of its first row minus its anchor
    isn = np.zeros(nflows * 2, dtype=np.int64)
    has_dir = np.zeros(nflows * 2, dtype=bool)
    isn[g[gstart]] = (raw_seq[gstart] - anchor) % (1 << 32)
    has_dir[g[gstart]] = True

    # ACK numbers relative to the peer's ISN, unwrapped along the rows that carry ACK
    ackf = (flags & ACK) != 0
    ack_rel = np.full(n, -1, dtype=np.int64)
    rows = by_dir[ackf[by_dir]]
    if len(rows):
        ga = dgroup[rows]
        raw_ack = c["ack"][rows].astype(np.int64)
        peer = ga ^ 1
        astart = np.r_[True, ga[1:] != ga[:-1]]
        first_raw = raw_ack[astart]
        peer_first = peer[astart]
        base_a = np.where(has_dir[peer_first], isn[peer_first], (first_raw - 1) % (1 << 32))
        first_rel = _as_signed32(first_raw - base_a)
        stp = np.r_[0, _as_signed32(np.diff(raw_ack))]
        stp[astart] = 0
        ai = np.cumsum(astart) - 1
        ack_rel[rows] = np.cumsum(stp) - np.cumsum(stp)[astart][ai] + first_rel[ai]

    payload = c["payload"].astype(np.int64)
    end = seq_rel + payload + ((flags & SYN) != 0) + ((flags & FIN) != 0)
    # highest sequence end sent earlier in the same direction (rows are flow/time sorted,
    # and direction is part of the group id)
    sent_before = np.empty(n, dtype=np.int64)
    sent_before[by_dir] = grouped_cummax(end[by_dir], g, exclusive=True, floor=0)
    new_data = (payload > 0) & (seq_rel >= sent_before)
    keepalive = (payload <= 1) & (seq_rel == sent_before - 1) & ((flags & (SYN | FIN | RST)) == 0)
    retrans = (payload > 0) & (seq_rel < sent_before) & ~keepalive
    return {"seq": seq_rel, "ack": ack_rel, "end": end, "sent_before": sent_before,
            "new_data": new_data, "retrans": retrans, "keepalive": keepalive}


def _row_links(seg: dict[str, np.ndarray], by_dir: np.ndarray) -> dict[str, np.ndarray]:
    """Per-row pointers the detector follows, all within the row's flow (-1 if none).

    ack_max: highest ACK this direction had sent up to and including the row.
    prev_same / prev_other: the last row of the same / other direction before this row.
    prev_data / prev_other_data: the same for rows carrying payload.
    acked_by: for new sequence space, the first row of the other direction acknowledging all of it.
    """
    n = len(seg["flow"])
    fid, d = seg["flow"], seg["dir"]
    dgroup = fid * 2 + d
    ack_max = np.empty(n, dtype=np.int64)
    ack_max[by_dir] = grouped_cummax(seg["ack"][by_dir], dgroup[by_dir], floor=-1)
    last = [_ffill_index(d == k, fid, inclusive=False) for k in (0, 1)]
    has_data = seg["payload"] > 0
    last_data = [_ffill_index((d == k) & has_data, fid, inclusive=False) for k in (0, 1)]

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
    mine, other = (d == 0), (d != 0)
    return {"ack_max": ack_max, "acked_by": acked_by,
            "prev_same": np.where(mine, last[0], last[1]),
            "prev_other": np.where(other, last[0], last[1]),
            "prev_data": np.where(mine, last_data[0], last_data[1]),
            "prev_other_data": np.where(other, last_data[0], last_data[1])}


def _flow_facts(c, seg, starts, ends, handshake, syn_only, flags) -> dict[str, np.ndarray]:
    """Per-flow endpoints, MSS, window scale, round trips and vantage (numpy arrays)."""
    nflows = len(starts)
    fid, d, ts = seg["flow"], seg["dir"], seg["ts_ns"]
    key = fid * 2 + d
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
    out["packets"] = np.bincount(fid, minlength=nflows).astype(np.int64)
    out["first_ns"] = ts[starts]
    out["last_ns"] = ts[ends - 1]

    # options announced in each direction's first SYN; largest payload per direction
    syn_rows = np.flatnonzero((flags & SYN) != 0)
    first_syn_of = np.full(nflows * 2, -1, dtype=np.int64)
    first_syn_of[key[syn_rows[::-1]]] = syn_rows[::-1]
    has = first_syn_of >= 0
    fs = np.maximum(first_syn_of, 0)
    mss_opt = np.where(has, c.at("mss", fs), -1).astype(np.int64)
    wscale = np.where(has, c.at("wscale", fs), -1).astype(np.int64)
    syn_ts = has & (c.at("has_ts", fs) != 0)
    maxpay = np.zeros(nflows * 2, dtype=np.int64)
    np.maximum.at(maxpay, key, seg["payload"])

    # send MSS of each direction: what the peer announced, less 12 bytes of timestamps;
    # without it, the largest segment seen in the flow (never below 536)
    both_ts = (syn_ts[0::2] & syn_ts[1::2]).repeat(2)
    peer_mss = mss_opt.reshape(-1, 2)[:, ::-1].reshape(-1)
    observed = np.maximum(maxpay[0::2], maxpay[1::2]).repeat(2)
    mss = np.where(peer_mss > 0, peer_mss - 12 * both_ts, np.maximum(observed, DEFAULT_MSS_FLOOR))
    out["mss"] = mss.reshape(-1, 2)
    out["mss_how"] = np.where(peer_mss > 0, "syn", "inferred").astype(object).reshape(-1, 2)
    ws = wscale.reshape(-1, 2)
    both_syn = (first_syn_of.reshape(-1, 2) >= 0).all(axis=1)
    out["wscale"] = np.where((ws >= 0).all(axis=1)[:, None], ws,
                             np.where(both_syn[:, None], 0, -1))

    # round trips from the capture point: SYN -> SYN/ACK is to the server and back,
    # SYN/ACK -> the client's ACK of it is to the client and back
    nan = np.full(nflows, np.nan)
    sa = _first_in_flow((flags & (SYN | ACK)) == (SYN | ACK), fid, nflows)
    last_syn = _ffill_index(syn_only, fid, inclusive=True)
    sa0 = np.maximum(sa, 0)
    syn_before = np.where(sa >= 0, last_syn[sa0], -1)
    rs = np.where(syn_before >= 0, (ts[sa0] - ts[np.maximum(syn_before, 0)]) / 1e6, nan)
    hs_ack = np.where(sa >= 0, seg["acked_by"][sa0], -1)
    rc = np.where(hs_ack >= 0, (ts[np.maximum(hs_ack, 0)] - ts[sa0]) / 1e6, nan)
    # otherwise the fastest data -> ACK turnaround per direction (delayed ACKs only add)
    paired = np.flatnonzero((seg["acked_by"] >= 0) & (seg["payload"] > 0))
    turn = np.full(nflows * 2, np.inf)
    np.minimum.at(turn, key[paired], (ts[seg["acked_by"][paired]] - ts[paired]) / 1e6)
    turn[np.isinf(turn)] = np.nan
    from_hs = ~np.isnan(rc) & ~np.isnan(rs)
    rc = np.where(from_hs, rc, turn[1::2])
    rs = np.where(from_hs, rs, turn[0::2])
    out["rtt_client_ms"], out["rtt_server_ms"], out["rtt_ms"] = rc, rs, rc + rs
    out["rtt_how"] = np.where(from_hs, "handshake",
                              np.where(~np.isnan(rc + rs), "data/ACK pairs", "none")).astype(object)

    total = rc + rs
    near_c = rc <= np.maximum(NEAR_MS, 0.1 * total)
    near_s = rs <= np.maximum(NEAR_MS, 0.1 * total)
    out["vantage"] = np.select([np.isnan(total), near_c, near_s], ["unknown", "client", "server"],
                               "middle").astype(object)
    out["both_near"] = near_c & near_s
    return out


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
    keys = np.stack([ver.astype(np.uint64), hi, lo], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    text = np.array([format_address(int(v), int(h), int(l)) for v, h, l in uniq], dtype=object)
    return text[inv.reshape(-1)]
