"""What the streamed analysis cannot get right is said (issue 18, point 6): a SYN arriving
after its connection was analysed (older than the connection's last packet), and a 4-tuple
reused with the same ISN (`tcpreplay --loop`), from the real samples."""

from __future__ import annotations

from test_damage import same_flows

import nagleprobe
from capgen import pcap_bytes
from replicate import replicate, sample_packets, shift_ports
from oracle import analyze_whole

T0 = 1_700_000_000 * 10**9


def test_replayed_connection_with_the_same_isn_is_warned(tmp_path):
    p = tmp_path / "loop.pcap"
    p.write_bytes(replicate(["echo_split_lo.pcap"], 2, 5 * 10**9, port_step=0))
    for chunk in (32 << 20, 4096):
        r = nagleprobe.analyze(str(p), chunk_bytes=chunk)
        w = [x for x in r.capture["warnings"] if "initial sequence number" in x]
        assert w == ["1 connections reuse the 4-tuple and the initial sequence number of one "
                     "that closed before them (first: frame 108; a replayed capture?): they "
                     "cannot be told apart and are analysed as one"], r.capture["warnings"]
    # new ISNs: two connections, no warning
    p.write_bytes(replicate(["echo_split_lo.pcap"], 2, 5 * 10**9, port_step=0,
                            isn_step=10**6))
    r = nagleprobe.analyze(str(p))
    assert r.capture["warnings"] == [] and len(r.flows) == 2 and len(r.stalls) == 38


def test_a_syn_arriving_after_its_connection_was_analysed_is_warned(tmp_path):
    pk = [(T0 + t, f) for t, f in sample_packets("echo_split_lo.pcap")]
    other = [(t + 10**10, shift_ports(f, 1)) for t, f in pk]  # moves the clock 10 s on
    late_syn = pk[0]  # the SYN, written after all that
    p = tmp_path / "late_syn.pcap"
    p.write_bytes(pcap_bytes(pk[1:] + other + [late_syn]))
    r = nagleprobe.analyze(str(p), chunk_bytes=4096)
    assert r.capture["warnings"] == [
        "1 TCP packets arrived more than 2 s (capture time) after their connection closed "
        "and were left out of it",
        "1 of them SYNs older than the last packet of their analysed connection: the "
        "streamed result differs from the whole file's (raise --reorder-window)"]
    assert len(r.flows) == 2  # not a third flow opened by the old SYN


def test_idle_connections_are_analysed_and_freed_and_counted(tmp_path):
    """Point 2: a connection silent for longer than idle_s (capture time) is analysed and
    freed like a closed one, and the warning counts them; the result is the same."""
    pk = [(T0 + t, f) for t, f in sample_packets("echo_split_lo.pcap")]
    half_open = [(T0 + i * 1000, shift_ports(pk[0][1], 100 + i)) for i in range(50)]  # SYNs
    later = [(t + 20 * 10**9, shift_ports(f, 1)) for t, f in pk]
    p = tmp_path / "scan.pcap"
    p.write_bytes(pcap_bytes(sorted(half_open + pk + later, key=lambda x: x[0])))
    whole = analyze_whole(str(p)).to_dict()
    r = nagleprobe.analyze(str(p), chunk_bytes=4096, idle_s=5).to_dict()
    assert [w["text"] for w in r["capture"]["warnings"]] == [
        "50 connections were idle for more than 5 s (capture time) and were analysed before "
        "they closed (raise --idle-timeout to wait longer)"]
    # the same flows, but for Wireshark's stream numbers, given only without warnings
    assert same_flows(r, whole) and r["stalls"] == whole["stalls"]
    assert len(r["flows"]) == 52 and r["summary"]["stalls"] == 38
    assert nagleprobe.analyze(str(p), chunk_bytes=4096).to_dict()["capture"]["warnings"] == []
