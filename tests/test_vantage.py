"""vantage: captures of one connection taken at several places are told apart from a file
set, analysed each on its own and joined per connection (docs/DETECTION.md, "Several
vantages"). The samples long_*_{client,middle,server} are one run captured at three places
on one host (one clock), through forwarder.py's two hops of equal delay (samples/README.md)."""

import copy
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

import nagleprobe
from nagleprobe.cli import main
from nagleprobe.json_report import json_schema
from nagleprobe.vantage import TABLE_COLUMNS, _offset, vantage_groups

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
FIELD = Path("/work/shared/field")
PLACES = ("client", "server", "middle")
# run name -> (one-way delay client to server in ms, stalls at each vantage, side to fix)
RUNS = {"long_echo_split_rtt80": (40, 19, "client"), "long_echo_split_rtt200": (100, 9, "client"),
        "long_server_split_rtt80": (40, 19, "server"),
        "long_server_split_rtt200": (100, 9, "server"), "confirm_netns": (5, 19, "client")}


def files(run: str) -> list[str]:
    return [str(SAMPLES / f"{run}_{p}.pcap") for p in PLACES]


@pytest.fixture(scope="module")
def joined():
    return {run: nagleprobe.analyze(files(run)) for run in RUNS}


def test_the_issue_s_command_reports_the_19_stalls_and_the_vantages():
    out = CliRunner().invoke(main, ["analyze", *files("long_echo_split_rtt80")])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # the lines are wrapped to 80 columns
    assert "No Nagle/delayed-ACK stalls" not in text
    assert "stalls found: 19 stalls in 1 of 1 TCP flow" in text
    assert "from 3 places (vantages)" in text
    section = text.split(" Vantages: 3 capture points", 1)[1]
    assert "stalls 19 (v1) / 19 (v2) / 19 (v3); fix on the client at every vantage" in section
    assert "in the server's delayed ACK" in section


@pytest.mark.parametrize("run", RUNS)
def test_every_vantage_finds_the_stalls_and_names_the_same_side(joined, run):
    _, stalls, side = RUNS[run]
    doc = joined[run].vantage_doc
    assert [f["paths"] for f in doc["files"]] == [[p] for p in files(run)]
    (c,) = doc["connections"]
    assert [v["stalls"] for v in c["vantages"]] == [stalls] * 3
    assert [v["fix_side"] for v in c["vantages"]] == [side] * 3
    assert c["agree"] and c["fix_side"] == side
    assert joined[run].stall_count == stalls  # the report is vantage 1's, never the merge's


@pytest.mark.parametrize("run", RUNS)
def test_one_host_clock_gives_no_offset_and_the_configured_delays(joined, run):
    one_way, _, _ = RUNS[run]
    clocks = {Path(c["to"]).stem.rsplit("_", 1)[1]: c for c in joined[run].vantage_doc["clocks"]}
    assert set(clocks) == {"server", "middle"}
    assert all(Path(c["from"]).name == f"{run}_client.pcap" for c in clocks.values())
    for c in clocks.values():
        assert abs(c["offset_ms"]) < 0.5  # one clock: only the hops' asymmetry
    assert clocks["server"]["one_way_ms"] == pytest.approx(one_way, abs=1)
    assert clocks["middle"]["one_way_ms"] == pytest.approx(one_way / 2, abs=1)


@pytest.mark.parametrize("run", RUNS)
def test_the_time_split_adds_up_to_the_stall_and_puts_the_wait_at_the_peer(joined, run):
    one_way, stalls, side = RUNS[run]
    (c,) = joined[run].vantage_doc["connections"]
    sp = c["split"]
    peer = "server" if side == "client" else "client"
    at = {v["vantage"]: v for v in c["vantages"]}
    assert sp["sender"] == side and sp["stalls"] == stalls
    # the sender's vantage is the file at the sender, the peer's the file at the peer
    assert at[sp["sender_vantage"]]["file"].endswith(f"_{side}.pcap")
    assert at[sp["peer_vantage"]]["file"].endswith(f"_{peer}.pcap")
    assert sp["stack_ms"] + sp["path_ms"] + sp["peer_ack_ms"] == pytest.approx(sp["held_ms"],
                                                                              abs=0.005)
    assert sp["held_ms"] == pytest.approx(at[sp["sender_vantage"]]["stall_ms"], abs=0.005)
    per = {k: sp[k] / stalls for k in ("stack_ms", "path_ms", "peer_ack_ms")}
    assert per["path_ms"] == pytest.approx(2 * one_way, abs=3)  # there and back
    assert 30 <= per["peer_ack_ms"] <= 60  # Linux's delayed ACK (samples/README.md ~43 ms)
    assert per["stack_ms"] < 1


def test_the_vantages_table_has_a_row_per_connection_and_vantage(joined):
    r = joined["long_echo_split_rtt80"]
    t = r.vantages
    assert list(t.columns) == list(TABLE_COLUMNS)
    assert t["vantage"].tolist() == [1, 2, 3]
    assert t["file"].tolist() == files("long_echo_split_rtt80")
    assert (t["stalls"] == 19).all() and t["agree"].all()
    # the capture point's round trips: near the client at v1, near the server at v2, between
    assert t["rtt_client_ms"].tolist()[0] < 1 and t["rtt_server_ms"].tolist()[1] < 1
    assert 35 < t["rtt_client_ms"].tolist()[2] < 45
    one = nagleprobe.analyze(files("long_echo_split_rtt80")[0])
    assert one.vantage_doc is None and one.vantages.empty


def test_the_json_document_carries_the_vantages_and_validates_strictly(joined):
    from test_json_schema import STRICT

    doc = json.loads(joined["long_echo_split_rtt80"].to_json())
    STRICT.validate(doc)
    assert doc["vantages"] == joined["long_echo_split_rtt80"].vantage_doc
    bad = copy.deepcopy(doc)
    bad["vantages"]["connections"][0]["split"]["new_field"] = 1
    assert not STRICT.is_valid(bad)
    assert "vantages" not in json.loads(nagleprobe.analyze(files("confirm_netns")[0]).to_json())
    jsonschema.Draft202012Validator.check_schema(json_schema())


def test_a_selection_keeps_the_vantages(joined):
    sub = joined["confirm_netns"].select(port=8000)
    assert sub.vantage_doc == joined["confirm_netns"].vantage_doc


def test_check_merge_says_the_files_are_vantages():
    out = CliRunner().invoke(main, ["check", "--merge", *files("long_echo_split_rtt80")])
    assert out.exit_code == 1, out.output  # 19 stalls over the default budget
    text = " ".join(out.output.split())
    assert "from 3 places (vantages)" in text
    assert "19 stalls" in text


def test_a_rotated_set_stays_one_capture():
    rotated = SAMPLES / "sets" / "echo_split_rotated_lo"
    whole = SAMPLES / "sets" / "echo_split_rotated_lo_whole.pcap"
    pieces = sorted(str(p) for p in rotated.glob("*.pcap"))
    assert vantage_groups(pieces) == [pieces]
    r = nagleprobe.analyze(str(rotated))
    assert r.vantage_doc is None
    assert r.stall_count == nagleprobe.analyze(str(whole)).stall_count


def test_copies_at_one_place_and_unrelated_files_stay_one_capture():
    same = [str(SAMPLES / "formats" / n) for n in ("base_lo.pcap", "base_lo.pcapng")]
    assert vantage_groups(same) == [same]
    other = [str(SAMPLES / "echo_split_lo.pcap"), str(SAMPLES / "server_split_lo.pcap")]
    assert vantage_groups(other) == [other]


def test_a_set_with_several_runs_groups_each_place_and_joins_each_connection():
    paths = files("long_echo_split_rtt80") + files("confirm_netns") + [
        str(SAMPLES / "echo_split_lo.pcap")]
    groups = vantage_groups(paths)
    assert len(groups) == 3
    assert sorted(Path(p).name for p in groups[0]) == [
        "confirm_netns_client.pcap", "echo_split_lo.pcap", "long_echo_split_rtt80_client.pcap"]
    doc = nagleprobe.analyze(paths).vantage_doc
    assert sorted(c["client"] for c in doc["connections"]) == ["10.99.1.1:40010",
                                                               "10.99.1.1:40020"]
    assert all(c["agree"] and c["split"] is not None for c in doc["connections"])
    assert len(doc["clocks"]) == 4  # each run's server and middle file against its client's


@pytest.mark.skipif(not FIELD.is_dir(), reason="the field captures are not on this machine")
def test_field_captures_sharing_an_edited_handshake_are_not_vantages():
    latency = sorted(str(p) for p in FIELD.glob("neg__chrissanders_latency*.pcapng"))
    if len(latency) < 2:
        pytest.skip("the chrissanders latency captures are not in the field set")
    assert vantage_groups(latency) == [latency]
    every = sorted(str(p) for p in FIELD.glob("*.pcap*"))
    assert len(vantage_groups(every)) == 1


def test_the_offset_is_ntp_style_whichever_file_is_nearer_the_client():
    # a at the client; b 30 ms further with its clock 7 ms ahead; server 10 ms beyond b
    a = np.array([0.0, 80e6, 80.1e6])
    b = np.array([37e6, 57e6, 117.1e6])  # SYN 30 ms later (+7), SYN/ACK 20 ms after that
    theta, delay = _offset(a, b)
    assert theta == pytest.approx(7e6) and delay == pytest.approx(30e6)
    theta, delay = _offset(b, a)
    assert theta == pytest.approx(-7e6) and delay == pytest.approx(30e6)


def test_the_notebook_page_documents_every_column_and_dtype(joined):
    from test_report import dtype_name

    page = (ROOT / "docs" / "notebook.md").read_text()
    section = page.split("### `report.vantages`", 1)[1].split("\n#", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", section, flags=re.M)
    for r in (joined["long_echo_split_rtt80"], nagleprobe.analyze(files("confirm_netns")[0])):
        assert documented == [(c, dtype_name(t)) for c, t in r.vantages.dtypes.items()]


def test_vantages_that_disagree_are_named_in_the_text(joined):
    from nagleprobe.text_report import vantage_lines

    doc = copy.deepcopy(joined["long_echo_split_rtt80"].vantage_doc)
    c = doc["connections"][0]
    c["vantages"][1].update(stalls=0, stall_ms=0.0, fix_side=None)
    c.update(agree=False, fix_side=None, split=None)
    text = " ".join(" ".join(vantage_lines(doc)).split())
    assert "stalls 19 (v1) / 0 (v2) / 19 (v3); the vantages disagree: v1 client, v2 no " \
           "fix, v3 client" in text
    assert "time split unknown" in text


def test_the_html_report_has_the_vantages(joined):
    html = joined["long_echo_split_rtt80"].to_html(plots=False)
    section = html.split('<section id="vantages">', 1)[1].split("</section>", 1)[0]
    assert section.count('<tr class="stalled">') == 3  # one row per vantage, 19 stalls each
    assert "long_echo_split_rtt80_middle.pcap" in section and "one-way delay" in section
    assert '<section id="vantages">' not in nagleprobe.analyze(
        files("long_echo_split_rtt80")[0]).to_html(plots=False)


def test_the_reports_page_shows_the_section_as_printed(monkeypatch):
    page = (ROOT / "docs" / "reports.md").read_text()
    shown = page.split("\nVantages: 2 capture points", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)  # the page's paths are relative to the repository
    run = [f"samples/long_echo_split_rtt80_{p}.pcap" for p in ("client", "server")]
    assert shown in nagleprobe.analyze(run).to_text()
