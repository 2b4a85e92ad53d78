"""The capture's clock: records whose time cannot be true, steps of the clock, and the
effective time resolution of each interface, judged with numpy over each batch's time column.

Rules (docs/formats.md, "Damaged and hostile captures"):

* A time before 1970 (a pcapng time stamp of 2^63 units or more, such as 2^64-1) is
  implausible. So is a short run of records (fewer than OUTLIER_RUN) whose times lie more
  than OUTLIER_S away from the records on both sides of it while those agree with each other
  (a time of 0 among records of 2026, one far in the future), or, at the start of the
  capture, more than START_OUTLIER_S from the records after it (a capture made of files of
  different years may begin with a few records a year before the rest: they are kept), or
  at its end more than OUTLIER_S from the records before it. Such records are skipped
  (`implausible-time`), with one warning naming the first; their neighbours are unaffected.
* A jump back of more than STEP_S that the records after it keep is a step of the clock:
  a warning, and the records from there on are read on their own time base, joined to the
  one before so that the first record after the step takes the latest time before it (the
  interval across the step is unknown and counts as zero; a connection across the step goes
  on). Their times in the report are on that joined clock.
* A jump forward that the records after it keep cannot be told from a pause in the capture:
  it is one, with no warning (connections silent longer than the idle time-out are closed).
* The effective time resolution of an interface is the coarser of the declared one (pcap:
  microseconds or nanoseconds; pcapng: if_tsresol) and the observed one (the greatest common
  divisor of the differences between its times, judged once it has OBSERVE_MIN records).
  Coarser than UNRESOLVED_NS, the delayed-ACK stalls nagleprobe looks for (40 ms on Linux)
  cannot be told apart: a warning, and `CaptureInfo.time_step_ns` says so to `check`.

A short run after a jump at the end of a batch is held back until the next batch; at the end
of the capture it is implausible if more than OUTLIER_S from the records before it, else a
step.
"""

from __future__ import annotations

import datetime
from typing import Callable

import numpy as np

from ..weirds import Weird
from .formats import RecordBatch

OUTLIER_S = 86400  # a time this far from its neighbours is not a clock running on
START_OUTLIER_S = 10 * 365 * 86400  # ... or this far from the records after the first ones
OUTLIER_RUN = 8  # fewer records than this, far from both sides, are implausible, not a step
STEP_S = 60  # a jump back this large, kept by the records after it, is a step of the clock
_LAST_NS = np.iinfo(np.int64).max  # a time joined onto the clock beyond this is implausible
UNRESOLVED_NS = 10_000_000  # time stamps this coarse cannot show a 40 ms delayed-ACK stall
OBSERVE_MIN = 8  # records of an interface before its observed resolution counts
OBSERVE_MAX = 1 << 20  # records of an interface enough to judge its resolution by
NS = 1_000_000_000


def duration(ns: float) -> str:
    """A clock's jump or step for people: "2 d", "3 h", "90 s", "250 ms", "1 µs"."""
    v = abs(ns)
    for unit, size, least in (("d", 86400 * NS, 1), ("h", 3600 * NS, 1), ("s", NS, 1),
                              ("ms", 1e6, 1), ("µs", 1e3, 1)):
        if v >= size * least:
            x = v / size
            return f"{x:,.0f} {unit}" if x >= 100 else f"{x:.3g} {unit}"
    return f"{v:.3g} ns"


def utc(ns: int) -> str:
    """A time stamp as UTC (ISO 8601), or its raw value when out of datetime's range."""
    try:
        return (datetime.datetime.fromtimestamp(ns // NS, datetime.timezone.utc)
                .strftime("%Y-%m-%dT%H:%M:%SZ"))
    except (OverflowError, ValueError, OSError):
        return f"{ns} ns"


class Clock:
    """The clock of one capture as its batches are read (state: the last time read, the
    shift of the current time base, what is known of each interface's resolution)."""

    def __init__(self) -> None:
        self.last: int | None = None  # time (raw) of the last record kept
        self.top: int | None = None  # latest time (raw) kept in the current time base
        self.shift = 0  # ns added to the times of the current time base
        self.implausible = 0
        self.warnings: list[Weird] = []
        self.first_implausible: tuple[str, str] | None = None  # (problem, where)
        self._held: tuple[RecordBatch, int] | None = None  # records held back, their base
        self._seen: dict[int, list[int]] = {}  # interface: [first time, gcd, records]
        # an interface's declared resolution in ns (the reader's: pcap's file header, pcapng's
        # interface blocks, kept once however many there are)
        self.declared: Callable[[int], float] = lambda i: 1.0

    # ------------------------------------------------------------------ per batch
    def batch(self, b: RecordBatch, base: int) -> list[RecordBatch]:
        """The batches to hand on for `b`: its records and any held back before, less the
        implausible ones, their times on the joined clock. A short run of records after a
        jump at the end of `b` is held back until what follows it tells whether it is a step
        or implausible (`flush` hands it on at the end). `base`: the file offset of
        b.data[0] (for a batch without `start`)."""
        held, self._held = self._held, None
        return self._judge([(b, base)] if held is None else [held, (b, base)], final=False)

    def flush(self) -> list[RecordBatch]:
        """At the end of the capture: the records held back, judged on what came before."""
        held, self._held = self._held, None
        return self._judge([held], final=True) if held is not None else []

    def _judge(self, parts: list[tuple[RecordBatch, int]], final: bool) -> list[RecordBatch]:
        t = parts[0][0].ts_ns if len(parts) == 1 else np.concatenate(
            [p.ts_ns for p, _ in parts])
        if not len(t):
            return [p for p, _ in parts]
        ends = np.cumsum([len(p) for p, _ in parts])

        def where(j: int) -> str:
            k = int(np.searchsorted(ends, j, side="right"))
            return self._where(*parts[k], j - (int(ends[k - 1]) if k else 0))

        drop = t < 0
        negative = bool(drop.any())
        keep_idx = np.flatnonzero(~drop) if negative else None
        tt = t if keep_idx is None else t[keep_idx]
        shifts = None
        far = None
        hold = len(t)  # records from here on are held back
        if len(tt):
            d = np.diff(tt)
            brk = np.flatnonzero((d < -STEP_S * NS) | (d > OUTLIER_S * NS)) + 1
            if self.last is not None and not -STEP_S * NS <= tt[0] - self.last <= OUTLIER_S * NS:
                brk = np.concatenate([[0], brk])
            if len(brk) or self.last is None:
                # a run may be held back only from the last part on (not held twice)
                first_holdable = int(ends[-2]) if len(parts) > 1 else 0
                if keep_idx is not None:
                    first_holdable = int(np.searchsorted(keep_idx, first_holdable))
                shifts, far, h = self._runs(tt, brk, keep_idx, where,
                                            len(tt) if final else first_holdable)
                if far is not None:
                    drop[far if keep_idx is None else keep_idx[far]] = True
                if h < len(tt):
                    hold = int(h if keep_idx is None else keep_idx[h])
            else:
                top = int(tt.max())
                self.top = top if self.top is None else max(self.top, top)
                self.last = int(tt[-1])
        drop[hold:] = False
        if (negative or far is not None) and drop.any():
            n = int(drop.sum())
            self.implausible += n
            if self.first_implausible is None:
                j = int(np.argmax(drop))
                self._first_implausible(int(t[j]), where(j))
        if shifts is None and self.shift:
            shifts = np.full(len(tt), min(self.shift, _LAST_NS), np.int64)
        if shifts is not None:
            if keep_idx is not None:
                full = np.zeros(len(t), np.int64)
                full[keep_idx] = shifts
                shifts = full
            # steps back joined so often that a time would leave the clock's range
            beyond = ~drop & (shifts > _LAST_NS - np.maximum(t, 0))
            beyond[hold:] = False
            if beyond.any():
                shifts = np.where(beyond, 0, shifts)
                n = int(beyond.sum())
                self.implausible += n
                if self.first_implausible is None:
                    j = int(np.argmax(beyond))
                    self._first_implausible(int(t[j]), where(j))
                drop |= beyond
            ts = t + shifts
        else:
            ts = t
        out = []
        lo = 0
        for (b, base), hi in zip(parts, ends.tolist()):
            if hold < hi:  # (the last part) its tail is held back, as read
                tail = np.arange(hold - lo, hi - lo)
                self._held = (_take(b, tail, b.ts_ns[tail]), base)
                hi = hold
            if hi <= lo:
                continue
            dk, tk = drop[lo:hi], ts[lo:hi]
            if dk.any() or hi - lo < len(b):
                sel = np.flatnonzero(~dk)
                self._observe(None if b.iface is None else b.iface[sel], t[lo:hi][sel])
                out.append(_take(b, sel, tk[sel]))
            else:
                self._observe(b.iface, t[lo:hi])
                b.ts_ns = tk
                out.append(b)
            lo = hi
        return out

    def implausible_record(self, ts: int, where: str) -> None:
        """A record the reader skipped for its time alone (a pcap record whose time is far from
        the records on both sides): counted and warned about as the clock's own."""
        self.implausible += 1
        if self.first_implausible is None:
            self._first_implausible(ts, where)

    def _first_implausible(self, ts: int, where: str) -> None:
        self.first_implausible = (f"implausible time stamp {utc(ts)}", where)
        self.warnings.append(Weird(
            "implausible-time", "{} ({}); skipped, as is any later record whose time is far "
            "from both its neighbours' (counted as implausible-time)".format(
                *self.first_implausible)))

    def _runs(self, tt: np.ndarray, brk: np.ndarray, keep_idx: np.ndarray | None,
              where: Callable[[int], str], holdable: int
              ) -> tuple[np.ndarray, np.ndarray | None, int]:
        """The records of `tt` between breaks `brk`, judged run by run (a Python loop over the
        breaks, not the records): (the shift of each record, the indices of the implausible
        ones or None, where the records held back start: a last run that is short, starts
        at a jump or the capture's start and at `holdable` or later; len(tt) if none)."""
        edges = np.concatenate([[0], brk, [len(tt)]]).astype(np.int64)
        if len(edges) > 2 and edges[1] == 0:
            edges = edges[1:]
        lengths = np.diff(edges)
        long_run = lengths >= OUTLIER_RUN
        # the next long run after each run (-1: none in what was read)
        nxt = np.full(len(lengths), -1, np.int64)
        later = -1
        for k in range(len(lengths) - 1, -1, -1):
            nxt[k] = later
            if long_run[k]:
                later = k
        shifts = np.zeros(len(tt), np.int64)
        far: list[tuple[int, int]] = []
        out = OUTLIER_S * NS
        last_run = len(lengths) - 1
        for k in range(len(lengths)):
            s, e = int(edges[k]), int(edges[k + 1])
            r = int(tt[s])
            if not long_run[k]:
                if nxt[k] >= 0:
                    a = int(tt[edges[nxt[k]]])
                    if self.last is None:
                        implausible = abs(r - a) > START_OUTLIER_S * NS
                    else:
                        bb = self.last
                        implausible = min(abs(r - bb), abs(r - a)) > max(abs(a - bb), out)
                    if implausible:
                        far.append((s, e))
                        continue
                elif k == last_run and s >= holdable and (s > 0 or self.last is None
                                                          or brk[:1].tolist() == [0]):
                    return shifts, _spans(far), s
                elif k == last_run and holdable == len(tt) and self.last is not None \
                        and abs(r - self.last) > out:  # the capture's last records, far off
                    far.append((s, e))
                    continue
            if self.last is not None:
                jump = r - self.last
                i = s if keep_idx is None else int(keep_idx[s])
                if jump < -STEP_S * NS:
                    self.shift += self.top - r
                    self.top = r
                    self.warnings.append(Weird(
                        "clock-step-back", f"clock stepped back {duration(jump)} "
                        f"({where(i)}): the records from there on are analysed on their own "
                        "time base, joined to the one before (the interval across the step "
                        "counts as 0)"))
            shifts[s:e] = min(self.shift, _LAST_NS)  # (beyond: implausible, see `_judge`)
            top = int(tt[s:e].max())
            self.top = top if self.top is None else max(self.top, top)
            self.last = int(tt[e - 1])
        return shifts, _spans(far), len(tt)

    @staticmethod
    def _where(b: RecordBatch, base: int, j: int) -> str:
        at = int(b.start[j]) if b.start is not None else base + int(b.offset[j]) - 16
        return f"frame {int(b.frame[j])} at byte {at}"

    # ------------------------------------------------------------------ resolution
    def _observe(self, iface: np.ndarray | None, t: np.ndarray) -> None:
        """Fold times `t` (as read: a step's shift is not a multiple of anything) into the
        observed resolution of each interface (`iface`: each record's, None for pcap's one):
        the gcd of their differences. An interface already as fine as declared, or judged on
        OBSERVE_MAX records, costs no more than the look at which interfaces are present."""
        if not len(t):
            return
        if iface is None or (iface == iface[0]).all():
            groups = [(0 if iface is None else int(iface[0]), t)]
        else:
            groups = [(int(i), t[iface == i]) for i in np.unique(iface)]
        for i, ti in groups:
            st = self._seen.get(i)
            if st is None:
                st = self._seen[i] = [int(ti[0]), 0, 0]
            declared = max(int(self.declared(i)), 1)
            if st[2] < OBSERVE_MAX and not (st[1] and st[1] <= declared):
                st[1] = int(np.gcd(np.gcd.reduce(ti - np.int64(st[0])), st[1]))
            st[2] += len(ti)

    def resolution(self) -> dict[int, tuple[float, int | None]]:
        """Per interface that carried packets: (declared ns, observed ns or None when it
        had too few records to tell)."""
        out = {}
        for i, (_, g, n) in sorted(self._seen.items()):
            observed = g if n >= OBSERVE_MIN and g > 0 else None
            out[i] = (self.declared(i), observed)
        return out

    def time_step_ns(self) -> int | None:
        """The coarsest effective resolution (ns) of the interfaces with packets."""
        res = self.resolution()
        if not res:
            return None
        return max(max(int(round(d)), o or 0, 1) for d, o in res.values())

    def finish(self) -> list[Weird]:
        """The resolution warnings (one per interface too coarse to show a stall)."""
        out = []
        for i, (declared, observed) in self.resolution().items():
            eff = max(declared, observed or 0)
            if eff < UNRESOLVED_NS:
                continue
            said = f"declared {duration(int(declared))}" if declared >= UNRESOLVED_NS else (
                f"declared {duration(int(declared))}, observed {duration(observed)}")
            out.append(Weird("coarse-time", "time stamps too coarse to show a stall: "
                             f"interface {i} has steps of {duration(int(eff))} ({said}), and "
                             "the delayed-ACK timers' stalls (40 ms on Linux, 200 ms on "
                             "Windows) cannot be resolved; finding no stall means nothing"))
        return out


def _spans(spans: list[tuple[int, int]]) -> np.ndarray | None:
    """The indices of half-open ranges, or None for none."""
    return np.concatenate([np.arange(s, e) for s, e in spans]) if spans else None


def _take(b: RecordBatch, sel: np.ndarray, ts: np.ndarray) -> RecordBatch:
    """The records `sel` of `b`, with times `ts` (already selected)."""
    return RecordBatch(data=b.data, offset=b.offset[sel], caplen=b.caplen[sel],
                       wirelen=b.wirelen[sel], ts_ns=ts, linktype=b.linktype[sel],
                       frame=b.frame[sel], start=None if b.start is None else b.start[sel],
                       tunnels=b.tunnels, iface=None if b.iface is None else b.iface[sel])
