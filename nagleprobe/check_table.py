"""The flows of one capture's verdict as columns: the selected flows with counted stalls,
what the budget says of each, their fixes and their first stalls as evidence.

A capture of a million short connections each with a stall has a million such flows, so the
verdict keeps them as numpy columns (`FlowTable`) and the outputs are written from the
columns; `FlowVerdict` objects are made only when asked for (`FlowViews`), for the few flows
a person reads or a caller picks out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .advice import FIX_FIELDS
from .humanize import short_number
from .tables import STALL_POINTS

EVIDENCE_ROWS = 20  # stalls kept per flow for the text, JUnit and annotations
# the stall columns kept as evidence: the sender, the delay, then each point's frame and time
EVIDENCE_COLUMNS = ("sender", "delay_ms", *(f"{k}_frame" for k in STALL_POINTS),
                    *(f"{k}_s" for k in STALL_POINTS), "confidence")


@dataclass
class FlowVerdict:
    """One selected flow of a capture held against the budget."""

    id: int
    client: str
    server: str
    stalls: int  # counted (confidence >= min_confidence)
    stall_ms: float
    lost_share_pct: float
    duration_s: float
    passed: bool = True
    reasons: list[str] = field(default_factory=list)
    fix: dict[str, Any] | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)  # first EVIDENCE_ROWS stalls

    @property
    def name(self) -> str:
        return f"flow {self.id} {self.client} -> {self.server}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "client": self.client, "server": self.server,
                "status": "pass" if self.passed else "fail", "stalls": self.stalls,
                "stall_ms": self.stall_ms, "lost_share_pct": self.lost_share_pct,
                "reasons": list(self.reasons)}


@dataclass
class FlowTable:
    """Per selected flow with counted stalls (rows in flow id order): its verdict's numbers;
    `capture_reasons` (the capture-wide limits it broke, which fail every flow) and the
    lost-share limit (`max_lost_share`, which fails the rows of `share_failed`) give its
    reasons. `evidence`: stall columns (EVIDENCE_COLUMNS), the rows of flow r at
    `evidence_offsets[r]:evidence_offsets[r + 1]`."""

    id: np.ndarray
    client: np.ndarray
    server: np.ndarray
    stalls: np.ndarray
    stall_ms: np.ndarray
    lost_share_pct: np.ndarray
    duration_s: np.ndarray
    share_failed: np.ndarray
    fix: dict[str, np.ndarray]  # FIX_FIELDS; side None where the flow has no fix
    evidence: dict[str, np.ndarray]
    evidence_offsets: np.ndarray
    max_lost_share: float | None = None
    capture_reasons: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.id)

    @property
    def passed(self) -> np.ndarray:
        return ~self.share_failed & (not self.capture_reasons)

    def share_reason(self, share: float) -> str:
        return (f"{short_number(share)}% of the flow lost to stalls, budget "
                f"{short_number(self.max_lost_share)}%")

    def reasons(self, r: int) -> list[str]:
        """Row r's reasons: the capture's limits first, then its own."""
        own = [self.share_reason(float(self.lost_share_pct[r]))] if self.share_failed[r] else []
        return [f"capture: {c}" for c in self.capture_reasons] + own

    def reason_lists(self) -> tuple[np.ndarray, list[list[str]]]:
        """(codes, lists): row r's reasons are lists[codes[r]] (a list per lost share over
        the limit, one for the rest)."""
        fails = self.share_failed
        head = [f"capture: {c}" for c in self.capture_reasons]
        shares, code = np.unique(self.lost_share_pct[fails], return_inverse=True)
        codes = np.zeros(len(self), dtype=np.int64)
        codes[fails] = 1 + code.reshape(-1)
        return codes, [head] + [head + [self.share_reason(s)] for s in shares.tolist()]

    def name(self, r: int) -> str:
        return self.names(r, r + 1)[0]

    def names(self, a: int = 0, b: int | None = None, rows: np.ndarray | None = None
              ) -> list[str]:
        """The names ("flow ID CLIENT -> SERVER") of rows a..b-1, or of `rows`."""
        at = slice(a, b) if rows is None else rows
        return [f"flow {i} {c} -> {s}" for i, c, s in zip(
            self.id[at].tolist(), self.client[at].tolist(), self.server[at].tolist())]

    def fix_of(self, r: int) -> dict[str, Any] | None:
        if self.fix["side"][r] is None:
            return None
        return {k: _plain(self.fix[k][r]) for k in FIX_FIELDS}

    def evidence_of(self, r: int) -> list[dict[str, Any]]:
        """Row r's evidence stalls in the JSON shape of `analyze`'s stalls (sender, delay,
        frames, times, confidence)."""
        e, out = self.evidence, []
        for j in range(int(self.evidence_offsets[r]), int(self.evidence_offsets[r + 1])):
            out.append({"sender": e["sender"][j], "delay_ms": float(e["delay_ms"][j]),
                        "frames": {k: int(e[f"{k}_frame"][j]) for k in STALL_POINTS},
                        "times": {k: float(e[f"{k}_s"][j]) for k in STALL_POINTS},
                        "confidence": float(e["confidence"][j])})
        return out

    def verdict(self, r: int) -> FlowVerdict:
        """Row r as a `FlowVerdict`."""
        return FlowVerdict(id=int(self.id[r]), client=self.client[r], server=self.server[r],
                           stalls=int(self.stalls[r]), stall_ms=float(self.stall_ms[r]),
                           lost_share_pct=float(self.lost_share_pct[r]),
                           duration_s=float(self.duration_s[r]),
                           passed=bool(self.passed[r]), reasons=self.reasons(r),
                           fix=self.fix_of(r), evidence=self.evidence_of(r))

    def worst_order(self) -> np.ndarray:
        """The rows, failing flows first, then those that lost the most time (ties by id)."""
        return np.lexsort((self.id, -self.stall_ms, self.passed))

    @classmethod
    def of(cls, flows: Sequence[FlowVerdict]) -> FlowTable:
        """The table of flow verdicts made by hand (their reasons kept as they are)."""
        ev = [s for f in flows for s in f.evidence]
        evidence = {"sender": np.array([s["sender"] for s in ev], dtype=object),
                    "delay_ms": np.array([s["delay_ms"] for s in ev], dtype=float),
                    "confidence": np.array([s["confidence"] for s in ev], dtype=float)}
        for k in STALL_POINTS:
            evidence[f"{k}_frame"] = np.array([s["frames"][k] for s in ev], dtype=np.int64)
            evidence[f"{k}_s"] = np.array([s["times"][k] for s in ev], dtype=float)
        t = _HandMade(
            id=np.array([f.id for f in flows], dtype=np.int64),
            client=np.array([f.client for f in flows], dtype=object),
            server=np.array([f.server for f in flows], dtype=object),
            stalls=np.array([f.stalls for f in flows], dtype=np.int64),
            stall_ms=np.array([f.stall_ms for f in flows], dtype=float),
            lost_share_pct=np.array([f.lost_share_pct for f in flows], dtype=float),
            duration_s=np.array([f.duration_s for f in flows], dtype=float),
            share_failed=np.array([not f.passed for f in flows], dtype=bool),
            fix={k: np.array([f.fix[k] if f.fix else None for f in flows], dtype=object)
                 for k in FIX_FIELDS},
            evidence=evidence,
            evidence_offsets=np.cumsum([0] + [len(f.evidence) for f in flows]))
        t.given = list(flows)
        return t


class _HandMade(FlowTable):
    """A table of given `FlowVerdict`s: their reasons and pass/fail are theirs."""

    given: list[FlowVerdict]

    def reasons(self, r: int) -> list[str]:
        return list(self.given[r].reasons)

    def reason_lists(self) -> tuple[np.ndarray, list[list[str]]]:
        return np.arange(len(self), dtype=np.int64), [list(f.reasons) for f in self.given]

    def verdict(self, r: int) -> FlowVerdict:
        return self.given[r]


class FlowViews(Sequence):
    """The rows of a `FlowTable` (all, or `rows`) as `FlowVerdict`s, each made when read."""

    def __init__(self, table: FlowTable, rows: np.ndarray | None = None) -> None:
        self.table = table
        self.rows = np.arange(len(table)) if rows is None else rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.table.verdict(int(r)) for r in self.rows[i]]
        return self.table.verdict(int(self.rows[i]))

    def __iter__(self) -> Iterator[FlowVerdict]:
        return (self.table.verdict(int(r)) for r in self.rows)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, FlowViews)) else NotImplemented

    def __repr__(self) -> str:
        return f"<{len(self)} flow verdicts>"


def _plain(x: Any) -> Any:
    """A numpy scalar as the Python value JSON would give back."""
    return x.item() if isinstance(x, np.generic) else x
