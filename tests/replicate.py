"""Many-flow captures derived from the real samples: copies of a sample's packets with
shifted times and ports (the packet bytes are otherwise the real ones), written with
`capgen.pcap_bytes`. Used to run the streamed analysis across many connections."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from capgen import pcap_bytes

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def sample_packets(name: str) -> list[tuple[int, bytes]]:
    """(ts_ns relative to the first record, frame bytes) of a little-endian microsecond
    Ethernet sample pcap."""
    raw = (SAMPLES / name).read_bytes()
    assert struct.unpack_from("<II", raw, 0) == (0xA1B2C3D4, 0x00040002)
    assert struct.unpack_from("<I", raw, 20)[0] == 1, "Ethernet samples only"
    out, off, first = [], 24, None
    while off + 16 <= len(raw):
        sec, usec, incl, _ = struct.unpack_from("<IIII", raw, off)
        ts = sec * 1_000_000_000 + usec * 1000
        first = ts if first is None else first
        out.append((ts - first, raw[off + 16: off + 16 + incl]))
        off += 16 + incl
    return out


def shift_ports(frame: bytes, by: int, isn_by: int = 0) -> bytes:
    """The frame with both TCP ports moved by `by` and the sequence and acknowledgement
    numbers by `isn_by` (IPv4 or IPv6 over Ethernet; other frames as they are)."""
    eth = struct.unpack_from("!H", frame, 12)[0]
    if eth == 0x0800 and frame[23] == 6:
        at = 14 + (frame[14] & 0x0F) * 4
    elif eth == 0x86DD and frame[20] == 6:
        at = 54
    else:
        return frame
    sp, dp, seq, ack = struct.unpack_from("!HHII", frame, at)
    b = bytearray(frame)
    struct.pack_into("!HHII", b, at, (sp + by) % 65536, (dp + by) % 65536,
                     (seq + isn_by) % (1 << 32), (ack + isn_by) % (1 << 32))
    return bytes(b)


def replicate(names: list[str], copies: int, every_ns: int, port_step: int = 1,
              isn_step: int = 0, jitter_ns: int = 0, seed: int = 5) -> bytes:
    """A pcap of `copies` rounds of the samples `names`, round i starting i * every_ns later
    with ports moved by i * port_step (0: the same 4-tuples again) and sequence numbers by
    i * isn_step, merged by time. With
    `jitter_ns`, records are written in the order of time plus a random jitter (not in time
    order, like `tcpdump -i any` or merged files)."""
    rng = random.Random(seed)
    packets = []
    base = 1_700_000_000 * 10**9
    for i in range(copies):
        for k, name in enumerate(names):
            for ts, frame in sample_packets(name):
                t = base + i * every_ns + k * 1000 + ts
                key = t + (rng.randrange(jitter_ns) if jitter_ns else 0)
                packets.append((key, t, shift_ports(frame, i * port_step, i * isn_step)))
    packets.sort(key=lambda p: p[0])
    return pcap_bytes([(t, frame) for _, t, frame in packets])


def seen_twice(name: str, delay_ns: int = 3000) -> tuple[bytes, list[int]]:
    """Synthetic derivation of the real sample `name` (a little-endian microsecond pcap of any
    link type): every record followed by an exact copy `delay_ns` later, as `tcpdump -i any`
    records a packet crossing a veth pair or a bridge. Records are written in time order, so
    in a fast flow copies interleave with the next packets (A B A' B'). Returns the pcap and
    the frame number in it of each of the sample's frames (frame f is 2f - 1 when no copy
    interleaves; index 0 is unused)."""
    raw = (SAMPLES / name).read_bytes()
    assert struct.unpack_from("<I", raw, 0)[0] == 0xA1B2C3D4
    linktype = struct.unpack_from("<I", raw, 20)[0]
    records, off = [], 24
    while off + 16 <= len(raw):
        sec, usec, incl, orig = struct.unpack_from("<IIII", raw, off)
        ts = sec * 1_000_000_000 + usec * 1000
        frame = raw[off + 16:off + 16 + incl]
        records += [(ts, len(records), frame, orig), (ts + delay_ns, len(records) + 1, frame, orig)]
        off += 16 + incl
    records.sort()
    frame_of = [0] * (len(records) // 2)
    for new, (_, k, _, _) in enumerate(records, 1):
        if k % 2 == 0:
            frame_of[k // 2] = new
    return (pcap_bytes([(ts, frame, orig) for ts, _, frame, orig in records], linktype),
            [0] + frame_of)
