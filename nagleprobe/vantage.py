"""Several vantages: captures of the same connections taken at different places (the
client's host, a router in the middle, the server's host), told apart from a file set and
joined per connection (docs/DETECTION.md, "Several vantages").

Two files are vantages of the same traffic when a connection's handshake (4-tuple and the
client's initial sequence number) is in both at about the same time, with the same loop (SYN
to the client's ACK), and the capture point's round trip to the server (SYN to SYN/ACK)
differs between them: the same handshake at the same round trip is the same place (copies,
which a merge drops as duplicates); far apart in time or with another loop, a replay or an
edited copy. Files that share no handshake (a rotated set, one file per interface) stay one
capture. Each vantage is analysed on its own; `join` then matches their flows (4-tuple, in
order of start) and gives per connection the verdict of every vantage, per pair of files
their clock offset, and per stall where the held time went, all from the reports' small
tables (no packet is read twice).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .columns import Columns
from .decode import ACK, SYN, decode
from .errors import CaptureError
from .humanize import SIDES
from .read import URL_TIMEOUT_S, CaptureReader
from .tuples import mix

PEEK_BYTES = 1 << 20  # of each file of several, read for its handshakes (a rotated set of
# a thousand files reads 1 GB more)
# handshake round trips (SYN to SYN/ACK) of one connection in two files closer than this,
# or than a quarter of the longer, are one capture point
SAME_PLACE_MS = 0.5
SAME_TIME_S = 3600.0  # one handshake in two files this far apart is not one moment (clocks)
MATCH_MS = 5.0  # a stall is the same stall at two vantages within this (or a quarter RTT)


# key, SYN time, SYN to SYN/ACK, SYN to the client's ACK (ns); per handshake, keys sorted
Handshakes = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def handshakes(path: str, url_timeout: float = URL_TIMEOUT_S) -> Handshakes:
    """The handshakes in the first PEEK_BYTES of a file, keyed by a hash of the client's
    address and port, the server's and the client's ISN. An unreadable file has none (the
    file set reports it)."""
    try:
        reader = CaptureReader(path, chunk_bytes=PEEK_BYTES, url_timeout=url_timeout)
    except CaptureError:
        return _none()
    try:
        batch = next((b for b in reader if len(b)), None)
        c = decode(batch, Counter()) if batch is not None else None
    except CaptureError:
        c = None
    finally:
        reader.close()
    if c is None or not len(c["frame"]):
        return _none()
    kind = c["flags"] & (SYN | ACK)
    syn, sa, ack = kind == SYN, kind == SYN | ACK, kind == ACK
    port = lambda a, b: (a.astype(np.uint64) << np.uint64(16)) | b.astype(np.uint64)  # noqa: E731
    key = np.where(syn, mix([c["src_hi"], c["src_lo"], c["dst_hi"], c["dst_lo"],
                             port(c["sport"], c["dport"]), c["seq"].astype(np.uint64)]),
                   mix([c["dst_hi"], c["dst_lo"], c["src_hi"], c["src_lo"],
                        port(c["dport"], c["sport"]),
                        (c["ack"] - np.uint32(1)).astype(np.uint64)]))
    # the client's first packet after its SYN (the handshake's ACK): sequence ISN + 1
    key = np.where(ack, mix([c["src_hi"], c["src_lo"], c["dst_hi"], c["dst_lo"],
                             port(c["sport"], c["dport"]),
                             (c["seq"] - np.uint32(1)).astype(np.uint64)]), key)
    ts = c["ts_ns"]
    k1, i1 = np.unique(key[syn], return_index=True)  # the first of each (in time order)
    k2, i2 = np.unique(key[sa], return_index=True)
    k3, i3 = np.unique(key[ack], return_index=True)
    both, a, b = np.intersect1d(k1, k2, assume_unique=True, return_indices=True)
    both, d, e = np.intersect1d(both, k3, assume_unique=True, return_indices=True)
    t0 = ts[syn][i1[a[d]]]
    return both, t0, ts[sa][i2[b[d]]] - t0, ts[ack][i3[e]] - t0


def _none() -> Handshakes:
    return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64), \
        np.zeros(0, np.int64)


def different_places(one: Handshakes, other: Handshakes) -> bool:
    """Whether two files' handshakes (from `handshakes`) show the same connections seen
    from different places: shared handshakes at about the same time, with the same loop
    (SYN to the client's ACK spans both ends wherever it is seen) but round trips to the
    server that differ."""
    _, a, b = np.intersect1d(one[0], other[0], assume_unique=True, return_indices=True)
    if not len(a) or abs(float(np.median(other[1][b] - one[1][a]))) > SAME_TIME_S * 1e9:
        return False
    if not _near(one[3][a], other[3][b]):
        return False  # not one moment: an edited copy
    return not _near(one[2][a], other[2][b])


def _near(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two files' durations (ns) of the same handshakes are the same: apart by at
    most SAME_PLACE_MS or a quarter of the longer (median over the handshakes)."""
    x, y = x / 1e6, y / 1e6
    return float(np.median(np.abs(x - y))) <= max(SAME_PLACE_MS,
                                                  float(np.median(np.maximum(x, y))) / 4)


def vantage_groups(paths: list[str], url_timeout: float = URL_TIMEOUT_S) -> list[list[str]]:
    """The files of a set in groups, each one capture point: a file joins the first group
    holding no file that saw its connections from elsewhere. One group when there are no
    several vantages (a rotated set stays whole)."""
    if len(paths) < 2:
        return [list(paths)]
    seen = [handshakes(p, url_timeout) for p in paths]
    apart = {(i, j) for i, j in _sharing(seen) if different_places(seen[i], seen[j])}
    groups: list[list[int]] = []
    for i in range(len(paths)):
        for g in groups:
            if not any((j, i) in apart for j in g):
                g.append(i)
                break
        else:
            groups.append([i])
    return [[paths[i] for i in g] for g in groups]


def _sharing(seen: list[Handshakes]) -> set[tuple[int, int]]:
    """The pairs of files (i < j) holding a handshake in common: only they can be vantages
    (a rotated set has none, and costs no comparison)."""
    keys = np.concatenate([h[0] for h in seen])
    owner = np.repeat(np.arange(len(seen)), [len(h[0]) for h in seen])
    order = np.argsort(keys, kind="stable")
    keys, owner = keys[order], owner[order]
    pairs: set[tuple[int, int]] = set()
    for lo, hi in zip(*_runs(keys)):
        files = np.unique(owner[lo:hi])
        pairs.update((int(a), int(b)) for n, a in enumerate(files) for b in files[n + 1:])
    return pairs


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each run of equal sorted keys longer than one."""
    edge = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True]) if len(keys) else \
        np.zeros(1, np.int64)
    long = np.diff(edge) > 1
    return edge[:-1][long], edge[1:][long]


def _handshake_times(fl: Columns) -> np.ndarray:
    """Per flow (rows) the SYN, SYN/ACK and ACK times (ns, this file's clock) as the capture
    point saw them, from its first packet and its round trips; NaN without a handshake."""
    syn = fl["start_time"].astype(np.float64)
    ok = (fl["roles"] == "handshake") & ~np.isnan(fl["rtt_server_ms"].astype(float))
    syn = np.where(ok, syn, np.nan)
    sa = syn + fl["rtt_server_ms"].astype(float) * 1e6
    return np.stack([syn, sa, sa + fl["rtt_client_ms"].astype(float) * 1e6], axis=1)


def _match_flows(ref: Columns, other: Columns) -> np.ndarray:
    """For each flow of `other`, the row of the same connection in `ref` (-1 if none): the
    same client and server, the n-th of that pair by start in both, starting within
    SAME_TIME_S of each other."""
    def keys(fl: Columns) -> np.ndarray:
        pair = np.char.add(np.char.add(fl["client"].astype(str), ">"), fl["server"].astype(str))
        order = np.lexsort((fl["start_time"], pair))
        rank = np.zeros(len(pair), np.int64)
        p = pair[order]
        first = np.r_[True, p[1:] != p[:-1]] if len(p) else np.zeros(0, bool)
        start = np.maximum.accumulate(np.where(first, np.arange(len(p)), 0)) if len(p) else p
        rank[order] = np.arange(len(p)) - start
        return np.char.add(np.char.add(pair, "#"), rank.astype(str))

    rk, ok = keys(ref), keys(other)
    where = {k: i for i, k in enumerate(rk.tolist())}
    m = np.asarray([where.get(k, -1) for k in ok.tolist()], dtype=np.int64)
    apart = np.abs(other["start_time"] - ref["start_time"][np.maximum(m, 0)])
    return np.where((m >= 0) & (apart <= SAME_TIME_S * 1e9), m, -1)


def _offset(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(b's clock minus a's, one-way delay between them) in ns from one connection's
    handshake times at two vantages (SYN, SYN/ACK, ACK), NTP-style: the SYN and the SYN/ACK
    cross between them in opposite directions, and so do the SYN/ACK and the ACK; the delay
    is taken as equal both ways, the two exchanges averaged."""
    if b[1] - b[0] > a[1] - a[0]:  # b nearer the client: a's SYN left b first
        theta, delay = _offset(b, a)
        return -theta, delay
    # a nearer the client: SYN and ACK a -> b, SYN/ACK b -> a
    back = a[1] - b[1]
    there = (b[0] - a[0] + b[2] - a[2]) / 2
    return (there - back) / 2, (there + back) / 2


def join(reports: list[Any], groups: list[list[str]]) -> dict[str, Any]:
    """The vantages object (docs/json.md): the files of each vantage; per pair of files
    that saw the same connections the clock offset and one-way delay between them; per
    connection seen at more than one vantage the stalls and fix side at each, whether they
    agree, and where the held time went."""
    tables = [r.columns("flows") for r in reports]
    stalls = [_Stalls(r.columns("stalls")) for r in reports]
    ref = tables[0]
    rows = np.full((len(ref["id"]), len(reports)), -1, np.int64)  # connection x vantage
    rows[:, 0] = np.arange(len(ref["id"]))
    for k in range(1, len(reports)):
        m = _match_flows(ref, tables[k])
        rows[m[m >= 0], k] = np.flatnonzero(m >= 0)
    rows = rows[(rows >= 0).sum(axis=1) > 1]
    times = [_handshake_times(fl) for fl in tables]
    files = [fl["first_file"] if "first_file" in fl else np.full(len(fl["id"]), g[0], object)
             for fl, g in zip(tables, groups)]
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    connections = []
    for n, row in enumerate(rows):
        seen = [k for k, r in enumerate(row) if r >= 0]
        a = seen[0]
        for k in seen[1:]:
            if not np.isnan(times[a][row[a]][0]) and not np.isnan(times[k][row[k]][0]):
                pairs.setdefault((files[a][row[a]], files[k][row[k]]), []).append(
                    _offset(times[a][row[a]], times[k][row[k]]))
        connections.append(_connection(n, row, tables, stalls, times, files))
    clocks = [{"from": a, "to": b, "offset_ms": _ms(np.median([t for t, _ in v])),
               "one_way_ms": _ms(np.median([d for _, d in v])), "connections": len(v)}
              for (a, b), v in pairs.items()]
    return {"files": [{"vantage": k + 1, "paths": list(g)} for k, g in enumerate(groups)],
            "clocks": clocks, "connections": connections}


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _number(v: float) -> float | None:
    return None if v != v else round(float(v), 3)


def _connection(n: int, row: np.ndarray, tables: list[Columns],
                stalls: list[_Stalls], times: list[np.ndarray],
                files: list[np.ndarray]) -> dict[str, Any]:
    """One connection joined over the vantages that saw it (`row`: its flow row in each
    report, -1 where not seen)."""
    seen = [k for k, r in enumerate(row) if r >= 0]
    first = tables[seen[0]]
    per = []
    for k in seen:
        fl, r = tables[k], row[k]
        per.append({"vantage": k + 1, "file": files[k][r], "flow": int(fl["id"][r]),
                    "stalls": int(fl["stalls"][r]),
                    "stall_ms": round(float(fl["stall_ms"][r]), 3),
                    "fix_side": fl["fix_side"][r],
                    "rtt_client_ms": _number(fl["rtt_client_ms"][r]),
                    "rtt_server_ms": _number(fl["rtt_server_ms"][r])})
    sides = {p["fix_side"] for p in per}
    agree = len(sides) == 1
    return {"connection": n, "client": first["client"][row[seen[0]]],
            "server": first["server"][row[seen[0]]],
            "fix_side": sides.pop() if agree else None, "agree": agree, "vantages": per,
            "split": _split(row, tables, stalls, [times[k][r] for k, r in enumerate(row)])}


class _Stalls:
    """One vantage's stalls, found by flow without scanning them all (sorted by flow)."""

    def __init__(self, st: Columns) -> None:
        self.st = st
        self.order = np.argsort(st["flow"], kind="stable")
        self.flow = st["flow"][self.order]

    def of(self, flow: int, sender: str) -> np.ndarray:
        """Rows of the flow's stalls held at `sender`."""
        rows = self.order[np.searchsorted(self.flow, flow):
                          np.searchsorted(self.flow, flow, side="right")]
        return rows[self.st["sender"][rows] == sender]


def _split(row: np.ndarray, tables: list[Columns], stalls: list[_Stalls],
           hs: list[np.ndarray | None]) -> dict[str, Any] | None:
    """Where the held time of the connection's stalls went, summed over the stalls found at
    both the vantage nearest their sender and the one nearest the peer: `stack_ms` (the late
    ACK's arrival to the held segment leaving, at the sender), `peer_ack_ms` (the small
    segment's arrival to the ACK leaving, at the peer), `path_ms` (the rest: both ways on the
    path). Of the two senders, the one with more such stalls; None when no vantage pair
    brackets any."""
    seen = [k for k, r in enumerate(row) if r >= 0 and not np.isnan(hs[k][0])]
    if len(seen) < 2:
        return None
    near = {s: min(seen, key=lambda k, s=s: tables[k][f"rtt_{s}_ms"][row[k]]) for s in SIDES}
    out = None
    for side, peer in (SIDES, SIDES[::-1]):
        a, b = near[side], near[peer]
        if a == b:
            continue
        ia = stalls[a].of(tables[a]["id"][row[a]], side)
        ib = stalls[b].of(tables[b]["id"][row[b]], side)
        if not len(ia) or not len(ib):
            continue
        sa, sb = stalls[a].st, stalls[b].st
        point = 0 if side == "client" else 1  # the handshake packet going the stalls' way
        shift = hs[b][point] - hs[a][point]  # sender's vantage to peer's: delay and offset
        ib = ib[np.argsort(sb["small_time"][ib])]
        small_b = sb["small_time"][ib].astype(np.float64)
        want = sa["small_time"][ia].astype(np.float64) + shift
        hi = np.clip(np.searchsorted(small_b, want), 0, len(ib) - 1)
        lo = np.clip(hi - 1, 0, len(ib) - 1)
        got = ib[np.where(np.abs(small_b[lo] - want) <= np.abs(small_b[hi] - want), lo, hi)]
        rtt = float(tables[a]["rtt_ms"][row[a]])
        tol = max(MATCH_MS, 0 if np.isnan(rtt) else rtt / 4) * 1e6
        ok = np.abs(sb["small_time"][got].astype(np.float64) - want) <= tol
        if not ok.any():
            continue
        ia, got = ia[ok], got[ok]
        held = (sa["released_time"][ia] - sa["small_time"][ia]).astype(np.float64)
        stack = (sa["released_time"][ia] - sa["ack_time"][ia]).astype(np.float64)
        peer_ack = (sb["ack_time"][got] - sb["small_time"][got]).astype(np.float64)
        part = {"sender": side, "sender_vantage": a + 1, "peer_vantage": b + 1,
                "stalls": int(len(ia)), "held_ms": _ms(held.sum()),
                "stack_ms": _ms(stack.sum()), "path_ms": _ms((held - stack - peer_ack).sum()),
                "peer_ack_ms": _ms(peer_ack.sum())}
        if out is None or part["stalls"] > out["stalls"]:
            out = part
    return out


# `Report.vantages`: column -> dtype (object: text, None missing; float: NaN missing)
TABLE_COLUMNS = {"connection": np.int64, "client": object, "server": object,
                 "vantage": np.int64, "file": object, "flow": np.int64, "stalls": np.int64,
                 "stall_ms": np.float64, "fix_side": object, "rtt_client_ms": np.float64,
                 "rtt_server_ms": np.float64, "agree": bool, "split_stalls": np.int64,
                 "stack_ms": np.float64, "path_ms": np.float64, "peer_ack_ms": np.float64}


def table(doc: dict[str, Any] | None) -> Any:
    """`Report.vantages`: one row per connection and vantage that saw it (columns
    TABLE_COLUMNS, docs/notebook.md); the connection's `agree` and time split (at its
    sender's and peer's vantages: `split_stalls` matched, the `*_ms` summed over them)
    repeat on each of its rows."""
    from .dataframes import table as frame

    rows = []
    for c in (doc or {}).get("connections", []):
        sp = c["split"] or {}
        for v in c["vantages"]:
            rows.append((c["connection"], c["client"], c["server"], v["vantage"], v["file"],
                         v["flow"], v["stalls"], v["stall_ms"], v["fix_side"],
                         _nan(v["rtt_client_ms"]), _nan(v["rtt_server_ms"]), c["agree"],
                         sp.get("stalls", 0), _nan(sp.get("stack_ms")),
                         _nan(sp.get("path_ms")), _nan(sp.get("peer_ack_ms"))))
    return frame({name: np.asarray([r[i] for r in rows], dtype=t)
                  for i, (name, t) in enumerate(TABLE_COLUMNS.items())})


def _nan(v: float | None) -> float:
    return np.nan if v is None else v
