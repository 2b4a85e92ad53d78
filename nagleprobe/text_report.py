"""The text report for people: verdict and fixes first, then the evidence, then the clean
flows; lines fitted to the terminal's width."""

from __future__ import annotations

import textwrap
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from .advice import HOLD_SHARE, HOLD_TEXT_MS
from .decode import take
from .detect import timer_name
from .document import stall_docs
from .errors import printable
from .selection import selection_line, worst_order
from .words import SIDES, human_count, human_ms

if TYPE_CHECKING:
    from .report import Report  # which renders itself through this module (to_text)

TEXT_EVIDENCE_ROWS = 12  # stalls listed per flow in the text report (JSON has all)
TEXT_DETAILED_FLOWS = 10  # stalled flows explained in full, worst first
TEXT_LISTED_FLOWS = 50  # further flows listed one per line
TEXT_WARNINGS = 20  # capture warnings printed in the text report (JSON has all)
TEXT_WIDTH = 100  # the text report's width when not on a terminal (print(report), pipes)


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
    if f.get("pieces", 1) > 1:
        out.append(f"analysed in {human_count(f['pieces'])} pieces (a long connection, held "
                   "a piece at a time; the result is the whole connection's unless a warning "
                   "says otherwise)")
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
    # the ids of the flows with stalls, worst first, sorted on the two columns that order them
    # (not on the whole table); every flow shown is made a document at once
    fl = r.columns("flows")
    worst = worst_order(fl["stall_ms"], fl["id"], fl["stalls"] > 0)  # rows of the stalled flows
    stalled = fl["id"][worst]
    clean_ids = fl["id"][fl["stalls"] == 0]
    detailed = stalled[:TEXT_DETAILED_FLOWS].tolist()
    docs = r.flow_docs(detailed + clean_ids[:TEXT_LISTED_FLOWS].tolist())
    # each detailed flow's stall rows; the documents of those listed made at once
    st = r.columns("stalls")
    rows = [np.flatnonzero(st["flow"] == i) for i in detailed]
    listed = iter(stall_docs(take(st, np.concatenate(
        [x[:TEXT_EVIDENCE_ROWS] for x in rows] or [np.zeros(0, np.int64)]))))
    for f, mine in zip(docs, rows):
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
        ev = list(islice(listed, min(len(mine), TEXT_EVIDENCE_ROWS)))
        lines.append("  Evidence (Wireshark frame numbers; times in s since the first packet):")
        lines += evidence_lines(ev, width, numbers)
        if len(mine) > TEXT_EVIDENCE_ROWS:
            lines.append(f"    ... {human_count(len(mine) - TEXT_EVIDENCE_ROWS)} more stalls (--format json "
                         f"lists them all)")
    rest = worst[TEXT_DETAILED_FLOWS:]
    if len(rest):
        lines.append("")
        lines.append(f"{human_count(len(rest))} more flows with stalls (worst first; --format json lists all):")
        shown = take(fl, rest[:TEXT_LISTED_FLOWS])
        for i, client, server, n, ms, action, side in zip(*(shown[k].tolist() for k in (
                "id", "client", "server", "stalls", "stall_ms", "fix_action", "fix_side"))):
            lines.append(f"  {i:>6}  {client} -> {server}  {human_count(n)} stalls, "
                         f"{human_ms(ms)}; fix: {action} on the {side}")
        if len(rest) > TEXT_LISTED_FLOWS:
            lines.append(f"  ... {human_count(len(rest) - TEXT_LISTED_FLOWS)} more")
    if len(clean_ids):
        lines.append("")
        lines.append(f"Flows without stalls ({human_count(len(clean_ids))}):")
        for f in docs[len(detailed):]:
            lines.append(f"  {f['id']:>4}  {f['client']} -> {f['server']}  "
                         f"{human_count(f['packets'])} packets, "
                         f"{f['duration_s']:.3f} s, vantage {f['vantage']}; {_seen(f)}")
            lines += [f"        {x}" for x in _flow_notes(f, bool(c["skipped"].get("options-cut")))]
        if len(clean_ids) > TEXT_LISTED_FLOWS:
            lines.append(f"  ... {human_count(len(clean_ids) - TEXT_LISTED_FLOWS)} more")
    return "\n".join(fit_lines(lines, width)) + "\n"


def file_numbers(capture: dict[str, Any]) -> dict[str, int] | None:
    """A file set's files numbered 1.. as the text report names them (f1, f2, ...); None
    for a single file."""
    files = capture.get("files")
    return {f["path"]: j + 1 for j, f in enumerate(files)} if files else None
