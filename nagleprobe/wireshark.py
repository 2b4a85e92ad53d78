"""Wireshark display filters for the flows and stalls of a report (one place for the text,
JSON, HTML and notebook views).

* A flow: `tcp.stream eq N` when N can be computed exactly as Wireshark numbers TCP
  conversations (see `tcp_streams`), else the address/port filter of its two endpoints
  limited to its first..last frame (`ip.addr==A && tcp.port==P && ip.addr==B &&
  tcp.port==Q && frame.number >= F && frame.number <= L`, `ipv6.addr` for IPv6).
* Its stalls: `frame.number in {10,11,12,...}` (S1, late ACK and S2 of every stall; commas
  as Wireshark 4 wants them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .columns import Columns, take
from .errors import printable
from .tables import STALL_POINTS, rows_of

if TYPE_CHECKING:
    from .tables import Result


# skipped packets that cannot start a TCP conversation Wireshark would count: second copies
# of packets of a counted one (packets without TCP here may hold TCP in a tunnel that
# Wireshark decodes)
NO_TCP_CONVERSATION = {"duplicate"}


def tcp_streams(first_frame: np.ndarray, client: np.ndarray, server: np.ndarray,
                capture: dict[str, Any]) -> np.ndarray:
    """Wireshark's `tcp.stream` of each flow, -1 where it cannot be computed exactly.

    Wireshark numbers TCP conversations 0, 1, ... in the order of their first frame, one per
    4-tuple until a new SYN reuses one. So the number of a flow is its rank by first frame,
    exactly, when every TCP packet Wireshark sees is in a flow (nothing skipped but
    duplicates, no damage or late packets: `capture["warnings"]` empty) and no earlier flow
    is a second connection on a reused 4-tuple (whose split may follow other rules in other
    Wireshark versions): flows from the first such one on get -1.
    """
    n = len(first_frame)
    out = np.full(n, -1, dtype=np.int64)
    hidden = set(capture.get("skipped") or {}) - NO_TCP_CONVERSATION
    if not n or hidden or capture.get("warnings"):
        return out
    order = np.argsort(first_frame, kind="stable")
    client = np.asarray(client, dtype=object)[order]
    server = np.asarray(server, dtype=object)[order]
    # the 4-tuple, either way round, as a 64-bit hash of its endpoints' hashes (no string
    # or table entry per endpoint); a reuse it finds is checked on the text, so a hash
    # collision cannot end the numbering
    a = np.fromiter(map(hash, client), dtype=np.int64, count=n).view(np.uint64)
    b = np.fromiter(map(hash, server), dtype=np.int64, count=n).view(np.uint64)
    key = np.minimum(a, b) * np.uint64(0x9E3779B97F4A7C15) ^ np.maximum(a, b)
    del a, b
    by_key = np.argsort(key, kind="stable")  # a key's flows in first-frame order
    later = np.zeros(n, dtype=bool)  # a key seen before
    later[by_key[1:]] = key[by_key[1:]] == key[by_key[:-1]]
    stop = n
    for i in np.flatnonzero(later).tolist():  # the first true reuse; a collision is passed over
        earlier = np.flatnonzero(key[:i] == key[i])
        pair = {client[i], server[i]}
        if any({client[j], server[j]} == pair for j in earlier.tolist()):
            stop = i  # numbered up to the first reused 4-tuple
            break
    out[order[:stop]] = np.arange(stop)
    return out


def add_tcp_streams(flows: Columns, capture: dict[str, Any]) -> None:
    """Add the flows' Wireshark `tcp.stream` (-1: not computable exactly; NA in the table)
    to the columns of all of a capture's flows (see `tcp_streams`)."""
    flows["tcp_stream"] = tcp_streams(flows["first_frame"], flows["client"], flows["server"],
                                      capture)


def _endpoint(text: str) -> tuple[str, str, int]:
    """("ip.addr" or "ipv6.addr", address, port) of "ip:port" / "[ipv6]:port"."""
    addr, port = text.rsplit(":", 1)
    v6 = addr.startswith("[")
    return ("ipv6.addr" if v6 else "ip.addr"), addr.strip("[]"), int(port)


def flow_filter(client: str, server: str, tcp_stream: int | None, first_frame: int,
                last_frame: int) -> str:
    """The display filter that selects one flow."""
    if tcp_stream is not None and tcp_stream >= 0:
        return f"tcp.stream eq {tcp_stream}"
    fa, a, p = _endpoint(client)
    fb, b, q = _endpoint(server)
    return (f"{fa}=={a} && tcp.port=={p} && {fb}=={b} && tcp.port=={q} && "
            f"frame.number >= {first_frame} && frame.number <= {last_frame}")


def frames_filter(frames: np.ndarray | list[int]) -> str | None:
    """`frame.number in {...}` of the given frames (sorted, each once); None for none."""
    return _frames_in(np.unique(np.asarray(frames, dtype=np.int64)))


def _frames_in(frames: np.ndarray) -> str | None:
    """`frame.number in {...}` of frames already sorted and unique; None for none."""
    if not len(frames):
        return None
    return "frame.number in {" + ",".join(map(str, frames.tolist())) + "}"


def stall_frames(report: Result, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frames of the stalls (S1, late ACK, S2) of each flow of `ids`, sorted and each
    once per flow: (values, offsets), flow j's frames being values[offsets[j]:offsets[j+1]]."""
    st = report.columns("stalls")
    flows = np.asarray(st["flow"])
    if len(ids) == len(report.columns("flows")["id"]) or not len(ids):
        mine: np.ndarray | slice = slice(None)
    elif len(flows) and np.all(flows[1:] >= flows[:-1]):  # stalls by flow: their rows' span
        mine = slice(int(np.searchsorted(flows, ids.min())),
                     int(np.searchsorted(flows, ids.max(), side="right")))
    else:
        mine = np.isin(flows, ids)
    flow, frames = _sorted_points(st, mine)
    frames = frames.astype(np.int64)
    once = np.r_[True, (flow[1:] != flow[:-1]) | (frames[1:] != frames[:-1])] \
        if len(flow) else np.zeros(0, bool)
    flow, frames = flow[once], frames[once]
    lo, hi = np.searchsorted(flow, ids, side="left"), np.searchsorted(flow, ids, side="right")
    # flows of `ids` in any order: gather each one's run, then offsets over the runs
    pick = np.repeat(lo - np.r_[0, np.cumsum(hi - lo)[:-1]], hi - lo) + np.arange((hi - lo).sum())
    return frames[pick], np.r_[0, np.cumsum(hi - lo)].astype(np.int64)


def _sorted_points(st: Columns, mine: np.ndarray | slice, *also: str
                   ) -> tuple[np.ndarray, ...]:
    """The points (S1, late ACK, S2) of the stall rows `mine` by flow, then frame: (flow,
    frame, then each point column named in `also`, e.g. "file")."""
    flow = np.tile(st["flow"][mine], len(STALL_POINTS))
    cols = [np.concatenate([np.asarray(st[f"{k}_{w}"])[mine] for k in STALL_POINTS])
            for w in ("frame", *also)]
    order = np.lexsort((cols[0], flow))
    return (flow[order], *(c[order] for c in cols))


def flow_filters(fl: Columns) -> list[str]:
    """`flow_filter` of each row of a flows table (its columns)."""
    streams = fl["tcp_stream"] if "tcp_stream" in fl else np.full(len(fl["id"]), -1)
    return [flow_filter(c, s, t, ff, lf) for c, s, t, ff, lf in zip(
        fl["client"].tolist(), fl["server"].tolist(), streams.tolist(),
        fl["first_frame"].tolist(), fl["last_frame"].tolist())]


def filter_docs(report: Result, ids: np.ndarray | list[int] | None = None
                ) -> list[dict[str, Any]]:
    """Per flow (all, or the given ids, in that order): {"flow_filter", "stall_frames_filter"
    (None without stalls)}, as the JSON document, the HTML report and the notebook give
    them. For a file set, frame numbers belong to their file: the flow filter is the
    endpoints' alone (good in every file), "stall_frames_filter" is None and
    "stall_frames_filters" gives one filter per file ({path: filter})."""
    fl = report.columns("flows")
    if ids is not None:
        fl = take(fl, rows_of(fl, ids))
    sel = fl["id"]
    st = report.columns("stalls")
    if "small_file" not in st:
        values, offsets = stall_frames(report, sel)
        return [{"flow_filter": f, "stall_frames_filter": _frames_in(values[a:b])}
                for f, a, b in zip(flow_filters(fl), offsets[:-1].tolist(),
                                   offsets[1:].tolist())]
    set_paths = [f["path"] for f in report.capture.get("files") or []]  # in set order
    flow, frames, files = _sorted_points(st, np.isin(st["flow"], sel), "file")
    bounds = np.searchsorted(flow, sel, side="left"), np.searchsorted(flow, sel, side="right")
    docs = []
    for j, (c, s) in enumerate(zip(fl["client"].tolist(), fl["server"].tolist())):
        mine_frames = frames[bounds[0][j]:bounds[1][j]]
        mine_files = files[bounds[0][j]:bounds[1][j]]
        present = set(mine_files.tolist())
        per_file = {p: frames_filter(mine_frames[mine_files == p])
                    for p in set_paths if p in present}
        docs.append({"flow_filter": endpoints_filter(c, s), "stall_frames_filter": None,
                     "stall_frames_filters": per_file})
    return docs


def endpoints_filter(client: str, server: str) -> str:
    """The display filter of a flow's two endpoints (no frame range)."""
    fa, a, p = _endpoint(client)
    fb, b, q = _endpoint(server)
    return f"{fa}=={a} && tcp.port=={p} && {fb}=={b} && tcp.port=={q}"


def render_filters(report: Result) -> str:
    """`analyze --format wireshark`: per flow with stalls, a filter for the flow and one for
    its stall frames, ready to paste into Wireshark's display filter bar."""
    c = report.capture
    fl = report.columns("flows")
    stalled = take(fl, np.flatnonzero(fl["stalls"] > 0))
    lines = [f"{printable(c['path'])}: {report.verdict()}"]
    if c["warnings"]:
        lines.append("warning: the capture is damaged; frame numbers after the damage may "
                     "differ from Wireshark's")
    if not len(stalled["id"]):
        return "\n".join(lines) + "\n"
    lines.append("Wireshark display filters (paste into the display filter bar; frame numbers "
                 "as Wireshark counts them):")
    docs = filter_docs(report, stalled["id"])
    rows = zip(stalled["id"].tolist(), stalled["client"].tolist(), stalled["server"].tolist(),
               stalled["stalls"].tolist(), stalled["stall_ms"].tolist())
    for (i, client, server, n, ms), d in zip(rows, docs):
        lines.append("")
        lines.append(f"flow {i}: client {client} -> server {server}: {n} stalls, "
                     f"{ms:.1f} ms lost")
        lines.append(f"  flow:   {d['flow_filter']}")
        if "stall_frames_filters" in d:  # a file set: frame numbers per file
            for path, filt in d["stall_frames_filters"].items():
                lines.append(f"  stalls in {printable(path)}: {filt}")
        else:
            lines.append(f"  stalls: {d['stall_frames_filter']}")
    return "\n".join(lines) + "\n"
