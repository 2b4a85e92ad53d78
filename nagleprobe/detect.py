"""Find Nagle / delayed-ACK stalls: the evidence chain of DETECTION.md, vectorised.

For every new small data segment S2 of a direction X -> Y:
  1. S2 carries new data and is smaller than X's send MSS;
  2. the last packet Y sent before S2 is a pure ACK A that acknowledged all of X's
     outstanding data and advanced Y's ACK (not a window update);
  3. the outstanding data ended in a small segment S1, the last data X sent before A
     and before S2 (Linux senders, Minshall's rule);
  4. Y's ACK delay, A - S1 less the capture point's round trip to Y, lies in the
     range of delayed-ACK timers and well above the path round trip;
  5. S2 follows A within the capture point's round trip to X plus a small slack
     (it left X as soon as the ACK arrived);
  6. Y's window was open before A (a zero window is a receive-window stall).
The stall costs S2 - S1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .flows import ACK, FIN, RST, SYN, Flows

try:
    from . import _detect as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

DELACK_MIN_MS = 25.0  # below this an ACK is not a delayed ACK (Linux's minimum is 40 ms)
DELACK_MAX_MS = 600.0  # RFC 1122 caps the delay at 500 ms; a little margin for jitter
REACTION_SLACK_MS = 2.0  # time for the sender's stack to react to the ACK, beyond the path
ANSWER_MS = 10.0  # the peer's data within this (beyond the path) answers the released segment
QUICK_ACK_MS = 5.0  # an ACK of a lone small segment within this (beyond the path) is immediate
KNOWN_TIMERS_MS = (40.0, 100.0, 200.0)  # Linux minimum, macOS/FreeBSD, Windows


@dataclass
class Detection:
    """Stalls (one entry per stall, numpy arrays) and per-flow, per-direction facts."""

    stalls: dict[str, np.ndarray]
    # arrays indexed [flow * 2 + dir], dir 0 = client data (server ACKs), 1 = server data
    nagle_off_proofs: np.ndarray
    late_acks: np.ndarray  # delayed ACKs the receiver of that direction's data sent
    late_ack_median_ms: np.ndarray  # their median delay (NaN if none): the receiver's timer
    quick_acks: np.ndarray
    answered: np.ndarray  # per stall: the peer sent data right after S2


def detect(f: Flows) -> Detection:
    """Run the evidence chain over every segment of every flow (compiled when built, see
    nagleprobe/_detect.c; else `_chain_numpy`)."""
    s = f.seg
    nflows = f.count
    mss = np.ascontiguousarray(f.flow["mss"].reshape(-1), dtype=np.int64)
    # round trip from the capture point to the client / server (unknown counts as 0),
    # indexed by flow * 2 + dir: the sender of dir 0 is the client
    rtt_to = np.nan_to_num(np.stack([f.flow["rtt_client_ms"], f.flow["rtt_server_ms"]], axis=1)
                           .reshape(-1) * 1e6).astype(np.int64)
    chain = _chain_numpy if _compiled is None else _chain_compiled
    rows, A, S1, ack_delay, reaction, answered, proofs, data_key, delay_at = chain(f, mss, rtt_to)

    fid, d, ts, pay = s["flow"], s["dir"], s["ts_ns"], s["payload"]
    stalls = {
        "flow": fid[rows], "dir": d[rows],
        "small_row": S1, "ack_row": A, "released_row": rows,
        "small_frame": s["frame"][S1], "ack_frame": s["frame"][A],
        "released_frame": s["frame"][rows],
        "small_ns": ts[S1], "ack_ns": ts[A], "released_ns": ts[rows],
        "held_bytes": pay[rows], "small_bytes": pay[S1],
        "stall_ns": ts[rows] - ts[S1],
        "ack_delay_ns": ack_delay, "reaction_ns": reaction,
    }
    stalls["confidence"] = _confidence(stalls)

    # The receiver's ACK behaviour: its ACKs of a lone small segment, late or immediate.
    late = (delay_at >= DELACK_MIN_MS * 1e6) & (delay_at <= DELACK_MAX_MS * 1e6)
    quick = delay_at <= QUICK_ACK_MS * 1e6
    late_n = np.bincount(data_key[late], minlength=nflows * 2)
    late_median = np.full(nflows * 2, np.nan)
    if late.any():
        groups, med, _, _ = _grouped_median(delay_at[late] / 1e6, data_key[late])
        late_median[groups] = med
    quick_acks = np.bincount(data_key[quick], minlength=nflows * 2)
    return Detection(stalls=stalls, nagle_off_proofs=proofs, late_acks=late_n,
                     late_ack_median_ms=late_median, quick_acks=quick_acks, answered=answered)


def _chain_compiled(f: Flows, mss: np.ndarray, rtt_to: np.ndarray) -> tuple:
    """`_chain_numpy` in one compiled pass (nagleprobe/_detect.c)."""
    s = f.seg
    n = len(s["flow"])
    i64 = lambda k: np.ascontiguousarray(s[k], dtype=np.int64)  # noqa: E731
    u16 = lambda k: np.ascontiguousarray(s[k], dtype=np.uint16)  # noqa: E731
    u8 = lambda k: np.ascontiguousarray(s[k]).view(np.uint8)  # noqa: E731
    out = [np.empty(n, dtype=np.int64) for _ in range(5)]
    answered = np.empty(n, dtype=bool)
    proofs = np.empty(len(mss), dtype=np.int64)
    lone = [np.empty(n, dtype=np.int64) for _ in range(2)]
    m, k = _compiled.chain(
        i64("flow"), np.ascontiguousarray(s["dir"], dtype=np.int8).view(np.uint8), i64("ts_ns"),
        i64("payload"), u16("flags"), i64("seq"), i64("ack"), i64("end"), i64("sent_before"),
        u8("new_data"), u8("keepalive"), u16("window"), i64("ack_max"), mss, rtt_to,
        *out, answered.view(np.uint8), proofs, *lone)
    return (*(o[:m].copy() for o in out), answered[:m].copy(), proofs,
            *(x[:k].copy() for x in lone))


def _chain_numpy(f: Flows, mss: np.ndarray, rtt_to: np.ndarray) -> tuple:
    """The evidence chain with numpy alone (the reference for the compiled version): the
    stalls (rows of S2, A and S1, ACK delay, reaction, whether the peer answered), the
    Nagle-off proofs per flow * 2 + dir, and the lone-ACK delays (the direction of the data
    acknowledged, the delay less the round trip). Each step narrows the rows still in
    question, so the costly lookups run on few rows."""
    s = f.seg
    fid, d, ts = s["flow"], s["dir"], s["ts_ns"]
    nflows = f.count
    key = fid * 2 + d
    pay, flags, seq, ack, end = s["payload"], s["flags"], s["seq"], s["ack"], s["end"]

    def pure_ack(r: np.ndarray) -> np.ndarray:
        return (pay[r] == 0) & ((flags[r] & (SYN | FIN | RST)) == 0) & ((flags[r] & ACK) != 0)

    def small(r: np.ndarray) -> np.ndarray:  # a partial segment (TSO: not a multiple of MSS)
        p, m = pay[r], np.maximum(mss[key[r]], 1)
        out = (p > 0) & (p < m)
        big = np.flatnonzero(p > m)
        out[big] = p[big] % m[big] != 0
        return out

    # 1. S2: new data smaller than the sender's MSS
    rows = np.flatnonzero(s["new_data"])
    rows = rows[pay[rows] < mss[key[rows]]]
    # 2./3. A: Y's last packet before S2; S1: X's last data before S2, and before A
    A = f.before(rows)[1]
    S1 = f.before(rows, data=True)[0]
    keep = (A >= 0) & (S1 >= 0) & (S1 < A)
    rows, A, S1 = rows[keep], A[keep], S1[keep]
    keep = (pure_ack(A) & (ack[A] == s["sent_before"][rows])  # A covered all outstanding data
            & small(S1) & (end[S1] == ack[A]))  # ...which ended in the small S1
    rows, A, S1 = rows[keep], A[keep], S1[keep]
    YA = f.before(A)[0]  # Y's packet before A
    ya = np.maximum(YA, 0)
    ack_prev = np.where(YA >= 0, s["ack_max"][ya], -1)
    # 4./5. Y's ACK delay in the timer range; S2 right after A
    to_sender, to_receiver = rtt_to[key[rows]], rtt_to[key[rows] ^ 1]
    ack_delay = ts[A] - ts[S1] - to_receiver
    reaction = ts[rows] - ts[A]
    bound = to_sender + (REACTION_SLACK_MS * 1e6 + 0.25 * to_sender).astype(np.int64)
    path = to_sender + to_receiver
    keep = ((ack[A] > ack_prev)  # A acknowledged something new (not a window update)
            & (ack_delay >= np.maximum(DELACK_MIN_MS * 1e6, path))
            & (ack_delay <= DELACK_MAX_MS * 1e6)
            & (reaction >= 0) & (reaction <= bound)
            # 6. Y's window was open before A
            & (s["window"][A] != 0) & ~((YA >= 0) & (s["window"][ya] == 0)))
    rows, A, S1 = rows[keep], A[keep], S1[keep]
    ack_delay, reaction = ack_delay[keep], reaction[keep]

    # the peer answered S2 at once (S1 + S2 formed one message it was waiting for): its
    # next data comes before X sends more, within the round trip plus a little processing
    x_data, y_data = f.after(rows, data=True)
    answered = (y_data >= 0) & ((x_data < 0) | (y_data < x_data))
    answered &= (ts[np.maximum(y_data, 0)] - ts[rows]
                 <= rtt_to[key[rows] ^ 1] + ANSWER_MS * 1_000_000)

    # Nagle off is proven by a small new segment sent while an earlier small one was unacked.
    nr = np.flatnonzero(s["new_data"] & ~s["keepalive"])
    nr = nr[small(nr)]
    other = f.before(nr)[1]
    p = f.before(nr, data=True)[0]
    pp = np.maximum(p, 0)
    y_ack_seen = np.where(other >= 0, s["ack_max"][np.maximum(other, 0)], -1)  # Y's ACKs so far
    proof = ((p >= 0) & small(pp) & s["new_data"][pp] & (end[pp] == seq[nr])
             & (y_ack_seen < end[pp]))
    proofs = np.bincount(key[nr[proof]], minlength=nflows * 2)

    # pure ACKs of a lone small segment
    ar = np.flatnonzero((pay == 0) & ((flags & (SYN | FIN | RST | ACK)) == ACK))
    ps = f.before(ar)[0]
    D = f.before(ar, data=True)[1]  # the data the ACK answers
    dd = np.maximum(D, 0)
    own_prev_ack = np.where(ps >= 0, s["ack_max"][np.maximum(ps, 0)], -1)
    lone = ((D >= 0) & small(dd) & (ack[ar] >= end[dd])
            & (own_prev_ack <= seq[dd]) & (ack[ar] > own_prev_ack) & (ps < D))
    ar, D = ar[lone], D[lone]
    delay_at = ts[ar] - ts[D] - rtt_to[key[ar]]
    return rows, A, S1, ack_delay, reaction, answered, proofs, key[ar] ^ 1, delay_at


def _confidence(st: dict[str, np.ndarray]) -> np.ndarray:
    """Repetition with a stable delay, and a delay at a known timer, raise confidence."""
    m = len(st["flow"])
    if not m:
        return np.zeros(0)
    delay = st["ack_delay_ns"] / 1e6
    _, med, count, group = _grouped_median(delay, st["flow"] * 2 + st["dir"])
    med, count = med[group], count[group]
    conf = np.where((count >= 3) & (np.abs(delay - med) <= 0.25 * med), 0.9, 0.6)
    near_timer = np.zeros(m, dtype=bool)
    for t in KNOWN_TIMERS_MS:
        near_timer |= np.abs(delay - t) <= 0.15 * t
    return np.round(np.minimum(conf + 0.05 * near_timer, 0.99), 2)


def _grouped_median(values: np.ndarray, groups: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct `groups` (ascending); for each, the median of its `values` (the mean of
    the middle two for an even count, as pandas computes it) and their count; and for each
    value, the index of its group among them."""
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
    new = np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, bool)
    first = np.flatnonzero(new)
    count = np.diff(np.r_[first, len(g)])
    upper, lower = v[first + count // 2], v[first + (count - 1) // 2]
    inverse = np.empty(len(g), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return g[first], (upper + lower) / 2, count, inverse
