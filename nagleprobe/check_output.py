"""How the gate's verdicts are written: text for people, JUnit XML for CI servers, GitHub
Actions annotations (the JSON document is `CheckRun.to_dict`)."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from .check import VERDICT_WORDS, CaptureVerdict, CheckRun, FlowVerdict
from .errors import ExitStatus, printable, printable_lines
from .humanize import counted, flow_list, human_count, human_ms, plural

TEXT_FLOWS = 10  # flows with stalls shown per capture in the text verdict, worst first
ANNOTATIONS = 10  # GitHub shows at most 10 error and 10 warning annotations per step
TEXT_WARNINGS = 5  # capture warnings shown per capture in the text verdict
# the JUnit failure type of a capture that did not pass for want of evidence, not for stalls
FAILURE_TYPES = {ExitStatus.EMPTY: "EmptyCapture", ExitStatus.UNRESOLVED: "UnresolvedTimes"}


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
        worst = sorted(v.flows, key=lambda f: (f.passed, -f.stall_ms, f.id))
        for f in worst[:TEXT_FLOWS]:
            state = f"over budget: {'; '.join(f.reasons)}" if not f.passed else "within budget"
            lines.append(f"  {f.name}: {counted(f.stalls, 'stall')}, "
                         f"{human_ms(f.stall_ms)} = "
                         f"{f.lost_share_pct:.1f}% of {f.duration_s:.3f} s ({state})")
        if len(worst) > TEXT_FLOWS:
            rest = worst[TEXT_FLOWS:]
            over = sum(not f.passed for f in rest)
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
    lines = [f"{f.name}: {f.stalls} stall{plural(f.stalls)}, {f.stall_ms:.1f} ms lost = "
             f"{f.lost_share_pct:.1f}% of {f.duration_s:.3f} s"]
    lines += [f"over budget: {r}" for r in f.reasons]
    if f.fix:
        lines.append(f"held: {f.fix['side']} {f.fix['endpoint']}")
        lines.append(f"fix ({f.fix['action']}): {f.fix['text']}")
    lines.append("evidence (Wireshark frame numbers; s since the first packet): "
                 "sender, small segment S1, late pure ACK, released S2, stall ms, confidence")
    for s in f.evidence:
        fr, t = s["frames"], s["times"]
        lines.append(f"  {s['sender']} #{fr['small']} {t['small']:.6f}  #{fr['ack']} "
                     f"{t['ack']:.6f}  #{fr['released']} {t['released']:.6f}  "
                     f"{s['delay_ms']:.1f} ms  {s['confidence']:.2f}")
    if f.stalls > len(f.evidence):
        lines.append(f"  ... {f.stalls - len(f.evidence)} more (nagleprobe analyze lists all)")
    return "\n".join(lines)


def render_junit(run: CheckRun) -> str:
    """JUnit XML: a test suite per capture, a test case for the capture and for each flow."""
    root = ET.Element("testsuites", name="nagleprobe check")
    total = {"tests": 0, "failures": 0, "errors": 0}
    for v in run.verdicts:
        suite = ET.SubElement(root, "testsuite", name=v.path)
        cases = []
        capture_case = ET.Element("testcase", name="capture", classname=_classname(v.path),
                                  time=_secs(v.seconds))
        cases.append(capture_case)
        if v.error:
            kind = "UnreadableCapture" if v.status == ExitStatus.BAD_CAPTURE else "InternalError"
            ET.SubElement(capture_case, "error", message=v.error, type=kind).text = v.error
        else:
            if v.reasons:
                empty = v.status == ExitStatus.EMPTY
                failure = ET.SubElement(capture_case, "failure", message="; ".join(v.reasons),
                                        type=FAILURE_TYPES.get(v.status, "NagleStallBudget"))
                failure.text = "\n".join(
                    f"{f.name}: {f.stalls} stall{plural(f.stalls)}, {f.stall_ms:.1f} ms; held: "
                    f"{f.fix['side']} {f.fix['endpoint']}; fix: {f.fix['action']}"
                    if f.fix else f"{f.name}: {f.stalls} stall{plural(f.stalls)}"
                    for f in v.failing_flows)
                if empty:
                    failure.text = ("no TCP flow was checked: a wrong interface, port or filter "
                                    "when recording? (--allow-empty permits this)")
                elif v.status == ExitStatus.UNRESOLVED:
                    failure.text = ("the capture's time stamps are too coarse to show a stall: "
                                    "record with microsecond time stamps (tcpdump's default)")
            out = ET.SubElement(capture_case, "system-out")
            out.text = (f"{v.stalls} counted stalls, {v.stall_ms:.1f} ms, in "
                        f"{v.flows_selected} of {v.flows_total} flows; budget: "
                        f"{run.budget.describe()}")
            if v.warnings:
                ET.SubElement(capture_case, "system-err").text = "\n".join(
                    f"warning: {w}" for w in v.warnings)
            for f in v.flows:
                case = ET.Element("testcase", name=f.name, classname=_classname(v.path),
                                  time="0")
                if not f.passed:
                    fail = ET.SubElement(case, "failure", message="; ".join(f.reasons),
                                         type="NagleStall")
                    fail.text = flow_evidence_text(f)
                else:
                    ET.SubElement(case, "system-out").text = flow_evidence_text(f)
                cases.append(case)
            for i, c, s in v.clean_flows:
                cases.append(ET.Element("testcase", name=f"flow {i} {c} -> {s}",
                                        classname=_classname(v.path), time="0"))
            if v.flows_selected - len(v.flows) > len(v.clean_flows):
                more = v.flows_selected - len(v.flows) - len(v.clean_flows)
                ET.SubElement(suite, "system-out").text = (
                    f"{more} more selected flows without stalls are not listed")
        counts = {"tests": len(cases),
                  "failures": sum(1 for c in cases if c.find("failure") is not None),
                  "errors": sum(1 for c in cases if c.find("error") is not None)}
        for k, n in counts.items():
            suite.set(k, str(n))
            total[k] += n
        suite.set("time", _secs(v.seconds))
        suite.extend(cases)
    for k, n in total.items():
        root.set(k, str(n))
    _printable_tree(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") \
        + "\n"


def render_github(run: CheckRun) -> str:
    """GitHub Actions workflow commands: an error per failing flow, unreadable, empty or
    unresolved capture, a warning per flow whose stalls the budget tolerates and per warning
    of a capture."""
    found: dict[str, list[str]] = {"error": [], "warning": []}
    for v in run.verdicts:
        if v.error:
            title = ("nagleprobe: unreadable capture" if v.status == ExitStatus.BAD_CAPTURE
                     else "nagleprobe: internal error")
            found["error"].append(_workflow_command("error", v.path, title,
                                                    printable(v.error)))
            continue
        for w in v.warnings:
            found["warning"].append(_workflow_command("warning", v.path,
                                                      "nagleprobe: damaged capture", w))
        if v.status == ExitStatus.EMPTY:
            found["error"].append(_workflow_command(
                "error", v.path, "nagleprobe: nothing checked",
                f"{'; '.join(v.reasons)}: a wrong interface, port or filter when recording? "
                f"(--allow-empty permits this)"))
        if v.status == ExitStatus.UNRESOLVED:
            found["error"].append(_workflow_command(
                "error", v.path, "nagleprobe: time stamps too coarse",
                f"{'; '.join(v.reasons)}: no stall found proves nothing"))
        for f in sorted(v.flows, key=lambda f: (f.passed, -f.stall_ms, f.id)):
            msg = (f"{f.stalls} Nagle/delayed-ACK stall{plural(f.stalls)}, {f.stall_ms:.1f} ms "
                   f"lost ({f.lost_share_pct:.1f}% of the flow)")
            if f.reasons:
                msg += f"; over budget: {'; '.join(f.reasons)}"
            if f.fix:
                msg += f"\nFix: {f.fix['text']}"
            kind = "warning" if f.passed else "error"
            title = f"Nagle stall{'s' if f.stalls != 1 else ''} in {f.name}"
            found[kind].append(_workflow_command(kind, v.path, title, msg))
    lines = []
    for kind, found_lines in found.items():
        if len(found_lines) > ANNOTATIONS:  # the rest would be dropped: say how many
            more = len(found_lines) - ANNOTATIONS + 1
            found_lines = found_lines[:ANNOTATIONS - 1] + [_workflow_command(
                kind, run.verdicts[0].path, f"nagleprobe: {more} more",
                f"{more} more {kind}s (GitHub shows {ANNOTATIONS} per step); the job log and "
                f"--junit list them all")]
        lines += found_lines
    return "".join(line + "\n" for line in lines)


def _workflow_command(kind: str, path: str, title: str, message: str) -> str:
    """`::error file=F,title=T::message` with GitHub's escaping of data and properties."""
    def data(s: str) -> str:
        return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(s: str) -> str:
        return data(s).replace(":", "%3A").replace(",", "%2C")

    return f"::{kind} file={prop(printable(path))},title={prop(title)}::{data(message)}"


# ------------------------------------------------------------------------------- helpers
def _printable_tree(root: ET.Element) -> None:
    """Every attribute and text under `root` through `printable` (texts keep their line
    feeds): file names and whatever a capture holds end up as escapes, never as characters
    XML 1.0 forbids."""
    for el in root.iter():
        el.attrib = {k: printable(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = printable_lines(el.text)


def _classname(path: str) -> str:
    stem = path.replace("\\", "/").rsplit("/", 1)[-1]
    return "nagleprobe.check." + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in stem)


def _secs(s: float) -> str:
    return f"{s:.3f}"
