#!/usr/bin/env python3
"""Make the hand-broken captures in tests/broken/ and their ground truth.

Every file is the real capture samples/formats/base_lo.pcap (48 packets, one flow, 7 stalls)
or its pcapng / gzip form, broken in one documented way.  For each one this script also
writes down what nagleprobe must answer: the exit status and the exact one-line error, or
for a damaged-but-readable file the exact warnings, the packet count, the skipped counts and
the `--strict` error.  The messages are composed here from how and where the file was broken
(offsets computed from the construction, gzip figures from zlib itself), never taken from
nagleprobe's output.  This is the one home of the broken inputs: the first ones (not a capture,
an empty file, cut headers and records, a wrong link type, impossible record lengths) were made
by samples/formats/make_formats.py and kept in samples/formats/broken/ until issue 16.  For
two of those the stalls and flows of what is read are written down too ("stalls", "flows",
checked by tests/test_samples.py).

    python3 tests/broken/make_broken.py      # rewrites tests/broken/*, expected.json, README.md
"""

from __future__ import annotations

import gzip
import json
import struct
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from capgen import Iface, pcap_header, pcap_records, pcapng_block, pcapng_blocks, pcapng_idb  # noqa: E402

ROOT = HERE.parent.parent
BASE = ROOT / "samples" / "formats" / "base_lo.pcap"
BASE_NG = ROOT / "samples" / "formats" / "base_lo.pcapng"
LIVE_TRUTH = ROOT / "samples" / "formats" / "live_truth.json"  # base_lo's stalls, as timed
LIMIT = 262144
BLOCK_LIMIT = 16 << 20


def set_u32(b: bytes, at: int, v: int, fmt: str = "<I") -> bytes:
    m = bytearray(b)
    struct.pack_into(fmt, m, at, v)
    return bytes(m)


def cases() -> dict[str, dict]:
    base = BASE.read_bytes()
    recs = pcap_records(base)
    assert len(recs) == 48
    ng = BASE_NG.read_bytes()
    blocks = pcapng_blocks(ng)
    assert [struct.unpack_from("<I", b)[0] for _, b in blocks[:3]] == [0x0A0D0D0A, 1, 6]
    done = "analysed the {} complete packet records"
    out: dict[str, dict] = {}

    def add(name, data, broken, **expect):
        out[name] = {"file": name, "bytes": data, "broken": broken, **expect}

    def readable(name, data, broken, packets, skipped=None, warnings=(), strict=None, **more):
        add(name, data, broken, exit=0, packets=packets, skipped=skipped or {},
            warnings=list(warnings), strict_error=strict, **more)

    def resumed(name, data, broken, packets, problem, unit, number, at, to):
        """A corrupt record/block at byte `at` skipped up to the next valid one at `to`."""
        where = f"({unit} {number} at byte {at})"
        readable(name, data, broken, packets, skipped={f"corrupt-{unit}": 1},
                 warnings=[f"{problem} {where}; skipped {to - at} bytes to the next valid "
                           f"{unit} at byte {to}"], strict=f"{problem} {where}")

    # ---------------------------------------------------------------- pcap
    add("pcap_caplen_4g.pcap",
        base[:24] + set_u32(recs[0][1], 8, 0xFFFFFFFF) + base[24 + len(recs[0][1]):],
        "first record header claims a captured length of 4 GiB - 1 (0xFFFFFFFF); the other "
        "47 records follow intact",
        exit=3, error=f"corrupt record: captured length 4294967295 exceeds the limit of "
                      f"{LIMIT} bytes (record 1 at byte 24)")

    o20, r20 = recs[19]
    o21 = recs[20][0]
    problem = f"corrupt record: captured length {LIMIT + 1} exceeds the limit of {LIMIT} bytes"
    resumed("pcap_caplen_over_limit_mid.pcap",
            base[:o20] + set_u32(r20, 8, LIMIT + 1) + base[o21:],
            f"record 20 claims a captured length of {LIMIT + 1}, one byte over libpcap's "
            "limit; skipped, reading resumes at record 21", 47, problem, "record", 20, o20, o21)

    o25 = recs[24][0]
    problem = "corrupt record: captured length 4008636142 exceeds the limit of 262144 bytes"
    resumed("pcap_garbage_inserted.pcap", base[:o25] + b"\xee" * 1000 + base[o25:],
            "1000 bytes of 0xEE inserted before record 25 (as from a bad copy); read as a "
            "record header its captured length is 0xEEEEEEEE", 48, problem, "record", 25, o25,
            o25 + 1000)

    o48 = recs[47][0]
    problem = "truncated capture: the file ends inside a record"
    readable("pcap_cut_in_record_header.pcap", base[:o48 + 7],
             "file cut 7 bytes into the 16-byte header of the last record (tcpdump killed)",
             packets=47, warnings=[f"{problem} (record 48 at byte {o48}); {done.format(47)}"],
             strict=f"{problem} (record 48 at byte {o48})")

    add("pcap_version_3.pcap", set_u32(base, 4, 3, "<H"),
        "file header says pcap version 3.4 (only 2.x exists)",
        exit=3, error="unsupported pcap version 3.4 (byte 4)")

    readable("pcap_header_only.pcap", base[:24],
             "a valid pcap file header and no records (capture stopped at once): not an "
             "error, an empty analysis", packets=0)

    m = bytearray(base)
    eth = 16 + 14  # record header + Ethernet header: IPv4 starts here
    m[recs[39][0] + eth] = 0x44  # frame 40: IHL 4 (16 bytes)
    struct.pack_into(">H", m, recs[40][0] + eth + 2, 39)  # frame 41: total length 39
    m[recs[41][0] + eth + 20 + 12] = 0x40  # frame 42: TCP data offset 4 (16 bytes)
    m[recs[42][0] + eth + 20 + 12] = 0xF0  # frame 43: data offset 15: 60 bytes, frame has 32
    m[recs[43][0] + eth] = 0x75  # frame 44: IP version 7
    m[recs[44][0] + eth] = 0x4F  # frame 45: IHL 15: 60 bytes, beyond the 66-byte frame
    readable("pcap_bad_ip_tcp_headers.pcap", bytes(m),
             "six packets with inconsistent IP/TCP headers: frame 40 IHL 4, frame 41 IP total "
             "length 39 (less than the headers), frame 42 TCP data offset 4, frame 43 data "
             "offset 15 (beyond the 66-byte frame), frame 44 IP version 7, frame 45 IHL 15 "
             "(beyond the 66-byte frame); each is skipped and counted, the file itself is sound",
             packets=48, skipped={"bad-header": 4, "truncated-headers": 2})

    o30, r30 = recs[29]
    r = set_u32(r30, 12, 0xFFFFFFFF)  # wire length 4 GiB - 1
    r = r[:eth + 2] + b"\0\0" + r[eth + 4:]  # IP total length 0: "take it from the wire"
    readable("pcap_tso_absurd_wire_length.pcap", base[:o30] + r + base[o30 + len(r30):],
             "frame 30 has IP total length 0 (as TSO super-frames do) and a wire length of "
             "4 GiB - 1: a payload length taken from that would be absurd, so the packet is a "
             "bad header", packets=48, skipped={"bad-header": 1})

    # ---------------------------------------------------------------- pcapng
    o3 = blocks[2][0]
    add("pcapng_block_4g.pcapng", set_u32(ng, o3 + 4, 0xFFFFFFF0),
        "the first packet block (block 3) claims a length of 0xFFFFFFF0",
        exit=3, error=f"corrupt block: block length 4294967280 is invalid (must be a multiple "
                      f"of 4 between 12 and {BLOCK_LIMIT}) (block 3 at byte {o3})")

    add("pcapng_block_16m_cut.pcapng", set_u32(ng[:o3 + 108], o3 + 4, BLOCK_LIMIT),
        f"the first packet block claims {BLOCK_LIMIT} bytes (the most allowed) but the file "
        "ends 108 bytes into it",
        exit=3, error=f"truncated capture: the file ends inside the first block (block 3 at "
                      f"byte {o3})")

    p20, b20 = blocks[19]
    L = len(b20)
    problem = (f"corrupt block: block length {L} does not match the length {L + 4} at the end "
               "of the block")
    resumed("pcapng_trailer_mismatch.pcapng", ng[:p20] + set_u32(b20, L - 4, L + 4)
            + ng[p20 + L:],
            f"block 20 (a packet block) has {L + 4} in its trailing length copy instead of "
            f"{L}; the block is skipped, reading resumes at block 21", 47, problem, "block", 20,
            p20, p20 + L)

    p30, b30 = blocks[29]
    L = len(b30)
    next_len = len(blocks[30][1])  # the trailer is read where block 31's length field is
    problem = (f"corrupt block: block length {L + 8} does not match the length {next_len} at "
               "the end of the block")
    resumed("pcapng_length_off_by_8.pcapng", ng[:p30] + set_u32(b30, 4, L + 8) + ng[p30 + L:],
            f"block 30 says it is {L + 8} bytes long, 8 more than it is; skipped, reading "
            "resumes at block 31", 47, problem, "block", 30, p30, p30 + L)

    p11 = blocks[10][0]
    readable("pcapng_unknown_block.pcapng",
             ng[:p11] + pcapng_block(0xBEE, b"whatever") + ng[p11:],
             "a well-formed block of an undefined type (0xBEE) between blocks 10 and 11: "
             "skipped and counted", packets=48, skipped={"unknown-block-type": 1})

    readable("pcapng_short_packet_block.pcapng",
             ng[:p11] + pcapng_block(6, b"\0" * 4) + ng[p11:],
             "an enhanced packet block of 16 bytes (too short for its 20-byte fixed part) "
             "between blocks 10 and 11: skipped and counted (it is numbered as frame 10)",
             packets=49, skipped={"corrupt-block": 1})

    readable("pcapng_short_packet_block_at_end.pcapng", ng + pcapng_block(6, b"\0" * 4),
             "the same 16-byte packet block as the last block of the file (its fixed part "
             "would run past the end of the data; this used to be an IndexError)",
             packets=49, skipped={"corrupt-block": 1})

    p15, b15 = blocks[14]
    readable("pcapng_caplen_exceeds_block.pcapng", ng[:p15] + set_u32(b15, 20, 4000)
             + ng[p15 + len(b15):],
             "block 15 (frame 13) claims 4000 captured bytes in a block of "
             f"{len(b15)}: skipped and counted", packets=48,
             skipped={"caplen-exceeds-block": 1})

    shb = blocks[0][1]
    bad_bom = set_u32(shb, 8, 0x11223344)
    add("pcapng_bad_byte_order_magic.pcapng", bad_bom + ng[len(shb):],
        "section header block with byte-order magic 0x11223344 instead of 0x1A2B3C4D",
        exit=3, error="corrupt block: section header with a bad byte-order magic 44332211 "
                      "(block 1 at byte 0)")

    idb = pcapng_idb(Iface(1, tsoffset=1 << 62), minimal=True)  # if_tsoffset, end of options
    readable("pcapng_huge_tsoffset.pcapng", shb + idb + ng[blocks[2][0]:],
             "the interface has if_tsoffset = 2^62 seconds (nonsense; it used to overflow "
             "64-bit nanoseconds): ignored, the capture reads normally", packets=48)

    # ---------------------------------------------------------------- the clock
    stepped = ("clock stepped back 2 d (frame 25 at byte {}): the records from there on are "
               "analysed on their own time base, joined to the one before (the interval "
               "across the step counts as 0)")
    o25 = recs[24][0]
    r25 = set_u32(set_u32(recs[24][1], 0, 0), 4, 0)  # seconds and microseconds
    zeroed = base[:o25] + r25 + base[o25 + len(r25):]
    where = f"frame 25 at byte {o25}"
    readable("pcap_time_zero_mid.pcap", zeroed,
             "record 25's time set to 0 (1970) among records of its day: that record is "
             "skipped, its neighbours read", packets=48, skipped={"implausible-time": 1},
             warnings=[f"implausible time stamp 1970-01-01T00:00:00Z ({where}); skipped, as is "
                       "any later record whose time is far from both its neighbours' (counted "
                       "as implausible-time)"],
             strict=f"implausible time stamp 1970-01-01T00:00:00Z ({where})")
    back = bytearray(base)
    for o, r in recs[24:]:
        struct.pack_into("<I", back, o, struct.unpack_from("<I", r)[0] - 2 * 86400)
    readable("pcap_clock_step_back.pcap", bytes(back),
             "the times of records 25 to 48 moved 2 days back (a step of the clock): all read, "
             "a warning, the step joined", packets=48, warnings=[stepped.format(o25)])
    back = bytearray(ng)
    for o, b in blocks[2 + 24:]:  # the EPBs of frames 25 on (microseconds)
        units = (struct.unpack_from("<I", b, 12)[0] << 32 | struct.unpack_from("<I", b, 16)[0])
        units -= 2 * 86400 * 10**6
        struct.pack_into("<II", back, o + 12, units >> 32, units & 0xFFFFFFFF)
    assert all(struct.unpack_from("<I", b)[0] == 6 for _, b in blocks[2:])
    readable("pcapng_clock_step_back.pcapng", bytes(back),
             "the times of frames 25 to 48 moved 2 days back (a step of the clock): all read, "
             "a warning, the step joined", packets=48,
             warnings=[stepped.format(blocks[2 + 24][0])])

    # ---------------------------------------------------------------- gzip
    gz = gzip.compress(base, compresslevel=9, mtime=0)
    bad_crc = gz[:-8] + bytes([gz[-8] ^ 1]) + gz[-7:]
    readable("pcap_gzip_bad_crc.pcap.gz", bad_crc,
             "gzip of base_lo.pcap whose CRC-32 in the gzip trailer has one bit flipped; all "
             "the data decompresses, then zlib rejects the check value", packets=48,
             warnings=["corrupt gzip data: Error -3 while decompressing data: incorrect data "
                       f"check (uncompressed byte {len(base)}); analysed the 48 packet records "
                       "before it"],
             strict="corrupt gzip data: Error -3 while decompressing data: incorrect data "
                    f"check (uncompressed byte {len(base)})")

    cut = gz[:len(gz) // 2]
    got = len(zlib.decompressobj(31).decompress(cut))
    starts = [o for o, _ in recs]
    k = sum(1 for o, rb in recs if o + len(rb) <= got)  # complete records
    assert got < len(base) and starts[k] < got, "the cut must fall inside a record"
    problem = "truncated capture: the gzip stream ends inside a record"
    readable("pcap_gzip_cut.pcap.gz", cut,
             f"gzip of base_lo.pcap cut after {len(cut)} of {len(gz)} compressed bytes; zlib "
             f"yields {got} bytes, which end inside record {k + 1}",
             packets=k, warnings=[f"{problem} (record {k + 1} at byte {starts[k]}); "
                                  f"{done.format(k)}"],
             strict=f"{problem} (record {k + 1} at byte {starts[k]})")

    readable("pcap_gzip_trailing_garbage.pcap.gz", gz + b"\0" * 4 + b"NOT GZIP",
             "a complete gzip stream followed by 4 zero bytes of padding (allowed) and 8 bytes "
             "of text", packets=48,
             warnings=["data after the end of the gzip stream is not gzip (compressed byte "
                       f"{len(gz) + 4}); analysed the 48 packet records before it"],
             strict=f"data after the end of the gzip stream is not gzip (compressed byte "
                    f"{len(gz) + 4})")

    half = recs[24][0]
    readable("pcap_gzip_two_members.pcap.gz",
             gzip.compress(base[:half], mtime=0) + b"\0" * 16 + gzip.compress(base[half:],
                                                                            mtime=0),
             "not broken: two gzip members (split inside the file at record 25) with zero "
             "padding between them, as `cat a.gz b.gz` or tape padding makes", packets=48)

    # ---------------------------------------------------------------- the first ones
    # (made by samples/formats/make_formats.py until issue 16)
    add("empty.pcap", b"", "0 bytes", exit=3, error="empty file")

    text = b"This is not a capture file, just text.\nnagleprobe must refuse it.\n"
    add("not_a_capture.txt", text, "two lines of text", exit=3,
        error=f"not a pcap or pcapng capture: data starts with {text[:4].hex(' ')} (byte 0)")

    add("truncated_header.pcap", base[:10], "first 10 bytes of base_lo.pcap", exit=3,
        error="truncated pcap file header: 10 of 24 bytes (byte 10)")

    snaplen = struct.unpack_from("<I", base, 16)[0]
    add("bad_linktype.pcap", pcap_header(147, snaplen) + base[24:recs[5][0]],
        "pcap with link type 147 (USER0)", exit=3,
        error="unsupported link type 147 (USER0); nagleprobe reads EN10MB, LINUX_SLL, "
              "LINUX_SLL2, RAW, IPV4, IPV6, NULL and LOOP captures (byte 20)")

    huge = 0xFFFFFFF0

    def huge_record(rec: bytes) -> bytes:
        """The record with captured and wire length `huge` in its header, its data kept."""
        return set_u32(set_u32(rec, 8, huge), 12, huge)

    add("huge_record.pcap", base[:24] + huge_record(recs[0][1]),
        f"file header and one record header with caplen {huge:#x}", exit=3,
        error=f"corrupt record: captured length {huge} exceeds the limit of {LIMIT} bytes "
              "(record 1 at byte 24)")

    o11, r11 = recs[10]
    mid = base[:o11] + huge_record(r11)
    problem = f"corrupt record: captured length {huge} exceeds the limit of {LIMIT} bytes"
    readable("huge_record_mid.pcap", mid,
             f"10 good records, then a record header with caplen {huge:#x} and {len(r11) - 16} "
             "more bytes", packets=10, skipped={"corrupt-record": 1},
             warnings=[f"{problem} (record 11 at byte {o11}); nothing valid after it: ignored "
                       f"the last {len(mid) - o11} bytes"],
             strict=f"{problem} (record 11 at byte {o11})",
             stalls=0, flows=1)  # base_lo's first stall is released at frame 12

    o48, r48 = recs[47]
    problem = "truncated capture: the file ends inside a record"
    stalls = json.loads(LIVE_TRUTH.read_text())["base_lo.pcap"]["stalls"]
    readable("truncated_record.pcap", base[:len(base) - (len(r48) - 16) // 2],
             "base_lo.pcap cut inside its last record's data", packets=47,
             warnings=[f"{problem} (record 48 at byte {o48}); {done.format(47)}"],
             strict=f"{problem} (record 48 at byte {o48})",
             stalls=stalls, flows=1)  # only the final ACK is lost
    return out


def main() -> None:
    made = cases()
    for old in HERE.iterdir():
        if old.suffix in (".pcap", ".pcapng", ".gz", ".txt"):
            old.unlink()
    truth = {}
    for name, c in made.items():
        (HERE / name).write_bytes(c.pop("bytes"))
        c.pop("file")
        truth[name] = c
    (HERE / "expected.json").write_text(json.dumps(truth, indent=1) + "\n")
    rows = []
    for name, c in truth.items():
        if c["exit"] == 3:
            outcome = f"exit 3: `{c['error']}`"
        else:
            parts = [f"exit 0, {c['packets']} packets"]
            if c["skipped"]:
                parts.append("skipped " + ", ".join(f"{v} {k}" for k, v in c["skipped"].items()))
            parts += [f"warning `{w}`" for w in c["warnings"]]
            if c.get("strict_error"):
                parts.append(f"with `--strict` exit 3: `{c['strict_error']}`")
            if "stalls" in c:
                parts.append(f"{c['flows']} flow, {c['stalls']} stalls")
            outcome = "; ".join(parts)
        rows.append(f"| {name} | {c['broken']} | {outcome} |")
    readme = (HERE / "README.md").read_text()
    head = readme[:readme.index("| file | what is broken |")]
    (HERE / "README.md").write_text(head + "| file | what is broken | nagleprobe must answer |\n"
                                    "| --- | --- | --- |\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
