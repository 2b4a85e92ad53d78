"""compare: two reports of one service side by side. Connections are matched by server
endpoint and client host (ports change between runs); a saved JSON report compares as its
capture does; a worse second report is named, group by group (the gate's --baseline)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import nagleprobe
from nagleprobe.cli import main
from nagleprobe.compare import compare, groups, nagle_state, regressions, render_text

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
# the same client program against the same server, with Nagle on and with TCP_NODELAY
NAGLE_ON, NODELAY = SAMPLES / "echo_split_lo.pcap", SAMPLES / "echo_nodelay_lo.pcap"
SCHEMA = json.loads((ROOT / "nagleprobe" / "schema" / "compare.schema.json").read_text())


@pytest.fixture(scope="module")
def docs() -> tuple[dict, dict]:
    return (nagleprobe.analyze(str(NAGLE_ON)).to_dict(), nagleprobe.analyze(str(NODELAY)).to_dict())


def test_connections_are_matched_by_server_and_client_host_not_port(docs):
    before, after = docs
    assert before["flows"][0]["client"] != after["flows"][0]["client"]  # other client ports
    assert list(groups(before)) == list(groups(after)) == [("127.0.0.1", "127.0.0.1:8000")]
    (g,) = compare(*docs)["groups"]
    assert (g["before"]["flows"], g["after"]["flows"]) == (1, 1)


def test_the_fix_shows_as_nagle_on_to_off_and_the_stalls_gone(docs):
    before, after = docs
    (g,) = compare(before, after)["groups"]
    assert g["before"]["stalls"] == before["summary"]["stalls"] > 0
    assert g["after"]["stalls"] == 0
    assert g["before"]["sides"]["client"]["nagle"] == "on"
    assert g["after"]["sides"]["client"]["nagle"] == "off"
    assert g["before"]["max_stall_ms"] == max(s["delay_ms"] for s in before["stalls"])
    text = render_text(compare(before, after))
    assert f"stalls {before['summary']['stalls']} -> 0" in text
    assert "client 127.0.0.1: Nagle on -> off" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_worse_second_report_is_a_regression_and_a_better_one_is_not(docs):
    before, after = docs
    assert regressions(compare(before, after)) == []
    assert regressions(compare(before, before)) == []
    worse = regressions(compare(after, before))
    assert worse == [f"127.0.0.1 -> 127.0.0.1:8000: 0 -> {before['summary']['stalls']} stalls"]


def test_more_time_lost_beyond_the_tolerance_is_a_regression(docs):
    before = docs[0]
    slower = json.loads(json.dumps(before))
    slower["flows"][0]["stall_ms"] *= 1.5
    assert len(regressions(compare(before, slower))) == 1
    assert regressions(compare(before, slower), tolerance=0.6) == []


def test_a_side_whose_flows_disagree_is_mixed_and_unknown_flows_do_not_count():
    assert nagle_state({"on", "unknown"}) == "on"
    assert nagle_state({"on", "off"}) == "mixed"
    assert nagle_state({"unknown"}) == nagle_state(set()) == "unknown"


def test_the_command_compares_a_saved_report_with_a_capture(tmp_path):
    saved = tmp_path / "before.json"
    r = CliRunner().invoke(main, ["analyze", "--format", "json", "-o", str(saved), str(NAGLE_ON)])
    assert r.exit_code == 0, r.output
    from_json = CliRunner().invoke(main, ["compare", str(saved), str(NODELAY), "--format", "json"])
    from_pcap = CliRunner().invoke(main, ["compare", str(NAGLE_ON), str(NODELAY), "--format",
                                          "json"])
    assert from_json.exit_code == from_pcap.exit_code == 0
    assert json.loads(from_json.output) == json.loads(from_pcap.output)
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(from_json.output))


def test_a_json_file_that_is_no_report_is_one_line_and_status_3(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    r = CliRunner().invoke(main, ["compare", str(other), str(NODELAY)])
    assert r.exit_code == 3
    assert r.output.count("\n") == 1 and "not a nagleprobe JSON report" in r.output


def test_the_output_file_may_not_be_an_input(tmp_path):
    r = CliRunner().invoke(main, ["compare", str(NAGLE_ON), str(NODELAY), "-o", str(NODELAY)])
    assert r.exit_code == 2
    assert NODELAY.read_bytes()[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4")


def test_long_paths_are_broken_after_their_slashes_within_80_columns(tmp_path, docs):
    deep = tmp_path / ("d" * 50) / ("e" * 30) / ("f" * 90)  # a name longer than the line
    deep.mkdir(parents=True)
    path = deep / "echo_split_lo.pcap"
    path.write_bytes(NAGLE_ON.read_bytes())
    before = nagleprobe.analyze(str(path)).to_dict()
    text = render_text(compare(before, docs[1]))
    assert max(len(line) for line in text.splitlines()) <= 80
    head = text.split("\nafter", 1)[0].splitlines()
    assert head[0] == "before:" and "".join(x.strip() for x in head[1:]) == str(path)


def test_the_fix_shows_in_the_requests_p50_and_p99(docs):
    """Per group, the requests and their p50/p99 latency before -> after: with one flow, the
    flow's own (numpy's percentiles of its exchanges, test_exchanges)."""
    before, after = docs
    (g,) = compare(before, after)["groups"]
    for doc, facts in ((before, g["before"]), (after, g["after"])):
        (f,) = doc["flows"]
        assert (facts["requests"], facts["latency_p50_ms"], facts["latency_p99_ms"]) == (
            f["requests"], f["latency_p50_ms"], f["latency_p99_ms"])
    assert g["before"]["latency_p99_ms"] > 40 > 1 > g["after"]["latency_p99_ms"]
    text = render_text(compare(before, after))
    p99 = [line for line in text.splitlines() if "; p99 " in line]
    assert p99 == [f"  requests 20 (same); p50 {g['before']['latency_p50_ms']:.1f} ms -> "
                   f"{g['after']['latency_p50_ms']:.2f} ms; p99 "
                   f"{g['before']['latency_p99_ms']:.1f} ms -> "
                   f"{g['after']['latency_p99_ms']:.2f} ms"]
    jsonschema.validate(compare(before, after), SCHEMA)


def test_a_higher_p99_beyond_10_percent_and_1_ms_is_a_regression(docs):
    """Without more stalls or time lost, a p99 latency higher by more than 10 % and 1 ms
    fails the gate; within either bound it does not."""
    _, after = docs
    was = after["flows"][0]["latency_p99_ms"]
    for p99, worse in ((was + 0.9, False), (was * 1.1 + 1.01, True), (was + 5, True)):
        now = json.loads(json.dumps(after))
        now["flows"][0]["latency_p99_ms"] = p99
        got = regressions(compare(after, now))
        assert bool(got) == worse
        if worse:
            assert got == [f"127.0.0.1 -> 127.0.0.1:8000: p99 latency {was:.2f} ms -> "
                           f"{p99:.1f} ms"]


def test_a_report_saved_before_requests_were_counted_still_compares(docs):
    _, after = docs
    old = json.loads(json.dumps(after))
    for f in old["flows"]:
        for k in ("requests", "latency_p50_ms", "latency_p99_ms"):
            del f[k]
    (g,) = compare(old, after)["groups"]
    assert g["before"]["requests"] == 0 and g["before"]["latency_p99_ms"] is None
    assert g["after"]["requests"] == 20
    assert regressions(compare(old, after)) == []
