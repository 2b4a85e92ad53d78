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
from nagleprobe.report import json_schema

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
PROXY = str(SAMPLES / "proxy_any.pcap")  # flow 0 client -> :8001 clean, flow 1 -> :8002 19 stalls
BRIDGE = str(SAMPLES / "bridge_any.pcap")  # one flow: 17 stalls at 0.9, 2 at 0.95


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
    whole = nagleprobe.analyze(BRIDGE)
    assert sorted(whole.stalls["confidence"].value_counts().items()) == [(0.9, 17), (0.95, 2)]
    doc = analyze_json("--min-confidence", "0.95", BRIDGE)
    assert len(doc["stalls"]) == 2 and {s["confidence"] for s in doc["stalls"]} == {0.95}
    assert doc["summary"]["stalls"] == 2 == doc["flows"][0]["stalls"]
    kept_ms = sum(s["delay_ms"] for s in doc["stalls"])
    assert doc["flows"][0]["stall_ms"] == pytest.approx(kept_ms, abs=1e-3)
    assert doc["selection"]["stalls_ignored"] == 17
    text = nagleprobe_cmd("analyze", "--min-confidence", "0.95", BRIDGE).stdout
    assert "selected: 1 of 1 flow (confidence >= 0.95); 17 stalls below confidence 0.95 " \
           "ignored" in text
    assert "2 stalls in 1 of 1 TCP flow" in text


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
