"""The verdicts of a connection judged in pieces: its candidates and lone-segment ACKs kept
raw until it ends, then judged once with its final facts (`detect.decide`).

Of candidates that are not stalls only the newest `Limits.kept_candidates` are kept one by
one (and `kept_acks` ACKs); older ones are judged with the facts known then and counted,
with, per rule and direction, the two kept closest to its threshold (the sentinels): if the
final round trips would move one of them across it, an older verdict may differ from the
whole-connection analysis', and the reason is added to `inexact`, as when an MSS that had to
be inferred changed after a piece judged a segment with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import Columns, take
from .detect import (
    ANSWER_PENDING,
    CANDIDATE_COLUMNS,
    Detection,
    Evidence,
    Params,
    ack_classes,
    classify,
    decide,
    small,
)

KEPT_CANDIDATES = 4096  # candidates that are not stalls, kept one by one until the end
KEPT_ACKS = 4096  # lone-segment ACKs kept one by one
OUTSTANDING_ROWS = 4096  # data rows not yet acknowledged carried per direction
LATE_GAPS = 1 << 14  # distinct delays of late ACKs counted exactly per direction
MSS_KEPT = 8  # MSS values inferred (no SYN) whose judged payload sizes are kept
# the rules whose outcome moves with the round trips (detect.classify): the value each
# is monotonic in, and whether it holds for large values
ROUND_TRIP_RULES = {"early": ("reaction", False), "slow": ("reaction", True),
                    "short": ("gap", False), "long": ("gap", True)}
ACK_RULES = {"quick": False, "not_early": True, "not_long": False}


@dataclass
class Limits:
    """The bounds of a connection's carried state (tests set them tiny)."""

    kept_candidates: int = KEPT_CANDIDATES
    kept_acks: int = KEPT_ACKS
    outstanding_rows: int = OUTSTANDING_ROWS


@dataclass
class Verdicts:
    """The candidates and ACKs of one connection judged in pieces (see the module)."""

    limits: Limits = field(default_factory=Limits)
    inexact: set = field(default_factory=set)  # why a verdict may differ from the whole's
    recent: Columns | None = None  # candidates kept one by one (newest)
    stalls: list[Columns] = field(default_factory=list)  # ... that were stalls
    groups: dict[tuple, list[int]] = field(default_factory=dict)  # older ones, counted
    sentinels: dict[tuple, tuple] = field(default_factory=dict)  # (key, rule, side) -> record
    acks: Columns = field(  # lone-segment ACKs kept one by one
        default_factory=lambda: {"key": np.zeros(0, np.int64), "gap": np.zeros(0, np.int64)})
    ack_counts: np.ndarray = field(default_factory=lambda: np.zeros((2, 2), np.int64))
    # per key: the distinct gaps (ns) of the late ACKs counted, ascending, and how many
    late_gaps: list = field(default_factory=lambda: [(np.zeros(0, np.int64),) * 2] * 2)
    ack_sentinels: dict[tuple, tuple] = field(default_factory=dict)
    # per MSS used by a piece (client's, server's): per direction the distinct payload sizes
    # it compared with it
    mss_used: dict = field(default_factory=dict)  # (2, 65536) bits each

    def add(self, ev: Evidence, p: Params, mss_how: np.ndarray) -> None:
        """Take a piece's candidates and lone-segment ACKs (its `evidence`, judged by `p`
        where they are let go of; `mss_how`: how each direction's MSS is known)."""
        c = ev.candidates
        self.recent = c if self.recent is None else Columns.concat([self.recent, c])
        self._judge_candidates(p, self.limits.kept_candidates, mss_how)
        self.acks = {"key": np.r_[self.acks["key"], ev.lone_key],
                     "gap": np.r_[self.acks["gap"], ev.lone_gap]}
        self._judge_acks(p, self.limits.kept_acks)

    def kept(self) -> tuple[np.ndarray, np.ndarray]:
        """The released (S2) frames and times of the candidates kept raw (judged again with
        the final facts)."""
        parts = [*self.stalls, *([self.recent] if self.recent is not None else [])]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return (np.concatenate([c["released_frame"] for c in parts]).astype(np.int64),
                np.concatenate([c["released_ns"] for c in parts]).astype(np.int64))

    def forget(self, before_ns: int, unreported: np.ndarray) -> None:
        """Let go of the stalls kept raw released before `before_ns` but those whose
        released frames are in `unreported`: a caller that has reported the others
        (`watch`) needs them no more, and they would grow without bound on a connection
        that never closes; their repeats no longer count towards later confidences."""
        if not self.stalls:
            return
        kept = Columns.concat(self.stalls)
        stay = ((kept["released_ns"] >= before_ns)
                | np.isin(kept["released_frame"].astype(np.int64), unreported))
        if not stay.all():
            self.stalls = [take(kept, np.flatnonzero(stay))] if stay.any() else []

    def answers(self, seg: Columns, final: bool) -> None:
        """The answers (the peer's next data after S2) of candidates kept that had none
        yet: the first data segment after S2 in this piece, if it is the peer's."""
        for batch in [self.recent]:  # (a candidate waiting for its answer stays there)
            if batch is None:
                continue
            pending = np.flatnonzero(batch["answer_ns"] == ANSWER_PENDING)
            if not len(pending):
                continue
            data = np.flatnonzero(seg["payload"] > 0)
            dts, dfr = seg["ts_ns"][data], seg["frame"][data]
            for j in pending.tolist():
                t, fr = int(batch["released_ns"][j]), int(batch["released_frame"][j])
                at = int(np.searchsorted(dts, t, side="left"))
                while at < len(data) and dts[at] == t and dfr[at] <= fr:
                    at += 1
                if at < len(data):
                    nxt = data[at]
                    mine = int(seg["dir"][nxt]) == int(batch["key"][j]) & 1
                    batch["answer_ns"][j] = -1 if mine else int(seg["ts_ns"][nxt])
                elif final:
                    batch["answer_ns"][j] = -1

    def _judge_candidates(self, p: Params, kept: int, mss_how: np.ndarray) -> None:
        """Keep the stalls (by the facts known now) and the newest `kept` others one by
        one; count the older others by verdict, keeping the ones nearest each round-trip
        rule's threshold."""
        c = self.recent
        if len(c["key"]) <= kept:
            return
        k = classify(c, p)
        waits = c["answer_ns"] == ANSWER_PENDING  # kept here until its answer is seen
        would = (k["plain"] == -1) & ~waits
        if would.any():
            self.stalls.append(take(c, np.flatnonzero(would)))
        others = np.flatnonzero(~would & ~waits)
        old, keep = others[:max(len(others) - kept, 0)], others[max(len(others) - kept, 0):]
        self.recent = take(c, np.sort(np.r_[keep, np.flatnonzero(waits)]))
        if not len(old):
            return
        plain, s1_small, late_seen = k["plain"][old], k["s1_small"][old], k["late_seen"][old]
        gap = c["released_ns"][old] - c["small_ns"][old]
        key = c["key"][old]
        # (S1 judged small or not with this MSS)
        self.compared(p.mss, mss_how, key, c["small_bytes"][old])
        for group in set(zip(key.tolist(), plain.tolist(), s1_small.tolist(),
                             late_seen.tolist())):
            m = ((key == group[0]) & (plain == group[1]) & (s1_small == group[2])
                 & (late_seen == group[3]))
            g = self.groups.setdefault(group, [0, 0])
            g[0] += int(m.sum())
            g[1] += int(gap[m].sum())
        # the verdicts that the round trips can move (not resent data, not a shut window)
        moves = c["new_data"][old] & ~c["shut"][old]
        values = {"reaction": k["reaction"][old], "gap": c["ack_ns"][old] - c["small_ns"][old]}
        for rule, (value, large) in ROUND_TRIP_RULES.items():
            for side in (False, True):
                m = moves & (k[rule][old] == side)
                _sentinel(self.sentinels, key[m], values[value][m], (rule, side),
                          side == large, lambda j, old=old, m=m: take(c, old[m][[j]]))

    def _judge_acks(self, p: Params, kept: int) -> None:
        """Keep the newest `kept` lone-segment ACKs one by one; count the older ones (late,
        quick; the late ones' delays exactly), keeping the ones nearest each threshold."""
        a = self.acks
        extra = len(a["key"]) - kept
        if extra <= 0:
            return
        key, gap = a["key"][:extra], a["gap"][:extra]
        self.acks = {k: v[extra:] for k, v in a.items()}
        cls = ack_classes(key, gap, p)
        late = cls["not_early"] & cls["not_long"]
        self.ack_counts[:, 0] += np.bincount(key[late], minlength=2)
        self.ack_counts[:, 1] += np.bincount(key[cls["quick"]], minlength=2)
        for k in (0, 1):
            had, many = self.late_gaps[k]
            values = np.r_[had, gap[late & (key == k)]]
            weights = np.r_[many, np.ones(len(values) - len(had), np.int64)]
            while True:
                values, at = np.unique(values, return_inverse=True)
                weights = np.bincount(at.reshape(-1), weights=weights).astype(np.int64)
                if len(values) <= LATE_GAPS:
                    break
                self.inexact.add("the delayed-ACK median (more distinct delays than "
                                 f"{LATE_GAPS} were kept)")
                values = values // 2 * 2  # coarser: neighbours merged
            self.late_gaps[k] = (values, weights)
        for rule, large in ACK_RULES.items():
            for side in (False, True):
                m = cls[rule] == side
                _sentinel(self.ack_sentinels, key[m], gap[m], (rule, side), side == large,
                          lambda j, m=m: (int(key[m][j]), int(gap[m][j])))

    def decide(self, p: Params, off: np.ndarray, not_classic: np.ndarray,
               fallback: np.ndarray, late_mss: set) -> Detection:
        """The connection's detection, every candidate and ACK judged with its final facts
        (`p`; `off`, `not_classic`: its Nagle proofs; `fallback`, `late_mss`: the directions
        whose round trip came from late samples only, and the MSS those were taken with);
        why a verdict may differ from the whole-connection analysis' in `inexact`."""
        self._check_mss(p.mss, fallback, late_mss)
        cand = Columns.concat([*self.stalls, self.recent]) if self.recent is not None else None
        self.stalls, self.recent = [], None  # (held once)
        if cand is None:
            cand = {k: np.zeros(0, np.int64) for k in CANDIDATE_COLUMNS}
            cand["new_data"] = cand["shut"] = np.zeros(0, bool)
        cand["answer_ns"] = np.where(cand["answer_ns"] == ANSWER_PENDING, -1,
                                     cand["answer_ns"])
        self._check_sentinels(p)
        groups = None
        if self.groups:
            g = np.array([(*k, *v) for k, v in self.groups.items()], dtype=np.int64)
            groups = {"key": g[:, 0], "plain": g[:, 1], "s1_small": g[:, 2].astype(bool),
                      "late_seen": g[:, 3].astype(bool), "count": g[:, 4], "stall_ns": g[:, 5]}
        (v0, n0), (v1, n1) = self.late_gaps
        lone_groups = {"late": self.ack_counts[:, 0], "quick": self.ack_counts[:, 1],
                       "hist_key": np.r_[np.zeros(len(v0), np.int64), np.ones(len(v1), np.int64)],
                       "hist_gap": np.r_[v0, v1], "hist_count": np.r_[n0, n1]}
        ev = Evidence(cand, off, not_classic, self.acks["key"], self.acks["gap"])
        return decide(ev, p, 1, groups, lone_groups)

    def compared(self, mss: np.ndarray, how: np.ndarray, key: np.ndarray,
                  payload: np.ndarray) -> None:
        """Note the payload sizes (of directions `key`) judged with `mss` where it is not the
        SYN's (inferred, it may change): a bit per size, per direction and MSS used (at most
        MSS_KEPT of them; past that the MSS is named in a warning)."""
        if (how == "syn").all():
            return
        used = tuple(mss.tolist())
        if used not in self.mss_used and len(self.mss_used) >= MSS_KEPT:
            self.inexact.add("the MSS (inferred from the largest segments, which grew "
                             "after a piece had used it)")
            return
        packed = self.mss_used.setdefault(used, np.zeros((2, 1 << 13), dtype=np.uint8))
        bits = np.unpackbits(packed, axis=1).astype(bool)
        for k in (0, 1):
            if how[k] != "syn":
                bits[k, np.minimum(payload[(key == k) & (payload > 0)], (1 << 16) - 1)] = True
        self.mss_used[used] = np.packbits(bits, axis=1)

    def _check_mss(self, mss: np.ndarray, fallback: np.ndarray, late_mss: set) -> None:
        """Whether a piece that used another MSS (inferred from the largest segments, no
        SYN) judged a segment otherwise than the final MSS does: small or not, below it or
        not; or took a late round-trip sample with it (two full segments) that counts."""
        final = mss.tolist()
        moved = False
        for used, packed in self.mss_used.items():
            for k in (0, 1):
                old, new, v = used[k], final[k], np.flatnonzero(np.unpackbits(packed[k]))
                if old != new:
                    moved |= bool(((small(v, np.int64(old)) != small(v, np.int64(new)))
                                   | ((v < old) != (v < new))
                                   | ((v <= max(old, 1)) != (v <= max(new, 1)))).any())
        moved |= any(fallback[k] and m != final[k] for k, m in late_mss)
        if moved:
            self.inexact.add("the MSS (inferred from the largest segments, which grew "
                             "after a piece had used it)")

    def _check_sentinels(self, p: Params) -> None:
        """Whether the final round trips move a candidate or ACK judged before across a
        threshold (then its verdict may differ from the whole analysis')."""
        if self.sentinels:
            recs = Columns.concat([rec for rec, _ in self.sentinels.values()])
            k = classify(recs, p)
            for j, (_, rule, side) in enumerate(self.sentinels):
                if bool(k[rule][j]) != side:
                    self.inexact.add("verdicts of candidates judged before the final round "
                                     "trips were known (more than "
                                     f"{self.limits.kept_candidates} kept)")
        if self.ack_sentinels:
            items = list(self.ack_sentinels.items())
            key = np.array([rec[0] for rec, _ in (v for _, v in items)], np.int64)
            gap = np.array([rec[1] for rec, _ in (v for _, v in items)], np.int64)
            cls = ack_classes(key, gap, p)
            for j, ((_, rule, side), _) in enumerate(items):
                if bool(cls[rule][j]) != side:
                    self.inexact.add("the delayed and quick ACKs counted before the final "
                                     f"round trips were known (more than {self.limits.kept_acks} "
                                     "kept)")


def _sentinel(store: dict, key: np.ndarray, value: np.ndarray, name: tuple, smallest: bool,
              record) -> None:
    """Keep in `store`, per key, the record whose `value` is nearest the rule's threshold
    on this side of it: the smallest value if the rule holds for large ones, else the
    largest."""
    for k in np.unique(key).tolist():
        m = np.flatnonzero(key == k)
        j = m[np.argmin(value[m])] if smallest else m[np.argmax(value[m])]
        v = int(value[j])
        slot = (k, *name)
        have = store.get(slot)
        if have is None or (v < have[1] if smallest else v > have[1]):
            store[slot] = (record(int(j)), v)
