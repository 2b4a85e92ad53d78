"""The JSON document of a report (docs/json.md), written from the report's numpy columns.

The shapes of a flow and of a stall are written down once, each a `jsonrows.Program` over
the tables' columns (no pandas, no Python object per row): the flat columns in table order,
then the nested objects (a flow's why_not, relay, endpoints, fix and Wireshark filters; a
stall's frames, times, files of a file set, and confidence last). `json_pieces` writes the
whole document a slice of rows at a time; `document` gives it as Python objects, and
`flow_docs`/`stall_docs` rows of it for the documents that embed them (`check`).
"""

from __future__ import annotations

import gc
import json
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from . import relay, wireshark
from .advice import FIX_FIELDS
from .columns import Columns, take
from .detect import REASONS
from .errors import utf8_safe
from .held import STALL_KEYS
from .jsonrows import Program, encode
from .tables import NULLABLE, STALL_POINTS, TABLE_ONLY, rows_of
from .weirds import fact

if TYPE_CHECKING:
    from .tables import Result

FLOWS_PER_PIECE = 5000  # flows per piece of the JSON text (a flow is ten times a stall)
SCHEMA_VERSION = 2  # of the JSON document (nagleprobe/schema/report.schema.json)

Columns = Columns  # a table's numpy columns (see `tables`)

# flow columns written inside a nested object, not at the top of the flow
_NESTED = ({f"fix_{k}" for k in FIX_FIELDS} | {f"why_not_{r}" for r in REASONS}
           | set(relay.RELAY_COLUMNS) | set(TABLE_ONLY))


def _column(cols: Columns, name: str):
    col = cols[name]
    return lambda p: p.value(col, col < 0 if name in NULLABLE else None)


def flow_program(report: Result, ids: np.ndarray | None = None) -> Program:
    """One flow per row (all, or the given ids in that order), as the document's "flows"."""
    every = report.columns("flows")
    rows = np.arange(len(every["id"])) if ids is None else rows_of(every, ids)
    fl = every if ids is None else take(every, rows)
    p = Program()
    items: list = []
    for name in fl:
        if name in _NESTED:
            continue
        if name == "tunnel":
            tunnels = report.capture.get("tunnels", [])
            items.append((name, lambda q, t=fl[name].astype(np.int64), ts=tunnels:
                          q.raw(["null" if not v else encode(ts[v - 1]) for v in t.tolist()])))
        else:
            items.append((name, _column(fl, name)))
    items.append(("why_not", lambda q: q.sparse(list(REASONS),
                                                [fl[f"why_not_{r}"] for r in REASONS])))
    up = {k.removeprefix("relay_"): fl[k] for k in relay.RELAY_COLUMNS}
    items.append(("relay", lambda q: q.maybe(
        up["upstream_flow"] < 0,
        lambda g: g.obj([(k, _column(up, k)) for k in up]))))
    every_end = report.columns("endpoints")  # two rows per flow, client then server
    ends = {side: take({k: v for k, v in every_end.items() if k not in ("flow", "side")},
                       2 * rows + j) for j, side in enumerate(("client", "server"))}
    items.append(("endpoints", lambda q: q.obj(
        [(side, lambda g, e=e: g.obj([(c, _column(e, c)) for c in e]))
         for side, e in ends.items()])))
    fix = {k: fl[f"fix_{k}"] for k in FIX_FIELDS}
    items.append(("fix", lambda q: q.maybe(
        np.equal(fix["side"], None), lambda g: g.obj([(k, _column(fix, k)) for k in fix]))))
    items.append(("wireshark", lambda q: _filters(q, report, fl)))
    said, rest = report.held(), ""
    if said.rest is not None:
        rest = _message(said.rest)
    tail = [_message(said.flows[i]) if i in said.flows else rest if n and i not in said.read
            else "" for i, n in zip(fl["id"].tolist(), fl["stalls"].tolist())]
    return p.obj(items, tail=tail)


def _message(doc: dict[str, Any] | None) -> str:
    """',"message":{...}' where a held message was read (`held`), else nothing."""
    return "" if doc is None else ',"message":' + encode(doc)


def _said(said: dict[int, dict[str, Any]], a: int, n: int) -> list[dict[str, Any] | None] | None:
    """The held messages read (`held`, by stall row) of rows a..a+n-1, one per row; None
    where none of them was read."""
    return [said.get(r) for r in range(a, a + n)] if any(a <= r < a + n for r in said) else None


def _filters(p: Program, report: Result, fl: Columns) -> None:
    """{"flow_filter", "stall_frames_filter"} (a file set: per file, see wireshark)."""
    if "small_file" in report.columns("stalls"):
        p.raw([encode(d) for d in wireshark.filter_docs(report, fl["id"])])
        return
    values, offsets = wireshark.stall_frames(report, fl["id"])
    p.obj([("flow_filter", lambda q: q.text(wireshark.flow_filters(fl))),
           ("stall_frames_filter", lambda q: q.int_list(values, offsets, '"frame.number in {',
                                                        '}"'))])


def stall_program(st: Columns, fields: tuple[str, ...] | None = None,
                  messages: list[dict[str, Any] | None] | None = None) -> Program:
    """One stall per row, as the document's "stalls": its columns (or only `fields`), then
    frames and times nested (a file set: each frame's file too), confidence, then the
    held message where one of `messages` (one per row) was read."""
    points = {w: {k: f"{k}_{w}" for k in STALL_POINTS} for w in ("frame", "s", "file")}
    nested = {c for cols in points.values() for c in cols.values()} | {"confidence"}
    flat = fields if fields is not None else [
        c for c in st if c not in nested and c not in TABLE_ONLY and c not in STALL_KEYS]
    items = [(c, _column(st, c)) for c in flat]
    for group, w in (("frames", "frame"), ("times", "s"), ("files", "file")):
        if points[w]["small"] in st and (w != "file" or fields is None):
            items.append((group, lambda q, cols=points[w]: q.obj(
                [(k, _column(st, c)) for k, c in cols.items()])))
    items.append(("confidence", _column(st, "confidence")))
    return Program().obj(items, tail=None if messages is None else list(map(_message, messages)))


def parsed(p: Program, rows: int) -> list[dict[str, Any]]:
    """The rows of a program as Python objects (as `json.loads` reads their text)."""
    return p.objects(0, rows)


def flow_docs(report: Result, ids: list[int] | np.ndarray | None = None) -> list[dict[str, Any]]:
    """Flows as the document's JSON objects (all, or the given ids)."""
    n = len(report.columns("flows")["id"]) if ids is None else len(ids)
    return parsed(flow_program(report, None if ids is None else np.asarray(ids, dtype=np.int64)), n)


def stall_docs(st: Columns, fields: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Stall rows (a stalls table's columns) as the document's stall objects (all columns,
    or only `fields`)."""
    return parsed(stall_program(st, fields), len(st["flow"]))


def document_head() -> dict[str, Any]:
    """The JSON document's first fields: its schema version and the tool that wrote it."""
    from . import __version__

    return {"schema_version": SCHEMA_VERSION, "tool": {"name": "nagleprobe",
                                                       "version": __version__}}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the document (shipped as nagleprobe/schema/report.schema.json)."""
    from importlib.resources import files

    return json.loads(files("nagleprobe").joinpath("schema/report.schema.json").read_text())


def json_pieces(report: Result, rows_per_piece: int = 20_000) -> Iterator[str]:
    """The document's compact text in pieces (flows and stalls a slice at a time), to write
    a large document without holding all its text at once. A thread renders each piece's
    rows while the next piece's program is built (the compiled writer lets go of the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="nagleprobe-json") as pool:
        waiting: deque = deque()  # (text, the rendering of the rows after it)
        text = ""
        for more, program, rows in _json_parts(report, rows_per_piece):
            text += more
            if program is not None:
                waiting.append((text, pool.submit(program.render, 0, rows)))
                text = ""
            if len(waiting) > 1:
                before, rendered = waiting.popleft()
                yield before + rendered.result()
        for before, rendered in waiting:
            yield before + rendered.result()
        yield text


def _json_parts(report: Result, rows_per_piece: int
                ) -> Iterator[tuple[str, Program | None, int]]:
    """The document as (text, program, rows): each text followed by the program's rows."""
    head = json.dumps({**_head(report), "flows": []}, separators=(",", ":"), allow_nan=False)
    assert head.endswith('"flows":[]}')
    # a slice at a time: a program holds a column per key for its rows
    ids, per = report.columns("flows")["id"], min(rows_per_piece, FLOWS_PER_PIECE)
    yield head[:-2], None, 0
    for a in range(0, len(ids), per):
        part = ids[a:a + per]
        yield "," if a else "", flow_program(report, part), len(part)
    yield '],"stalls":[', None, 0
    st, said = report.columns("stalls"), report.held().stalls
    for a in range(0, len(st["flow"]), rows_per_piece):
        part = take(st, slice(a, a + rows_per_piece))
        n = len(part["flow"])
        yield "," if a else "", stall_program(part, messages=_said(said, a, n)), n
    yield "]}", None, 0


def document(report: Result) -> dict[str, Any]:
    """The document as the Python objects `json.loads` makes of `json_pieces`' text, built
    from the columns without the text."""
    doc = json.loads(json.dumps(_head(report), allow_nan=False))
    collecting = gc.isenabled()
    gc.disable()  # the rows hold no reference cycles: collections while making them find none
    try:
        doc["flows"] = flow_docs(report)
        st = report.columns("stalls")
        n = len(st["flow"])
        doc["stalls"] = parsed(stall_program(st, messages=_said(report.held().stalls, 0, n)), n)
    finally:
        if collecting:
            gc.enable()
    return doc


def _head(report: Result) -> dict[str, Any]:
    """The document's fields before its flows and stalls."""
    doc = {**document_head(), "capture": _capture_doc(report.capture),
           "selection": report.selection, "summary": report.summary()}
    if report.vantage_doc is not None:
        doc["vantages"] = report.vantage_doc
    return doc


def _capture_doc(capture: dict[str, Any]) -> dict[str, Any]:
    """The capture object as written out: a non-UTF-8 file name with \\xNN escapes, each
    warning a {"code", "count", "text"} object."""
    return dict(capture, path=utf8_safe(capture["path"]),
                warnings=[fact(w) for w in capture["warnings"]])
