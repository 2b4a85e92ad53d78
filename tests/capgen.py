"""Synthetic capture writers for the read/decode tests: pcap (usec/nsec, both byte orders),
a minimal pcapng writer (sections, interfaces with if_tsresol/if_tsoffset, EPB/SPB/PB) and gzip.
The one writer of capture files for the tests, the sample scripts and the benchmarks (which
import this module by path): pcap file headers (`pcap_header`) and records (`pcap_bytes`),
pcapng files (`pcapng_bytes`; `minimal=True` sections carry no options beyond the ones asked
for), the head of a one-interface pcapng (`pcapng_header`), one interface block
(`pcapng_idb`) and the framing of any block (`pcapng_block`).

Packets are (ts_ns, linktype, bytes[, wirelen]) tuples; bytes usually come from scapy.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field

LT_EN10MB, LT_NULL, LT_RAW, LT_LOOP, LT_SLL, LT_IPV4, LT_IPV6, LT_SLL2 = 1, 0, 101, 108, 113, 228, 229, 276


def pcap_header(linktype: int = LT_EN10MB, snaplen: int = 262144, nsec: bool = False,
                big: bool = False) -> bytes:
    """The 24-byte pcap file header (version 2.4, microsecond or nanosecond times)."""
    magic = 0xA1B23C4D if nsec else 0xA1B2C3D4
    return struct.pack((">" if big else "<") + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_bytes(packets, linktype: int = LT_EN10MB, nsec: bool = False, big: bool = False,
               snaplen: int = 262144) -> bytes:
    """packets: iterable of (ts_ns, data) or (ts_ns, data, wirelen)."""
    e = ">" if big else "<"
    out = [pcap_header(linktype, snaplen, nsec, big)]
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


def pcapng_block(btype: int, body: bytes, big: bool = False) -> bytes:
    """One pcapng block: type, total length, the body padded to 32 bits, the length again."""
    return _block(">" if big else "<", btype, body)


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
    # minimal: no option that was not asked for: no end-of-options in the section header, no
    # if_name (and no end-of-options when an interface has no option), no comment on EPBs
    minimal: bool = False


def _units(iface: Iface, ts_ns: int) -> int:
    ts_ns -= iface.tsoffset * 1_000_000_000
    r = 6 if iface.tsresol is None else iface.tsresol
    if r & 0x80:
        k = r & 0x7F
        return (ts_ns << k) // 1_000_000_000
    if r <= 9:
        return ts_ns // 10 ** (9 - r)
    return ts_ns * 10 ** (r - 9)


def _shb(e: str, minimal: bool) -> bytes:
    shb = struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1)
    return _block(e, 0x0A0D0D0A, shb if minimal else shb + _opt(e, 0, b""))


def pcapng_idb(i: Iface, big: bool = False, minimal: bool = False) -> bytes:
    """The interface description block of `i` (see Section.minimal)."""
    e = ">" if big else "<"
    opts = b""
    if i.tsresol is not None:
        opts += _opt(e, 9, bytes([i.tsresol]))
    if i.tsoffset:
        opts += _opt(e, 14, struct.pack(e + "q", i.tsoffset))
    if not minimal:
        opts += _opt(e, 2, b"eth-test")
    if opts:
        opts += _opt(e, 0, b"")
    return _block(e, 1, struct.pack(e + "HHI", i.linktype, 0, i.snaplen) + opts)


def pcapng_header(linktype: int = LT_EN10MB, snaplen: int = 262144, big: bool = False) -> bytes:
    """Section header and one interface block, no options (times in microseconds): the head
    of a one-interface pcapng, 48 bytes."""
    return pcapng_bytes([Section([Iface(linktype, snaplen=snaplen)], big=big, minimal=True)])


def pcapng_bytes(sections: list[Section]) -> bytes:
    out = []
    for sec in sections:
        e = ">" if sec.big else "<"
        out.append(_shb(e, sec.minimal))
        for i in sec.ifaces:
            out.append(pcapng_idb(i, sec.big, sec.minimal))
        for r in sec.records:
            kind = r[0]
            if kind == "epb":
                _, ifi, ts, data = r[:4]
                data = bytes(data)
                wire = r[4] if len(r) > 4 else len(data)
                u = _units(sec.ifaces[ifi] if ifi < len(sec.ifaces) else Iface(1), ts)
                body = struct.pack(e + "IIIII", ifi, u >> 32, u & 0xFFFFFFFF, len(data), wire)
                body += _pad(data)
                if not sec.minimal:
                    body += _opt(e, 1, b"comment") + _opt(e, 0, b"")
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


def pcap_records(b: bytes, limit: int = 262144) -> list[tuple[int, bytes]]:
    """(file offset, bytes incl. the 16-byte header) of each record of a little-endian pcap,
    up to and including the first whose captured length is over `limit`."""
    out, o = [], 24
    while o + 16 <= len(b):
        cl = struct.unpack_from("<I", b, o + 8)[0]
        out.append((o, b[o:o + 16 + cl]))
        if cl > limit:
            break
        o += 16 + cl
    return out


def pcapng_blocks(b: bytes) -> list[tuple[int, bytes]]:
    """(file offset, bytes) of each block of a well-formed little-endian pcapng."""
    out, o = [], 0
    while o + 8 <= len(b):
        ln = struct.unpack_from("<I", b, o + 4)[0]
        out.append((o, b[o:o + ln]))
        o += ln
    return out


def gz(b: bytes) -> bytes:
    return gzip.compress(b, compresslevel=1)


def write(path, b: bytes) -> str:
    with open(path, "wb") as f:
        f.write(b)
    return str(path)


# TCP options, whole and broken: EOL, NOP, MSS, WS, SACK-permitted, timestamps, SACK, and
# malformed ones (wrong lengths, a length running past the list, unknown kinds)
TCP_OPTION_ATOMS = [b"\x00", b"\x01", b"\x02\x04\x05\xb4", b"\x03\x03\x07", b"\x04\x02",
                    b"\x08\x0a\x01\x02\x03\x04\x05\x06\x07\x08", b"\x05\x0a" + bytes(8),
                    b"\x02\x05\x01\x02\x03", b"\x08\x01", b"\x1e\x00", b"\xfe\x04\xf9\x89"]


def corpus():
    """Synthetic packets: list of (linktype, full_bytes, captured_bytes, wirelen, expect).

    expect is None for a TCP packet the decoder must return, else the skip reason.
    """
    from scapy.all import (
        ARP,
        ICMP,
        IP,
        TCP,
        UDP,
        CookedLinux,
        CookedLinuxV2,
        Dot1AD,
        Dot1Q,
        Ether,
        IPOption_Router_Alert,
        IPv6,
        IPv6ExtHdrDestOpt,
        IPv6ExtHdrFragment,
        IPv6ExtHdrHopByHop,
        Raw,
    )

    ts = [("NOP", None), ("NOP", None), ("Timestamp", (123456, 654321))]
    syn = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (99, 0)), ("NOP", None), ("WScale", 7)]
    v4 = IP(src="10.0.0.1", dst="192.168.1.20")
    v6 = IPv6(src="2001:db8::1", dst="fe80::abcd:1")
    out = []

    def add(lt, pkt, expect=None, snap=None, wire=None):
        full = bytes(pkt)
        cap = full if snap is None else full[:snap]
        out.append((lt, full, cap, wire if wire is not None else len(full), expect))

    def tcp(i, **kw):
        kw.setdefault("options", ts)
        return TCP(sport=1000 + i, dport=80, seq=1000 * i + 7, ack=4_000_000_000 + i,
                   flags=kw.pop("flags", "PA"), window=100 + i, **kw)

    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    add(1, e / v4 / tcp(1, flags="S", options=syn))
    add(1, e / v4 / tcp(2) / Raw(b"a" * 10))
    add(1, e / v4 / tcp(3, options=[("Timestamp", (7, 8)), ("NOP", None), ("NOP", None)]))
    add(1, e / v4 / tcp(4, options=[("NOP", None), ("NOP", None), ("SAck", (5, 9))]))
    add(1, e / v4 / tcp(5, options=[]) / Raw(b"b" * 3))  # short frame: Ethernet padding
    add(1, e / v4 / tcp(6, flags="FA") / Raw(b"c" * 1))
    add(1, e / v4 / TCP(sport=1, dport=2, flags=0x1FF))  # every flag incl. NS
    add(1, e / Dot1Q(vlan=5) / v4 / tcp(7) / Raw(b"d" * 20))
    add(1, e / Dot1AD(vlan=6) / Dot1Q(vlan=7) / v4 / tcp(8) / Raw(b"e" * 5))
    add(1, Ether(type=0x9100) / Dot1Q(vlan=3, type=0x8100) / Dot1Q(vlan=4) / v4 / tcp(9))
    add(1, e / IP(src="10.0.0.3", dst="10.0.0.4", options=[IPOption_Router_Alert()])
        / tcp(10) / Raw(b"f" * 7))
    add(1, e / v6 / tcp(11, flags="SA", options=syn))
    add(1, e / v6 / tcp(12) / Raw(b"g" * 30))
    add(1, e / v6 / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / tcp(13) / Raw(b"h" * 9))
    add(1, e / v6 / IPv6ExtHdrFragment(offset=0, m=0) / tcp(14) / Raw(b"i" * 4))
    add(1, e / v4 / tcp(15) / Raw(b"j" * 1000), snap=14 + 20 + 32)  # tcpdump -s 66
    add(1, e / v6 / tcp(16) / Raw(b"k" * 500), snap=14 + 40 + 32)
    add(1, e / IP(src="10.0.0.1", dst="10.0.0.2", len=0) / tcp(17) / Raw(b"l" * 100),
        snap=14 + 20 + 32, wire=14 + 20 + 32 + 5000)  # TSO super-frame, len 0
    # skipped ones
    add(1, e / v4 / tcp(20) / Raw(b"m" * 100), "truncated-headers", snap=14 + 20 + 19)  # TCP header cut
    # (TCP options cut, the 20-byte header whole: kept as options-cut, see test_decode.py)
    add(1, e / v4 / UDP(sport=53, dport=53) / Raw(b"q"), "not-tcp")
    add(1, e / v4 / ICMP(), "not-tcp")
    add(1, e / v6 / UDP(), "not-tcp")
    add(1, e / ARP(), "not-ip")
    add(1, e / IP(src="1.1.1.1", dst="2.2.2.2", flags="MF") / tcp(21) / Raw(b"n" * 8),
        "ip-fragment")
    add(1, e / IP(src="1.1.1.1", dst="2.2.2.2", frag=100, proto=6) / Raw(b"o" * 40),
        "ip-fragment")
    add(1, e / v6 / IPv6ExtHdrFragment(offset=10, m=1, nh=6) / Raw(b"p" * 40), "ip-fragment")
    add(1, e / v4 / TCP(dataofs=3), "bad-header")
    add(1, e / IP(ihl=4, src="1.1.1.1", dst="2.2.2.2") / tcp(22), "bad-header")
    add(1, e / IP(len=30, src="1.1.1.1", dst="2.2.2.2") / tcp(23), "bad-header")
    add(1, b"\x02" * 10, "truncated-headers")
    # other link types
    add(113, CookedLinux(proto=0x0800) / v4 / tcp(30) / Raw(b"s" * 11))
    add(113, CookedLinux(proto=0x86DD) / v6 / tcp(31))
    add(113, CookedLinux(proto=0x0806) / ARP(), "not-ip")
    add(276, CookedLinuxV2(proto=0x0800) / v4 / tcp(32) / Raw(b"t" * 12))
    add(276, CookedLinuxV2(proto=0x86DD) / v6 / tcp(33) / Raw(b"u" * 2))
    add(101, v4 / tcp(34) / Raw(b"v" * 13))
    add(101, v6 / tcp(35) / Raw(b"w" * 14))
    add(228, v4 / tcp(36) / Raw(b"x" * 15))
    add(229, v6 / tcp(37) / Raw(b"y" * 16))
    add(0, struct.pack("<I", 2) + bytes(v4 / tcp(38) / Raw(b"z" * 17)))
    add(0, struct.pack(">I", 2) + bytes(v4 / tcp(39) / Raw(b"z" * 18)))
    add(0, struct.pack("<I", 30) + bytes(v6 / tcp(40) / Raw(b"z" * 19)))
    add(0, struct.pack(">I", 24) + bytes(v6 / tcp(41)))
    add(0, struct.pack("<I", 7) + b"\0" * 40, "not-ip")
    add(108, struct.pack(">I", 2) + bytes(v4 / tcp(42) / Raw(b"z" * 20)))
    add(108, struct.pack(">I", 28) + bytes(v6 / tcp(43) / Raw(b"z" * 21)))
    add(147, b"\x00" * 60, "unsupported-link-type")
    return out
