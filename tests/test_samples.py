"""Real captures in samples/: what nagleprobe must report, checked against ground truth that
the generating scripts took from the applications' own timing logs (never from nagleprobe)."""

import json
from pathlib import Path

import pytest

import nagleprobe
from nagleprobe.detect import FLAVOURS

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
FORMATS = SAMPLES / "formats"
BROKEN = Path(__file__).resolve().parent / "broken"
BEHAVIOUR = sorted(SAMPLES.glob("*.expected.json"))
FORMAT_TRUTH = json.loads((FORMATS / "expected.json").read_text())
BROKEN_TRUTH = json.loads((BROKEN / "expected.json").read_text())
# name -> (path, truth): the formats, and the broken files whose stalls are written down
# (they were samples/formats/broken/ until issue 16, and keep their names here)
READABLE = {**{k: (FORMATS / k, v) for k, v in FORMAT_TRUTH.items()
               if isinstance(v, dict) and v.get("stalls") is not None},
            **{f"broken/{k}": (BROKEN / k, v) for k, v in BROKEN_TRUTH.items()
               if v.get("stalls") is not None}}
UNREADABLE = {f"broken/{k}": BROKEN / k for k, v in BROKEN_TRUTH.items() if v["exit"] == 3}


@pytest.mark.parametrize("truth_file", BEHAVIOUR, ids=lambda p: p.name.split(".")[0])
def test_behaviour_sample_reports_the_ground_truth(truth_file):
    truth = json.loads(truth_file.read_text())
    doc = nagleprobe.analyze(str(SAMPLES / truth["capture"])).to_dict()
    assert doc["summary"]["stalls"] == truth["stalls"]
    fixes = [f["fix"] for f in doc["flows"] if f["fix"]]
    if truth["stalls"] == 0:
        assert fixes == []
        return
    assert len(fixes) == 1
    assert fixes[0]["side"] == truth["held_side"]
    assert fixes[0]["endpoint"] == truth["held_endpoint"]
    assert {s["sender"] for s in doc["stalls"]} == {truth["held_side"]}
    stalled = next(f for f in doc["flows"] if f["fix"])
    peer = "server" if truth["held_side"] == "client" else "client"
    assert stalled["endpoints"][truth["held_side"]]["nagle"] == "on"
    measured = stalled["endpoints"][peer]["delayed_ack_ms"]
    assert measured == pytest.approx(truth["peer_delayed_ack_ms"], rel=0.15)


@pytest.mark.parametrize("truth_file", BEHAVIOUR, ids=lambda p: p.name.split(".")[0])
def test_packets_seen_twice_are_counted_as_duplicates_and_nothing_else_is(truth_file):
    """bridge_any: `tcpdump -i any` on a bridge host records every frame on the ingress and
    the egress port (214 frames, 107 unique IP packets, per the sidecar); every other sample
    holds each packet once."""
    truth = json.loads(truth_file.read_text())
    capture = nagleprobe.analyze(str(SAMPLES / truth["capture"])).capture
    assert capture["skipped"].get("duplicate", 0) == truth.get("duplicates", 0)
    if "frames_unique" in truth:
        assert capture["tcp_packets"] == truth["frames_unique"]


@pytest.mark.parametrize("truth_file", [p for p in BEHAVIOUR if any(
    k in json.loads(p.read_text()) for k in ("nagle_holds", "nagle_flavour", "roles"))],
    ids=lambda p: p.name.split(".")[0])
def test_behaviour_sample_reports_holds_nagle_rule_and_what_was_guessed(truth_file):
    """Nagle holds without a delayed ACK counted exactly; the Nagle rule never contradicts
    the sender's configuration, and a classic sender is recognised wherever the capture
    shows a tail held behind a lone full segment; excerpts say roles were guessed."""
    truth = json.loads(truth_file.read_text())
    doc = nagleprobe.analyze(str(SAMPLES / truth["capture"])).to_dict()
    if "nagle_holds" in truth:
        assert sum(f["nagle_holds"] for f in doc["flows"]) == truth["nagle_holds"]
    for side, want in truth.get("nagle_flavour", {}).items():
        for f in doc["flows"]:
            got = f["endpoints"][side]["nagle_flavour"]
            allowed = {"classic": {"classic", "unknown"}, "off": {"off", "unknown"},
                       "minshall": {"minshall", "unknown"}}.get(want, set(FLAVOURS))
            assert got in allowed, (side, got)
            if want == "classic" and any(s["behind_full"] for s in doc["stalls"]):
                assert got == "classic"
    if truth.get("roles") == "guessed":
        assert {f["roles"] for f in doc["flows"]} == {"guessed"}


@pytest.mark.parametrize("truth_file", BEHAVIOUR, ids=lambda p: p.name.split(".")[0])
def test_a_relay_is_linked_to_the_flow_that_fed_it_and_nothing_else_is(truth_file):
    """Proxies (seed 004) and a chain where only the second proxy splits: the held flow names
    its upstream flow and where the split happened; no other flow of any sample is linked."""
    truth = json.loads(truth_file.read_text())
    doc = nagleprobe.analyze(str(SAMPLES / truth["capture"])).to_dict()
    name = {f["id"]: f"{f['client']} -> {f['server']}" for f in doc["flows"]}
    linked = {name[f["id"]]: (name[f["relay"]["upstream_flow"]], f["relay"]["split"])
              for f in doc["flows"] if f["relay"]}
    want = truth.get("relay")
    assert linked == ({want["held_flow"]: (want["upstream_flow"], want["split"])} if want else {})


@pytest.mark.parametrize("name", ["confirm_netns_client", "confirm_netns_server",
                                  "confirm_netns_middle"])
def test_vantage_point_is_recognised(name):
    truth = json.loads((SAMPLES / f"{name}.expected.json").read_text())
    doc = nagleprobe.analyze(str(SAMPLES / f"{name}.pcap")).to_dict()
    assert [f["vantage"] for f in doc["flows"]] == [truth["vantage"]]


def test_a_tail_released_by_a_window_that_opens_is_not_a_stall():
    """neg_window_full_netns: every full segment fills the offered window and the next
    segment leaves when the receiver's late ACK opens it; each such late ACK is ruled out
    as `window`, and none is taken as evidence of the classic rule."""
    doc = nagleprobe.analyze(str(SAMPLES / "neg_window_full_netns.pcap")).to_dict()
    (flow,) = doc["flows"]
    assert set(flow["why_not"]) == {"window"} and flow["why_not"]["window"] >= 10
    assert flow["endpoints"]["client"]["held_behind_full"] == 0


def test_nodelay_sender_is_proven_nagle_off():
    doc = nagleprobe.analyze(str(SAMPLES / "echo_nodelay_lo.pcap")).to_dict()
    assert doc["flows"][0]["endpoints"]["client"]["nagle"] == "off"


def test_a_200_ms_timer_is_typical_of_windows_and_independent_records_get_tcp_nodelay():
    """96-byte records, each followed by a 656-byte one the server never answers: separate
    messages. The ~200 ms timer is named by its delay, the OS only as what it is typical of."""
    doc = nagleprobe.analyze(str(SAMPLES / "records_bulk_win200_netns.pcap")).to_dict()
    fix = next(f["fix"] for f in doc["flows"] if f["fix"])
    assert (fix["action"], fix["basis"]) == ("set-tcp-nodelay", "separate-messages")
    assert "(~190 ms, typical of Windows)" in fix["text"] and "-like" not in fix["text"]
    assert "S1 was typically 96 bytes and S2 656 bytes (too long for a header)" in fix["text"]


def test_write_write_read_gets_coalesce_writes_because_the_peer_answered():
    doc = nagleprobe.analyze(str(SAMPLES / "echo_split_lo.pcap")).to_dict()
    fix = doc["flows"][0]["fix"]
    assert (fix["action"], fix["basis"]) == ("coalesce-writes", "peer-answered")
    assert ("Coalesce, because the server answered right after S2 arrived, so S1 and S2 were "
            "one request written in two pieces.") in fix["text"]


def test_a_server_s_split_answer_is_one_message_not_a_request():
    doc = nagleprobe.analyze(str(SAMPLES / "server_split_lo.pcap")).to_dict()
    fix = doc["flows"][0]["fix"]
    assert (fix["side"], fix["action"], fix["basis"]) == ("server", "coalesce-writes",
                                                          "peer-answered")
    assert ("Coalesce, because the client answered right after S2 arrived, so S1 and S2 were "
            "one message written in two pieces.") in fix["text"]


@pytest.mark.parametrize("name", ["classic_fulltail_tap", "classic_bulk_tap"])
def test_a_tail_held_behind_a_full_segment_gets_tcp_nodelay_since_one_write_is_held_too(name):
    """A classic-Nagle sender writes each request (1,460 + 100 B) or record in ONE send
    (samples/README.md); its tail waits behind the full segment. Coalescing cannot help,
    even where the server answers at once (fulltail)."""
    doc = nagleprobe.analyze(str(SAMPLES / f"{name}.pcap")).to_dict()
    fix = next(f["fix"] for f in doc["flows"] if f["fix"])
    assert (fix["action"], fix["basis"]) == ("set-tcp-nodelay", "tail-behind-full")
    assert ("TCP_NODELAY, because S1 was typically a full segment (1,460 bytes) and S2 "
            "(100 bytes) the tail held behind it") in fix["text"]


def test_stall_evidence_points_at_the_right_frames():
    """S1 small, then the peer's pure ACK, then S2: checkable in Wireshark by frame number."""
    r = nagleprobe.analyze(str(FORMATS / "base_lo.pcap"))
    first = r.to_dict()["stalls"][0]
    assert first["frames"] == {"small": 10, "ack": 11, "released": 12}
    assert first["held_bytes"] == 7 and first["small_bytes"] == 6


@pytest.mark.parametrize("name", sorted(READABLE))
def test_every_format_and_link_type_gives_the_same_answer(name):
    path, truth = READABLE[name]
    doc = nagleprobe.analyze(str(path)).to_dict()
    assert doc["summary"]["stalls"] == truth["stalls"]
    assert len(doc["flows"]) == truth["flows"]
    if truth["stalls"]:
        assert {s["sender"] for s in doc["stalls"]} == {truth.get("stall_sender", "client")}


def test_no_handshake_guesses_roles_and_says_so():
    doc = nagleprobe.analyze(str(FORMATS / "no_handshake.pcap")).to_dict()
    assert doc["flows"][0]["roles"] == "guessed"
    assert doc["flows"][0]["client"].endswith(":47084")


def test_port_reuse_splits_into_two_flows_on_one_four_tuple():
    doc = nagleprobe.analyze(str(FORMATS / "port_reuse.pcap")).to_dict()
    assert [(f["client"], f["server"]) for f in doc["flows"]] == [("127.0.0.1:40000",
                                                                  "127.0.0.1:8000")] * 2
    assert [f["stalls"] for f in doc["flows"]] == [3, 3]


def test_truncated_capture_is_analysed_up_to_the_cut_with_a_warning():
    doc = nagleprobe.analyze(str(BROKEN / "truncated_record.pcap")).to_dict()
    assert doc["summary"]["stalls"] == 7
    assert any("truncated" in w["text"] for w in doc["capture"]["warnings"])


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_unreadable_files_raise_a_capture_error_naming_the_file(name):
    path = UNREADABLE[name]
    with pytest.raises(nagleprobe.CaptureError) as e:
        nagleprobe.analyze(str(path))
    assert str(path) in str(e.value)


def test_json_text_equals_the_document():
    r = nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"))
    assert json.loads(r.to_json()) == r.to_dict()
    assert r.to_json() == nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap")).to_json()
