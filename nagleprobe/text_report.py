"""The text report for people, read at a glance: the verdict, a table of the flows with
stalls, one fix per endpoint, then the evidence; clean flows in one line (all of them with
`verbose`); every line fitted to the terminal's width."""

from __future__ import annotations

import math
import re
import textwrap
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .advice import HOLD_SHARE, HOLD_TEXT_MS, timer_words
from .columns import Columns, take
from .detect import REASONS
from .errors import printable
from .fileset import set_name
from .held import fix_line, group_message, held_line
from .humanize import SIDES, counted, flow_list, human_count, human_ms
from .relay import RELAY_COLUMNS
from .selection import selection_line, worst_order
from .tables import NULLABLE, STALL_POINTS, rows_of

if TYPE_CHECKING:
    from .tables import Result

TEXT_EVIDENCE_ROWS = 12  # stalls listed per flow in the text report (all: all_stalls)
TEXT_DETAILED_FLOWS = 10  # flows whose evidence is shown with `verbose`, worst first
TEXT_LISTED_FLOWS = 50  # rows of the stalled-flows table; clean flows listed with `verbose`
TEXT_FIXES = 10  # fixes (endpoints to change) shown, the costliest first
TEXT_WARNINGS = 20  # capture warnings printed in the text report (JSON has all)
TEXT_WIDTH = 80  # the width when not on a terminal (print(report), pipes, CI logs, issues)
TIME_BASES = ("flow", "capture", "utc")  # evidence times: since the flow's first packet,
# since the capture's first packet (Wireshark's default), or UTC time of day


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
    mss = {e["mss_from"] for e in f["ends"].values()}
    if mss - {"syn"}:
        how = "guessed" if "guessed" in mss else "inferred from repeated full segments"
        why = "SYN options cut by the snap length" if options_cut else "no SYN option"
        guessed.append(f"MSS {how} ({why})")
    if f["rtt_ms"] is None:
        guessed.append("round trips unknown (no handshake, no undelayed data/ACK pair)")
    if guessed:
        out.append("inferred: " + "; ".join(guessed))
    if f.get("pieces", 1) > 1:
        out.append(f"analysed in {counted(f['pieces'], 'piece')} (a long connection, held "
                   "a piece at a time; the result is the whole connection's unless a warning "
                   "says otherwise)")
    if f["nagle_hold_ms"] >= HOLD_TEXT_MS:  # on a LAN they cost microseconds: JSON only
        ms = f["nagle_hold_ms"]
        share = ms / (1e3 * f["duration_s"]) if f["duration_s"] else 0.0
        worth = (f", {100 * share:.0f}% of the flow: TCP_NODELAY on the sender, or one write "
                 f"per message, saves them" if share >= HOLD_SHARE else "")
        out.append(f"Nagle holds without a delayed ACK: {human_count(f['nagle_holds'])} (one "
                   f"round trip each, up to {human_ms(ms)} in all{worth}; not stalls)")
    up = {k.removeprefix("relay_"): f[k] for k in RELAY_COLUMNS}
    if up["upstream_flow"] is not None:
        where = ("the message arrived whole and left split here: the relay must change"
                 if up["split"] == "at-relay" else
                 "the message arrived already split: look upstream")
        out.append(f"relay: {up['out']} forwards what flow {up['upstream_flow']} brings to "
                   f"{up['in']} ({counted(up['stalls_matched'], 'stall')} followed an "
                   f"arrival there); {where}")
    why_not = {r: int(f[f"why_not_{r}"]) for r in REASONS if f[f"why_not_{r}"]}
    if why_not and not f["stalls"]:
        n = sum(why_not.values())
        out.append(f"why no stall: {counted(n, 'late ACK')} followed by the sender's next "
                   f"small segment, ruled out as: " + "; ".join(
                       f"{v} {k.replace('_', ' ')}"
                       for k, v in sorted(why_not.items(), key=lambda kv: -kv[1])))
    return out


class _Pre(str):
    """A text-report line laid out already (a table row): `fit_lines` leaves it alone."""


_GLUE = "\x00"  # joins a number to its unit while wrapping (never in printable text)
_UNIT = re.compile(r"(?<=\d) (?=(?:ms|s|B|%|packets?|stalls?|flows?)(?![\w-]))")


def fit_lines(lines: list[str], width: int) -> list[str]:
    """Wrap every prose line longer than `width` at spaces, continuation lines indented two
    more than the line's own indent, never between a number and its unit ("44 ms"); table
    rows (`_Pre`) and words longer than the width (endpoints) are kept whole."""
    out = []
    for line in lines:
        if len(line) <= width or isinstance(line, _Pre):
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip(" "))]
        glued = _UNIT.sub(_GLUE, line.lstrip(" "))
        out += [x.replace(_GLUE, " ") for x in textwrap.wrap(
            glued, width, initial_indent=indent, subsequent_indent=indent + "  ",
            break_long_words=False, break_on_hyphens=False)] or [line]
    return out


def _path_lines(path: str, rest: str, width: int) -> list[str]:
    """The first lines: the capture's path, then what the file is; a path too long for the
    width broken after its slashes (a name longer than the width cut)."""
    if len(path) + 2 + len(rest.split(" ", 1)[0]) <= width:
        return [f"{path}: {rest}"]
    return [*map(_Pre, broken_path(path + ":", width)), f"  {rest}"]


def broken_path(path: str, width: int, indent: str = "") -> list[str]:
    """`path` in lines of at most `width` (each begun with `indent`), broken after its
    slashes; a name longer than a line cut."""
    out, cur = [], indent
    for part in re.findall(r"[^/]*/|[^/]+$", path):
        while len(indent) + len(part) > width:  # a single name longer than the line
            out.append(cur + part[:width - len(cur)])
            part, cur = part[width - len(cur):], indent
        if len(cur) + len(part) > width:
            out.append(cur)
            cur = indent
        cur += part
    return out + [cur]


_WIDE = ("sender", "small seg (S1)", "late pure ACK", "released (S2)", "held", "stall ms",
         "peer ACK ms", "conf")


def evidence_lines(ev: list[dict[str, Any]], width: int, times: dict[str, list[str]],
                   files: dict[str, int] | None = None) -> list[str]:
    """The evidence table of a flow's stalls (`ev`: a row of the stalls table each): the
    wide layout (frames and times of S1, the late ACK and S2) when it fits `width`, else a
    narrow one (frames, S1's time). `times`: each stall point's times as shown; `files` (a
    file set, see `file_numbers`): frames are shown as fN#frame, N the file's number."""
    def at(s: dict[str, Any], k: str) -> str:
        mark = f"#{s[f'{k}_frame']}"
        return f"f{files[s[f'{k}_file']]}{mark}" if files and f"{k}_file" in s else mark

    tw = max([10] + [len(x) for v in times.values() for x in v])
    wide = (f"    {'sender':<6}  {'small seg (S1)':<{tw + 9}}  {'late pure ACK':<{tw + 9}}  "
            f"{'released (S2)':<{tw + 8}} {'held':>6} {'stall ms':>9}  {'peer ACK ms':>10}  conf")
    if width >= len(wide):
        lines = [_Pre(wide)]
        for j, s in enumerate(ev):
            lines.append(_Pre(
                f"    {s['sender']:<6}  {at(s, 'small'):<8} {times['small'][j]:>{tw}}  "
                f"{at(s, 'ack'):<8} {times['ack'][j]:>{tw}}  {at(s, 'released'):<8} "
                f"{times['released'][j]:>{tw}} {s['held_bytes']:>5}B {s['delay_ms']:>9.1f}  "
                f"{s['peer_ack_delay_ms']:>10.1f}  {s['confidence']:.2f}"))
        return lines
    lines = [_Pre(f"    sender  S1 #     {'S1 at':>{tw}}  ACK #    S2 #      held  stall ms "
                  f"peer ms  conf")]
    for j, s in enumerate(ev):
        lines.append(_Pre(
            f"    {s['sender']:<6}  {at(s, 'small'):<8} {times['small'][j]:>{tw}}  "
            f"{at(s, 'ack'):<8} {at(s, 'released'):<8} {s['held_bytes']:>5}B "
            f"{s['delay_ms']:>8.1f} {s['peer_ack_delay_ms']:>7.1f}  {s['confidence']:.2f}"))
    return lines


def _stall_times(st: Columns, start_ns: np.ndarray, base: str
                 ) -> dict[str, list[str]]:
    """Each stall point's times as the evidence shows them (`base`, one of TIME_BASES);
    `start_ns`: the first packet of each stall's flow."""
    if base == "capture":
        return {k: [f"{x:.6f}" for x in st[f"{k}_s"].tolist()] for k in STALL_POINTS}
    if base == "flow":
        return {k: [f"{x / 1e9:.6f}" for x in (st[f"{k}_time"] - start_ns).tolist()]
                for k in STALL_POINTS}
    return {k: [_utc_time(x) for x in st[f"{k}_time"].tolist()] for k in STALL_POINTS}


def _utc_time(ns: int) -> str:
    s, us = divmod(int(ns) // 1000, 1_000_000)
    return time.strftime("%H:%M:%S", time.gmtime(s)) + f".{us:06d}"


def legend(base: str, dates: list[str] = ()) -> str:  # type: ignore[assignment]
    """The line that says what the evidence tables' columns are."""
    when = {"flow": "in s since the flow's first packet",
            "capture": "in s since the capture's first packet",
            "utc": f"UTC time of day ({', '.join(dates)})"}[base]
    return (f"Evidence columns: S1 the small segment held back, ACK the peer's late pure ACK, "
            f"S2 the segment released after it (#: Wireshark frame numbers; times {when}; "
            f"-t changes them); held: bytes in S2; stall ms: S1 to S2; peer ms: how long "
            f"the peer delayed its ACK; conf: confidence.")


def _rows(cols: Columns) -> list[dict[str, Any]]:
    """A table's rows as dicts of Python values, a missing value (NaN; -1 in a NULLABLE
    column) None, as the JSON document has it null."""
    def missing(name: str, v: Any) -> bool:
        return (isinstance(v, float) and math.isnan(v)) or (name in NULLABLE and v < 0)

    names = list(cols)
    values = [[None if missing(name, v) else v for v in cols[name].tolist()]
              if cols[name].dtype.kind in "fi" else cols[name].tolist() for name in names]
    return [dict(zip(names, row)) for row in zip(*values)]


def flow_rows(r: Result, ids: list[int]) -> list[dict[str, Any]]:
    """The given flows' rows (see `_rows`), each with its endpoints' rows under "ends"
    ({"client": ..., "server": ...})."""
    fl = r.columns("flows")
    at = rows_of(fl, ids)
    out = _rows(take(fl, at))
    ends = r.columns("endpoints")  # two rows per flow, client then server
    for j, side in enumerate(SIDES):
        for f, e in zip(out, _rows(take(ends, 2 * at + j))):
            f.setdefault("ends", {})[side] = e
    return out


def _seen(f: dict[str, Any]) -> str:
    """What a flow without stalls showed: the delayed and quick ACKs of each side, the
    Nagle state where known, and that no sender was held."""
    eps = f["ends"]
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


_TABLE_HEAD = "  flow  stalls      lost  fix on  client -> server"


def _stalled_table(fl: Columns, width: int) -> list[str]:
    """One row per flow with stalls (worst first): id, stalls, time lost, the side to fix,
    and its endpoints (each on a line of its own when the row would be too long)."""
    lines = [_Pre(_TABLE_HEAD)]
    for i, client, server, n, ms, side in zip(*(fl[k].tolist() for k in (
            "id", "client", "server", "stalls", "stall_ms", "fix_side"))):
        row = f"  {i:>4}  {human_count(n):>6}  {human_ms(ms):>8}  {side:<6}  "
        col = len(row)

        # endpoints on lines of their own: under their column, or as far left as it takes
        pad = " " * max(2, min(col, width - max(len(client) + 3, len(server))))

        if col + len(client) + 4 + len(server) <= width:
            lines.append(_Pre(f"{row}{client} -> {server}"))
        elif col + len(client) + 3 <= width:
            lines += [_Pre(f"{row}{client} ->"), _Pre(pad + server)]
        else:
            lines += [_Pre(row.rstrip()), _Pre(f"{pad}{client} ->"), _Pre(pad + server)]
    return lines


def render_text(r: Result, width: int = TEXT_WIDTH, verbose: bool = False,
                all_stalls: bool = False, times: str = "flow") -> str:
    """The terminal report: the verdict, the flows with stalls, one fix per endpoint, then
    the evidence of the worst flow of each fix (`verbose`: of every flow with stalls, and
    every clean flow listed; `all_stalls`: every stall of every flow with stalls), its
    times as `times` (one of TIME_BASES) says."""
    if times not in TIME_BASES:
        raise ValueError(f"times must be one of {', '.join(TIME_BASES)}, not {times!r}")
    c = r.capture
    skipped = ", ".join(f"{human_count(v)} {k}" for k, v in c["skipped"].items()) or "none"
    lines = _path_lines(printable(c["path"]), (
        f"{c['format']}{' (gzip)' if c['compressed'] else ''}, "
        f"{'/'.join(c['link_types']) or 'no packets'}, {counted(c['packets'], 'packet')}, "
        f"{human_count(c['tcp_packets'])} TCP; skipped: {skipped}"), width)
    numbers = file_numbers(c)
    if numbers:
        lines.append(f"{len(c['files'])} files read as one capture (merged by time; frames "
                     "below are fN#frame, the frame number in file N):")
        for f in c["files"]:
            what = (f"error: {printable(f['error'])}" if f["error"] and not f["packets"] else
                    f"{f['format']}{' (gzip)' if f['compressed'] else ''}, "
                    f"{counted(f['packets'], 'packet')}")
            lines.append(f"  f{numbers[f['path']]} {printable(f['path'])}: {what}")
    if c["skipped"].get("duplicate"):
        lines.append(f"{counted(c['skipped']['duplicate'], 'duplicate packet')} (the same "
                     "packet seen twice, as `tcpdump -i any` does on bridges/veth) dropped "
                     "before analysis")
    for w in c["warnings"][:TEXT_WARNINGS]:
        lines.append(f"warning: {w}")
    if len(c["warnings"]) > TEXT_WARNINGS:
        more = len(c["warnings"]) - TEXT_WARNINGS
        lines.append(f"... {counted(more, 'more warning')} (--format json lists them all)")
    if r.selection is not None:
        lines.append(selection_line(r.selection))
    lines += ["", r.verdict()]
    fl = r.columns("flows")
    worst = worst_order(fl["stall_ms"], fl["id"], fl["stalls"] > 0)  # rows of stalled flows
    if len(worst):
        lines += ["", *_stalled_table(take(fl, worst[:TEXT_LISTED_FLOWS]), width)]
        if len(worst) > TEXT_LISTED_FLOWS:
            lines.append(f"  ... {counted(len(worst) - TEXT_LISTED_FLOWS, 'more flow')} with "
                         "stalls (--format json lists them all)")
        lines += _fixes_and_evidence(r, worst, width, verbose, all_stalls, times, numbers)
    lines += _clean_lines(r, verbose)
    if r.vantage_doc is not None:
        lines += vantage_lines(r.vantage_doc)
    return "\n".join(fit_lines(lines, width)) + "\n"


def _fixes_and_evidence(r: Result, worst: np.ndarray, width: int, verbose: bool,
                        all_stalls: bool, times: str, numbers: dict[str, int] | None
                        ) -> list[str]:
    """One fix per endpoint, then the evidence of the flows chosen (see `render_text`)."""
    fl, lines = r.columns("flows"), []
    groups = r.fix_groups()
    said = r.held()
    for g in groups[:TEXT_FIXES]:
        lines += ["", f"FIX for the {g['side']} {g['endpoint']} ({flow_list(g['flows'])}):",
                  f"  {g['text']}"]
        m = group_message(said.flows, g["flows"])
        lines += [f"  {fix_line(m, g['side'], g['action'])}"] if m else []
    if len(groups) > TEXT_FIXES:
        lines += ["", f"... {counted(len(groups) - TEXT_FIXES, 'more fix', 'more fixes')} (--format json "
                      "has each flow's)"]
    stalled = fl["id"][worst].tolist()
    if all_stalls:
        detailed = stalled
    elif verbose:
        detailed = stalled[:TEXT_DETAILED_FLOWS]
    else:
        firsts = {g["flows"][0] for g in groups[:TEXT_FIXES]}
        detailed = [i for i in stalled if i in firsts]
    st = r.columns("stalls")
    rows = [np.flatnonzero(st["flow"] == i) for i in detailed]
    cut = [x if all_stalls else x[:TEXT_EVIDENCE_ROWS] for x in rows]
    sub = take(st, np.concatenate(cut or [np.zeros(0, np.int64)]))
    shown = _stall_times(sub, fl["start_time"][rows_of(fl, sub["flow"])], times)
    dates = sorted({time.strftime("%Y-%m-%d", time.gmtime(x // 10**9))
                    for x in sub["small_time"].tolist()}) if times == "utc" else []
    docs, listed, a = flow_rows(r, detailed), _rows(sub), 0
    if detailed:
        lines += ["", legend(times, dates)]
    for f, mine, n in zip(docs, rows, map(len, cut)):
        lines += ["", *_flow_block(f, bool(r.capture["skipped"].get("options-cut")),
                                   r.capture.get("tunnels", []))]
        m = said.of(f["id"], f["stalls"])
        lines += [f"  {held_line(m, width - 2)}"] if m else []
        lines += evidence_lines(listed[a:a + n], width,
                                {k: v[a:a + n] for k, v in shown.items()}, numbers)
        a += n
        if len(mine) > n:
            lines.append(f"    ... {counted(len(mine) - n, 'more stall')} (--all-stalls "
                         "lists them)")
    told = set(detailed)
    left = [i for i in stalled if i not in told]
    if left:
        lines += ["", f"The evidence of {flow_list(left)} is left out (each shares a fix "
                      "above; -v shows the first ten, --all-stalls all)."]
    return lines


def _flow_block(f: dict[str, Any], options_cut: bool, tunnels: list[dict[str, Any]]
                ) -> list[str]:
    """A flow's evidence above its stalls' table: what it lost, where it was captured, what
    was inferred, and each side's Nagle and delayed ACK."""
    lines = [f"Flow {f['id']}: client {f['client']} -> server {f['server']} "
             f"({counted(f['packets'], 'packet')})"]
    if f.get("tunnel"):
        lines.append(f"  seen through tunnel {f['tunnel']}: "
                     f"{tunnels[f['tunnel'] - 1]['text']}")
    lines.append(f"  {counted(f['stalls'], 'stall')}, {human_ms(f['stall_ms'])} lost = "
                 f"{100 * f['lost_share']:.1f}% of {f['duration_s']:.3f} s; "
                 f"without them ~{f['duration_without_stalls_s']:.3f} s")
    lines.append(latency_line(f))
    lines.append(f"  capture point: {f['vantage']} ({f['vantage_basis']})")
    lines += [f"  {x}" for x in _flow_notes(f, options_cut)]
    for side in SIDES:
        e = f["ends"][side]
        da = timer_words(e["delayed_ack_ms"]) if e["delayed_ack_ms"] is not None else "not seen"
        lines.append(f"  {side}: Nagle {_nagle_text(e)}, delayed ACK {da}, "
                     f"{counted(e['quick_acks'], 'quick ACK')}")
    return lines


def latency_line(f: dict[str, Any], width: int = TEXT_WIDTH) -> str:
    """A flow's requests and their latency in one line of at most `width` columns (the p50
    left out where it would not fit)."""
    n = f["requests"]
    if not n:
        return ("  no requests: its data went one way only (no latency measured)"
                if f["exchange_kind"] == "one-way" else "  no requests: no data")
    head = (f"  {human_count(n)} {'request' if n == 1 else 'requests'}, "
            f"{100 * f['stalled_requests_share']:.0f}% stalled: ")
    p99 = (f"p99 {human_ms(f['latency_p99_ms'])} "
           f"({human_ms(f['latency_p99_ms_without_stalls'])} without the stalls)")
    line = f"{head}p50 {human_ms(f['latency_p50_ms'])}, {p99}"
    return line if len(line) <= width else head + p99


def _clean_lines(r: Result, verbose: bool) -> list[str]:
    """The flows without stalls: one summary line, or (`verbose`) one line each with what
    it showed."""
    fl = r.columns("flows")
    clean = fl["stalls"] == 0
    n = int(clean.sum())
    if not n:
        return []
    if not verbose:
        held = clean & (fl["nagle_hold_ms"] >= HOLD_TEXT_MS) & (
            fl["nagle_hold_ms"] >= HOLD_SHARE * 1e3 * fl["duration_s"])
        note = (f"; in {human_count(held.sum())} of them Nagle held writes a round trip "
                f"without a delayed ACK for {100 * HOLD_SHARE:.0f}% or more of the flow"
                if held.any() else "")
        return ["", f"Flows without stalls: {human_count(n)} (-v lists each with what it "
                    f"showed){note}."]
    ids = fl["id"][clean]
    lines = ["", f"Flows without stalls ({human_count(n)}):"]
    for f in flow_rows(r, ids[:TEXT_LISTED_FLOWS].tolist()):
        lines.append(f"  {f['id']:>4}  {f['client']} -> {f['server']}  "
                     f"{counted(f['packets'], 'packet')}, {f['duration_s']:.3f} s, vantage "
                     f"{f['vantage']}; {_seen(f)}")
        lines += [f"        {x}" for x in _flow_notes(f, bool(r.capture["skipped"].get(
            "options-cut")))]
    if n > TEXT_LISTED_FLOWS:
        lines.append(f"  ... {human_count(n - TEXT_LISTED_FLOWS)} more")
    return lines


def vantage_lines(doc: dict[str, Any]) -> list[str]:
    """The Vantages section: each vantage's files, clock offset and one-way delay from
    vantage 1, then per connection with stalls the verdict at each vantage and where the
    held time went (docs/DETECTION.md, "Several vantages")."""
    lines = ["", f"Vantages: {counted(len(doc['files']), 'capture point')} of the same "
                 "connections, each analysed on its own:"]
    for f in doc["files"]:
        lines.append(f"  v{f['vantage']}: {printable(set_name(f['paths']))}")
    for c in doc["clocks"]:
        lines.append(f"  clock of {printable(c['to'])} minus {printable(c['from'])}: "
                     f"{c['offset_ms']:+.3f} ms, one-way delay {c['one_way_ms']:.3f} ms "
                     f"(handshakes of {counted(c['connections'], 'connection')})")
    stalled = sorted((c for c in doc["connections"] if any(v["stalls"] for v in c["vantages"])),
                     key=lambda c: -max(v["stall_ms"] for v in c["vantages"]))
    clean = len(doc["connections"]) - len(stalled)
    for c in stalled[:TEXT_LISTED_FLOWS]:
        at = " / ".join(f"{v['stalls']} (v{v['vantage']})" for v in c["vantages"])
        fix = (f"fix on the {c['fix_side']} at every vantage" if c["agree"] else
               "the vantages disagree: " + ", ".join(
                   f"v{v['vantage']} {v['fix_side'] or 'no fix'}" for v in c["vantages"]))
        lines.append(f"  {c['client']} -> {c['server']}: stalls {at}; {fix}")
        sp = c["split"]
        if sp is None:
            lines.append("    time split unknown: no vantage near each end saw the stalls")
            continue
        peer = "server" if sp["sender"] == "client" else "client"
        lines.append(f"    held {human_ms(sp['held_ms'])} in {counted(sp['stalls'], 'stall')} "
                     f"seen at the {sp['sender']}'s (v{sp['sender_vantage']}) and the {peer}'s "
                     f"(v{sp['peer_vantage']}) vantage: {human_ms(sp['peer_ack_ms'])} in the "
                     f"{peer}'s delayed ACK, {human_ms(sp['path_ms'])} on the path, "
                     f"{human_ms(sp['stack_ms'])} in the {sp['sender']}'s stack")
    if len(stalled) > TEXT_LISTED_FLOWS:
        lines.append(f"  ... {counted(len(stalled) - TEXT_LISTED_FLOWS, 'more connection')} "
                     "with stalls (--format json lists them all)")
    if clean:
        lines.append(f"  {counted(clean, 'connection')} seen at several vantages without stalls")
    return lines


def file_numbers(capture: dict[str, Any]) -> dict[str, int] | None:
    """A file set's files numbered 1.. as the text report names them (f1, f2, ...); None
    for a single file."""
    files = capture.get("files")
    return {f["path"]: j + 1 for j, f in enumerate(files)} if files else None
