"""Rebuild TCP connections from decoded packet columns.

Input is the columnar output of `decode` (one row per TCP packet, any order).
Output is a `Flows` object: every segment sorted by (flow, time) with its
direction, relative sequence/ack numbers and classification, plus per-flow
facts (endpoints, roles, MSS, window scale, RTT seen from the capture point,
vantage). Everything is vectorised: per-packet work is numpy, per-flow work
may be Python (flows are few compared with packets).

Which connection a packet belongs to is `nagleprobe.tuples`; which SYNs fit no connection
(left out), `nagleprobe.syns`; the round trips the segments give, `nagleprobe.roundtrips`.
Each compiled loop of `_flows.c` has its numpy twin next to the code that calls it, the
reference the tests hold it to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import Columns
from .copies import find_copies
from .decode import ACK, SYN, format_address
from .roundtrips import late_samples, round_trips, sample_stats, turn_stats
from .segments import segments
from .syns import foreign_syns
from .tuples import TupleEnds, endpoints, group_order, group_starts, lower, tuple_ids

try:
    from . import _flows as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

DEFAULT_MSS_FLOOR = 536  # RFC 1122 default: an MSS inferred from traffic is never below it
GUESSED_MSS = 1460  # without a SYN or a repeated largest segment: Ethernet's usual MSS
EPHEMERAL_FROM = 32768


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

    seg: Columns
    flow: Columns
    starts: np.ndarray  # first row of each flow in `seg`; ends = starts[1:] + [len]
    duplicates: int = 0  # copies of a packet (`copies.find_copies`) dropped, not in `seg`
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


class _Sorted:
    """Decoded columns seen through a row order: whole columns are gathered (once) only
    when asked for; `at` gathers just a few rows (flow starts, SYNs). Addresses and ports
    not held per row come from the tuples' endpoints (`ends`, with each row's tuple
    `tup` and direction column `from_low`)."""

    def __init__(self, cols: Columns, order: np.ndarray,
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


def build_flows(cols: Columns, tuples: np.ndarray | None = None,
                ends: TupleEnds | None = None, copies: np.ndarray | None = None) -> Flows:
    """Group decoded TCP packets into connections and classify every segment.

    `tuples`: each row's 4-tuple as an id 0..k-1, if the caller already knows them (the
    stream does); it saves finding them. Flows are numbered in the order of these ids (by
    default: by first appearance in time order), unless a 4-tuple is reused. `ends`: the
    endpoints of each of those tuples; `cols` then holds each row's direction (`from_low`)
    instead of its addresses and ports. `copies`: the rows that are copies of a packet seen
    twice (`copies.find_copies`), when the caller knows them (its rows grouped by tuple and in
    time order); else they are found here.
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
    if copies is None:
        copies = find_copies(cols, None if grouped else order, tup, from_low)[0]
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
        starts = group_starts(fid)
    nflows = len(starts)
    ends = np.r_[starts[1:], n].astype(np.int64) if nflows else starts

    client_is_low, handshake = _roles(c, fid, starts, from_low, syns)
    d = (from_low != client_is_low[fid]).astype(np.int8)  # 0: client -> server
    seg, maxpay = segments(c, fid, d, flags, nflows)
    flow = _flow_facts(c, seg, maxpay, starts, ends, handshake, syns)
    return Flows(seg=seg, flow=flow, starts=starts, duplicates=len(copies),
                 syn_jumps=foreign_frames)


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
def _flow_facts(c, seg, maxpay, starts, ends, handshake, syns: _Syns) -> Columns:
    """Per-flow endpoints, MSS, window scale, round trips and vantage (numpy arrays;
    `maxpay`: the largest payload of each flow * 2 + dir)."""
    nflows = len(starts)
    fid, d, ts = seg["flow"], seg["dir"], seg["ts_ns"]

    def key(rows: np.ndarray) -> np.ndarray:  # flow * 2 + dir of some rows
        return fid[rows] * 2 + d[rows]
    out: Columns = {}

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
    count, smallest, upper, late = turn_stats(seg, nflows * 2)
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
