"""The judge: connections' packets in, their report rows out (flows, stalls, endpoints).

Every way of running nagleprobe (a file streamed, a set of files, a connection too long to
hold whole, `watch`) hands a connection's packets to the same two steps: `flows.build_flows`
(segments, sequence space, round trips, MSS) and `detect` (the evidence chain and the rule).
`judge` runs them on a batch of whole connections; a connection too long to hold is judged
in pieces by `pieces.Ledger` (the same steps, its facts carried from piece to piece, the rule
applied once at its end), and `judge_ledger` gives its rows. `watch` judges the open
connections it holds whole with `judge_window`, and a longer one by its `Ledger` (as if it
ended now: `Ledger.provisional`). The result of a batch is a `Judged`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import Columns
from .detect import Detection, Evidence, Params, decide, detect, evidence, params
from .exchanges import flow_exchanges, kind_columns
from .flows import Flows, build_flows
from .jsonrows import factorize
from .pieces import Ledger
from .relay import arrivals
from .tables import report_columns
from .tuples import TupleEnds

# text columns of the results with a handful of values, made a str per row: each row is made
# to refer to one shared str (a million flows held "handshake" a million times, 60 bytes
# each). The others (side, nagle, nagle_flavour, fix_side, ...) are made of shared str.
_FEW_VALUES = frozenset({"roles", "mss_how", "mss_from", "vantage", "vantage_basis"})


def _interned(col: np.ndarray) -> np.ndarray:
    """An object column whose equal strings are one object."""
    if col.dtype != object or len(col) < 2:
        return col
    codes, uniques = factorize(col)  # code -1 (None, NaN) picks the None after them
    return np.array(uniques + [None], dtype=object)[codes].reshape(col.shape)


@dataclass
class Judged:
    """One batch's result: its tables as `tables.report_columns` gives them (the flows'
    latency columns still to add: `exchanges.add_latency`, once batches are joined), its
    exchanges (`exchanges.paired`), the data arrivals kept for linking relays, and what was
    left out (copies of packets, SYNs that fit no connection)."""

    flows: Columns
    stalls: Columns
    endpoints: Columns
    first_ns: np.ndarray
    first_frame: np.ndarray
    tcp_packets: int
    arrivals: Columns
    duplicates: int
    exchanges: Columns
    # frames of the SYNs that fit no connection (`nagleprobe.syns`), left out
    syn_jumps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def judge(cols: Columns, tuples: np.ndarray | None, ends: TupleEnds | None,
          origin_ns: int, relays: bool = True) -> Judged:
    """build_flows -> detect -> report columns for one batch of whole connections, and its
    data arrivals for linking relays (unless `relays` is off: too many kept already)."""
    flows = build_flows(cols, tuples, ends)
    return _judged(flows, detect(flows), origin_ns, flows.seg["frame"][flows.starts],
                   len(flows.seg["flow"]),
                   arrivals(flows) if relays else {"flow": np.zeros(0, np.int64)},
                   flows.duplicates, flow_exchanges(flows.seg, flows.count), flows.syn_jumps)


def _judged(flows: Flows, det: Detection, origin_ns: int, first_frame: np.ndarray,
            tcp_packets: int, arrived: Columns, duplicates: int,
            exchanged: tuple[Columns, np.ndarray], syn_jumps: np.ndarray | None = None
            ) -> Judged:
    """The report columns of analysed flows as one batch's result (`exchanged`: their
    exchanges and whether each flow carried data, `exchanges.flow_exchanges`)."""
    out = report_columns(flows, det, origin_ns)
    out["flows"].update(kind_columns(*exchanged))
    for table_ in (out["flows"], out["endpoints"]):  # one str object per distinct value
        for k in _FEW_VALUES.intersection(table_):
            table_[k] = _interned(table_[k])
    return Judged(out["flows"], out["stalls"], out["endpoints"], flows.flow["first_ns"],
                  first_frame, tcp_packets, arrived, duplicates, exchanged[0],
                  np.zeros(0, np.int64) if syn_jumps is None else syn_jumps)


def judge_ledger(ledger: Ledger, rows: Columns | None, ends: TupleEnds,
                 origin_ns: int) -> Judged:
    """Judge the last piece of a connection judged in pieces, then the whole connection."""
    flows, det = ledger.finish(rows, ends)
    arrived = ({k: np.concatenate([a[k] for a in ledger.arrivals]) for k in ledger.arrivals[0]}
               if ledger.arrivals else {"flow": np.zeros(0, np.int64)})
    ledger.arrivals = None
    return _judged(flows, det, origin_ns, np.array([ledger.start_frame]), ledger.packets,
                   arrived, ledger.duplicates, ledger.exchanged())


def judge_window(cols: Columns, tuples: np.ndarray
                 ) -> tuple[Flows, Evidence, Params, Detection]:
    """build_flows -> detect on the packets of open connections held whole (`tuples`: each
    row's connection, numbered 0..), with the evidence the rule was given (its candidates, those
    judged no stall included)."""
    f = build_flows(cols, tuples)
    p = params(f.flow)
    ev = evidence(f, p.mss)
    return f, ev, p, decide(ev, p, f.count)
