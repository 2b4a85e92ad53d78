"""How the gate's verdicts are written: text for people, JUnit XML for CI servers, GitHub
Actions annotations (the JSON document is `CheckRun.to_dict`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import numpy as np

from .check import VERDICT_WORDS, CaptureVerdict, CheckRun
from .check_table import EVIDENCE_COLUMNS, FlowTable, FlowVerdict
from .errors import ExitStatus, printable, printable_lines
from .humanize import counted, flow_list, human_count, human_ms, plural

TEXT_FLOWS = 10  # flows with stalls shown per capture in the text verdict, worst first
ANNOTATIONS = 10  # GitHub shows at most 10 error and 10 warning annotations per step
TEXT_WARNINGS = 5  # capture warnings shown per capture in the text verdict
# the JUnit failure type of a capture that did not pass for want of evidence, not for stalls
FAILURE_TYPES = {ExitStatus.EMPTY: "EmptyCapture", ExitStatus.UNRESOLVED: "UnresolvedTimes"}
CASES_PER_PIECE = 2000  # flow test cases per piece of the JUnit text
EVIDENCE_HEAD = ("evidence (Wireshark frame numbers; s since the first packet): sender, small "
                 "segment S1, late pure ACK, released S2, stall ms, confidence")
# what ElementTree writes for these characters in attribute values (the first three: in text)
_ATTR_REFS = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("\r", "&#13;"),
              ("\n", "&#10;"), ("\t", "&#09;"))


# ------------------------------------------------------------------------------- rendering
def render_text(run: CheckRun) -> str:
    """A verdict line per capture, and per failing flow its endpoints and the fix."""
    lines = []
    for v in run.verdicts:
        word = VERDICT_WORDS[v.status]
        if v.error:
            lines.append(f"{word} {printable(v.error)}")
            continue
        if v.status == ExitStatus.EMPTY:
            lines.append(f"{word} {printable(v.path)}: nothing checked: "
                         f"{'; '.join(v.reasons)} (a wrong interface, port or filter? "
                         "--allow-empty permits this)")
            lines += _warning_lines(v)
            continue
        sel = (f"{human_count(v.flows_selected)} of {counted(v.flows_total, 'flow')} selected"
               if v.flows_selected != v.flows_total else counted(v.flows_total, 'flow'))
        found = (f"{counted(v.stalls, 'stall')}, {human_ms(v.stall_ms)} lost"
                 if v.stalls else "no stalls")
        extra = (f"; {human_count(v.ignored_stalls)} below the confidence floor ignored"
                 if v.ignored_stalls else "")
        why = f" [{'; '.join(v.reasons)}]" if v.reasons else ""
        lines.append(f"{word} {printable(v.path)}: {found} in {sel}{extra}{why}")
        lines += _warning_lines(v)
        t = v.flow_table()
        worst = t.worst_order()
        for f in map(t.verdict, worst[:TEXT_FLOWS].tolist()):
            state = f"over budget: {'; '.join(f.reasons)}" if not f.passed else "within budget"
            lines.append(f"  {f.name}: {counted(f.stalls, 'stall')}, "
                         f"{human_ms(f.stall_ms)} = "
                         f"{f.lost_share_pct:.1f}% of {f.duration_s:.3f} s ({state})")
        if len(worst) > TEXT_FLOWS:
            rest = worst[TEXT_FLOWS:]
            over = int((~t.passed[rest]).sum())
            lines.append(f"  ... {counted(len(rest), 'more flow')} with stalls "
                         f"({human_count(over)} over budget); "
                         f"--junit and --format json list them all")
        for g in v.fixes:  # one per endpoint to change, however many flows share it
            lines.append(f"  held: {g['side']} {g['endpoint']} ({flow_list(g['flows'])}); "
                         f"fix: {g['action']}. {g['text']}")
    n = len(run.verdicts)
    counts = {s: sum(1 for v in run.verdicts if v.status == s) for s in ExitStatus}
    parts = [f"{counts[ExitStatus.OK]} within budget"]
    if counts[ExitStatus.STALLS_FOUND]:
        parts.append(f"{counts[ExitStatus.STALLS_FOUND]} over budget")
    if counts[ExitStatus.EMPTY]:
        parts.append(f"{counts[ExitStatus.EMPTY]} empty")
    if counts[ExitStatus.UNRESOLVED]:
        parts.append(f"{counts[ExitStatus.UNRESOLVED]} unresolved")
    if counts[ExitStatus.BAD_CAPTURE]:
        parts.append(f"{counts[ExitStatus.BAD_CAPTURE]} unreadable")
    if counts[ExitStatus.INTERNAL]:
        parts.append(counted(counts[ExitStatus.INTERNAL], "internal error"))
    src = f" from {printable(str(run.config))}" if run.config else ""
    lines.append(f"nagleprobe check: {n} capture{plural(n)}: {', '.join(parts)} "
                 f"(budget{src}: {run.budget.describe()}) -> exit {int(run.status)}")
    return "\n".join(lines) + "\n"


def _warning_lines(v: CaptureVerdict) -> list[str]:
    """The capture's damage under its verdict line (the first TEXT_WARNINGS, then a count)."""
    lines = [f"  warning: {w}" for w in v.warnings[:TEXT_WARNINGS]]
    if len(v.warnings) > TEXT_WARNINGS:
        lines.append(f"  ... {counted(len(v.warnings) - TEXT_WARNINGS, 'more warning')} (--format json "
                     f"lists them all; --strict makes damage an error)")
    return lines


def flow_evidence_text(f: FlowVerdict) -> str:
    """A flow's stalls for people: budget reasons, the fix and the stall frames."""
    return _evidence_texts(FlowTable.of([f]), 0, 1, [f.reasons])[0]


def render_junit(run: CheckRun) -> str:
    """JUnit XML: a test suite per capture, a test case for the capture and for each flow."""
    return "".join(junit_pieces(run))


def junit_pieces(run: CheckRun) -> Iterator[str]:
    """`render_junit`'s text in pieces, a test case at a time, written as ElementTree writes
    the same tree indented (`ET.indent`): each attribute and text through `printable`."""
    counts = [_suite_counts(v) for v in run.verdicts]
    total = {k: sum(c[k] for c in counts) for k in ("tests", "failures", "errors")}
    root = _tag("testsuites", name="nagleprobe check", **total)
    yield '<?xml version="1.0" encoding="UTF-8"?>\n'
    if not run.verdicts:
        yield root + " />\n"
        return
    yield root + ">"
    for v, c in zip(run.verdicts, counts):
        yield "\n  " + _tag("testsuite", name=v.path, **c, time=_secs(v.seconds)) + ">"
        yield from _suite_children(run, v)
        yield "\n  </testsuite>"
    yield "\n</testsuites>\n"


def _suite_counts(v: CaptureVerdict) -> dict[str, int]:
    """A suite's tests, failures and errors: the capture's case and one per flow listed."""
    if v.error:
        return {"tests": 1, "failures": 0, "errors": 1}
    return {"tests": 1 + len(v.flows) + len(v.clean_flows),
            "failures": int(bool(v.reasons)) + int((~v.flow_table().passed).sum()),
            "errors": 0}


def _suite_children(run: CheckRun, v: CaptureVerdict) -> Iterator[str]:
    """A suite's elements, each on a line of its own: the count of flows not listed, the
    capture's test case, then a case per flow."""
    ind, inner = "\n    ", "\n      "
    cls = _attr(_classname(v.path))
    if not v.error and v.flows_selected - len(v.flows) > len(v.clean_flows):
        more = v.flows_selected - len(v.flows) - len(v.clean_flows)
        yield ind + _leaf("system-out", f"{more} more selected flows without stalls are "
                                        "not listed")
    case = f'{ind}<testcase name="capture" classname="{cls}" time="{_secs(v.seconds)}">'
    if v.error:
        kind = "UnreadableCapture" if v.status == ExitStatus.BAD_CAPTURE else "InternalError"
        yield case + inner + _leaf("error", v.error, message=v.error, type=kind) + ind + \
            "</testcase>"
        return
    parts, t = [case], v.flow_table()
    if v.reasons:
        if v.status == ExitStatus.EMPTY:
            text = ("no TCP flow was checked: a wrong interface, port or filter when "
                    "recording? (--allow-empty permits this)")
        elif v.status == ExitStatus.UNRESOLVED:
            text = ("the capture's time stamps are too coarse to show a stall: record with "
                    "microsecond time stamps (tcpdump's default)")
        else:
            text = "\n".join(_failure_lines(t, np.flatnonzero(~t.passed)))
        parts.append(inner + _leaf("failure", text, message="; ".join(v.reasons),
                                   type=FAILURE_TYPES.get(v.status, "NagleStallBudget")))
    parts.append(inner + _leaf("system-out", f"{v.stalls} counted stalls, {v.stall_ms:.1f} ms, "
                                             f"in {v.flows_selected} of {v.flows_total} flows; "
                                             f"budget: {run.budget.describe()}"))
    if v.warnings:
        parts.append(inner + _leaf("system-err", "\n".join(f"warning: {w}" for w in v.warnings)))
    yield "".join(parts) + ind + "</testcase>"
    passed = t.passed.tolist()
    codes, lists = t.reason_lists()
    codes = codes.tolist()
    messages = [_attr("; ".join(x)) for x in lists]
    for a in range(0, len(t), CASES_PER_PIECE):
        b = min(a + CASES_PER_PIECE, len(t))
        texts = _texts(_evidence_texts(t, a, b, [lists[c] for c in codes[a:b]]))
        out = []
        for r, name, text in zip(range(a, b), t.names(a, b), texts):
            case = f'{ind}<testcase name="{_attr(name)}" classname="{cls}" time="0">{inner}'
            if passed[r]:
                out.append(f'{case}<system-out>{text}</system-out>{ind}</testcase>')
            else:
                out.append(f'{case}<failure message="{messages[codes[r]]}" type="NagleStall">'
                           f'{text}</failure>{ind}</testcase>')
        yield "".join(out)
    for i, c, s in v.clean_flows:
        yield f'{ind}<testcase name="{_attr(f"flow {i} {c} -> {s}")}" classname="{cls}" time="0" />'


def _failure_lines(t: FlowTable, rows: np.ndarray) -> list[str]:
    """The capture's failure text on these rows: the flow, its stalls and its fix."""
    fix = [t.fix[k][rows].tolist() for k in ("side", "endpoint", "action")]
    return [f"{name}: {n} stall{plural(n)}" if side is None else
            f"{name}: {n} stall{plural(n)}, {ms:.1f} ms; held: {side} {end}; fix: {act}"
            for name, n, ms, side, end, act in zip(t.names(rows=rows), t.stalls[rows].tolist(),
                                                   t.stall_ms[rows].tolist(), *fix)]


def _evidence_texts(t: FlowTable, a: int, b: int, reasons: list[list[str]]) -> list[str]:
    """`flow_evidence_text` of rows a..b-1 of a flow table (`reasons`: each row's), from
    its columns, read as Python values a slice at a time."""
    n, ms, share, dur = (t.stalls[a:b].tolist(), t.stall_ms[a:b].tolist(),
                         t.lost_share_pct[a:b].tolist(), t.duration_s[a:b].tolist())
    side, endpoint, action, fix = (t.fix[k][a:b].tolist()
                                   for k in ("side", "endpoint", "action", "text"))
    lo, hi = int(t.evidence_offsets[a]), int(t.evidence_offsets[b])
    off = (t.evidence_offsets[a:b + 1] - lo).tolist()
    e = [t.evidence[k][lo:hi].tolist() for k in EVIDENCE_COLUMNS]
    stalls = [f"  {s} #{f1} {t1:.6f}  #{f2} {t2:.6f}  #{f3} {t3:.6f}  {d:.1f} ms  {c:.2f}"
              for s, d, f1, f2, f3, t1, t2, t3, c in zip(*e)]
    out = []
    for i, name in enumerate(t.names(a, b)):
        lines = [f"{name}: {n[i]} stall{plural(n[i])}, {ms[i]:.1f} ms lost = "
                 f"{share[i]:.1f}% of {dur[i]:.3f} s"]
        lines += [f"over budget: {x}" for x in reasons[i]]
        if side[i] is not None:
            lines.append(f"held: {side[i]} {endpoint[i]}")
            lines.append(f"fix ({action[i]}): {fix[i]}")
        lines.append(EVIDENCE_HEAD)
        lines += stalls[off[i]:off[i + 1]]
        if n[i] > off[i + 1] - off[i]:
            lines.append(f"  ... {n[i] - (off[i + 1] - off[i])} more (nagleprobe analyze lists all)")
        out.append("\n".join(lines))
    return out


def render_github(run: CheckRun) -> str:
    """GitHub Actions workflow commands: an error per failing flow, unreadable, empty or
    unresolved capture, a warning per flow whose stalls the budget tolerates and per warning
    of a capture. GitHub shows ANNOTATIONS of each kind: the rest are counted, not written."""
    found: dict[str, list[str]] = {"error": [], "warning": []}
    count = {"error": 0, "warning": 0}

    def add(kind: str, lines: Iterable[str], n: int) -> None:
        found[kind] += islice(lines, max(0, ANNOTATIONS - len(found[kind])))
        count[kind] += n

    for v in run.verdicts:
        if v.error:
            title = ("nagleprobe: unreadable capture" if v.status == ExitStatus.BAD_CAPTURE
                     else "nagleprobe: internal error")
            add("error", [_workflow_command("error", v.path, title, printable(v.error))], 1)
            continue
        add("warning", (_workflow_command("warning", v.path, "nagleprobe: damaged capture", w)
                        for w in v.warnings), len(v.warnings))
        if v.status == ExitStatus.EMPTY:
            add("error", [_workflow_command(
                "error", v.path, "nagleprobe: nothing checked",
                f"{'; '.join(v.reasons)}: a wrong interface, port or filter when recording? "
                f"(--allow-empty permits this)")], 1)
        if v.status == ExitStatus.UNRESOLVED:
            add("error", [_workflow_command(
                "error", v.path, "nagleprobe: time stamps too coarse",
                f"{'; '.join(v.reasons)}: no stall found proves nothing")], 1)
        t = v.flow_table()
        worst = t.worst_order()
        for kind, rows in (("error", worst[~t.passed[worst]]), ("warning", worst[t.passed[worst]])):
            add(kind, (_flow_annotation(v.path, t.verdict(r)) for r in rows.tolist()), len(rows))
    lines = []
    for kind, found_lines in found.items():
        if count[kind] > ANNOTATIONS:  # the rest would be dropped: say how many
            more = count[kind] - ANNOTATIONS + 1
            found_lines = found_lines[:ANNOTATIONS - 1] + [_workflow_command(
                kind, run.verdicts[0].path, f"nagleprobe: {more} more",
                f"{more} more {kind}s (GitHub shows {ANNOTATIONS} per step); the job log and "
                f"--junit list them all")]
        lines += found_lines
    return "".join(line + "\n" for line in lines)


def _flow_annotation(path: str, f: FlowVerdict) -> str:
    """The workflow command on one flow with stalls: an error when it fails the budget."""
    msg = (f"{f.stalls} Nagle/delayed-ACK stall{plural(f.stalls)}, {f.stall_ms:.1f} ms "
           f"lost ({f.lost_share_pct:.1f}% of the flow)")
    if f.reasons:
        msg += f"; over budget: {'; '.join(f.reasons)}"
    if f.fix:
        msg += f"\nFix: {f.fix['text']}"
    kind = "warning" if f.passed else "error"
    title = f"Nagle stall{'s' if f.stalls != 1 else ''} in {f.name}"
    return _workflow_command(kind, path, title, msg)


def _workflow_command(kind: str, path: str, title: str, message: str) -> str:
    """`::error file=F,title=T::message` with GitHub's escaping of data and properties."""
    def data(s: str) -> str:
        return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(s: str) -> str:
        return data(s).replace(":", "%3A").replace(",", "%2C")

    return f"::{kind} file={prop(printable(path))},title={prop(title)}::{data(message)}"


# ------------------------------------------------------------------------------- helpers
def _attr(value: str) -> str:
    """An attribute's value as ElementTree writes it, after `printable`."""
    text = printable(value)
    for ch, ref in _ATTR_REFS:
        if ch in text:
            text = text.replace(ch, ref)
    return text


def _text(value: str) -> str:
    """An element's text as ElementTree writes it, after `printable_lines`."""
    plain = value.isascii() and value.replace("\n", "").isprintable()
    text = value if plain else printable_lines(value)
    for ch, ref in _ATTR_REFS[:3]:
        if ch in text:
            text = text.replace(ch, ref)
    return text


def _texts(values: list[str]) -> list[str]:
    """`_text` of each value, looked at all at once where none needs a change."""
    every = "\n".join(values)
    if every.isascii() and every.replace("\n", "").isprintable() and not any(
            ch in every for ch, _ in _ATTR_REFS[:3]):
        return values
    return list(map(_text, values))


def _tag(element: str, **attrs: Any) -> str:
    """The opening of an element, its attributes in the order given (not closed)."""
    return f"<{element}" + "".join(f' {k}="{_attr(str(v))}"' for k, v in attrs.items())


def _leaf(element: str, text: str, **attrs: Any) -> str:
    """An element without children (" />" when its text is empty, as ElementTree has it)."""
    return _tag(element, **attrs) + (f">{_text(text)}</{element}>" if text else " />")


def _classname(path: str) -> str:
    stem = path.replace("\\", "/").rsplit("/", 1)[-1]
    return "nagleprobe.check." + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in stem)


def _secs(s: float) -> str:
    return f"{s:.3f}"
