"""Synthetic capture writers for the read/decode tests: pcap (usec/nsec, both byte orders),
a minimal pcapng writer (sections, interfaces with if_tsresol/if_tsoffset, EPB/SPB/PB) and gzip.

Packets are (ts_ns, linktype, bytes[, wirelen]) tuples; bytes usually come from scapy.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field

LT_EN10MB, LT_NULL, LT_RAW, LT_LOOP, LT_SLL, LT_IPV4, LT_IPV6, LT_SLL2 = 1, 0, 101, 108, 113, 228, 229, 276


def pcap_bytes(packets, linktype: int = LT_EN10MB, nsec: bool = False, big: bool = False,
               snaplen: int = 262144) -> bytes:
    """packets: iterable of (ts_ns, data) or (ts_ns, data, wirelen)."""
    e = ">" if big else "<"
    magic = 0xA1B23C4D if nsec else 0xA1B2C3D4
    out = [struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for p in packets:
        ts, data = p[0], bytes(p[1])
        wire = p[2] if len(p) > 2 else len(data)
        sec, frac = divmod(ts, 1_000_000_000)
        if not nsec:
            frac //= 1000
        out.append(struct.pack(e + "IIII", sec, frac, len(data), wire))
        out.append(data)
    return b"".join(out)


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def _opt(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + _pad(value)


def _block(e: str, btype: int, body: bytes) -> bytes:
    body = _pad(body)
    ln = len(body) + 12
    return struct.pack(e + "II", btype, ln) + body + struct.pack(e + "I", ln)


@dataclass
class Iface:
    linktype: int
    tsresol: int | None = None  # raw if_tsresol byte (None: default 10^-6)
    tsoffset: int = 0  # seconds
    snaplen: int = 262144


@dataclass
class Section:
    ifaces: list[Iface]
    big: bool = False
    # records: ("epb", iface_idx, ts_ns, data[, wirelen]) | ("spb", data[, wirelen])
    #        | ("pb", iface_idx, ts_ns, data) | ("raw", block_type, body)
    records: list[tuple] = field(default_factory=list)


def _units(iface: Iface, ts_ns: int) -> int:
    ts_ns -= iface.tsoffset * 1_000_000_000
    r = 6 if iface.tsresol is None else iface.tsresol
    if r & 0x80:
        k = r & 0x7F
        return (ts_ns << k) // 1_000_000_000
    if r <= 9:
        return ts_ns // 10 ** (9 - r)
    return ts_ns * 10 ** (r - 9)


def pcapng_bytes(sections: list[Section]) -> bytes:
    out = []
    for sec in sections:
        e = ">" if sec.big else "<"
        shb = struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1) + _opt(e, 0, b"")
        out.append(_block(e, 0x0A0D0D0A, shb))
        for i in sec.ifaces:
            opts = b""
            if i.tsresol is not None:
                opts += _opt(e, 9, bytes([i.tsresol]))
            if i.tsoffset:
                opts += _opt(e, 14, struct.pack(e + "q", i.tsoffset))
            opts += _opt(e, 2, b"eth-test") + _opt(e, 0, b"")
            out.append(_block(e, 1, struct.pack(e + "HHI", i.linktype, 0, i.snaplen) + opts))
        for r in sec.records:
            kind = r[0]
            if kind == "epb":
                _, ifi, ts, data = r[:4]
                data = bytes(data)
                wire = r[4] if len(r) > 4 else len(data)
                u = _units(sec.ifaces[ifi], ts)
                body = struct.pack(e + "IIIII", ifi, u >> 32, u & 0xFFFFFFFF, len(data), wire)
                body += _pad(data) + _opt(e, 1, b"comment") + _opt(e, 0, b"")
                out.append(_block(e, 6, body))
            elif kind == "pb":
                _, ifi, ts, data = r[:4]
                data = bytes(data)
                u = _units(sec.ifaces[ifi], ts)
                body = struct.pack(e + "HHIIII", ifi, 0, u >> 32, u & 0xFFFFFFFF, len(data),
                                   len(data)) + _pad(data)
                out.append(_block(e, 2, body))
            elif kind == "spb":
                data = bytes(r[1])
                wire = r[2] if len(r) > 2 else len(data)
                out.append(_block(e, 3, struct.pack(e + "I", wire) + _pad(data)))
            elif kind == "raw":
                out.append(_block(e, r[1], r[2]))
            else:
                raise ValueError(kind)
    return b"".join(out)


def gz(b: bytes) -> bytes:
    return gzip.compress(b, compresslevel=1)


def write(path, b: bytes) -> str:
    with open(path, "wb") as f:
        f.write(b)
    return str(path)
