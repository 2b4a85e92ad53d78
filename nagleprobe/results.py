"""The judged batches of a stream, kept and then joined into one Report.

Each batch is judged on its own (`engine.Judged`); the flows are numbered at the end as the
whole-capture analysis numbers them (by first packet time, then frame number), the stalls and
endpoints renumbered with them, relays linked across batches. Columns are joined one at a
time and each batch's copy let go of at once, so a result is never held twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import syns
from .columns import Columns
from .engine import Judged
from .exchanges import add_latency
from .relay import MAX_ARRIVALS, link, relay_warning
from .report import Report
from .wireshark import add_tcp_streams
from .workers import TRIM_JOIN_ROWS, TRIM_ROWS, release_free_memory

# at most this many connections per batch (`stream`): a batch's working memory and its
# result grow with its connections, and a SYN flood hands on a million one-packet ones at once
BATCH_FLOWS = 1 << 14
# a batch of half that many connections or more (a scan) gives its working memory back once
# kept
MANY_FLOWS = BATCH_FLOWS // 2


@dataclass
class Results:
    """Per-batch result columns and, per flow, the key that orders flows globally; `add` a
    batch, `report` joins them."""

    flows: list[Columns] = field(default_factory=list)
    stalls: list[Columns] = field(default_factory=list)
    exchanges: list[Columns] = field(default_factory=list)
    endpoints: list[Columns] = field(default_factory=list)
    first_ns: list[np.ndarray] = field(default_factory=list)
    first_frame: list[np.ndarray] = field(default_factory=list)
    tcp_packets: int = 0
    arrivals: list[Columns] | None = field(default_factory=list)  # None: too many
    arrival_count: int = 0
    duplicates: int = 0  # copies of packets build_flows dropped
    syn_jumps: syns.Tally = field(default_factory=syns.Tally)  # SYNs left out


    def add(self, part: Judged, counted: bool = False) -> None:
        """Keep one batch's result (`counted`: its arrivals were counted already)."""
        p = self
        p.flows.append(part.flows)
        p.stalls.append(part.stalls)
        p.exchanges.append(part.exchanges)
        p.endpoints.append(part.endpoints)
        p.first_ns.append(part.first_ns)
        p.first_frame.append(part.first_frame)
        p.tcp_packets += part.tcp_packets
        p.duplicates += part.duplicates
        p.syn_jumps.add(part.syn_jumps)
        if len(part.first_ns) >= MANY_FLOWS:
            # a batch of many small connections (a scan): its working memory is about as
            # large as its result, and the heaps would keep it
            release_free_memory()
        if p.arrivals is not None:  # kept for relay linking while there are not too many
            p.arrival_count += 0 if counted else len(part.arrivals["flow"])
            p.arrivals.append(part.arrivals)
            if p.arrival_count > MAX_ARRIVALS:
                p.arrivals = None


    def report(self, capture: dict) -> Report:
        """One Report of every batch added (see `_join`)."""
        return _join(self, capture)


def _join(p: Results, capture: dict) -> Report:
    """One Report from the batches: flows numbered by (first packet time, frame)."""
    first_ns, first_frame = np.concatenate(p.first_ns), np.concatenate(p.first_frame)
    order = np.lexsort((first_frame, first_ns))  # old (concatenated) id of each new id
    new_id = np.empty(len(order), dtype=np.int64)
    new_id[order] = np.arange(len(order))
    offsets = np.cumsum([0] + [len(f) for f in p.first_ns])

    # a column at a time, each batch's copy let go of at once: never held twice
    at = _placed(order)
    flows = {k: _take([f.pop(k) for f in p.flows], at) for k in list(p.flows[0])}
    flows["id"] = np.arange(len(order))
    both_ends = _placed(np.stack([2 * order, 2 * order + 1], axis=1).reshape(-1))
    endpoints = {k: _take([e.pop(k) for e in p.endpoints], both_ends)
                 for k in list(p.endpoints[0])}
    endpoints["flow"] = np.arange(len(order)).repeat(2)
    p.flows, p.endpoints = [], []
    flow_ids = [new_id[offsets[j]:offsets[j + 1]] for j in range(len(p.stalls))]
    stalls = _join_stalls(p.stalls, order, offsets)
    exchanges = add_latency(flows, _join_stalls(p.exchanges, order, offsets), stalls,
                            endpoints)
    add_tcp_streams(flows, capture)
    arr = None
    if p.arrivals is None:
        capture["warnings"].append(relay_warning())
    else:
        arr = {k: np.concatenate([a[k] for a in p.arrivals]) for k in p.arrivals[0]}
        arr["flow"] = np.concatenate([ids[a["flow"]] for a, ids in zip(p.arrivals, flow_ids)])
        p.arrivals = []
    flows.update(link(flows, stalls, arr))
    return Report(capture, flows, stalls, endpoints, exchanges=exchanges)


def _placed(order: np.ndarray) -> np.ndarray | None:
    """Where each row of the concatenated parts goes (`order`: the old row of each new one);
    None when every row stays where it is (batches in the order of their flows)."""
    if np.array_equal(order, np.arange(len(order))):
        return None
    at = np.empty(len(order), dtype=np.int64)
    at[order] = np.arange(len(order))
    return at


def _take(parts: list[np.ndarray], at: np.ndarray | None, trim_rows: int = TRIM_JOIN_ROWS
          ) -> np.ndarray:
    """The parts joined into one column, row r of their concatenation at `at[r]` (None: at
    r); each part copied straight to its place and let go of at once (and, for a column of
    `trim_rows` or more, the memory given back: the heap otherwise keeps every column's
    parts)."""
    out = np.empty(sum(map(len, parts)), dtype=np.result_type(*parts))
    start = 0
    while parts:
        part = parts.pop(0)
        stop = start + len(part)
        if at is None:
            out[start:stop] = part
        else:
            out[at[start:stop]] = part
        start = stop
        del part
    if len(out) >= trim_rows:
        release_free_memory()
    return out


def _join_stalls(parts: list[Columns], order: np.ndarray, offsets: np.ndarray
                 ) -> Columns:
    """The batches' stall columns as one set of columns, flows renumbered (`order`: the old,
    concatenated id of each new flow id; `offsets[j]`: batch j's first old id) and sorted by
    (flow, released frame). Each batch's stalls come sorted so (`report_columns`) and a flow
    is in one batch, so each new flow's stalls are one run of the concatenated columns: their
    order is those runs in new-id order, no sort. Joined a column at a time, each batch's copy
    of a column let go of as soon as it is joined, so the stalls are never held twice."""
    names = list(parts[0])
    counts = np.concatenate([np.bincount(st.pop("flow"), minlength=offsets[j + 1] - offsets[j])
                             for j, st in enumerate(parts)])  # stalls per old flow id
    first = np.cumsum(counts) - counts  # each old flow's first stall in the concatenation
    n = counts[order]
    at = _placed(np.repeat(first[order] - (np.cumsum(n) - n), n) + np.arange(int(n.sum())))
    columns = {}
    for name in names:
        if name == "flow":
            columns[name] = np.repeat(np.arange(len(order)), n)
            continue
        columns[name] = _take([st.pop(name) for st in parts], at, TRIM_ROWS)
    parts.clear()
    return columns