"""pcapng interface flaws (issue 18, points 7 and 8; issue 31): if_tsresol 0x80 (whole
seconds), 0x7F and 0xFF (finer than 64 bits can hold), an interface option running past its
block, a packet block naming an interface that does not exist, packet blocks before any
interface description, and millions of tiny interface blocks. Synthetic files built from
the packets of a real sample."""

from __future__ import annotations

import re
import struct
import tracemalloc

import pytest

import nagleprobe
from capgen import Iface, Section, pcapng_blocks, pcapng_bytes, pcapng_idb
from nagleprobe.errors import CaptureError
from nagleprobe.read import CaptureReader
from replicate import sample_packets

T0 = 1_700_000_000 * 10**9
PACKETS = sample_packets("echo_split_lo.pcap")  # (ns since the first, frame) of a real capture
COARSE = ("time stamps too coarse to show a stall: interface 0 has steps of {step} ({said}), "
          "and the delayed-ACK timers' stalls (40 ms on Linux, 200 ms on Windows) cannot be "
          "resolved; finding no stall means nothing")


def read(data: bytes, tmp_path, strict=False):
    p = tmp_path / "c.pcapng"
    p.write_bytes(data)
    r = CaptureReader(str(p), strict=strict)
    ts = []
    for b in r:
        ts += b.ts_ns.tolist()
    return ts, r.info


def test_tsresol_0x80_is_whole_seconds(tmp_path):
    pk = [(T0 + (t // 10**9) * 10**9, f) for t, f in PACKETS]
    data = pcapng_bytes([Section([Iface(1, tsresol=0x80)],
                                 records=[("epb", 0, t, f) for t, f in pk])])
    ts, info = read(data, tmp_path)
    assert ts == [t for t, _ in pk] and ts[0] == T0
    # read as whole seconds, and said to be too coarse for a stall (tests/test_clock.py)
    assert info.warnings == [COARSE.format(step="1 s", said="declared 1 s")]


@pytest.mark.parametrize("resol, text", [(0x7F, "10^-127 s"), (0xFF, "2^-127 s"),
                                         (0xC0, "2^-64 s"), (0x14, "10^-20 s")])
def test_tsresol_beyond_64_bits_is_a_warning_not_zero_times(resol, text, tmp_path):
    data = pcapng_bytes([Section([Iface(1, tsresol=6)], records=[
        ("epb", 0, T0 + t, f) for t, f in PACKETS])])
    opt = b"\x09\x00\x01\x00\x06"  # if_tsresol 6, as written: made absurd
    assert data.count(opt) == 1
    data = data.replace(opt, opt[:4] + bytes([resol]))
    ts, info = read(data, tmp_path)
    assert ts == [T0 + t for t, _ in PACKETS]  # not all zero: taken as the default
    assert info.warnings == [
        f"interface 0: if_tsresol 0x{resol:02x} ({text}) is finer than 64-bit timestamps can "
        f"hold (block 2 at byte 32); its times read as microseconds (the default)"]
    with pytest.raises(CaptureError, match=r"if_tsresol .* \(block 2 at byte 32\)$"):
        read(data, tmp_path, strict=True)


@pytest.mark.parametrize("resol", [0x94, 0x13, 0xBF, 0x09, 0x00])
def test_fine_and_coarse_tsresol_within_64_bits_are_fine(resol, tmp_path):
    t = 1_500_000_000 if resol in (0x13, 0xBF) else T0  # 10^-19 s, 2^-63 s: ~1.8 s, ~1 s
    data = pcapng_bytes([Section([Iface(1, tsresol=resol)], records=[
        ("epb", 0, t, PACKETS[0][1])])])
    ts, info = read(data, tmp_path)
    # 10^0 s is whole seconds: too coarse to show a stall (tests/test_clock.py)
    assert info.warnings == ([COARSE.format(step="1 s", said="declared 1 s")] if resol == 0
                             else [])
    assert abs(ts[0] - t) < 10**9


def _idb_with_bad_option(e="<"):
    opt = struct.pack(e + "HH", 9, 200) + b"\x06\0\0\0"  # if_tsresol claiming 200 bytes
    body = struct.pack(e + "HHI", 1, 0, 262144) + opt
    return struct.pack(e + "II", 1, len(body) + 12) + body + struct.pack(e + "I", len(body) + 12)


def test_idb_option_running_past_its_block(tmp_path):
    good = pcapng_bytes([Section([Iface(1)], records=[("epb", 0, T0 + t, f)
                                                      for t, f in PACKETS])])
    shb_len, = struct.unpack_from("<I", good, 4)
    idb_len, = struct.unpack_from("<I", good, shb_len + 4)
    data = good[:shb_len] + _idb_with_bad_option() + good[shb_len + idb_len:]
    ts, info = read(data, tmp_path)
    assert len(ts) == len(PACKETS)
    assert info.warnings == [
        f"interface 0: option 9 of length 200 runs past the end of its block (block 2 at "
        f"byte {shb_len}); its options after it ignored"]
    with pytest.raises(CaptureError, match="runs past the end of its block"):
        read(data, tmp_path, strict=True)


def test_packet_block_naming_a_missing_interface_fails_strict(tmp_path):
    recs = [("epb", 0, T0 + t, f) for t, f in PACKETS]
    recs[5] = ("epb", 3, T0 + PACKETS[5][0], PACKETS[5][1])
    data = pcapng_bytes([Section([Iface(1)], records=recs)])
    ts, info = read(data, tmp_path)
    assert len(ts) == len(PACKETS) - 1 and info.skipped == {"unknown-interface": 1}
    with pytest.raises(CaptureError) as e:
        read(data, tmp_path, strict=True)
    assert "packet block names an interface the section does not describe (frame 6 at " \
           "byte" in str(e.value)


def test_millions_of_tiny_interface_blocks_share_their_description(tmp_path):
    """2 M identical interface blocks took 344 MB (an object each); now a list entry each."""
    idb = pcapng_idb(Iface(1), minimal=True)
    assert len(idb) == 20
    n = 100_000
    head = pcapng_bytes([Section([Iface(1)], records=[("epb", 0, T0, PACKETS[0][1])])])
    data = head + idb * n + pcapng_bytes([Section([], records=[])])[:0]
    tracemalloc.start()
    ts, info = read(data, tmp_path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(ts) == 1
    assert peak < 60 * n  # the 20-byte blocks read and a list entry each, not ~200 bytes


def test_the_sample_as_pcapng_with_whole_second_times_analyses(tmp_path):
    pk = [(T0 + t * 1000, f) for t, f in PACKETS]  # stretched: 1 us -> 1 ms, so whole
    data = pcapng_bytes([Section([Iface(1, tsresol=0x80)],  # seconds keep an order
                                 records=[("epb", 0, t, f) for t, f in pk])])
    p = tmp_path / "s.pcapng"
    p.write_bytes(data)
    d = nagleprobe.analyze(str(p)).to_dict()
    assert d["capture"]["packets"] == len(PACKETS)
    assert [w["text"] for w in d["capture"]["warnings"]] == [
        COARSE.format(step="1 s", said="declared 1 s")]
    assert d["capture"]["time_step_ns"] == 10**9
    assert d["capture"]["time_origin_ns"] == T0


ORPHANS = 10  # the sample's first packets (the handshake) written before the interface block
BEFORE_IDB = ("packet block before any interface description block of its section "
              "(frame 1 at byte 32)")


def _packets_before_the_interface(kind="epb"):
    """Synthetic: section header, ORPHANS packet blocks, then the interface block (times in
    nanoseconds) and the other packets; the orphans' interface 0 is described only after
    them, so nothing tells how to read them (Wireshark refuses such a file)."""
    described = pcapng_bytes([Section([Iface(1, tsresol=9)], records=[
        ("epb", 0, T0 + t, f) for t, f in PACKETS[ORPHANS:]])])
    orphans = pcapng_bytes([Section([], records=[
        ("epb", 0, T0 + t, f) if kind == "epb" else ("spb", f) for t, f in PACKETS[:ORPHANS]])])
    shb = pcapng_blocks(described)[0][1]
    return shb + orphans[len(shb):] + described[len(shb):]


@pytest.mark.parametrize("kind", ["epb", "spb"])
@pytest.mark.parametrize("chunk", [4096, 32 << 20])  # the interface block in the same chunk
def test_packet_blocks_before_any_interface_block_are_skipped_and_said(kind, chunk, tmp_path):
    (tmp_path / "c.pcapng").write_bytes(_packets_before_the_interface(kind))
    r = CaptureReader(str(tmp_path / "c.pcapng"), chunk_bytes=chunk)
    batches = list(r)
    frames = [f for b in batches for f in b.frame.tolist()]
    ts = [t for b in batches for t in b.ts_ns.tolist()]
    # not read by the interface described after them: the rest is, by its own clock
    assert frames == list(range(ORPHANS + 1, len(PACKETS) + 1))
    assert ts == [T0 + t for t, _ in PACKETS[ORPHANS:]]
    assert r.info.skipped == {"unknown-interface": ORPHANS}
    assert r.info.warnings == [f"{BEFORE_IDB}; skipped, as is any later one like it: no link "
                               "type or time resolution to read it by"]
    with pytest.raises(CaptureError, match=re.escape(BEFORE_IDB) + "$"):
        read(_packets_before_the_interface(kind), tmp_path, strict=True)


def test_a_pcapng_without_any_interface_block_is_read_as_empty_with_the_warning(tmp_path):
    p = tmp_path / "c.pcapng"
    p.write_bytes(pcapng_bytes([Section([], records=[("epb", 0, T0 + t, f)
                                                     for t, f in PACKETS])]))
    d = nagleprobe.analyze(str(p)).to_dict()
    assert (d["capture"]["packets"], d["capture"]["tcp_packets"]) == (len(PACKETS), 0)
    assert d["capture"]["skipped"] == {"unknown-interface": len(PACKETS)}
    assert d["capture"]["warnings"][0]["text"].startswith(BEFORE_IDB)


def test_a_packet_block_cannot_name_an_interface_of_a_later_section(tmp_path):
    """Section 1 describes one interface; its packet block naming interface 1 is not read
    by section 2's second interface, even when both are in one chunk."""
    recs = [("epb", 0, T0 + t, f) for t, f in PACKETS[:5]]
    recs[4] = ("epb", 1, T0 + PACKETS[4][0], PACKETS[4][1])
    data = pcapng_bytes([Section([Iface(1)], records=recs),
                         Section([Iface(1), Iface(1)], records=[("epb", 1, T0 + t, f)
                                                                for t, f in PACKETS[5:]])])
    ts, info = read(data, tmp_path)
    assert len(ts) == len(PACKETS) - 1 and info.skipped == {"unknown-interface": 1}
    assert info.warnings == [
        "packet block names an interface the section does not describe (frame 5 at byte "
        f"{pcapng_blocks(data)[6][0]}); skipped, as is any later one like it: no link type or "
        "time resolution to read it by"]
