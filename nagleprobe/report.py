"""`Report`: the result of analysing one capture, as notebooks and the CLI hold it.

It holds the tables as numpy columns (`tables`), makes a DataFrame the first time one is
asked for (`dataframes`), so a plain `nagleprobe analyze` never loads pandas, and gives
selections (`select`, `flow`, `worst`: `--port/--host/--flow/--top/--min-confidence`).
The renderers (`json_report` for JSON, `text_report`, `html_report`, `plot`, `wireshark`) read
it as a `tables.Result` and never import this module; its `to_json`, `to_text` and
`to_html` reach them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, Iterator

import numpy as np

from . import advice, relay
from . import selection as sel
from .columns import Columns, take
from .detect import Detection
from .exchanges import add_latency, flow_exchanges, kind_columns
from .flows import Flows
from .held import STALL_KEYS, Held
from .humanize import SIDES, counted, human_count, human_ms
from .read import CaptureInfo, FrameIndex
from .read.clock import UNRESOLVED_NS, duration
from .selection import parse_host, worst_first
from .tables import STALL_POINTS, capture_doc, report_columns
from .wireshark import add_tcp_streams

if TYPE_CHECKING:
    import pandas as pd

TABLES = ("flows", "stalls", "endpoints")


class Report:
    """Everything nagleprobe found in one capture.

    `capture`: how the file was read (a dict; its warnings are `weirds.Weird`s, and
    `warnings` a DataFrame of them). `flows`, `stalls`, `endpoints`: pandas DataFrames, one
    row per flow, per stall and per flow endpoint, made on first use from their numpy
    columns (`columns(name)`); `segments` one row per TCP segment, built on first use from
    `source` (columns of all in docs/notebook.md). `to_dict()` is the JSON document,
    `to_text()` the text report. `flow(i)`, `worst(n)` and `select(...)` give a Report
    restricted to some flows.
    """

    def __init__(self, capture: dict[str, Any], flows: Columns | pd.DataFrame,
                 stalls: Columns | pd.DataFrame,
                 endpoints: Columns | pd.DataFrame, source: Flows | None = None,
                 reread: Callable[[Report], Flows] | None = None,
                 exchanges: Columns | None = None) -> None:
        """`flows`, `stalls`, `endpoints`: each a DataFrame or its numpy columns (as
        `tables.report_columns` gives them); endpoints two rows per flow, client then
        server, in the flows' order; `exchanges` the capture's (`exchanges.KEPT`, of these
        flows and maybe others: a selection keeps its capture's)."""
        self.capture = capture
        self.source = source
        # how to read the capture's reassembled flows again when `source` was not kept (a
        # streamed analysis): set by the pipeline, called with the report
        self.reread = reread
        # what `select` chose (the JSON's "selection"); None for the whole capture
        self.selection: dict[str, Any] | None = None
        # several vantages of the same traffic joined (`nagleprobe.vantage.join`): the JSON's
        # "vantages"; None for one capture
        self.vantage_doc: dict[str, Any] | None = None
        self._segments: pd.DataFrame | None = None
        self._messages: pd.DataFrame | None = None
        # where the capture's records lie in its file (set by the pipeline for a plain pcap
        # file), for reading the held messages by seeking; None: read from the start
        self.frame_index: FrameIndex | None = None
        # a seekable stream the capture was read from, and where it started (else None)
        self.payload_stream: tuple[BinaryIO, int] | None = None
        self._held: Held | None = None
        self._exchanges: pd.DataFrame | None = None
        self._exchange_columns = exchanges
        self._columns: dict[str, Columns] = {}
        self._frames: dict[str, pd.DataFrame] = {}
        for name, t in zip(TABLES, (flows, stalls, endpoints)):
            (self._columns if isinstance(t, dict) else self._frames)[name] = t

    def columns(self, name: str) -> Columns:
        """The numpy columns of the table `name` ("flows", "stalls" or "endpoints"): times
        as epoch nanoseconds, -1 for NA in `tables.NULLABLE` columns, text as objects (not
        copies: leave them as they are). The text and JSON reports are written from them."""
        if name not in self._columns:
            from .dataframes import columns_of

            self._columns[name] = columns_of(self._frames[name])
        return self._columns[name]

    def _frame(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            from .dataframes import table

            self._frames[name] = table(self.table_columns(name))
        return self._frames[name]

    def table_columns(self, name: str) -> Columns:
        """The columns of the DataFrame `name` ("flows", "stalls", "endpoints"): `columns`
        and, for the stalls, the held messages read (`held`: text, None where not read)."""
        cols = self.columns(name)
        if name != "stalls":
            return cols
        said, n = self.held().stalls, len(cols["flow"])
        held = {k: np.full(n, None, dtype=object) for k in STALL_KEYS}
        for r, doc in said.items():
            for k in STALL_KEYS:
                held[k][r] = doc[k]
        return {**cols, **held}

    @property
    def flows(self) -> pd.DataFrame:
        """One row per flow (columns in docs/notebook.md), indexed by flow id."""
        return self._frame("flows")

    @property
    def stalls(self) -> pd.DataFrame:
        """One row per stall, by flow then released frame."""
        return self._frame("stalls")

    @property
    def endpoints(self) -> pd.DataFrame:
        """Two rows per flow, client then server."""
        return self._frame("endpoints")

    @property
    def vantages(self) -> pd.DataFrame:
        """One row per connection and vantage when the files were captures of the same
        connections from several places (else no rows): see `nagleprobe.vantage.table`."""
        from .vantage import table

        return table(self.vantage_doc)

    @property
    def warnings(self) -> pd.DataFrame:
        """One row per capture warning (columns code, count, text; the codes are described
        in `nagleprobe.weirds.WEIRDS` and docs/json.md): `capture["warnings"]` as a table."""
        from .dataframes import warning_table

        return warning_table(self.capture["warnings"])

    @property
    def stall_count(self) -> int:
        return len(self.columns("stalls")["flow"])

    def summary(self) -> dict[str, Any]:
        fl = self.columns("flows")
        return {"stalls": self.stall_count, "flows": len(fl["id"]),
                "flows_with_stalls": int((fl["stalls"] > 0).sum()),
                "stall_ms": round(float(fl["stall_ms"].sum()), 3)}

    def verdict(self) -> str:
        """One sentence: are stalls present, where, and what they cost."""
        s = self.summary()
        flows = counted(s["flows"], "TCP flow")
        if not s["stalls"]:
            step = self.capture.get("time_step_ns")
            if step is not None and step >= UNRESOLVED_NS:
                return (f"No Nagle/delayed-ACK stalls found in {flows}, but none could be: the "
                        f"capture's time stamps move in steps of {duration(step)}.")
            return f"No Nagle/delayed-ACK stalls found in {flows}."
        return (f"Nagle/delayed-ACK stalls found: {counted(s['stalls'], 'stall')} in "
                f"{human_count(s['flows_with_stalls'])} of {flows}, costing "
                f"{human_ms(s['stall_ms'])}.")

    def flow_docs(self, ids: list[int] | None = None) -> list[dict[str, Any]]:
        """Flows as JSON objects (all, or the given ids), endpoints and fix nested."""
        from .json_report import flow_docs

        return flow_docs(self, ids)

    def stall_docs(self, flow: int | None = None) -> list[dict[str, Any]]:
        """Stalls as JSON objects (all, or one flow's), frames and times nested."""
        from .json_report import stall_docs

        st = self.columns("stalls")
        return stall_docs(st if flow is None else take(st, st["flow"] == flow))

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON document (see docs/json.md): what `json.loads(to_json())`
        gives, built from the columns without the text."""
        from .json_report import document

        return document(self)

    def to_json(self) -> str:
        """`to_dict()` as compact JSON text, written from the tables' columns (no Python
        object per flow or stall: see `json_report`)."""
        return "".join(self.json_pieces())

    def json_pieces(self, rows_per_piece: int = 20_000) -> Iterator[str]:
        """`to_json()` in pieces (flows and stalls a slice at a time), to write a large
        document without holding all its text at once (see `json_report.json_pieces`)."""
        from .json_report import json_pieces

        return json_pieces(self, rows_per_piece)

    def to_text(self, width: int | None = None, *, verbose: bool = False,
                all_stalls: bool = False, times: str = "flow") -> str:
        """The text report, every line within `width` columns (the CLI passes the
        terminal's; None: `text_report.TEXT_WIDTH`): `verbose` gives the evidence of every
        flow with stalls (the first ten) and lists the clean ones, `all_stalls` every
        stall; the evidence's `times` are since the flow's first packet, the capture's
        ("capture") or UTC ("utc")."""
        from .text_report import TEXT_WIDTH, render_text

        return render_text(self, TEXT_WIDTH if width is None else width, verbose,
                           all_stalls, times)

    def fix_groups(self, ids: list[int] | None = None) -> list[dict[str, Any]]:
        """One fix per endpoint to change, the flows that share it listed (all flows with
        stalls, or those of `ids`): plain data, worst first (see `advice.fix_groups`)."""
        return advice.fix_groups(self.columns("flows"), self.columns("stalls"),
                                 self.columns("endpoints"), ids)

    def __repr__(self) -> str:
        """One line: the file, its flows, stalls and the time they cost."""
        s = self.summary()
        return (f"<nagleprobe.Report {self.capture.get('path')!r}: {counted(s['flows'], 'flow')}, "
                f"{counted(s['stalls'], 'stall')}, {s['stall_ms']:.1f} ms lost>")

    def __str__(self) -> str:
        """The CLI's text report, so that `print(report)` shows exactly what the CLI prints."""
        return self.to_text().removesuffix("\n")

    # --- notebook helpers (tables are never modified; selections share `source`) ---

    @property
    def segments(self) -> pd.DataFrame:
        """Every TCP segment of the report's flows (columns in docs/notebook.md), built on first
        access from the reassembled flows so that `analyze` and the CLI do not pay for it."""
        if self._segments is None:
            files = self.capture.get("files")
            if self.source is None:
                if self.reread is None:
                    raise ValueError(f"{self.capture['path']}: no segments: the report keeps "
                                     "neither its packets nor a way to read them again")
                self.source = self.reread(self)
            from .dataframes import TEXT_DTYPE, segment_table

            self._segments = segment_table(self.source, self.capture["time_origin_ns"],
                                           self.columns("flows")["id"])
            if files:  # a file set: the frame in its file, and the file
                import pandas as pd

                from .fileset import file_frames

                idx, local = file_frames(self._segments["frame"].to_numpy(dtype=np.int64))
                self._segments["frame"] = local
                at = list(self._segments.columns).index("frame") + 1
                self._segments.insert(at, "file", pd.array(np.asarray(
                    [f["path"] for f in files], dtype=object)[idx], dtype=TEXT_DTYPE))
        return self._segments

    @property
    def exchanges(self) -> pd.DataFrame:
        """One row per request/response exchange (`nagleprobe.exchanges`): its latency with
        and without the stalls released within it; `exchanges.latency_summary` gives the
        percentiles per flow or per server. Made on first access from what the analysis kept
        (a report made without them: from `segments`)."""
        if self._exchanges is None:
            from .exchanges import exchanges, table

            if self._exchange_columns is None:
                self._exchanges = exchanges(self.segments, self.stalls)
            else:
                self._exchanges = table(self.exchange_columns(),
                                        self.capture["time_origin_ns"])
        return self._exchanges

    def exchange_columns(self) -> Columns:
        """The report's flows' exchanges as numpy columns (`exchanges.KEPT`), in flow order;
        ValueError for a report made without them."""
        ex = self._exchange_columns
        if ex is None:
            raise ValueError(f"{self.capture['path']}: the report kept no exchanges")
        keep = np.isin(ex["flow"], self.columns("flows")["id"])
        return ex if keep.all() else take(ex, keep)

    @property
    def messages(self) -> pd.DataFrame:
        """Per stall (the rows of `stalls`, same index), the held message in the
        application's own terms where its protocol is recognised (`nagleprobe.messages`:
        TLS, HTTP/1.x, HTTP/2, DNS over TCP, PostgreSQL, SMTP, MQTT): protocol, held_message,
        before_message, split, fix, advice (coalesce or nodelay). Read from the capture file
        again on first access (the payloads are not kept): one file, not standard input or
        a file set."""
        if self._messages is None:
            import os

            path = self.capture["path"]
            if self.capture.get("files") or not os.path.isfile(path):
                raise ValueError(f"{path}: the held messages are read from the capture file "
                                 "again: give one file (not standard input or a file set)")
            from .payloads import stall_messages

            self._messages = stall_messages(self, path)
            self._messages.index = self.stalls.index
        return self._messages

    def held(self) -> Held:
        """The held message of each flow's first stalls, read back from the capture within
        a bound (`nagleprobe.held`): what the JSON, text and HTML reports and the stalls
        table's protocol, held_message and before_message columns say."""
        if self._held is None:
            from .held import held_messages

            self._held = held_messages(self.capture, self.columns("flows"),
                                       self.columns("stalls"), self.frame_index,
                                       self.payload_stream)
        return self._held

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
        base = Report(self.capture, flows, stalls, self.endpoints, self.source, self.reread,
                      self._exchange_columns)
        base._segments = self._segments
        base.vantage_doc = self.vantage_doc
        base.frame_index = self.frame_index
        base.payload_stream = self.payload_stream
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
        sub = Report(self.capture, self.flows.loc[ids], stalls, ep, self.source, self.reread,
                     self._exchange_columns)
        sub.vantage_doc = self.vantage_doc
        sub.frame_index = self.frame_index
        sub.payload_stream = self.payload_stream
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


def build_report(info: CaptureInfo, skipped: dict[str, int], f: Flows, det: Detection,
                 origin_ns: int) -> Report:
    """Assemble the tables from the pipeline's stages (vectorised: no per-packet objects)."""
    cols = report_columns(f, det, origin_ns)
    exchanged = flow_exchanges(f.seg, f.count)
    cols["flows"].update(kind_columns(*exchanged))
    ex = add_latency(cols["flows"], exchanged[0], cols["stalls"], cols["endpoints"])
    capture = capture_doc(info, skipped, len(f.seg["flow"]), origin_ns)
    add_tcp_streams(cols["flows"], capture)
    arr = relay.arrivals(f)
    if len(arr["flow"]) > relay.MAX_ARRIVALS:
        capture["warnings"].append(relay.relay_warning())
        arr = None
    cols["flows"].update(relay.link(cols["flows"], cols["stalls"], arr))
    return Report(capture, cols["flows"], cols["stalls"], cols["endpoints"], source=f,
                  exchanges=ex)


def _parse_hosts(hosts: tuple[Any, ...]) -> list[str]:
    """Host selectors normalised as check has them (ValueError for one that is not)."""
    return [parse_host(str(h)) for h in hosts]


def _id_list(flows: pd.DataFrame, limit: int = 10) -> str:
    ids = flows["id"].tolist()
    return ", ".join(map(str, ids[:limit])) + (" ..." if len(ids) > limit else "") or "none"


def name_files(r: Report, files: list[dict[str, Any]]) -> None:
    """Turn a file set's report (frame numbers tagged with their file, see
    `nagleprobe.fileset`) into one whose frame columns are Wireshark frame numbers in their
    own file, each with a `*_file` column naming that file; list the files in
    `capture["files"]`. Wireshark numbers conversations per file, so `tcp_stream` is NA."""
    from .fileset import file_frames

    names = np.asarray([f["path"] for f in files], dtype=object)
    r.capture["files"] = files

    def split(cols: Columns, frame_cols: list[str], before: str | None
              ) -> Columns:
        add = {}
        for c in frame_cols:
            idx, local = file_frames(cols[c].astype(np.int64))
            cols[c] = local
            add[c.removesuffix("_frame") + "_file"] = names[idx]
        out: Columns = {}
        for name, col in cols.items():
            if name == before:
                out.update(add)
            out[name] = col
        out.update(add)  # at the end without `before` (else in place already)
        return out

    stalls = split(dict(r.columns("stalls")), [f"{k}_frame" for k in STALL_POINTS], "confidence")
    fl = dict(r.columns("flows"))
    names_fl = list(fl)
    after_last = names_fl.index("last_frame") + 1
    fl = split(fl, ["first_frame", "last_frame"],
               names_fl[after_last] if after_last < len(names_fl) else None)
    if "tcp_stream" in fl:
        fl["tcp_stream"] = np.full(len(fl["id"]), -1, dtype=np.int64)
    r._columns.update(flows=fl, stalls=stalls)
    r._frames.pop("flows", None)
    r._frames.pop("stalls", None)

