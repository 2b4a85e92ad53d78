"""Relays and proxy chains: which flow brought the data that a stalled sender split.

A proxy, sidecar or pooler receives a message on one connection and sends it on another.
When the sender held by Nagle on a flow F is such a relay, the message came in on an
upstream flow U at the same host (the same address, or both at the capture point) just
before F's small segment S1 left, in the other role
(received as a server, sent as a client, or the reverse). The bytes tell where the message
was split: it arrived whole (one segment of S1 + S2 bytes) and left split, so the relay must
change; or it arrived already split (a segment of S1's bytes), so look upstream. Only exact
byte counts, within RELAY_WINDOW_MS, repeated on at least half of F's stalls, link two flows:
a busy host receives unrelated data all the time. The bytes must also go through: data
received by the very endpoint that F sends to was delivered, not forwarded; and where only the
capture point makes one host of two addresses, data sent from the address F leaves from went
out and came back. (Parallel clients writing the same pieces in step, to one server or to
several on one other host, match on sizes and times; these rules keep them apart.)

`arrivals` keeps the few columns this needs of every new data segment of a batch; `link`
joins them with the stalls once all flows are known.
"""

from __future__ import annotations

import numpy as np

from .columns import Columns
from .flows import Flows
from .jsonrows import factorize
from .roundtrips import NEAR_MS
from .weirds import Weird

RELAY_WINDOW_MS = 1.0  # a relay forwards what it read within this (loopback: microseconds)
LOOK_BACK = 8  # arrivals at the host examined before each S1, latest first
MAX_ARRIVALS = 2_000_000  # data segments kept for linking (16 bytes each); beyond, no linking
RELAY_COLUMNS = ("relay_upstream_flow", "relay_in", "relay_out", "relay_split",
                 "relay_stalls_matched")


def arrivals(f: Flows) -> Columns:
    """Every new data segment of the flows: flow, direction, time, payload."""
    s = f.seg
    r = np.flatnonzero(s["new_data"])
    return {"flow": s["flow"][r], "dir": s["dir"][r].astype(np.int8),
            "ts_ns": s["ts_ns"][r], "payload": s["payload"][r].astype(np.int32)}


def relay_warning() -> Weird:
    """The capture warning when there were too many data segments to link relays."""
    return Weird("relays-not-linked", f"relays were not linked: more than {MAX_ARRIVALS} data "
                 "segments, the most kept for it (analyse an excerpt of the capture to link "
                 "them)")


def no_relays(nflows: int) -> Columns:
    """The relay columns of flows that feed no stall (upstream flow -1)."""
    none = np.full(nflows, None, dtype=object)
    return {"relay_upstream_flow": np.full(nflows, -1, dtype=np.int64), "relay_in": none,
            "relay_out": none.copy(), "relay_split": none.copy(),
            "relay_stalls_matched": np.zeros(nflows, dtype=np.int64)}


def link(flows: Columns, stalls: Columns,
         arr: Columns | None) -> Columns:
    """The relay columns of the flows table (`report_columns` shapes: flows with client and
    server "ip:port", stalls with flow, sender, small_time (epoch ns), small_bytes,
    held_bytes); `arr` the arrivals of all flows, with the same flow ids."""
    nflows = len(flows["client"])
    out = no_relays(nflows)
    if arr is None or not len(stalls["flow"]) or not len(arr["flow"]):
        return out
    ends = np.stack([flows["client"], flows["server"]], axis=1).astype(object)  # [flow, side]
    codes, distinct = factorize(ends.reshape(-1))  # each endpoint's address split off once
    addr = np.array([e.rsplit(":", 1)[0] for e in distinct], dtype=object)
    addr_of = np.unique(addr, return_inverse=True)[1].reshape(-1)[codes].reshape(nflows, 2)
    # endpoints at the capture point are on one host, whatever their address (a proxy with
    # one address towards its clients and another towards its servers, captured on it)
    near = np.stack([flows["rtt_client_ms"], flows["rtt_server_ms"]], axis=1) <= NEAR_MS
    at_capture = np.where(near, 0, np.arange(1, 2 * nflows + 1).reshape(nflows, 2))

    s_flow = stalls["flow"]
    s1, whole = stalls["small_bytes"], stalls["small_bytes"] + stalls["held_bytes"]
    arr = _near_a_stall(arr, np.r_[s1, whole], stalls["small_time"])
    if not len(arr["flow"]):  # no data arrived where it could have fed a stall
        return out
    recv_side = 1 - arr["dir"].astype(np.int64)  # data of dir d is received by side 1 - d
    sent_side = (stalls["sender"] == "server").astype(np.int64)
    match = np.full(len(s_flow), -1, dtype=np.int64)  # the upstream arrival of each stall
    # the capture point as one host adds something only if its endpoints have several addresses
    here = addr_of[near]
    several = bool(len(here)) and bool((here != here[0]).any())
    # What refutes forwarding, as pairs that must differ (arrival's, stall's): the endpoint
    # that received the data is not the one the stall's flow sends to (it was delivered
    # there); and where the capture point alone makes one host of two addresses, the data
    # was not sent from the address the stall's flow leaves from (it went out and came back).
    end_of = codes.reshape(nflows, 2)
    a_flow = arr["flow"]
    a_tags = np.stack([end_of[a_flow, recv_side], np.full(len(a_flow), -1)], axis=1)
    s_tags = np.stack([end_of[s_flow, 1 - sent_side], np.full(len(s_flow), -2)], axis=1)
    for host_of in (addr_of, at_capture) if several else (addr_of,):
        if host_of is at_capture:
            a_tags[:, 1], s_tags[:, 1] = addr_of[a_flow, 1 - recv_side], addr_of[s_flow, sent_side]
        _match(host_of[a_flow, recv_side], arr, recv_side, a_tags, host_of[s_flow, sent_side],
               stalls["small_time"], s_flow, sent_side, s_tags, s1, whole, match)
    # per stalled flow, the upstream flow most of its stalls followed
    got = np.flatnonzero(match >= 0)
    pair = s_flow[got] * nflows + arr["flow"][match[got]]
    pairs, first, n = np.unique(pair, return_index=True, return_counts=True)
    whole_n = np.bincount(np.searchsorted(pairs, pair),
                          weights=arr["payload"][match[got]] == whole[got], minlength=len(pairs))
    fid, up = pairs // nflows, pairs % nflows
    best = np.lexsort((-n, fid))  # each flow's most followed upstream flow first
    best = best[np.r_[True, fid[best][1:] != fid[best][:-1]]] if len(best) else best
    best = best[2 * n[best] >= np.bincount(s_flow, minlength=nflows)[fid[best]]]
    row = got[first[best]]  # one matched stall of each link
    f, u = fid[best], up[best]
    out["relay_upstream_flow"][f] = u
    out["relay_in"][f] = ends[u, recv_side[match[row]]]
    out["relay_out"][f] = ends[f, sent_side[row]]
    out["relay_split"][f] = np.where(2 * whole_n[best] >= n[best], "at-relay", "upstream")
    out["relay_stalls_matched"][f] = n[best]
    return out


def _near_a_stall(arr: Columns, sizes: np.ndarray, s1_ns: np.ndarray
                  ) -> Columns:
    """The arrivals that can have fed some stall: of a size some stall's S1 or S1 + S2 has,
    and within the window before some stall's S1 (whatever the host: cheap, and most
    arrivals of a busy capture go)."""
    sizes = np.sort(sizes)  # (np.isin would import numpy.ma for this)
    pay = arr["payload"]
    keep = sizes[np.minimum(np.searchsorted(sizes, pay), len(sizes) - 1)] == pay
    t = arr["ts_ns"][keep]
    s1_sorted = np.sort(s1_ns)
    nxt = s1_sorted[np.minimum(np.searchsorted(s1_sorted, t), len(s1_sorted) - 1)]
    keep[keep] = (nxt >= t) & (nxt - t <= RELAY_WINDOW_MS * 1e6)
    return {k: v[keep] for k, v in arr.items()}


def _match(a_host: np.ndarray, arr: Columns, a_side: np.ndarray,
           a_tags: np.ndarray, s_host: np.ndarray, s_ts: np.ndarray, s_flow: np.ndarray,
           sent_side: np.ndarray, s_tags: np.ndarray, s1: np.ndarray, whole: np.ndarray,
           match: np.ndarray) -> None:
    """For each stall not yet matched, the latest arrival at its sender's host (as `a_host`
    and `s_host` name hosts) that can have fed it: within the window before S1, on another
    flow, received in the other role, with no column of `a_tags` equal to the stall's
    `s_tags` (what refutes forwarding), of S1's or S1 + S2's bytes. Sets `match` (arrival
    row, -1 if none)."""
    mine = np.flatnonzero(match < 0)
    if not len(mine):
        return
    h, t = s_host[mine], s_ts[mine]
    t0 = min(int(arr["ts_ns"].min()), int(t.min()))
    span = max(int(arr["ts_ns"].max()), int(t.max())) - t0 + 1
    hosts = int(max(a_host.max(), h.max())) + 1
    if hosts * span < 1 << 62:  # (host, time) in one int64 key: a sort, then a search
        a_key = a_host.astype(np.int64) * span + (arr["ts_ns"] - t0)
        order = np.argsort(a_key, kind="stable")
        a_key = a_key[order]
        # the first arrival after S1 at the host (an arrival at S1's very time before it)
        pos = np.searchsorted(a_key, h.astype(np.int64) * span + (t - t0), side="right")
    else:  # arrivals and stalls merged by (host, time), counting the arrivals before each
        order = np.lexsort((arr["ts_ns"], a_host))
        merged = np.lexsort((np.r_[np.zeros(len(order), np.int8), np.ones(len(t), np.int8)],
                             np.r_[arr["ts_ns"][order], t], np.r_[a_host[order], h]))
        is_stall = merged >= len(order)
        pos = np.empty(len(mine), dtype=np.int64)
        pos[merged[is_stall] - len(order)] = np.cumsum(~is_stall)[is_stall]
    a_host, a_ts, a_flow = a_host[order], arr["ts_ns"][order], arr["flow"][order]
    a_side, a_pay, a_tags = a_side[order], arr["payload"][order], a_tags[order]
    lo = np.searchsorted(a_host, h)  # the host's first arrival
    for back in range(1, LOOK_BACK + 1):
        j = pos - back
        jj = np.maximum(j, 0)
        hit = np.flatnonzero((match[mine] < 0) & (j >= lo)
                             & (t - a_ts[jj] <= RELAY_WINDOW_MS * 1e6)
                             & (a_flow[jj] != s_flow[mine]) & (a_side[jj] != sent_side[mine])
                             & ((a_pay[jj] == whole[mine]) | (a_pay[jj] == s1[mine])))
        hit = hit[(a_tags[jj[hit]] != s_tags[mine[hit]]).all(axis=1)]  # (the few left)
        match[mine[hit]] = order[jj[hit]]
