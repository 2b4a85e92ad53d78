"""Wireshark display filters: every filter nagleprobe prints is run through tshark on the
samples and must select exactly the flow's frames / the stall frames."""

import json
import subprocess
import sys

import numpy as np
import pytest
from test_annotate import SAMPLES, TSHARK, WIRESHARK_CHECKED, needs_tshark, stall_frames

import nagleprobe
from nagleprobe import wireshark
from oracle import analyze_whole


def cli(*args):
    done = subprocess.run([sys.executable, "-m", "nagleprobe", *args], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def printed_filters(text):
    """{flow id: (flow filter, stall frames filter)} from `analyze --format wireshark`."""
    out, fid = {}, None
    for line in text.splitlines():
        if line.startswith("flow "):
            fid = int(line.split()[1].rstrip(":"))
        elif line.startswith("  flow:   "):
            flow_filter = line[len("  flow:   "):]
        elif line.startswith("  stalls: "):
            out[fid] = (flow_filter, line[len("  stalls: "):])
    return out


def selected(path, display_filter):
    done = subprocess.run([TSHARK, "-r", str(path), "-Y", display_filter, "-T", "fields", "-e",
                           "frame.number"], capture_output=True, text=True, check=True)
    return [int(f) for f in done.stdout.split()]


@needs_tshark
@pytest.mark.parametrize("name", WIRESHARK_CHECKED)
def test_every_printed_filter_selects_exactly_its_frames(name):
    path = SAMPLES / name
    report = nagleprobe.analyze(str(path))
    segments = analyze_whole(str(path)).segments
    doc = json.loads(report.to_json())
    text = printed_filters(wireshark.render_filters(report))  # what the CLI prints
    stalled = [f["id"] for f in doc["flows"] if f["stalls"]]
    assert sorted(text) == stalled
    in_flows = set(segments["frame"].tolist())
    for f in doc["flows"]:
        ws = f["wireshark"]
        if f["id"] in text:
            assert text[f["id"]] == (ws["flow_filter"], ws["stall_frames_filter"])
        mine = sorted(segments.loc[segments["flow"] == f["id"], "frame"].tolist())
        got = selected(path, ws["flow_filter"])
        if doc["capture"]["skipped"]:  # packets nagleprobe could not decode may belong to it
            assert set(mine) <= set(got) and not (set(got) - set(mine)) & in_flows
        else:
            assert got == mine, ws["flow_filter"]
        if f["stalls"]:
            assert selected(path, ws["stall_frames_filter"]) == stall_frames(
                report.flow(f["id"]))
        else:
            assert ws["stall_frames_filter"] is None
    if not doc["capture"]["skipped"]:
        assert doc["flows"][0]["wireshark"]["flow_filter"].startswith("tcp.stream eq ")


def test_tcp_stream_is_the_rank_by_first_frame_and_stops_at_a_reused_four_tuple():
    cap = {"skipped": {}, "warnings": []}
    client = np.array(["a:1", "a:2", "a:1", "a:3"], dtype=object)
    server = np.array(["b:9"] * 4, dtype=object)
    first = np.array([5, 1, 40, 60])
    assert wireshark.tcp_streams(first, client, server, cap).tolist() == [1, 0, -1, -1]
    # the same tuple in the other direction is the same conversation
    assert wireshark.tcp_streams(np.array([1, 2]), np.array(["a:1", "b:9"], dtype=object),
                                 np.array(["b:9", "a:1"], dtype=object), cap).tolist() == [0, -1]
    # a duplicate copy belongs to a conversation already counted
    assert wireshark.tcp_streams(first, client, server, {"skipped": {"duplicate": 3},
                                                         "warnings": []}).tolist() == [1, 0, -1, -1]
    for bad in ({"skipped": {"not-tcp": 1}, "warnings": []},
                {"skipped": {}, "warnings": ["truncated"]}):
        assert wireshark.tcp_streams(first, client, server, bad).tolist() == [-1] * 4


def test_fallback_filter_names_both_endpoints_and_the_frame_range():
    assert wireshark.flow_filter("[::1]:40000", "[::1]:8000", None, 3, 48) == (
        "ipv6.addr==::1 && tcp.port==40000 && ipv6.addr==::1 && tcp.port==8000 && "
        "frame.number >= 3 && frame.number <= 48")
    assert wireshark.flow_filter("10.0.0.1:1", "10.0.0.2:2", 4, 3, 48) == "tcp.stream eq 4"
    assert wireshark.frames_filter([12, 10, 11, 10]) == "frame.number in {10,11,12}"
    assert wireshark.frames_filter([]) is None


def test_port_reuse_second_flow_gets_the_address_filter_and_the_tables_the_columns():
    r = nagleprobe.analyze(str(SAMPLES / "formats/port_reuse.pcap"))
    assert r.flows["first_frame"].tolist() == [1, 27]
    assert r.flows["last_frame"].tolist() == [26, 52]
    assert r.flows["tcp_stream"].tolist()[0] == 0 and r.flows["tcp_stream"].isna().tolist()[1]
    docs = r.to_dict()["flows"]
    assert docs[0]["tcp_stream"] == 0 and docs[1]["tcp_stream"] is None
    assert docs[1]["wireshark"]["flow_filter"].endswith("frame.number >= 27 && "
                                                        "frame.number <= 52")
    whole = analyze_whole(str(SAMPLES / "formats/port_reuse.pcap"))
    assert whole.to_dict() == r.to_dict()


def test_cli_prints_the_filters_the_json_gives():
    path = SAMPLES / "proxy_any_sll2.pcap"
    text = printed_filters(cli("analyze", "--format", "wireshark", str(path)))
    doc = json.loads(cli("analyze", "--format", "json", str(path)))
    assert text == {f["id"]: tuple(f["wireshark"].values()) for f in doc["flows"] if f["stalls"]}


def test_clean_capture_prints_no_filters():
    out = cli("analyze", "--format", "wireshark", str(SAMPLES / "echo_nodelay_lo.pcap"))
    assert "No Nagle/delayed-ACK stalls" in out and "frame.number" not in out


def test_html_report_and_notebook_show_the_filters_of_each_stalled_flow():
    r = nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"))
    ws = r.to_dict()["flows"][1]["wireshark"]
    page, view = r.to_html(plots=False), r._repr_html_()
    for html in (page, view):
        assert f">{ws['flow_filter']}</code>" in html
        assert f">{ws['stall_frames_filter']}</code>" in html
    # a selection keeps the numbers of the whole capture
    assert f">{ws['flow_filter']}</code>" in r.flow(1)._repr_html_()
