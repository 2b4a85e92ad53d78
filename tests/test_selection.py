"""Selection (issue 14): `analyze --port/--host/--flow/--top/--min-confidence`, `check`'s
options of the same names and `Report.select(...)` choose the same flows and ignore the same
stalls, in every output, and say what they chose."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import nagleprobe
from nagleprobe.json_report import json_schema

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
PROXY = str(SAMPLES / "proxy_any.pcap")  # flow 0 client -> :8001 clean, flow 1 -> :8002 19 stalls
BRIDGE = str(SAMPLES / "bridge_any.pcap")  # one flow: 19 stalls at 0.95 (ACK delays 43-52 ms)
# read as one capture with BRIDGE: one more flow, whose single stall has confidence 0.6
EXCERPT = str(SAMPLES / "excerpt_echo_split_lo.pcap")


def nagleprobe_cmd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagleprobe", *args], capture_output=True,
                          text=True, timeout=300)


def analyze_json(*args: str) -> dict:
    r = nagleprobe_cmd("analyze", "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_analyze_port_reports_only_the_flows_on_that_port_and_says_so():
    r = nagleprobe_cmd("analyze", "--port", "8002", PROXY)
    assert r.returncode == 0, r.stderr
    assert "selected: 1 of 2 flows (port 8002)" in r.stdout
    assert "Flows without stalls" not in r.stdout and "Flow 1: " in r.stdout
    assert "19 stalls in 1 of 1 TCP flow" in r.stdout


def test_analyze_json_gets_a_selection_object_and_only_the_selected_flows():
    doc = analyze_json("--port", "8001", "--port", "8002", "--host", "127.0.0.0/8", PROXY)
    sel = doc["selection"]
    assert sel["ports"] == [8001, 8002] and sel["hosts"] == ["127.0.0.0/8"]
    assert (sel["flows_total"], sel["flows_selected"], sel["stalls_ignored"]) == (2, 2, 0)
    doc = analyze_json("--host", "10.0.0.0/8", PROXY)  # no flow there
    assert doc["selection"]["flows_selected"] == 0 and doc["flows"] == [] and doc["stalls"] == []
    whole = analyze_json(PROXY)
    assert whole["selection"] is None and len(whole["flows"]) == 2


def test_the_selection_object_is_in_the_schema():
    doc = analyze_json("--flow", "1", "--min-confidence", "0.5", "--top", "3", PROXY)
    jsonschema.Draft202012Validator(json_schema()).validate(doc)
    assert doc["selection"]["flows"] == [1] and doc["selection"]["top"] == 3


def test_min_confidence_removes_the_ignored_stalls_and_recounts_the_flows():
    whole = nagleprobe.analyze([EXCERPT, BRIDGE])
    assert sorted(whole.stalls["confidence"].value_counts().items()) == [(0.6, 1), (0.95, 19)]
    doc = analyze_json("--min-confidence", "0.9", EXCERPT, BRIDGE)
    assert len(doc["stalls"]) == 19 and {s["confidence"] for s in doc["stalls"]} == {0.95}
    assert doc["summary"]["stalls"] == 19 == doc["flows"][1]["stalls"]
    assert doc["flows"][0]["stalls"] == 0 and doc["flows"][0]["fix"] is None
    kept_ms = sum(s["delay_ms"] for s in doc["stalls"])
    assert doc["flows"][1]["stall_ms"] == pytest.approx(kept_ms, abs=1e-3)
    assert doc["selection"]["stalls_ignored"] == 1
    text = nagleprobe_cmd("analyze", "--min-confidence", "0.9", EXCERPT, BRIDGE).stdout
    assert "selected: 2 of 2 flows (confidence >= 0.9); 1 stall below confidence 0.9 " \
           "ignored" in text
    assert "19 stalls in 1 of 2 TCP flows" in text


def test_a_flow_whose_stalls_are_all_ignored_has_no_stalls_and_no_fix():
    r = nagleprobe.analyze(PROXY).select(min_confidence=1.0)
    assert r.stalls.empty and r.flows["stalls"].tolist() == [0, 0]
    assert r.flows["fix_action"].isna().all() and r.flows["stall_ms"].tolist() == [0.0, 0.0]
    assert r.selection["stalls_ignored"] == 19


def test_top_is_report_worst_and_flow_is_report_flow():
    whole = nagleprobe.analyze(PROXY)
    assert analyze_json("--top", "5", PROXY)["flows"] == json.loads(
        whole.worst(5).to_json())["flows"]
    assert [f["id"] for f in analyze_json("--flow", "0", PROXY)["flows"]] == [0]
    assert whole.select(flow=0).flows.equals(whole.flow(0).flows)


def test_an_unknown_flow_id_is_a_usage_error():
    r = nagleprobe_cmd("analyze", "--flow", "7", PROXY)
    assert r.returncode == 2 and "no flow 7" in r.stderr and r.stdout == ""


def test_a_bad_host_is_a_usage_error_as_in_check():
    for cmd in ("analyze", "check"):
        r = nagleprobe_cmd(cmd, "--host", "nope", PROXY)
        assert r.returncode == 2 and "not an IP address or network: 'nope'" in r.stderr


def test_selection_applies_to_the_wireshark_filters():
    out = nagleprobe_cmd("analyze", "--format", "wireshark", "--port", "8001", PROXY).stdout
    assert "8002" not in out
    out = nagleprobe_cmd("analyze", "--format", "wireshark", "--port", "8002", PROXY).stdout
    assert "8002" in out


@pytest.mark.parametrize("args", [["--port", "8002"], ["--port", "8001"],
                                  ["--host", "127.0.0.1"], ["--host", "10.0.0.0/8"],
                                  ["--port", "8001", "--host", "127.0.0.0/24"],
                                  ["--min-confidence", "0.95"]])
def test_check_and_analyze_select_the_same_flows_and_stalls(args):
    doc = analyze_json(*args, PROXY)
    r = nagleprobe_cmd("check", "--no-config", "--allow-empty", "--format", "json", *args, PROXY)
    verdict = json.loads(r.stdout)["captures"][0]["check"]
    assert verdict["flows_selected"] == doc["selection"]["flows_selected"]
    assert verdict["stalls"] == doc["summary"]["stalls"]
    assert verdict["ignored_stalls"] == doc["selection"]["stalls_ignored"]


def test_report_select_takes_one_value_or_a_list_with_the_cli_s_names():
    r = nagleprobe.analyze(PROXY)
    assert r.select(port=[8001, 8002]).flows["id"].tolist() == [0, 1]
    assert r.select(host="127.0.0.0/8", port=8002).flows["id"].tolist() == [1]
    assert r.select(host=["10.0.0.1", "::1"]).flows.empty
    assert r.select(flow=[1, 0]).flows["id"].tolist() == [0, 1]  # in the capture's order
    assert r.select(top=1).flows["id"].tolist() == [1]
    assert r.select(port=8001, top=1).flows.empty  # flow 0 has no stalls
    sel = r.select(port=8002).select(min_confidence=0.9).selection
    assert sel["flows_total"] == 2 and sel["text"] == "port 8002, then confidence >= 0.9"
    with pytest.raises(ValueError, match="not an IP address"):
        r.select(host="nope")
    with pytest.raises(KeyError, match="no flow 9"):
        r.select(flow=9)
    with pytest.raises(ValueError, match="min_confidence"):
        r.select(min_confidence=2)
    assert r.selection is None and r.flow(1).selection is None


# ------------------------------------------------------------------ numbers for people
def test_counts_get_thousands_separators_and_times_from_a_second_seconds():
    from nagleprobe.report import human_count, human_ms
    from nagleprobe.humanize import json_ms

    assert human_count(12345) == "12,345" and human_count(7) == "7"
    assert human_ms(832.0) == "832.0 ms" and human_ms(999.94) == "999.9 ms"
    assert human_ms(1000) == "1.00 s" and human_ms(3988.7) == "3.99 s"
    assert human_ms(3712847.8) == "3,712.8 s" and human_ms(10_000) == "10.0 s"
    # the JSON document's sentences keep their wording: ms up to 10 s
    assert json_ms(9999.94) == "9999.9 ms" and json_ms(3712847.8) == "3,712.8 s"


def big(report):
    """The report with a day-long flow's numbers: 1,234,567 packets, 12,345 stalls."""
    fl = report.flows.copy()
    fl["packets"], fl["stalls"], fl["stall_ms"] = 12345, 12345, 3712847.8
    cap = dict(report.capture, packets=1234567, tcp_packets=1234560)
    return nagleprobe.Report(cap, fl, report.stalls, report.endpoints)


def test_the_text_report_writes_large_numbers_and_times_for_people(echo_split):
    r = big(echo_split)
    text = r.to_text(1000)
    assert "1,234,567 packets, 1,234,560 TCP" in text
    assert "in 1 of 1 TCP flow, costing 3,712.8 s." in text  # the verdict
    assert "(12,345 packets)" in text and "\n     0  12,345  3,712.8 s  client  " in text
    assert "12,345 stalls, 3,712.8 s lost" in text
    assert "3712847.8" not in text
    from nagleprobe.advice import fix_text

    fix = fix_text(0, "10.0.0.1:40000", 41.0, 12345, 3712847.8, "peer-answered", 6, 7)
    assert ("12,345 writes waited for the server's delayed ACK (~41 ms, typical of Linux), "
            "costing 3,712.8 s") in fix
    doc = r.to_dict()  # the JSON keeps its numbers
    assert doc["summary"]["stall_ms"] == 3712847.8 and doc["capture"]["packets"] == 1234567


def test_check_s_verdict_writes_large_numbers_and_times_for_people():
    from nagleprobe.check import Budget, CaptureVerdict, CheckRun, FlowVerdict
    from nagleprobe.check_output import render_text
    from nagleprobe.errors import ExitStatus

    f = FlowVerdict(id=3, client="10.0.0.1:40000", server="10.0.0.2:8000", stalls=12345,
                    stall_ms=3712847.8, lost_share_pct=42.0, duration_s=8840.1, passed=False)
    v = CaptureVerdict(path="day.pcap", status=ExitStatus.STALLS_FOUND, flows=[f],
                       flows_total=40000, flows_selected=1234, stalls=12345,
                       stall_ms=3712847.8, ignored_stalls=2000)
    text = render_text(CheckRun(Budget(), [v]))
    assert text.startswith("FAIL day.pcap: 12,345 stalls, 3,712.8 s lost in 1,234 of 40,000 "
                           "flows selected; 2,000 below the confidence floor ignored")
    assert "flow 3 10.0.0.1:40000 -> 10.0.0.2:8000: 12,345 stalls, 3,712.8 s = 42.0%" in text
