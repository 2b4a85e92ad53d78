"""detect: the evidence chain of DETECTION.md and every look-alike it must reject.

Synthetic conversations (scripted columns); real captures are checked in test_samples.py.
"""

import numpy as np
import pandas as pd
import pytest

from columns import Conversation
from nagleprobe.detect import _grouped_median, _median_ms, detect
from nagleprobe.flows import build_flows
from nagleprobe.read import CaptureInfo
from nagleprobe.report import build_report

C, SV = "10.0.0.1:40000", "10.0.0.2:8000"


def run(conv: Conversation):
    f = build_flows(conv.columns())
    det = detect(f)
    info = CaptureInfo(path="synthetic", format="pcap", compressed=False, link_types=["EN10MB"],
                       packets=len(f.seg["flow"]), warnings=[], skipped={})
    return build_report(info, {}, f, det, 0)


def echo_round(conv, t, delack=40.0, reaction=0.02, gap=0.1):
    """write(head); write(body); read() against an echo server with a delayed ACK."""
    conv.send("c", t, 6)                      # S1 head
    conv.ack("s", t + delack)                 # late pure ACK
    conv.send("c", t + delack + reaction, 7)  # S2 body, released by the ACK
    conv.send("s", t + delack + reaction + gap, 13)  # echo
    return t + delack + 1.0


def test_write_write_read_against_delayed_ack_is_a_stall_owned_by_the_client():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    for _ in range(5):
        t = echo_round(conv, t + 0.2)
    r = run(conv)
    assert r.stall_count == 5
    st = r.to_dict()["stalls"][0]
    assert st["sender"] == "client" and st["held_bytes"] == 7
    assert st["frames"] == {"small": 4, "ack": 5, "released": 6}
    assert abs(st["peer_ack_delay_ms"] - 39.95) < 0.1  # less the handshake's path to the server
    assert st["confidence"] >= 0.9
    fl = r.to_dict()["flows"][0]
    assert fl["fix"]["side"] == "client" and fl["fix"]["endpoint"] == C
    assert fl["fix"]["action"] == "coalesce-writes"
    assert fl["endpoints"]["client"]["nagle"] == "on"
    assert 39 < fl["endpoints"]["server"]["delayed_ack_ms"] < 41
    assert abs(fl["stall_ms"] - 5 * 40.02) < 0.01


def test_independent_small_messages_get_set_tcp_nodelay():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    for _ in range(4):  # one-way records, the receiver never answers
        conv.send("c", t, 96)
        conv.ack("s", t + 200)
        conv.send("c", t + 200.05, 656)
        conv.ack("s", t + 200.1)
        t += 300
    r = run(conv)
    assert r.stall_count == 4
    fix = r.to_dict()["flows"][0]["fix"]
    assert (fix["action"], fix["basis"]) == ("set-tcp-nodelay", "separate-messages")
    assert "(~200 ms, typical of Windows)" in fix["text"] and "-like" not in fix["text"]
    assert ("TCP_NODELAY, because S1 was typically 96 bytes and S2 656 bytes (too long for a "
            "header) and the server did not answer right after S2: separate messages") \
        in fix["text"]


def test_think_time_is_not_a_stall():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    for _ in range(5):
        conv.send("c", t, 6)
        conv.ack("s", t + 40)
        conv.send("c", t + 100, 7)  # written 60 ms after the ACK arrived: not held
        conv.ack("s", t + 140)
        t += 200
    assert run(conv).stall_count == 0


def test_retransmission_timeout_is_not_a_stall():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 6)
    conv.send("c", t + 201, 6, seq=conv.nxt["c"] - 6)  # S1 lost, resent after the RTO
    conv.ack("s", t + 201.05)                            # ACKed at once
    conv.send("c", t + 201.07, 7)
    assert run(conv).stall_count == 0


def test_resent_old_data_after_a_late_ack_is_not_a_stall():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 6)
    conv.ack("s", t + 41)
    conv.send("c", t + 41.02, 6, seq=conv.nxt["c"] - 6)  # old sequence space
    assert run(conv).stall_count == 0


def test_zero_window_wait_is_not_a_stall():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 6)
    conv.ack("s", t + 1.05, win=0)   # ACKed at once, but the window is shut
    conv.ack("s", t + 300, win=512)  # window update, same ACK number
    conv.send("c", t + 300.02, 7)
    assert run(conv).stall_count == 0


def test_full_sized_segments_held_by_the_congestion_window_are_not_stalls():
    conv = Conversation(C, SV, mss=1460)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 1460)
    conv.ack("s", t + 41)
    conv.send("c", t + 41.02, 1460)
    assert run(conv).stall_count == 0


def test_tcp_nodelay_sender_is_not_stalled_and_is_proven_nagle_off():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    for _ in range(3):
        conv.send("c", t, 6)
        conv.send("c", t + 0.01, 7)  # second small segment while the first is unacked
        conv.ack("s", t + 40)
        t += 100
    r = run(conv)
    assert r.stall_count == 0
    assert r.to_dict()["flows"][0]["endpoints"]["client"]["nagle"] == "off"


def test_receiver_that_acks_at_once_causes_no_stall():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    for _ in range(3):
        conv.send("c", t, 6)
        conv.ack("s", t + 0.03)
        conv.send("c", t + 0.05, 7)
        conv.send("s", t + 0.1, 13)
        t += 10
    r = run(conv)
    assert r.stall_count == 0
    assert r.to_dict()["flows"][0]["endpoints"]["server"]["quick_acks"] == 3


def test_capture_near_the_server_allows_for_the_path_to_the_client():
    # path: capture point to client and back 10 ms, to server ~0
    conv = Conversation(C, SV)
    conv.rows += [dict(t_ms=0, src=C, dst=SV, seq=1000, flags=0x02, mss=1460),
                  dict(t_ms=0.05, src=SV, dst=C, seq=5000, ack=1001, flags=0x12, mss=1460),
                  dict(t_ms=10.05, src=C, dst=SV, seq=1001, ack=5001, flags=0x10)]
    conv.nxt = {"c": 1001, "s": 5001}
    t = 20.0
    conv.send("c", t, 6)          # arrives at the server
    conv.ack("s", t + 40)         # server's delayed ACK leaves
    conv.send("c", t + 50.1, 7)   # released at the client 5 ms later, seen here 10 ms later
    r = run(conv)
    assert r.to_dict()["flows"][0]["vantage"] == "server"
    assert r.stall_count == 1
    # the same release 30 ms after the ACK is think time, not a stall
    conv.rows[-1]["t_ms"] = t + 70
    assert run(conv).stall_count == 0


def test_single_stall_has_lower_confidence_than_a_repeated_one():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    echo_round(conv, t + 0.2, delack=70.0)
    st = run(conv).to_dict()["stalls"]
    assert len(st) == 1 and st[0]["confidence"] == 0.6


def test_small_tail_after_a_full_segment_is_not_held_on_linux():
    # Minshall's rule: only an unacknowledged *small* segment holds the next small one. The
    # capture shows the sender follows it: once it sent a tail while a full segment was
    # still unacknowledged, which a classic-Nagle sender never does.
    conv = Conversation(C, SV, mss=1460)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 1460)
    conv.send("c", t + 1.01, 500)  # tail right behind the unacknowledged full segment
    conv.ack("s", t + 1.1)
    conv.send("c", t + 10, 1460)
    conv.ack("s", t + 50)
    conv.send("c", t + 50.02, 500)
    r = run(conv)
    assert r.stall_count == 0
    fl = r.to_dict()["flows"][0]
    assert fl["endpoints"]["client"]["not_classic_evidence"] == 1
    assert fl["why_not"] == {"not_classic": 1}


def test_tail_held_behind_a_lone_full_segment_is_a_classic_nagle_stall():
    # the classic rule (Windows, BSD, embedded stacks): any unacknowledged data holds a
    # small segment, so the tail of "one full segment + tail" waits for the delayed ACK
    conv = Conversation(C, SV, mss=1460)
    t = conv.handshake(0.0)
    for _ in range(3):
        conv.send("c", t + 1, 1460)
        conv.ack("s", t + 41)
        conv.send("c", t + 41.02, 500)
        conv.send("s", t + 41.1, 64)  # the answer
        t += 100
    r = run(conv)
    assert r.stall_count == 3
    st = r.to_dict()["stalls"][0]
    assert st["behind_full"] and st["small_bytes"] == 1460 and st["held_bytes"] == 500
    client = r.to_dict()["flows"][0]["endpoints"]["client"]
    assert client["nagle_flavour"] == "classic" and client["held_behind_full"] == 3
    assert client["nagle"] == "on"


def full_segment_then_tail(offered: int):
    """Three times: the server offers a window of `offered` << 7 bytes, the client sends a
    full segment, the server's late ACK, the client's 500-byte tail, the server's answer."""
    conv = Conversation(C, SV, mss=1460)
    t = conv.handshake(0.0)
    for _ in range(3):
        conv.ack("s", t + 0.5, win=offered)
        conv.send("c", t + 1, 1460)
        conv.ack("s", t + 41)
        conv.send("c", t + 41.02, 500)
        conv.send("s", t + 41.1, 64)
        t += 100
    return run(conv)


def test_tail_released_when_a_full_window_opens_is_window_limited_not_nagle():
    # the issue-30 shape: each full segment fills the receiver's window (room left < the
    # tail), the receiver's late ACK opens it, the tail leaves at once: the window held it
    r = full_segment_then_tail(offered=12)  # 12 << 7 = 1536 B offered: 76 B left after S1
    assert r.stall_count == 0
    fl = r.to_dict()["flows"][0]
    assert fl["why_not"] == {"window": 3}
    client = fl["endpoints"]["client"]
    assert client["nagle_flavour"] != "classic" and client["held_behind_full"] == 0


def test_a_window_with_room_for_the_tail_leaves_a_classic_stall_standing():
    # the same, with room for S2 after S1 in the offered window: only Nagle held it
    r = full_segment_then_tail(offered=16)  # 2048 B offered: 588 B left, room for 500
    assert r.stall_count == 3
    assert r.to_dict()["flows"][0]["endpoints"]["client"]["nagle_flavour"] == "classic"


def test_window_update_that_acknowledges_nothing_new_is_not_the_releasing_ack():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 6)
    conv.ack("s", t + 1.05, win=3)   # ACKed at once, tiny window
    conv.ack("s", t + 41, win=512)   # window opens 40 ms later, same ACK number
    conv.send("c", t + 41.02, 7)
    assert run(conv).stall_count == 0


def test_grouped_median_is_what_pandas_gives_to_the_last_bit():
    """Synthetic: random groups, values with few digits (ties) or many, odd and even counts."""
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(0, 300))
        g = rng.integers(0, int(rng.integers(1, 30)), n)
        v = np.round(rng.random(n) * 300, int(rng.integers(0, 7)))
        if trial % 3 == 0:
            v = rng.choice([40.0, 40.004, 200.1, 39.9], n)
        groups, med, count, group_of = _grouped_median(v, g)
        want = pd.Series(v).groupby(g)
        assert np.array_equal(groups, want.median().index.to_numpy())
        assert np.array_equal(med, want.median().to_numpy())
        assert np.array_equal(count, want.size().to_numpy())
        assert np.array_equal(med[group_of], want.transform("median").to_numpy())


def test_median_of_nanoseconds_is_grouped_median_of_their_ms_to_the_last_bit():
    """detect._median_ms (one int64 sort) against flows.grouped_median of ns / 1e6: ties,
    negative delays, odd and even counts, values too far apart for one int64 key, floats."""
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 300))
        g = rng.integers(0, int(rng.integers(1, 30)), n)
        ns = rng.integers(-5_000_000, 700_000_000, n)
        if trial % 3 == 0:
            ns = rng.choice([40_000_000, 40_004_000, 200_100_000, -39_900_000], n)
        if trial % 10 == 1:
            ns[0] = np.iinfo(np.int64).max // 3  # (no single key: falls back to lexsort)
        if trial % 10 == 2:
            ns = ns.astype(float)  # (as a test gives them)
        groups, med, count = _median_ms(ns, g)
        want, want_med, want_count, _ = _grouped_median(ns / 1e6, g)
        assert np.array_equal(groups, want) and np.array_equal(count, want_count)
        assert np.array_equal(med, want_med)


def long_path(rtt: float = 200.0) -> Conversation:
    """Captured at the client, the server `rtt` ms away (handshake says so)."""
    conv = Conversation(C, SV)
    conv.rows += [dict(t_ms=0, src=C, dst=SV, seq=1000, flags=0x02, mss=1460),
                  dict(t_ms=rtt, src=SV, dst=C, seq=5000, ack=1001, flags=0x12, mss=1460),
                  dict(t_ms=rtt + 0.05, src=C, dst=SV, seq=1001, ack=5001, flags=0x10)]
    conv.nxt = {"c": 1001, "s": 5001}
    return conv


def test_on_a_long_path_the_ack_delay_is_what_the_path_does_not_explain():
    # at the client, the server's 40 ms delayed ACK shows 200 + 40 ms after S1
    conv = long_path(200.0)
    t = 500.0
    for _ in range(3):
        t = echo_round(conv, t, delack=240.0, gap=200.0) + 300
    r = run(conv)
    assert r.stall_count == 3
    st = r.to_dict()["stalls"][0]
    assert abs(st["peer_ack_delay_ms"] - 40.0) < 0.1 and abs(st["delay_ms"] - 240.02) < 0.01


def test_on_a_long_path_a_prompt_ack_is_a_nagle_hold_not_a_stall():
    # think time 50 ms, then Nagle holds the second write until the ACK, one RTT after S1
    conv = long_path(80.0)
    t = 500.0
    for _ in range(4):
        conv.send("c", t, 6)
        conv.ack("s", t + 80.0)
        conv.send("c", t + 80.03, 7)
        conv.send("s", t + 160.1, 13)
        t += 400
    r = run(conv)
    fl = r.to_dict()["flows"][0]
    assert r.stall_count == 0
    assert fl["nagle_holds"] == 4 and abs(fl["nagle_hold_ms"] - 4 * 80.03) < 0.01
    assert fl["why_not"] == {"nagle_hold": 4}


def test_a_release_before_the_ack_could_arrive_is_not_a_stall():
    # capture near the server, the client 40 ms away: S2 seen 1 ms after the ACK left the
    # server cannot have been released by it
    conv = Conversation(C, SV)
    conv.rows += [dict(t_ms=0, src=C, dst=SV, seq=1000, flags=0x02, mss=1460),
                  dict(t_ms=0.05, src=SV, dst=C, seq=5000, ack=1001, flags=0x12, mss=1460),
                  dict(t_ms=40.05, src=C, dst=SV, seq=1001, ack=5001, flags=0x10)]
    conv.nxt = {"c": 1001, "s": 5001}
    conv.send("c", 100.0, 6)
    conv.ack("s", 141.0)
    conv.send("c", 142.0, 7)
    fl = run(conv).to_dict()["flows"][0]
    assert fl["stalls"] == 0 and fl["why_not"] == {"before_ack_could_arrive": 1}



def test_think_time_after_a_late_ack_is_not_a_release_however_long_the_answers_take():
    """On a 0.3 ms path the client answers each echo 320 ms later (its ACK rides on the
    answer) and writes its body 280 ms after the server's late ACK: the turnarounds include
    the client's think time, so they do not widen the reaction window; the handshake gives
    the path, and the body was written long after the ACK arrived."""
    conv = Conversation(C, SV)
    t = conv.handshake(0.0, rtt_ms=0.3)
    for _ in range(4):
        conv.send("s", t, 13)                # the echo (or greeting)
        conv.send("c", t + 320.0, 6)         # head: answers it 320 ms later
        conv.ack("s", t + 360.0)             # the server's late ACK of the head
        conv.send("c", t + 640.0, 7)         # body: 280 ms after the ACK
        t += 640.5
    fl = run(conv).to_dict()["flows"][0]
    assert fl["stalls"] == 0 and fl["why_not"] == {"think_time": 4}


def test_a_release_seen_at_the_receiver_is_found_when_only_turnarounds_bound_the_path():
    """An excerpt seen at the server, no handshake: the client answers each echo 5.6 ms
    later, the only round trips known. They bound the path from above (it includes the
    client's wait), so a body 0.6 ms after the server's late ACK is not "before the ACK
    could arrive": it is the release."""
    conv = Conversation(C, SV)
    t = 0.0
    for _ in range(2):
        conv.send("s", t, 13)                # echo
        conv.send("c", t + 5.6, 6)           # head, acknowledging the echo
        conv.ack("s", t + 45.6)              # the server's late ACK
        conv.send("c", t + 46.2, 7)          # body, 0.6 ms later: one round trip
        t += 46.3
    r = run(conv)
    fl = r.to_dict()["flows"][0]
    assert fl["stalls"] == 2 and fl["why_not"] == {}
    assert r.flows["rtt_client_ms"][0] > 5  # (the turnaround, not the path)

def test_a_sender_proven_to_have_nagle_off_is_never_held():
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    conv.send("c", t + 1, 6)
    conv.send("c", t + 1.01, 7)  # small while small unacked: Nagle off
    conv.ack("s", t + 2)
    echo_round(conv, t + 10)  # the shape of a stall, but the sender does not hold
    r = run(conv)
    fl = r.to_dict()["flows"][0]
    assert r.stall_count == 0 and fl["why_not"] == {"nagle_off": 1}
    assert fl["endpoints"]["client"]["nagle_flavour"] == "off"


def ack_delay_boundary(delack_ms: float) -> dict:
    conv = Conversation(C, SV)
    t = conv.handshake(0.0, rtt_ms=0.0)
    echo_round(conv, t + 10, delack=delack_ms)
    return run(conv).to_dict()["flows"][0]


def test_the_ack_delay_range_is_inclusive_at_25_and_600_ms():
    from nagleprobe.detect import DELACK_MAX_MS, DELACK_MIN_MS
    assert (DELACK_MIN_MS, DELACK_MAX_MS) == (25.0, 600.0)
    assert ack_delay_boundary(25.0)["stalls"] == 1
    assert ack_delay_boundary(600.0)["stalls"] == 1
    below = ack_delay_boundary(24.9)
    assert below["stalls"] == 0 and below["nagle_holds"] == 1 and below["why_not"] == {}
    above = ack_delay_boundary(600.1)
    assert above["stalls"] == 0 and above["why_not"] == {"delay_out_of_range": 1}


@pytest.mark.parametrize("ms, name", [
    (29.9, ""), (30.0, "typical of Linux"), (55.0, "typical of Linux"),
    (60.0, "typical of Linux"), (60.1, ""), (84.9, ""), (85.0, "typical of macOS/BSD"),
    (120.0, "typical of macOS/BSD"), (120.1, ""), (169.9, ""), (170.0, "typical of Windows"),
    (230.0, "typical of Windows"), (230.1, ""), (None, ""),
])
def test_one_band_table_names_a_timer_and_raises_confidence_alike(ms, name):
    from nagleprobe.detect import _confidence, timer_name

    assert timer_name(ms) == name
    if ms is None:
        return
    one = {"flow": np.zeros(1, np.int64), "dir": np.zeros(1, np.int64),
           "ack_delay_ns": np.array([ms * 1e6])}
    assert _confidence(one, np.array(["handshake"], dtype=object))[0] == (0.65 if name else 0.6)
