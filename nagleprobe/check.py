"""The CI gate: analyse captures, hold them against a stall budget, and say pass or fail.

The budget (`nagleprobe.budget`) comes from `[tool.nagleprobe.check]` in the nearest
pyproject.toml, overridden by command-line options; with no limit set at all it allows no
stall. Many captures are checked
in parallel, one process per core, and each gets its own verdict, so one unreadable file
never hides the verdict on the others. The results render as the JSON document of `analyze`
plus a "check" object (`CheckRun.to_dict`); text, JUnit XML and GitHub workflow-command
annotations are written by `nagleprobe.check_output`.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import advice
from .budget import Budget, budget_from_mapping, find_pyproject, load_budget  # noqa: F401 (API)
from .columns import take
from .compare import Baseline
from .errors import BudgetError, CaptureError, ExitStatus, printable, utf8_safe  # noqa: F401 (API)
from .fileset import CAPTURE_SUFFIXES, Target, expand_targets, set_name  # noqa: F401 (API)
from .humanize import plural, short_number
from .json_report import stall_docs
from .read import URL_TIMEOUT_S, url_scheme
from .read.clock import UNRESOLVED_NS, duration
from .selection import confident, flow_mask

EVIDENCE_ROWS = 20  # stalls kept per failing flow for the text, JUnit and annotations
CLEAN_FLOW_CASES = 1000  # flows without counted stalls listed one by one (JUnit), per capture
VERDICT_WORDS = {ExitStatus.OK: "PASS", ExitStatus.STALLS_FOUND: "FAIL",
                 ExitStatus.EMPTY: "EMPTY", ExitStatus.UNRESOLVED: "UNRESOLVED",
                 ExitStatus.BAD_CAPTURE: "ERROR", ExitStatus.INTERNAL: "ERROR"}
STATUS_NAMES = {ExitStatus.OK: "pass", ExitStatus.STALLS_FOUND: "fail",
                ExitStatus.EMPTY: "empty", ExitStatus.UNRESOLVED: "unresolved",
                ExitStatus.BAD_CAPTURE: "unreadable", ExitStatus.INTERNAL: "internal-error"}
# the exit status of several captures is the most severe verdict, least severe first: a gate
# that checked nothing (empty), could not have seen a stall (unresolved) or could not read a
# file must not look like a budget failure
SEVERITY = (ExitStatus.OK, ExitStatus.STALLS_FOUND, ExitStatus.EMPTY, ExitStatus.UNRESOLVED,
            ExitStatus.BAD_CAPTURE, ExitStatus.INTERNAL)


# ------------------------------------------------------------------------------- verdicts
@dataclass
class FlowVerdict:
    """One selected flow of a capture held against the budget."""

    id: int
    client: str
    server: str
    stalls: int  # counted (confidence >= min_confidence)
    stall_ms: float
    lost_share_pct: float
    duration_s: float
    passed: bool = True
    reasons: list[str] = field(default_factory=list)
    fix: dict[str, Any] | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)  # first EVIDENCE_ROWS stalls

    @property
    def name(self) -> str:
        return f"flow {self.id} {self.client} -> {self.server}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "client": self.client, "server": self.server,
                "status": "pass" if self.passed else "fail", "stalls": self.stalls,
                "stall_ms": self.stall_ms, "lost_share_pct": self.lost_share_pct,
                "reasons": list(self.reasons)}


@dataclass
class CaptureVerdict:
    """One capture held against the budget, or the reason it could not be."""

    path: str
    status: ExitStatus
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    flows: list[FlowVerdict] = field(default_factory=list)  # selected flows with stalls
    clean_flows: list[tuple[int, str, str]] = field(default_factory=list)  # up to the cap
    flows_total: int = 0
    flows_selected: int = 0
    stalls: int = 0
    stall_ms: float = 0.0
    ignored_stalls: int = 0  # below min_confidence, in selected flows
    seconds: float = 0.0
    document: dict[str, Any] | None = None  # the analyze JSON document, when asked for
    warnings: list[str] = field(default_factory=list)  # the capture's warnings' texts
    fixes: list[dict[str, Any]] = field(default_factory=list)  # of the failing flows, one
    # per endpoint to change (advice.fix_groups of the counted stalls)
    packets: int = 0  # packets read (for the progress display's rate)
    # the report's flows, stalls and endpoints as numpy columns (`Report.columns`), when
    # asked for (`analyze_many`, which makes one table of each from every capture's columns)
    tables: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status == ExitStatus.OK

    @property
    def failing_flows(self) -> list[FlowVerdict]:
        return [f for f in self.flows if not f.passed]

    def to_dict(self) -> dict[str, Any]:
        """The "check" object added to the capture's analyze document."""
        return {"status": STATUS_NAMES[self.status], "exit_status": int(self.status),
                "reasons": list(self.reasons),
                "error": utf8_safe(self.error) if self.error is not None else None,
                "flows_selected": self.flows_selected, "stalls": self.stalls,
                "stall_ms": self.stall_ms, "ignored_stalls": self.ignored_stalls,
                "flows": [f.to_dict() for f in self.flows], "warnings": list(self.warnings)}


def evaluate(report: Any, budget: Budget, path: str | None = None,
             baseline: Baseline | None = None) -> CaptureVerdict:
    """Hold a `Report` against a budget: which selected flows fail, and why; with a
    `baseline` (the budget's), also whether it is worse than that report."""
    fl, st = report.flows, report.stalls
    # the selection of `analyze --port/--host/--min-confidence` and `Report.select`
    chosen = fl["id"].to_numpy()[flow_mask(fl, budget.ports, budget.hosts)].tolist()
    in_sel = st[st["flow"].isin(chosen)]
    counted = in_sel[confident(in_sel, budget.min_confidence)]
    by_flow = {int(i): rows for i, rows in counted.groupby("flow")}
    evidence = _evidence(counted, EVIDENCE_ROWS)
    v = CaptureVerdict(path=path or report.capture["path"], status=ExitStatus.OK,
                       flows_total=len(fl), flows_selected=len(chosen),
                       ignored_stalls=len(in_sel) - len(counted), stalls=len(counted))

    docs = {d["id"]: d for d in report.flow_docs(sorted(by_flow))} if by_flow else {}
    share_failures = 0
    for i in chosen:
        if i not in by_flow:
            if len(v.clean_flows) < CLEAN_FLOW_CASES:
                v.clean_flows.append((i, str(fl["client"].iat[i]), str(fl["server"].iat[i])))
            continue
        d, rows = docs[i], by_flow[i]
        ms = round(float(rows["delay_ms"].sum()), 3)
        share = round(100 * ms / 1e3 / d["duration_s"], 2) if d["duration_s"] > 0 else 0.0
        fv = FlowVerdict(id=i, client=d["client"], server=d["server"], stalls=len(rows),
                         stall_ms=ms, lost_share_pct=share, duration_s=d["duration_s"],
                         fix=d["fix"], evidence=evidence[i])
        if budget.max_lost_share is not None and share > budget.max_lost_share:
            fv.passed = False
            fv.reasons.append(f"{short_number(share)}% of the flow lost to stalls, budget "
                              f"{short_number(budget.max_lost_share)}%")
            share_failures += 1
        v.flows.append(fv)
    v.stall_ms = round(sum(f.stall_ms for f in v.flows), 3)

    limit = budget.stall_limit
    if limit is not None and v.stalls > limit:
        v.reasons.append(f"{v.stalls} stall{plural(v.stalls)}, budget {limit}")
    if budget.max_stall_ms is not None and v.stall_ms > budget.max_stall_ms:
        v.reasons.append(f"{short_number(v.stall_ms)} ms lost to stalls, budget "
                         f"{short_number(budget.max_stall_ms)} ms")
    worse = baseline.regressions(report) if baseline is not None else []
    v.reasons += [f"worse than the baseline {baseline.path}: {w}" for w in worse]
    if v.reasons:  # over a capture-wide limit: every flow with counted stalls adds to it
        for f in v.flows:
            f.passed = False
            f.reasons[:0] = [f"capture: {r}" for r in v.reasons]
    if share_failures:
        v.reasons.append(f"{share_failures} flow{plural(share_failures)} over the "
                         f"{short_number(budget.max_lost_share)}% lost-share budget")
    if worse:
        v.status = ExitStatus.STALLS_FOUND
    if v.failing_flows:
        v.status = ExitStatus.STALLS_FOUND
        counted_rows = take(report.columns("stalls"), confident(st, budget.min_confidence))
        v.fixes = advice.fix_groups(report.columns("flows"), counted_rows,
                                    report.columns("endpoints"),
                                    [f.id for f in v.failing_flows])
    if not chosen and not budget.allow_empty:
        v.status = ExitStatus.EMPTY
        v.reasons.append("no TCP flow in the capture" if not len(fl) else
                         f"none of its {len(fl)} TCP flow{plural(len(fl))} selected by "
                         f"{_selection(budget)}")
    step = report.capture.get("time_step_ns")
    if v.status == ExitStatus.OK and step is not None and step >= UNRESOLVED_NS:
        # no stall found proves nothing: the capture could not have shown one
        v.status = ExitStatus.UNRESOLVED
        v.reasons.append(f"time stamps in steps of {duration(step)}: a 40 ms delayed-ACK "
                         "stall cannot be resolved")
    v.warnings = [str(w) for w in report.capture.get("warnings", [])]
    return v


def _selection(budget: Budget) -> str:
    parts = []
    if budget.ports:
        parts.append("port " + "/".join(map(str, budget.ports)))
    if budget.hosts:
        parts.append("host " + "/".join(budget.hosts))
    return " and ".join(parts)


def _evidence(stalls: Any, limit: int) -> dict[int, list[dict[str, Any]]]:
    """Per flow, its first `limit` stalls in the JSON shape of `analyze`'s stalls (sender,
    delay, frames, times, confidence), all flows in one pass (no pandas row access per
    flow)."""
    from .dataframes import columns_of

    rows = columns_of(stalls.groupby("flow", sort=False).head(limit))
    out: dict[int, list[dict[str, Any]]] = {}
    for flow, doc in zip(rows["flow"].tolist(), stall_docs(rows, ("sender", "delay_ms"))):
        out.setdefault(flow, []).append(doc)
    return out


def check_capture(path: str | list[str], budget: Budget, with_document: bool = False,
                  strict: bool = False, with_tables: bool = False,
                  url_timeout: float = URL_TIMEOUT_S,
                  baseline: Baseline | None = None) -> CaptureVerdict:
    """Analyse one capture (or a list of files: a set judged as one capture) and evaluate
    it; never raises for a bad file (see `status`). `strict`: a damaged capture (a warning
    while reading) is unreadable, as `analyze --strict` has it. `with_tables`: keep the
    report's flows, stalls and endpoints tables (small next to its segments, which never
    leave the process that read them). `url_timeout`: the longest wait for an http(s)
    server, in seconds. `baseline`: a report it must not be worse than (`evaluate`)."""
    from .pipeline import analyze  # the worker's import, kept out of `import nagleprobe.check`

    t0 = time.perf_counter()
    files = path
    if isinstance(path, list):
        path = set_name(path)
    try:
        report = analyze(files, strict=strict, url_timeout=url_timeout)
        v = evaluate(report, budget, path, baseline)
        v.packets = int(report.capture.get("packets", 0))
        if with_document:
            v.document = json.loads(report.to_json())
        if with_tables:
            v.tables = {name: report.columns(name) for name in ("flows", "stalls", "endpoints")}
    except CaptureError as e:
        v = CaptureVerdict(path=path, status=ExitStatus.BAD_CAPTURE, error=str(e))
    except MemoryError:
        v = CaptureVerdict(path=path, status=ExitStatus.INTERNAL,
                           error=f"{path}: out of memory while analysing")
    except Exception as e:  # a bug: this file's verdict says so, the others still count
        v = CaptureVerdict(path=path, status=ExitStatus.INTERNAL,
                           error=f"{path}: internal error: {type(e).__name__}: {e}")
    v.seconds = time.perf_counter() - t0
    return v


# ------------------------------------------------------------------------------- targets
# what the gate is given: files, directories and glob patterns (nagleprobe.fileset's
# Target and expand_targets, imported above)

# ------------------------------------------------------------------------------- running
@dataclass
class CheckRun:
    """The verdicts on every capture of one `check`, and the budget they were held to."""

    budget: Budget
    verdicts: list[CaptureVerdict]
    config: str | None = None  # the pyproject.toml the budget came from

    @property
    def status(self) -> ExitStatus:
        """Most severe first: internal error 4 > unreadable 3 > empty 6 > over budget 1 >
        ok 0 (SEVERITY)."""
        return max((v.status for v in self.verdicts), key=SEVERITY.index, default=ExitStatus.OK)

    @property
    def passed(self) -> bool:
        return self.status == ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """{"budget", "config", "passed", "exit_status", "captures": [analyze doc + check]}."""
        caps = []
        for v in self.verdicts:
            doc = dict(v.document) if v.document else {"capture": {"path": utf8_safe(v.path)}}
            doc["check"] = v.to_dict()
            caps.append(doc)
        config = utf8_safe(self.config) if self.config else self.config
        return {"budget": self.budget.to_dict(), "config": config, "passed": self.passed,
                "exit_status": int(self.status), "captures": caps}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)


def run_check(targets: Sequence[Target | str], budget: Budget, jobs: int | None = None,
              with_documents: bool = False, config: str | None = None,
              strict: bool = False, merge: bool = False, *, client: Any = None,
              progress: Callable[[CaptureVerdict], None] | None = None,
              with_tables: bool = False, url_timeout: float = URL_TIMEOUT_S,
              baseline: Baseline | None = None) -> CheckRun:
    """Check every target: on the workers of a Dask `client` (a `distributed.Client`) when
    given, else in local processes (at most `jobs`, default one per core). Each worker reads
    its capture itself and sends back only the verdict (and, `with_tables`, the report's
    small tables). `progress` is called with each verdict as it arrives. With `merge`, the
    readable targets are one file set with one verdict (arguments that named no file keep
    their own). `url_timeout`, `baseline`: as `check_capture`'s."""
    targets = [t if isinstance(t, Target) else Target(t) for t in targets]
    good = [t.path for t in targets if not t.problem]
    if merge and len(good) > 1:
        bad = [CaptureVerdict(path=t.path, status=ExitStatus.BAD_CAPTURE,
                              error=f"{t.path}: {t.problem}") for t in targets if t.problem]
        return CheckRun(budget, bad + [check_capture(good, budget, with_documents, strict,
                                                     with_tables, url_timeout, baseline)],
                        config)
    results: list[CaptureVerdict | None] = [None] * len(targets)

    def done(i: int, v: CaptureVerdict) -> None:
        results[i] = v
        if progress is not None:
            progress(v)

    todo = []
    for i, t in enumerate(targets):
        if t.problem:
            done(i, CaptureVerdict(path=t.path, status=ExitStatus.BAD_CAPTURE,
                                   error=f"{t.path}: {t.problem}"))
        else:
            todo.append(i)
    args = (budget, with_documents, strict, with_tables, url_timeout, baseline)
    local = [i for i in todo if targets[i].path == "-"]  # stdin belongs to this process
    remote = [i for i in todo if i not in local]
    if client is not None:
        from distributed import as_completed as dask_completed

        futures = {client.submit(_check_as, _absolute(targets[i].path), targets[i].path,
                                 *args, pure=False): i
                   for i in remote}
        _collect(futures, dask_completed(list(futures), loop=client.loop), targets, done,
                 lambda e: f"the Dask task failed: {type(e).__name__}: "
                 f"{' '.join(str(e).split())}")
    else:
        workers = max(1, min(jobs or os.cpu_count() or 1, os.cpu_count() or 1, len(todo)))
        if workers == 1 or len(remote) < 2:
            local += remote
            remote = []
        if remote:
            from . import pipeline  # noqa: F401 (forked workers start with the analysis imported)

            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = {pool.submit(check_capture, targets[i].path, *args): i
                           for i in remote}
                _collect(futures, as_completed(futures), targets, done,
                         lambda e: "the analysing process died (out of memory?)"
                         if isinstance(e, BrokenProcessPool) else f"{type(e).__name__}: {e}")
    for i in local:
        done(i, check_capture(targets[i].path, *args))
    return CheckRun(budget, [r for r in results if r is not None], config)


def _absolute(path: str) -> str:
    """`path` as a worker started in another directory can find it (URLs as they are)."""
    return path if url_scheme(path) else os.path.abspath(path)


def _check_as(path: str, shown: str, *args: Any) -> CaptureVerdict:
    """`check_capture` of `path` with the capture named `shown` (the relative path the user
    gave) in the verdict, as a local run names it."""
    v = check_capture(path, *args)
    if path != shown:
        v.path = shown
        for real in (printable(path), path):
            if v.error and v.error.startswith(real):
                v.error = printable(shown) + v.error[len(real):]
                break
        if v.document:
            v.document["capture"]["path"] = utf8_safe(shown)
    return v


def _collect(futures: Mapping[Any, int], finished: Iterable[Any], targets: Sequence[Target],
             done: Callable[[int, CaptureVerdict], None],
             why: Callable[[BaseException], str]) -> None:
    """Each future's verdict as it finishes; a future that failed (a worker that died or
    could not run the task) becomes that capture's internal-error verdict."""
    for fut in finished:
        i = futures[fut]
        try:
            v = fut.result()
        except Exception as e:
            v = CaptureVerdict(path=targets[i].path, status=ExitStatus.INTERNAL,
                               error=f"{targets[i].path}: {why(e)}")
        done(i, v)
