"""Round trips from the capture point: the samples a connection gives and what they say.

The handshake times the path to each side (SYN -> SYN/ACK: to the server and back; SYN/ACK
-> the client's ACK: to the client). Data answered by a pure ACK within UNDELAYED_MS times
it too (`turn_samples`); other turnarounds (a delayed ACK, an answer) only bound it from
above (`late_samples`). `round_trips` makes of them each flow's round trips, the reaction
window's upper end (`rtt_typical_ms`) and where the capture point sits (the vantage).
`Samples` carries a direction's samples from piece to piece of a long connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import Columns

try:
    from . import _flows as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

UNDELAYED_MS = 25.0  # a data -> pure ACK turnaround below this cannot include a delayed ACK
NEAR_MS = 0.1  # a round trip this short (ms) means the capture point sits at that endpoint


def round_trips(rs: np.ndarray, rc: np.ndarray, count: np.ndarray, smallest: np.ndarray,
                upper: np.ndarray, late_keys: np.ndarray, late_low: np.ndarray,
                late_high: np.ndarray) -> Columns:
    """The round trips from the capture point and the vantage, per flow: from the
    handshake's (`rs` to the server and back, `rc` to the client, ms, NaN if unknown) and
    the data -> pure ACK turnarounds of each flow * 2 + dir that are the path (`turn_stats`:
    how many, the smallest and the upper quartile, ns). Where a direction has none, the
    other turnarounds (`late_samples`: their keys, smallest and upper quartile) bound the
    path from above only: an answer includes the peer's application, an ACK may have been
    delayed. The smallest sample of each side counts: one inflated by ARP, a queue or the
    peer's think time cannot hide the path. `rtt_typical_ms` is the reaction window's upper
    end: how long the path usually takes at most, the upper quartile of the path's data
    samples (one inflated sample does not move it) or the handshake's if slower, or where
    only bounds are known the smallest of them. `rtt_bound` marks those sides (no handshake, no path
    sample): their round trip may be anything up to the bound."""
    path = np.full(len(count), np.nan)
    known = count > 0
    path[known] = smallest[known] / 1e6
    hs = np.stack([rs, rc], axis=1).reshape(-1)  # per flow * 2 + dir: its receiver's side
    bound = np.full(len(count), np.nan)
    bound[late_keys] = late_low / 1e6
    bound_only = np.isnan(path) & np.isnan(hs) & ~np.isnan(bound)
    turn = np.where(known, path, bound)
    typical = np.where(known, np.fmax(upper / 1e6, hs), np.where(np.isnan(hs), bound, hs))
    has_data = ~np.isnan(turn)
    from_hs = ~np.isnan(rc) & ~np.isnan(rs)
    from_data = has_data[1::2] & has_data[0::2]
    rc = np.fmin(rc, turn[1::2])
    rs = np.fmin(rs, turn[0::2])
    out = {"rtt_client_ms": rc, "rtt_server_ms": rs, "rtt_ms": rc + rs,
           "rtt_typical_ms": typical.reshape(-1, 2)[:, ::-1],  # [client, server]
           "rtt_bound": bound_only.reshape(-1, 2)[:, ::-1],
           "rtt_how": np.select([from_hs, from_data | ~np.isnan(rc + rs)],
                                ["handshake", "data/ACK pairs"], "none").astype(object)}
    total = rc + rs
    near_c = rc <= np.maximum(NEAR_MS, 0.1 * total)
    near_s = rs <= np.maximum(NEAR_MS, 0.1 * total)
    out["vantage"] = np.select([np.isnan(total), near_c, near_s], ["unknown", "client", "server"],
                               "middle").astype(object)
    out["both_near"] = near_c & near_s
    return out


def late_samples(seg: Columns, late: np.ndarray, mss: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The data rows `late` whose first ACK is not the path (`turn_samples`; `mss`: each
    one's send MSS), as upper bounds on it: where that ACK acknowledged two full segments or
    more (sent at once), it; else the peer's answer that acknowledges the row (the ACK
    itself if it carries data, else the peer's next data). The usable rows and their
    turnarounds (ns), in row order."""
    if not len(late):
        return late, np.zeros(0, dtype=np.int64)
    ts = seg["ts_ns"]
    by = seg["acked_by"][late]
    turn_ns = ts[by] - ts[late]
    answer = by.copy()  # an ACK that carries data is the answer (its neighbours unneeded)
    pure = np.flatnonzero(seg["payload"][by] == 0)
    two_full = np.zeros(len(late), dtype=bool)
    two_full[pure] = _acks_two_full(seg, by[pure], mss[pure])
    pure = pure[~two_full[pure]]
    answer[pure] = _next_in_direction(seg, by[pure], data=True)
    ok = ~two_full & (answer >= 0)
    ok[ok] = seg["ack"][answer[ok]] >= seg["end"][late[ok]]
    turn_ns[ok] = ts[answer[ok]] - ts[late[ok]]
    use = two_full | ok
    return late[use], turn_ns[use]


def turn_stats(seg: Columns, ngroups: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The data -> pure ACK turnarounds that are the path (`turn_samples`), per direction
    group (flow * 2 + dir): how many, the smallest and the upper quartile (`sample_stats`),
    in nanoseconds; and the other rows with data and an ACK (later, or carried by data), in
    row order. Compiled (nagleprobe/_flows.c) when built, else `_turn_stats_numpy`."""
    if _compiled is None:
        return _turn_stats_numpy(seg, ngroups)
    n = len(seg["flow"])
    count, smallest, upper = (np.zeros(ngroups, dtype=np.int64) for _ in range(3))
    late = np.empty(n, dtype=np.int64)
    k = _compiled.turn_stats(
        np.ascontiguousarray(seg["flow"], np.int64), np.ascontiguousarray(seg["dir"], np.uint8),
        *(np.ascontiguousarray(seg[c], np.int64) for c in ("ts_ns", "payload", "acked_by")),
        int(UNDELAYED_MS * 1e6), TYPICAL_SAMPLES, count, smallest, upper, late)
    return count, smallest, upper, late[:k]


def _turn_stats_numpy(seg: Columns, ngroups: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`turn_stats` with numpy alone (the reference for the compiled version)."""
    paired, _, turn_ns, undelayed = turn_samples(seg)
    key = seg["flow"][paired[undelayed]] * 2 + seg["dir"][paired[undelayed]]
    groups, low, high = sample_stats(key, turn_ns[undelayed])
    count = np.bincount(key, minlength=ngroups).astype(np.int64)
    smallest, upper = np.zeros(ngroups, dtype=np.int64), np.zeros(ngroups, dtype=np.int64)
    smallest[groups], upper[groups] = low, high
    return count, smallest, upper, paired[~undelayed]


def turn_samples(seg: Columns
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every data -> ACK turnaround: the rows with payload whose first covering ACK
    (`acked_by`) came at or after them (in row order), those ACK rows, the turnarounds (ns),
    and which are the path itself: a pure ACK within UNDELAYED_MS (it cannot hold a delayed
    ACK, nor the peer's application, as an ACK carried by an answer does)."""
    ts = seg["ts_ns"]
    paired = np.flatnonzero((seg["acked_by"] >= 0) & (seg["payload"] > 0))
    by = seg["acked_by"][paired]
    turn_ns = ts[by] - ts[paired]
    keep = turn_ns >= 0
    paired, by, turn_ns = paired[keep], by[keep], turn_ns[keep]
    undelayed = (seg["payload"][by] == 0) & (turn_ns < UNDELAYED_MS * 1e6)
    return paired, by, turn_ns, undelayed


def vantage_basis(rtt_how: str, rc: float, rs: float, both_near: bool) -> str:
    """Why we think the capture was taken where `vantage` says (for the report)."""
    if rtt_how == "none":
        return "no handshake and no data/ACK pairs in both directions"
    text = (f"{rtt_how}: capture point to client and back {rc:.3f} ms, "
            f"to server and back {rs:.3f} ms")
    if both_near:
        text += " (both ends at the capture point: same host or loopback)"
    return text


def grouped_median(values: np.ndarray, groups: np.ndarray
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


TYPICAL_SAMPLES = 16  # the upper quartile is taken over a direction's first this many samples


def sample_stats(keys: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct `keys` (ascending) and, for each, the smallest of its samples `ns`
    (non-negative int64 nanoseconds, in time order within a key) and the upper quartile of
    its first TYPICAL_SAMPLES samples (the sample at rank floor(0.75 * (count - 1))): what
    the path usually takes, from the start of the connection, without sorting them all."""
    order = np.argsort(keys, kind="stable")  # rows come grouped by flow: nearly sorted
    k, v = keys[order], ns[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
    count = np.diff(np.r_[first, len(k)])
    smallest = np.minimum.reduceat(v, first) if len(v) else v
    # the first samples of each key, packed with their key in one word and sorted
    take = np.minimum(count, TYPICAL_SAMPLES)
    at = np.repeat(first, take) + (np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take))
    packed = np.sort((k[at].astype(np.int64) << 32) | np.minimum(v[at], (1 << 32) - 1))
    upper = (packed & ((1 << 32) - 1))[np.cumsum(take) - take + (3 * (take - 1)) // 4]
    return k[first], smallest, upper



@dataclass
class Samples:
    """Round-trip samples of one kind per direction: how many, the smallest, and the
    first TYPICAL_SAMPLES in time order (time, frame, value)."""

    count: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    smallest: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    first: list = field(default_factory=lambda: [np.zeros((0, 3), np.int64)] * 2)

    def add(self, key: np.ndarray, ts: np.ndarray, frame: np.ndarray, ns: np.ndarray) -> None:
        """Take samples `ns` of directions `key` (their data's times and frames)."""
        for d in (0, 1):
            m = key == d
            if not m.any():
                continue
            low = int(ns[m].min())
            self.smallest[d] = low if self.count[d] == 0 else min(int(self.smallest[d]), low)
            self.count[d] += int(m.sum())
            both = np.concatenate([self.first[d], np.stack([ts[m], frame[m], ns[m]], axis=1)])
            self.first[d] = both[np.lexsort((both[:, 1], both[:, 0]))][:TYPICAL_SAMPLES]

    def upper(self) -> np.ndarray:
        """The upper quartile of each direction's first samples (`sample_stats`)."""
        out = np.zeros(2, np.int64)
        for d in (0, 1):
            if len(self.first[d]):
                out[d] = sample_stats(np.zeros(len(self.first[d]), np.int64),
                                      self.first[d][:, 2])[2][0]
        return out


NEARBY = 8  # rows looked at around a row for its neighbours in one direction


def _acks_two_full(seg: Columns, rows: np.ndarray, mss: np.ndarray) -> np.ndarray:
    """Whether each ACK row acknowledged two full segments or more at once (which a receiver
    must ACK at once): its ACK less the previous row's of its direction (looked for among
    the NEARBY rows before; if not found, not known to)."""
    prev = _next_in_direction(seg, rows, data=False, step=-1)
    ok = prev >= 0
    out = np.zeros(len(rows), dtype=bool)
    out[ok] = seg["ack"][rows[ok]] - seg["ack_max"][prev[ok]] >= 2 * mss[ok]
    return out


def _next_in_direction(seg: Columns, rows: np.ndarray, data: bool,
                       step: int = 1) -> np.ndarray:
    """For each row, the next (step -1: previous) row of its flow in its direction, with
    data if `data`, among the NEARBY rows that way; -1 if none."""
    n = len(seg["flow"])
    if not len(rows) or not n:
        return np.full(len(rows), -1, dtype=np.int64)
    near = rows[:, None] + step * np.arange(1, NEARBY + 1)  # (rows, NEARBY) candidates
    inside = (near >= 0) & (near < n)
    near = np.clip(near, 0, n - 1)
    hit = (inside & (seg["flow"][near] == seg["flow"][rows, None])
           & (seg["dir"][near] == seg["dir"][rows, None]))
    if data:
        hit &= seg["payload"][near] > 0
    first = hit.argmax(axis=1)
    pick = np.arange(len(rows))
    return np.where(hit[pick, first], near[pick, first], -1)
