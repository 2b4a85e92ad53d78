"""relay: a stalled sender that forwards what another flow brought it is linked to that flow,
and the report says whether the message arrived whole or already split.

Synthetic columns (tests/columns.py); the real proxies and the three-hop chain are checked in
test_samples.py; a field capture of parallel clients that must not be linked is read by path."""

from pathlib import Path

import numpy as np
import pytest

import nagleprobe
from columns import Conversation, packets
from nagleprobe.detect import detect
from nagleprobe.flows import build_flows
from nagleprobe.read import CaptureInfo
from nagleprobe.report import build_report

COAP = Path("/work/shared/field/pos__nfstream_coap_mqtt.pcap")

WEB, PROXY_IN, PROXY_OUT, DB = ("10.67.15.102:51000", "10.67.15.212:3307",
                                "10.67.15.212:52000", "10.13.144.139:3306")


def report(*convs: Conversation) -> dict:
    """The JSON document of the conversations captured together (frames in time order)."""
    rows = sorted((r for c in convs for r in c.rows), key=lambda r: r["t_ms"])
    for i, r in enumerate(rows, 1):
        r["frame"] = i
    f = build_flows(packets(rows))
    info = CaptureInfo(path="synthetic", format="pcap", compressed=False,
                       link_types=["EN10MB"], packets=len(rows), warnings=[], skipped={})
    return build_report(info, {}, f, detect(f), 0).to_dict()


def seed_004(upstream_sizes=(296,), gap_ms=0.096):
    """Seed 004's five packets, at the times its tcpdump printed (ms since 23.877515 s):
    the web server's 296 B query reaches the proxy, the proxy sends 128 B to the database,
    ACKs the query 39.8 ms later, the database's pure ACK comes 40.8 ms after the 128 B,
    and the proxy sends the remaining 168 B."""
    up, down = Conversation(WEB, PROXY_IN), Conversation(PROXY_OUT, DB)
    t = 0.0
    for size in upstream_sizes:
        up.send("c", t, size)
        t += 0.001
    down.send("c", gap_ms, 128)
    up.ack("s", 39.779)
    down.ack("s", 40.883)
    down.send("c", 40.900, 168)
    return up, down


def test_seed_004_excerpt_is_a_stall_of_the_proxy_that_split_the_query():
    doc = report(*seed_004())
    assert doc["summary"]["stalls"] == 1
    st = doc["stalls"][0]
    assert st["endpoint"] == PROXY_OUT and (st["small_bytes"], st["held_bytes"]) == (128, 168)
    assert st["peer_ack_delay_ms"] == pytest.approx(40.787, abs=0.01)
    held = next(f for f in doc["flows"] if f["stalls"])
    up = next(f for f in doc["flows"] if f["client"] == WEB)
    assert held["relay"] == {"upstream_flow": up["id"], "in": PROXY_IN, "out": PROXY_OUT,
                             "split": "at-relay", "stalls_matched": 1}
    assert up["relay"] is None


def test_a_query_that_arrived_already_split_points_upstream():
    doc = report(*seed_004(upstream_sizes=(128,)))
    held = next(f for f in doc["flows"] if f["stalls"])
    assert held["relay"]["split"] == "upstream"


def test_an_arrival_too_long_before_or_of_another_size_links_nothing():
    for sizes, gap in (((296,), 1.5), ((300,), 0.096)):
        doc = report(*seed_004(upstream_sizes=sizes, gap_ms=gap))
        assert doc["summary"]["stalls"] == 1
        assert all(f["relay"] is None for f in doc["flows"]), (sizes, gap)


def test_an_arrival_at_another_host_links_nothing():
    up, down = seed_004()
    moved = Conversation(WEB, "10.67.15.99:3307")
    moved.rows = [dict(r, src=r["src"].replace("10.67.15.212", "10.67.15.99"),
                       dst=r["dst"].replace("10.67.15.212", "10.67.15.99")) for r in up.rows]
    doc = report(moved, down)
    assert all(f["relay"] is None for f in doc["flows"])


def test_data_delivered_to_the_endpoint_the_stalled_flow_sends_to_was_not_forwarded():
    """Seed 004's sizes and times, but the second flow goes to the very endpoint that received
    the query: that host's second client of the same server, not a relay's way out."""
    up, down = seed_004()
    second = Conversation(PROXY_OUT, PROXY_IN)
    second.rows = [dict(r, src=r["src"].replace(DB, PROXY_IN), dst=r["dst"].replace(DB, PROXY_IN))
                   for r in down.rows]
    doc = report(up, second)
    assert doc["summary"]["stalls"] == 1
    assert all(f["relay"] is None for f in doc["flows"])


def clients_in_step(servers: list[str]) -> list[Conversation]:
    """Clients at 10.0.0.1, one per server, captured next to both ends (round trips of
    0.02 ms): each writes a 4-byte header, then a 60-byte body held for the server's 40 ms
    delayed ACK, 0.2 ms after the client before it; the server answers."""
    convs = []
    for i, server in enumerate(servers):
        c = Conversation(f"10.0.0.1:{5000 + i}", server)
        c.handshake(i * 0.01, rtt_ms=0.02)
        for t in 1.0 + 0.2 * i + 100.0 * np.arange(6):
            c.send("c", t, 4)
            c.ack("s", t + 40)
            c.send("c", t + 40.02, 60)
            c.send("s", t + 40.5, 20)
            c.ack("c", t + 40.6)
        convs.append(c)
    return convs


@pytest.mark.parametrize("servers", [["10.0.0.2:1000"] * 3,
                                     ["10.0.0.2:1000", "10.0.0.2:2000", "10.0.0.2:3000"]])
def test_clients_in_step_are_not_relays_of_each_other(servers):
    """Each header reaches a server 0.2 ms before the next client's header leaves, of the
    same size: timing and sizes as a relay's. But the bytes went to the endpoint the next
    flow sends to (one server), or came from the address the next flow leaves from (the
    capture point alone makes one host of the two addresses): out and back, not through."""
    doc = report(*clients_in_step(servers))
    assert doc["summary"]["stalls"] == 18
    assert {f["vantage"] for f in doc["flows"]} == {"client"}
    assert all(f["relay"] is None for f in doc["flows"])


@pytest.mark.skipif(not COAP.exists(), reason=f"{COAP} (a field capture) is absent")
def test_parallel_clients_of_one_server_writing_in_step_are_not_a_relay():
    """Four clients at 192.168.56.1 each write a 4-byte header then a 60-byte body to one
    server, in step: each header reaches the server just before another client's leaves.
    No flow is linked, and the one fix (coalesce, on the clients) stands alone."""
    r = nagleprobe.analyze(str(COAP))
    doc = r.to_dict()
    assert sum(1 for f in doc["flows"] if f["stalls"]) == 4
    assert all(f["relay"] is None for f in doc["flows"])
    (g,) = r.fix_groups()
    assert (g["side"], g["action"]) == ("client", "coalesce-writes")
    text = r.to_text(verbose=True)
    assert "relay:" not in text and "look upstream" not in text
