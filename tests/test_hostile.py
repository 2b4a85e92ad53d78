"""Hostile and broken input: whatever the bytes, nagleprobe gives a result or a documented
`CaptureError` (one line naming the file), within a time bound, in bounded memory, and the
same bytes always give the same JSON.

Inputs are the real capture samples/formats/base_lo.pcap (and its pcapng/gzip forms) mutated
by hypothesis (bit flips, cuts, duplicated / shuffled / spliced records, absurd lengths) and
plain random bytes; the decompression bomb and the huge-length files are synthetic.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import zlib
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nagleprobe
from capgen import LT_RAW, LT_SLL, pcap_header, pcap_records, pcapng_blocks
from nagleprobe.decode import TCP_COLUMNS, decode
from nagleprobe.errors import CaptureError
from nagleprobe.read import MAX_BLOCK, MAX_CAPLEN, CaptureReader

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ROOT / "samples" / "formats"
BASE = (FORMATS / "base_lo.pcap").read_bytes()
BASE_NG = (FORMATS / "base_lo.pcapng").read_bytes()
RECORDS = [r for _, r in pcap_records(BASE)]
BLOCKS = [b for _, b in pcapng_blocks(BASE_NG)]
SECONDS_PER_INPUT = 5  # a few ms is usual; more means a hang or a quadratic blow-up
WORKDIR = Path(tempfile.mkdtemp(prefix="nagleprobe-hostile-"))

ABSURD = st.one_of(st.sampled_from([0, 1, 11, 12, 15, 16, 27, 28, 31, 32, 65535, MAX_CAPLEN,
                                    MAX_CAPLEN + 1, MAX_BLOCK, MAX_BLOCK + 4, 2**31 - 1,
                                    2**31, 2**32 - 16, 2**32 - 1]),
                   st.integers(0, 2**32 - 1))
EXAMPLES = int(os.environ.get("NAGLEPROBE_HYPOTHESIS_EXAMPLES", "150"))  # more for long runs
PROPERTY = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class TookTooLong(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Fail an input that runs longer than `seconds` (SIGALRM; also stops a real hang)."""
    def expired(signum, frame):
        raise TookTooLong(f"input took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def write(data: bytes, name: str = "input.cap") -> str:
    path = WORKDIR / name
    path.write_bytes(data)
    return str(path)


def assert_documented_error(e: CaptureError, path: str) -> None:
    text = str(e)
    assert text.startswith(f"{path}: ") and "\n" not in text
    assert e.problem and e.path == path


def read_and_decode(data: bytes, chunk_bytes: int = 4096):
    """Read + decode `data`, checking what every batch and column promises.

    -> (CaptureInfo, number of TCP rows, skipped Counter), or None after a CaptureError."""
    path = write(data)
    skipped: Counter = Counter()
    rows = 0
    last_frame = 0
    try:
        with time_limit(SECONDS_PER_INPUT):
            reader = CaptureReader(path, chunk_bytes=chunk_bytes)
            for b in reader:
                n = len(b)
                assert all(len(a) == n for a in (b.caplen, b.wirelen, b.ts_ns, b.linktype,
                                                 b.frame))
                if n:
                    assert (b.caplen >= 0).all() and (b.offset >= 0).all()
                    assert (b.offset + b.caplen <= len(b.data)).all()
                    assert b.frame[0] > last_frame and (np.diff(b.frame) > 0).all()
                    last_frame = int(b.frame[-1])
                cols = decode(b, skipped)
                assert list(cols) == list(TCP_COLUMNS)
                assert all(cols[k].dtype == t and len(cols[k]) == len(cols["frame"])
                           for k, t in TCP_COLUMNS.items())
                assert (cols["payload"] >= 0).all()
                assert np.isin(cols["frame"], b.frame).all()
                rows += len(cols["frame"])
    except CaptureError as e:
        assert_documented_error(e, path)
        return None
    info = reader.info
    assert info.packets >= last_frame >= 0
    assert all(isinstance(w, str) and "\n" not in w for w in info.warnings)
    return info, rows, skipped


def analyse(data: bytes, name: str = "input.cap") -> dict | None:
    """The whole analysis: a JSON document, or None after a documented CaptureError."""
    path = write(data, name)
    try:
        with time_limit(SECONDS_PER_INPUT * 4):
            report = nagleprobe.analyze(path, chunk_bytes=4096)
            text = report.to_json()
            report.to_text()
    except CaptureError as e:
        assert_documented_error(e, path)
        return None
    doc = json.loads(text)
    assert doc["summary"]["stalls"] == len(doc["stalls"])
    return doc


# ------------------------------------------------------------------ mutations of real captures
@st.composite
def mutated_pcap(draw) -> bytes:
    recs = list(RECORDS)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["duplicate", "shuffle", "drop", "absurd", "splice"]))
        i = draw(st.integers(0, len(recs) - 1))
        if op == "duplicate":
            recs.insert(draw(st.integers(0, len(recs))), recs[i])
        elif op == "shuffle":
            recs = draw(st.permutations(recs))
        elif op == "drop" and len(recs) > 1:
            del recs[i]
        elif op == "absurd" and len(recs[i]) >= 16:  # captured or wire length
            r = bytearray(recs[i])
            struct.pack_into("<I", r, draw(st.sampled_from([8, 12])), draw(ABSURD))
            recs[i] = bytes(r)
        elif op == "splice":
            recs.insert(i, draw(st.binary(min_size=1, max_size=64)))
    data = bytearray(BASE[:24] + b"".join(recs))
    for _ in range(draw(st.integers(0, 4))):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data[:draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@st.composite
def mutated_pcapng(draw) -> bytes:
    blocks = list(BLOCKS)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["duplicate", "shuffle", "absurd", "splice", "interface"]))
        i = draw(st.integers(2, len(blocks) - 1))  # keep the SHB and IDB in front
        if op == "interface":  # any if_tsresol and if_tsoffset, any link type and snaplen
            body = (struct.pack("<HHI", draw(st.sampled_from([1, 101, 0, 147])), 0,
                                draw(ABSURD))
                    + struct.pack("<HHB3x", 9, 1, draw(st.integers(0, 255)))
                    + struct.pack("<HHq", 14, 8, draw(st.integers(-2**63, 2**63 - 1)))
                    + struct.pack("<HH", 0, 0))
            blocks[1] = struct.pack("<II", 1, len(body) + 12) + body + struct.pack(
                "<I", len(body) + 12)
        elif op == "duplicate":
            blocks.insert(draw(st.integers(0, len(blocks))), blocks[i])
        elif op == "shuffle":
            blocks = blocks[:2] + draw(st.permutations(blocks[2:]))
        elif op == "absurd" and len(blocks[i]) >= 28:  # block length, trailer, ifid, caplen
            b = bytearray(blocks[i])
            at = draw(st.sampled_from([4, len(b) - 4, 8, 20, 24]))
            struct.pack_into("<I", b, at, draw(ABSURD))
            blocks[i] = bytes(b)
        elif op == "splice":
            blocks.insert(i, draw(st.binary(min_size=1, max_size=64)))
    data = bytearray(b"".join(blocks))
    for _ in range(draw(st.integers(0, 4))):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data[:draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@st.composite
def mutated_gzip(draw) -> bytes:
    inner = draw(st.one_of(st.just(BASE), mutated_pcap()))
    data = bytearray(gzip.compress(inner, compresslevel=6, mtime=0))
    for _ in range(draw(st.integers(0, 3))):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data[:draw(st.integers(2, len(data)))]) if draw(st.booleans()) else bytes(data)


HEADERS = st.sampled_from([
    b"",
    BASE[:24],  # pcap, EN10MB
    pcap_header(LT_RAW, 65535, nsec=True),
    pcap_header(LT_SLL, 65535, big=True),
    BASE_NG[:len(BLOCKS[0]) + len(BLOCKS[1])],  # pcapng SHB + IDB
])


@PROPERTY
@given(st.one_of(mutated_pcap(), mutated_pcapng(), mutated_gzip()),
       st.sampled_from([4096, 32 << 20]))
def test_mutated_real_captures_read_and_decode_or_fail_cleanly(data, chunk_bytes):
    read_and_decode(data, chunk_bytes)


@PROPERTY
@given(HEADERS, st.binary(max_size=4096))
def test_random_bytes_read_and_decode_or_fail_cleanly(header, tail):
    read_and_decode(header + tail)


@settings(PROPERTY, max_examples=max(EXAMPLES // 4, 40))
@given(st.one_of(mutated_pcap(), mutated_pcapng(), mutated_gzip()))
def test_mutated_captures_give_a_report_or_a_documented_error(data):
    analyse(data)


@settings(PROPERTY, max_examples=max(EXAMPLES // 4, 40))
@given(st.permutations(RECORDS), st.lists(st.sampled_from(RECORDS), max_size=20))
def test_shuffled_and_duplicated_records_are_analysed(order, extra):
    doc = analyse(BASE[:24] + b"".join(order) + b"".join(extra))
    assert doc is not None and doc["capture"]["warnings"] == []
    assert doc["capture"]["packets"] == len(order) + len(extra)


# ------------------------------------------------------------------ every cut of a real capture
def complete_records(length: int) -> tuple[int, bool]:
    """(records complete within the first `length` bytes of base_lo.pcap, cut on a boundary?)"""
    ends = np.cumsum([len(r) for r in RECORDS]) + 24
    k = int(np.searchsorted(ends, length, side="right"))
    return k, length == 24 or (k > 0 and ends[k - 1] == length)


def test_cut_at_every_offset_reads_every_complete_record():
    for length in range(len(BASE) + 1):
        res = read_and_decode(BASE[:length])
        k, on_boundary = complete_records(length)
        if length < 24 or (k == 0 and not on_boundary):
            assert res is None, length  # nothing to analyse: an error
            continue
        info, rows, _ = res
        assert info.packets == k == rows, length
        if on_boundary:
            assert info.warnings == [], length
        else:
            assert len(info.warnings) == 1 and info.warnings[0].startswith(
                "truncated capture: the file ends inside a record"), length


def test_cut_at_every_offset_of_the_pcapng_and_gzip_forms():
    ends = np.cumsum([len(b) for b in BLOCKS])
    for length in range(len(BASE_NG) + 1):
        res = read_and_decode(BASE_NG[:length])
        k = int(np.searchsorted(ends, length, side="right"))  # complete blocks
        if k < 3:  # SHB, IDB and at least one packet block
            assert res is None or res[0].packets == 0, length
            continue
        assert res is not None and res[0].packets == k - 2, length
        assert (res[0].warnings == []) == (length == ends[k - 1]), length
    packed = gzip.compress(BASE, mtime=0)
    seen = 0
    for length in range(2, len(packed) + 1):
        res = read_and_decode(packed[:length])
        packets = res[0].packets if res else 0
        assert packets >= seen, length  # more of the stream never loses a record
        seen = packets
    assert seen == 48


def test_cuts_through_the_whole_analysis():
    stalls = []
    for length in list(range(24, len(BASE), 97)) + [len(BASE)]:
        doc = analyse(BASE[:length])
        stalls.append(0 if doc is None else doc["summary"]["stalls"])
    assert max(stalls) <= 7 and stalls[-1] == 7


# ------------------------------------------------------------------ memory
def peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def expect_error(path: str, chunk_bytes: int = 32 << 20):
    def run():
        with pytest.raises(CaptureError):
            for b in CaptureReader(path, chunk_bytes=chunk_bytes):
                decode(b, Counter())
    return run


@pytest.mark.parametrize("name", ["pcap_caplen_4g.pcap", "pcapng_block_4g.pcapng",
                                  "pcapng_block_16m_cut.pcapng"])
def test_a_claimed_4_gib_record_or_16_mib_block_is_never_allocated(name):
    path = str(Path(__file__).parent / "broken" / name)
    assert peak_mib(expect_error(path)) < 1


def test_huge_lengths_in_a_stream_cost_at_most_a_chunk():
    """Through gzip the file size is unknown, so buffers are chunk-sized, never claim-sized."""
    rec = BASE[24:24 + len(RECORDS[0])]
    for claim_at, claim in ((8, 2**32 - 1), (12, 2**32 - 1)):
        bad = bytearray(rec)
        struct.pack_into("<I", bad, claim_at, claim)
        data = gzip.compress(BASE[:24] + rec * 3 + bytes(bad) + rec * 3, mtime=0)
        path = write(data, "claim.pcap.gz")

        def run():
            r = CaptureReader(path, chunk_bytes=1 << 20)
            for b in r:
                decode(b, Counter())
            assert r.info.packets >= 3
        assert peak_mib(run) < 4


def gzip_bomb(records: int) -> bytes:
    """A ~1 MB gzip file that inflates to `records` x 256 KiB pcap records of zeros (built
    from one deflate segment repeated after full flushes, so it takes no time to make)."""
    head = pcap_header(snaplen=MAX_CAPLEN)
    rec = struct.pack("<IIII", 1_700_000_000, 0, MAX_CAPLEN, MAX_CAPLEN) + bytes(MAX_CAPLEN)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = co.compress(head + rec) + co.flush(zlib.Z_FULL_FLUSH)
    seg = co.compress(rec) + co.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(records):
        crc = zlib.crc32(rec, crc)
    size = (len(head) + records * len(rec)) & 0xFFFFFFFF
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + first + seg * (records - 1)
            + co.flush() + struct.pack("<II", crc, size))


def test_a_gzip_bomb_inflates_in_bounded_memory():
    bomb = gzip_bomb(2048)  # 512 MiB inflated
    assert len(bomb) < (1 << 20)
    path = write(bomb, "bomb.pcap.gz")
    seen = {}

    def run():
        r = CaptureReader(path, chunk_bytes=4 << 20)
        for b in r:
            decode(b, Counter())
        seen["info"] = r.info
    peak = peak_mib(run)
    assert seen["info"].packets == 2048 and seen["info"].warnings == []  # all of it was read
    assert peak < 16, peak


# ------------------------------------------------------------------ determinism
DETERMINISM_SAMPLES = ["samples/proxy_any.pcap", "samples/formats/multi_if.pcapng",
                       "samples/formats/base_lo.pcap.gz",
                       "tests/broken/pcap_garbage_inserted.pcap"]


@pytest.mark.parametrize("sample", DETERMINISM_SAMPLES)
def test_same_input_gives_byte_identical_json(sample):
    """Twice in this process, and in two fresh processes with different hash seeds."""
    path = str(ROOT / sample)
    first = nagleprobe.analyze(path).to_json()
    assert nagleprobe.analyze(path).to_json() == first
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", "--format", "json",
                               path], capture_output=True, env=env, check=True)
        outs.append(proc.stdout)
    assert outs[0] == outs[1] == (first + "\n").encode()
