"""Find Nagle / delayed-ACK stalls: the evidence chain of docs/DETECTION.md, vectorised.

For every data segment S2 of a direction X -> Y that is smaller than X's send MSS:
  1. the last packet Y sent before S2 is a pure ACK A that acknowledged new data, all of
     X's outstanding data, which ended in S1, the last data X sent before A ("coupled";
     found by the compiled pass nagleprobe/_detect.c, or `_chain_numpy`);
  2. S2 carries new data (not a retransmission), Y's window was open, X is not proven to
     have Nagle off, and S1 is small (any Nagle) or full-sized while X is not proven to use
     Minshall's rule (a classic-Nagle sender holds a tail behind a lone full segment);
  3. S2 follows A within the time a packet seen at the capture point takes to reach X and
     the answer to come back: the round trip to X, give or take a slack (causality bounds
     it on both sides);
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

from .decode import ACK, FIN, RST, SYN
from .flows import Flows
from .flows import grouped_median as _grouped_median

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
# The delayed-ACK timers of known stacks: (name, nominal ms, band low, band high). A delay in
# a band is named after the stack in every output and raises a stall's confidence.
TIMER_BANDS = (("Linux-like", 40.0, 30.0, 60.0),  # 40 ms minimum; grows with the ACK timeout
               ("macOS/BSD-like", 100.0, 85.0, 120.0),
               ("Windows-like", 200.0, 170.0, 230.0))
KNOWN_TIMERS_MS = tuple(nominal for _, nominal, _, _ in TIMER_BANDS)
CORK_MS, CORK_TOLERANCE_MS = 200.0, 15.0  # Linux releases corked data after 200 ms
RTT_UNKNOWN_PENALTY = 0.2  # confidence lost when no round trip to either side is known
RTT_FROM_DATA_PENALTY = 0.05  # ... when the round trips come from data/ACK pairs only

# Why a coupled late ACK was not a stall, tested in this order (the first that holds counts).
REASONS = {
    "retransmission": "S2 resent old data",
    "window": "the receiver's window was shut",
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


@dataclass
class Detection:
    """Stalls and Nagle holds (one entry each, numpy arrays) and per-flow, per-direction
    facts: arrays indexed [flow * 2 + dir], dir 0 = client data (server ACKs), 1 = server
    data."""

    stalls: dict[str, np.ndarray]
    holds: dict[str, np.ndarray]
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


def small(payload: np.ndarray, mss: np.ndarray) -> np.ndarray:
    """A partial segment: smaller than the MSS, or (TSO) larger but not a multiple of it."""
    m = np.maximum(mss, 1)
    return (payload > 0) & ((payload < m) | ((payload > m) & (payload % m != 0)))


def detect(f: Flows) -> Detection:
    """Run the evidence chain over every segment of every flow (the structural part
    compiled when built, see nagleprobe/_detect.c; else `_chain_numpy`)."""
    s = f.seg
    nflows = f.count
    mss = np.ascontiguousarray(f.flow["mss"].reshape(-1), dtype=np.int64)
    # round trip from the capture point to the client / server (unknown counts as 0),
    # indexed by flow * 2 + dir: the sender of dir 0 is the client
    rtt_to = np.nan_to_num(np.stack([f.flow["rtt_client_ms"], f.flow["rtt_server_ms"]], axis=1)
                           .reshape(-1) * 1e6).astype(np.int64)
    typical_to = np.nan_to_num(f.flow["rtt_typical_ms"].reshape(-1) * 1e6).astype(np.int64)
    chain = _chain_numpy if _compiled is None else _chain_compiled
    S2, A, S1, YA, answer, off, not_classic, lone_row, lone_data = chain(f, mss)

    fid, d, ts, pay = s["flow"], s["dir"], s["ts_ns"], s["payload"]
    key = fid[S2] * 2 + d[S2]
    s1_small = small(pay[S1], mss[key])
    to_sender, to_receiver = rtt_to[key], rtt_to[key ^ 1]
    ack_delay = ts[A] - ts[S1] - to_receiver
    reaction = ts[S2] - ts[A]
    # causality: S2 cannot be seen before the fastest the path has been, and is seen within
    # what the path usually takes (both give or take a slack)
    usual = np.maximum(to_sender, typical_to[key])
    slack = (REACTION_SLACK_MS * 1e6 + REACTION_SLACK_SHARE * to_sender).astype(np.int64)
    usual_slack = (REACTION_SLACK_MS * 1e6 + REACTION_SLACK_SHARE * usual).astype(np.int64)
    window = s["window"]
    shut = (window[A] == 0) | ((YA >= 0) & (window[np.maximum(YA, 0)] == 0))
    late_reaction = reaction > usual + usual_slack
    corked = np.abs(ts[S2] - ts[S1] - CORK_MS * 1e6) <= CORK_TOLERANCE_MS * 1e6

    # why each candidate is not a stall (index in REASONS, the first that applies; -1: it is),
    # first without the vetoes of a proven rule (nagle_off, not_classic), which come third
    rules = [~s["new_data"][S2], shut, None, None, reaction < to_sender - slack,
             late_reaction & corked, late_reaction, ack_delay < DELACK_MIN_MS * 1e6,
             ack_delay > DELACK_MAX_MS * 1e6]
    plain = np.select([r for r in rules if r is not None],
                      [j for j, r in enumerate(rules) if r is not None], -1)

    # A proof of Nagle off (or of Minshall's rule) vetoes a sender's stalls (those behind a
    # full segment) when it is seen at least as often as they are: an ACK the capture lost
    # makes one false proof, and must not wipe out a sender's stalls.
    would = plain == -1
    off_proven = (off > 0) & (off >= np.bincount(key[would], minlength=nflows * 2))
    not_classic_proven = (not_classic > 0) & (
        not_classic >= np.bincount(key[would & ~s1_small], minlength=nflows * 2))
    reason = plain.copy()
    vetoable = (plain < 0) | (plain > NOT_CLASSIC)
    vetoed = vetoable & off_proven[key]
    reason[vetoed] = NAGLE_OFF
    reason[vetoable & ~vetoed & ~s1_small & not_classic_proven[key]] = NOT_CLASSIC
    stall, hold = reason == -1, reason == NAGLE_HOLD

    late_seen = ts[A] - ts[S1] >= DELACK_MIN_MS * 1e6  # the ACK looked late where captured
    rejected = (reason >= 0) & late_seen
    why_not = np.bincount(key[rejected] * len(REASONS) + reason[rejected],
                          minlength=nflows * 2 * len(REASONS)).reshape(nflows * 2, len(REASONS))
    held = stall | hold
    behind_small = np.bincount(key[held & s1_small], minlength=nflows * 2)
    behind_full = np.bincount(key[held & ~s1_small], minlength=nflows * 2)
    flavour = np.select([off_proven, not_classic_proven & (behind_small > 0),
                         ~not_classic_proven & (behind_full > 0)],
                        ["off", "minshall", "classic"], "unknown").astype(object)

    def events(m: np.ndarray) -> dict[str, np.ndarray]:
        r2, ra, r1 = S2[m], A[m], S1[m]
        return {"flow": fid[r2], "dir": d[r2], "small_row": r1, "ack_row": ra,
                "released_row": r2, "small_frame": s["frame"][r1], "ack_frame": s["frame"][ra],
                "released_frame": s["frame"][r2], "small_ns": ts[r1], "ack_ns": ts[ra],
                "released_ns": ts[r2], "held_bytes": pay[r2], "small_bytes": pay[r1],
                "behind_full": ~s1_small[m], "stall_ns": ts[r2] - ts[r1],
                "ack_delay_ns": ack_delay[m], "reaction_ns": reaction[m]}

    stalls, holds = events(stall), events(hold)
    stalls["confidence"] = _confidence(stalls, f.flow["rtt_how"])
    nxt = answer[stall]
    answered = (nxt >= 0) & (ts[np.maximum(nxt, 0)] - ts[S2[stall]]
                             <= to_receiver[stall] + ANSWER_MS * 1_000_000)

    # The receiver's ACK behaviour: its pure ACKs of a lone segment, late or immediate.
    data_key = fid[lone_data] * 2 + d[lone_data]
    delay_at = ts[lone_row] - ts[lone_data] - rtt_to[data_key ^ 1]
    late = (delay_at >= DELACK_MIN_MS * 1e6) & (delay_at <= DELACK_MAX_MS * 1e6)
    quick = delay_at <= QUICK_ACK_MS * 1e6
    late_n = np.bincount(data_key[late], minlength=nflows * 2)
    late_median = np.full(nflows * 2, np.nan)
    if late.any():
        groups, med, _, _ = _grouped_median(delay_at[late] / 1e6, data_key[late])
        late_median[groups] = med
    quick_acks = np.bincount(data_key[quick], minlength=nflows * 2)
    return Detection(stalls=stalls, holds=holds, nagle_off_proofs=off,
                     not_classic_proofs=not_classic, held_behind_small=behind_small,
                     held_behind_full=behind_full, flavour=flavour, late_acks=late_n,
                     late_ack_median_ms=late_median, quick_acks=quick_acks, why_not=why_not,
                     answered=answered)


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
    nflows = f.count
    key = fid * 2 + d
    pay, flags, seq, ack, end = s["payload"], s["flags"], s["seq"], s["ack"], s["end"]
    is_small = lambda r: small(pay[r], mss[key[r]])  # noqa: E731

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

    # a small new segment sent while the previous one, small or full, was unacknowledged
    nr = np.flatnonzero(s["new_data"] & ~s["keepalive"])
    nr = nr[is_small(nr)]
    other = f.before(nr)[1]
    p = f.before(nr, data=True)[0]
    pp = np.maximum(p, 0)
    y_ack_seen = np.where(other >= 0, s["ack_max"][np.maximum(other, 0)], -1)  # Y's ACKs so far
    unacked = (p >= 0) & s["new_data"][pp] & (end[pp] == seq[nr]) & (y_ack_seen < end[pp])
    p_small = is_small(pp)
    off = np.bincount(key[nr[unacked & p_small]], minlength=nflows * 2)
    not_classic = np.bincount(key[nr[unacked & ~p_small]], minlength=nflows * 2)

    # pure ACKs of a lone segment (no larger than the MSS, the only data outstanding)
    ar = np.flatnonzero((pay == 0) & ((flags & (SYN | FIN | RST | ACK)) == ACK))
    ps = f.before(ar)[0]
    D = f.before(ar, data=True)[1]  # the data the ACK answers
    dd = np.maximum(D, 0)
    own_prev_ack = np.where(ps >= 0, s["ack_max"][np.maximum(ps, 0)], -1)
    lone = ((D >= 0) & (pay[dd] <= np.maximum(mss[key[dd]], 1)) & (ack[ar] >= end[dd])
            & (own_prev_ack <= seq[dd]) & (ack[ar] > own_prev_ack) & (ps < D))
    return rows, A, S1, YA, answer, off, not_classic, ar[lone], D[lone]


def timer_name(ms: float | None) -> str:
    """The stack whose delayed-ACK timer a delay matches ("Linux-like"), or ""."""
    if ms is None:
        return ""
    for name, _, low, high in TIMER_BANDS:
        if low <= ms <= high:
            return name
    return ""


def _confidence(st: dict[str, np.ndarray], rtt_how: np.ndarray) -> np.ndarray:
    """Repetition with a stable delay, and a delay at a known timer, raise confidence; round
    trips known only from data, or not at all, lower it."""
    m = len(st["flow"])
    if not m:
        return np.zeros(0)
    delay = st["ack_delay_ns"] / 1e6
    _, med, count, group = _grouped_median(delay, st["flow"] * 2 + st["dir"])
    med, count = med[group], count[group]
    conf = np.where((count >= 3) & (np.abs(delay - med) <= 0.25 * med), 0.9, 0.6)
    near_timer = np.zeros(m, dtype=bool)
    for _, _, low, high in TIMER_BANDS:
        near_timer |= (delay >= low) & (delay <= high)
    how = np.asarray(rtt_how, dtype=object)  # per flow
    penalty = (RTT_UNKNOWN_PENALTY * (how == "none")
               + RTT_FROM_DATA_PENALTY * (how != "handshake")).astype(float)
    conf = conf - penalty[st["flow"]]
    return np.round(np.minimum(conf + 0.05 * near_timer, 0.99), 2)
