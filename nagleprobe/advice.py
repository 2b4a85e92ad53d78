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
from .jsonrows import factorize

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
    notes = _hold_notes(hold_n[i], hold_ms[i], duration_s[i])
    endpoint = names[i, k]
    fields = {"side": _SIDES[k], "endpoint": endpoint, "action": _ACTIONS[one * 1],
              "alternative": _ACTIONS[1 - one * 1], "basis": _BASES[basis],
              "text": fix_texts(k, endpoint, timers[i, 1 - k], n, stall_ns[i, k] / 1e6, basis,
                                s1_bytes[i, k], s2_bytes[i, k], notes, say_ms=json_ms)}
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


def _hold_notes(count: np.ndarray, hold_ms: np.ndarray, duration_s: np.ndarray,
                say_ms: Callable[[float], str] | None = None) -> np.ndarray:
    """`_hold_note` per row of these columns ("" where the holds are not worth a mention),
    written only for the rows that get one."""
    notes = np.full(len(count), "", dtype=object)
    noted = np.flatnonzero((count > 0) & (hold_ms >= HOLD_SHARE * duration_s * 1e3))
    say = {} if say_ms is None else {"say_ms": say_ms}
    notes[noted] = [_hold_note(*a, **say) for a in zip(
        count[noted].tolist(), hold_ms[noted].tolist(), duration_s[noted].tolist())]
    return notes


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


_HOLE = "\x00"  # where a row's own endpoint and time lost go in a sentence written once


def fix_texts(k: np.ndarray, endpoint: np.ndarray, timer: np.ndarray, count: np.ndarray,
              lost_ms: np.ndarray, basis: np.ndarray, s1_bytes: np.ndarray,
              s2_bytes: np.ndarray, hold_note: np.ndarray,
              say_ms: Callable[[float], str] = human_ms) -> np.ndarray:
    """`fix_text` of each row of these columns (`basis` indices into BASES, `timer` NaN
    where unknown), as an object array. Rows differ mostly in their endpoint and the time
    they lost: each distinct rest is written once by `fix_text`, with holes for those two,
    and the rows' own values are joined into it column-wise."""
    k, count, basis = (np.asarray(x, dtype=np.int64) for x in (k, count, basis))
    timers = [None if t != t else t for t in np.asarray(timer, dtype=float).tolist()]
    pieces: dict[tuple, int] = {}
    code = np.fromiter((pieces.setdefault(key, len(pieces)) for key in zip(
        k.tolist(), timers, count.tolist(), basis.tolist(), np.asarray(s1_bytes).tolist(),
        np.asarray(s2_bytes).tolist())), dtype=np.int64, count=len(k))
    parts = np.array([fix_text(side, _HOLE, t, n, 0.0, BASES[b], s1, s2,
                               say_ms=lambda _: _HOLE).split(_HOLE)
                      for side, t, n, b, s1, s2 in pieces] or np.zeros((0, 3)), dtype=object)
    text = parts[code, 0] + np.asarray(endpoint, dtype=object) + parts[code, 1] \
        + np.array([say_ms(ms) for ms in np.asarray(lost_ms, dtype=float).tolist()],
                   dtype=object) + parts[code, 2]
    notes = np.asarray(hold_note, dtype=object)
    noted = np.flatnonzero(notes != "")
    text[noted] = text[noted] + " " + notes[noted]
    return text


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
    rows = np.flatnonzero(np.not_equal(flows["fix_side"], None))
    if ids is not None:
        rows = rows[np.isin(flows["id"][rows], np.asarray(ids, dtype=np.int64))]
    if not len(rows):
        return []
    k = (flows["fix_side"][rows] == SIDES[1]).astype(np.int64)
    endpoint = flows["fix_endpoint"][rows]
    ecode, names = factorize(endpoint)
    hcode, hosts = factorize([e.rpartition(":")[0] for e in names])
    host = np.asarray(hosts, dtype=object)[hcode[ecode]]
    # one program: a server by its address and port, a client by its address alone (each
    # of a client's connections has an ephemeral port of its own)
    program = np.where(k == 1, ecode, hcode[ecode])
    action = flows["fix_action"][rows]
    acode, actions = factorize(action)
    _, group = np.unique((program * 2 + k) * len(actions) + acode, return_inverse=True)
    group = group.reshape(-1)
    # the stalls of each flow's fixed side (j: the row in `rows` of each stall's flow)
    fid = flows["id"][rows]
    row_of = np.full(max(int(fid.max()), int(stalls["flow"].max(initial=0))) + 1, -1)
    row_of[fid] = np.arange(len(rows))
    j = row_of[stalls["flow"]]
    mine = (j >= 0) & ((stalls["sender"] == SIDES[1]) == (k[j] == 1))
    flow_n = np.bincount(j[mine], minlength=len(rows))
    flow_ms = np.bincount(j[mine], weights=stalls["delay_ms"][mine], minlength=len(rows))
    timer = np.asarray(endpoints["delayed_ack_ms"], dtype=float)[2 * rows + 1 - k]
    # each group's flows (worst first) as runs of one order; per group medians and sums
    ng = int(group.max()) + 1
    by_flow = np.lexsort((fid, -flow_ms, group))
    flow_at = np.searchsorted(group[by_flow], np.arange(ng + 1))
    first = by_flow[flow_at[:-1]]  # each group's worst flow
    known = ~np.isnan(timer)
    delayed_ms = _medians(timer[known], group[known], ng)
    counted_rows = np.flatnonzero(mine)
    stall_group = group[j[counted_rows]]
    s1_med, s2_med = (np.nan_to_num(_medians(stalls[c][counted_rows].astype(float),
                                             stall_group, ng), nan=0.0)
                      for c in ("small_bytes", "held_bytes"))
    group_n = np.bincount(group, weights=flow_n, minlength=ng).astype(np.int64)
    group_ms = np.bincount(group, weights=flow_ms, minlength=ng)
    holds, hold_ms, duration = (np.bincount(group, weights=flows[c][rows].astype(float),
                                            minlength=ng)
                                for c in ("nagle_holds", "nagle_hold_ms", "duration_s"))
    notes = _hold_notes(holds.astype(np.int64), hold_ms, duration, human_ms)
    # the endpoint when all the group's flows share it, else the host
    runs = ecode[by_flow]
    one_name = (np.minimum.reduceat(runs, flow_at[:-1])
                == np.maximum.reduceat(runs, flow_at[:-1]))
    name = np.where(one_name, endpoint[first], host[first])
    # the basis of the flows with most of the group's stalls (a tie: the last by name)
    basis = _most_stalls(np.select([flows["fix_basis"][rows] == b for b in BASES],
                                   range(len(BASES)), -1), group, flow_n, ng)
    delayed = [None if d != d else round(d, 1) for d in delayed_ms.tolist()]
    side = k[first]
    text = fix_texts(side, name, np.array([np.nan if d is None else d for d in delayed]),
                     group_n, group_ms, basis, s1_med, s2_med, notes)
    lost = [round(ms, 3) for ms in group_ms.tolist()]
    fids = fid[by_flow].tolist()
    worst = np.lexsort((fid[first], -np.array(lost)))  # costliest first
    row = [x.tolist() for x in (side, host[first], name, action[first], basis, group_n, text)]
    return [{"side": SIDES[row[0][g]], "host": row[1][g], "endpoint": row[2][g],
             "action": row[3][g], "basis": BASES[row[4][g]],
             "flows": fids[flow_at[g]:flow_at[g + 1]], "stalls": row[5][g], "lost_ms": lost[g],
             "delayed_ack_ms": delayed[g], "text": row[6][g]} for g in worst.tolist()]


def _most_stalls(basis: np.ndarray, group: np.ndarray, flow_n: np.ndarray, ng: int
                 ) -> np.ndarray:
    """Per group of flows, the basis (index into BASES) of its flows with most stalls
    (`flow_n` per flow); of bases with as many, the last by name."""
    at = group * len(BASES) + basis
    weight = np.bincount(at, weights=flow_n, minlength=ng * len(BASES)).reshape(ng, -1)
    present = np.bincount(at, minlength=ng * len(BASES)).reshape(ng, -1) > 0
    best, most = np.full(ng, -1), np.full(ng, -1.0)
    for b in sorted(range(len(BASES)), key=BASES.__getitem__):
        better = present[:, b] & (weight[:, b] >= most)
        best, most = np.where(better, b, best), np.where(better, weight[:, b], most)
    return best


def _medians(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """The median of `values` in each of the `n` groups (NaN where a group has none), as
    np.median gives it: one sort, no loop over the groups."""
    v, g = _in_groups(values, groups)
    start = np.searchsorted(g, np.arange(n))
    count = np.searchsorted(g, np.arange(n), side="right") - start
    last = max(len(v) - 1, 0)
    lo = np.minimum(start + (count - 1) // 2, last)
    hi = np.minimum(start + count // 2, last)
    with np.errstate(invalid="ignore"):
        mid = (v[lo] + v[hi]) / 2 if len(v) else np.full(n, np.nan)
    return np.where(count > 0, mid, np.nan)


def _in_groups(values: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`values` and their `groups` sorted by group, then value: where the values are whole
    numbers from 0 to 2**31 (byte counts), by one sort of an integer key of both (a third
    of a lexsort's time on a million stalls), else by a lexsort."""
    if len(values) and values.min() >= 0 and values.max() < 2**31 and groups.max() < 2**31 \
            and np.array_equal(values, np.floor(values)):
        span = int(values.max()) + 1
        key = np.sort(groups.astype(np.int64) * span + values.astype(np.int64))
        return (key % span).astype(values.dtype), key // span
    order = np.lexsort((values, groups))
    return values[order], groups[order]
