"""The result of an analysis as data: the flows, stalls and endpoints tables as numpy columns,
built column-wise from the stages' arrays (no Python object per row), the JSON's capture
object, and `Result`, what every renderer (text, JSON, HTML, plots, Wireshark filters) may
read of a report. `dataframes` makes pandas DataFrames of the columns; `report.Report` holds
them all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import advice, encap
from .columns import Columns
from .detect import REASONS, Detection, weighted_median
from .flows import Flows
from .humanize import SIDES
from .read import CaptureInfo
from .roundtrips import vantage_basis

if TYPE_CHECKING:
    import pandas as pd

    from .held import Held
    from .weirds import Weird

_NAGLE = np.array(["on", "off", "unknown"], dtype=object)  # each row refers to one of these


def report_columns(f: Flows, det: Detection, origin_ns: int) -> dict[str, Columns]:
    """The flows, stalls and endpoints tables as numpy columns ("flows", "stalls",
    "endpoints"): times (the TABLE_ONLY columns) as epoch nanoseconds, text as objects, an
    unknown window scale as -1. `table` makes a DataFrame of each; the stream keeps its
    batches' results in this form and makes the tables once, at the end."""
    st, fl = det.stalls, f.flow
    nflows = f.count
    key = st["flow"] * 2 + st["dir"]
    stall_ns = np.bincount(key, weights=st["stall_ns"], minlength=nflows * 2).reshape(-1, 2)
    stall_n = np.bincount(key, minlength=nflows * 2).reshape(-1, 2)
    answered = np.bincount(key, weights=det.answered, minlength=nflows * 2).reshape(-1, 2)
    behind = np.bincount(key, weights=st["behind_full"], minlength=nflows * 2).reshape(-1, 2)
    headed = np.bincount(key, weights=advice.header_then_body(st["small_bytes"], st["held_bytes"]),
                         minlength=nflows * 2).reshape(-1, 2)
    sizes = [np.full(nflows * 2, np.nan) for _ in range(2)]  # median S1, S2 per flow and side
    if len(key):
        for out, b in zip(sizes, (st["small_bytes"], st["held_bytes"])):
            g, med = weighted_median(b, key, np.ones(len(key), dtype=np.int64))
            out[g] = med

    # endpoints: the delayed ACKs of an endpoint are measured on the data it received
    proofs = det.nagle_off_proofs.reshape(-1, 2)
    flavour = det.flavour.reshape(-1, 2)
    nagle = _NAGLE[np.select([(stall_n > 0) | (flavour == "classic") | (flavour == "minshall"),
                              proofs > 0], [0, 1], 2)]
    recv = lambda a: a.reshape(-1, 2)[:, ::-1]  # noqa: E731  per endpoint, from the peer's data
    timers = np.round(recv(det.late_ack_median_ms), 1)
    endpoints = {
        "flow": np.arange(nflows).repeat(2),
        "side": np.tile(np.array(SIDES, dtype=object), nflows),
        "endpoint": np.stack([fl["client"], fl["server"]], axis=1).reshape(-1),
        "nagle": nagle.reshape(-1),
        "nagle_off_evidence": proofs.reshape(-1),
        "nagle_flavour": flavour.reshape(-1),
        "not_classic_evidence": det.not_classic_proofs,
        "held_behind_small": det.held_behind_small,
        "held_behind_full": det.held_behind_full,
        "delayed_ack_ms": timers.reshape(-1),
        "delayed_acks": recv(det.late_acks).reshape(-1),
        "quick_acks": recv(det.quick_acks).reshape(-1),
        "mss": fl["mss"].reshape(-1),
        "mss_from": fl["mss_how"].reshape(-1),
        "window_scale": np.where(fl["wscale"] >= 0, fl["wscale"], -1).reshape(-1).astype(np.int64),
    }

    duration = (fl["last_ns"] - fl["first_ns"]) / 1e9
    lost_ms = stall_ns.sum(axis=1) / 1e6
    hold_n = det.hold_count.reshape(-1, 2).sum(axis=1)
    hold_ms = det.hold_ns.reshape(-1, 2).sum(axis=1) / 1e6
    why_not = det.why_not.reshape(nflows, 2, len(REASONS)).sum(axis=1)
    flows = {
        "id": np.arange(nflows), "client": fl["client"], "server": fl["server"],
        "roles": fl["roles"], "tunnel": np.asarray(fl["tunnel"], dtype=np.int64),
        "vantage": fl["vantage"],
        "vantage_basis": np.array([vantage_basis(h, c, s, b) for h, c, s, b in zip(
            fl["rtt_how"].tolist(), fl["rtt_client_ms"].tolist(), fl["rtt_server_ms"].tolist(),
            fl["both_near"].tolist())] or [], dtype=object),
        "rtt_ms": np.round(fl["rtt_ms"], 3), "rtt_client_ms": np.round(fl["rtt_client_ms"], 3),
        "rtt_server_ms": np.round(fl["rtt_server_ms"], 3), "packets": fl["packets"], "pieces": fl["pieces"],
        "retransmissions": fl["retransmissions"], "keepalives_or_probes": fl["keepalives"],
        "start_s": np.round((fl["first_ns"] - origin_ns) / 1e9, 6),
        "start_time": np.asarray(fl["first_ns"], dtype=np.int64),
        "stalls": stall_n.sum(axis=1), "stall_ms": np.round(lost_ms, 3),
        "duration_s": np.round(duration, 6),
        "duration_without_stalls_s": np.round(np.maximum(duration - lost_ms / 1e3, 0.0), 6),
        "lost_share": np.round(np.divide(lost_ms / 1e3, duration, out=np.zeros(nflows),
                                         where=duration > 0), 4),
        "nagle_holds": hold_n, "nagle_hold_ms": np.round(hold_ms, 3),
        **{f"why_not_{r}": why_not[:, j] for j, r in enumerate(REASONS)},
    }
    flows.update(advice.fix_columns(np.stack([fl["client"], fl["server"]], axis=1), stall_n,
                                    stall_ns, timers, behind, answered, headed,
                                    *(a.reshape(-1, 2) for a in sizes), hold_n, hold_ms,
                                    duration))
    # Wireshark frame numbers of each flow's first and last packet
    flows["first_frame"], flows["last_frame"] = fl["first_frame"], fl["last_frame"]

    order = np.lexsort((st["released_frame"], st["flow"]))
    if np.array_equal(order, np.arange(len(order))):
        order = slice(None)  # in that order already (as detect gives them): no copies
    sides = np.array(SIDES, dtype=object)
    stalls = {
        "flow": st["flow"][order], "sender": sides[st["dir"][order]],
        "endpoint": np.where(st["dir"][order] == 0, fl["client"][st["flow"][order]],
                             fl["server"][st["flow"][order]]),
        "delay_ms": np.round(st["stall_ns"][order] / 1e6, 3),
        "held_bytes": st["held_bytes"][order], "small_bytes": st["small_bytes"][order],
        "behind_full": st["behind_full"][order],
        "peer_ack_delay_ms": np.round(st["ack_delay_ns"][order] / 1e6, 3),
        "reaction_ms": np.round(st["reaction_ns"][order] / 1e6, 3),
        **{f"{k}_frame": st[f"{k}_frame"][order] for k in STALL_POINTS},
        **{f"{k}_s": np.round((st[f"{k}_ns"][order] - origin_ns) / 1e9, 6)
           for k in STALL_POINTS},
        **{f"{k}_time": np.asarray(st[f"{k}_ns"][order], dtype=np.int64) for k in STALL_POINTS},
        "confidence": st["confidence"][order],
    }
    return {"flows": flows, "stalls": stalls, "endpoints": endpoints}


def capture_doc(info: CaptureInfo, skipped: dict[str, int], tcp_packets: int, origin_ns: int,
                warnings: list[Weird] | None = None) -> dict[str, Any]:
    """The `capture` object: how the file was read (its warnings `weirds.Weird`s, which
    the JSON document writes as objects)."""
    return {"path": info.path, "format": info.format, "compressed": info.compressed,
            "link_types": list(info.link_types), "packets": info.packets,
            "tcp_packets": int(tcp_packets), "skipped": dict(sorted(skipped.items())),
            "warnings": list(info.warnings if warnings is None else warnings),
            "time_origin_ns": int(origin_ns), "time_step_ns": info.time_step_ns,
            "tunnels": [{"id": i + 1, "layers": layers, "text": encap.describe_text(layers)}
                        for i, layers in enumerate(info.tunnels.layers)]}
STALL_POINTS = ("small", "ack", "released")


# datetime columns of the tables: for notebooks only, the JSON keeps its seconds
TABLE_ONLY = ("start_time", "small_time", "ack_time", "released_time")
# integer columns whose missing values are -1 here (NA in the DataFrames, null in JSON)
NULLABLE = ("window_scale", "tcp_stream", "relay_upstream_flow")


def rows_of(columns: Columns, ids: np.ndarray | list[int]) -> np.ndarray:
    """The rows of the flows with these ids (in that order) in a flows table's columns;
    KeyError for an id it does not hold."""
    have, ids = columns["id"], np.asarray(ids, dtype=np.int64).reshape(-1)
    if not len(ids):
        return ids
    if 0 <= ids.min() and ids.max() < len(have) and np.array_equal(have[ids], ids):
        return ids  # a whole capture's flows: the id is the row
    order = np.argsort(have, kind="stable")
    rows = order[np.minimum(np.searchsorted(have, ids, sorter=order), len(have) - 1)] \
        if len(have) else np.zeros(len(ids), dtype=np.int64)
    missing = ids[have[rows] != ids] if len(have) else ids
    if len(missing):
        raise KeyError(int(missing[0]))
    return rows


class Result(Protocol):
    """What a renderer reads of a report (`report.Report` is the one implementation): the
    renderers import this module, never `report`, so that `Report` can offer them as its
    methods without an import circle."""

    capture: dict[str, Any]  # how the file was read (`capture_doc`)
    selection: dict[str, Any] | None  # what `Report.select` chose; None: the whole capture
    vantage_doc: dict[str, Any] | None  # several vantages joined (`vantage.join`), else None

    def columns(self, name: str) -> Columns:
        """The numpy columns of the table `name` ("flows", "stalls" or "endpoints")."""

    def summary(self) -> dict[str, Any]:
        """Stalls, flows, flows with stalls and the time they cost."""

    def verdict(self) -> str:
        """One sentence: are stalls present, where, and what they cost."""

    def fix_groups(self, ids: list[int] | None = None) -> list[dict[str, Any]]:
        """One fix per endpoint to change, worst first (see `advice.fix_groups`)."""

    def held(self) -> Held:
        """The held messages of the first stalls of each flow (`nagleprobe.held`)."""

    @property
    def flows(self) -> pd.DataFrame:
        """The flows table as a DataFrame, indexed by flow id."""

    @property
    def stalls(self) -> pd.DataFrame:
        """The stalls table as a DataFrame."""

    @property
    def endpoints(self) -> pd.DataFrame:
        """The endpoints table as a DataFrame, two rows per flow."""

    @property
    def segments(self) -> pd.DataFrame:
        """One row per TCP segment of the report's flows."""

    @property
    def exchanges(self) -> pd.DataFrame:
        """One row per request/response exchange of the report's flows."""

    @property
    def vantages(self) -> pd.DataFrame:
        """One row per connection and vantage (no rows for one capture)."""
