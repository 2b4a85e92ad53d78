"""check_table: a verdict's flows as columns. Each flow's figures are those of its own
counted stalls (as a per-flow reading of the stalls table gives them), flow verdicts are
views of the columns, and the outputs written from the columns are the documents they
stand for (JUnit as ElementTree writes it, the JSON as the analyze document plus "check")."""

import json
import pickle
import xml.etree.ElementTree as ET

import pytest
from replicate import replicate

import nagleprobe
from nagleprobe import check
from nagleprobe.check import Budget, CheckRun, check_capture, evaluate
from nagleprobe.check_output import render_github, render_junit
from nagleprobe.check_table import FlowVerdict, FlowViews
from nagleprobe.json_report import stall_docs

SOURCES = ["echo_split_lo.pcap", "excerpt_echo_split_lo.pcap", "echo_nodelay_lo.pcap",
           "server_split_lo.pcap", "confirm_netns_client.pcap"]


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> str:
    """Thirty copies of stalled and clean conversations: 150 flows."""
    path = tmp_path_factory.mktemp("many") / "many.pcap"
    path.write_bytes(replicate(SOURCES, copies=30, every_ns=7_000_000, port_step=11))
    return str(path)


def own_figures(report, budget: Budget) -> dict[int, tuple[int, float, float, list]]:
    """Per flow with counted stalls, read from its own rows of the stalls table: count,
    time lost, lost share and its first EVIDENCE_ROWS stalls in analyze's JSON shape."""
    st = report.stalls
    counted = st[st["confidence"] >= budget.min_confidence]
    dur = dict(zip(report.flows["id"], report.flows["duration_s"]))
    out = {}
    for flow, rows in counted.groupby("flow"):
        ms = round(float(rows["delay_ms"].sum()), 3)
        share = round(100 * ms / 1e3 / dur[flow], 2) if dur[flow] > 0 else 0.0
        first = {k: rows[k].to_numpy() for k in rows.columns}
        out[int(flow)] = (len(rows), ms, share,
                          stall_docs(first, ("sender", "delay_ms"))[:check.EVIDENCE_ROWS])
    return out


@pytest.mark.parametrize("budget", [Budget(), Budget(min_confidence=0.9),
                                    Budget(max_lost_share=50.0, max_stalls=10_000)])
def test_each_flow_s_figures_are_those_of_its_own_stalls(many, budget, monkeypatch):
    monkeypatch.setattr(check, "EVIDENCE_ROWS", 5)  # some flows have more stalls than kept
    report = nagleprobe.analyze(many)
    v = evaluate(report, budget)
    want = own_figures(report, budget)
    assert [f.id for f in v.flows] == sorted(want)
    for f in v.flows:
        n, ms, share, evidence = want[f.id]
        assert (f.stalls, f.stall_ms, f.lost_share_pct, f.evidence) == (n, ms, share, evidence)
        over = budget.max_lost_share is not None and share > budget.max_lost_share
        # without max_stalls no stall is allowed: the capture fails, and every flow with it
        assert f.passed == (not over and budget.max_stalls is not None)
    assert v.stalls == sum(n for n, *_ in want.values())
    assert v.stall_ms == round(sum(ms for _, ms, *_ in want.values()), 3)
    assert len(v.clean_flows) == v.flows_selected - len(v.flows) > 0


def test_flow_verdicts_are_views_of_the_verdict_s_columns(many):
    v = check_capture(many, Budget(max_lost_share=50.0, max_stalls=10_000))
    assert isinstance(v.flows, FlowViews) and len(v.flows) == len(v.table)
    f = v.flows[3]
    assert isinstance(f, FlowVerdict) and f.name == f"flow {f.id} {f.client} -> {f.server}"
    assert f.fix is None or set(f.fix) >= {"side", "endpoint", "action", "text"}
    failing = v.failing_flows
    assert [g.id for g in failing] == [g.id for g in v.flows if not g.passed]
    assert 0 < len(failing) < len(v.flows)
    assert all(g.reasons[-1].endswith("budget 50%") for g in failing)


def test_junit_is_what_elementtree_writes_of_the_same_tree(many):
    run = CheckRun(Budget(max_lost_share=50.0), [check_capture(many, Budget(max_lost_share=50.0))])
    text = render_junit(run)
    head, body = text.split("\n", 1)
    root = ET.fromstring(body)
    ET.indent(root)
    assert ET.tostring(root, encoding="unicode") + "\n" == body
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == int(root.get("tests")) == 1 + run.verdicts[0].flows_selected
    assert int(root.get("failures")) == sum(c.find("failure") is not None for c in cases)


def test_github_shows_ten_annotations_and_counts_the_rest(many):
    v = check_capture(many, Budget())
    lines = render_github(CheckRun(Budget(), [v])).splitlines()
    errors = [x for x in lines if x.startswith("::error ")]
    assert len(errors) == 10
    more = len(v.flows) - 9
    assert errors[-1].startswith(f"::error file={many.replace(':', '%3A')},"
                                 f"title=nagleprobe%3A {more} more::")
    worst = max(v.flows, key=lambda f: (f.stall_ms, -f.id))
    assert worst.name.replace(":", "%3A") in errors[0]  # the worst first


def test_the_json_is_the_analyze_document_plus_the_check_object(many):
    run = CheckRun(Budget(), [check_capture(many, Budget(), with_document=True)])
    doc = json.loads("".join(run.json_pieces()))
    capture = doc["captures"][0]
    chk = capture.pop("check")
    assert capture == json.loads(nagleprobe.analyze(many).to_json())
    assert [f["id"] for f in chk["flows"]] == [f.id for f in run.verdicts[0].flows]
    assert chk["flows"][0] == run.verdicts[0].flows[0].to_dict()


def test_a_verdict_crosses_processes_with_its_document_as_text(many):
    v = check_capture(many, Budget(), with_document=True)
    text = "".join(v.json_pieces())
    copy = pickle.loads(pickle.dumps(v))
    assert copy._report is None and copy._document_text
    assert "".join(copy.json_pieces()) == text
    assert copy.document == v.document and copy.document["capture"]["path"] == many
