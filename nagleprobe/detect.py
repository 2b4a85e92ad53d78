"""Find Nagle / delayed-ACK stalls: the evidence chain of docs/DETECTION.md, vectorised.

For every data segment S2 of a direction X -> Y that is smaller than X's send MSS:
  1. the last packet Y sent before S2 is a pure ACK A that acknowledged new data, all of
     X's outstanding data, which ended in S1, the last data X sent before A ("coupled";
     found by the compiled pass nagleprobe/_detect.c, or `_chain_numpy`);
  2. S2 carries new data (not a retransmission), Y's window was open with room for S2
     after S1 (else the window held S2), X is not proven to have Nagle off, and S1 is
     small (any Nagle) or full-sized while X is not proven to use Minshall's rule (a
     classic-Nagle sender holds a tail behind a lone full segment);
  3. S2 follows A within the path's round trip from the capture point to X, give or take
     a slack (causality bounds it on both sides; turnarounds, which include X's
     application, only from above);
  4. Y's ACK delay, A - S1 less the capture point's round trip to Y (the part of the delay
     the path explains), lies in the range of delayed-ACK timers.
The stall costs S2 - S1. A candidate that passes 1-3 with an ACK delay the path explains
(below the timer range) is a Nagle hold without a delayed ACK: one round trip, reported
apart, never a stall. Each coupled late ACK that is not a stall is counted by the first
reason (`REASONS`) that rules it out, so the report can say why not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .columns import Columns
from .decode import ACK, FIN, RST, SYN
from .flows import Flows
from .roundtrips import grouped_median as _grouped_median

try:
    from . import _detect as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

DELACK_MIN_MS = 25.0  # below this an ACK delay is not a delayed-ACK timer (Linux: 40 ms minimum)
DELACK_MAX_MS = 600.0  # RFC 1122 caps the delay at 500 ms; a little margin for jitter
REACTION_SLACK_MS = 2.0  # the sender's stack reacting to the ACK, beyond the path
REACTION_SLACK_SHARE = 0.25  # ... plus this share of the round trip to the sender (jitter)
ANSWER_MS = 10.0  # the peer's data within this (beyond the path) answers the released segment
QUICK_ACK_MS = 5.0  # an ACK of a lone segment within this (beyond the path) is immediate
# The delayed-ACK timers of known stacks: (OS, nominal ms, band low, band high). A delay in a
# band is called typical of that OS in every output (a delay says nothing certain about the
# host: any stack can be tuned to it) and raises a stall's confidence.
TIMER_BANDS = (("Linux", 40.0, 30.0, 60.0),  # 40 ms minimum; grows with the ACK timeout
               ("macOS/BSD", 100.0, 85.0, 120.0),
               ("Windows", 200.0, 170.0, 230.0))
KNOWN_TIMERS_MS = tuple(nominal for _, nominal, _, _ in TIMER_BANDS)
CORK_MS, CORK_TOLERANCE_MS = 200.0, 15.0  # Linux releases corked data after 200 ms
RTT_UNKNOWN_PENALTY = 0.2  # confidence lost when no round trip to either side is known
RTT_FROM_DATA_PENALTY = 0.05  # ... when the round trips come from data/ACK pairs only

# Why a coupled late ACK was not a stall, tested in this order (the first that holds counts).
REASONS = {
    "retransmission": "S2 resent old data",
    "window": "the receiver's window was shut, or full: it had no room for S2 before the "
              "ACK (window-limited, not Nagle)",
    "nagle_off": "the sender has Nagle off (it sent a small segment while another was "
                 "unacknowledged)",
    "not_classic": "S1 was full-sized and the sender does not hold a tail behind full "
                   "segments (it sent a small segment while a full one was unacknowledged)",
    "before_ack_could_arrive": "S2 left before the ACK could have reached the sender",
    "cork_timer": "S2 left about 200 ms after S1, long after the ACK (a TCP_CORK timer)",
    "think_time": "S2 was written after the ACK had arrived (think time)",
    "nagle_hold": "the path explains the ACK's delay: a one-round-trip Nagle hold",
    "delay_out_of_range": f"the ACK delay, less the path, exceeds {DELACK_MAX_MS:.0f} ms",
}
NAGLE_OFF, NOT_CLASSIC, NAGLE_HOLD = (list(REASONS).index(r) for r in (
    "nagle_off", "not_classic", "nagle_hold"))
FLAVOURS = ("classic", "minshall", "off", "unknown")
_FLAVOUR_TEXT = np.array(FLAVOURS, dtype=object)  # (each row refers to one of these str)


@dataclass
class Detection:
    """Stalls and Nagle holds (one entry each, numpy arrays) and per-flow, per-direction
    facts: arrays indexed [flow * 2 + dir], dir 0 = client data (server ACKs), 1 = server
    data."""

    stalls: Columns
    holds: Columns  # (of the candidates given one by one, see `decide`)
    hold_count: np.ndarray  # Nagle holds of each direction's sender
    hold_ns: np.ndarray  # ... and what they cost (S1 -> S2), in all
    nagle_off_proofs: np.ndarray  # small segments sent while a small one was unacknowledged
    not_classic_proofs: np.ndarray  # ... while a full-sized one was unacknowledged
    held_behind_small: np.ndarray  # stalls and holds whose S1 was small
    held_behind_full: np.ndarray  # ... full-sized (only a classic-Nagle sender does that)
    flavour: np.ndarray  # one of FLAVOURS
    late_acks: np.ndarray  # delayed ACKs the receiver of that direction's data sent
    late_ack_median_ms: np.ndarray  # their median delay (NaN if none): the receiver's timer
    quick_acks: np.ndarray
    why_not: np.ndarray  # [flow * 2 + dir, reason]: coupled late ACKs rejected, by REASONS
    answered: np.ndarray  # per stall: the peer sent data right after S2


@dataclass
class Params:
    """What the rule takes from the flow facts (`params`), per flow * 2 + dir: its sender's
    MSS, the round trip from the capture point to its sender (ns, 0 if unknown), what that
    path usually takes at most (ns) and whether the round trip is only an upper bound
    (`roundtrips.round_trips`); per flow, the confidence lost for how its round trips are known."""

    mss: np.ndarray
    rtt_to: np.ndarray
    typical_to: np.ndarray
    bound_to: np.ndarray
    penalty: np.ndarray


# A coupled candidate (S2, the late ACK A, S1) as the rule reads it, before any threshold:
# its direction (flow * 2 + dir), the three packets' frames and times, S2's and S1's
# bytes, whether S2 was new data, whether Y's window was shut or had no room for S2 before
# A (`_window_full`), and the time of the peer's data answering S2 (-1: none;
# ANSWER_PENDING: not seen yet, the connection goes on).
CANDIDATE_COLUMNS = ("key", "small_frame", "ack_frame", "released_frame", "small_ns", "ack_ns",
                     "released_ns", "held_bytes", "small_bytes", "new_data", "shut", "answer_ns")
ANSWER_PENDING = -2


@dataclass
class Evidence:
    """What the chain found, thresholds not yet applied (`evidence`): the coupled candidates
    (CANDIDATE_COLUMNS), the Nagle-off and not-classic proofs per flow * 2 + dir, and the
    pure ACKs of a lone segment (the data's direction and the time from the data to the
    ACK, ns)."""

    candidates: Columns
    off: np.ndarray
    not_classic: np.ndarray
    lone_key: np.ndarray
    lone_gap: np.ndarray


def small(payload: np.ndarray, mss: np.ndarray) -> np.ndarray:
    """A partial segment: smaller than the MSS, or (TSO) larger but not a multiple of it."""
    m = np.maximum(mss, 1)
    return (payload > 0) & ((payload < m) | ((payload > m) & (payload % m != 0)))


def detect(f: Flows) -> Detection:
    """Run the evidence chain over every segment of every flow (the structural part
    compiled when built, see nagleprobe/_detect.c; else `_chain_numpy`) and apply the rule."""
    p = params(f.flow)
    return decide(evidence(f, p.mss), p, f.count)


def params(flow: Columns) -> Params:
    """The rule's inputs from flow facts (`Flows.flow`: mss, the round trips, rtt_how)."""
    mss = np.ascontiguousarray(flow["mss"].reshape(-1), dtype=np.int64)
    # round trip from the capture point to the client / server (unknown counts as 0),
    # indexed by flow * 2 + dir: the sender of dir 0 is the client
    rtt_to = np.nan_to_num(np.stack([flow["rtt_client_ms"], flow["rtt_server_ms"]], axis=1)
                           .reshape(-1) * 1e6).astype(np.int64)
    typical_to = np.nan_to_num(flow["rtt_typical_ms"].reshape(-1) * 1e6).astype(np.int64)
    bound_to = np.asarray(flow["rtt_bound"], dtype=bool).reshape(-1)
    return Params(mss, rtt_to, typical_to, bound_to, _penalty(flow["rtt_how"]))


def _penalty(rtt_how: np.ndarray) -> np.ndarray:
    """Per flow, the confidence lost for how its round trips are known."""
    how = np.asarray(rtt_how, dtype=object)
    return (RTT_UNKNOWN_PENALTY * (how == "none")
            + RTT_FROM_DATA_PENALTY * (how != "handshake")).astype(float)


def evidence(f: Flows, mss: np.ndarray, owned: slice | None = None,
             open_end: bool = False) -> Evidence:
    """The coupled candidates, proofs and lone-segment ACKs of the flows (`mss`: per flow *
    2 + dir). With `owned` (a range of rows), only those whose S2, proof or ACK lies in it;
    with `open_end`, packets after the last row may follow, so a candidate with no data
    after S2 has its answer ANSWER_PENDING."""
    s = f.seg
    chain = _chain_numpy if _compiled is None else _chain_compiled
    S2, A, S1, YA, answer, off, not_classic, lone_row, lone_data = chain(f, mss)
    if owned is not None:
        lo, hi = owned.start, owned.stop
        m = (S2 >= lo) & (S2 < hi)
        S2, A, S1, YA, answer = S2[m], A[m], S1[m], YA[m], answer[m]
        m = (lone_row >= lo) & (lone_row < hi)
        lone_row, lone_data = lone_row[m], lone_data[m]
        off_out, nc_out = _proofs(f, mss, np.r_[0:lo, hi:len(s["flow"])])
        off, not_classic = off - off_out, not_classic - nc_out
    fid, d, ts, pay, frame = s["flow"], s["dir"], s["ts_ns"], s["payload"], s["frame"]
    window = s["window"]
    answer_ns = np.where(answer >= 0, ts[np.maximum(answer, 0)], -1)
    if open_end and len(S2):  # no data after S2 yet: the answer may come later
        last_data = np.full(f.count, -1, dtype=np.int64)
        data = np.flatnonzero(pay > 0)
        last_data[fid[data]] = data
        answer_ns[S2 == last_data[fid[S2]]] = ANSWER_PENDING
    key = fid[S2] * 2 + d[S2]
    cand = {"key": key, "small_frame": frame[S1], "ack_frame": frame[A],
            "released_frame": frame[S2], "small_ns": ts[S1], "ack_ns": ts[A],
            "released_ns": ts[S2], "held_bytes": pay[S2], "small_bytes": pay[S1],
            "new_data": s["new_data"][S2],
            "shut": (window[A] == 0) | ((YA >= 0) & (window[np.maximum(YA, 0)] == 0))
                    | _window_full(f, key, S1, S2, YA),
            "answer_ns": answer_ns}
    return Evidence(cand, off, not_classic, fid[lone_data] * 2 + d[lone_data],
                    ts[lone_row] - ts[lone_data])


def _window_full(f: Flows, key: np.ndarray, S1: np.ndarray, S2: np.ndarray,
                 YA: np.ndarray) -> np.ndarray:
    """Whether the window Y last offered before its ACK A (in YA) had no room for S2 after
    S1: the sender was held by the window, not by Nagle. Known only where Y's window
    scale is (a SYN's window is never scaled)."""
    s = f.seg
    ya = np.maximum(YA, 0)
    scale = f.flow["wscale"].reshape(-1)[key ^ 1]
    syn = (s["flags"][ya] & SYN) != 0
    shift = np.where(syn, 0, np.maximum(scale, 0))
    right_edge = s["ack"][ya] + (s["window"][ya].astype(np.int64) << shift)
    known = (YA >= 0) & ((s["flags"][ya] & ACK) != 0) & (syn | (scale >= 0))
    return known & (s["end"][S1] + s["payload"][S2] > right_edge)


def classify(c: Columns, p: Params) -> Columns:
    """Apply the thresholds to candidates (CANDIDATE_COLUMNS): why each is not a stall
    ("plain": index in REASONS of the first rule that rules it out, -1 if none, before the
    vetoes of a proven Nagle rule), whether S1 was small, the ACK's delay and S2's reaction
    (ns), whether the ACK looked late where captured, and the four rules that depend on the
    round trips ("early": S2 before the ACK could arrive, "slow": S2 later than the path
    explains, "short" and "long": the ACK delay below or above the timers' range)."""
    key = c["key"]
    s1_small = small(c["small_bytes"], p.mss[key])
    to_sender, to_receiver = p.rtt_to[key], p.rtt_to[key ^ 1]
    gap = c["ack_ns"] - c["small_ns"]
    ack_delay = gap - to_receiver
    reaction = c["released_ns"] - c["ack_ns"]
    # causality: S2 is seen no sooner than the fastest the path has been (0 where only
    # turnarounds bound it) and within what it usually takes, both give or take a slack
    usual = np.maximum(to_sender, p.typical_to[key])
    slack = (REACTION_SLACK_MS * 1e6 + REACTION_SLACK_SHARE * to_sender).astype(np.int64)
    usual_slack = (REACTION_SLACK_MS * 1e6 + REACTION_SLACK_SHARE * usual).astype(np.int64)
    early = ~p.bound_to[key] & (reaction < to_sender - slack)
    slow = reaction > usual + usual_slack
    corked = np.abs(c["released_ns"] - c["small_ns"] - CORK_MS * 1e6) <= CORK_TOLERANCE_MS * 1e6
    short = ack_delay < DELACK_MIN_MS * 1e6
    long = ack_delay > DELACK_MAX_MS * 1e6
    # why each candidate is not a stall (index in REASONS, the first that applies; -1: it is),
    # first without the vetoes of a proven rule (nagle_off, not_classic), which come third
    rules = [~c["new_data"], c["shut"], None, None, early, slow & corked, slow, short, long]
    plain = np.select([r for r in rules if r is not None],
                      [j for j, r in enumerate(rules) if r is not None], -1)
    return {"plain": plain, "s1_small": s1_small, "ack_delay": ack_delay, "reaction": reaction,
            "late_seen": gap >= DELACK_MIN_MS * 1e6,  # the ACK looked late where captured
            "early": early, "slow": slow, "short": short, "long": long}


def decide(ev: Evidence, p: Params, nflows: int, groups: Columns | None = None,
           lone_groups: Columns | None = None) -> Detection:
    """The stalls, holds and per-direction verdicts of the evidence. A connection analysed
    in pieces (nagleprobe.pieces) gives, besides the candidates it kept one by one, the
    others already classified in `groups` (key, plain, s1_small, late_seen, count, and
    stall_ns: their S1 -> S2 gaps in all), and its lone-segment ACKs already classified in
    `lone_groups` (per flow * 2 + dir: late, quick; and the late ones' gaps as a histogram:
    hist_key, hist_gap, hist_count). `holds` lists the holds among the candidates only."""
    c = ev.candidates
    k = classify(c, p)
    n = len(c["key"])
    key, plain, s1_small, late_seen = c["key"], k["plain"], k["s1_small"], k["late_seen"]
    gap_ns = c["released_ns"] - c["small_ns"]
    weight = None
    if groups is not None and len(groups["key"]):
        key = np.r_[key, groups["key"]]
        plain = np.r_[plain, groups["plain"]]
        s1_small = np.r_[s1_small, groups["s1_small"]]
        late_seen = np.r_[late_seen, groups["late_seen"]]
        gap_ns = np.r_[gap_ns, groups["stall_ns"]]
        weight = np.r_[np.ones(n, np.int64), groups["count"]]
    nkeys = nflows * 2

    def count(m: np.ndarray, by: np.ndarray | None = None, size: int = nkeys) -> np.ndarray:
        out = np.bincount(key[m] if by is None else by, minlength=size,
                          weights=None if weight is None else weight[m])
        return out.astype(np.int64)

    # A proof of Nagle off (or of Minshall's rule) vetoes a sender's stalls (those behind a
    # full segment) when it is seen at least as often as they are: an ACK the capture lost
    # makes one false proof, and must not wipe out a sender's stalls.
    would = plain == -1
    off_proven = (ev.off > 0) & (ev.off >= count(would))
    not_classic_proven = (ev.not_classic > 0) & (ev.not_classic >= count(would & ~s1_small))
    reason = plain.copy()
    vetoable = (plain < 0) | (plain > NOT_CLASSIC)
    vetoed = vetoable & off_proven[key]
    reason[vetoed] = NAGLE_OFF
    reason[vetoable & ~vetoed & ~s1_small & not_classic_proven[key]] = NOT_CLASSIC
    stall, hold = reason == -1, reason == NAGLE_HOLD

    rejected = (reason >= 0) & late_seen
    why_not = count(rejected, key[rejected] * len(REASONS) + reason[rejected],
                    nkeys * len(REASONS)).reshape(nkeys, len(REASONS))
    held = stall | hold
    behind_small = count(held & s1_small)
    behind_full = count(held & ~s1_small)
    flavour = _FLAVOUR_TEXT[np.select([off_proven, not_classic_proven & (behind_small > 0),
                                       ~not_classic_proven & (behind_full > 0)],
                                      [FLAVOURS.index(f) for f in ("off", "minshall", "classic")],
                                      FLAVOURS.index("unknown"))]
    hold_ns = np.bincount(key[hold], weights=gap_ns[hold], minlength=nkeys).astype(np.int64)

    def events(m: np.ndarray) -> Columns:
        kk = c["key"][m]
        return {"flow": kk >> 1, "dir": (kk & 1).astype(np.int8),
                **{name: c[name][m] for name in ("small_frame", "ack_frame", "released_frame",
                                                 "small_ns", "ack_ns", "released_ns",
                                                 "held_bytes", "small_bytes")},
                "behind_full": ~k["s1_small"][m], "stall_ns": gap_ns[:n][m],
                "ack_delay_ns": k["ack_delay"][m], "reaction_ns": k["reaction"][m]}

    stalls, holds = events(stall[:n]), events(hold[:n])
    stalls["confidence"] = _confidence(stalls, p.penalty)
    answer = c["answer_ns"][stall[:n]]
    answered = (answer >= 0) & (answer - stalls["released_ns"]
                                <= p.rtt_to[(stalls["flow"] * 2 + stalls["dir"]) ^ 1]
                                + ANSWER_MS * 1_000_000)

    # The receiver's ACK behaviour: its pure ACKs of a lone segment, late or immediate.
    data_key = ev.lone_key
    cls = ack_classes(data_key, ev.lone_gap, p)
    delay_at, quick = cls["delay"], cls["quick"]
    late = cls["not_early"] & cls["not_long"]
    late_n = np.bincount(data_key[late], minlength=nkeys)
    quick_acks = np.bincount(data_key[quick], minlength=nkeys)
    late_median = np.full(nkeys, np.nan)
    at = data_key[late]
    if lone_groups is None:
        if len(at):
            groups_, med, _ = _median_ms(delay_at[late], at)
            late_median[groups_] = med
    else:
        late_n = late_n + lone_groups["late"]
        quick_acks = quick_acks + lone_groups["quick"]
        hk = lone_groups["hist_key"]
        values = np.r_[delay_at[late] / 1e6, (lone_groups["hist_gap"] - p.rtt_to[hk ^ 1]) / 1e6]
        at = np.r_[at, hk]
        many = np.r_[np.ones(int(late.sum()), np.int64), lone_groups["hist_count"]]
        if len(values):
            groups_, med = weighted_median(values, at, many)
            late_median[groups_] = med
    return Detection(stalls=stalls, holds=holds, hold_count=count(hold), hold_ns=hold_ns,
                     nagle_off_proofs=ev.off, not_classic_proofs=ev.not_classic,
                     held_behind_small=behind_small, held_behind_full=behind_full,
                     flavour=flavour, late_acks=late_n, late_ack_median_ms=late_median,
                     quick_acks=quick_acks, why_not=why_not, answered=answered)


def ack_classes(key: np.ndarray, gap: np.ndarray, p: Params) -> Columns:
    """Pure ACKs of a lone segment (the data's direction `key`, the time from the data to
    the ACK, ns): their delay less the path to the receiver (ns), and whether it is within
    QUICK_ACK_MS ("quick"), at least DELACK_MIN_MS ("not_early"), at most DELACK_MAX_MS
    ("not_long"): a delayed ACK is both of the last two."""
    delay = gap - p.rtt_to[key ^ 1]
    return {"delay": delay, "quick": delay <= QUICK_ACK_MS * 1e6,
            "not_early": delay >= DELACK_MIN_MS * 1e6, "not_long": delay <= DELACK_MAX_MS * 1e6}


def weighted_median(values: np.ndarray, groups: np.ndarray, weights: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `groups` and the median of each one's `values`, each value counted
    `weights` times (> 0): what `roundtrips.grouped_median` gives for the values repeated."""
    order = np.lexsort((values, groups))
    v, g, w = values[order], groups[order], weights[order].astype(np.int64)
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    upto = np.cumsum(w)  # values up to and including each, over all groups
    before = np.r_[0, upto][first]  # values of the earlier groups
    total = np.diff(np.r_[before, upto[-1]])
    pick = lambda rank: v[np.searchsorted(upto, before + rank, side="right")]  # noqa: E731
    return g[first], (pick(total // 2) + pick((total - 1) // 2)) / 2


def _median_ms(ns: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`roundtrips.grouped_median` of int64 nanoseconds in ms (ns / 1e6), without the values'
    groups: the distinct `groups` (ascending, >= 0), each one's median and count. Each value
    and its group sort as one int64 (one sort, where lexsort makes two and gathers)."""
    whole = ns.dtype.kind == "i"
    lo = int(ns.min()) if whole else 0
    bits = (int(ns.max()) - lo).bit_length() if whole else 63  # of the values less `lo`
    if bits > 62 or int(groups.max()) >= 1 << (62 - bits):  # floats, or centuries apart
        g, med, count, _ = _grouped_median(ns / 1e6, groups)
        return g, med, count
    # (they come in row order, so grouped by flow already: timsort takes the runs as they are)
    key = np.sort((groups << bits) | (ns - lo), kind="stable")
    v = ((key & ((1 << bits) - 1)) + lo) / 1e6
    n = np.bincount(groups)  # (sorted by group: each group's values one run, in group order)
    g = np.flatnonzero(n)
    count, first = n[g], (np.cumsum(n) - n)[g]
    return g, (v[first + count // 2] + v[first + (count - 1) // 2]) / 2, count


def _chain_compiled(f: Flows, mss: np.ndarray) -> tuple:
    """`_chain_numpy` in one compiled pass (nagleprobe/_detect.c)."""
    s = f.seg
    n = len(s["flow"])
    i64 = lambda k: np.ascontiguousarray(s[k], dtype=np.int64)  # noqa: E731
    u8 = lambda k: np.ascontiguousarray(s[k]).view(np.uint8)  # noqa: E731
    out = [np.empty(n, dtype=np.int64) for _ in range(5)]
    proofs = [np.empty(len(mss), dtype=np.int64) for _ in range(2)]
    lone = [np.empty(n, dtype=np.int64) for _ in range(2)]
    m, k = _compiled.chain(
        i64("flow"), np.ascontiguousarray(s["dir"], dtype=np.int8).view(np.uint8), i64("ts_ns"),
        i64("payload"), np.ascontiguousarray(s["flags"], dtype=np.uint16), i64("seq"),
        i64("ack"), i64("end"), i64("sent_before"), u8("keepalive"), u8("new_data"),
        i64("ack_max"), mss, *out, *proofs, *lone)
    return (*(o[:m].copy() for o in out), *proofs, *(x[:k].copy() for x in lone))


def _chain_numpy(f: Flows, mss: np.ndarray) -> tuple:
    """The structural chain with numpy alone (the reference for the compiled version): the
    coupled candidates (rows of S2, A, S1, Y's packet before A or -1, Y's answering data
    row or -1), the Nagle-off and not_classic proofs per flow * 2 + dir, and the pure ACKs
    of a lone segment (their rows and the data's rows). Each step narrows the rows still in
    question, so the costly lookups run on few rows."""
    s = f.seg
    fid, d = s["flow"], s["dir"]
    key = fid * 2 + d
    pay, flags, seq, ack, end = s["payload"], s["flags"], s["seq"], s["ack"], s["end"]

    # coupled: S2 smaller than the MSS; A Y's last packet before S2; S1 X's last data
    rows = np.flatnonzero((pay > 0) & ~s["keepalive"])
    rows = rows[pay[rows] < mss[key[rows]]]
    A = f.before(rows)[1]
    S1 = f.before(rows, data=True)[0]
    keep = (A >= 0) & (S1 >= 0) & (S1 < A)
    rows, A, S1 = rows[keep], A[keep], S1[keep]
    keep = ((pay[A] == 0) & ((flags[A] & (SYN | FIN | RST)) == 0) & ((flags[A] & ACK) != 0)
            & (ack[A] == s["sent_before"][rows]) & (end[S1] == ack[A]))
    rows, A, S1 = rows[keep], A[keep], S1[keep]
    YA = f.before(A)[0]  # Y's packet before A
    ack_prev = np.where(YA >= 0, s["ack_max"][np.maximum(YA, 0)], -1)
    keep = ack[A] > ack_prev  # A acknowledged something new (not a window update)
    rows, A, S1, YA = rows[keep], A[keep], S1[keep], YA[keep]
    x_data, y_data = f.after(rows, data=True)
    answer = np.where((y_data >= 0) & ((x_data < 0) | (y_data < x_data)), y_data, -1)

    off, not_classic = _proofs(f, mss, np.arange(len(fid)))

    # pure ACKs of a lone segment (no larger than the MSS, the only data outstanding)
    ar = np.flatnonzero((pay == 0) & ((flags & (SYN | FIN | RST | ACK)) == ACK))
    ps = f.before(ar)[0]
    D = f.before(ar, data=True)[1]  # the data the ACK answers
    dd = np.maximum(D, 0)
    own_prev_ack = np.where(ps >= 0, s["ack_max"][np.maximum(ps, 0)], -1)
    lone = ((D >= 0) & (pay[dd] <= np.maximum(mss[key[dd]], 1)) & (ack[ar] >= end[dd])
            & (own_prev_ack <= seq[dd]) & (ack[ar] > own_prev_ack) & (ps < D))
    return rows, A, S1, YA, answer, off, not_classic, ar[lone], D[lone]


def _proofs(f: Flows, mss: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Among `rows`, the small new segments sent while the previous one, small (Nagle off)
    or full-sized (not classic Nagle), was unacknowledged: how many per flow * 2 + dir."""
    s = f.seg
    key = s["flow"] * 2 + s["dir"]
    pay, seq, end = s["payload"], s["seq"], s["end"]
    is_small = lambda r: small(pay[r], mss[key[r]])  # noqa: E731
    nr = rows[s["new_data"][rows] & ~s["keepalive"][rows]]
    nr = nr[is_small(nr)]
    other = f.before(nr)[1]
    p = f.before(nr, data=True)[0]
    pp = np.maximum(p, 0)
    y_ack_seen = np.where(other >= 0, s["ack_max"][np.maximum(other, 0)], -1)  # Y's ACKs so far
    unacked = (p >= 0) & s["new_data"][pp] & (end[pp] == seq[nr]) & (y_ack_seen < end[pp])
    p_small = is_small(pp)
    return (np.bincount(key[nr[unacked & p_small]], minlength=len(mss)),
            np.bincount(key[nr[unacked & ~p_small]], minlength=len(mss)))


def timer_name(ms: float | None) -> str:
    """Whose delayed-ACK timer a delay is typical of ("typical of Linux"), or ""."""
    if ms is None:
        return ""
    for name, _, low, high in TIMER_BANDS:
        if low <= ms <= high:
            return f"typical of {name}"
    return ""


def _confidence(st: Columns, penalty: np.ndarray) -> np.ndarray:
    """Repetition with a stable delay, and a delay at a known timer, raise confidence; round
    trips known only from data, or not at all, lower it (`penalty` per flow, or each flow's
    rtt_how)."""
    m = len(st["flow"])
    if not m:
        return np.zeros(0)
    delay = st["ack_delay_ns"] / 1e6
    key = st["flow"] * 2 + st["dir"]
    keys, med, count = _median_ms(st["ack_delay_ns"], key)
    group = np.zeros(keys[-1] + 1, dtype=np.int64)
    group[keys] = np.arange(len(keys))
    med, count = med[group[key]], count[group[key]]
    conf = np.where((count >= 3) & (np.abs(delay - med) <= 0.25 * med), 0.9, 0.6)
    near_timer = np.zeros(m, dtype=bool)
    for _, _, low, high in TIMER_BANDS:
        near_timer |= (delay >= low) & (delay <= high)
    if penalty.dtype == object:  # rtt_how
        penalty = _penalty(penalty)
    conf = conf - penalty[st["flow"]]
    return np.round(np.minimum(conf + 0.05 * near_timer, 0.99), 2)
