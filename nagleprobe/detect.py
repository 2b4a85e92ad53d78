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
import pandas as pd

from .flows import ACK, FIN, RST, SYN, Flows

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
    """Run the evidence chain over every segment of every flow."""
    s = f.seg
    n = len(s["flow"])
    fid, d = s["flow"], s["dir"]
    ts = s["ts_ns"]
    nflows = f.count
    key = fid * 2 + d

    mss = f.flow["mss"].reshape(-1)
    # round trip from the capture point to the client / server (unknown counts as 0)
    rtt_to = np.nan_to_num(np.stack([f.flow["rtt_client_ms"], f.flow["rtt_server_ms"]], axis=1)
                           .reshape(-1) * 1e6).astype(np.int64)
    rtt_to_sender = rtt_to[key]  # key is flow*2+dir; dir 0 sender = client
    rtt_to_receiver = rtt_to[key ^ 1]
    mss_row = mss[key] if n else mss

    pay = s["payload"]
    flags = s["flags"].astype(np.int64)
    pure_ack = (pay == 0) & ((flags & (SYN | FIN | RST)) == 0) & ((flags & ACK) != 0)
    small = (pay > 0) & (pay % np.maximum(mss_row, 1) != 0)
    win_zero = s["window"] == 0

    A = s["prev_other"]  # Y's last packet before S2
    a = np.maximum(A, 0)
    S1 = s["prev_data"]  # X's last data before S2
    s1 = np.maximum(S1, 0)
    y_before_a = s["prev_same"][a]  # Y's packet before A
    ya = np.maximum(y_before_a, 0)
    ack_prev = np.where(y_before_a >= 0, s["ack_max"][ya], -1)  # Y's ACK before A

    obs_delay = ts[a] - ts[s1]
    ack_delay = obs_delay - rtt_to_receiver
    reaction = ts - ts[a]
    bound = rtt_to_sender + (REACTION_SLACK_MS * 1e6 + 0.25 * rtt_to_sender).astype(np.int64)
    path = rtt_to_sender + rtt_to_receiver
    in_timer = (ack_delay >= np.maximum(DELACK_MIN_MS * 1e6, path)) & (ack_delay <= DELACK_MAX_MS * 1e6)

    cand = (
        s["new_data"] & (pay < mss_row)
        & (A >= 0) & pure_ack[a]
        & (s["ack"][a] == s["sent_before"])          # A covered everything outstanding
        & (s["ack"][a] > ack_prev)                   # ...and acknowledged something new
        & (S1 >= 0) & (S1 < A)                       # no data of X between A and S2
        & small[s1] & (s["end"][s1] == s["ack"][a])  # the outstanding data ended in small S1
        & in_timer
        & (reaction >= 0) & (reaction <= bound)
        & ~win_zero[a] & ~((y_before_a >= 0) & win_zero[ya])
    )
    rows = np.flatnonzero(cand)

    # the peer answered S2 at once (S1 + S2 formed one message it was waiting for): its
    # next data comes before X sends more, within the round trip plus a little processing
    y_data = _next_row(s, rows, other=True)
    x_data = _next_row(s, rows, other=False)
    answered = (y_data >= 0) & ((x_data < 0) | (y_data < x_data))
    yd = np.maximum(y_data, 0)
    answered &= ts[yd] - ts[rows] <= rtt_to_receiver[rows] + ANSWER_MS * 1_000_000

    stalls = {
        "flow": fid[rows], "dir": d[rows],
        "small_row": S1[rows], "ack_row": A[rows], "released_row": rows,
        "small_frame": s["frame"][S1[rows]], "ack_frame": s["frame"][A[rows]],
        "released_frame": s["frame"][rows],
        "small_ns": ts[S1[rows]], "ack_ns": ts[A[rows]], "released_ns": ts[rows],
        "held_bytes": pay[rows], "small_bytes": pay[S1[rows]],
        "stall_ns": ts[rows] - ts[S1[rows]],
        "ack_delay_ns": ack_delay[rows], "reaction_ns": reaction[rows],
    }
    stalls["confidence"] = _confidence(stalls)

    # Nagle off is proven by a small new segment sent while an earlier small one was unacked.
    p = s["prev_data"]
    pp = np.maximum(p, 0)
    y_ack_seen = np.where(A >= 0, s["ack_max"][a], -1)  # every ACK Y had sent before
    proof = (s["new_data"] & small & ~s["keepalive"] & (p >= 0) & small[pp] & s["new_data"][pp]
             & (s["end"][pp] == s["seq"]) & (y_ack_seen < s["end"][pp]))
    proofs = np.bincount(key[proof], minlength=nflows * 2)

    # The receiver's ACK behaviour: pure ACKs of a lone small segment, late or immediate.
    D = s["prev_other_data"]  # for an ACK row: the data it answers
    dd = np.maximum(D, 0)
    ps = s["prev_same"]
    own_prev_ack = np.where(ps >= 0, s["ack_max"][np.maximum(ps, 0)], -1)
    lone = (pure_ack & (D >= 0) & small[dd] & (s["ack"] >= s["end"][dd])
            & (own_prev_ack <= s["seq"][dd]) & (s["ack"] > own_prev_ack) & (ps < D))
    lone_rows = np.flatnonzero(lone)
    delay_at = ts[lone_rows] - ts[D[lone_rows]] - rtt_to[key[lone_rows]]
    data_key = key[lone_rows] ^ 1  # the direction whose data was acknowledged
    late = (delay_at >= DELACK_MIN_MS * 1e6) & (delay_at <= DELACK_MAX_MS * 1e6)
    quick = delay_at <= QUICK_ACK_MS * 1e6
    late_n = np.bincount(data_key[late], minlength=nflows * 2)
    late_median = np.full(nflows * 2, np.nan)
    if late.any():
        med = pd.Series(delay_at[late] / 1e6).groupby(data_key[late]).median()
        late_median[med.index.to_numpy()] = med.to_numpy()
    quick_acks = np.bincount(data_key[quick], minlength=nflows * 2)
    return Detection(stalls=stalls, nagle_off_proofs=proofs, late_acks=late_n,
                     late_ack_median_ms=late_median, quick_acks=quick_acks, answered=answered)


def _next_row(s: dict[str, np.ndarray], rows: np.ndarray, other: bool) -> np.ndarray:
    """The first data-carrying row after each of `rows` in the same flow, sent by the other
    direction (`other`) or by the same one; -1 if none."""
    n = len(s["flow"])
    out = np.full(len(rows), -1, dtype=np.int64)
    fid, d = s["flow"], s["dir"]
    for k in (0, 1):
        sel = (d[rows] != k) if other else (d[rows] == k)
        if not sel.any():
            continue
        idx = np.where((d == k) & (s["payload"] > 0), np.arange(n), n)
        after = np.r_[np.minimum.accumulate(idx[::-1])[::-1][1:], n]
        cand = after[rows[sel]]
        ok = cand < n
        ok[ok] = fid[cand[ok]] == fid[rows[sel]][ok]
        out[np.flatnonzero(sel)[ok]] = cand[ok]
    return out


def _confidence(st: dict[str, np.ndarray]) -> np.ndarray:
    """Repetition with a stable delay, and a delay at a known timer, raise confidence."""
    m = len(st["flow"])
    if not m:
        return np.zeros(0)
    delay = st["ack_delay_ns"] / 1e6
    g = pd.Series(delay).groupby(st["flow"] * 2 + st["dir"])
    med = g.transform("median").to_numpy()
    count = g.transform("size").to_numpy()
    conf = np.where((count >= 3) & (np.abs(delay - med) <= 0.25 * med), 0.9, 0.6)
    near_timer = np.zeros(m, dtype=bool)
    for t in KNOWN_TIMERS_MS:
        near_timer |= np.abs(delay - t) <= 0.15 * t
    return np.round(np.minimum(conf + 0.05 * near_timer, 0.99), 2)
