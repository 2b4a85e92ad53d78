"""read: the compiled record and block walks and header gathers agree with the pure-Python
walk and numpy."""

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from capgen import LT_EN10MB, LT_RAW, Iface, Section, pcapng_bytes
from nagleprobe import layouts, read

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
compiled = pytest.mark.skipif(read.walk._compiled is None,
                              reason="nagleprobe._walk not built (no C compiler at install)")


# plausibility limits as the reader passes them: largest captured length, latest time read
# before (None: the first record's), window
LIMITS = [None, (262144, None, 86_400 * 10**9), (1514, None, 10**9),
          (262144, 1_700_000_000 * 10**9, 86_400 * 10**9), (65535, 5 * 10**9, 10**9)]


def headers_both_ways(buf: bytearray, big: bool, start: int = 0) -> list:
    """read.walk_headers compiled, and with the pure-Python walk and numpy gathers: the same
    headers, end and first implausible record, with any limits."""
    for limits in LIMITS:
        got = read.walk_headers(buf, big, start, 1000, 1_000_000, limits)
        kept, read.walk._compiled = read.walk._compiled, None
        try:
            want = read.walk_headers(buf, big, start, 1000, 1_000_000, limits)
        finally:
            read.walk._compiled = kept
        for a, b in zip(got[:4], want[:4], strict=True):
            assert a.dtype == b.dtype == np.int64
            assert np.array_equal(a, b)
        assert got[4:] == want[4:], limits  # the end, and the first implausible record
    return [x.tolist() for x in got[:4]] + [got[4]]


@compiled
@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.pcap")) + [SAMPLES / "formats" / "base_lo_be.pcap"],
                         ids=lambda p: p.name)
def test_compiled_header_walk_reads_the_same_headers_in_real_captures(path):
    raw = path.read_bytes()
    big = raw[:4] == b"\xa1\xb2\xc3\xd4"
    body = bytearray(raw[24:])
    starts, ts, caplen, wirelen, end = headers_both_ways(body, big)
    # every record: the walk ends exactly at the end of the file
    assert end - 8 == len(body) and starts[0] == 0
    assert all(s + 16 + c == t for s, c, t in zip(starts, caplen, starts[1:]))
    # and on every prefix (records cut by a chunk boundary), from the start or a later record
    for cut in random.Random(1).sample(range(len(body)), 50):
        headers_both_ways(body[:cut], big)
        headers_both_ways(body[:cut], big, start=starts[len(starts) // 3])


@compiled
def test_compiled_header_walk_makes_room_for_records_of_any_size():
    """Synthetic: a run of empty records (16 bytes each) more than a first guess of 48-byte
    records holds, between ordinary ones; garbage lengths and tiny buffers."""
    rec = lambda n, t: struct.pack("<IIII", t, 7, n, n + 4) + bytes(n)  # noqa: E731
    buf = bytearray(b"".join(rec(60, i) for i in range(50)) + b"".join(rec(0, i) for i in range(400))
                    + b"".join(rec(60, i) for i in range(10)))
    starts, ts, caplen, wirelen, end = headers_both_ways(buf, False)
    assert len(starts) == 460 and end - 8 == len(buf)
    assert ts[:2] == [7000, 1_000_000_000 + 7000] and wirelen[0] == 64
    rng = random.Random(7)
    for _ in range(300):
        buf = bytearray(rng.randbytes(rng.randrange(0, 300)))
        for big in (False, True):
            headers_both_ways(buf, big)


def test_pure_python_walk_steps_over_caplen_plus_header():
    rec = lambda n: (0).to_bytes(8, "little") + n.to_bytes(4, "little") * 2 + bytes(n)  # noqa: E731
    buf = bytearray(rec(10) + rec(0) + rec(3))
    starts, end = read.walk_python(buf, False)
    assert starts.tolist() == [8, 34, 50] and end - 8 == len(buf)
    assert np.array_equal(read.walk_headers(buf, False, 0, 1000)[0], starts - 8)


def read_all(path, chunk: int, monkeypatch=None, compiled: bool = True):
    """Every batch field and the capture info, read with or without the compiled walks."""
    if not compiled:
        monkeypatch.setattr(read.walk, "_compiled", None)
    r = read.CaptureReader(str(path), chunk_bytes=chunk)
    fields = ("offset", "caplen", "wirelen", "ts_ns", "linktype", "frame")
    batches = [[getattr(b, f).tolist() for f in fields] + [b.data[b.offset].tolist()] for b in r]
    return batches, r.info


def several_sections() -> bytes:
    """Two sections of both byte orders, interfaces declared between packets, unknown blocks
    (synthetic: block layouts tcpdump does not write)."""
    pkt = bytes(range(60))
    a = Section([Iface(LT_EN10MB)], records=[("epb", 0, 10**18 + i, pkt) for i in range(30)]
                + [("raw", 0x00000BAD, b"x" * 8), ("spb", pkt), ("pb", 0, 10**18 + 99, pkt)])
    b = Section([Iface(LT_RAW, tsresol=9), Iface(LT_EN10MB)], big=True,
                records=[("epb", i % 2, 2 * 10**18 + i, pkt[: 20 + i]) for i in range(40)])
    return pcapng_bytes([a, b, a])


@compiled
@pytest.mark.parametrize("name", ["base_lo.pcapng", "multi_if.pcapng", "multi_if_tsresol.pcapng",
                                  "spb.pcapng", "several_sections"])
@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_pcapng_reads_the_same_with_and_without_the_compiled_block_walk(name, chunk, tmp_path,
                                                                         monkeypatch):
    path = SAMPLES / "formats" / name
    if name == "several_sections":
        path = tmp_path / "s.pcapng"
        path.write_bytes(several_sections())
    fast, info_fast = read_all(path, chunk)
    slow, info_slow = read_all(path, chunk, monkeypatch, compiled=False)
    assert fast == slow and info_fast == info_slow
    assert sum(len(b[0]) for b in fast) == info_fast.packets > 0


@compiled
def test_compiled_header_words_equal_numpy_at_any_offset():
    """Synthetic: random bytes, offsets on the 4-byte grid (pcapng) and off it (pcap)."""
    rng = np.random.default_rng(3)
    data = np.frombuffer(rng.bytes(4096), dtype=np.uint8)
    for width in (1, 2, 4, 5):
        for big in (False, True):
            for grid in (1, 4):
                idx = np.sort(rng.integers(0, len(data) - 4 * width + 1, 500)) // grid * grid
                idx[-1] = len(data) - 4 * width  # the last word ends the buffer
                got = read.u32_rows(data, idx, width, big)
                want = read.u32_rows_numpy(data, idx, width, big)
                assert got.dtype == want.dtype == np.int64
                assert np.array_equal(got, want)


@compiled
def test_compiled_header_words_refuse_offsets_past_the_buffer():
    data = np.zeros(64, dtype=np.uint8)
    for bad in ([61], [-1], [0, 48]):
        with pytest.raises(IndexError):
            read.u32_rows(data, np.array(bad), 5 if bad == [0, 48] else 1, False)


@pytest.mark.parametrize("length", [0, 4, 8, 11, 12, 13, 14, 15, 16, 28, 1 << 20,
                                    read.MAX_BLOCK - 4, read.MAX_BLOCK, read.MAX_BLOCK + 4])
def test_the_compiled_block_walk_takes_exactly_the_lengths_the_predicate_allows(length):
    walk = pytest.importorskip("nagleprobe._walk", reason="compiled walk not built")
    block = bytearray(max(length, 12) + 8)  # room for the block and the next one's header
    struct.pack_into("<II", block, 0, layouts.BT_EPB, length)
    if length >= 12:
        struct.pack_into("<I", block, length - 4, length)  # its trailing copy
    out = np.empty(4, dtype=np.int64)
    taken, _, _ = walk.walk_blocks(bytes(block), 0, False, read.MAX_BLOCK, out)
    assert bool(taken) == bool(read.block_length_ok(length))
    assert read.block_length_ok(np.array([length]))[0] == read.block_length_ok(length)
