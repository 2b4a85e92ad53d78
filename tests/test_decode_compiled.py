"""The compiled decoder (nagleprobe/_decode.c) gives exactly the numpy decoder's columns and
skip counts: on every real capture in samples/, on mutated real packets, and on crafted
packets with every header field off."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nagleprobe.decode
from capgen import TCP_OPTION_ATOMS
from nagleprobe.decode import TCP_COLUMNS, decode, decode_numpy
from nagleprobe.errors import CaptureError
from nagleprobe.read import CaptureReader, RecordBatch

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(p for p in SAMPLES.rglob("*") if p.suffix in (".pcap", ".pcapng", ".gz"))
pytestmark = pytest.mark.skipif(nagleprobe.decode._compiled is None,
                                reason="nagleprobe._decode not built (no C compiler at install)")


def batches(path: Path, chunk_bytes: int = 32 << 20) -> list[RecordBatch]:
    """The record batches of a capture, as far as it can be read (some fixtures are broken)."""
    out = []
    try:
        for b in CaptureReader(str(path), chunk_bytes=chunk_bytes):
            out.append(b)
    except CaptureError:
        pass
    return out


def both_decoders(batch: RecordBatch) -> tuple[dict, Counter, dict, Counter]:
    a, b = Counter(), Counter()
    return decode(batch, a), a, decode_numpy(batch, b), b


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k in TCP_COLUMNS:
        assert got[k].dtype == want[k].dtype, k
        assert np.array_equal(got[k], want[k]), k


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_compiled_decoder_equals_numpy_on_every_real_capture(path):
    for batch in batches(path, chunk_bytes=4096):
        got, got_skips, want, want_skips = both_decoders(batch)
        assert_same(got, want)
        assert got_skips == want_skips


def _real_packets() -> list[tuple[int, bytes]]:
    """(link type, bytes) of every record of the real samples and format fixtures."""
    out = []
    for path in CAPTURES:
        for b in batches(path):
            for o, c, lt in zip(b.offset, b.caplen, b.linktype):
                out.append((int(lt), b.data[o:o + c].tobytes()))
    return out


REAL = _real_packets()
_HEADER_BYTES = 100  # mutations hit the link, IP and TCP headers and the options


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(REAL) - 1),
                          st.lists(st.tuples(st.integers(0, _HEADER_BYTES - 1),
                                             st.integers(0, 255)), max_size=4),
                          st.integers(0, 2000),
                          st.sampled_from([0, 1, 12, 101, 113, 276, 228, 229, 0, 108, 147])),
                min_size=1, max_size=20))
def test_compiled_decoder_equals_numpy_on_mutated_real_packets(packets):
    """Byte flips in the headers, captured lengths cut anywhere, wrong link types: whatever
    the compiled loop accepts it decodes as numpy does, and the rest it leaves to numpy."""
    chunks, lts, caps = [], [], []
    for idx, flips, cut, other_lt in packets:
        lt, raw = REAL[idx]
        raw = bytearray(raw)
        for at, v in flips:
            if at < len(raw):
                raw[at] = v
        raw = bytes(raw[:cut])
        chunks.append(raw)
        lts.append(lt if other_lt == 147 else other_lt)
        caps.append(len(raw))
    data = np.frombuffer(b"".join(chunks) + bytes(64), dtype=np.uint8)
    k = len(chunks)
    offset = np.cumsum([0] + caps[:-1]).astype(np.int64)
    caplen = np.array(caps, np.int64)
    batch = RecordBatch(data=data, offset=offset, caplen=caplen, wirelen=caplen + 7,
                        ts_ns=np.arange(k, dtype=np.int64) * 1000,
                        linktype=np.array(lts, np.int32), frame=np.arange(1, k + 1))
    got, got_skips, want, want_skips = both_decoders(batch)
    assert_same(got, want)
    assert got_skips == want_skips


_OPTION = st.sampled_from(TCP_OPTION_ATOMS)
_TAGS = (0x8100, 0x88A8, 0x9100)


@st.composite
def crafted_packet(draw) -> tuple[int, bytes]:
    """(link type, bytes): a TCP/IP packet where each header field is, one time in eight, off:
    versions, lengths, fragment bits, protocols, data offsets, option lists, VLAN tags,
    address families, captured length."""
    def field(good, bad: st.SearchStrategy):
        return draw(bad) if draw(st.integers(0, 7)) == 0 else good

    ver = draw(st.sampled_from([4, 6]))
    opts = draw(st.one_of(st.binary(max_size=40), st.lists(_OPTION, max_size=8).map(b"".join)))
    opts = opts[:40] + bytes(-len(opts[:40]) % 4 if draw(st.booleans()) else 0)
    payload = bytes(draw(st.integers(0, 40)))
    doff = field((20 + len(opts)) // 4, st.integers(0, 15))
    tcp = struct.pack(">HHIIBBHHH", draw(st.integers(0, 65535)), 80,
                      draw(st.integers(0, 2**32 - 1)),
                      7, (doff << 4) | draw(st.integers(0, 15)), draw(st.integers(0, 255)),
                      draw(st.integers(0, 65535)), 0, 0) + opts + payload
    if ver == 4:
        ipopts = bytes(draw(st.sampled_from([0, 4, 8])))
        ihl = field(5 + len(ipopts) // 4, st.integers(0, 15))
        tot = field(20 + len(ipopts) + len(tcp), st.integers(0, 200))
        frag = field(draw(st.sampled_from([0, 0x4000])), st.sampled_from([0x2000, 1, 0x1FFF]))
        ip = struct.pack(">BBHHHBBH4s4s", field(4, st.integers(0, 15)) << 4 | ihl, 0, tot,
                         draw(st.integers(0, 65535)), frag,
                         64, field(6, st.integers(0, 255)), 0, b"\x0a\0\0\x01", b"\x0a\0\0\x02")
        ip += ipopts
    else:
        ip = struct.pack(">IHBB16s16s", field(6, st.integers(0, 15)) << 28,
                         field(len(tcp), st.integers(0, 200)),
                         field(6, st.sampled_from([0, 44, 17])),
                         64, bytes(15) + b"\x01", b"\x20\x01" + bytes(13) + b"\x02")
    ip += tcp
    lt = draw(st.sampled_from([1, 113, 276, 12, 101, 228, 229, 0, 108, 147]))
    et = field(0x0800 if ver == 4 else 0x86DD, st.sampled_from([0x0800, 0x86DD, 0x0806]))
    if lt == 1:
        tags = [draw(st.sampled_from(_TAGS)) for _ in range(draw(st.sampled_from([0, 1, 2, 4, 5])))]
        head = bytes(12) + b"".join(struct.pack(">HH", t, 5) for t in tags)  # TPID, TCI
        head += struct.pack(">H", et)
    elif lt == 113:
        head = bytes(14) + struct.pack(">H", et)
    elif lt == 276:
        head = struct.pack(">H", et) + bytes(18)
    elif lt in (0, 108):
        fam = field(2 if ver == 4 else draw(st.sampled_from([24, 28, 30])), st.integers(0, 40))
        head = struct.pack("<I" if lt == 0 and draw(st.booleans()) else ">I", fam)
    else:
        head = b""
    raw = head + ip
    return lt, raw[:field(len(raw), st.integers(0, len(raw)))]


@settings(max_examples=1000, deadline=None)
@given(st.lists(crafted_packet(), min_size=1, max_size=20))
def test_compiled_decoder_equals_numpy_on_crafted_packets(packets):
    """Synthetic (not from a real stack): packets with any header field wrong."""
    chunks = [raw for _, raw in packets]
    data = np.frombuffer(b"".join(chunks) + bytes(64), dtype=np.uint8)
    k = len(chunks)
    caplen = np.array([len(c) for c in chunks], np.int64)
    batch = RecordBatch(data=data, offset=np.cumsum(caplen) - caplen, caplen=caplen,
                        wirelen=caplen, ts_ns=np.arange(k, dtype=np.int64),
                        linktype=np.array([lt for lt, _ in packets], np.int32),
                        frame=np.arange(1, k + 1))
    got, got_skips, want, want_skips = both_decoders(batch)
    assert_same(got, want)
    assert got_skips == want_skips
