"""Reader tests on synthetic captures: pcap/pcapng variants, gzip, stdin, chunking, errors."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import nagleprobe
from capgen import Iface, Section, gz, pcap_bytes, pcapng_blocks, pcapng_bytes, write
from nagleprobe.decode import decode
from nagleprobe.errors import CaptureError
from nagleprobe.read import CaptureReader, read_capture

T0 = 1_700_000_000_000_000_000


def pkt(i, n=0):
    from scapy.all import IP, TCP, Ether, Raw
    p = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1000 + i, dport=80, seq=i)
    return bytes(p / Raw(b"x" * n)) if n else bytes(p)


def records(path, **kw):
    r = CaptureReader(str(path), **kw)
    out = {k: [] for k in ("frame", "ts_ns", "caplen", "wirelen", "linktype", "first")}
    for b in r:
        for k in ("frame", "ts_ns", "caplen", "wirelen", "linktype"):
            out[k] += getattr(b, k).tolist()
        out["first"] += [bytes(b.data[o:o + c]) for o, c in zip(b.offset, b.caplen)]
    return out, r.info


@pytest.mark.parametrize("nsec", [False, True])
@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("compressed", [False, True])
def test_synthetic_pcap_variants(tmp_path, nsec, big, compressed):
    pk = [(T0 + i * 1_001_000, pkt(i, i * 37)) for i in range(200)]
    b = pcap_bytes(pk, nsec=nsec, big=big)
    path = write(tmp_path / "c.pcap.whatever", gz(b) if compressed else b)
    for chunk in (32 << 20, 4096, 1):
        rec, info = records(path, chunk_bytes=chunk)
        assert rec["frame"] == list(range(1, 201))
        assert rec["ts_ns"] == [p[0] for p in pk]
        assert rec["first"] == [p[1] for p in pk]
        assert rec["linktype"] == [1] * 200
        assert (info.format, info.compressed, info.link_types, info.packets) == (
            "pcap", compressed, ["EN10MB"], 200)
        assert info.warnings == []


def test_synthetic_pcapng_sections_interfaces_resolutions(tmp_path):
    ip = bytes(pkt(1))[14:]
    s1 = Section([Iface(1, tsresol=9), Iface(101, tsresol=0x94, tsoffset=100)], records=[
        ("epb", 0, T0 + 1, pkt(1)),
        ("raw", 5, b"\0" * 8),  # ISB-ish unknown block: skipped
        ("epb", 1, T0 + 2_000_000, ip),
        ("spb", pkt(2)),  # timestamp of the previous packet, interface 0
        ("pb", 0, T0 + 5_000_000, pkt(3)),
    ])
    s2 = Section([Iface(113), Iface(1, tsresol=3)], big=True, records=[
        ("epb", 1, T0 + 7_000_000, pkt(4)),
        ("epb", 0, T0 + 8_000_000, b"\0" * 16 + ip),
        ("epb", 5, T0, pkt(5)),  # undefined interface: skipped but numbered
        ("epb", 1, T0 + 9_000_000, pkt(6)),
    ])
    path = write(tmp_path / "x.pcapng", pcapng_bytes([s1, s2]))
    for chunk in (32 << 20, 4096, 1):
        rec, info = records(path, chunk_bytes=chunk)
        assert rec["frame"] == [1, 2, 3, 4, 5, 6, 8]
        assert rec["linktype"] == [1, 101, 1, 1, 1, 113, 1]
        # 2^-20 resolution: within a microsecond; 10^-3: millisecond truncation
        assert rec["ts_ns"][0] == T0 + 1
        assert abs(rec["ts_ns"][1] - (T0 + 2_000_000)) < 1000
        assert rec["ts_ns"][2] == rec["ts_ns"][1]  # SPB
        assert rec["ts_ns"][3] == T0 + 5_000_000
        assert rec["ts_ns"][4] == T0 + 7_000_000
        assert rec["first"][1] == ip and rec["first"][2] == pkt(2)
        assert info.format == "pcapng"
        assert info.link_types == ["EN10MB", "RAW", "LINUX_SLL"]
        assert info.skipped == {"unknown-interface": 1}
        assert info.packets == 8


def test_synthetic_spb_caplen_is_min_of_snaplen(tmp_path):
    s = Section([Iface(1, snaplen=60)], records=[("epb", 0, T0, pkt(1)),
                                                  ("spb", pkt(2, 100)[:60], 154)])
    rec, _ = records(write(tmp_path / "s.pcapng", pcapng_bytes([s])))
    assert rec["caplen"][1] == 60 and rec["wirelen"][1] == 154


def test_synthetic_gzip_pcapng_and_stdin(tmp_path):
    s = Section([Iface(1)], records=[("epb", 0, T0 + i * 1000, pkt(i)) for i in range(50)])
    data = gz(pcapng_bytes([s]))
    code = ("import sys; sys.path.insert(0, %r); from nagleprobe.read import CaptureReader;"
            "r = CaptureReader('-'); n = sum(len(b) for b in r);"
            "print(n, r.info.format, r.info.compressed, r.info.path)"
            % str(Path(__file__).parent.parent))
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                         check=True).stdout.decode().split()
    assert out == ["50", "pcapng", "True", "-"]
    rec, info = records(write(tmp_path / "plain_name.pcapng", data))
    assert len(rec["frame"]) == 50 and info.compressed


def test_synthetic_truncated_last_record_is_a_warning(tmp_path):
    b = pcap_bytes([(T0 + i, pkt(i, 10)) for i in range(10)])
    path = write(tmp_path / "t.pcap", b[:-5])
    rec, info = records(path, chunk_bytes=4096)
    assert len(rec["frame"]) == 9
    assert len(info.warnings) == 1 and "record 10" in info.warnings[0]
    assert "truncated" in info.warnings[0]
    # gzip cut in the middle too
    path = write(tmp_path / "t.pcap.gz", gz(b)[:-30])
    rec, info = records(path)
    assert 0 < len(rec["frame"]) <= 10 and info.warnings


def test_synthetic_corrupt_record_after_good_ones_is_skipped_with_a_warning(tmp_path):
    b = bytearray(pcap_bytes([(T0 + i, pkt(i)) for i in range(5)]))
    size = 16 + len(pkt(0))
    off = 24 + 3 * size
    struct.pack_into("<I", b, off + 8, 10_000_000)
    for chunk in (32 << 20, 4096):
        rec, info = records(write(tmp_path / "c.pcap", bytes(b)), chunk_bytes=chunk)
        assert rec["first"] == [pkt(0), pkt(1), pkt(2), pkt(4)]  # the 5th record is found again
        assert rec["frame"] == [1, 2, 3, 4]
        assert info.warnings == [
            f"corrupt record: captured length 10000000 exceeds the limit of 262144 bytes "
            f"(record 4 at byte {off}); skipped {size} bytes to the next valid record at "
            f"byte {off + size}"]
        assert info.skipped == {"corrupt-record": 1}


def err(path, **kw):
    with pytest.raises(CaptureError) as e:
        r = read_capture(str(path)) if not kw else CaptureReader(str(path), **kw)
        for b in r:
            decode(b, Counter())
    return str(e.value)


def test_errors(tmp_path):
    p = write(tmp_path / "text.pcap", b"hello, this is not a capture\n")
    assert err(p).startswith(f"{p}: not a pcap or pcapng capture") and "byte 0" in err(p)
    p = write(tmp_path / "empty.pcap", b"")
    assert err(p) == f"{p}: empty file"
    p = write(tmp_path / "short.pcap", pcap_bytes([])[:10])
    assert "truncated pcap file header" in err(p) and "byte 10" in err(p)
    assert "no such file" in err(tmp_path / "missing.pcap")
    p = write(tmp_path / "usb.pcap", pcap_bytes([(T0, b"\0" * 40)], linktype=189))
    assert "unsupported link type 189" in err(p) and "byte 20" in err(p)
    b = bytearray(pcap_bytes([(T0, pkt(1))]))
    struct.pack_into("<I", b, 24 + 8, 0xFFFFFFF0)
    p = write(tmp_path / "absurd.pcap", bytes(b))
    assert "record 1 at byte 24" in err(p) and "exceeds" in err(p)
    p = write(tmp_path / "cut.pcap", pcap_bytes([(T0, pkt(1))])[:40])
    assert "record 1 at byte 24" in err(p)
    ng = bytearray(pcapng_bytes([Section([Iface(1)], records=[("epb", 0, T0, pkt(1))])]))
    shb_len, = struct.unpack_from("<I", ng, 4)
    idb_len, = struct.unpack_from("<I", ng, shb_len + 4)
    at = shb_len + idb_len
    for bad in (7, 13, 64 << 20):
        b = bytearray(ng)
        struct.pack_into("<I", b, at + 4, bad)
        p = write(tmp_path / f"bad{bad}.pcapng", bytes(b))
        assert f"block 3 at byte {at}" in err(p) and "block length" in err(p)
    p = write(tmp_path / "notgz.pcap", b"\x1f\x8b" + b"\0" * 30)
    assert str(p) in err(p)


def test_synthetic_unsupported_link_type_only_in_pcapng_is_skipped(tmp_path):
    s = Section([Iface(189)], records=[("epb", 0, T0, b"\0" * 40)])
    p = write(tmp_path / "u.pcapng", pcapng_bytes([s]))
    r = CaptureReader(str(p))
    c = Counter()
    for b in r:
        decode(b, c)
    assert c == Counter({"unsupported-link-type": 1})
    assert r.info.link_types == ["USB_LINUX"]


def test_synthetic_many_corrupt_stretches_are_all_skipped_and_the_warnings_capped(tmp_path):
    # 26 groups of 3 records with 40 bytes of garbage between groups: reading resumes where
    # three consistent record headers follow each other, i.e. at the start of every group
    whole = pcap_bytes([(T0 + i, pkt(i)) for i in range(78)])
    size = 16 + len(pkt(0))
    groups = [whole[24 + g * 3 * size:24 + (g + 1) * 3 * size] for g in range(26)]
    rec, info = records(write(tmp_path / "many.pcap", whole[:24] + (b"\xee" * 40).join(groups)),
                        chunk_bytes=4096)
    assert rec["first"] == [pkt(i) for i in range(78)]
    assert info.skipped == {"corrupt-record": 25}
    assert len(info.warnings) == 21
    assert all(w.startswith("corrupt record: ") and "skipped 40 bytes" in w
               for w in info.warnings[:20])
    assert info.warnings[20] == "5 more warnings like these were not listed"


def test_synthetic_gzip_corrupt_from_the_start_is_an_error_naming_where(tmp_path):
    z = bytearray(gz(pcap_bytes([(T0, pkt(1))])))
    z[12:15] = bytes(b ^ 0xFF for b in z[12:15])  # inside the first deflate block
    p = write(tmp_path / "bad.pcap.gz", bytes(z))
    m = re.fullmatch(re.escape(p) + r": corrupt gzip data: .+ \(uncompressed byte (\d+)\)", err(p))
    assert m and int(m.group(1)) < 24  # broken before the pcap header was complete


def test_synthetic_bad_trailer_before_a_new_section_is_found_before_the_section_is_read(tmp_path):
    s1 = Section([Iface(1)], records=[("epb", 0, T0 + i, pkt(i)) for i in range(3)])
    s2 = Section([Iface(1)], big=True, records=[("epb", 0, T0 + 9 + i, pkt(9 + i))
                                                for i in range(2)])
    b = bytearray(pcapng_bytes([s1, s2]))
    blocks = pcapng_blocks(bytes(b))
    at, blk = blocks[4]  # block 5: the third packet block of section 1
    struct.pack_into("<I", b, at + len(blk) - 4, len(blk) + 4)
    for chunk in (32 << 20, 4096):
        rec, info = records(write(tmp_path / "t.pcapng", bytes(b)), chunk_bytes=chunk)
        assert rec["first"] == [pkt(0), pkt(1), pkt(9), pkt(10)]  # the big-endian section too
        assert info.warnings == [
            f"corrupt block: block length {len(blk)} does not match the length {len(blk) + 4} "
            f"at the end of the block (block 5 at byte {at}); skipped {len(blk)} bytes to the "
            f"next valid block at byte {at + len(blk)}"]
        assert info.skipped == {"corrupt-block": 1}


def _records(b) -> list[bytes]:
    return [b.data[o:o + c].tobytes() for o, c in zip(b.offset, b.caplen)]


@pytest.mark.parametrize("name", ["neg_bulk_cwnd_netns.pcap", "formats/multi_if.pcapng"])
def test_a_chunk_buffer_is_reused_only_once_its_batches_are_dropped(name):
    path = str(Path(__file__).resolve().parent.parent / "samples" / name)
    # (read() buffers: a plain pcap file is mapped unless map_file=False)
    kept = list(CaptureReader(path, chunk_bytes=4096, map_file=False))  # all held: fresh buffers
    assert len({id(b.data.base.obj) for b in kept}) == len(kept) >= 3
    buffers, records = [], []
    for b in CaptureReader(path, chunk_bytes=4096, map_file=False):  # each dropped before the next
        buffers.append(id(b.data.base.obj))
        records.append(_records(b))
        del b
    assert len(set(buffers)) == 1  # one buffer, refilled chunk after chunk
    assert records == [_records(b) for b in kept]
    # and the held batches were never written over
    again = CaptureReader(path, chunk_bytes=4096)
    assert [_records(b) for b in kept] == [_records(b) for b in again]


def test_the_packet_block_layouts_add_up():
    """Each packet block's packet bytes follow its words, and its overhead is everything but
    the packet bytes: up to them, plus the trailing length."""
    from nagleprobe.read import formats

    for block in formats.PACKET_BLOCKS.values():
        assert block.fields + 4 * len(block.words) == block.data, block.name
        assert block.overhead == block.data + 4 == formats.MIN_BLOCK[
            next(t for t, b in formats.PACKET_BLOCKS.items() if b is block)], block.name


def test_reading_survives_a_profiler_that_keeps_the_frames_of_readinto():
    """Dask workers run a sampling profiler that can keep a returned frame, and with it the
    memoryviews of the chunk buffer in its locals; the buffer must still be resized/reused
    (it raised BufferError on a Dask worker). Simulated here with sys.setprofile."""
    path = str(Path(__file__).resolve().parent.parent / "samples" / "formats" / "base_lo.pcap.gz")
    want = nagleprobe.analyze(path, chunk_bytes=1024).to_json()
    kept = []

    def keep(frame, event, arg):
        if event == "return" and frame.f_code.co_name in ("readinto", "_readinto"):
            kept.append(frame)

    sys.setprofile(keep)
    try:
        got = nagleprobe.analyze(path, chunk_bytes=1024).to_json()
    finally:
        sys.setprofile(None)
    assert len(kept) > 3
    assert got == want
