"""Who must change what: the fix of a flow with stalls and its sentence, decided once for the
text report, the JSON document, the HTML report and `check` (which all show these fields);
and the fixes grouped per program that must change (`fix_groups`), so that one client or
server with many stalled connections is told once."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .columns import Columns
from .detect import timer_name
from .humanize import SIDES, counted, human_count, human_ms, json_ms

FIX_FIELDS = ("side", "endpoint", "action", "alternative", "basis", "text")

# Why the action was chosen, in the order tested (the first that holds for at least half of
# the side's stalls): S2 was the tail of a write held behind a full segment S1, which one
# write does not avoid, so set TCP_NODELAY; S1 and S2 were one message written in two pieces
# -- the peer answered right after S2, or S1 was a header before a larger S2 -- so coalesce;
# else they look like separate messages, so set TCP_NODELAY.
BASES = ("tail-behind-full", "peer-answered", "header-then-body", "separate-messages")
_COALESCE = np.array([False, True, True, False])  # per basis
HEADER_BYTES = 16  # a length prefix or header is at most this long (DNS 2, TLS 5, HTTP/2 9)
BODY_TIMES = 4  # ... and the body after it at least this many times as long


def header_then_body(s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """Per stall: S1 (`s1` bytes) looks like a header or length prefix and S2 (`s2` bytes)
    like the body that goes with it -- one message in two writes."""
    return (s1 <= HEADER_BYTES) & (s2 >= BODY_TIMES * s1)


def fix_columns(names: np.ndarray, stall_n: np.ndarray, stall_ns: np.ndarray,
                timers: np.ndarray, behind_full: np.ndarray, answered: np.ndarray,
                headed: np.ndarray, s1_bytes: np.ndarray, s2_bytes: np.ndarray, hold_n: np.ndarray,
                hold_ms: np.ndarray, duration_s: np.ndarray) -> Columns:
    """The `fix_*` columns of the flows table (None for a flow without stalls). Per flow and
    side (columns 0 client, 1 server): `names` the endpoints, `stall_n`/`stall_ns` the stalls
    each side's writes suffered and their cost, `timers` each side's delayed-ACK timer (ms,
    NaN unknown), its stalls whose S1 was a full segment (`behind_full`), that were a
    request's last write before the answer (`answered`) and whose S1 was a header (`headed`,
    `header_then_body`), `s1_bytes`/`s2_bytes` the median S1 and S2; per flow: the Nagle
    holds without a delayed ACK and the duration.

    The side that lost more must change; it should coalesce its writes when most of its
    stalls split one message (`BASES`), else set TCP_NODELAY."""
    nflows = len(names)
    i = np.flatnonzero(stall_n.sum(axis=1))
    k = (stall_ns[i, 0] < stall_ns[i, 1]).astype(np.int64)
    n = stall_n[i, k]
    basis = np.select([behind_full[i, k] * 2 >= n, answered[i, k] * 2 >= n,
                       headed[i, k] * 2 >= n], [0, 1, 2], 3)
    one = _COALESCE[basis]
    notes = np.full(len(i), "", dtype=object)
    noted = np.flatnonzero((hold_n[i] > 0)
                           & (hold_ms[i] >= HOLD_SHARE * duration_s[i] * 1e3))
    notes[noted] = [_hold_note(*a) for a in zip(hold_n[i[noted]].tolist(),
                                                hold_ms[i[noted]].tolist(),
                                                duration_s[i[noted]].tolist())]
    endpoint = names[i, k]
    # each field a column at once; only the text one by one
    fields = {"side": _SIDES[k], "endpoint": endpoint, "action": _ACTIONS[one * 1],
              "alternative": _ACTIONS[1 - one * 1], "basis": _BASES[basis], "text": [
                  fix_text(side, name, None if timer != timer else timer, count, ms,
                           BASES[b], a, c, note, say_ms=json_ms)
                  for side, name, timer, count, ms, b, a, c, note in zip(
                      k.tolist(), endpoint.tolist(), timers[i, 1 - k].tolist(),
                      n.tolist(), (stall_ns[i, k] / 1e6).tolist(), basis.tolist(),
                      s1_bytes[i, k].tolist(), s2_bytes[i, k].tolist(), notes.tolist())]}
    out = {}
    for name in FIX_FIELDS:
        out[f"fix_{name}"] = np.full(nflows, None, dtype=object)
        out[f"fix_{name}"][i] = fields[name]
    return out


HOLD_SHARE = 0.1  # Nagle holds costing this share of a flow's duration are worth a mention
HOLD_TEXT_MS = 1.0  # ... and holds costing less than this in all are left out of the text


def _hold_note(count: int, hold_ms: float, duration_s: float,
               say_ms: Callable[[float], str] = lambda ms: f"{ms:.1f} ms") -> str:
    """A sentence on the Nagle holds without a delayed ACK of a flow, if they cost a
    noticeable share of it; else "" (`say_ms` writes the time: the JSON's in ms)."""
    if not count or hold_ms < HOLD_SHARE * duration_s * 1e3:
        return ""
    share = 100 * hold_ms / (duration_s * 1e3)
    return (f"Nagle also held {count} write{'s' if count != 1 else ''} for one round trip "
            f"each without a delayed ACK (up to {say_ms(hold_ms)}, {share:.0f}% of the flow), "
            f"which the same change saves.")


# what enabling quick ACKs on the peer of side k does, as the fix's text says it
_QUICKACK = tuple(f"enabling quick ACKs on the {peer} (TCP_QUICKACK on Linux, TcpAckFrequency=1 "
                  f"on Windows) only mitigates it" for peer in SIDES[::-1])
_SIDES = np.array(SIDES, dtype=object)
_ACTIONS = np.array(["set-tcp-nodelay", "coalesce-writes"], dtype=object)  # [one message]
_BASES = np.array(BASES, dtype=object)


def basis_text(basis: str, peer: str, s1_bytes: float, s2_bytes: float, count: int) -> str:
    """Why the action was chosen, as the fix says it: the `basis` (one of `BASES`) with the
    median S1 and S2 of the `count` stalls."""
    typically = "typically " if count != 1 else ""
    s1, s2 = counted(round(s1_bytes), "byte"), counted(round(s2_bytes), "byte")
    sizes = f"S1 was {typically}{s1} and S2 {s2}"
    if basis == BASES[0]:
        return (f"S1 was {typically}a full segment ({s1}) and S2 ({s2}) the tail held behind "
                f"it: the classic Nagle rule holds a write's tail behind an unacknowledged "
                f"full segment, so one write would not avoid it")
    if basis == BASES[1]:
        what = "request" if peer == SIDES[1] else "message"
        return (f"the {peer} answered right after S2 arrived, so S1 and S2 were one {what} "
                f"written in two pieces")
    if basis == BASES[2]:
        return (f"{sizes}, ready behind it and sent with the ACK: a "
                f"{round(s1_bytes)}-byte header or length prefix and its body, one message "
                f"written in two pieces")
    shape = "too long for a header" if s1_bytes > HEADER_BYTES else "no body behind a header"
    return (f"{sizes} ({shape}) and the {peer} did not answer right after S2: separate "
            f"messages, each to go at once")


def fix_text(k: int, endpoint: str, timer: float | None, count: int, lost_ms: float,
             basis: str, s1_bytes: float, s2_bytes: float, hold_note: str = "",
             say_ms: Callable[[float], str] = human_ms) -> str:
    """The fix's sentence: side `k` (0 the client, 1 the server), at `endpoint`, must
    coalesce the writes of one message or set TCP_NODELAY, as the `basis` says; why: the
    `count` writes that waited for the peer's delayed ACK (`timer` ms, None unknown) and the
    `lost_ms` they cost (written by `say_ms`: the JSON's sentences keep `json_ms`), the basis
    (`basis_text` of the median `s1_bytes` and `s2_bytes`), then `hold_note`."""
    side, peer = SIDES[k], SIDES[1 - k]
    if timer is None:
        timer_txt = "its timer"
    else:
        label = timer_name(timer)
        timer_txt = f"~{timer:.0f} ms, {label}" if label else f"~{timer:.0f} ms"
    cost = (f"{human_count(count)} write{'s' if count != 1 else ''} waited for the {peer}'s "
            f"delayed ACK ({timer_txt}), costing {say_ms(lost_ms)}")
    why = basis_text(basis, peer, s1_bytes, s2_bytes, count)
    if _COALESCE[BASES.index(basis)]:
        text = (f"The {side} {endpoint} should send each message in one write (build it in one "
                f"buffer, use writev, or MSG_MORE/TCP_CORK then uncork): {cost}. Coalesce, "
                f"because {why}. If it must send independent small messages, set TCP_NODELAY "
                f"on its socket instead; {_QUICKACK[k]}.")
    else:
        also = ("Writing whole segments only would also avoid the wait" if basis == BASES[0] else
                "Batching its small writes into full segments also avoids the wait")
        text = (f"The {side} {endpoint} should set TCP_NODELAY on its socket: {cost}. "
                f"TCP_NODELAY, because {why}. {also}; {_QUICKACK[k]}.")
    return text + " " + hold_note if hold_note else text


def timer_words(ms: float) -> str:
    """A measured delayed-ACK timer for people: "43.8 ms (typical of Linux)"."""
    label = timer_name(ms)
    return f"{ms:.1f} ms ({label})" if label else f"{ms:.1f} ms"


def fix_groups(flows: Columns, stalls: Columns,
               endpoints: Columns,
               ids: np.ndarray | list[int] | None = None) -> list[dict[str, Any]]:
    """One fix per program: the flows with stalls (all, or those of `ids`) grouped by who
    must change what -- the side, the program (a server by its address and port, a client
    by its address alone) and the action -- so that ten connections of one client with the
    same fault are told once. Takes a report's numpy columns (endpoints two
    rows per flow, client then server, in the flows' order; `stalls` those to count).

    Returns plain data, worst group first: per group its `side`, `host`, `endpoint` (the
    one endpoint when all its flows share it, else the host), `action`, its `basis` (that of
    the flows with most of the group's stalls), `flows` (ids, worst first), `stalls` and
    `lost_ms` of that side, the peer's delayed-ACK timer `delayed_ack_ms` (median, None
    unknown), and the fix's `text` for all of them."""
    rows = np.flatnonzero(np.asarray([s is not None for s in flows["fix_side"]], dtype=bool))
    if ids is not None:
        rows = rows[np.isin(flows["id"][rows], np.asarray(ids, dtype=np.int64))]
    if not len(rows):
        return []
    k = (flows["fix_side"][rows] == SIDES[1]).astype(np.int64)
    endpoint = flows["fix_endpoint"][rows]
    host = np.array([e.rpartition(":")[0] for e in endpoint.tolist()], dtype=object)
    # one program: a server by its address and port, a client by its address alone (each
    # of a client's connections has an ephemeral port of its own)
    program = np.where(k == 1, endpoint, host)
    key = np.array([f"{a} {h} {b}" for a, h, b in zip(
        k.tolist(), program.tolist(), flows["fix_action"][rows].tolist())], dtype=object)
    keys, group = np.unique(key, return_inverse=True)
    # the stalls of each flow's fixed side (j: the row in `rows` of each stall's flow)
    fid = flows["id"][rows]
    order = np.argsort(fid)
    j = order[np.minimum(np.searchsorted(fid, stalls["flow"], sorter=order), len(rows) - 1)]
    mine = (fid[j] == stalls["flow"]) & (stalls["sender"] == _SIDES[k[j]])
    flow_n = np.bincount(j[mine], minlength=len(rows))
    flow_ms = np.bincount(j[mine], weights=stalls["delay_ms"][mine], minlength=len(rows))
    timer = np.asarray(endpoints["delayed_ack_ms"], dtype=float)[2 * rows + 1 - k]
    # each group's flows (worst first) as runs of one order; per group medians and sums
    ng = len(keys)
    by_flow = np.lexsort((fid, -flow_ms, group))
    flow_at = np.searchsorted(group[by_flow], np.arange(ng + 1))
    known = ~np.isnan(timer)
    delayed_ms = _medians(timer[known], group[known], ng)
    counted_rows = np.flatnonzero(mine)
    stall_group = group[j[counted_rows]]
    s1_med, s2_med = (_medians(stalls[c][counted_rows].astype(float), stall_group, ng)
                      for c in ("small_bytes", "held_bytes"))
    group_n = np.bincount(group, weights=flow_n, minlength=ng)
    group_ms = np.bincount(group, weights=flow_ms, minlength=ng)
    holds, hold_ms, duration = (np.bincount(group, weights=flows[c][rows].astype(float),
                                            minlength=ng)
                                for c in ("nagle_holds", "nagle_hold_ms", "duration_s"))
    out = []
    for g in range(ng):
        m = by_flow[flow_at[g]:flow_at[g + 1]]
        side, r = int(k[m[0]]), rows[m]
        names = set(endpoint[m].tolist())
        name = endpoint[m[0]] if len(names) == 1 else host[m[0]]
        delayed = None if np.isnan(delayed_ms[g]) else round(float(delayed_ms[g]), 1)
        n, ms = int(group_n[g]), float(group_ms[g])
        note = _hold_note(int(holds[g]), float(hold_ms[g]), float(duration[g]), human_ms)
        bases = flows["fix_basis"][r]
        basis = bases[0] if len(m) == 1 else max(
            set(bases.tolist()), key=lambda b: (int(flow_n[m][bases == b].sum()), b))
        s1, s2 = (0.0 if np.isnan(v[g]) else float(v[g]) for v in (s1_med, s2_med))
        out.append({"side": SIDES[side], "host": host[m[0]], "endpoint": name,
                    "action": flows["fix_action"][r[0]], "basis": basis,
                    "flows": fid[m].tolist(), "stalls": n, "lost_ms": round(ms, 3),
                    "delayed_ack_ms": delayed,
                    "text": fix_text(side, name, delayed, n, ms, basis, s1, s2, note)})
    out.sort(key=lambda g: (-g["lost_ms"], g["flows"][0]))
    return out


def _medians(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """The median of `values` in each of the `n` groups (NaN where a group has none), as
    np.median gives it: one sort, no loop over the groups."""
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
    start = np.searchsorted(g, np.arange(n))
    count = np.searchsorted(g, np.arange(n), side="right") - start
    last = max(len(v) - 1, 0)
    lo = np.minimum(start + (count - 1) // 2, last)
    hi = np.minimum(start + count // 2, last)
    with np.errstate(invalid="ignore"):
        mid = (v[lo] + v[hi]) / 2 if len(v) else np.full(n, np.nan)
    return np.where(count > 0, mid, np.nan)
