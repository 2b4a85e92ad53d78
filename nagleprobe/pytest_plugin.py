"""pytest plugin: fail a test whose own TCP traffic shows Nagle/delayed-ACK stalls.

    def test_my_server_answers_fast(nagle_capture, my_server):
        nagle_capture.watch_port(my_server.port)   # optional: check only this server's flows
        ...talk to the server over loopback...

The `nagle_capture` fixture runs tcpdump on the loopback interface for the duration of the
test, capturing all TCP; when the test body has passed, the flows on the watched ports (the
budget's `ports` and every `watch_port`, whenever called; all flows if none) are analysed
and held against the budget (`[tool.nagleprobe.check]` in the rootdir's pyproject.toml,
overridden by a `@pytest.mark.nagle(max_stalls=..., ports=[...])` marker), and the test
fails with the stall evidence if it is over budget, or if no TCP flow was checked at all
(unless marked `allow_empty=True`). Where capture is not permitted (not root, no tcpdump)
the test is skipped with the reason, and the run's summary ends with a line saying the
gate did not run and why; or it fails with `--nagle-require-capture` (ini
`nagle_require_capture = true`). Registered through the `pytest11` entry point; nothing
heavy is imported until a test uses the fixture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

MARKER = "nagle"
MARKER_KEYS = ("max_stalls", "max_stall_ms", "max_lost_share", "min_confidence", "ports",
               "hosts", "allow_empty")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("nagle_interface", default="lo",
                  help="nagleprobe: interface the nagle_capture fixture captures on")
    parser.getgroup("nagleprobe").addoption(
        "--nagle-interface", default=None, metavar="IFACE",
        help="interface the nagle_capture fixture captures on (default: ini nagle_interface, lo)")
    parser.addini("nagle_require_capture", type="bool", default=False,
                  help="nagleprobe: fail (instead of skip) a nagle_capture test where capture "
                       "is not possible")
    parser.getgroup("nagleprobe").addoption(
        "--nagle-require-capture", action="store_true", default=False,
        help="fail (instead of skip) tests using nagle_capture where capture is not possible "
             "(not root, no tcpdump): for CI jobs that mean to gate")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}({', '.join(f'{k}=...' for k in MARKER_KEYS)}): stall budget and "
        "the ports checked by the nagle_capture fixture (overrides [tool.nagleprobe.check])")


_NOT_GATED = pytest.StashKey[list]()  # (test id, why) of each test skipped for want of capture


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    """Say, after the run, that the stall gate did not run in the tests that could not
    capture, and why: a skip alone reads as a gate that passed."""
    skipped = config.stash.get(_NOT_GATED, [])
    if not skipped:
        return
    reasons = sorted({why for _, why in skipped})
    n = len(skipped)
    terminalreporter.write_line(
        f"nagleprobe: the Nagle/delayed-ACK gate did not run in {n} test{'s' if n != 1 else ''} "
        f"(skipped): cannot capture traffic here: {'; '.join(reasons)}. "
        "--nagle-require-capture makes this a failure.", yellow=True, bold=True)


class NagleCapture:
    """The capture of one test: its file, the budget, and the verdict once stopped."""

    def __init__(self, capture: Any, budget: Any, path: Path, interface: str) -> None:
        self._capture = capture
        self.budget = budget
        self.path = path
        self.interface = interface
        self.watched_ports: list[int] = list(budget.ports)
        self.auto_check = True  # set False to only inspect `verdict()` yourself
        self._verdict: Any = None

    def watch_port(self, port: int) -> None:
        """Check only flows on this port (and others watched). All TCP on the interface is
        captured, so this works whenever it is called before the check (the test's end)."""
        if port not in self.watched_ports:
            self.watched_ports.append(int(port))

    def stop(self) -> None:
        """Stop tcpdump (the file is then complete); repeated calls do nothing."""
        if self._capture is not None:
            self._capture.stop()
            self._capture = None

    def verdict(self) -> Any:
        """Stop the capture, analyse it and hold it against the budget (a CaptureVerdict)."""
        from nagleprobe.check import check_capture

        self.stop()
        if self._verdict is None:
            budget = self.budget.merged(ports=tuple(self.watched_ports))
            self._verdict = check_capture(str(self.path), budget)
        return self._verdict

    def failure_text(self) -> str:
        """The evidence a failing test shows: verdict, per-flow fix and stall frames."""
        from nagleprobe.check import CheckRun
        from nagleprobe.check_output import flow_evidence_text, render_text
        from nagleprobe.errors import ExitStatus

        v = self.verdict()
        if v.status == ExitStatus.EMPTY:
            ports = "/".join(map(str, self.watched_ports)) or "any"
            return (f"nagleprobe: nothing checked: {'; '.join(v.reasons)} (watched ports: "
                    f"{ports}; capture kept at {self.path}). Did the test talk over "
                    f"{self.interface} on a watched port? Mark it "
                    f"@pytest.mark.{MARKER}(allow_empty=True) if no traffic is expected.")
        if v.status == ExitStatus.UNRESOLVED:
            return (f"nagleprobe: nothing proved: {'; '.join(v.reasons)} (capture kept at "
                    f"{self.path})")
        lines = [f"nagleprobe: Nagle/delayed-ACK stalls over budget in this test's traffic "
                 f"(capture kept at {self.path})",
                 render_text(CheckRun(self.budget, [v])).splitlines()[0]]
        lines += [flow_evidence_text(f) for f in v.failing_flows]
        return "\n".join(lines)


@pytest.fixture
def nagle_capture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NagleCapture]:
    """Capture this test's TCP traffic on loopback; the test fails if it shows stalls."""
    from nagleprobe.check import BudgetError, load_budget
    from nagleprobe.tcpdump import Capture, RecordError

    marker = request.node.get_closest_marker(MARKER)
    settings = dict(marker.kwargs) if marker else {}
    unknown = set(settings) - set(MARKER_KEYS)
    if unknown:
        pytest.fail(f"@pytest.mark.{MARKER}: unknown setting(s) {sorted(unknown)}; known: "
                    f"{', '.join(MARKER_KEYS)}", pytrace=False)
    for key in ("ports", "hosts"):
        if key in settings and not isinstance(settings[key], (list, tuple)):
            settings[key] = (settings[key],)
    try:
        budget, _ = load_budget(start=request.config.rootpath)
        budget = budget.merged(**settings)
    except (BudgetError, TypeError) as e:
        pytest.fail(f"nagleprobe budget: {e}", pytrace=False)
    interface = (request.config.getoption("--nagle-interface")
                 or request.config.getini("nagle_interface") or "lo")
    path = tmp_path / "nagle_capture.pcap"
    capture = Capture(path, interface)  # all TCP: the ports select flows afterwards
    try:
        capture.start()
    except RecordError as e:
        why = f"nagleprobe: cannot capture traffic here: {e}"
        if (request.config.getoption("--nagle-require-capture")
                or request.config.getini("nagle_require_capture")):
            pytest.fail(f"{why} (--nagle-require-capture / nagle_require_capture: a test that "
                        f"cannot capture fails)", pytrace=False)
        request.config.stash.setdefault(_NOT_GATED, []).append((request.node.nodeid, str(e)))
        pytest.skip(why)
    handle = NagleCapture(capture, budget, path, interface)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """After a passing test body, hold its capture against the budget (a failure then is the
    test's own failure, not a teardown error)."""
    result = yield
    handle = getattr(item, "funcargs", {}).get("nagle_capture")
    if isinstance(handle, NagleCapture) and handle.auto_check:
        from nagleprobe.errors import ExitStatus

        v = handle.verdict()
        if v.status in (ExitStatus.STALLS_FOUND, ExitStatus.EMPTY, ExitStatus.UNRESOLVED):
            pytest.fail(handle.failure_text(), pytrace=False)
        if v.error:
            pytest.fail(f"nagleprobe could not analyse this test's capture: {v.error}",
                        pytrace=False)
    return result
