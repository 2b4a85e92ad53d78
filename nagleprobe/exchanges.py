"""What the stalls cost the users: request/response exchanges and their latency.

An exchange is a turn of data from the client (the request: its new data up to the server's
first data after it) answered by the server's next turn (the response, up to the client's
next data). Its latency is from the request's first data segment to the response's last, as
seen at the capture point (close to what the client measures where the capture is taken at
the client); the stalls released within it (S2 inside the exchange) held it up by their
S2 - S1, so "without the stalls" is the latency less that. Server data before the client's
first (a banner) is no exchange, and a request the capture ends before answering neither.
Pipelined requests (a second request before the first response) make one exchange of them:
the turns are all the capture shows. A flow whose data went one way only (a download, a
server pushing) has no exchange: its `exchange_kind` says "one-way", no latency is forced.

The engine pairs them per batch of connections from the segments it built (`segment_turns`
-> `paired`), a connection judged in pieces carrying its last turns from piece to piece
(`joined`, `paired` with `open_end`); once the batches are joined, `add_latency` gives each
its stalls and keeps KEPT of it (30 bytes), and the flows' and endpoints' latency columns.
Every step is numpy over columns (the turns one compiled pass where built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .columns import Columns
from .jsonrows import factorize

try:
    from . import _flows as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = (50, 90, 99)
COLUMNS = ("flow", "request_s", "response_end_s", "request_bytes", "response_bytes",
           "latency_ms", "stalls", "stall_ms", "latency_without_stalls_ms")
# what is kept of an exchange for the whole capture (`kept`)
KEPT = {"flow": np.int32, "request_ns": np.int64, "latency_ms": np.float32,
        "stall_ms": np.float32, "stalls": np.uint16, "request_bytes": np.uint32,
        "response_bytes": np.uint32}
# a turn: runs of new data of one sender within a flow
TURN = {"flow": np.int64, "client": bool, "first_ns": np.int64, "last_ns": np.int64,
        "bytes": np.int64}
KINDS = ("request-response", "one-way", "no data")  # a flow's exchange_kind


def turns(flow: np.ndarray, client: np.ndarray, ts_ns: np.ndarray, size: np.ndarray
          ) -> Columns:
    """The turns (TURN columns) of data segments given in (flow, time) order."""
    n = len(flow)
    new_turn = np.ones(n, bool)
    new_turn[1:] = (flow[1:] != flow[:-1]) | (client[1:] != client[:-1])
    starts = np.flatnonzero(new_turn)
    ends = np.append(starts[1:], n)[:len(starts)] - 1
    return Columns({"flow": flow[starts].astype(np.int64), "client": client[starts],
                    "first_ns": ts_ns[starts].astype(np.int64),
                    "last_ns": ts_ns[ends].astype(np.int64),
                    "bytes": (np.add.reduceat(size.astype(np.int64), starts) if n
                              else np.zeros(0, np.int64))})


def segment_turns(seg: Columns, rows: slice = slice(None)) -> Columns:
    """The turns of `Flows.seg` (its rows `rows`): new data, keepalives left out. One
    compiled pass when built (`_flows.data_turns`), else `turns`."""
    flow, d, ts, pay, data, retrans, keepalive = (seg[k][rows] for k in (
        "flow", "dir", "ts_ns", "payload", "has_data", "retrans", "keepalive"))
    if _compiled is None:
        new = data & ~(retrans | keepalive)
        return turns(flow[new], d[new] == 0, ts[new], pay[new])
    n = len(flow)
    out = Columns({k: np.empty(n, dtype=t) for k, t in TURN.items()})
    k = _compiled.data_turns(*(np.ascontiguousarray(a, t) for a, t in (
        (flow, np.int64), (d, np.int8), (ts, np.int64), (pay, np.int64), (data, bool),
        (retrans, bool), (keepalive, bool))),
        *(out[c].view(np.uint8) if c == "client" else out[c] for c in TURN))
    return Columns({c: v[:k] for c, v in out.items()})  # (views: `paired` copies them)


def joined(before: Columns, after: Columns) -> Columns:
    """The turns `before` then `after` (of one flow, in time order), a turn cut in two
    between them made one again."""
    if before.row_count and after.row_count and (
            before["client"][-1] == after["client"][0] and before["flow"][-1] == after["flow"][0]):
        head = Columns.take(after, slice(0, 1))
        before = Columns({k: v.copy() for k, v in before.items()})
        before["last_ns"][-1] = head["last_ns"][0]
        before["bytes"][-1] += head["bytes"][0]
        after = Columns.take(after, slice(1, None))
    return Columns.concat([before, after])


def paired(t: Columns, open_end: bool = False) -> tuple[Columns, Columns]:
    """The exchanges of turns `t` (flow, request_ns, response_end_ns, request_bytes,
    response_bytes), and the turns to carry: with `open_end` (more turns may follow), an
    exchange whose response is the last turn may grow, so it and the last turn are carried,
    not paired."""
    n = t.row_count
    client, flow = t["client"], t["flow"]
    req = np.flatnonzero(client[:-1] & ~client[1:] & (flow[:-1] == flow[1:]))
    keep_from = n
    if open_end and n:
        keep_from = n - 1
        if len(req) and req[-1] == n - 2:
            req, keep_from = req[:-1], n - 2
    resp = req + 1
    ex = Columns({"flow": flow[req], "request_ns": t["first_ns"][req],
                  "response_end_ns": t["last_ns"][resp], "request_bytes": t["bytes"][req],
                  "response_bytes": t["bytes"][resp]})
    return ex, Columns({k: v[keep_from:].copy() for k, v in t.items()})


def kept(ex: Columns, stall_flow: np.ndarray, released_ns: np.ndarray,
         delay_ms: np.ndarray) -> Columns:
    """The KEPT columns of exchanges `ex` (`paired`'s, in (flow, time) order) with the stalls
    released within each (their flow, S2's time and held time, ms)."""
    start, end = ex["request_ns"], ex["response_end_ns"]
    fl = ex["flow"]
    # each stall's exchange: the one of its flow that began last at or before its S2
    at = _last_at_or_before(fl, start, stall_flow, released_ns)
    inside = at >= 0
    inside[inside] &= (fl[at[inside]] == stall_flow[inside]) & (
        released_ns[inside] <= end[at[inside]])
    count = np.bincount(at[inside], minlength=len(fl))
    held = np.bincount(at[inside], weights=delay_ms[inside], minlength=len(fl))
    return Columns({"flow": fl.astype(np.int32), "request_ns": start,
                    "latency_ms": ((end - start) / 1e6).astype(np.float32),
                    "stall_ms": held.astype(np.float32),
                    "stalls": np.minimum(count, np.iinfo(np.uint16).max).astype(np.uint16),
                    "request_bytes": _clipped(ex["request_bytes"]),
                    "response_bytes": _clipped(ex["response_bytes"])})


def _last_at_or_before(flow: np.ndarray, ns: np.ndarray, q_flow: np.ndarray,
                       q_ns: np.ndarray) -> np.ndarray:
    """For each query (q_flow, q_ns), the last row of (flow, ns) (sorted so) at or before it,
    -1 if none: one int64 key per row, each flow given a span of its own."""
    if not len(flow) or not len(q_flow):
        return np.full(len(q_flow), -1, np.int64)
    low = min(int(ns.min()), int(q_ns.min()))
    span = max(int(ns.max()), int(q_ns.max())) - low + 1
    top = max(int(flow.max()), int(q_flow.max())) + 1
    if span * top < 1 << 62:
        return np.searchsorted((flow * span) + (ns - low), (q_flow * span) + (q_ns - low),
                               side="right") - 1
    key = lambda f, t: np.rec.fromarrays([f, t])  # noqa: E731  (a rare, long batch)
    return np.searchsorted(key(flow, ns), key(q_flow, q_ns), side="right") - 1


def _clipped(b: np.ndarray) -> np.ndarray:
    return np.minimum(b, np.iinfo(np.uint32).max).astype(np.uint32)


def flow_exchanges(seg: Columns, flows: int) -> tuple[Columns, np.ndarray]:
    """The exchanges (`paired`'s) of a batch of whole flows 0..flows-1 from their segments
    (`Flows.seg`), and whether each flow carried new data."""
    t = segment_turns(seg)
    return paired(t)[0], np.bincount(t["flow"], minlength=flows) > 0


def table(ex: Columns, origin_ns: int) -> pd.DataFrame:
    """The `report.exchanges` DataFrame (columns COLUMNS) of KEPT exchanges."""
    import pandas as pd

    latency = ex["latency_ms"].astype(float)
    start = (ex["request_ns"] - origin_ns) / 1e9
    return pd.DataFrame({"flow": ex["flow"].astype(np.int64), "request_s": start,
                         "response_end_s": start + latency / 1e3,
                         "request_bytes": ex["request_bytes"].astype(np.int64),
                         "response_bytes": ex["response_bytes"].astype(np.int64),
                         "latency_ms": latency, "stalls": ex["stalls"].astype(np.int64),
                         "stall_ms": ex["stall_ms"].astype(float),
                         "latency_without_stalls_ms": without_stalls(ex).astype(float)},
                        columns=list(COLUMNS))


def exchanges(segments: pd.DataFrame, stalls: pd.DataFrame) -> pd.DataFrame:
    """One row per exchange (columns COLUMNS, see docs/notebook.md) of the flows in
    `segments` (a report's segments table), with the `stalls` (its stalls table) released
    within it: the engine's definition, for tables made by hand."""
    data = segments[(segments["payload"] > 0) & ~segments["retransmission"]
                    & ~segments["keepalive"]]
    ns = lambda s: np.round(s.to_numpy(float) * 1e9).astype(np.int64)  # noqa: E731
    t = turns(data["flow"].to_numpy(np.int64), (data["sender"] == "client").to_numpy(),
              ns(data["time_s"]), data["payload"].to_numpy(np.int64))
    ex, _ = paired(t)
    return table(kept(ex, stalls["flow"].to_numpy(np.int64), ns(stalls["released_s"]),
                      stalls["delay_ms"].to_numpy(float)), 0)


def percentiles(group: np.ndarray, values: np.ndarray, groups: int,
                ps: tuple[int, ...] = PERCENTILES) -> np.ndarray:
    """Per group 0..groups-1 of float32 `values`, its percentiles `ps` then its maximum
    (rows; NaN for a group without values): numpy's linear percentile of them, to the bit."""
    bits = values.astype(np.float32).view(np.int32)
    ordered = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).astype(np.int64) + (1 << 31)  # as the floats
    order = np.argsort((group.astype(np.int64) << 32) | ordered, kind="stable")
    v = values[order].astype(float)
    n = np.bincount(group, minlength=groups)
    first = np.cumsum(n) - n
    out = np.full((len(ps) + 1, groups), np.nan)
    has = np.flatnonzero(n > 0)
    if not len(has):
        return out
    for row, p in enumerate(ps):
        at = (n[has] - 1) * (p / 100)  # numpy's virtual index
        below = np.floor(at)
        gamma = at - below
        lo = first[has] + below.astype(np.int64)
        hi = first[has] + np.minimum(below.astype(np.int64) + 1, n[has] - 1)
        a, b = v[lo], v[hi]
        diff = b - a
        out[row, has] = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    out[-1, has] = v[first[has] + n[has] - 1]
    return out


def summary(group: np.ndarray, ex: Columns, groups: int) -> dict[str, np.ndarray]:
    """Per group 0..groups-1 of exchanges `ex` (KEPT columns; `group` each one's): requests,
    the latency's p50/p90/p99/max with and without the stalls (ms, NaN without requests),
    and the share of requests that waited on a stall."""
    out = {"requests": np.bincount(group, minlength=groups)}
    for values, tag in ((ex["latency_ms"], ""), (without_stalls(ex), "_without_stalls")):
        rows = percentiles(group, values, groups)
        out.update({f"p{p}_ms{tag}": rows[j] for j, p in enumerate(PERCENTILES)})
        out[f"max_ms{tag}"] = rows[-1]
    stalled = np.bincount(group, weights=ex["stalls"] > 0, minlength=groups)
    out["stalled_share"] = np.divide(stalled, out["requests"], out=np.full(groups, np.nan),
                                     where=out["requests"] > 0)
    return out


def without_stalls(ex: Columns) -> np.ndarray:
    """Each exchange's latency less the stalls' held time (ms, float32 as KEPT's)."""
    return (ex["latency_ms"].astype(np.float32) - ex["stall_ms"].astype(np.float32))


def latency_summary(ex: pd.DataFrame, by: pd.Series | str = "flow") -> pd.DataFrame:
    """Per group of exchanges (`by`: a column, or a Series aligned with `ex`, e.g. the
    server endpoint of each exchange's flow): `summary`, indexed by the group."""
    import pandas as pd

    key = ex[by] if isinstance(by, str) else by
    codes, names = pd.factorize(key, sort=True)
    cols = {"latency_ms": ex["latency_ms"].to_numpy(np.float32),
            "stall_ms": ex["stall_ms"].to_numpy(np.float32), "stalls": ex["stalls"].to_numpy()}
    return pd.DataFrame(summary(codes, cols, len(names)), index=pd.Index(names, name=key.name))


# the flows table's latency columns (`add_latency`), from `summary`'s
_STATS = [f"p{p}_ms" for p in PERCENTILES] + ["max_ms"]
FLOW_COLUMNS = {"requests": "requests", **{f"latency_{k}": k for k in _STATS},
                **{f"latency_{k}_without_stalls": f"{k}_without_stalls" for k in _STATS},
                "stalled_requests_share": "stalled_share"}


def kind_columns(ex: Columns, had_data: np.ndarray) -> dict[str, np.ndarray]:
    """The flows table's requests and exchange_kind of a batch's flows 0..len(had_data)-1
    (`ex`: their exchanges, `paired`'s; `had_data`: the flow carried new data)."""
    n = np.bincount(ex["flow"], minlength=len(had_data))
    kind = np.where(n > 0, 0, np.where(had_data, 1, 2))
    return {"requests": n, "exchange_kind": np.array(KINDS, dtype=object)[kind]}


def add_latency(flows: Columns, ex: Columns, stalls: Columns, endpoints: Columns) -> Columns:
    """The KEPT exchanges of flows 0.. (`ex`: `paired`'s, with their stalls, the stalls
    table's columns), their latency columns (FLOW_COLUMNS) put in `flows` (which
    `kind_columns` made) before its exchange_kind, and in `endpoints` (two rows per flow)
    those of each endpoint over every flow it has in the capture (a server: every client's
    requests it answered). Run once on the joined batches: a call per batch would cost more
    than the work."""
    k = kept(ex, stalls["flow"], stalls["released_time"], stalls["delay_ms"])
    kind = flows.pop("exchange_kind")
    per_flow = _rounded(summary(k["flow"], k, len(flows["requests"])))
    flows.update(per_flow)
    flows["exchange_kind"] = kind
    for j, side in enumerate(("client", "server")):
        of_flow, names = factorize(flows[side])
        # an endpoint of one flow (a client's, mostly) has that flow's figures
        per = per_flow if len(names) == len(of_flow) else _rounded(
            summary(of_flow[k["flow"]], k, len(names)))
        for name, col in per.items():
            endpoints.setdefault(name, np.zeros(2 * len(of_flow), col.dtype))[j::2] = \
                col if per is per_flow else col[of_flow]
    return k


def _rounded(s: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`summary`'s columns as the tables have them (FLOW_COLUMNS' names, ms to the µs)."""
    return {name: s[c] if c == "requests" else np.round(s[c], 4 if c == "stalled_share" else 3)
            for name, c in FLOW_COLUMNS.items()}
