"""The report as HTML: one self-contained file to attach to a ticket (pictures inlined as
base64 PNG, styles inline, no scripts, nothing fetched from the network), and the compact
view a Report shows in Jupyter.

The file opens with the verdict, a table of contents and the fixes, one per program that
must change (`Report.fix_groups`); each flow with stalls is a collapsible section (the
worst one open), its evidence table cut after HTML_EVIDENCE_ROWS rows with the rest one
click away (<details>: plain HTML, so the file still needs no script).

    >>> nagleprobe.html_report.write_html(report, "incident.html")
    $ nagleprobe analyze capture.pcap --html incident.html
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from datetime import datetime, timezone
from html import escape as _escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from . import __version__, wireshark
from .advice import timer_words
from .errors import printable
from .held import fix_line, group_message, held_line
from .humanize import SIDES, human_ms
from .selection import worst_first

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .tables import Result

HTML_DETAILED_FLOWS = 10  # stalled flows given their own section, worst first
HTML_PICTURED_FLOWS = 5  # ...of which this many get time-sequence graphs
HTML_GRID_STALLS = 6  # stalls drawn one by one per pictured flow
HTML_TABLE_ROWS = 1000  # rows per table before "... more" (the JSON has everything)
HTML_EVIDENCE_ROWS = 20  # evidence rows shown before "show the other N"
HTML_FIX_GROUPS = 10  # fixes (one per program that must change) given a box, most lost first
HTML_FIX_FLOW_IDS = 30  # flow ids listed in a fix's box
PNG_COLOURS = 256  # a picture's palette: a quarter of the bytes of full colour, looks the same
NOTEBOOK_ROWS = 20  # flows listed by _repr_html_

ARROW = "\N{RIGHTWARDS ARROW}"
NUM_CLASS = ' class="num"'
STALL_BG = "#fde2e1"

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #1d1d1f; max-width: 1180px; margin: 1.5em auto; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.1em; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
h3 { font-size: 1.02em; margin: 0.2em 0; }
.file { color: #555; font-family: ui-monospace, "DejaVu Sans Mono", monospace; margin-top: 0; }
.verdict { font-size: 1.15em; font-weight: 600; padding: 0.6em 0.9em; border-radius: 6px; }
.verdict.bad { background: #fde2e1; border-left: 6px solid #c62828; }
.verdict.good { background: #e3f4e4; border-left: 6px solid #2e7d32; }
.fix { border: 1px solid #e0b4b4; background: #fffafa; border-radius: 6px; padding: 0.5em 0.9em;
       margin: 0.6em 0; }
.fix .action { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-weight: 600;
               color: #b71c1c; }
table { border-collapse: collapse; font-size: 0.86em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #d9d9d9; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.stalled td { background: #fde2e1; }
figure { margin: 0.8em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
.note { font-size: 0.85em; color: #555; }
.filters code { user-select: all; word-break: break-all; background: #f5f5f5; padding: 0 3px; }
nav.toc { background: #f7f7f7; border: 1px solid #e3e3e3; border-radius: 6px;
          padding: 0.4em 0.9em; font-size: 0.9em; }
nav.toc ol { margin: 0.2em 0; padding-left: 1.4em; }
details.flow { border-top: 1px solid #ddd; margin-top: 1.2em; }
details.flow > summary { cursor: pointer; padding: 0.4em 0; }
details.flow .anchor { scroll-margin-top: 3em; }
details.flow > summary h2 { display: inline; border: none; font-size: 1.2em; }
details.more > summary { cursor: pointer; color: #1a5fb4; font-size: 0.9em; margin-bottom: 0.3em; }
footer { margin-top: 2.5em; font-size: 0.8em; color: #777; border-top: 1px solid #ddd;
         padding-top: 0.5em; }
"""


def _text(v: str) -> str:
    """Text content escaped for HTML (quotes may stay: this is never an attribute value),
    through `printable`: no control character, noncharacter or bidirectional override
    of a file name or a capture goes into the page raw."""
    return _escape(printable(v), quote=False)


def _cell(v: Any, fmt: str | None = None) -> tuple[str, bool]:
    """Cell text and whether it is a number (right-aligned)."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return "", False
    if isinstance(v, bool):
        return ("yes" if v else "no"), False
    if fmt and isinstance(v, (int, float)):
        return fmt.format(v), True
    return str(v), isinstance(v, (int, float))


def table_html(df: pd.DataFrame, columns: dict[str, str], fmt: dict[str, str] | None = None,
               highlight: Callable[[dict[str, Any]], bool] | None = None,
               limit: int = HTML_TABLE_ROWS, inline_style: bool = False) -> str:
    """An HTML table of `df`'s `columns` (name -> header); rows where `highlight` holds get
    the stall colour. With `inline_style`, styles go on the elements (Jupyter output)."""
    fmt = fmt or {}
    cell_css = ' style="border:1px solid #ddd;padding:2px 6px;text-align:{}"'
    out = ["<table>" if not inline_style else
           '<table style="border-collapse:collapse;font-size:0.9em">', "<thead><tr>"]
    for header in columns.values():
        out.append(f"<th{cell_css.format('left') if inline_style else ''}>{_text(header)}</th>")
    out.append("</tr></thead><tbody>")
    for rec in df.head(limit).to_dict("records"):
        hot = bool(highlight and highlight(rec))
        if inline_style:
            out.append(f'<tr style="background:{STALL_BG}">' if hot else "<tr>")
        else:
            out.append('<tr class="stalled">' if hot else "<tr>")
        for name in columns:
            text, num = _cell(rec[name], fmt.get(name))
            if inline_style:
                out.append(f"<td{cell_css.format('right' if num else 'left')}>{_text(text)}</td>")
            else:
                out.append(f"<td{NUM_CLASS if num else ''}>{_text(text)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if len(df) > limit:
        out.append(f'<p class="note">... {len(df) - limit} more rows (the JSON output '
                   f"lists them all)</p>")
    return "".join(out)


FLOW_COLUMNS = {"id": "flow", "client": "client", "server": "server", "packets": "packets",
                "duration_s": "duration s", "stalls": "stalls", "stall_ms": "lost ms",
                "lost_share": "lost %", "vantage": "capture point", "fix_side": "fix on",
                "fix_action": "fix"}
FLOW_FMT = {"duration_s": "{:.3f}", "stall_ms": "{:.1f}", "lost_share": "{:.1%}"}
EVIDENCE_COLUMNS = {"sender": "sender", "small_frame": "S1 frame", "small_s": "S1 s",
                    "small_bytes": "S1 bytes", "ack_frame": "ACK frame", "ack_s": "ACK s",
                    "released_frame": "S2 frame", "released_s": "S2 s", "held_bytes": "S2 bytes",
                    "delay_ms": "stall ms", "peer_ack_delay_ms": "peer ACK delay ms",
                    "reaction_ms": "S2 after ACK ms", "confidence": "confidence"}
HELD_COLUMNS = {"protocol": "protocol", "held_message": "held message",
                "before_message": "behind"}
EVIDENCE_FMT = {"small_s": "{:.6f}", "ack_s": "{:.6f}", "released_s": "{:.6f}",
                "delay_ms": "{:.1f}", "peer_ack_delay_ms": "{:.1f}", "reaction_ms": "{:.3f}",
                "confidence": "{:.2f}"}


def _stalled(rec: dict[str, Any]) -> bool:
    return rec["stalls"] > 0


def _flow_name(f: dict[str, Any]) -> str:
    return f"Flow {f['id']}: client {f['client']} {ARROW} server {f['server']}"


FILTER_CODE = "user-select:all;word-break:break-all;background:#f5f5f5;padding:0 3px"


def filters_html(docs: dict[str, Any], inline_style: bool = False) -> str:
    """A flow's Wireshark display filters (`wireshark.filter_docs`), each in a <code> that
    selects whole on a click, to copy."""
    code = f'<code style="{FILTER_CODE}">' if inline_style else "<code>"
    out = [f"Wireshark display filters: flow {code}{_text(str(docs['flow_filter']))}</code>"]
    if docs["stall_frames_filter"]:
        out.append(f"; stall frames {code}{_text(docs['stall_frames_filter'])}</code>")
    for path, filt in (docs.get("stall_frames_filters") or {}).items():  # a file set
        out.append(f"; stall frames in {_text(path)} {code}{_text(str(filt))}</code>")
    return "".join(out)


def summary_html(report: Result) -> str:
    """What a Report shows in Jupyter: the verdict, the flows (stalled rows highlighted,
    worst first, then the others), and the fix for each stalled flow."""
    fl = report.flows
    ordered = pd.concat([worst_first(fl[fl["stalls"] > 0]), fl[fl["stalls"] == 0]])
    colour = "#c62828" if len(report.stalls) else "#2e7d32"
    out = [f'<div><p style="font-weight:600;font-size:1.1em;border-left:5px solid {colour};'
           f'padding-left:0.6em">{_text(report.verdict())}</p>',
           f'<p style="color:#555;margin:0">{_text(str(report.capture["path"]))}: '
           f'{len(fl)} flow{"s" if len(fl) != 1 else ""}, {report.capture["tcp_packets"]} TCP '
           f"packets</p>"]
    if len(fl):
        out.append(table_html(ordered, FLOW_COLUMNS, FLOW_FMT, _stalled, limit=NOTEBOOK_ROWS,
                              inline_style=True))
    shown = worst_first(fl[fl["stalls"] > 0]).head(NOTEBOOK_ROWS)
    filters = wireshark.filter_docs(report, shown["id"].tolist())
    for f, ws in zip(shown.to_dict("records"), filters):
        out.append(f'<p style="margin:0.3em 0"><b>{_text(_flow_name(f))}</b> '
                   f"({f['stalls']} stalls, {f['stall_ms']:.1f} ms): "
                   f"<code>{_text(str(f['fix_action']))}</code> on the "
                   f"{_text(str(f['fix_side']))}. {_text(str(f['fix_text']))}<br>"
                   f'<span style="font-size:0.9em">{filters_html(ws, True)}</span></p>')
    out.append("</div>")
    return "".join(out)


def _png(fig: Figure) -> str:
    """A figure as an inline <img> source: a base64 PNG of PNG_COLOURS colours (flat plot
    colours and their anti-aliasing fit a palette)."""
    from PIL import Image  # a matplotlib dependency

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    buf = io.BytesIO()
    img.quantize(PNG_COLOURS, method=Image.Quantize.FASTOCTREE,
                 dither=Image.Dither.NONE).save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(draw: Callable[[Any], Any], size: tuple[float, float], caption: str,
            alt: str) -> str:
    """Draw on a new (pyplot-free) figure and return it as an HTML figure."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    draw(fig)
    return (f'<figure><img alt="{_escape(alt)}" src="{_png(fig)}">'
            f"<figcaption>{_text(caption)}</figcaption></figure>")


def _capture_section(report: Result) -> str:
    c = report.capture
    skipped = ", ".join(f"{v} {k}" for k, v in c["skipped"].items()) or "none"
    origin = pd.Timestamp(c["time_origin_ns"], unit="ns", tz="UTC").isoformat()
    rows = [("file", str(c["path"])), ("format", c["format"] + (" (gzip)" if c["compressed"] else "")),
            ("link types", ", ".join(c["link_types"]) or "none"),
            ("packets", f"{c['packets']} ({c['tcp_packets']} TCP)"),
            ("skipped frames", skipped),
            ("first packet (time 0)", origin),
            ("warnings", "; ".join(c["warnings"]) or "none")]
    out = ['<section id="capture"><h2>How the capture was read</h2><table>']
    out += [f"<tr><th>{_text(k)}</th><td>{_text(str(v))}</td></tr>" for k, v in rows]
    out.append("</table>")
    if len(report.flows):
        out.append("<h3>Where the capture was taken, per flow</h3>")
        out.append(table_html(report.flows, {"id": "flow", "roles": "roles from",
                                             "vantage": "capture point",
                                             "vantage_basis": "why"}))
    out.append("</section>")
    return "".join(out)


def _endpoint_table(report: Result, fid: int) -> str:
    ep = report.endpoints[report.endpoints["flow"] == fid].copy()
    ep["timer"] = [timer_words(v) if pd.notna(v) else "not seen"
                   for v in ep["delayed_ack_ms"]]
    return table_html(ep, {"side": "side", "endpoint": "endpoint", "nagle": "Nagle",
                           "nagle_off_evidence": "Nagle-off proofs", "timer": "delayed ACK",
                           "delayed_acks": "delayed ACKs", "quick_acks": "quick ACKs",
                           "mss": "MSS", "mss_from": "MSS from",
                           "window_scale": "window scale"})


def _evidence_table(stalls: pd.DataFrame) -> str:
    """A flow's stalls: the first HTML_EVIDENCE_ROWS, then the others behind a click; the
    held messages' columns where any was read (`held`)."""
    columns = EVIDENCE_COLUMNS
    if "held_message" in stalls and stalls["held_message"].notna().any():
        columns = {**columns, **HELD_COLUMNS}
    out = table_html(stalls.head(HTML_EVIDENCE_ROWS), columns, EVIDENCE_FMT)
    rest = stalls.iloc[HTML_EVIDENCE_ROWS:HTML_TABLE_ROWS]
    if len(rest):
        out += (f'<details class="more"><summary>Show the other {len(stalls) - HTML_EVIDENCE_ROWS}'
                f" stalls</summary>{table_html(rest, columns, EVIDENCE_FMT)}")
        if len(stalls) > HTML_TABLE_ROWS:
            out += (f'<p class="note">... {len(stalls) - HTML_TABLE_ROWS} more rows (the JSON '
                    "output lists them all)</p>")
        out += "</details>"
    return out


def _message_fix(g: dict[str, Any], said: dict[int, dict[str, Any]]) -> str:
    """A fix group's sentence in its first named flow's protocol terms, or nothing."""
    m = group_message(said, g["flows"])
    return f"<br>{_text(fix_line(m, g['side'], g['action']))}" if m else ""


def _held_html(report: Result, f: dict[str, Any]) -> str:
    """The flow's held message and the fix in its protocol's terms (`held`), or nothing."""
    m = report.held().of(f["id"], f["stalls"])
    if m is None:
        return ""
    out = f"<br>{_text(held_line(m, 10**6))}"
    return out + (f"<br>{_text(fix_line(m, f['fix_side'], f['fix_action']))}"
                  if m["protocol"] else "")


def _stalls(n: int) -> str:
    return f"{n} stall{'s' if n != 1 else ''}"


def _lost(f: dict[str, Any]) -> str:
    return f"{_stalls(f['stalls'])}, {f['stall_ms']:.1f} ms lost"


def _flow_section(report: Result, f: dict[str, Any], pictures: bool, is_open: bool) -> str:
    fid = f["id"]
    # the id inside the section's content: following a link to it opens the section
    out = [f'<details class="flow"{" open" if is_open else ""}><summary>'
           f'<h2>{_text(_flow_name(f))}</h2> <span class="note">{_lost(f)}</span></summary>'
           f'<div class="anchor" id="flow-{fid}"></div>',
           f"<p>{f['stalls']} stalls, <b>{f['stall_ms']:.1f} ms lost</b> = "
           f"{100 * f['lost_share']:.1f}% of {f['duration_s']:.3f} s; without them "
           f"~{f['duration_without_stalls_s']:.3f} s. {f['packets']} packets, roles from "
           f"{_text(f['roles'])}. Capture point: {_text(f['vantage'])} "
           f"({_text(f['vantage_basis'])}).</p>",
           f'<div class="fix"><span class="action">{_text(f["fix_action"])}</span> on the '
           f"{_text(f['fix_side'])} {_text(f['fix_endpoint'])}<br>{_text(f['fix_text'])}"
           f"{_held_html(report, f)}</div>",
           f'<p class="filters">{filters_html(wireshark.filter_docs(report, [fid])[0])}</p>',
           _endpoint_table(report, fid)]
    if pictures:
        from . import plot

        out.append(_figure(lambda fig: plot.time_sequence(report, fid, ax=fig.subplots()),
                           (11, 5.5), "Time-sequence graph: each segment from its relative "
                           "sequence number to its end, the peer's ACKs as dashed steps; each "
                           "stall shaded from S1 to S2 with its length.",
                           f"time-sequence graph of flow {fid}"))
        n = min(HTML_GRID_STALLS, f["stalls"])
        rows = -(-n // 3)
        def grid(fig: Figure) -> None:
            axes = list(fig.subplots(rows, 3, squeeze=False).ravel())
            plot.stall_grid(report, fid, n, axes=axes)
            for ax in axes[n:]:
                ax.set_visible(False)

        out.append(_figure(grid,
            (12.6, 3.4 * rows), f"The first {n} stalls one by one (ms since each S1): S1 "
            "left alone, the peer's ACK comes a delayed-ACK time later, S2 leaves at once.",
            f"first {n} stalls of flow {fid}"))
    stalls = report.stalls[report.stalls["flow"] == fid]
    out.append("<h3>Evidence (Wireshark frame numbers; times in s since the first packet)</h3>")
    out.append(_evidence_table(stalls))
    out.append("</details>")
    return "".join(out)


def matplotlib_available() -> bool:
    """Whether the pictures can be drawn (matplotlib, the `plot` extra, is installed)."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module set to None in sys.modules
        return False


NO_PICTURES = ("The pictures are left out: they need matplotlib, which is not installed "
               "(pip install 'nagleprobe[plot]').")


def _contents(detailed: pd.DataFrame, fixes: int, pictures: bool, flows: int) -> str:
    """The table of contents: each part, and each flow's section."""
    items = ([f'<li><a href="#fixes">What to fix</a> ({fixes})</li>'] if fixes else [])
    if pictures:
        items.append('<li><a href="#pictures">Overview</a></li>')
    items.append(f'<li><a href="#flows">Flows</a> ({flows})</li>')
    if len(detailed):
        items.append("<li>Flows with stalls, worst first<ol>" + "".join(
            f'<li><a href="#flow-{f["id"]}">{_text(_flow_name(f))}</a>: {_lost(f)}</li>'
            for f in detailed.to_dict("records")) + "</ol></li>")
    items.append('<li><a href="#capture">How the capture was read</a></li>')
    return f'<nav class="toc"><b>Contents</b><ol>{"".join(items)}</ol></nav>'


def _fixes(groups: list[dict[str, Any]], linked: set[int],
           said: dict[int, dict[str, Any]]) -> str:
    """A box per program that must change (`Report.fix_groups`): the action, the flows it
    fixes (linked to their sections), the fix in words for all of them, then in the
    protocol's terms where a flow's held message was named (`said`: `Held.flows`)."""
    out = ['<section id="fixes"><h2>What to fix</h2>']
    for g in groups[:HTML_FIX_GROUPS]:
        ids = g["flows"]
        n = len(ids)
        listed = ", ".join(f'<a href="#flow-{i}">{i}</a>' if i in linked else str(i)
                           for i in ids[:HTML_FIX_FLOW_IDS])
        if n > HTML_FIX_FLOW_IDS:
            listed += f" and {n - HTML_FIX_FLOW_IDS} more"
        out.append(f'<div class="fix"><h3><span class="action">{_text(g["action"])}</span> on '
                   f'the {_text(g["side"])} {_text(printable(g["endpoint"]))}: '
                   f'{n} flow{"s" if n != 1 else ""}, {_stalls(g["stalls"])}, '
                   f'{human_ms(g["lost_ms"])} lost</h3>'
                   f'{"Flows" if n != 1 else "Flow"} {listed}.<br>'
                   f"{_text(g['text'])}{_message_fix(g, said)}</div>")
    if len(groups) > HTML_FIX_GROUPS:
        rest = groups[HTML_FIX_GROUPS:]
        out.append(f'<p class="note">{len(rest)} more programs must change, for '
                   f"{sum(len(g['flows']) for g in rest)} flows with stalls: see the flows table "
                   "(fix on, fix).</p>")
    out.append("</section>")
    return "".join(out)


def render_html(report: Result, plots: bool = True, command: str | None = None,
                made: datetime | None = None) -> str:
    """The whole report as one HTML document. Pictures need matplotlib (the `plot` extra):
    without it the document says they are left out. The footer says when (`made`, default
    now) and by which `command` (default: this function) and nagleprobe version it was
    made."""
    missing = plots and not matplotlib_available()
    plots = plots and not missing
    c = report.capture
    fl = report.flows
    worst = worst_first(fl[fl["stalls"] > 0])
    bad = len(report.stalls) > 0
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>nagleprobe: {_text(str(c['path']))}</title><style>{CSS}</style></head><body>",
           "<header><h1>Nagle / delayed-ACK stall report</h1>",
           f'<p class="file">{_text(str(c["path"]))}</p></header>',
           f'<p class="verdict {"bad" if bad else "good"}">{_text(report.verdict())}</p>']
    if missing:
        out.append(f'<p class="note">{_text(NO_PICTURES)}</p>')
    detailed = worst.head(HTML_DETAILED_FLOWS)
    groups = report.fix_groups()
    out.append(_contents(detailed, len(groups), plots and len(fl) > 0, len(fl)))
    if len(groups):
        out.append(_fixes(groups, set(detailed["id"].tolist()), report.held().flows))
    if plots and len(fl):
        from . import plot

        out.append('<section id="pictures"><h2>Overview</h2>')
        shown = min(len(fl), 25)
        out.append(_figure(lambda fig: plot.overview(report, ax=fig.subplots()),
                           (11, 1.3 + 0.5 * shown), "Each flow's lifetime (grey) and its "
                           "stalls (red), with the time it lost.", "flows on a timeline"))
        if bad:
            out.append(_figure(lambda fig: plot.delay_distribution(report, ax=fig.subplots()),
                               (9, 4), "Stall lengths and the peers' ACK delays against the "
                               "usual delayed-ACK timers.", "distribution of stall lengths"))
        if bad and int(report.columns("flows")["requests"].sum()):
            out.append(_figure(lambda fig: plot.latency_cdf(report, ax=fig.subplots()),
                               (9, 4), "What the stalls cost the requests: their latency "
                               "as captured and with the stalls' held time taken out.",
                               "request latency CDF with and without the stalls"))
        if len(worst) > 1:
            out.append(_figure(lambda fig: plot.time_lost(report, ax=fig.subplots()),
                               (9, 1.3 + 0.45 * min(len(worst), 25)),
                               "Time lost per flow, worst first.", "time lost per flow"))
        out.append("</section>")
    out.append('<section id="flows"><h2>Flows</h2>')
    out.append(table_html(pd.concat([worst, fl[fl["stalls"] == 0]]), FLOW_COLUMNS, FLOW_FMT,
                          _stalled) if len(fl) else "<p>No TCP flows in this report.</p>")
    out.append("</section>")
    for k, f in enumerate(detailed.to_dict("records")):
        out.append(_flow_section(report, f, plots and k < HTML_PICTURED_FLOWS, k == 0))
    if len(worst) > HTML_DETAILED_FLOWS:
        out.append(f'<p class="note">The evidence of the other {len(worst) - HTML_DETAILED_FLOWS}'
                   f" flows with stalls is in the JSON output (--format json).</p>")
    if report.vantage_doc is not None:
        out.append(_vantage_section(report))
    out.append(_capture_section(report))
    when = (made or datetime.now(timezone.utc)).astimezone(timezone.utc)
    out.append(f"<footer>Made {when:%Y-%m-%d %H:%M:%S} UTC by "
               f"<code>{_text(command or 'nagleprobe.html_report.render_html')}"
               "</code> with "
               f"nagleprobe {_text(__version__)}. Frame numbers are Wireshark's; "
               "times are seconds since the capture's first packet (Wireshark's default time "
               f"column). Sides: {', '.join(SIDES)} as the handshake (or a guess) says."
               "</footer></body></html>")
    return "\n".join(out)


VANTAGE_COLUMNS = {"client": "client", "server": "server", "vantage": "vantage", "file": "file",
                   "stalls": "stalls", "stall_ms": "lost ms", "fix_side": "fix on",
                   "split_stalls": "split stalls", "peer_ack_ms": "peer's delayed ACK ms",
                   "path_ms": "path ms", "stack_ms": "sender's stack ms"}


def _vantage_section(report: Result) -> str:
    """The files were several vantages of the same connections: the clocks between them and
    each connection's verdict at every vantage with its time split (docs/DETECTION.md)."""
    out = ['<section id="vantages"><h2>Vantages</h2><p>These files saw the same connections '
           "from different places; each place was analysed on its own, the report above is "
           "vantage 1's.</p><ul>"]
    for c in report.vantage_doc["clocks"]:
        out.append(f"<li>clock of {_text(c['to'])} minus {_text(c['from'])}: "
                   f"{c['offset_ms']:+.3f} ms, one-way delay {c['one_way_ms']:.3f} ms</li>")
    out.append("</ul>")
    out.append(table_html(report.vantages, VANTAGE_COLUMNS, {k: "{:.1f}" for k in (
        "stall_ms", "peer_ack_ms", "path_ms", "stack_ms")}, lambda r: r["stalls"] > 0))
    out.append("</section>")
    return "".join(out)


def write_html(report: Result, path: str | Path, plots: bool = True,
               command: str | None = None) -> None:
    """Write `render_html(report)` to `path` (UTF-8) through `nagleprobe.output`: never over
    the capture the report was read from, a FIFO or device written as a stream."""
    from .output import write_output

    files = report.capture.get("files") or [{"path": report.capture["path"]}]
    write_output(str(path), render_html(report, plots=plots,
                                        command=command or "nagleprobe.html_report.write_html"),
                 "the HTML report", [f["path"] for f in files])
