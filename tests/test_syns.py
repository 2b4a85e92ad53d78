"""A SYN that fits no connection (nagleprobe.syns, issue 30 point 2) is a counted, named
anomaly, not a new connection that takes the stalls with it; a 4-tuple reused after a FIN
or RST, or after a long silence, is still a new connection. The captures are real samples:
every packet is real except the one SYN injected (its sequence number and time are
synthetic), or the RST taken out; the rules' edges are shown on scripted columns."""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd
import pytest
from test_live import fed_in_pieces
from test_pieces import TINY, in_pieces, without_pieces

import nagleprobe
from columns import A, F, S, Conversation
from nagleprobe.flows import build_flows
from nagleprobe.syns import REUSE_IDLE_S, SKIPPED_KIND
from oracle import analyze_whole

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ECHO = SAMPLES / "echo_split_lo.pcap"  # one connection, 19 stalls
REUSE = SAMPLES / "formats" / "port_reuse.pcap"  # a connection, its RST, a new one
REUSE_RST = 26  # the RST's frame in it


def records(path: Path) -> tuple[bytes, list[bytearray]]:
    """A little-endian microsecond pcap's header and its records (header and data)."""
    data = path.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1"
    out, off = [], 24
    while off + 16 <= len(data):
        incl, = struct.unpack_from("<I", data, off + 8)
        out.append(bytearray(data[off:off + 16 + incl]))
        off += 16 + incl
    return data[:24], out


def _tcp(rec: bytearray) -> int:
    """Offset of the TCP header in a record (Ethernet, IPv4)."""
    return 16 + 14 + (rec[16 + 14] & 0x0F) * 4


def _usec(rec: bytearray) -> int:
    sec, usec = struct.unpack_from("<II", rec, 0)
    return sec * 1_000_000 + usec


def _set_usec(rec: bytearray, t: int) -> None:
    struct.pack_into("<II", rec, 0, t // 1_000_000, t % 1_000_000)


def write(tmp_path: Path, header: bytes, recs: list[bytearray], name: str) -> str:
    p = tmp_path / name
    p.write_bytes(header + b"".join(bytes(r) for r in recs))
    return str(p)


def with_syn(tmp_path: Path, after_frame: int, seq_shift: int, dt_us: int = 1,
             before: bool = False) -> str:
    """echo_split_lo.pcap with a copy of its SYN, sequence number moved by `seq_shift`,
    injected `dt_us` after frame `after_frame` (or, `before`, that long before it)."""
    header, recs = records(ECHO)
    syn = bytearray(recs[0])
    at = _tcp(syn) + 4
    seq, = struct.unpack_from("!I", syn, at)
    struct.pack_into("!I", syn, at, (seq + seq_shift) & 0xFFFFFFFF)
    ref = recs[after_frame - 1]
    _set_usec(syn, _usec(ref) + (-dt_us if before else dt_us))
    recs.insert(after_frame - 1 if before else after_frame, syn)
    return write(tmp_path, header, recs, "injected.pcap")


def analyses(path: str) -> dict[str, object]:
    """The capture analysed whole, streamed (also a batch per connection), and fed a packet
    at a time with every connection analysed in pieces of TINY packets."""
    return {"whole": analyze_whole(path),
            "streamed": nagleprobe.analyze(path),
            "batches of 1 row": nagleprobe.analyze(path, batch_rows=1),
            "pieces of 4": nagleprobe.analyze(path, piece_rows=4),
            "fed 1 packet, pieces": in_pieces(Path(path), TINY)[0]}


def assert_one_connection_with_every_stall(path: str, jump_frame: int) -> None:
    clean = analyze_whole(str(ECHO))
    reports = analyses(path)
    whole = reports["whole"]
    for how, r in reports.items():
        assert len(r.flows) == 1, how
        assert len(r.stalls) == len(clean.stalls) == 19, how
        assert r.capture["skipped"].get(SKIPPED_KIND) == 1, how
        named = [w for w in r.capture["warnings"] if f"({SKIPPED_KIND})" in w]
        assert len(named) == 1 and f"frame {jump_frame};" in named[0], how
        # the stalls are the sample's own, shifted by the one frame injected before them
        assert (r.stalls["small_frame"].to_numpy()
                == clean.stalls["small_frame"].to_numpy() + (r.stalls["small_frame"].to_numpy()
                                                            > jump_frame)).all(), how
        assert without_pieces(r.to_dict()) == without_pieces(whole.to_dict()), how
        pd.testing.assert_frame_equal(r.stalls, whole.stalls)


def test_a_second_syn_with_another_isn_1us_after_the_first_is_left_out(tmp_path):
    """The SYN-ACK acknowledges the first SYN: the second is the anomaly (was: a one-packet
    flow, and the connection's client sequence numbers read from it: 0 of 19 stalls)."""
    assert_one_connection_with_every_stall(with_syn(tmp_path, 1, 0x12345678), jump_frame=2)


def test_a_syn_1us_before_the_one_the_syn_ack_answers_is_left_out(tmp_path):
    assert_one_connection_with_every_stall(with_syn(tmp_path, 1, 0x12345678, before=True),
                                           jump_frame=1)


@pytest.mark.parametrize("after_frame", [13, 23, 60])
def test_a_syn_far_outside_an_established_connection_is_left_out(tmp_path, after_frame):
    """A SYN half the sequence space away, after the 2nd, 3rd or a later stall, no FIN or RST
    before it: counted and named, the connection analysed as if it were not there."""
    assert_one_connection_with_every_stall(with_syn(tmp_path, after_frame, 1 << 31),
                                           jump_frame=after_frame + 1)


@pytest.mark.parametrize("piece,window", [(200, 4096), (1, 16)])
@pytest.mark.parametrize("after_frame", [1, 23])
def test_watch_reports_every_stall_and_counts_the_syn_once(tmp_path, after_frame, piece,
                                                          window):
    """`watch` analyses each connection again and again on a window of its packets: the
    SYN is left out of each, and counted once, in the final event."""
    path = with_syn(tmp_path, after_frame, 1 << 31)
    events, live = fed_in_pieces(Path(path), piece, window)
    want = analyze_whole(path).stalls["released_frame"]
    assert sorted(e["frames"][2] for e in events) == sorted(want.tolist())
    final = live.final({"packets": 108, "skipped": {}, "warnings": []})
    assert final["skipped"] == {SKIPPED_KIND: 1}
    (w,) = final["warnings"]
    assert f"frame {after_frame + 1};" in w["text"] and (w["code"], w["count"]) == (
        SKIPPED_KIND, 1)


def reuse(tmp_path: Path, rst: bool, gap_us: int = 0) -> str:
    """port_reuse.pcap, with or without its RST, the second connection moved `gap_us` later."""
    header, recs = records(REUSE)
    first, second = recs[:REUSE_RST - 1], recs[REUSE_RST:]
    for r in second:
        _set_usec(r, _usec(r) + gap_us)
    return write(tmp_path, header, first + ([recs[REUSE_RST - 1]] if rst else []) + second,
                 "reuse.pcap")


@pytest.mark.parametrize("rst,gap_us", [(True, 0), (False, REUSE_IDLE_S * 1_000_000 + 1)],
                         ids=["after a RST", "after 60 s of silence"])
def test_a_reused_four_tuple_is_still_two_connections(tmp_path, rst, gap_us):
    path = reuse(tmp_path, rst, gap_us)
    for how, r in analyses(path).items():
        assert len(r.flows) == 2, how
        assert SKIPPED_KIND not in r.capture["skipped"], how
        assert not [w for w in r.capture["warnings"] if f"({SKIPPED_KIND})" in w], how
        assert (r.flows["roles"] == "handshake").all(), how


def test_a_new_syn_the_peer_answers_is_a_new_connection_though_no_rst_was_captured(tmp_path):
    """Without the RST and 0.1 s later: the server's SYN-ACK acknowledges the new SYN, so
    the old connection was gone (its end not captured), and the SYN opened a new one."""
    path = reuse(tmp_path, rst=False)
    reports = analyses(path)
    fed = reports.pop("fed 1 packet, pieces")
    for how, r in reports.items():
        assert len(r.flows) == 2, how
        assert SKIPPED_KIND not in r.capture["skipped"], how
    # fed a packet at a time, its first connection in pieces, the SYN is judged before its
    # answer comes: left out, and a warning says the connection may differ from the whole's
    assert fed.capture["skipped"].get(SKIPPED_KIND) == 1
    assert [w for w in fed.capture["warnings"]
            if "may differ" in w and "answered by a SYN-ACK in a later chunk" in w]


def test_an_unanswered_syn_alone_stays_its_own_connection(tmp_path):
    """A SYN nothing answers, on a 4-tuple used before (a SYN scan, a failed connect) is
    not judged: no SYN-ACK names another as the connection."""
    header, recs = records(ECHO)
    syn = bytearray(recs[0])
    at = _tcp(syn) + 4
    struct.pack_into("!I", syn, at, (struct.unpack_from("!I", syn, at)[0] + 1000) & 0xFFFFFFFF)
    _set_usec(syn, _usec(recs[-1]) + 1_000_000)  # after the connection's FINs
    path = write(tmp_path, header, recs + [syn], "late_syn.pcap")
    for how, r in analyses(path).items():
        assert len(r.flows) == 2, how
        assert SKIPPED_KIND not in r.capture["skipped"], how


# The rules on scripted columns (nagleprobe.syns): one conversation, one SYN added.
C, SV = "10.0.0.1:40000", "10.0.0.2:8000"


def scripted(syn_ms: float, *, data: bool = True, fin: bool = False,
             isn: int = 777_000_000) -> tuple[int, int]:
    """A handshake at 0 ms, (optionally) 10 bytes at 1 ms and their ACK, (optionally) a FIN
    at 3 ms, a SYN with `isn` from the client at `syn_ms`, and 10 bytes 1 ms after it:
    (connections, SYNs left out)."""
    conv = Conversation(C, SV)
    t = conv.handshake(0.0)
    if data:
        conv.send("c", t + 1, 10)
        conv.ack("s", t + 2)
    if fin:
        conv.rows.append(dict(t_ms=t + 3, src=C, dst=SV, seq=conv.nxt["c"], ack=conv.nxt["s"],
                              flags=F | A))
    conv.rows.append(dict(t_ms=syn_ms, src=C, dst=SV, seq=isn, flags=S, mss=1460))
    conv.send("c", syn_ms + 1, 10)
    f = build_flows(conv.columns())
    return f.count, len(f.syn_jumps)


def test_a_syn_with_a_new_isn_in_an_established_connection_is_left_out():
    assert scripted(10.0) == (1, 1)


def test_a_syn_right_after_the_handshake_before_any_data_is_left_out():
    assert scripted(1.0, data=False) == (1, 1)


def test_a_syn_after_a_fin_opens_a_new_connection():
    assert scripted(10.0, fin=True) == (2, 0)


def test_a_syn_after_the_reuse_idle_time_opens_a_new_connection():
    assert scripted(REUSE_IDLE_S * 1000 - 5) == (1, 1)
    assert scripted(REUSE_IDLE_S * 1000 + 5) == (2, 0)


def test_a_syn_with_the_connections_own_isn_is_a_copy_not_an_anomaly():
    assert scripted(10.0, isn=1000) == (1, 0)
