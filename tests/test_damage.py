"""Local damage stays local (issue 18, point 1): bytes inserted, deleted or zeroed at a record
boundary of a real sample capture, or a record duplicated, lose at most the records they hit,
never the rest of the file, never invent packets, and the stalls of the undamaged part are
found as in the intact file; each damaged stretch is one counted warning saying where."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import nagleprobe
from nagleprobe.read import CaptureReader, walk_python
from replicate import replicate

ROOT = Path(__file__).resolve().parent.parent
PCAPS = sorted(p for p in [*(ROOT / "samples").glob("*.pcap"),
                           *(ROOT / "samples" / "formats").glob("*.pcap")])


def read(data: bytes, tmp_path, chunk=32 << 20):
    p = tmp_path / "damaged.pcap"
    p.write_bytes(data)
    r = CaptureReader(str(p), chunk_bytes=chunk)
    out = []
    for b in r:
        out += [(int(t), bytes(b.data[o:o + c]), int(f))
                for t, o, c, f in zip(b.ts_ns, b.offset, b.caplen, b.frame)]
    return out, r.info


def boundaries(data: bytes) -> list[int]:
    """File offset of each record header (the sample's records are all intact; either byte
    order)."""
    big = data[:4] in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
    starts, _ = walk_python(bytearray(data[24:]), big)  # (each header's offset + 8)
    return (starts + 16).tolist()


def some(offs: list[int], most: int = 60) -> list[tuple[int, int]]:
    """(record index, offset) of every record header after the first, or of `most` spread
    over the file (the larger samples), always with the last one."""
    step = max(1, (len(offs) - 1) // most)
    return [(i, offs[i]) for i in sorted({*range(1, len(offs), step), len(offs) - 1})]


def stall_keys(report) -> set:
    """Stalls by what they are, not by frame number (frames after lost records move)."""
    return {(s["sender"], s["endpoint"], s["held_bytes"], s["small_bytes"],
             round(s["times"]["small"], 6), round(s["times"]["released"], 6))
            for s in report["stalls"]}


@pytest.mark.parametrize("path", PCAPS, ids=lambda p: p.name)
def test_bytes_inserted_at_any_record_boundary_lose_nothing(path, tmp_path):
    data = path.read_bytes()
    intact, _ = read(data, tmp_path)
    offs = boundaries(data)
    for i, at in some(offs):
        for extra in ((b"\r",) if i % 5 else (b"\r", b"\0\0", b"\xff\x00\x7f")):
            got, info = read(data[:at] + extra + data[at:], tmp_path)
            assert got == intact, (i, extra)
            assert info.skipped == {"corrupt-record": 1}
            assert len(info.warnings) == 1
            assert info.warnings[0].endswith(
                f"(record {i + 1} at byte {at}); skipped {len(extra)} bytes to the next "
                f"valid record at byte {at + len(extra)}"), info.warnings


@pytest.mark.parametrize("path", PCAPS, ids=lambda p: p.name)
def test_zeroed_or_cut_record_header_loses_that_record_only(path, tmp_path):
    data = path.read_bytes()
    intact, _ = read(data, tmp_path)
    offs = boundaries(data)
    for i, at in some(offs, 40):
        size = offs[i + 1] - at if i + 1 < len(offs) else len(data) - at
        for how in ("zero16", "zero48", "delete1", "delete3"):
            if how.startswith("zero"):
                z = min(int(how[4:]), size)
                damaged = data[:at] + bytes(z) + data[at + z:]
            else:
                damaged = data[:at] + data[at + int(how[6:]):]
            got, info = read(damaged, tmp_path)
            want = [(t, b) for t, b, _ in intact[:i] + intact[i + 1:]]
            # (a header whose first byte is deleted is found again, intact, when the byte
            # before it equals the one deleted)
            assert [(t, b) for t, b, _ in got] in (want, [(t, b) for t, b, _ in intact]), (
                i, how)
            assert info.skipped == {"corrupt-record": 1}, (i, how)
            assert len(info.warnings) == 1 and f"(record {i + 1} at byte {at})" in info.warnings[0]


@pytest.mark.parametrize("path", PCAPS[::3], ids=lambda p: p.name)
def test_bytes_deleted_at_the_end_of_a_record_lose_nothing_after_it(path, tmp_path):
    """The previous record keeps its length and so swallows the first bytes of the next
    header: the reader looks for it up to 3 bytes back (except for the last record, which
    has no chain of records after it to vouch for it)."""
    data = path.read_bytes()
    intact, _ = read(data, tmp_path)
    offs = boundaries(data)
    for i, at in some(offs, 40):
        for d in (1, 3):
            got, info = read(data[:at - d] + data[at:], tmp_path)
            if i == len(offs) - 1:
                assert [t for t, _, _ in got] == [t for t, _, _ in intact[:-1]]
                assert "nothing valid after it" in info.warnings[0]
                continue
            assert [t for t, _, _ in got] == [t for t, _, _ in intact], (i, d)
            assert [b for _, b, _ in got[i:]] == [b for _, b, _ in intact[i:]]
            assert info.skipped == {"corrupt-record": 1}
            assert f"starts {d} bytes earlier, at byte {at - d}" in info.warnings[0]


def test_a_duplicated_record_is_read_twice_and_nothing_else_changes(tmp_path):
    data = (ROOT / "samples" / "echo_split_lo.pcap").read_bytes()
    intact, _ = read(data, tmp_path)
    offs = boundaries(data)
    for i in range(1, len(offs) - 1):
        got, info = read(data[:offs[i + 1]] + data[offs[i]:], tmp_path)
        assert [(t, b) for t, b, _ in got] == [(t, b) for t, b, _ in
                                              intact[:i + 1] + intact[i:]]
        assert info.warnings == [] and info.skipped == {}


def same_flows(a: dict, b: dict) -> bool:
    """The flows of two documents are the same but for Wireshark's stream numbers, which a
    damaged capture does not get (Wireshark may count what nagleprobe skipped)."""
    def strip(doc):
        return [{k: v for k, v in f.items() if k not in ("tcp_stream", "wireshark")}
                for f in doc["flows"]]
    return strip(a) == strip(b)


def test_the_issue_examples_on_a_large_capture(tmp_path):
    """Issue 18: one byte inserted before record 52, and one zeroed 16-byte record header,
    used to lose the rest of the capture (53 or 101 packets left, 1 stall)."""
    big = replicate(["echo_split_lo.pcap", "records_bulk_win200_netns.pcap",
                     "neg_bulk_cwnd_netns.pcap"], 6, 1_000_000_000)
    offs = boundaries(big)
    path = tmp_path / "big.pcap"
    path.write_bytes(big)
    whole = nagleprobe.analyze(str(path)).to_dict()
    assert (whole["capture"]["packets"], whole["summary"]["stalls"]) == (11688, 234)
    at = offs[51]
    path.write_bytes(big[:at] + b"\r" + big[at:])
    ins = nagleprobe.analyze(str(path)).to_dict()
    assert ins["stalls"] == whole["stalls"] and same_flows(ins, whole)
    assert ins["capture"]["packets"] == 11688
    assert [w["text"] for w in ins["capture"]["warnings"]] == [
        f"corrupt record: time fraction 6665317 is not below 1000000 (record 52 at byte {at}); "
        f"skipped 1 bytes to the next valid record at byte {at + 1}"]
    at = offs[100]
    path.write_bytes(big[:at] + bytes(16) + big[at + 16:])
    zero = nagleprobe.analyze(str(path)).to_dict()
    assert zero["capture"]["packets"] == 11687
    assert zero["capture"]["skipped"] == {"corrupt-record": 1}
    assert [w["text"] for w in zero["capture"]["warnings"]] == [
        f"corrupt record: original length 0 (record 101 at byte {at}); skipped "
        f"{offs[101] - at} bytes to the next valid record at byte {offs[101]}"]
    assert stall_keys(zero) == stall_keys(whole)


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "proxy_any.pcap",
                                  "records_bulk_win200_netns.pcap", "confirm_netns_middle.pcap"])
def test_stalls_outside_a_zeroed_header_survive(name, tmp_path):
    """The stalls whose packets are more than two records away from the lost one are found
    as in the intact capture, wherever the header is zeroed (past the handshakes)."""
    data = (ROOT / "samples" / name).read_bytes()
    offs = boundaries(data)
    path = tmp_path / "z.pcap"
    path.write_bytes(data)
    whole = nagleprobe.analyze(str(path)).to_dict()
    for i in range(8, len(offs), 3):
        at = offs[i]
        path.write_bytes(data[:at] + bytes(16) + data[at + 16:])
        got = nagleprobe.analyze(str(path)).to_dict()
        assert got["capture"]["packets"] == whole["capture"]["packets"] - 1
        lost = i + 1  # frame number of the lost record
        far = {k for k, s in zip(sorted(stall_keys(whole)), sorted(
            whole["stalls"], key=lambda s: (s["sender"], s["endpoint"], s["held_bytes"],
                                            s["small_bytes"], round(s["times"]["small"], 6),
                                            round(s["times"]["released"], 6))))
               if all(abs(f - lost) > 2 for f in s["frames"].values())}
        assert far <= stall_keys(got), (i, far - stall_keys(got))


def test_damage_straddling_chunks_is_found_the_same(tmp_path):
    data = (ROOT / "samples" / "proxy_any.pcap").read_bytes()
    offs = boundaries(data)
    intact, _ = read(data, tmp_path)
    for i in (3, 40, 100, 150):
        at = offs[i]
        damaged = data[:at] + b"\x00\x01" + data[at:]
        for chunk in (4096, 32 << 20):
            got, info = read(damaged, tmp_path, chunk)
            assert got == intact and info.skipped == {"corrupt-record": 1}


def test_a_long_gap_in_capture_time_is_not_damage(tmp_path):
    """A record more than a day after the last one, followed by records in order, is a gap."""
    from capgen import pcap_bytes
    pk = [(1_700_000_000 * 10**9 + i * 10**6, b"\0" * 60) for i in range(20)]
    pk += [(t + 3 * 86400 * 10**9, b) for t, b in pk]
    got, info = read(pcap_bytes(pk), tmp_path)
    assert len(got) == 40 and info.warnings == [] and info.skipped == {}
    # but a lone record far away is damage, and the anchor does not move with it
    bad = pk[:20] + [(pk[0][0] + 9 * 86400 * 10**9, b"\0" * 60)] + pk[20:21]
    got, info = read(pcap_bytes(bad), tmp_path)
    assert len(got) == 20 and info.skipped == {"corrupt-record": 1}
    assert "time is 777600 s after the records read so far (record 21" in info.warnings[0]


def test_a_gzip_bomb_of_zeros_after_real_records_is_skipped_quickly(tmp_path):
    """Issue 18, point 9: zeros after the records (a zeroed file tail; the gzip bomb) used to
    become hundreds of millions of zero-length packets. They are one corrupt stretch now,
    skipped without looking at each position (64 MiB of zeros here)."""
    import time
    import zlib
    lead = (ROOT / "samples" / "echo_split_lo.pcap").read_bytes()
    block = bytes(1 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = co.compress(lead) + co.flush(zlib.Z_FULL_FLUSH)
    seg = co.compress(block) + co.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(lead)
    for _ in range(64):
        crc = zlib.crc32(block, crc)
    gz = (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + body + seg * 64 + co.flush()
          + struct.pack("<II", crc, (len(lead) + 64 * len(block)) & 0xFFFFFFFF))
    p = tmp_path / "bomb.pcap.gz"
    p.write_bytes(gz)
    t = time.monotonic()
    d = nagleprobe.analyze(str(p)).to_dict()
    assert time.monotonic() - t < 30
    assert d["capture"]["packets"] == 107 and d["summary"]["stalls"] == 19
    assert d["capture"]["skipped"] == {"corrupt-record": 1}
    assert [w["text"] for w in d["capture"]["warnings"]] == [
        "corrupt record: original length 0 (record 108 at byte 9334); nothing valid after "
        f"it: ignored the last {64 << 20} bytes"]
    zeros = tmp_path / "zeros.pcap"
    zeros.write_bytes(lead[:24] + bytes(1 << 16))
    r = __import__("subprocess").run([__import__("sys").executable, "-m", "nagleprobe",
                                      "analyze", str(zeros)], capture_output=True, text=True)
    assert r.returncode == 3 and r.stderr == (
        f"nagleprobe: error: {zeros}: corrupt record: original length 0 (record 1 at byte 24)\n")
