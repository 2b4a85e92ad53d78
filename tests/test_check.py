"""check: the CI gate on the bundled real captures: budgets and their edges, flow selection,
pyproject configuration, exit statuses, and the JSON / JUnit / GitHub outputs."""

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from click.testing import CliRunner

import nagleprobe
from nagleprobe.check import (
    Budget,
    BudgetError,
    CheckRun,
    check_capture,
    evaluate,
    expand_targets,
    load_budget,
    run_check,
)
from nagleprobe.check_output import render_junit
from nagleprobe.cli import main
from nagleprobe.errors import ExitStatus

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SPLIT = str(SAMPLES / "echo_split_lo.pcap")  # stalls (ground truth in the sidecar)
NODELAY = str(SAMPLES / "echo_nodelay_lo.pcap")  # none
PROXY = str(SAMPLES / "proxy_any.pcap")  # two flows, stalls only on proxy -> backend
CONFIRM = str(SAMPLES / "confirm_netns_client.pcap")
EMPTY = str(SAMPLES.parent / "tests" / "broken" / "empty.pcap")
JUNIT_XSD = Path(__file__).resolve().parent / "schemas" / "junit-10.xsd"


def truth(capture: str) -> dict:
    return json.loads(Path(capture).with_suffix(".expected.json").read_text())


def gate(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    """`nagleprobe check ...` in-process (no pyproject unless the test asks for one)."""
    old = os.getcwd()
    os.chdir(cwd or Path("/"))
    try:
        r = CliRunner().invoke(main, ["check", *args])
    finally:
        os.chdir(old)
    return r.exit_code, r.output


def check_json(*args: str, cwd: Path | None = None) -> tuple[int, dict]:
    code, out = gate("--format", "json", *args, cwd=cwd)
    return code, json.loads(out)


# ------------------------------------------------------------------ passing and failing
def test_default_budget_fails_a_capture_with_stalls_and_names_the_flow_and_fix():
    t = truth(SPLIT)
    code, out = gate(SPLIT)
    assert code == ExitStatus.STALLS_FOUND == 1
    assert out.startswith(f"FAIL {SPLIT}: {t['stalls']} stalls")
    assert f"held: {t['held_side']} {t['held_endpoint']} (flow 0); fix: coalesce-writes" in out
    assert "no stall allowed" in out


def test_default_budget_passes_captures_without_stalls():
    code, out = gate(NODELAY, str(SAMPLES / "echo_coalesced_lo.pcap"))
    assert code == ExitStatus.OK
    assert out.count("PASS ") == 2 and "FAIL" not in out


@pytest.mark.parametrize("truth_file", sorted(SAMPLES.glob("*.expected.json")),
                         ids=lambda p: p.name.split(".")[0])
def test_every_behaviour_sample_gets_the_verdict_its_ground_truth_implies(truth_file):
    t = json.loads(truth_file.read_text())
    v = check_capture(str(SAMPLES / t["capture"]), Budget())
    assert v.status == (ExitStatus.STALLS_FOUND if t["stalls"] else ExitStatus.OK)
    assert v.stalls == t["stalls"]
    assert [f.fix["endpoint"] for f in v.failing_flows] == (
        [t["held_endpoint"]] if t["stalls"] else [])


# ------------------------------------------------------------------ budget edges
def test_stall_count_exactly_at_the_limit_passes_and_one_over_fails():
    n = truth(SPLIT)["stalls"]
    assert gate("--max-stalls", str(n), SPLIT)[0] == ExitStatus.OK
    code, out = gate("--max-stalls", str(n - 1), SPLIT)
    assert code == ExitStatus.STALLS_FOUND
    assert f"{n} stalls, budget {n - 1}" in out


def test_lost_milliseconds_exactly_at_the_limit_passes_and_just_over_fails():
    _, doc = check_json(SPLIT)
    lost = doc["captures"][0]["check"]["stall_ms"]
    assert lost == pytest.approx(doc["captures"][0]["summary"]["stall_ms"], abs=0.01)
    assert gate("--max-stall-ms", f"{lost}", SPLIT)[0] == ExitStatus.OK
    code, out = gate("--max-stall-ms", f"{lost - 0.001:.3f}", SPLIT)
    assert code == ExitStatus.STALLS_FOUND and "ms lost to stalls, budget" in out


def test_lost_share_exactly_at_the_limit_passes_and_just_over_fails():
    _, doc = check_json("--max-lost-share", "100", SPLIT)
    flow = doc["captures"][0]["check"]["flows"][0]
    share = flow["lost_share_pct"]
    assert share == pytest.approx(100 * doc["captures"][0]["flows"][0]["lost_share"], abs=0.01)
    assert doc["passed"] is True
    assert gate("--max-lost-share", f"{share}", SPLIT)[0] == ExitStatus.OK
    code, out = gate("--max-lost-share", f"{share - 0.01:.2f}", SPLIT)
    assert code == ExitStatus.STALLS_FOUND and "% of the flow lost to stalls" in out


def test_a_single_limit_replaces_the_no_stall_default():
    """Allowing 5 s of stalls must not leave the implicit 'no stall' count limit in force."""
    assert Budget().stall_limit == 0
    assert Budget(max_stall_ms=5000).stall_limit is None
    assert gate("--max-stall-ms", "5000", SPLIT)[0] == ExitStatus.OK


def test_stalls_below_the_confidence_floor_are_ignored_and_counted_as_such():
    r = nagleprobe.analyze(SPLIT)
    conf = float(r.stalls["confidence"].min())
    assert evaluate(r, Budget(min_confidence=conf)).status == ExitStatus.STALLS_FOUND
    v = evaluate(r, Budget(min_confidence=min(1.0, conf + 0.01)))
    assert v.status == ExitStatus.OK and v.stalls == 0 and v.ignored_stalls == len(r.stalls)


# ------------------------------------------------------------------ flow selection
def test_port_selection_checks_only_the_flows_on_that_port():
    t = truth(PROXY)  # the stalls are held by the proxy's own socket to the backend (8002)
    code, out = gate("--port", "8001", PROXY)  # client -> proxy: clean
    assert code == ExitStatus.OK and "1 of 2 flows selected" in out
    code, out = gate("--port", "8002", PROXY)  # proxy -> backend: the stalls
    assert code == ExitStatus.STALLS_FOUND and t["held_endpoint"] in out


@pytest.mark.parametrize("host, status", [("10.99.1.2", ExitStatus.STALLS_FOUND),
                                          ("10.99.1.0/24", ExitStatus.STALLS_FOUND),
                                          ("192.0.2.7", ExitStatus.EMPTY)])  # none selected
def test_host_selection_matches_addresses_and_networks(host, status):
    assert gate("--host", host, CONFIRM)[0] == status


def test_bad_host_is_a_usage_error():
    code, out = gate("--host", "not-an-ip", SPLIT)
    assert code == ExitStatus.USAGE and "not an IP address" in out


# ------------------------------------------------------------------ pyproject configuration
def write_pyproject(d: Path, table: str) -> Path:
    p = d / "pyproject.toml"
    p.write_text(f'[project]\nname = "x"\n\n[tool.nagleprobe.check]\n{table}\n')
    return p


def test_budget_comes_from_the_nearest_pyproject_and_options_override_it(tmp_path):
    n = truth(SPLIT)["stalls"]
    write_pyproject(tmp_path, f"max-stalls = {n}\nports = [8000]")
    sub = tmp_path / "ci" / "deep"
    sub.mkdir(parents=True)
    code, out = gate(SPLIT, cwd=sub)  # found by walking up from the working directory
    assert code == ExitStatus.OK
    assert f"budget from {tmp_path / 'pyproject.toml'}: at most {n} stalls, port 8000" in out
    assert gate("--max-stalls", str(n - 1), SPLIT, cwd=sub)[0] == ExitStatus.STALLS_FOUND
    assert gate("--no-config", SPLIT, cwd=sub)[0] == ExitStatus.STALLS_FOUND


def test_config_keys_accept_underscores_and_an_explicit_file(tmp_path):
    cfg = write_pyproject(tmp_path, "max_stall_ms = 10000.5\nhosts = ['127.0.0.0/8']")
    budget, source = load_budget(cfg)
    assert source == cfg
    assert budget == Budget(max_stall_ms=10000.5, hosts=("127.0.0.0/8",))
    assert gate("--config", str(cfg), SPLIT)[0] == ExitStatus.OK


def test_a_command_s_budget_is_the_file_s_with_its_own_settings_over_it(tmp_path):
    from nagleprobe.budget import command_budget

    cfg = write_pyproject(tmp_path, "max-stalls = 3\nports = [8000]")
    assert command_budget(cfg, max_stalls=None, ports=()) == (
        Budget(max_stalls=3, ports=(8000,)), cfg)  # not given: the file's stands
    assert command_budget(cfg, max_stalls=1, ports=[9000], allow_empty=True) == (
        Budget(max_stalls=1, ports=(9000,), allow_empty=True), cfg)
    assert command_budget(cfg, use_config=False, max_stall_ms=5.0) == (
        Budget(max_stall_ms=5.0), None)  # --no-config: the file is not read at all
    with pytest.raises(BudgetError, match="max-stalls must be a whole number >= 0"):
        command_budget(cfg, max_stalls=-1)


def test_pyproject_without_the_table_gives_the_default_budget(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_budget(start=tmp_path) == (Budget(), None)


@pytest.mark.parametrize("table, problem", [
    ("max-stals = 3", "unknown setting 'max-stals'"),
    ("max-stalls = -1", "max-stalls must be a whole number >= 0"),
    ("max-stalls = 1.5", "max-stalls must be a whole number"),
    ("max-lost-share = 150", "max-lost-share must be a number between 0 and 100"),
    ("min-confidence = 'high'", "min-confidence must be a number"),
    ("ports = [0]", "ports must be TCP ports"),
    ("hosts = ['example.com']", "not an IP address or network"),
    ("max-stalls = [", "not valid TOML"),
])
def test_bad_config_is_a_one_line_usage_error_naming_the_file(tmp_path, table, problem):
    cfg = write_pyproject(tmp_path, table)
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "check", SPLIT],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == ExitStatus.USAGE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(cfg) in lines[0] and problem in lines[0], proc.stderr
    with pytest.raises(BudgetError):
        load_budget(cfg)


# ------------------------------------------------------------------ many captures
def test_directories_and_globs_expand_to_capture_files_and_empty_matches_are_errors(tmp_path):
    in_dir = sorted(str(p) for p in SAMPLES.rglob("*") if p.is_file()
                    and re.search(r"\.(pcap|pcapng)(\.gz)?$", p.name))
    assert [t.path for t in expand_targets([str(SAMPLES)])] == in_dir
    assert [t.path for t in expand_targets([str(SAMPLES / "echo_*_lo.pcap")])] == [
        str(SAMPLES / f"echo_{m}_lo.pcap") for m in ("coalesced", "nodelay", "split")]
    (tmp_path / "notes.txt").write_text("no captures here")
    problems = [t.problem for t in expand_targets([str(tmp_path), str(tmp_path / "*.pcap")])]
    assert problems == ["no capture files (.pcap, .pcapng, .cap, .pcap.gz, .pcapng.gz, "
                        ".cap.gz, also numbered as tcpdump -C writes them) in this directory",
                        "no file matches this pattern"]


@pytest.mark.parametrize("captures, status", [
    ([NODELAY], ExitStatus.OK),
    ([NODELAY, SPLIT], ExitStatus.STALLS_FOUND),
    ([SPLIT, EMPTY, NODELAY], ExitStatus.BAD_CAPTURE),
    ([str(SAMPLES / "nothing-*.pcap")], ExitStatus.BAD_CAPTURE),
])
def test_exit_status_is_the_most_severe_verdict(captures, status):
    assert gate(*captures)[0] == status


def test_a_broken_file_gets_its_own_verdict_without_hiding_the_others():
    code, out = gate(SPLIT, EMPTY, NODELAY)
    assert code == ExitStatus.BAD_CAPTURE
    lines = out.splitlines()
    assert lines[0].startswith(f"FAIL {SPLIT}")
    assert f"ERROR {EMPTY}: empty file" in lines
    assert any(line.startswith(f"PASS {NODELAY}") for line in lines)
    assert lines[-1].endswith("1 within budget, 1 over budget, 1 unreadable (budget: no stall "
                              "allowed) -> exit 3")


def test_parallel_and_serial_checks_agree():
    targets = expand_targets([str(SAMPLES / "*.pcap"), EMPTY])
    serial = run_check(targets, Budget(), jobs=1, with_documents=True).to_dict()
    parallel = run_check(targets, Budget(), jobs=2, with_documents=True).to_dict()
    assert serial == parallel
    assert len(serial["captures"]) == len(targets) > 10


def test_an_internal_error_on_one_capture_is_that_capture_s_verdict(monkeypatch):
    import nagleprobe.check as check_module

    real = check_module.evaluate

    def buggy(report, budget, path=None, baseline=None):
        if "nodelay" in report.capture["path"]:
            raise ZeroDivisionError("simulated bug")
        return real(report, budget, path, baseline)

    monkeypatch.setattr(check_module, "evaluate", buggy)
    run = run_check([SPLIT, NODELAY], Budget(), jobs=1)
    assert [v.status for v in run.verdicts] == [ExitStatus.STALLS_FOUND, ExitStatus.INTERNAL]
    assert "ZeroDivisionError: simulated bug" in run.verdicts[1].error
    assert run.status == ExitStatus.INTERNAL


def no_tcp_capture(tmp_path: Path) -> str:
    f = tmp_path / "no-tcp.pcap"  # synthetic: a valid pcap header and no packets
    f.write_bytes(bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
    return str(f)


def test_a_capture_without_tcp_fails_as_empty_unless_allowed(tmp_path):
    f = no_tcp_capture(tmp_path)
    code, out = gate(f)
    assert code == ExitStatus.EMPTY == 6
    assert out.splitlines()[0] == (f"EMPTY {f}: nothing checked: no TCP flow in the capture (a "
                                   "wrong interface, port or filter? --allow-empty permits this)")
    assert out.splitlines()[-1].endswith("0 within budget, 1 empty (budget: no stall allowed) "
                                         "-> exit 6")
    assert gate("--allow-empty", f)[0] == ExitStatus.OK
    _, doc = check_json(f)
    assert doc["captures"][0]["check"]["status"] == "empty" and doc["exit_status"] == 6


def test_a_selection_that_matches_no_flow_is_empty_and_says_what_selected(tmp_path):
    code, out = gate("--port", "9999", PROXY)
    assert code == ExitStatus.EMPTY
    assert "nothing checked: none of its 2 TCP flows selected by port 9999" in out
    code, out = gate("--port", "9999", "--allow-empty", PROXY)
    assert code == ExitStatus.OK and "0 of 2 flows selected" in out
    write_pyproject(tmp_path, "allow-empty = true")
    assert gate("--port", "9999", PROXY, cwd=tmp_path)[0] == ExitStatus.OK
    write_pyproject(tmp_path, 'allow-empty = "yes"')
    code, out = gate(PROXY, cwd=tmp_path)
    assert code == ExitStatus.USAGE and "allow-empty must be true or false" in out


def test_empty_ranks_below_unreadable_and_above_over_budget(tmp_path):
    f = no_tcp_capture(tmp_path)
    assert gate(SPLIT, f)[0] == ExitStatus.EMPTY
    assert gate(f, SPLIT, NODELAY)[0] == ExitStatus.EMPTY
    assert gate(f, EMPTY)[0] == ExitStatus.BAD_CAPTURE
    assert gate("--allow-empty", f, SPLIT)[0] == ExitStatus.STALLS_FOUND


def test_empty_capture_fails_in_junit_and_github(tmp_path, junit_schema):
    f = no_tcp_capture(tmp_path)
    out = tmp_path / "nagle.xml"
    code, text = gate("--junit", str(out), "--github", f)
    assert code == ExitStatus.EMPTY
    junit_schema.validate(str(out))
    failure = ET.parse(out).getroot().find("testsuite/testcase/failure")
    assert failure.get("type") == "EmptyCapture"
    assert failure.get("message") == "no TCP flow in the capture"
    assert f"::error file={f},title=nagleprobe%3A nothing checked::no TCP flow" in text


GARBAGE = str(Path(__file__).resolve().parent / "broken" / "pcap_garbage_inserted.pcap")
GARBAGE_WARNING = ("corrupt record: captured length 4008636142 exceeds the limit of 262144 "
                   "bytes (record 25 at byte 2112); skipped 1000 bytes to the next valid record "
                   "at byte 3112")


def test_capture_warnings_show_in_text_junit_github_and_json(tmp_path, junit_schema):
    out = tmp_path / "nagle.xml"
    code, text = gate("--max-stalls", "100", "--junit", str(out), "--github", GARBAGE)
    assert code == ExitStatus.OK  # damage is shown, not fatal, without --strict
    lines = text.splitlines()
    assert f"  warning: {GARBAGE_WARNING}" in lines
    assert lines.index(f"  warning: {GARBAGE_WARNING}") == \
        next(i for i, line in enumerate(lines) if line.startswith(f"PASS {GARBAGE}")) + 1
    assert (f"::warning file={GARBAGE},title=nagleprobe%3A damaged capture::"
            f"{GARBAGE_WARNING}") in lines
    junit_schema.validate(str(out))
    err = ET.parse(out).getroot().find("testsuite/testcase[@name='capture']/system-err")
    assert err is not None and err.text == f"warning: {GARBAGE_WARNING}"
    _, doc = check_json("--max-stalls", "100", GARBAGE)
    assert doc["captures"][0]["check"]["warnings"] == [GARBAGE_WARNING]


def test_strict_makes_a_damaged_capture_unreadable():
    code, out = gate("--strict", "--max-stalls", "100", GARBAGE)
    assert code == ExitStatus.BAD_CAPTURE
    assert out.startswith(f"ERROR {GARBAGE}: corrupt record: captured length 4008636142")
    assert gate("--strict", "--max-stalls", "100", NODELAY)[0] == ExitStatus.OK


# ------------------------------------------------------------------ machine-readable outputs
def test_json_is_the_analyze_document_plus_the_check_verdict():
    code, doc = check_json(SPLIT, EMPTY)
    assert code == ExitStatus.BAD_CAPTURE
    assert (doc["passed"], doc["exit_status"]) == (False, 3)
    assert doc["budget"]["effective_max_stalls"] == 0
    split, empty = doc["captures"]
    chk = split.pop("check")
    assert split == nagleprobe.analyze(SPLIT).to_dict()
    assert chk["status"] == "fail" and chk["exit_status"] == 1
    assert chk["stalls"] == truth(SPLIT)["stalls"]
    assert chk["flows"][0]["status"] == "fail"
    assert empty["capture"] == {"path": EMPTY}
    assert empty["check"]["status"] == "unreadable" and "empty file" in empty["check"]["error"]


@pytest.fixture(scope="module")
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(JUNIT_XSD))


def test_junit_report_validates_against_the_jenkins_junit_schema(tmp_path, junit_schema):
    out = tmp_path / "nagle.xml"
    code, _ = gate("--junit", str(out), SPLIT, PROXY, NODELAY, EMPTY)
    assert code == ExitStatus.BAD_CAPTURE
    junit_schema.validate(str(out))  # raises on any violation
    tree = ET.parse(out).getroot()
    suites = tree.findall("testsuite")
    assert [s.get("name") for s in suites] == [SPLIT, PROXY, NODELAY, EMPTY]
    # a case per capture plus one per selected flow (proxy_any has two flows)
    assert [int(s.get("tests")) for s in suites] == [2, 3, 2, 1]
    assert [int(s.get("failures")) for s in suites] == [2, 2, 0, 0]
    assert int(suites[3].get("errors")) == 1
    flow_fail = suites[0].findall("testcase")[1].find("failure")
    t = truth(SPLIT)
    assert flow_fail.get("message") == f"capture: {t['stalls']} stalls, budget 0"
    assert f"held: {t['held_side']} {t['held_endpoint']}" in flow_fail.text
    assert re.search(r"client #\d+ [\d.]+  #\d+ [\d.]+  #\d+ [\d.]+  \d+\.\d ms  0\.\d\d",
                     flow_fail.text)
    assert tree.get("tests") == "8" and tree.get("failures") == "4" and tree.get("errors") == "1"


def test_the_schema_check_is_real(junit_schema):
    """The committed XSD rejects what CI systems would (a suite without its counts)."""
    assert not junit_schema.is_valid('<testsuites><testsuite name="x"/></testsuites>')
    assert junit_schema.is_valid(render_junit(CheckRun(Budget(), [check_capture(NODELAY,
                                                                                 Budget())])))


ANNOTATION = re.compile(r"^::(error|warning) file=([^,:]+),title=([^,:]+)::(.+)$")


def test_github_annotations_are_workflow_commands_with_escaped_properties():
    code, out = gate("--github", SPLIT, PROXY, EMPTY, "--max-stalls", "19")
    lines = [line for line in out.splitlines() if line.startswith("::")]
    parsed = [ANNOTATION.match(line) for line in lines]
    assert all(parsed), lines
    kinds = [(m.group(1), m.group(2)) for m in parsed]
    # errors first: the empty file; 19 stalls each are tolerated by the budget (warnings)
    assert kinds == [("error", EMPTY), ("warning", SPLIT), ("warning", PROXY)]
    assert parsed[0].group(3) == "nagleprobe%3A unreadable capture"
    assert parsed[1].group(3) == "Nagle stalls in flow 0 127.0.0.1%3A40000 -> 127.0.0.1%3A8000"
    assert "%0AFix: The client 127.0.0.1:40000" in parsed[1].group(4)
    code, out = gate("--github", SPLIT)
    assert out.startswith(f"::error file={SPLIT},title=Nagle stalls in flow 0 ")
    assert "over budget: capture: 19 stalls, budget 0" in out


def test_github_annotations_stop_at_github_s_limit_and_say_how_many_more():
    _, doc = check_json(str(SAMPLES))
    problems = sum(1 if c["check"]["error"] else
                   sum(f["status"] == "fail" for f in c["check"]["flows"])
                   for c in doc["captures"])
    assert problems > 10
    _, out = gate("--github", str(SAMPLES))
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(errors) == 10
    assert f"title=nagleprobe%3A {problems - 9} more::" in errors[-1]


def test_github_annotations_keep_json_output_parseable():
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "check", "--github", "--format",
                           "json", SPLIT], capture_output=True, text=True, cwd="/")
    assert proc.returncode == ExitStatus.STALLS_FOUND
    assert json.loads(proc.stdout)["passed"] is False
    assert proc.stderr.startswith("::error file=")


def test_exit_statuses_are_listed_in_help():
    out = " ".join(CliRunner().invoke(main, ["check", "--help"]).output.split())
    for status in (ExitStatus.OK, ExitStatus.STALLS_FOUND, ExitStatus.USAGE,
                   ExitStatus.BAD_CAPTURE, ExitStatus.INTERNAL, ExitStatus.EMPTY):
        assert f"{int(status)} " in out.split("Exit status:")[1]
    top = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    assert "5 capture not possible" in top and "127 command not found" in top
    assert "6 no TCP flow to check" in top


# ---------------------------------------------------------------------- --baseline
# the same client program against the same server, with Nagle on and with TCP_OFF_PATH
ON_PATH, OFF_PATH = SAMPLES / "echo_split_lo.pcap", SAMPLES / "echo_nodelay_lo.pcap"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, capture in (("on", ON_PATH), ("off", OFF_PATH)):
        out[name] = tmp_path_factory.mktemp("baseline") / f"{name}.json"
        out[name].write_text(nagleprobe.analyze(str(capture)).to_json())
    return out


def gated(*args: str):
    return CliRunner().invoke(main, ["check", "--no-config", *args])


def test_a_capture_worse_than_the_baseline_fails_and_says_where(saved):
    r = gated("--baseline", str(saved["off"]), str(ON_PATH))
    assert r.exit_code == ExitStatus.STALLS_FOUND
    assert (f"worse than the baseline {saved['off']}: 127.0.0.1 -> 127.0.0.1:8000: 0 -> 19 "
            "stalls") in r.output
    assert f"budget: no worse than the baseline {saved['off']}" in r.output


def test_with_a_baseline_and_no_limit_only_regressions_fail(saved):
    r = gated("--baseline", str(saved["on"]), str(ON_PATH), str(OFF_PATH))
    assert r.exit_code == ExitStatus.OK, r.output
    assert r.output.count("PASS ") == 2


def test_limits_still_hold_beside_the_baseline(saved):
    r = gated("--baseline", str(saved["on"]), "--max-stalls", "3", str(ON_PATH))
    assert r.exit_code == ExitStatus.STALLS_FOUND
    assert "19 stalls, budget 3" in r.output
    assert f"worse than the baseline {saved['on']}: " not in r.output  # (no regression)


def test_a_baseline_that_is_no_saved_report_is_a_usage_error(tmp_path):
    for bad in (ON_PATH, tmp_path / "missing.json"):
        r = gated("--baseline", str(bad), str(OFF_PATH))
        assert r.exit_code == ExitStatus.USAGE
        assert r.output.startswith(f"nagleprobe: error: {bad}: ") and r.output.count("\n") == 1
