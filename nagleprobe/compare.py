"""Did the fix work: two reports of the same service compared, connection group by group.

Ports change from one run to the next (the client's is ephemeral), so connections are
matched by their server endpoint and their client's host: a *group* is every flow from one
client host to one server endpoint. Each report is read as its JSON document (`Report.to_dict`
or a file saved with `analyze --format json`), so a capture analysed now and a report saved
earlier compare alike. Per group and side: how many flows, packets and stalls, the time
lost, the longest and median stall, the requests' latency (p50, p99), the endpoints' Nagle
state and delayed-ACK timers; and whether the second report is worse than the first
(`regressions`, the check gate's `--baseline`).

A group's latency is read from its flows' (a report keeps no single request): its p99 is
the highest of its flows' p99, its p50 their p50s' median weighted by their requests; for a
group of one flow (most: one connection per client) both are that flow's own.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field

from .errors import CaptureError
from .humanize import human_count, human_ms
from .text_report import TEXT_WIDTH, broken_path, fit_lines

SIDES = ("client", "server")
TOLERANCE = 0.1  # more time lost than this share over the baseline's is a regression ...
SLACK_MS = 1.0  # ... and more than this many ms: a few stalls' jitter is not
# (the same two bounds hold for a group's p99 latency)
LATENCY = ("requests", "latency_p50_ms", "latency_p99_ms")  # a flow's, as its group reads


@dataclass
class Group:
    """The flows of one (client host, server endpoint) in one report, summed up."""

    flows: int = 0
    packets: int = 0
    stalls: int = 0
    stall_ms: float = 0.0
    delays_ms: list[float] = field(default_factory=list)  # of each stall
    nagle: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in SIDES})
    timers_ms: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})
    endpoints: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in SIDES})
    latency: list[tuple[int, float, float]] = field(default_factory=list)  # per flow with
    # requests: (requests, p50, p99)

    def percentiles(self) -> tuple[int, float | None, float | None]:
        """Requests, and their latency's p50 and p99 as the group has them (the module's
        docstring; None without requests)."""
        n = sum(r for r, _, _ in self.latency)
        if not n:
            return 0, None, None
        half, seen = n / 2, 0
        for r, p50, _ in sorted(self.latency, key=lambda x: x[1]):
            seen += r
            if seen >= half:
                break
        return n, p50, max(p99 for _, _, p99 in self.latency)

    def facts(self) -> dict:
        """The group as JSON: counts, the stall delays' median and maximum, and per side
        its endpoints, Nagle state and median delayed-ACK timer."""
        d = self.delays_ms
        requests, p50, p99 = self.percentiles()
        return {"flows": self.flows, "packets": self.packets, "stalls": self.stalls,
                "stall_ms": round(self.stall_ms, 3),
                "median_stall_ms": round(statistics.median(d), 3) if d else None,
                "max_stall_ms": round(max(d), 3) if d else None,
                "requests": requests, "latency_p50_ms": p50, "latency_p99_ms": p99,
                "sides": {s: {"endpoints": sorted(self.endpoints[s]),
                              "nagle": nagle_state(self.nagle[s]),
                              "delayed_ack_ms": (round(statistics.median(self.timers_ms[s]), 1)
                                                 if self.timers_ms[s] else None)}
                          for s in SIDES}}


def nagle_state(seen: set[str]) -> str:
    """One side's Nagle state over its flows: on or off where the flows agree (flows that
    cannot tell, "unknown", do not count), "mixed" where they differ."""
    known = seen - {"unknown"}
    return "unknown" if not known else known.pop() if len(known) == 1 else "mixed"


def host_of(endpoint: str) -> str:
    """The address of "addr:port" or "[v6]:port"."""
    host = endpoint.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host


def groups(doc: dict) -> dict[tuple[str, str], Group]:
    """The flows of a report's JSON document grouped by (client host, server endpoint)."""
    flows = doc["flows"]
    ends = [(f["id"], side, e["endpoint"], e["nagle"], e["delayed_ack_ms"])
            for f in flows for side, e in f["endpoints"].items()]
    return _grouped(flows, ends, [(s["flow"], s["delay_ms"]) for s in doc.get("stalls", [])])


def report_groups(report) -> dict[tuple[str, str], Group]:
    """`groups` of a `Report`, from its tables (no JSON document made)."""
    fl, ep, st = (report.columns(t) for t in ("flows", "endpoints", "stalls"))
    names = ("id", "client", "server", "packets", "stalls", "stall_ms", *LATENCY)
    flows = [dict(zip(names, row)) for row in zip(*(fl[k].tolist() for k in names))]
    ends = zip(*(ep[k].tolist() for k in ("flow", "side", "endpoint", "nagle", "delayed_ack_ms")))
    return _grouped(flows, [(f, s, e, n, None if math.isnan(d) else d) for f, s, e, n, d in ends],
                    zip(st["flow"].tolist(), st["delay_ms"].tolist()))


def _grouped(flows, ends, stalls) -> dict[tuple[str, str], Group]:
    """Flows (dicts: id, client, server, packets, stalls, stall_ms and LATENCY), their
    endpoints ((flow, side, endpoint, nagle, delayed_ack_ms)) and stalls ((flow, delay_ms))
    by group."""
    out: dict[tuple[str, str], Group] = {}
    by_id = {}
    for f in flows:
        g = out.setdefault((host_of(f["client"]), f["server"]), Group())
        by_id[f["id"]] = g
        g.flows += 1
        g.packets += f["packets"]
        g.stalls += f["stalls"]
        g.stall_ms += f["stall_ms"]
        if f.get("requests"):  # (a report saved before requests were counted has none)
            g.latency.append(tuple(f[k] for k in LATENCY))
    for flow, side, endpoint, nagle, timer in ends:
        g = by_id[flow]
        g.endpoints[side].add(host_of(endpoint) if side == "client" else endpoint)
        g.nagle[side].add(nagle)
        if timer is not None:
            g.timers_ms[side].append(timer)
    for flow, delay in stalls:
        if flow in by_id:
            by_id[flow].delays_ms.append(delay)
    return out


def compare(before: dict, after: dict) -> dict:
    """The two documents' groups side by side (JSON: schema/compare.schema.json): matched groups
    first, by time lost before, then those seen in one report only."""
    return {"before": _source(before), "after": _source(after),
            "groups": side_by_side(groups(before), groups(after)),
            "totals": {"before": _totals(before), "after": _totals(after)}}


def side_by_side(a: dict[tuple[str, str], Group], b: dict[tuple[str, str], Group]
                 ) -> list[dict]:
    """Each group of either with its facts in `a` and in `b` (None where it has none)."""
    keys = sorted(a.keys() | b.keys(), key=lambda k: (k not in a or k not in b,
                                                      -(a[k].stall_ms if k in a else 0), k))
    return [{"client_host": k[0], "server": k[1], "before": a[k].facts() if k in a else None,
             "after": b[k].facts() if k in b else None} for k in keys]


def _source(doc: dict) -> dict:
    return {"path": doc["capture"]["path"], "warnings": len(doc["capture"]["warnings"]),
            "selection": doc.get("selection")}


REPORT_KEYS = ("schema_version", "capture", "summary", "flows", "stalls")


@dataclass(frozen=True)
class Baseline:
    """A saved report the gate holds each capture against (`check --baseline`): its path
    and groups (small: one per client host and server endpoint)."""

    path: str
    groups: dict[tuple[str, str], Group]

    @classmethod
    def load(cls, path: str) -> Baseline:
        """The baseline of a report saved with `analyze --format json`; CaptureError for a
        file that is not one."""
        if not os.fspath(path).endswith(".json"):
            raise CaptureError(path, "a baseline is a report saved with nagleprobe analyze "
                                     "--format json -o FILE.json")
        return cls(path, groups(load_report(path)))

    def regressions(self, report) -> list[str]:
        """Why `report` is worse than the baseline (`regressions`)."""
        return regressions(side_by_side(self.groups, report_groups(report)))


def load_report(path: str, **analyze_options) -> dict:
    """The JSON document of `path`: a report saved with `analyze --format json` (a .json
    file), else the capture analysed now (`analyze_options`: `nagleprobe.analyze`'s).
    Raises CaptureError for a JSON file that is not a nagleprobe report."""
    if not os.fspath(path).endswith(".json"):
        from .pipeline import analyze

        return analyze(path, **analyze_options).to_dict()
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise CaptureError(path, e.strerror or str(e)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaptureError(path, f"not a JSON report ({e})") from None
    if not isinstance(doc, dict) or any(k not in doc for k in REPORT_KEYS):
        raise CaptureError(path, "not a nagleprobe JSON report (save one with "
                                 "nagleprobe analyze --format json -o FILE)")
    return doc


def _totals(doc: dict) -> dict:
    s = doc["summary"]
    return {"flows": s["flows"], "stalls": s["stalls"], "stall_ms": s["stall_ms"]}


def regressions(comparison: dict | list[dict], tolerance: float = TOLERANCE,
                slack_ms: float = SLACK_MS) -> list[str]:
    """Why the second report is worse than the first (a comparison, or its `side_by_side`
    groups), one sentence each (empty: it is not): a group with more stalls, or with more
    time lost than the first's by more than `tolerance` (a share) and `slack_ms`; a new group
    with stalls; a group whose requests' p99 latency grew by more than the same two."""
    out = []
    for g in comparison["groups"] if isinstance(comparison, dict) else comparison:
        why = _worse(g["before"], g["after"], tolerance, slack_ms)
        if why:
            out.append(f"{g['client_host']} -> {g['server']}: {why}")
    return out


def _worse(was: dict | None, now: dict | None, tolerance: float, slack_ms: float
           ) -> str | None:
    """Why a group's facts `now` are worse than `was` (the first reason of `regressions`'),
    or None."""
    if now is None:
        return None
    if was is None:
        return (f"{human_count(now['stalls'])} stalls ({human_ms(now['stall_ms'])} lost), a "
                "connection group the baseline does not have" if now["stalls"] else None)
    beyond = lambda a, b: b > a * (1 + tolerance) + slack_ms  # noqa: E731
    if now["stalls"] > was["stalls"]:
        return f"{human_count(was['stalls'])} -> {human_count(now['stalls'])} stalls"
    if now["stalls"] and beyond(was["stall_ms"], now["stall_ms"]):
        return f"time lost {human_ms(was['stall_ms'])} -> {human_ms(now['stall_ms'])}"
    p99 = was.get("latency_p99_ms"), now.get("latency_p99_ms")
    if None not in p99 and beyond(*p99):
        return f"p99 latency {_lat(p99[0])} -> {_lat(p99[1])}"
    return None


def render_text(comparison: dict) -> str:
    """The comparison for people: per group what changed (stalls, time lost, the longest
    stall, each side's Nagle state and delayed-ACK timer), in 80 columns or less."""
    t = comparison["totals"]
    lines = [line for which, src in (("before", comparison["before"]),
                                     ("after ", comparison["after"]))
             for line in _path_lines(which, src["path"] + (" (a selection of its flows)"
                                                           if src["selection"] else ""))]
    lines.append(f"stalls {_arrow(t['before']['stalls'], t['after']['stalls'], human_count)}; "
                 f"time lost {_arrow(t['before']['stall_ms'], t['after']['stall_ms'], human_ms)}")
    for g in comparison["groups"]:
        was, now = g["before"], g["after"]
        lines.append("")
        lines.append(f"{g['client_host']} -> {g['server']}: "
                     + ("only before" if now is None else "only after" if was is None else
                        f"flows {_arrow(was['flows'], now['flows'], human_count)}"))
        if was is None or now is None:
            one = was or now
            lines.append(f"  {human_count(one['stalls'])} stalls, "
                         f"{human_ms(one['stall_ms'])} lost")
            continue
        lines.append(f"  stalls {_arrow(was['stalls'], now['stalls'], human_count)}; time lost "
                     f"{_arrow(was['stall_ms'], now['stall_ms'], human_ms)}")
        if was["max_stall_ms"] is not None or now["max_stall_ms"] is not None:
            lines.append(f"  longest stall {_arrow(was['max_stall_ms'], now['max_stall_ms'], _ms)}")
        if was.get("requests") or now.get("requests"):
            lines.append(f"  requests {_arrow(was.get('requests'), now.get('requests'), _n)}; "
                         f"p50 {_arrow(was.get('latency_p50_ms'), now.get('latency_p50_ms'), _lat)}"
                         f"; p99 {_arrow(was.get('latency_p99_ms'), now.get('latency_p99_ms'), _lat)}")
        for side in SIDES:
            w, n = was["sides"][side], now["sides"][side]
            name = g["client_host"] if side == "client" else g["server"]
            said = [f"Nagle {_arrow(w['nagle'], n['nagle'], str)}"]
            if w["delayed_ack_ms"] is not None or n["delayed_ack_ms"] is not None:
                said.append(f"delayed ACK {_arrow(w['delayed_ack_ms'], n['delayed_ack_ms'], _ms)}")
            lines.append(f"  {side} {name}: " + "; ".join(said))
    return "\n".join(fit_lines(lines, TEXT_WIDTH)) + "\n"


def _path_lines(label: str, path: str, width: int = TEXT_WIDTH) -> list[str]:
    """ "label: path", or where that is too wide, the label and then the path broken after
    its slashes, indented (a name longer than the line cut)."""
    if len(label) + 2 + len(path) <= width:
        return [f"{label}: {path}"]
    return [f"{label}:", *broken_path(path, width, "  ")]


def _ms(v: float | None) -> str:
    return "none" if v is None else human_ms(v)


def _lat(v: float | None) -> str:
    """A request latency: hundredths of a ms below 1 ms (a loopback's), else `human_ms`."""
    return "none" if v is None else f"{v:.2f} ms" if v < 1 else human_ms(v)


def _n(v: int | None) -> str:
    return human_count(v or 0)


def _arrow(was, now, fmt) -> str:
    """ "a -> b", or "a (same)" when nothing changed."""
    return f"{fmt(was)} (same)" if was == now else f"{fmt(was)} -> {fmt(now)}"
