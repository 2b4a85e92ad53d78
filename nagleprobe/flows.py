"""Rebuild TCP connections from decoded packet columns.

Input is the columnar output of `decode` (one row per TCP packet, any order).
Output is a `Flows` object: every segment sorted by (flow, time) with its
direction, relative sequence/ack numbers and classification, plus per-flow
facts (endpoints, roles, MSS, window scale, RTT seen from the capture point,
vantage). Everything is vectorised: per-packet work is numpy, per-flow work
may be Python (flows are few compared with packets).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
    flow: dict[str, list]
    starts: np.ndarray  # first row of each flow in `seg`; ends = starts[1:] + [len]

    @property
    def count(self) -> int:
        return len(self.starts)

    def rows(self, i: int) -> slice:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.seg["flow"])
        return slice(int(self.starts[i]), int(end))


def _as_signed32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32).view(np.int32).astype(np.int64)


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


def _tuple_ids(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Id of each packet's unordered 4-tuple, and whether it travels from the 'lower' endpoint."""
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
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    if not all(np.array_equal(col, col[first][inv]) for col in cols):  # hash collision: exact path
        rec = np.rec.fromarrays(cols)
        _, inv = np.unique(rec, return_inverse=True)
    return inv.astype(np.int64), a_low


def build_flows(c: dict[str, np.ndarray]) -> Flows:
    """Group decoded TCP packets into connections and classify every segment."""
    n = len(c["frame"])
    tup, from_low = _tuple_ids(c)
    order = np.lexsort((c["frame"], c["ts_ns"], tup))
    c = {k: v[order] for k, v in c.items()}
    tup, from_low = tup[order], from_low[order]
    flags = c["flags"].astype(np.int64)
    syn_only = (flags & (SYN | ACK)) == SYN

    # A new connection on the same 4-tuple starts at a SYN with a new ISN.
    seq = c["seq"].astype(np.int64)
    prev_syn = _ffill_index(syn_only, tup, inclusive=False)
    tuple_first = np.r_[True, tup[1:] != tup[:-1]] if n else np.zeros(0, bool)
    new_conn = tuple_first | (syn_only & ((prev_syn < 0) | (seq != seq[np.maximum(prev_syn, 0)])))
    conn = np.cumsum(new_conn) - 1 if n else np.zeros(0, np.int64)

    # Number flows by their first packet's time, keep rows grouped by flow.
    starts = np.flatnonzero(new_conn)
    first_order = np.lexsort((c["frame"][starts], c["ts_ns"][starts]))
    rank = np.empty(len(starts), dtype=np.int64)
    rank[first_order] = np.arange(len(starts))
    fid = rank[conn] if n else conn
    order2 = np.argsort(fid, kind="stable")
    c = {k: v[order2] for k, v in c.items()}
    fid, from_low, flags, syn_only = fid[order2], from_low[order2], flags[order2], syn_only[order2]
    starts = _group_starts(fid)
    nflows = len(starts)
    ends = np.r_[starts[1:], n].astype(np.int64)

    roles = _roles(c, fid, starts, ends, from_low, flags)
    client_is_low, roles_how = roles
    d = (from_low != client_is_low[fid]).astype(np.int8)  # 0: client -> server
    dgroup = fid * 2 + d

    seg = _sequence_space(c, fid, d, dgroup, flags, syn_only, nflows)
    seg["flow"] = fid
    seg["dir"] = d
    seg["frame"] = c["frame"]
    seg["ts_ns"] = c["ts_ns"]
    seg["payload"] = c["payload"].astype(np.int64)
    seg["flags"] = c["flags"]
    seg["window"] = c["window"]
    seg.update(_row_links(seg, nflows))

    flow = _flow_facts(c, seg, starts, ends, client_is_low, roles_how, syn_only, flags)
    return Flows(seg=seg, flow=flow, starts=starts)


def _roles(c, fid, starts, ends, from_low, flags):
    """Which endpoint is the client (per flow), and how we know."""
    nflows = len(starts)
    client_is_low = np.zeros(nflows, dtype=bool)
    how = ["guessed"] * nflows
    syn = (flags & (SYN | ACK)) == SYN
    synack = (flags & (SYN | ACK)) == (SYN | ACK)
    first_syn = _first_in_flow(syn, fid, nflows)
    first_synack = _first_in_flow(synack, fid, nflows)
    for i in range(nflows):
        if first_syn[i] >= 0:
            client_is_low[i] = from_low[first_syn[i]]
            how[i] = "handshake"
        elif first_synack[i] >= 0:
            client_is_low[i] = not from_low[first_synack[i]]
            how[i] = "handshake"
        else:
            r = starts[i]
            low_port = c["sport"][r] if from_low[r] else c["dport"][r]
            high_port = c["dport"][r] if from_low[r] else c["sport"][r]
            if (low_port < EPHEMERAL_FROM) != (high_port < EPHEMERAL_FROM):
                client_is_low[i] = low_port >= EPHEMERAL_FROM  # the ephemeral port is the client
            elif low_port != high_port:
                client_is_low[i] = low_port > high_port  # the higher port is the client
            else:
                client_is_low[i] = bool(from_low[r])  # first sender is the client
    return client_is_low, how


def _first_in_flow(mask: np.ndarray, fid: np.ndarray, nflows: int) -> np.ndarray:
    """Row of the first `mask` row of each flow, -1 if none."""
    out = np.full(nflows, -1, dtype=np.int64)
    rows = np.flatnonzero(mask)[::-1]
    out[fid[rows]] = rows  # later assignments (earlier rows) win
    return out


def _sequence_space(c, fid, d, dgroup, flags, syn_only, nflows) -> dict[str, np.ndarray]:
    """Relative, unwrapped seq/ack per direction, and segment classification."""
    n = len(fid)
    # Rows of one direction in time order: a stable sort of the flow-sorted rows by dgroup.
    by_dir = np.argsort(dgroup, kind="stable")
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


def _row_links(seg: dict[str, np.ndarray], nflows: int) -> dict[str, np.ndarray]:
    """Per-row pointers the detector follows, all within the row's flow (-1 if none).

    ack_max: highest ACK this direction had sent up to and including the row.
    prev_same / prev_other: the last row of the same / other direction before this row.
    prev_data / prev_other_data: the same for rows carrying payload.
    acked_by: for new data, the first row of the other direction acknowledging all of it.
    """
    n = len(seg["flow"])
    fid, d = seg["flow"], seg["dir"]
    dgroup = fid * 2 + d
    by_dir = np.argsort(dgroup, kind="stable")
    ack_max = np.empty(n, dtype=np.int64)
    ack_max[by_dir] = grouped_cummax(seg["ack"][by_dir], dgroup[by_dir], floor=-1)
    last = [_ffill_index(d == k, fid, inclusive=False) for k in (0, 1)]
    has_data = seg["payload"] > 0
    last_data = [_ffill_index((d == k) & has_data, fid, inclusive=False) for k in (0, 1)]

    # first row of the other direction whose running ACK covers the data's end:
    # search the (group, ack_max) keys, which increase along by_dir order
    acked_by = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(seg["new_data"])
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


def _flow_facts(c, seg, starts, ends, client_is_low, roles_how, syn_only, flags) -> dict[str, list]:
    """Per-flow endpoints, MSS, window scale, handshake RTTs and vantage."""
    nflows = len(starts)
    fid, d = seg["flow"], seg["dir"]
    ts = seg["ts_ns"]
    synack = (flags & (SYN | ACK)) == (SYN | ACK)
    first_syn = _first_in_flow(syn_only, fid, nflows)
    first_synack = _first_in_flow(synack, fid, nflows)
    payload = seg["payload"]

    # Largest payload per flow and direction, and options announced in SYNs.
    key = fid * 2 + d
    maxpay = np.zeros(nflows * 2, dtype=np.int64)
    np.maximum.at(maxpay, key, payload)
    syn_rows = np.flatnonzero((flags & SYN) != 0)
    mss_opt = np.full(nflows * 2, -1, dtype=np.int64)
    wscale = np.full(nflows * 2, -1, dtype=np.int64)
    syn_ts = np.zeros(nflows * 2, dtype=bool)
    for r in syn_rows[::-1]:  # first SYN of each direction wins
        k = key[r]
        mss_opt[k] = c["mss"][r]
        wscale[k] = c["wscale"][r]
        syn_ts[k] = bool(c["has_ts"][r])
    pkts = np.bincount(fid, minlength=nflows)
    # fastest data -> ACK turnaround per direction: the round trip from the capture point
    # to the receiver of that data (delayed ACKs only make it longer, so the minimum is best)
    paired = np.flatnonzero(seg["acked_by"] >= 0)
    turn = np.full(nflows * 2, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(turn, key[paired], ts[seg["acked_by"][paired]] - ts[paired])

    out: dict[str, list] = {k: [] for k in (
        "client", "server", "client_addr", "server_addr", "client_port", "server_port",
        "roles", "packets", "first_ns", "last_ns", "mss", "mss_how", "wscale",
        "rtt_client_ms", "rtt_server_ms", "rtt_ms", "rtt_how", "vantage", "vantage_how")}
    for i in range(nflows):
        r = int(starts[i])
        # the row's source is the client iff dir == 0
        if d[r] == 0:
            cli = (c["ipver"][r], c["src_hi"][r], c["src_lo"][r], c["sport"][r])
            srv = (c["ipver"][r], c["dst_hi"][r], c["dst_lo"][r], c["dport"][r])
        else:
            cli = (c["ipver"][r], c["dst_hi"][r], c["dst_lo"][r], c["dport"][r])
            srv = (c["ipver"][r], c["src_hi"][r], c["src_lo"][r], c["sport"][r])
        ca, sa = format_address(int(cli[0]), int(cli[1]), int(cli[2])), format_address(
            int(srv[0]), int(srv[1]), int(srv[2]))
        out["client_addr"].append(ca)
        out["server_addr"].append(sa)
        out["client_port"].append(int(cli[3]))
        out["server_port"].append(int(srv[3]))
        out["client"].append(_endpoint(ca, int(cli[3])))
        out["server"].append(_endpoint(sa, int(srv[3])))
        out["roles"].append(roles_how[i])
        out["packets"].append(int(pkts[i]))
        out["first_ns"].append(int(ts[r]))
        out["last_ns"].append(int(ts[int(ends[i]) - 1]))

        # send MSS per direction: what the peer announced, less 12 bytes of timestamps
        mss, how = [], []
        both_ts = syn_ts[2 * i] and syn_ts[2 * i + 1]
        observed = int(max(maxpay[2 * i], maxpay[2 * i + 1]))
        for k in (0, 1):
            peer_mss = mss_opt[2 * i + (1 - k)]
            if peer_mss > 0:
                eff = int(peer_mss) - (12 if both_ts else 0)
                mss.append(eff)
                how.append("syn")
            else:
                mss.append(max(observed, DEFAULT_MSS_FLOOR))
                how.append("inferred")
        out["mss"].append(mss)
        out["mss_how"].append(how)
        out["wscale"].append([int(wscale[2 * i]), int(wscale[2 * i + 1])]
                             if wscale[2 * i] >= 0 and wscale[2 * i + 1] >= 0
                             else ([0, 0] if first_syn[i] >= 0 and first_synack[i] >= 0 else [-1, -1]))

        rc, rs, rhow = _handshake_rtt(seg, first_syn[i], first_synack[i], ends[i])
        if rc is None or rs is None:
            nomax = np.iinfo(np.int64).max
            pair_s = turn[2 * i] / 1e6 if turn[2 * i] != nomax else None
            pair_c = turn[2 * i + 1] / 1e6 if turn[2 * i + 1] != nomax else None
            rc = rc if rc is not None else pair_c
            rs = rs if rs is not None else pair_s
            rhow = "data/ACK pairs" if rc is not None or rs is not None else None
        out["rtt_client_ms"].append(rc)
        out["rtt_server_ms"].append(rs)
        out["rtt_how"].append(rhow)
        out["rtt_ms"].append(rc + rs if rc is not None and rs is not None else None)
        v, vhow = _vantage(rc, rs, rhow)
        out["vantage"].append(v)
        out["vantage_how"].append(vhow)
    return out


def _vantage(rc: float | None, rs: float | None, how: str | None) -> tuple[str, str]:
    """Where the capture was taken, from the round trips to each side, and why we think so."""
    if rc is None or rs is None:
        return "unknown", "no handshake and no data/ACK pairs in both directions"
    total = rc + rs
    near_c = rc <= max(NEAR_MS, 0.1 * total)
    near_s = rs <= max(NEAR_MS, 0.1 * total)
    basis = f"{how}: capture point to client and back {rc:.3f} ms, to server and back {rs:.3f} ms"
    if near_c and near_s:
        return "client", basis + " (both ends at the capture point: same host or loopback)"
    if near_c:
        return "client", basis
    if near_s:
        return "server", basis
    return "middle", basis


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _handshake_rtt(seg, syn_row: int, synack_row: int, end: int):
    """Round trips capture point -> client -> capture point, and -> server -> back, in ms."""
    if syn_row < 0 or synack_row < 0 or synack_row < syn_row:
        return None, None, None
    ts = seg["ts_ns"]
    # the SYN/ACK answers the last SYN transmission before it
    last_syn = syn_row
    flow = seg["flow"][syn_row]
    r = syn_row + 1
    while r < synack_row:
        if seg["dir"][r] == 0 and (seg["flags"][r] & (SYN | ACK)) == SYN and seg["flow"][r] == flow:
            last_syn = r
        r += 1
    rtt_server = (ts[synack_row] - ts[last_syn]) / 1e6
    want = seg["end"][synack_row]
    r = synack_row + 1
    while r < end:
        if seg["dir"][r] == 0 and seg["ack"][r] >= want:
            return (ts[r] - ts[synack_row]) / 1e6, rtt_server, "handshake"
        r += 1
    return None, rtt_server, None
