"""The analysis result: pandas tables for notebooks, a JSON document, and the text report."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from . import advice, encap, relay, wireshark
from . import selection as sel
from .advice import FIX_FIELDS, HOLD_SHARE, HOLD_TEXT_MS
from .decode import SYN, TCP_FLAG_NAMES
from .detect import REASONS, Detection, timer_name  # noqa: F401 (timer_name: the old home)
from .errors import printable, utf8_safe
from .flows import Flows, vantage_basis
from .read import CaptureInfo
from .selection import parse_host, selection_line, worst_first
from .words import LONG_MS, SIDES, human_count, human_ms  # noqa: F401 (re-exported)

TEXT_EVIDENCE_ROWS = 12  # stalls listed per flow in the text report (JSON has all)
TEXT_DETAILED_FLOWS = 10  # stalled flows explained in full, worst first
TEXT_LISTED_FLOWS = 50  # further flows listed one per line
TEXT_WARNINGS = 20  # capture warnings printed in the text report (JSON has all)
FLOWS_PER_PIECE = 5000  # flows per piece of the JSON text (json_pieces): 35 MB of objects
TEXT_WIDTH = 100  # the text report's width when not on a terminal (print(report), pipes)
SCHEMA_VERSION = 1  # of the JSON document (nagleprobe/schema/report.schema.json)


def document_head() -> dict[str, Any]:
    """The JSON document's first fields: its schema version and the tool that wrote it."""
    from . import __version__

    return {"schema_version": SCHEMA_VERSION, "tool": {"name": "nagleprobe",
                                                       "version": __version__}}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the document (shipped as nagleprobe/schema/report.schema.json)."""
    from importlib.resources import files

    return json.loads(files("nagleprobe").joinpath("schema/report.schema.json").read_text())


@dataclass
class Report:
    """Everything nagleprobe found in one capture.

    `capture`: how the file was read (a dict). `flows`, `stalls`, `endpoints`: pandas
    DataFrames, one row per flow, per stall and per flow endpoint; `segments` one row per
    TCP segment, built on first use from `source` (columns of all four in the README).
    `to_dict()` is the JSON document. `flow(i)`, `worst(n)` and `select(...)` give a
    Report restricted to some flows.
    """

    capture: dict[str, Any]
    flows: pd.DataFrame
    stalls: pd.DataFrame
    endpoints: pd.DataFrame
    source: Flows | None = field(default=None, repr=False, compare=False)
    # how to read the capture's reassembled flows again when `source` was not kept (a
    # streamed analysis): set by the pipeline, called with the report
    reread: Callable[[Report], Flows] | None = field(default=None, repr=False, compare=False)
    _segments: pd.DataFrame | None = field(default=None, init=False, repr=False, compare=False)
    # what `select` chose (the JSON's "selection"); None for the whole capture
    selection: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def stall_count(self) -> int:
        return len(self.stalls)

    def summary(self) -> dict[str, Any]:
        return {"stalls": len(self.stalls), "flows": len(self.flows),
                "flows_with_stalls": int((self.flows["stalls"] > 0).sum()),
                "stall_ms": round(float(self.flows["stall_ms"].sum()), 3)}

    def verdict(self) -> str:
        """One sentence: are stalls present, where, and what they cost."""
        s = self.summary()
        flows = f"TCP flow{'' if s['flows'] == 1 else 's'}"
        if not s["stalls"]:
            return f"No Nagle/delayed-ACK stalls found in {human_count(s['flows'])} {flows}."
        return (f"Nagle/delayed-ACK stalls found: {human_count(s['stalls'])} stall"
                f"{'' if s['stalls'] == 1 else 's'} in {human_count(s['flows_with_stalls'])} of "
                f"{human_count(s['flows'])} {flows}, costing {human_ms(s['stall_ms'])}.")

    def flow_docs(self, ids: list[int] | None = None) -> list[dict[str, Any]]:
        """Flows as JSON objects (all, or the given ids), endpoints and fix nested."""
        fl = self.flows if ids is None else self.flows.loc[ids]
        fl = fl.drop(columns=[c for c in _TABLE_ONLY if c in fl.columns])
        sel = fl["id"].to_numpy()
        ep = self.endpoints.loc[np.stack([2 * sel, 2 * sel + 1], axis=1).reshape(-1)]
        eps = _records(ep.drop(columns=["flow", "side"]))
        filters = wireshark.filter_docs(self, sel)
        tunnels = self.capture.get("tunnels", [])
        docs = []
        for j, rec in enumerate(_records(fl)):
            rec["tunnel"] = tunnels[rec["tunnel"] - 1] if rec.get("tunnel") else None
            fix = {k: rec.pop(f"fix_{k}") for k in FIX_FIELDS}
            why = {r: rec.pop(f"why_not_{r}") for r in REASONS}
            rec["why_not"] = {r: n for r, n in why.items() if n}
            up = {k.removeprefix("relay_"): rec.pop(k) for k in relay.RELAY_COLUMNS}
            rec["relay"] = up if up["upstream_flow"] is not None else None
            rec["endpoints"] = {"client": eps[2 * j], "server": eps[2 * j + 1]}
            rec["fix"] = fix if fix["side"] is not None else None
            rec["wireshark"] = filters[j]
            docs.append(rec)
        return docs

    def stall_docs(self, flow: int | None = None) -> list[dict[str, Any]]:
        """Stalls as JSON objects (all, or one flow's), frames and times nested."""
        st = self.stalls if flow is None else self.stalls[self.stalls["flow"] == flow]
        st = st.drop(columns=[c for c in _TABLE_ONLY if c in st.columns])
        docs = []
        for rec in _records(st):
            conf = rec.pop("confidence")
            rec["frames"] = {k: rec.pop(f"{k}_frame") for k in _STALL_POINTS}
            rec["times"] = {k: rec.pop(f"{k}_s") for k in _STALL_POINTS}
            if "small_file" in rec:  # a file set: the file of each frame
                rec["files"] = {k: rec.pop(f"{k}_file") for k in _STALL_POINTS}
            rec["confidence"] = conf
            docs.append(rec)
        return docs

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON document (see README, "JSON output")."""
        return {**document_head(), "capture": _capture_doc(self.capture),
                "selection": self.selection, "summary": self.summary(),
                "flows": self.flow_docs(), "stalls": self.stall_docs()}

    def to_json(self) -> str:
        """`to_dict()` as compact JSON text, built without a Python object per stall: pandas
        writes the flat stall rows, and the nesting of frames/times is spliced into the text."""
        return "".join(self.json_pieces())

    def json_pieces(self, rows_per_piece: int = 20_000) -> Iterator[str]:
        """`to_json()` in pieces (the stalls a slice at a time), to write a large document
        without holding all its text at once."""
        head = json.dumps({**document_head(), "capture": _capture_doc(self.capture),
                           "selection": self.selection, "summary": self.summary(), "flows": []},
                          separators=(",", ":"), allow_nan=False)
        assert head.endswith('"flows":[]}')
        # the flows a slice at a time too (the first slice in the first piece, the last one
        # ending it): a million flows (a port scan) as Python objects at once took gigabytes
        # (at most FLOWS_PER_PIECE: a flow's object is ten times a stall's row)
        # (ids a slice at a time as Python ints: a list of a million took 36 MB more)
        ids, per = self.flows["id"].to_numpy(), min(rows_per_piece, FLOWS_PER_PIECE)
        piece = head[:-2]
        for a in range(0, max(len(ids), 1), per):
            part = json.dumps(self.flow_docs(ids[a:a + per].tolist()) if len(ids) else [],
                              separators=(",", ":"), allow_nan=False)
            if a:
                yield piece
                piece = ","
            piece += part[1:-1]
        yield piece + '],"stalls":['
        flat = self.stalls[[c for c in self.stalls.columns
                            if c != "confidence" and c not in _TABLE_ONLY] + ["confidence"]]
        for a in range(0, len(flat), rows_per_piece):
            rows = flat.iloc[a:a + rows_per_piece].to_json(orient="records", double_precision=6)
            for old, new in _STALL_SPLICE + (_FILES_SPLICE if "small_file" in flat else []):
                rows = rows.replace(old, new)
            yield ("," if a else "") + rows[1:-1]
        yield "]}"

    def to_text(self, width: int = TEXT_WIDTH) -> str:
        """The text report, prose wrapped to `width` columns (the CLI passes the terminal's)."""
        return render_text(self, width)

    def __repr__(self) -> str:
        """One line: the file, its flows, stalls and the time they cost."""
        s = self.summary()
        return (f"<nagleprobe.Report {self.capture.get('path')!r}: {s['flows']} flow"
                f"{'' if s['flows'] == 1 else 's'}, {s['stalls']} stall"
                f"{'' if s['stalls'] == 1 else 's'}, {s['stall_ms']:.1f} ms lost>")

    def __str__(self) -> str:
        """The CLI's text report, so that `print(report)` shows exactly what the CLI prints."""
        return self.to_text().removesuffix("\n")

    # --- notebook helpers (tables are never modified; selections share `source`) ---

    @property
    def segments(self) -> pd.DataFrame:
        """Every TCP segment of the report's flows (columns in the README), built on first
        access from the reassembled flows so that `analyze` and the CLI do not pay for it."""
        if self._segments is None:
            files = self.capture.get("files")
            if self.source is None:
                if self.reread is None:
                    raise ValueError(f"{self.capture['path']}: no segments: the report keeps "
                                     "neither its packets nor a way to read them again")
                self.source = self.reread(self)
            self._segments = segment_table(self.source, self.capture["time_origin_ns"],
                                           self.flows["id"].to_numpy())
            if files:  # a file set: the frame in its file, and the file
                from .fileset import file_frames

                idx, local = file_frames(self._segments["frame"].to_numpy(dtype=np.int64))
                self._segments["frame"] = local
                at = list(self._segments.columns).index("frame") + 1
                self._segments.insert(at, "file", pd.array(np.asarray(
                    [f["path"] for f in files], dtype=object)[idx], dtype=TEXT_DTYPE))
        return self._segments

    def flow(self, flow_id: int) -> Report:
        """The report of one flow (by its `id`)."""
        if flow_id not in self.flows.index:
            raise KeyError(f"no flow {flow_id} in this report (ids: {_id_list(self.flows)})")
        return self._subset([flow_id])

    def worst(self, n: int = 5) -> Report:
        """The `n` flows that lost the most time to stalls, worst first (flows without stalls
        are never among them)."""
        stalled = self.flows[self.flows["stalls"] > 0]
        order = worst_first(stalled)
        return self._subset(order["id"].head(n).tolist())

    def select(self, endpoint: str | None = None, port: int | Iterable[int] | None = None,
               side: str | None = None, stalled: bool | None = None, *,
               host: str | Iterable[str] | None = None, flow: int | Iterable[int] | None = None,
               top: int | None = None, min_confidence: float | None = None) -> Report:
        """The report of some flows, as `analyze --port/--host/--flow/--top/--min-confidence`
        (and `check`) select them; each argument takes one value or a list.

        `port`: flows with an endpoint on one of these ports; `host`: with an endpoint at one
        of these addresses or networks ("10.0.0.0/8"); `flow`: these flow ids;
        `endpoint`: an endpoint "ip:port", "[ipv6]:port" or just the address; `side`
        ("client"/"server") makes `endpoint`, `port` and `host` match that side only (with
        `endpoint` or `side`, port and host must match the same endpoint); `stalled=True/False`
        keeps only flows with / without stalls; `min_confidence`: stalls below it are ignored
        (they leave `stalls` and the flows' counts); `top`: then the N flows that lost the most
        time, worst first (as `worst(n)`). The result's `selection` (the JSON's "selection")
        says what was selected."""
        if side not in (None, *SIDES):
            raise ValueError(f"side must be 'client' or 'server', not {side!r}")
        ports = tuple(int(p) for p in sel.as_tuple(port))
        hosts = tuple(_parse_hosts(sel.as_tuple(host)))
        flow_ids = tuple(int(i) for i in sel.as_tuple(flow))
        if min_confidence is not None and not 0 <= min_confidence <= 1:
            raise ValueError(f"min_confidence must be between 0 and 1, not {min_confidence!r}")
        if top is not None and (int(top) != top or top < 0):
            raise ValueError(f"top must be a whole number >= 0, not {top!r}")
        for i in flow_ids:
            if i not in self.flows.index:
                raise KeyError(f"no flow {i} in this report (ids: {_id_list(self.flows)})")
        flows, stalls = self.flows, self.stalls
        keep_stall = sel.confident(stalls, min_confidence)
        ignored = int((~keep_stall).sum())
        if ignored:
            stalls = stalls[keep_stall]
            flows = sel.recount(flows, stalls)
        if endpoint is None and side is None:
            keep = sel.flow_mask(flows, ports, hosts)
        else:  # the endpoint, port and host on one side (or either side)
            nets = sel.networks(hosts)
            keep = np.zeros(len(flows), dtype=bool)
            for s in SIDES if side is None else (side,):
                m = np.logical_and(*sel.endpoint_hits(flows[s], ports, nets))
                if endpoint is not None:
                    addr, _ = sel.split_endpoints(flows[s])
                    m &= (flows[s] == endpoint).to_numpy() | (addr == endpoint.strip("[]"))
                keep |= m
        if flow_ids:
            keep &= flows["id"].isin(flow_ids).to_numpy()
        if stalled is not None:
            keep &= (flows["stalls"] > 0).to_numpy() == stalled
        ids = flows["id"].to_numpy()[keep].tolist()
        if top is not None:
            chosen = flows.loc[ids]
            chosen = worst_first(chosen[chosen["stalls"] > 0])
            ids = chosen["id"].head(int(top)).tolist()
        base = Report(self.capture, flows, stalls, self.endpoints, self.source, self.reread)
        base._segments = self._segments
        sub = base._subset(ids)
        prev = self.selection
        criteria = {"ports": list(ports), "hosts": list(hosts), "flows": list(flow_ids),
                    "endpoint": endpoint, "side": side, "stalled": stalled,
                    "top": None if top is None else int(top),
                    "min_confidence": float(min_confidence or 0.0)}
        text = sel.describe(criteria)
        sub.selection = {
            **criteria,
            "flows_total": prev["flows_total"] if prev else len(self.flows),
            "flows_selected": len(ids),
            "stalls_ignored": (prev["stalls_ignored"] if prev else 0) + int(
                (~keep_stall[self.stalls["flow"].isin(ids).to_numpy()]).sum()),
            "text": f"{prev['text']}, then {text}" if prev else text}
        return sub

    def _subset(self, ids: list[int]) -> Report:
        """A Report with only the given flows (in that order) and their stalls/endpoints."""
        ids = [int(i) for i in ids]
        stalls = self.stalls[self.stalls["flow"].isin(ids)]
        ep = self.endpoints.loc[[2 * i + k for i in ids for k in (0, 1)]]
        sub = Report(self.capture, self.flows.loc[ids], stalls, ep, self.source, self.reread)
        if self._segments is not None:
            sub._segments = self._segments[self._segments["flow"].isin(ids)]
        return sub

    def _repr_html_(self) -> str:
        from .html_report import summary_html

        return summary_html(self)

    def to_html(self, plots: bool = True) -> str:
        """The self-contained HTML report (see `nagleprobe.html_report`); `plots` needs
        matplotlib (the `plot` extra)."""
        from .html_report import render_html

        return render_html(self, plots=plots)


# datetime columns of the tables: for notebooks only, the JSON keeps its seconds
_TABLE_ONLY = ("start_time", "small_time", "ack_time", "released_time")
# the dtype pandas gives text (str from pandas 3, object before): every text column has it,
# also when a table is empty or a column holds only missing values
TEXT_DTYPE = pd.Series(["x"]).dtype
_STALL_POINTS = ("small", "ack", "released")
# flat stall columns -> the nested "frames" and "times" objects of the JSON contract
_STALL_SPLICE = [('"small_frame":', '"frames":{"small":'), (',"ack_frame":', ',"ack":'),
                 (',"released_frame":', ',"released":'), (',"small_s":', '},"times":{"small":'),
                 (',"ack_s":', ',"ack":'), (',"released_s":', ',"released":'),
                 (',"confidence":', '},"confidence":')]
# a file set's stall columns small_file.. (between released_s and confidence) -> "files"
_FILES_SPLICE = [(',"small_file":', '},"files":{"small":'), (',"ack_file":', ',"ack":'),
                 (',"released_file":', ',"released":')]


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain Python dicts (Python scalars; NaN and NA as None, i.e. JSON null)."""
    cols = []
    for name in df.columns:
        col = df[name]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f":
            cols.append([None if x != x else x for x in col.to_numpy().tolist()])
        elif isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":
            cols.append(col.to_numpy().tolist())
        else:  # text, objects, pandas extension types (Int64 with NA): missing -> None
            cols.append(col.to_numpy(dtype=object, na_value=None).tolist())
    names = list(df.columns)
    return [dict(zip(names, row)) for row in zip(*cols)] if names else []


def build_report(info: CaptureInfo, skipped: dict[str, int], f: Flows, det: Detection,
                 origin_ns: int) -> Report:
    """Assemble the tables from the pipeline's stages (vectorised: no per-packet objects)."""
    cols = report_columns(f, det, origin_ns)
    capture = capture_doc(info, skipped, len(f.seg["flow"]), origin_ns)
    add_tcp_streams(cols["flows"], capture)
    arr = relay.arrivals(f)
    if len(arr["flow"]) > relay.MAX_ARRIVALS:
        capture["warnings"].append(relay.relay_warning())
        arr = None
    cols["flows"].update(relay.link(cols["flows"], cols["stalls"], arr))
    return Report(capture, table(cols["flows"]), table(cols["stalls"]),
                  table(cols["endpoints"]), source=f)


def report_columns(f: Flows, det: Detection, origin_ns: int) -> dict[str, dict[str, np.ndarray]]:
    """The flows, stalls and endpoints tables as numpy columns ("flows", "stalls",
    "endpoints"): times (the _TABLE_ONLY columns) as epoch nanoseconds, text as objects, an
    unknown window scale as -1. `table` makes a DataFrame of each; the stream keeps its
    batches' results in this form and makes the tables once, at the end."""
    st, fl = det.stalls, f.flow
    nflows = f.count
    key = st["flow"] * 2 + st["dir"]
    stall_ns = np.bincount(key, weights=st["stall_ns"], minlength=nflows * 2).reshape(-1, 2)
    stall_n = np.bincount(key, minlength=nflows * 2).reshape(-1, 2)
    answered = np.bincount(key, weights=det.answered, minlength=nflows * 2).reshape(-1, 2)

    # endpoints: the delayed ACKs of an endpoint are measured on the data it received
    proofs = det.nagle_off_proofs.reshape(-1, 2)
    flavour = det.flavour.reshape(-1, 2)
    nagle = np.select([(stall_n > 0) | (flavour == "classic") | (flavour == "minshall"),
                       proofs > 0], ["on", "off"], "unknown").astype(object)
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
    hold_n = np.bincount(det.holds["flow"], minlength=nflows)
    hold_ms = np.bincount(det.holds["flow"], weights=det.holds["stall_ns"], minlength=nflows) / 1e6
    why_not = det.why_not.reshape(nflows, 2, len(REASONS)).sum(axis=1)
    retrans = np.bincount(f.seg["flow"][f.seg["retrans"]], minlength=nflows)
    keepalive = np.bincount(f.seg["flow"][f.seg["keepalive"]], minlength=nflows)
    flows = {
        "id": np.arange(nflows), "client": fl["client"], "server": fl["server"],
        "roles": fl["roles"], "tunnel": np.asarray(fl["tunnel"], dtype=np.int64),
        "vantage": fl["vantage"],
        "vantage_basis": np.array([vantage_basis(h, c, s, b) for h, c, s, b in zip(
            fl["rtt_how"].tolist(), fl["rtt_client_ms"].tolist(), fl["rtt_server_ms"].tolist(),
            fl["both_near"].tolist())] or [], dtype=object),
        "rtt_ms": np.round(fl["rtt_ms"], 3), "rtt_client_ms": np.round(fl["rtt_client_ms"], 3),
        "rtt_server_ms": np.round(fl["rtt_server_ms"], 3), "packets": fl["packets"],
        "retransmissions": retrans, "keepalives_or_probes": keepalive,
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
                                    stall_ns, timers, answered, hold_n, hold_ms, duration))
    # Wireshark frame numbers of each flow's first and last packet
    frame = f.seg["frame"].astype(np.int64)
    flows["first_frame"] = np.minimum.reduceat(frame, f.starts) if nflows else frame[:0]
    flows["last_frame"] = np.maximum.reduceat(frame, f.starts) if nflows else frame[:0]

    order = np.lexsort((st["released_frame"], st["flow"]))
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
        **{f"{k}_frame": st[f"{k}_frame"][order] for k in _STALL_POINTS},
        **{f"{k}_s": np.round((st[f"{k}_ns"][order] - origin_ns) / 1e9, 6)
           for k in _STALL_POINTS},
        **{f"{k}_time": np.asarray(st[f"{k}_ns"][order], dtype=np.int64) for k in _STALL_POINTS},
        "confidence": st["confidence"][order],
    }
    return {"flows": flows, "stalls": stalls, "endpoints": endpoints}


def table(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """A DataFrame of `report_columns` columns (used as they are, not copied): times as UTC
    datetimes, an unknown window scale as NA, text in TEXT_DTYPE. `columns` is emptied, so
    that each column the table converts is let go of at once, not held twice meanwhile."""
    out = {}
    for name in list(columns):
        col = columns.pop(name)
        if name in _TABLE_ONLY:
            col = _utc(col)
        elif name in ("window_scale", "tcp_stream", "relay_upstream_flow"):
            known = col >= 0
            col = pd.array(col, dtype="Int64")
            col[~known] = pd.NA
        out[name] = col
    df = pd.DataFrame(out, copy=False)
    del out, col
    return settle_dtypes(df)


def add_tcp_streams(flows: dict[str, np.ndarray], capture: dict[str, Any]) -> None:
    """Add the flows' Wireshark `tcp.stream` (-1: not computable exactly; NA in the table)
    to the columns of all of a capture's flows (see `wireshark.tcp_streams`)."""
    flows["tcp_stream"] = wireshark.tcp_streams(flows["first_frame"], flows["client"],
                                                flows["server"], capture)


def _utc(ns: np.ndarray) -> pd.DatetimeIndex:
    """Epoch nanoseconds as UTC pandas datetimes."""
    return pd.to_datetime(np.asarray(ns, dtype=np.int64), unit="ns", utc=True)


def settle_dtypes(df: pd.DataFrame) -> pd.DataFrame:
    """Give every text column the same dtype whatever its content (an empty column or one
    of only None would otherwise stay `object` under pandas 3)."""
    for name in df.columns:
        if df[name].dtype == object:
            df[name] = df[name].astype(TEXT_DTYPE)
    return df


def segment_table(f: Flows, origin_ns: int, ids: np.ndarray | None = None) -> pd.DataFrame:
    """One row per TCP segment of the given flows (all if None), in flow then time order.

    seq is relative to the sender's ISN and ack to the peer's (0 at the SYN, as Wireshark
    shows them); `window_bytes` applies the window scale both SYNs agreed on (never to SYNs).
    """
    s = f.seg
    if ids is None:
        rows = np.arange(len(s["flow"]))
    else:
        bounds = [f.rows(int(i)) for i in ids]
        rows = (np.concatenate([np.arange(b.start, b.stop) for b in bounds]) if bounds
                else np.zeros(0, dtype=np.int64))
    fid, d = s["flow"][rows], s["dir"][rows].astype(np.int64)
    flags = s["flags"][rows].astype(np.int64)
    ts = s["ts_ns"][rows].astype(np.int64)
    ack = pd.array(s["ack"][rows], dtype="Int64")
    ack[s["ack"][rows] < 0] = pd.NA
    window = s["window"][rows].astype(np.int64)
    wscale = f.flow["wscale"].reshape(-1, 2)[fid, d] if len(rows) else np.zeros(0, np.int64)
    syn = (flags & SYN) != 0
    window_bytes = pd.array(np.where(syn, window, window << np.maximum(wscale, 0)), dtype="Int64")
    window_bytes[(wscale < 0) & ~syn] = pd.NA
    return settle_dtypes(pd.DataFrame({
        "flow": fid.astype(np.int64),
        "sender": np.array(SIDES, dtype=object)[d],
        "frame": s["frame"][rows].astype(np.int64),
        "time": _utc(ts),
        "time_s": (ts - origin_ns) / 1e9,
        "seq": s["seq"][rows].astype(np.int64),
        "ack": ack,
        "payload": s["payload"][rows].astype(np.int64),
        "flags": _flag_names(flags),
        "window": window,
        "window_bytes": window_bytes,
        "retransmission": s["retrans"][rows].astype(bool),
        "keepalive": s["keepalive"][rows].astype(bool),
    }))


def _flag_names(flags: np.ndarray) -> np.ndarray:
    """TCP flags as Wireshark names them, e.g. "PSH,ACK", one lookup per distinct value."""
    uniq, inv = np.unique(flags, return_inverse=True)
    names = np.array([",".join(n for b, n in enumerate(TCP_FLAG_NAMES) if v >> b & 1)
                      for v in uniq.tolist()], dtype=object)
    return names[inv.reshape(-1)]


def _parse_hosts(hosts: tuple[Any, ...]) -> list[str]:
    """Host selectors normalised as check has them (ValueError for one that is not)."""
    return [parse_host(str(h)) for h in hosts]


def _id_list(flows: pd.DataFrame, limit: int = 10) -> str:
    ids = flows["id"].tolist()
    return ", ".join(map(str, ids[:limit])) + (" ..." if len(ids) > limit else "") or "none"


def capture_doc(info: CaptureInfo, skipped: dict[str, int], tcp_packets: int, origin_ns: int,
                warnings: list[str] | None = None) -> dict[str, Any]:
    """The JSON document's `capture` object: how the file was read."""
    return {"path": info.path, "format": info.format, "compressed": info.compressed,
            "link_types": list(info.link_types), "packets": info.packets,
            "tcp_packets": int(tcp_packets), "skipped": dict(sorted(skipped.items())),
            "warnings": list(info.warnings if warnings is None else warnings),
            "time_origin_ns": int(origin_ns),
            "tunnels": [{"id": i + 1, "layers": layers, "text": encap.describe_text(layers)}
                        for i, layers in enumerate(info.tunnels.layers)]}


def _nagle_text(e: dict[str, Any]) -> str:
    """"on", "off" or "unknown", with the Nagle rule when the capture shows it."""
    rule = e.get("nagle_flavour")
    return f"{e['nagle']} ({rule} rule)" if rule in ("classic", "minshall") else e["nagle"]


def _flow_notes(f: dict[str, Any], options_cut: bool = False) -> list[str]:
    """Lines on what was inferred, the Nagle holds and why late ACKs were not stalls
    (`options_cut`: the capture's snap length cut TCP options)."""
    out = []
    guessed = []
    if f["roles"] == "guessed":
        guessed.append("roles from the ports (no handshake)")
    mss = {e["mss_from"] for e in f["endpoints"].values()}
    if mss - {"syn"}:
        how = "guessed" if "guessed" in mss else "inferred from repeated full segments"
        why = "SYN options cut by the snap length" if options_cut else "no SYN option"
        guessed.append(f"MSS {how} ({why})")
    if f["rtt_ms"] is None:
        guessed.append("round trips unknown (no handshake, no undelayed data/ACK pair)")
    if guessed:
        out.append("inferred: " + "; ".join(guessed))
    if f["nagle_hold_ms"] >= HOLD_TEXT_MS:  # on a LAN they cost microseconds: JSON only
        ms = f["nagle_hold_ms"]
        share = ms / (1e3 * f["duration_s"]) if f["duration_s"] else 0.0
        worth = (f", {100 * share:.0f}% of the flow: TCP_NODELAY on the sender, or one write "
                 f"per message, saves them" if share >= HOLD_SHARE else "")
        out.append(f"Nagle holds without a delayed ACK: {f['nagle_holds']} (one round trip "
                   f"each, up to {ms:.1f} ms in all{worth}; not stalls)")
    up = f.get("relay")
    if up:
        where = ("the message arrived whole and left split here: the relay must change"
                 if up["split"] == "at-relay" else
                 "the message arrived already split: look upstream")
        out.append(f"relay: {up['out']} forwards what flow {up['upstream_flow']} brings to "
                   f"{up['in']} ({up['stalls_matched']} stalls followed an arrival there); "
                   f"{where}")
    if f["why_not"] and not f["stalls"]:
        n = sum(f["why_not"].values())
        out.append(f"why no stall: {n} late ACK{'s' if n != 1 else ''} followed by the "
                   f"sender's next small segment, ruled out as: " + "; ".join(
                       f"{v} {k.replace('_', ' ')}"
                       for k, v in sorted(f["why_not"].items(), key=lambda kv: -kv[1])))
    return out


class _Pre(str):
    """A text-report line laid out already (a table row): `fit_lines` leaves it alone."""


def fit_lines(lines: list[str], width: int) -> list[str]:
    """Wrap every prose line longer than `width` at spaces, continuation lines indented two
    more than the line's own indent; table rows (`_Pre`) and words longer than the width
    (paths, endpoints) are kept whole."""
    out = []
    for line in lines:
        if len(line) <= width or isinstance(line, _Pre):
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(line.lstrip(" "), width, initial_indent=indent,
                             subsequent_indent=indent + "  ", break_long_words=False,
                             break_on_hyphens=False) or [line]
    return out


_WIDE_HEAD = ("    sender  small seg (S1)      late pure ACK       released (S2)      "
              "held  stall ms  peer ACK ms  conf")
_NARROW_HEAD = "    sender  S1 #      S1 at (s)  ACK #    S2 #      held  stall ms peer ms  conf"


def evidence_lines(ev: list[dict[str, Any]], width: int,
                   files: dict[str, int] | None = None) -> list[str]:
    """The evidence table of a flow's stalls: the wide layout (frames and times of S1, the
    late ACK and S2) when it fits `width`, else a narrow one (frames, S1's time). `files`
    (a file set, see `file_numbers`): frames are shown as fN#frame, N the file's number."""
    def at(s: dict[str, Any], k: str) -> str:
        mark = f"#{s['frames'][k]}"
        return f"f{files[s['files'][k]]}{mark}" if files and "files" in s else mark

    if width >= len(_WIDE_HEAD):
        lines = [_Pre(_WIDE_HEAD)]
        for s in ev:
            t = s["times"]
            lines.append(_Pre(
                f"    {s['sender']:<6}  {at(s, 'small'):<8} {t['small']:>10.6f}  "
                f"{at(s, 'ack'):<8} {t['ack']:>10.6f}  {at(s, 'released'):<8} "
                f"{t['released']:>10.6f} {s['held_bytes']:>5}B {s['delay_ms']:>8.1f}  "
                f"{s['peer_ack_delay_ms']:>10.1f}  {s['confidence']:.2f}"))
        return lines
    lines = [_Pre(_NARROW_HEAD)]
    for s in ev:
        t = s["times"]
        lines.append(_Pre(
            f"    {s['sender']:<6}  {at(s, 'small'):<8} {t['small']:>10.6f}  "
            f"{at(s, 'ack'):<8} {at(s, 'released'):<8} {s['held_bytes']:>5}B "
            f"{s['delay_ms']:>8.1f} {s['peer_ack_delay_ms']:>7.1f}  {s['confidence']:.2f}"))
    return lines


def _seen(f: dict[str, Any]) -> str:
    """What a flow without stalls showed: the delayed and quick ACKs of each side, the
    Nagle state where known, and that no sender was held."""
    eps = f["endpoints"]
    delayed = [f"{e['delayed_acks']} of the {side}'s, ~{e['delayed_ack_ms']:.0f} ms"
               for side, e in eps.items() if e["delayed_acks"] and e["delayed_ack_ms"] is not None]
    quick = [f"{e['quick_acks']} of the {side}'s" for side, e in eps.items() if e["quick_acks"]]
    nagle = [f"{side} {_nagle_text(e)}" for side, e in eps.items() if e["nagle"] != "unknown"]
    parts = [f"delayed ACKs: {' and '.join(delayed)}" if delayed else "no delayed ACKs seen"]
    if quick:
        parts.append(f"quick ACKs: {' and '.join(quick)}")
    if nagle:
        parts.append(f"Nagle {', '.join(nagle)}")
    return "; ".join(parts + ["no delayed-ACK stall" if f["nagle_holds"] else "no sender was held"])


def name_files(r: Report, files: list[dict[str, Any]]) -> None:
    """Turn a file set's report (frame numbers tagged with their file, see
    `nagleprobe.fileset`) into one whose frame columns are Wireshark frame numbers in their
    own file, each with a `*_file` column naming that file; list the files in
    `capture["files"]`. Wireshark numbers conversations per file, so `tcp_stream` is NA."""
    from .fileset import file_frames

    names = np.asarray([f["path"] for f in files], dtype=object)
    r.capture["files"] = files

    def split(df: pd.DataFrame, frame_cols: list[str], before: str | None) -> pd.DataFrame:
        add = {}
        for c in frame_cols:
            idx, local = file_frames(df[c].to_numpy(dtype=np.int64))
            df[c] = local
            add[c.removesuffix("_frame") + "_file"] = pd.array(names[idx], dtype=TEXT_DTYPE)
        cols = list(df.columns)
        at = cols.index(before) if before in cols else len(cols)
        for j, (name, col) in enumerate(add.items()):
            df.insert(at + j, name, col)
        return df

    r.stalls = split(r.stalls, [f"{k}_frame" for k in _STALL_POINTS], "confidence")
    fl = r.flows
    after_last = list(fl.columns).index("last_frame") + 1
    nxt = fl.columns[after_last] if after_last < len(fl.columns) else None
    r.flows = split(fl, ["first_frame", "last_frame"], nxt)
    if "tcp_stream" in r.flows.columns:
        r.flows["tcp_stream"] = pd.array([pd.NA] * len(r.flows), dtype="Int64")


def file_numbers(capture: dict[str, Any]) -> dict[str, int] | None:
    """A file set's files numbered 1.. as the text report names them (f1, f2, ...); None
    for a single file."""
    files = capture.get("files")
    return {f["path"]: j + 1 for j, f in enumerate(files)} if files else None


def _capture_doc(capture: dict[str, Any]) -> dict[str, Any]:
    """The capture object as written out: a non-UTF-8 file name with \\xNN escapes."""
    path = utf8_safe(capture["path"])
    return capture if path == capture["path"] else dict(capture, path=path)


def render_text(r: Report, width: int = TEXT_WIDTH) -> str:
    """The terminal report: verdict and fixes first, then evidence, then the clean flows."""
    c = r.capture
    lines = []
    skipped = ", ".join(f"{human_count(v)} {k}" for k, v in c["skipped"].items()) or "none"
    head = (f"{printable(c['path'])}: {c['format']}{' (gzip)' if c['compressed'] else ''}, "
            f"{'/'.join(c['link_types']) or 'no packets'}, {human_count(c['packets'])} packets, "
            f"{human_count(c['tcp_packets'])} TCP; skipped: {skipped}")
    if len(head) > width:  # the path cannot be broken: keep what the file is on its line
        head, rest = head.split("; skipped: ", 1)
        lines += [_Pre(head + ";"), f"  skipped: {rest}"]
    else:
        lines.append(head)
    numbers = file_numbers(c)
    if numbers:
        lines.append(f"{len(c['files'])} files read as one capture (merged by time; frames "
                     "below are fN#frame, the frame number in file N):")
        for f in c["files"]:
            what = (f"error: {printable(f['error'])}" if f["error"] and not f["packets"] else
                    f"{f['format']}{' (gzip)' if f['compressed'] else ''}, "
                    f"{human_count(f['packets'])} packets")
            lines.append(_Pre(f"  f{numbers[f['path']]} {printable(f['path'])}: {what}"))
    if c["skipped"].get("duplicate"):
        lines.append(f"{human_count(c['skipped']['duplicate'])} duplicate packets (the same packet seen twice, "
                     "as `tcpdump -i any` does on bridges/veth) were dropped before analysis")
    for w in c["warnings"][:TEXT_WARNINGS]:
        lines.append(f"warning: {w}")
    if len(c["warnings"]) > TEXT_WARNINGS:
        more = len(c["warnings"]) - TEXT_WARNINGS
        lines.append(f"... {human_count(more)} more warning{'' if more == 1 else 's'} "
                     "(--format json lists them all)")
    if r.selection is not None:
        lines.append(selection_line(r.selection))
    lines.append("")
    lines.append(r.verdict())
    stalled = worst_first(r.flows[r.flows["stalls"] > 0])
    for f in r.flow_docs(stalled["id"].tolist()[:TEXT_DETAILED_FLOWS]):
        lines.append("")
        lines.append(f"Flow {f['id']}: client {f['client']} -> server {f['server']} "
                     f"({human_count(f['packets'])} packets, roles from {f['roles']})")
        if f.get("tunnel"):
            lines.append(f"  seen through tunnel {f['tunnel']['id']}: {f['tunnel']['text']}")
        lines.append(f"  {human_count(f['stalls'])} stalls, {human_ms(f['stall_ms'])} lost = "
                     f"{100 * f['lost_share']:.1f}% of {f['duration_s']:.3f} s; "
                     f"without them ~{f['duration_without_stalls_s']:.3f} s")
        lines.append(f"  capture point: {f['vantage']} ({f['vantage_basis']})")
        lines += [f"  {x}" for x in _flow_notes(f, bool(c["skipped"].get("options-cut")))]
        for side in SIDES:
            e = f["endpoints"][side]
            da = (f"{e['delayed_ack_ms']:.1f} ms {timer_name(e['delayed_ack_ms'])}".rstrip()
                  if e["delayed_ack_ms"] is not None else "not seen")
            lines.append(f"  {side} {e['endpoint']}: Nagle {_nagle_text(e)}, delayed ACK {da}, "
                         f"quick ACKs {e['quick_acks']}")
        lines.append(f"  FIX: {f['fix']['text']}")
        ev = r.stall_docs(f["id"])
        lines.append("  Evidence (Wireshark frame numbers; times in s since the first packet):")
        lines += evidence_lines(ev[:TEXT_EVIDENCE_ROWS], width, numbers)
        if len(ev) > TEXT_EVIDENCE_ROWS:
            lines.append(f"    ... {human_count(len(ev) - TEXT_EVIDENCE_ROWS)} more stalls (--format json "
                         f"lists them all)")
    rest = stalled.iloc[TEXT_DETAILED_FLOWS:]
    if len(rest):
        lines.append("")
        lines.append(f"{human_count(len(rest))} more flows with stalls (worst first; --format json lists all):")
        for f in _records(rest.head(TEXT_LISTED_FLOWS)):
            lines.append(f"  {f['id']:>6}  {f['client']} -> {f['server']}  "
                         f"{human_count(f['stalls'])} stalls, {human_ms(f['stall_ms'])}; fix: {f['fix_action']} on the {f['fix_side']}")
        if len(rest) > TEXT_LISTED_FLOWS:
            lines.append(f"  ... {human_count(len(rest) - TEXT_LISTED_FLOWS)} more")
    clean_ids = r.flows.index[r.flows["stalls"] == 0]  # (no list of a million Python ints)
    if len(clean_ids):
        lines.append("")
        lines.append(f"Flows without stalls ({human_count(len(clean_ids))}):")
        for f in r.flow_docs(clean_ids[:TEXT_LISTED_FLOWS].tolist()):
            lines.append(f"  {f['id']:>4}  {f['client']} -> {f['server']}  "
                         f"{human_count(f['packets'])} packets, "
                         f"{f['duration_s']:.3f} s, vantage {f['vantage']}; {_seen(f)}")
            lines += [f"        {x}" for x in _flow_notes(f, bool(c["skipped"].get("options-cut")))]
        if len(clean_ids) > TEXT_LISTED_FLOWS:
            lines.append(f"  ... {human_count(len(clean_ids) - TEXT_LISTED_FLOWS)} more")
    return "\n".join(fit_lines(lines, width)) + "\n"
