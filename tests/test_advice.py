"""Who must change what (nagleprobe/advice.py): one fix per endpoint -- the flows with
stalls whose same side, in the same program (a server by its address and port, a client by
its address), needs the same change are told once."""

from pathlib import Path

import numpy as np
import pytest

import nagleprobe
from nagleprobe.advice import fix_groups

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
    for k in ("fix_endpoint", "fix_action"):
        flows[k] = flows[k].copy()
    flows["fix_endpoint"][0] = "10.0.0.1:40000"
    flows["fix_action"][1] = "set-tcp-nodelay"
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
