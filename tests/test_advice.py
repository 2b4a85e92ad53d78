"""Who must change what (nagleprobe/advice.py): one fix per endpoint -- the flows with
stalls whose same side, in the same program (a server by its address and port, a client by
its address), needs the same change are told once -- and every fix says what its choice
stands on, naming a timer by its delay and the OS only as what the delay is typical of."""

import json
from pathlib import Path

import numpy as np
import pytest

import nagleprobe
from nagleprobe.advice import fix_groups, header_then_body

FIELD = Path("/work/shared/field")
COAP = FIELD / "pos__nfstream_coap_mqtt.pcap"  # four Windows clients, the same split write


def groups_of(report):
    return fix_groups(report.columns("flows"), report.columns("stalls"),
                      report.columns("endpoints"))


@pytest.mark.skipif(not COAP.exists(), reason=f"{COAP} (a field capture) is absent")
def test_four_parallel_clients_with_the_same_fault_get_one_fix():
    r = nagleprobe.analyze(str(COAP))
    fl = r.columns("flows")
    (g,) = r.fix_groups()
    assert sorted(g["flows"]) == sorted(fl["id"][fl["stalls"] > 0].tolist()) and len(g["flows"]) == 4
    assert (g["side"], g["endpoint"], g["action"]) == ("client", "192.168.56.1", "coalesce-writes")
    st = r.columns("stalls")
    assert g["stalls"] == int((st["sender"] == "client").sum()) == r.stall_count
    assert g["text"].startswith("The client 192.168.56.1 should send each message in one write")
    assert f"{g['stalls']} writes waited" in g["text"] and "costing 15.8 s" in g["text"]
    assert g["flows"] == [int(i) for i in sorted(g["flows"], key=lambda i: -fl["stall_ms"][i])]


@pytest.fixture(scope="module")
def four_clients(tmp_path_factory):
    """Our echo_split sample four times over, on four ports of 127.0.0.1."""
    from replicate import replicate

    path = tmp_path_factory.mktemp("four") / "four_clients.pcap"
    path.write_bytes(replicate(["echo_split_lo.pcap"], copies=4, every_ns=10**8))
    return nagleprobe.analyze(str(path))


def test_copies_of_our_sample_on_four_ports_of_one_host_get_one_fix(four_clients):
    r = four_clients
    assert int((r.columns("flows")["stalls"] > 0).sum()) == 4
    (g,) = groups_of(r)
    assert (g["side"], g["endpoint"], g["host"]) == ("client", "127.0.0.1", "127.0.0.1")
    assert g["stalls"] == r.stall_count and g["lost_ms"] == pytest.approx(
        float(r.columns("stalls")["delay_ms"].sum()))
    assert " 127.0.0.1 should send each message in one write" in g["text"]


def test_one_flow_s_fix_says_what_its_json_fix_says(proxy_any):
    (g,) = groups_of(proxy_any)
    flows = proxy_any.columns("flows")
    assert g["flows"] == [1] and g["endpoint"] == flows["fix_endpoint"][1]
    assert g["text"] == flows["fix_text"][1]  # under a second: the same words


def test_another_host_or_action_is_another_fix(four_clients):
    flows = dict(four_clients.columns("flows"))
    for k in ("fix_endpoint", "fix_action", "fix_basis"):
        flows[k] = flows[k].copy()
    flows["fix_endpoint"][0] = "10.0.0.1:40000"
    flows["fix_action"][1], flows["fix_basis"][1] = "set-tcp-nodelay", "separate-messages"
    groups = fix_groups(flows, four_clients.columns("stalls"), four_clients.columns("endpoints"))
    assert sorted(sorted(g["flows"]) for g in groups) == [[0], [1], [2, 3]]
    one = next(g for g in groups if g["flows"] == [0])
    assert one["endpoint"] == "10.0.0.1:40000" and " 10.0.0.1:40000 should " in one["text"]
    nodelay = next(g for g in groups if g["flows"] == [1])
    assert "should set TCP_NODELAY" in nodelay["text"]


def test_only_the_flows_asked_for(four_clients):
    (g,) = four_clients.fix_groups([2, 3])
    assert sorted(g["flows"]) == [2, 3]
    assert four_clients.fix_groups([]) == []


def test_a_client_is_one_program_a_server_one_per_port(four_clients):
    """A client's connections have ports of their own; a host's servers on two ports are
    two programs."""
    flows, stalls = dict(four_clients.columns("flows")), dict(four_clients.columns("stalls"))
    flows["fix_side"] = np.full(len(flows["id"]), "server", dtype=object)
    flows["fix_endpoint"] = np.array(["127.0.0.1:8000", "127.0.0.1:8000", "127.0.0.1:8001",
                                      "127.0.0.1:8001"], dtype=object)[flows["id"]]
    stalls["sender"] = np.full(len(stalls["flow"]), "server", dtype=object)
    groups = fix_groups(flows, stalls, four_clients.columns("endpoints"))
    assert sorted(sorted(g["flows"]) for g in groups) == [[0, 1], [2, 3]]
    assert {g["endpoint"] for g in groups} == {"127.0.0.1:8000", "127.0.0.1:8001"}
    assert all(g["side"] == "server" and g["host"] == "127.0.0.1" for g in groups)


DNS = FIELD / "pos__chrissanders_dns_axfr.pcapng"  # a 2-byte length prefix, then the query
SMTP = FIELD / "edge__zeek_communityid_ipv6_smtp_interactive.pcap"  # keystrokes to a mail server


def every_output(path: Path) -> dict[str, str]:
    """What each output says of a capture: analyze's text, JSON and HTML, and check's text,
    JSON, JUnit and GitHub annotations."""
    from click.testing import CliRunner

    from nagleprobe.cli import main

    r = nagleprobe.analyze(str(path))
    out = {"text": r.to_text(verbose=True), "json": json.dumps(r.to_dict()),
           "html": r.to_html(plots=False)}
    for fmt in ("text", "json"):
        out[f"check {fmt}"] = CliRunner().invoke(main, ["check", "--format", fmt,
                                                        str(path)]).output
    out["check github"] = CliRunner().invoke(main, ["check", "--github", str(path)]).output
    return out


@pytest.mark.skipif(not DNS.exists(), reason=f"{DNS} (a field capture) is absent")
def test_a_length_prefix_then_its_query_is_coalesced_and_every_output_says_why():
    """DNS over TCP: the client wrote the 2-byte length, then the 33-byte AXFR query, which
    waited 218 ms for the server's delayed ACK. The server's answer came 22 ms after the
    query, too late to count as an answer: the sizes alone show one message in two writes."""
    fix = nagleprobe.analyze(str(DNS)).to_dict()["flows"][0]["fix"]
    assert (fix["action"], fix["basis"]) == ("coalesce-writes", "header-then-body")
    because = ("Coalesce, because S1 was 2 bytes and S2 33 bytes, ready behind it and sent with "
               "the ACK: a 2-byte header or length prefix and its body, one message written in "
               "two pieces.")
    assert because in fix["text"] and "(~218 ms, typical of Windows)" in fix["text"]
    for name, text in every_output(DNS).items():
        flat = " ".join(text.replace("\\n", " ").split())
        assert because in flat and "typical of Windows" in flat, name
        assert "Windows-like" not in flat and "since it sends small messages" not in flat, name


@pytest.mark.skipif(not SMTP.exists(), reason=f"{SMTP} (a field capture) is absent")
def test_a_timer_is_typical_of_an_os_in_every_output_never_a_fact_about_the_host():
    """A hand-typed SMTP session to a public mail server: one ~209 ms timer says what is
    typical of Windows, not what the server runs. Keystrokes (1 byte, then 1-2) are separate
    messages: TCP_NODELAY, and the fix says so."""
    fix = nagleprobe.analyze(str(SMTP)).to_dict()["flows"][0]["fix"]
    assert (fix["action"], fix["basis"]) == ("set-tcp-nodelay", "separate-messages")
    assert "TCP_NODELAY, because S1 was typically 1 byte and S2 2 bytes (no body behind a " \
           "header) and the server did not answer right after S2" in fix["text"]
    for name, text in every_output(SMTP).items():
        assert "typical of Windows" in text and "-like" not in text, name


@pytest.mark.parametrize("s1, s2, one_message", [
    (2, 33, True), (4, 60, True), (16, 64, True), (10, 129, True),  # prefixes, BDAT lines
    (16, 63, False), (17, 1000, False), (96, 656, False), (1, 2, False), (128, 168, False),
])
def test_a_header_is_short_and_its_body_at_least_four_times_as_long(s1, s2, one_message):
    assert header_then_body(np.array([s1]), np.array([s2]))[0] == one_message


def test_each_row_s_sentence_is_the_one_fix_text_writes():
    """fix_texts writes a sentence once per distinct rest and joins each row's endpoint and
    time lost into it: every row must read as fix_text writes it alone."""
    from nagleprobe.advice import BASES, fix_text, fix_texts
    from nagleprobe.humanize import human_ms, json_ms

    rows = [(0, "10.0.0.1:40000", 41.0, 12, 480.2, 1, 6, 7, ""),
            (0, "10.0.0.1:40001", 41.0, 12, 12345.6, 1, 6, 7, "Nagle also held 2 writes."),
            (1, "10.0.0.2:8000", None, 1, 0.04, 0, 1448, 20, ""),
            (1, "10.0.0.2:8000", 203.9, 3, 612.0, 2, 2, 33, ""),
            (0, "[fe80::1]:5000", 200.0, 5, 1001.0, 3, 96.5, 656, ""),
            (0, "10.0.0.1:40000", 41.0, 12, 480.2, 1, 6, 7, "")]
    cols = [np.array(c, dtype=object) for c in zip(*rows)]
    timer = np.array([np.nan if t is None else t for t in cols[2]])
    for say in (human_ms, json_ms):
        got = fix_texts(cols[0].astype(int), cols[1], timer, cols[3].astype(int),
                        cols[4].astype(float), cols[5].astype(int), cols[6].astype(float),
                        cols[7].astype(float), cols[8], say_ms=say)
        assert got.tolist() == [fix_text(k, e, t, n, ms, BASES[b], s1, s2, note, say_ms=say)
                                for k, e, t, n, ms, b, s1, s2, note in rows]
    assert len(fix_texts(*(np.zeros(0),) * 9)) == 0


def test_a_fix_s_basis_is_that_of_most_stalls_and_a_tie_goes_to_the_last_name(four_clients):
    flows = dict(four_clients.columns("flows"))
    flows["fix_basis"] = np.array(["separate-messages", "peer-answered", "peer-answered",
                                   "separate-messages"], dtype=object)[flows["id"]]
    (g,) = fix_groups(flows, four_clients.columns("stalls"), four_clients.columns("endpoints"))
    assert g["basis"] == "separate-messages"  # two flows each, as many stalls: the last name
    flows["fix_basis"] = np.array(["peer-answered", "peer-answered", "peer-answered",
                                   "separate-messages"], dtype=object)[flows["id"]]
    (g,) = fix_groups(flows, four_clients.columns("stalls"), four_clients.columns("endpoints"))
    assert g["basis"] == "peer-answered"
