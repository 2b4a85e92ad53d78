"""pytest plugin: the nagle_capture fixture fails a test whose own loopback traffic stalls,
passes it with TCP_NODELAY, honours the budget from a marker or pyproject, and skips with
the reason where capture is not permitted. Each case runs a real inner pytest session
(subprocess, the plugin loaded through its pytest11 entry point)."""

import os
from pathlib import Path

import pytest

from capture_env import require_capture

pytest_plugins = ["pytester"]

SPLITWRITE = (Path(__file__).resolve().parent / "splitwrite.py").read_text()

INNER_TESTS = '''
import pytest
from splitwrite import free_port, run


def test_split_writes(nagle_capture):
    port = free_port()
    nagle_capture.watch_port(port)
    run(port, requests=12)


def test_split_writes_with_nodelay(nagle_capture):
    port = free_port()
    nagle_capture.watch_port(port)
    run(port, requests=12, nodelay=True)


@pytest.mark.nagle(max_stalls=100)
def test_split_writes_within_a_generous_budget(nagle_capture):
    port = free_port()
    nagle_capture.watch_port(port)
    run(port, requests=12)
'''


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(splitwrite=SPLITWRITE, test_inner=INNER_TESTS)
    return pytester


def test_plugin_is_registered_through_its_entry_point(inner):
    result = inner.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--nagle-interface=IFACE*"])


def test_stalling_test_fails_with_the_evidence_and_nodelay_passes(inner):
    require_capture()
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "test_inner.py::test_split_writes FAILED" in out or \
        "FAILED test_inner.py::test_split_writes - " in out
    result.stdout.fnmatch_lines([
        "*Nagle/delayed-ACK stalls over budget in this test's traffic (capture kept at *"
        "nagle_capture.pcap)*",
        "*FAIL *nagle_capture.pcap: * stalls, * ms lost in * [[]* stalls, budget 0]",
        "*held: client 127.0.0.1:*",
        "*fix (coalesce-writes): The client 127.0.0.1:* should send each message in one write*",
        "*client #* *  #* *  #* *  *.* ms  0.*",
    ])


def test_budget_from_pyproject_applies_to_the_fixture(inner):
    require_capture()
    inner.makepyprojecttoml("[tool.nagleprobe.check]\nmax-stalls = 100\n")
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "-k", "split_writes and not "
                                        "nodelay and not generous")
    result.assert_outcomes(passed=1)


def test_unknown_marker_setting_is_reported(inner):
    require_capture()
    inner.makepyfile(test_marker='''
import pytest

@pytest.mark.nagle(max_stals=1)
def test_x(nagle_capture):
    pass
''')
    result = inner.runpytest_subprocess("test_marker.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown setting(s) [[]'max_stals'[]]*"])


def test_fixture_skips_with_the_reason_where_capture_is_not_possible(inner, monkeypatch):
    monkeypatch.setenv("NAGLEPROBE_TCPDUMP", str(inner.path / "no-tcpdump"))
    result = inner.runpytest_subprocess("-rs", "-k", "nodelay")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * nagleprobe: cannot capture traffic here: tcpdump "
                                 "not found at *no-tcpdump"])
    assert os.environ["NAGLEPROBE_TCPDUMP"].endswith("no-tcpdump")


def test_a_run_whose_gate_could_not_capture_says_so_in_its_summary(inner, monkeypatch):
    """Without -rs a skip is one "s" and "1 skipped": the summary must say the gate did not
    run, in how many tests, and why."""
    monkeypatch.setenv("NAGLEPROBE_TCPDUMP", str(inner.path / "no-tcpdump"))
    result = inner.runpytest_subprocess("-q", "-k", "nodelay or generous")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["nagleprobe: the Nagle/delayed-ACK gate did not run in 2 "
                                 "tests (skipped): cannot capture traffic here: tcpdump not "
                                 "found at *no-tcpdump*. --nagle-require-capture makes this "
                                 "a failure."])


def test_a_run_that_captured_has_no_such_summary_line(inner):
    require_capture()
    result = inner.runpytest_subprocess("-k", "nodelay")
    result.assert_outcomes(passed=1)
    assert "gate did not run" not in result.stdout.str()


def test_a_watched_port_outside_the_configured_ones_is_captured_and_checked(inner):
    """The documented pyproject (docs/ci.md: ports 8000/8443) and a test on another port: its traffic is
    captured (all TCP), selected by watch_port, and its stalls fail the test."""
    require_capture()
    inner.makepyprojecttoml("[tool.nagleprobe.check]\nmax-stalls = 0\nports = [8000, 8443]\n")
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "-k", "split_writes and not "
                                        "nodelay and not generous")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL *nagle_capture.pcap: * stalls, * ms lost in * "
                                 "[[]* stalls, budget 0]",
                                 "*fix (coalesce-writes): The client 127.0.0.1:*"])


EMPTY_TESTS = '''
import pytest
from splitwrite import free_port


def test_no_traffic(nagle_capture):
    nagle_capture.watch_port(free_port())


@pytest.mark.nagle(allow_empty=True)
def test_no_traffic_allowed(nagle_capture):
    nagle_capture.watch_port(free_port())
'''


def test_a_test_whose_watched_ports_saw_no_traffic_fails_unless_marked(inner):
    require_capture()
    inner.makepyfile(test_empty=EMPTY_TESTS)
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "test_empty.py")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*nagleprobe: nothing checked: *TCP flow* (watched ports: *; "
                                 "capture kept at *nagle_capture.pcap)*"
                                 "@pytest.mark.nagle(allow_empty=True)*"])
    assert "test_empty.py::test_no_traffic FAILED" in result.stdout.str() or \
        "FAILED test_empty.py::test_no_traffic - " in result.stdout.str()


@pytest.mark.parametrize("how", ["option", "ini"])
def test_capture_impossible_fails_when_capture_is_required(inner, monkeypatch, how):
    monkeypatch.setenv("NAGLEPROBE_TCPDUMP", str(inner.path / "no-tcpdump"))
    args = ["-k", "nodelay"]
    if how == "option":
        args.append("--nagle-require-capture")
    else:
        inner.makeini("[pytest]\nnagle_require_capture = true\n")
    result = inner.runpytest_subprocess(*args)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*nagleprobe: cannot capture traffic here: tcpdump not found "
                                 "at *no-tcpdump (--nagle-require-capture*"])
