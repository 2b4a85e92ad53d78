"""The CI gate: analyse captures, hold them against a stall budget, and say pass or fail.

The budget (`nagleprobe.budget`) comes from `[tool.nagleprobe.check]` in the nearest
pyproject.toml, overridden by command-line options; with no limit set at all it allows no
stall. Many captures are checked
in parallel, one process per core, and each gets its own verdict, so one unreadable file
never hides the verdict on the others. A verdict keeps its flows as columns
(`check_table`), so a capture of a million stalled connections costs about what its analysis
does. The results render as the JSON document of `analyze` plus a "check" object, written in
pieces from the report as `analyze` writes its own (`CheckRun.json_pieces`); text, JUnit XML
and GitHub workflow-command annotations are written by `nagleprobe.check_output`.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import advice
from .advice import FIX_FIELDS
from .budget import Budget, budget_from_mapping, find_pyproject, load_budget  # noqa: F401 (API)
from .columns import take
from .compare import Baseline
from .errors import BudgetError, CaptureError, ExitStatus, printable, utf8_safe  # noqa: F401 (API)
from .fileset import CAPTURE_SUFFIXES, Target, expand_targets, set_name  # noqa: F401 (API)
from .humanize import plural, short_number
from .check_table import EVIDENCE_COLUMNS, EVIDENCE_ROWS, FlowTable, FlowVerdict, FlowViews
from .json_report import FLOWS_PER_PIECE
from .jsonrows import Program, encode
from .read import URL_TIMEOUT_S, url_scheme
from .read.clock import UNRESOLVED_NS, duration
from .selection import confident, flow_mask
from .tables import rows_of

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
class CaptureVerdict:
    """One capture held against the budget, or the reason it could not be."""

    path: str
    status: ExitStatus
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    # selected flows with stalls: given, or views of `table` (the verdict's columns)
    flows: Sequence[FlowVerdict] = field(default_factory=list)
    clean_flows: list[tuple[int, str, str]] = field(default_factory=list)  # up to the cap
    flows_total: int = 0
    flows_selected: int = 0
    stalls: int = 0
    stall_ms: float = 0.0
    ignored_stalls: int = 0  # below min_confidence, in selected flows
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # the capture's warnings' texts
    fixes: list[dict[str, Any]] = field(default_factory=list)  # of the failing flows, one
    # per endpoint to change (advice.fix_groups of the counted stalls)
    packets: int = 0  # packets read (for the progress display's rate)
    # the report's flows, stalls and endpoints as numpy columns (`Report.columns`), when
    # asked for (`analyze_many`, which makes one table of each from every capture's columns)
    tables: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    table: FlowTable | None = field(default=None, repr=False, compare=False)
    # the analyze document, when asked for: written from the report while this process
    # holds it, else its text (what crosses to another process), else as a dict once read
    _report: Any = field(default=None, repr=False, compare=False)
    _document_text: str | None = field(default=None, repr=False, compare=False)
    _document: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # what `fixes` is made of until it is read (only the text verdict and callers read it)
    _fix_source: tuple | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        self.fixes  # made here: its source is the report's tables
        state = dict(self.__dict__)
        if state["_report"] is not None:  # never the report itself: its segments are big
            state["_document_text"], state["_report"] = state["_report"].to_json(), None
        return state

    @property
    def passed(self) -> bool:
        return self.status == ExitStatus.OK

    @property
    def document(self) -> dict[str, Any] | None:
        """The analyze JSON document, when asked for (`check_capture(with_document=True)`)."""
        if self._document is None and (self._report is not None or self._document_text):
            self._document = (json.loads(self._document_text) if self._document_text
                              else self._report.to_dict())
            self._report = self._document_text = None
        return self._document

    @document.setter
    def document(self, doc: dict[str, Any] | None) -> None:
        self._document, self._report, self._document_text = doc, None, None

    def flow_table(self) -> FlowTable:
        """The selected flows with stalls as columns (`table`, or made from `flows`)."""
        return self.table if self.table is not None else FlowTable.of(list(self.flows))

    @property
    def failing_flows(self) -> Sequence[FlowVerdict]:
        if self.table is None:
            return [f for f in self.flows if not f.passed]
        return FlowViews(self.table, np.flatnonzero(~self.table.passed))

    def to_dict(self) -> dict[str, Any]:
        """The "check" object added to the capture's analyze document."""
        return json.loads("".join(self.check_pieces()))

    def check_pieces(self) -> Iterator[str]:
        """The "check" object's compact JSON text, its flows written from their columns."""
        head = json.dumps(
            {"status": STATUS_NAMES[self.status], "exit_status": int(self.status),
             "reasons": list(self.reasons),
             "error": utf8_safe(self.error) if self.error is not None else None,
             "flows_selected": self.flows_selected, "stalls": self.stalls,
             "stall_ms": self.stall_ms, "ignored_stalls": self.ignored_stalls,
             "flows": [], "warnings": list(self.warnings)},
            separators=(",", ":"), allow_nan=False)
        before, after = head.split('"flows":[]', 1)
        t = self.flow_table()
        rows = flow_program(t)
        yield before + '"flows":['
        for a in range(0, len(t), FLOWS_PER_PIECE):
            yield ("," if a else "") + rows.render(a, min(a + FLOWS_PER_PIECE, len(t)))
        yield "]" + after

    def json_pieces(self) -> Iterator[str]:
        """The capture's analyze document (or only its path) with the "check" object added,
        as compact JSON text in pieces."""
        if self._document is not None:
            pieces: Iterable[str] = [json.dumps(self._document, separators=(",", ":"),
                                                allow_nan=False)]
        elif self._report is not None:
            pieces = self._report.json_pieces()
        else:
            pieces = [self._document_text or json.dumps({"capture": {"path": utf8_safe(self.path)}},
                                                        separators=(",", ":"))]
        last = None
        for piece in pieces:
            if last:
                yield last
            last = piece
        assert last and last.endswith("}")
        yield last[:-1] + (',"check":' if last[:-1] != "{" else '"check":')
        yield from self.check_pieces()
        yield "}"


def _fixes(v: CaptureVerdict) -> list[dict[str, Any]]:
    if v._fix_source is not None:
        v.__dict__["fixes"], v._fix_source = advice.fix_groups(*v._fix_source), None
    return v.__dict__["fixes"]


def _set_fixes(v: CaptureVerdict, fixes: list[dict[str, Any]]) -> None:
    v.__dict__["fixes"], v.__dict__["_fix_source"] = fixes, None


# `fixes` (a field: given, or made by `evaluate`) is made from its source when first read
CaptureVerdict.fixes = property(_fixes, _set_fixes)  # type: ignore[assignment]


def evaluate(report: Any, budget: Budget, path: str | None = None,
             baseline: Baseline | None = None) -> CaptureVerdict:
    """Hold a `Report` against a budget: which selected flows fail, and why; with a
    `baseline` (the budget's), also whether it is worse than that report. Works on the
    report's columns: no object per flow or stall."""
    fl, st = report.columns("flows"), report.columns("stalls")
    # the selection of `analyze --port/--host/--min-confidence` and `Report.select`
    chosen = flow_mask(fl, budget.ports, budget.hosts)
    stall_rows = rows_of(fl, st["flow"])
    in_sel = chosen[stall_rows]
    sure = confident(st, budget.min_confidence)
    counted = np.flatnonzero(in_sel & sure)
    # counted stalls grouped by flow, each flow's in table order
    counted = counted[np.argsort(stall_rows[counted], kind="stable")]
    rows, starts, n = np.unique(stall_rows[counted], return_index=True, return_counts=True)
    v = CaptureVerdict(path=path or report.capture["path"], status=ExitStatus.OK,
                       flows_total=len(fl["id"]), flows_selected=int(chosen.sum()),
                       ignored_stalls=int(in_sel.sum()) - len(counted), stalls=len(counted))
    # each flow's sum as pandas sums a group (numpy's pairwise sum of its run of values),
    # rounded as Python rounds, so the figures are those of the flow's own rows
    sums = np.add.reduceat(st["delay_ms"][counted], starts) if len(counted) else np.zeros(0)
    ms = [round(x, 3) for x in sums.tolist()]
    dur = fl["duration_s"][rows]
    share = [round(100 * m / 1e3 / d, 2) if d > 0 else 0.0 for m, d in zip(ms, dur.tolist())]
    share_a = np.array(share, dtype=float)
    share_failed = (share_a > budget.max_lost_share if budget.max_lost_share is not None
                    else np.zeros(len(rows), dtype=bool))
    first = np.arange(len(counted)) - np.repeat(starts, n) < EVIDENCE_ROWS
    t = FlowTable(id=fl["id"][rows], client=fl["client"][rows], server=fl["server"][rows],
                  stalls=n.astype(np.int64), stall_ms=np.array(ms, dtype=float),
                  lost_share_pct=share_a, duration_s=dur.astype(float),
                  share_failed=share_failed,
                  fix={k: fl[f"fix_{k}"][rows] for k in FIX_FIELDS},
                  evidence={k: st[k][counted[first]] for k in EVIDENCE_COLUMNS},
                  evidence_offsets=np.r_[0, np.cumsum(np.minimum(n, EVIDENCE_ROWS))],
                  max_lost_share=budget.max_lost_share)
    v.table, v.flows = t, FlowViews(t)
    clean = np.flatnonzero(chosen & (np.bincount(rows, minlength=len(chosen)) == 0)
                           )[:CLEAN_FLOW_CASES]
    v.clean_flows = list(zip(fl["id"][clean].tolist(), map(str, fl["client"][clean]),
                             map(str, fl["server"][clean])))
    v.stall_ms = round(sum(ms), 3)

    limit = budget.stall_limit
    if limit is not None and v.stalls > limit:
        v.reasons.append(f"{v.stalls} stall{plural(v.stalls)}, budget {limit}")
    if budget.max_stall_ms is not None and v.stall_ms > budget.max_stall_ms:
        v.reasons.append(f"{short_number(v.stall_ms)} ms lost to stalls, budget "
                         f"{short_number(budget.max_stall_ms)} ms")
    worse = baseline.regressions(report) if baseline is not None else []
    v.reasons += [f"worse than the baseline {baseline.path}: {w}" for w in worse]
    # over a capture-wide limit: every flow with counted stalls adds to it
    t.capture_reasons = list(v.reasons)
    share_failures = int(share_failed.sum())
    if share_failures:
        v.reasons.append(f"{share_failures} flow{plural(share_failures)} over the "
                         f"{short_number(budget.max_lost_share)}% lost-share budget")
    if worse:
        v.status = ExitStatus.STALLS_FOUND
    failing = t.id[~t.passed]
    if len(failing):
        v.status = ExitStatus.STALLS_FOUND
        sure_rows = st if sure.all() else take(st, sure)  # no copy of every stall
        v._fix_source = (fl, sure_rows, report.columns("endpoints"), failing)
    if not chosen.any() and not budget.allow_empty:
        nf = len(fl["id"])
        v.status = ExitStatus.EMPTY
        v.reasons.append("no TCP flow in the capture" if not nf else
                         f"none of its {nf} TCP flow{plural(nf)} selected by "
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


def flow_program(t: FlowTable) -> Program:
    """One flow verdict per row of `t`, as the "check" object's "flows"."""
    codes, lists = t.reason_lists()
    status = np.where(t.passed, "pass", "fail").astype(object)
    return Program().obj([
        ("id", lambda p: p.value(t.id)), ("client", lambda p: p.text(t.client)),
        ("server", lambda p: p.text(t.server)), ("status", lambda p: p.text(status)),
        ("stalls", lambda p: p.value(t.stalls)), ("stall_ms", lambda p: p.value(t.stall_ms)),
        ("lost_share_pct", lambda p: p.value(t.lost_share_pct)),
        ("reasons", lambda p: p.coded(codes, [encode(x) for x in lists]))])


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
        if with_document:  # written when asked for (`json_pieces`, `document`)
            v._report = report
        if with_tables:
            v.tables = {name: report.table_columns(name)
                        for name in ("flows", "stalls", "endpoints")}
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
        return json.loads(self.to_json())

    def to_json(self) -> str:
        return "".join(self.json_pieces())

    def json_pieces(self) -> Iterator[str]:
        """`to_json`'s text in pieces: each capture's document streamed from its report."""
        config = utf8_safe(self.config) if self.config else self.config
        head = json.dumps({"budget": self.budget.to_dict(), "config": config,
                           "passed": self.passed, "exit_status": int(self.status),
                           "captures": []}, separators=(",", ":"), allow_nan=False)
        assert head.endswith('"captures":[]}')
        yield head[:-2]
        for j, v in enumerate(self.verdicts):
            if j:
                yield ","
            yield from v.json_pieces()
        yield "]}"


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
