"""What the stalls cost the users: request/response exchanges and their latency.

An exchange is a turn of data from the client (the request: its new data up to the server's
first data after it) answered by the server's next turn (the response, up to the client's
next data). Its latency is from the request's first data segment to the response's last, as
seen at the capture point (close to what the client measures where the capture is taken at
the client); the stalls released within it (S2 inside the exchange) held it up by their
S2 - S1, so "without the stalls" is the latency less that. Server data before the client's
first (a banner) is no exchange, and a request the capture ends before answering neither.
Pipelined requests (a second request before the first response) make one exchange of them:
the turns are all the capture shows. Everything is numpy over the segments table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = (50, 90, 99)
COLUMNS = ("flow", "request_s", "response_end_s", "request_bytes", "response_bytes",
           "latency_ms", "stalls", "stall_ms", "latency_without_stalls_ms")


def exchanges(segments: pd.DataFrame, stalls: pd.DataFrame) -> pd.DataFrame:
    """One row per exchange (columns COLUMNS, see docs/notebook.md) of the flows in
    `segments` (a report's segments table), with the `stalls` (its stalls table) released
    within it."""
    import pandas as pd

    data = segments[(segments["payload"] > 0) & ~segments["retransmission"]
                    & ~segments["keepalive"]]
    flow = data["flow"].to_numpy(np.int64)
    client = (data["sender"] == "client").to_numpy()
    t = data["time_s"].to_numpy(float)
    size = data["payload"].to_numpy(np.int64)
    n = len(flow)
    # turns: runs of data segments of one sender within a flow
    new_turn = np.r_[True, (flow[1:] != flow[:-1]) | (client[1:] != client[:-1])] if n else \
        np.zeros(0, bool)
    starts = np.flatnonzero(new_turn)
    ends = np.r_[starts[1:], n] - 1
    t_flow, t_client = flow[starts], client[starts]
    t_bytes = np.add.reduceat(size, starts) if n else size
    # a client turn answered by the next turn, the server's, of the same flow
    req = np.flatnonzero(t_client[:-1] & ~t_client[1:] & (t_flow[:-1] == t_flow[1:]))
    resp = req + 1
    start_s, end_s = t[starts[req]], t[ends[resp]]
    released = stalls["released_s"].to_numpy(float)
    s_flow = stalls["flow"].to_numpy(np.int64)
    # each stall's exchange: the one of its flow whose span holds its S2
    key_ex = t_flow[req] * 1e12 + start_s  # flows apart, in time order within
    at = np.searchsorted(key_ex, s_flow * 1e12 + released, side="right") - 1
    inside = (at >= 0)
    inside[inside] &= (t_flow[req][at[inside]] == s_flow[inside]) & (
        released[inside] <= end_s[at[inside]])
    count = np.bincount(at[inside], minlength=len(req))
    held = np.bincount(at[inside], weights=stalls["delay_ms"].to_numpy(float)[inside],
                       minlength=len(req))
    latency = (end_s - start_s) * 1e3
    return pd.DataFrame({"flow": t_flow[req], "request_s": start_s, "response_end_s": end_s,
                         "request_bytes": t_bytes[req], "response_bytes": t_bytes[resp],
                         "latency_ms": latency, "stalls": count.astype(np.int64),
                         "stall_ms": held, "latency_without_stalls_ms": latency - held},
                        columns=list(COLUMNS))


def latency_summary(ex: pd.DataFrame, by: pd.Series | str = "flow") -> pd.DataFrame:
    """Per group of exchanges (`by`: a column, or a Series aligned with `ex`, e.g. the
    server endpoint of each exchange's flow): requests, the latency's p50/p90/p99/max with
    and without the stalls (ms), and the share of requests that waited on a stall."""
    import pandas as pd

    g = ex.groupby(by, sort=True)
    out = pd.DataFrame({"requests": g.size()})
    for col, tag in (("latency_ms", ""), ("latency_without_stalls_ms", "_without_stalls")):
        for p in PERCENTILES:
            out[f"p{p}_ms{tag}"] = g[col].quantile(p / 100)
        out[f"max_ms{tag}"] = g[col].max()
    out["stalled_share"] = g["stalls"].apply(lambda s: float((s > 0).mean()))
    return out
