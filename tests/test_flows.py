"""flows: connections, roles, relative sequence space, MSS and vantage (synthetic columns)."""

import numpy as np

from columns import A, Conversation, S, packets
from nagleprobe.flows import build_flows
from nagleprobe.segments import grouped_cummax

C, SV = "10.0.0.1:40000", "10.0.0.2:8000"


def test_one_connection_with_handshake_has_roles_from_the_handshake():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 10)
    conv.ack("s", t + 2)
    f = build_flows(conv.columns())
    assert f.count == 1
    assert f.flow["client"].tolist() == [C] and f.flow["server"].tolist() == [SV]
    assert f.flow["roles"].tolist() == ["handshake"]
    # relative numbers as Wireshark shows them: SYN is 0, first data byte is 1
    assert list(f.seg["seq"]) == [0, 0, 1, 1, 1]
    assert f.seg["dir"].tolist() == [0, 1, 0, 0, 1]
    assert f.seg["ack"][-1] == 11


def test_packets_out_of_time_order_are_sorted():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 10)
    cols = conv.columns()
    rev = {k: v[::-1].copy() for k, v in cols.items()}
    f = build_flows(rev)
    assert f.seg["frame"].tolist() == [1, 2, 3, 4]


def test_port_reuse_with_a_new_syn_starts_a_new_flow():
    a = Conversation(C, SV, isn_c=100)
    t = a.handshake(0.0)
    a.send("c", t + 1, 5)
    b = Conversation(C, SV, isn_c=900000)
    t2 = b.handshake(50.0)
    b.send("c", t2 + 1, 7)
    rows = a.rows + b.rows
    for i, r in enumerate(rows, 1):
        r["frame"] = i
    f = build_flows(packets(rows))
    assert f.count == 2
    assert f.flow["packets"].tolist() == [4, 4]
    assert f.flow["roles"].tolist() == ["handshake", "handshake"]


def test_retransmitted_syn_does_not_split_the_flow():
    conv = Conversation(C, SV)
    conv.rows.append(dict(t_ms=0.0, src=C, dst=SV, seq=1000, flags=S, mss=1460))
    conv.handshake(1000.0)
    assert build_flows(conv.columns()).count == 1


def test_sequence_wraparound_is_unwrapped():
    conv = Conversation(C, SV, isn_c=(1 << 32) - 10)
    t = conv.handshake(0.0)
    for i in range(4):
        conv.send("c", t + 1 + i, 8)
    conv.ack("s", t + 10)
    f = build_flows(conv.columns())
    data = f.seg["payload"] > 0
    assert f.seg["seq"][data].tolist() == [1, 9, 17, 25]
    assert f.seg["ack"][-1] == 33
    assert f.seg["new_data"][data].all() and not f.seg["retrans"].any()


def test_retransmission_and_keepalive_are_recognised():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 10)
    conv.send("c", t + 201, 10, seq=conv.nxt["c"] - 10)  # RTO retransmission
    conv.ack("s", t + 202)
    conv.send("c", t + 5000, 0, seq=conv.nxt["c"] - 1)  # keep-alive
    f = build_flows(conv.columns())
    assert f.seg["retrans"].tolist() == [False, False, False, False, True, False, False]
    assert f.seg["keepalive"][-1]


def test_without_handshake_roles_are_guessed_from_ports_and_mss_guessed():
    conv = Conversation(C, SV)
    conv.send("c", 0.0, 100)
    conv.send("s", 0.2, 700)
    conv.ack("c", 0.3)
    f = build_flows(conv.columns())
    assert f.flow["roles"].tolist() == ["guessed"]
    assert f.flow["client"].tolist() == [C]
    # one 700-byte segment may be a whole message: the MSS is guessed, not taken from it
    assert f.flow["mss_how"][0].tolist() == ["guessed", "guessed"]
    assert f.flow["mss"][0].tolist() == [1460, 1460]
    # RTT from data/ACK pairs: server acknowledged client data 0.2 ms later, client 0.1 ms
    assert f.flow["rtt_how"].tolist() == ["data/ACK pairs"]
    assert abs(f.flow["rtt_server_ms"][0] - 0.2) < 1e-9
    assert abs(f.flow["rtt_client_ms"][0] - 0.1) < 1e-9


def test_without_syn_a_largest_segment_sent_again_and_again_is_the_mss():
    conv = Conversation(C, SV)
    for i in range(3):
        conv.send("s", i * 1.0, 1448)
    conv.send("s", 3.0, 200)
    conv.ack("c", 3.3)
    f = build_flows(conv.columns())
    assert f.flow["mss_how"][0].tolist() == ["inferred", "inferred"]
    assert f.flow["mss"][0].tolist() == [1448, 1448]


def test_round_trips_skip_acks_that_may_be_delayed_and_keep_the_fastest():
    """A pure ACK of one small segment 45 ms later may be a delayed ACK: it is not the path.
    An ACK of two full segments must be sent at once, and an answer carries its ACK."""
    conv = Conversation(C, SV, mss=1460)
    conv.send("c", 0.0, 128)
    conv.ack("s", 45.0)                  # possibly delayed: not a sample
    assert build_flows(conv.columns()).flow["rtt_how"].tolist() == ["none"]
    conv.send("c", 50.0, 1460)
    conv.send("c", 50.1, 1460)
    conv.ack("s", 50.9)                  # two full segments: 0.8 ms after the second
    conv.send("c", 60.0, 100)
    conv.send("s", 62.0, 300)            # the answer carries the ACK: 2 ms
    f = build_flows(conv.columns())
    assert abs(f.flow["rtt_server_ms"][0] - 0.8) < 1e-9



def test_an_answer_bounds_the_round_trip_from_above_only():
    """An ACK carried by the peer's answer includes the peer's application: without a
    handshake or a pure ACK of that side it bounds the round trip (`rtt_bound`), and the
    reaction window's upper end (`rtt_typical_ms`) is the smallest such bound; a prompt
    pure ACK is the path itself. With a handshake the answers never set the upper end."""
    def conversation(handshake: bool) -> dict:
        conv = Conversation(C, SV)
        t = conv.handshake(0.0, rtt_ms=0.4) if handshake else 0.0
        for think in (5.6, 320.0, 7.0):
            conv.send("s", t, 13)
            conv.send("c", t + think, 6)   # the client's answer carries its ACK
            conv.ack("s", t + think + 0.3)  # the server's prompt pure ACK: the path
            t += think + 1.0
        return build_flows(conv.columns()).flow

    fl = conversation(handshake=False)
    assert fl["rtt_bound"][0].tolist() == [True, False]  # [client, server]
    assert abs(fl["rtt_client_ms"][0] - 5.6) < 1e-9
    assert abs(fl["rtt_typical_ms"][0][0] - 5.6) < 1e-9
    assert abs(fl["rtt_server_ms"][0] - 0.3) < 1e-9
    fl = conversation(handshake=True)
    assert fl["rtt_bound"][0].tolist() == [False, False]
    assert fl["rtt_typical_ms"][0][0] < 1  # the handshake's, not a turnaround's

def test_mss_from_syn_less_timestamp_option():
    conv = Conversation(C, SV, mss=1460)
    conv.handshake(0.0)
    cols = conv.columns()
    cols["has_ts"][:2] = 1
    f = build_flows(cols)
    assert f.flow["mss"][0].tolist() == [1448, 1448]


def test_vantage_from_handshake_timing():
    def vantage(syn_to_synack, synack_to_ack):
        rows = [dict(t_ms=0, src=C, dst=SV, seq=1, flags=S, mss=1460),
                dict(t_ms=syn_to_synack, src=SV, dst=C, seq=9, ack=2, flags=S | A, mss=1460),
                dict(t_ms=syn_to_synack + synack_to_ack, src=C, dst=SV, seq=2, ack=10, flags=A)]
        return build_flows(packets(rows)).flow["vantage"][0]

    assert vantage(20.0, 0.05) == "client"
    assert vantage(0.05, 20.0) == "server"
    assert vantage(10.0, 10.0) == "middle"


def test_grouped_cummax_restarts_per_group():
    v = np.array([3, 1, 5, 2, 0, 4])
    g = np.array([0, 0, 0, 1, 1, 1])
    assert grouped_cummax(v, g).tolist() == [3, 3, 5, 2, 2, 4]
    assert grouped_cummax(v, g, exclusive=True, floor=-1).tolist() == [-1, 3, 3, -1, 2, 2]


def test_before_and_after_name_the_nearest_rows_of_each_direction_within_the_flow():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)  # rows 0 SYN(c) 1 SYN/ACK(s) 2 ACK(c)
    conv.send("c", t + 1, 10)  # 3
    conv.send("c", t + 2, 10)  # 4
    conv.ack("s", t + 3)  # 5
    conv.send("s", t + 4, 5)  # 6
    conv.ack("c", t + 5)  # 7
    other = Conversation("10.0.0.3:40001", SV)  # a second flow never leaks into the first
    other.handshake(t + 2.5)
    f = build_flows(packets(conv.rows + other.rows))
    rows = np.arange(f.rows(0).start, f.rows(0).stop)
    same, oth = f.before(rows)
    assert same.tolist() == [-1, -1, 0, 2, 3, 1, 5, 4]
    assert oth.tolist() == [-1, 0, 1, 1, 1, 4, 4, 6]
    same, oth = f.before(rows, data=True)
    assert same.tolist() == [-1, -1, -1, -1, 3, -1, -1, 4]
    assert oth.tolist() == [-1, -1, -1, -1, -1, 4, 4, 6]
    same, oth = f.after(rows)
    assert same.tolist() == [2, 5, 3, 4, 7, 6, -1, -1]
    assert oth.tolist() == [1, 2, 5, 5, 5, 7, 7, -1]
    same, oth = f.after(rows, data=True)
    assert same.tolist() == [3, 6, 3, 4, -1, 6, -1, -1]
    assert oth.tolist() == [6, 3, 6, 6, 6, -1, -1, -1]


def test_tuple_ids_given_by_the_caller_number_the_flows_and_change_nothing_else():
    a = Conversation(C, SV, isn_c=100)  # tuple 0, reused by c below
    t = a.handshake(0.0)
    a.send("c", t + 1, 5)
    b = Conversation("[2001:db8::1]:40001", "[2001:db8::2]:8000")  # tuple 1
    b.handshake(0.5)
    c = Conversation(C, SV, isn_c=900000)
    c.handshake(50.0)
    rows = a.rows + b.rows + c.rows
    for i, r in enumerate(rows, 1):
        r["frame"] = i
    rows[1], rows[2] = rows[2], rows[1]  # records out of time order too
    cols = packets(rows)
    tuple_of = np.array([0 if C in (r["src"], r["dst"]) else 1 for r in rows])
    found = build_flows(cols)
    assert found.count == 3
    # found's numbering, then the other way round: with a reused 4-tuple the flows are
    # numbered by first packet time either way
    for ids in (tuple_of, 1 - tuple_of):
        given = build_flows(cols, ids)
        for k in found.seg:
            assert np.array_equal(given.seg[k], found.seg[k]), k
        for k in found.flow:
            assert np.array_equal(given.flow[k], found.flow[k],
                                  equal_nan=found.flow[k].dtype.kind == "f"), k


def test_tuple_ids_given_by_the_caller_set_the_order_of_the_flows():
    a, b = Conversation(C, SV), Conversation("10.0.0.3:40001", SV)
    a.handshake(0.0)
    b.handshake(1.0)
    cols = packets(a.rows + b.rows)
    assert build_flows(cols).flow["client"].tolist() == [C, "10.0.0.3:40001"]
    given = build_flows(cols, np.array([1] * 3 + [0] * 3))
    assert given.flow["client"].tolist() == ["10.0.0.3:40001", C]
    assert given.seg["frame"].tolist() == [4, 5, 6, 1, 2, 3]


def test_rows_handed_grouped_by_tuple_give_the_flows_of_rows_in_time_order():
    """The stream hands rows grouped by 4-tuple (time order within each): build_flows then
    reads them in place, and finds what it finds in time order, copies and a reused 4-tuple
    included; out of time order within a tuple, it sorts them as before."""
    a = Conversation(C, SV, isn_c=100)
    t = a.handshake(0.0)
    a.send("c", t + 1, 5)
    b = Conversation("10.0.0.3:40001", SV)
    b.handshake(0.2)
    b.send("s", 0.6, 9)
    c = Conversation(C, SV, isn_c=900000)  # tuple 0 reused
    c.handshake(50.0)
    rows = sorted(a.rows + b.rows + c.rows, key=lambda r: r["t_ms"])
    rows.insert(3, dict(rows[2], t_ms=rows[2]["t_ms"] + 0.001))  # a copy
    for i, r in enumerate(rows, 1):
        r["frame"] = i
    tuple_of = np.array([0 if C in (r["src"], r["dst"]) else 1 for r in rows])
    in_time = build_flows(packets(rows), tuple_of)
    grouped = np.argsort(tuple_of, kind="stable")
    assert not np.array_equal(grouped, np.arange(len(rows)))
    for order in (grouped, grouped[::-1]):
        given = build_flows(packets([rows[i] for i in order]), tuple_of[order])
        assert given.duplicates == in_time.duplicates == 1
        for k in in_time.seg:
            assert np.array_equal(given.seg[k], in_time.seg[k]), k
        for k in in_time.flow:
            assert np.array_equal(given.flow[k], in_time.flow[k],
                                  equal_nan=in_time.flow[k].dtype.kind == "f"), k


# ---------------------------------------------------------------- the same packet seen twice
def seen_twice(rows: list[dict], delay_ms: float = 0.003) -> list[dict]:
    """Each row followed by a copy `delay_ms` later, frames numbered in that order."""
    out = []
    for i, r in enumerate(rows):
        out += [dict(r, frame=2 * i + 1), dict(r, t_ms=r["t_ms"] + delay_ms, frame=2 * i + 2)]
    return out


def conversation() -> Conversation:
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    for k in range(3):
        conv.send("c", t + 1 + 50 * k, 6)
        conv.ack("s", t + 41 + 50 * k)
        conv.send("c", t + 41.05 + 50 * k, 7)
        conv.send("s", t + 42 + 50 * k, 13)
    for i, r in enumerate(conv.rows):
        r["ipid"], r["tsval"] = 100 + i, 7000 + int(r["t_ms"])
    return conv


def test_the_same_packet_seen_twice_is_dropped_before_the_sequence_analysis():
    """`tcpdump -i any` on a veth pair: every packet twice, 3 us apart. The second copies are
    dropped and counted, and what remains is the flow seen once: nothing is a retransmission."""
    rows = conversation().rows
    once = build_flows(packets(rows))
    twice = build_flows(packets(seen_twice(rows)))
    assert once.duplicates == 0
    assert twice.duplicates == len(rows)
    assert twice.seg["frame"].tolist() == [2 * f - 1 for f in once.seg["frame"].tolist()]
    assert not twice.seg["retrans"].any()
    for k in ("flow", "dir", "seq", "ack", "payload", "retrans", "keepalive", "acked_by"):
        assert twice.seg[k].tolist() == once.seg[k].tolist(), k
    assert twice.flow["packets"].tolist() == once.flow["packets"].tolist() == [len(rows)]


def test_copies_interleaved_with_later_packets_are_dropped_too():
    """A B A' B' (the second interface sees a burst after a queue), and copies of one
    direction with the other direction's packets between them."""
    rows = conversation().rows
    burst = sorted(seen_twice(rows, delay_ms=0.2), key=lambda r: (r["t_ms"], r["frame"]))
    assert [r["frame"] for r in burst] != sorted(r["frame"] for r in burst)  # interleaved
    f = build_flows(packets(burst))
    assert f.duplicates == len(rows)
    assert not f.seg["retrans"].any()
    assert (f.seg["frame"] % 2 == 1).all()


def test_a_real_retransmission_is_not_a_duplicate():
    """Same sequence number, but a new IP ID, a new TSval, or later than the window: a resend,
    counted as a retransmission as before."""
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 10)
    conv.rows[-1].update(ipid=7, tsval=500)
    first = dict(conv.rows[-1])
    resends = [dict(first, t_ms=first["t_ms"] + 0.01, ipid=8),           # new IP ID
               dict(first, t_ms=first["t_ms"] + 0.02, ipid=7, tsval=501),  # new TSval
               dict(first, t_ms=first["t_ms"] + 2.5)]                      # after the window
    for resend in resends:
        f = build_flows(packets(conv.rows + [resend]))
        assert f.duplicates == 0
        assert f.seg["retrans"].tolist() == [False] * 4 + [True]
    # the very same bytes within the window: a copy
    f = build_flows(packets(conv.rows + [dict(first, t_ms=first["t_ms"] + 1.9)]))
    assert f.duplicates == 1 and not f.seg["retrans"].any()


def test_a_copy_differing_in_any_header_field_is_kept():
    """Flags, window, payload length or acknowledgement number differ: another packet."""
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.ack("c", t + 1)
    ack = dict(conv.rows[-1], ipid=9)
    for change in ({"win": 1024}, {"flags": A | 0x08}, {"ack": ack["ack"] + 1}, {"len": 1}):
        other = dict(ack, t_ms=ack["t_ms"] + 0.005, **change)
        assert build_flows(packets(conv.rows[:-1] + [ack, other])).duplicates == 0, change
