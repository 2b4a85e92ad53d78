"""Tunnels: find the inner packet of encapsulated records, part of the decode stage.

Records the compiled decoder does not take (decode.py) are peeled here: VXLAN (UDP 4789),
GENEVE (UDP 6081, options skipped), GRE (plain, transparent Ethernet bridging 0x6558, with
checksum/key/sequence), ERSPAN I/II/III (in GRE), IPv4/IPv6 in IPv4/IPv6, MPLS label stacks
(with or without a pseudowire control word), PPPoE sessions, nested in any order up to
MAX_DEPTH layers. The result is the offset of the inner network header (an Ethernet frame
or an IP header) that the decoder then reads as usual, and a 64-bit key naming the tunnel:
a mix, per layer, of its kind, its id (VNI, GRE key, ERSPAN or PPPoE session) and its outer
IP endpoints in canonical order, so both directions of a connection have one key. MPLS
labels are left out of the key (each direction has its own labels); UDP source ports too
(VXLAN/GENEVE pick them per flow and direction).

`peel_one` is the reference, packet by packet; nagleprobe/_decode.c `peel` does the same
compiled (tests/test_encap.py checks that they agree); `peel` picks it when built. Both read
the headers as nagleprobe/layouts.py declares them (the C through nagleprobe/_columns.h).
"""

from __future__ import annotations

import ipaddress

import numpy as np

from .layouts import (
    ERSPAN2,
    ERSPAN3,
    ERSPAN3_SUBHEADER,
    ETHERNET,
    GENEVE_HEADER,
    GRE_HEADER,
    GRE_WORD,
    IPV4,
    IPV6,
    LOOPBACK,
    MPLS_LABEL,
    PPPOE_HEADER,
    PW_CONTROL_WORD,
    SLL,
    SLL2,
    UDP,
    VLAN_TAG,
    VXLAN_HEADER,
)
from .tuples import MIX_MULTIPLIER, MIX_SHIFT

MAX_DEPTH = 8  # encapsulation layers before a record is skipped as a loop
VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad and the older QinQ tag types
MAX_VLAN_TAGS = 4
MAX_MPLS_LABELS = 8

# status of a peeled record
NOT_TUNNEL, PEELED, TOO_DEEP, BAD_LENGTH, TRUNCATED, NOT_IP = 0, 1, 2, 3, 4, 5
REASONS = {TOO_DEEP: "encap-too-deep", BAD_LENGTH: "encap-bad-length",
           TRUNCATED: "truncated-headers", NOT_IP: "not-ip"}
# inner network header kinds (the link types the decoder reads them as)
INNER_ETHERNET, INNER_IP = 1, 12

# layer kinds (key words and the JSON names)
KINDS = {1: "ip-in-ip", 2: "gre", 3: "erspan", 4: "vxlan", 5: "geneve", 6: "mpls", 7: "pppoe"}
IPIP, GRE, ERSPAN, VXLAN, GENEVE, MPLS, PPPOE = 1, 2, 3, 4, 5, 6, 7
ID_NAMES = {GRE: "key", ERSPAN: "session", VXLAN: "vni", GENEVE: "vni", PPPOE: "session"}
VXLAN_PORT, GENEVE_PORT = 4789, 6081

_M64 = (1 << 64) - 1

# The sizes and field offsets the peeler reads, from nagleprobe/layouts.py, bound once (it
# runs record by record); named as nagleprobe/_columns.h names them for _decode.c's peel.
ETHERNET_SIZE, ETHERNET_ETHERTYPE = ETHERNET.size, ETHERNET.offset("ethertype")
SLL_SIZE, SLL_PROTOCOL = SLL.size, SLL.offset("protocol")
SLL2_SIZE, SLL2_PROTOCOL = SLL2.size, SLL2.offset("protocol")
LOOPBACK_SIZE = LOOPBACK.size
VLAN_TAG_SIZE, VLAN_TAG_ETHERTYPE = VLAN_TAG.size, VLAN_TAG.offset("ethertype")
MPLS_LABEL_SIZE, MPLS_LABEL_TC_BOS = MPLS_LABEL.size, MPLS_LABEL.offset("label_tc_bos")
PPPOE_SIZE, PPPOE_VERSION_TYPE, PPPOE_CODE, PPPOE_SESSION, PPPOE_PPP_PROTOCOL = (
    PPPOE_HEADER.size, *map(PPPOE_HEADER.offset, ("version_type", "code", "session",
                                                  "ppp_protocol")))
IPV4_SIZE, IPV4_VERSION_IHL, IPV4_TOTAL_LENGTH, IPV4_FRAGMENT, IPV4_PROTOCOL = (
    IPV4.size, *map(IPV4.offset, ("version_ihl", "total_length", "fragment", "protocol")))
IPV4_SRC, IPV4_DST = IPV4.offset("src"), IPV4.offset("dst")
IPV6_SIZE, IPV6_PAYLOAD_LENGTH, IPV6_NEXT_HEADER, IPV6_SRC, IPV6_DST = (
    IPV6.size, *map(IPV6.offset, ("payload_length", "next_header", "src", "dst")))
GRE_SIZE, GRE_FLAGS_VERSION, GRE_PROTOCOL = (
    GRE_HEADER.size, GRE_HEADER.offset("flags_version"), GRE_HEADER.offset("protocol"))
UDP_SIZE, UDP_DPORT, UDP_LENGTH = UDP.size, UDP.offset("dport"), UDP.offset("length")
VXLAN_SIZE, VXLAN_VNI = VXLAN_HEADER.size, VXLAN_HEADER.offset("vni")
GENEVE_SIZE, GENEVE_VERSION_OPTLEN, GENEVE_PROTOCOL, GENEVE_VNI = (
    GENEVE_HEADER.size, *map(GENEVE_HEADER.offset, ("version_optlen", "protocol", "vni")))
ERSPAN2_SIZE, ERSPAN2_SESSION = ERSPAN2.size, ERSPAN2.offset("session")
ERSPAN3_SIZE, ERSPAN3_FLAGS = ERSPAN3.size, ERSPAN3.offset("flags")


def _mix_words(h: int, words: tuple[int, ...]) -> int:
    """tuples.mix of a row, continued from h (as _decode.c mixes a tunnel's key)."""
    for w in words:
        h ^= w
        h = (h * MIX_MULTIPLIER) & _M64
        h ^= h >> MIX_SHIFT
    return h


def _be16(b: bytes, i: int) -> int:
    return (b[i] << 8) | b[i + 1]


def _skip_vlan_tags(b: bytes, p: int, et: int) -> tuple[int, int]:
    """The EtherType after the VLAN tags (up to MAX_VLAN_TAGS) at `p`, and where it leaves
    off; p -1 if a tag runs past the record."""
    for _ in range(MAX_VLAN_TAGS):
        if et not in VLAN_TPIDS:
            break
        if p + VLAN_TAG_SIZE > len(b):
            return et, -1
        et = _be16(b, p + VLAN_TAG_ETHERTYPE)
        p += VLAN_TAG_SIZE
    return et, p


def _link(b: bytes, lt: int) -> tuple[str, int, int] | None:
    """(what, offset, ethertype) where the record's network layer starts: what is "eth"
    (an ethertype at offset-2 names it) or "ip"; None for link types without tunnels."""
    n = len(b)
    if lt == 1:
        if n < ETHERNET_SIZE:
            return None
        return ("eth", ETHERNET_SIZE, _be16(b, ETHERNET_ETHERTYPE))
    if lt == 113:
        return ("eth", SLL_SIZE, _be16(b, SLL_PROTOCOL)) if n >= SLL_SIZE else None
    if lt == 276:
        return ("eth", SLL2_SIZE, _be16(b, SLL2_PROTOCOL)) if n >= SLL2_SIZE else None
    if lt in (12, 101, 228, 229):
        return ("ip", 0, 0)
    if lt in (0, 108):
        return ("ip", LOOPBACK_SIZE, 0) if n >= LOOPBACK_SIZE else None
    return None


def peel_one(b: bytes, lt: int) -> tuple[int, int, int, int, list[tuple[int, int, tuple]]]:
    """(status, inner offset, inner kind, tunnel key, layers) of one record's bytes `b`.

    layers: (kind, id, (outer address a, outer address b) as ints or ()) outermost first.
    status NOT_TUNNEL when the record carries no tunnel (the decoder then reads it as is).
    """
    start = _link(b, lt)
    if start is None:
        return NOT_TUNNEL, 0, 0, 0, []
    what, p, et = start
    n = len(b)
    layers: list[tuple[int, int, tuple]] = []
    key = 0

    def add(kind: int, ident: int, ends: tuple) -> None:
        nonlocal key
        words = [kind, ident]
        if ends:
            a, c = sorted(ends)
            words += [a >> 64, a & _M64, c >> 64, c & _M64]
        key = _mix_words(key, tuple(words))
        layers.append((kind, ident, tuple(sorted(ends))))

    def done(at: int, kind: int):
        if not layers:
            return NOT_TUNNEL, 0, 0, 0, []
        return PEELED, at, kind, key or 1, layers

    def fail(status: int):
        return (status, 0, 0, 0, []) if layers else (NOT_TUNNEL, 0, 0, 0, [])

    if what == "eth":  # skip VLAN tags
        et, p = _skip_vlan_tags(b, p, et)
        if p < 0:
            return fail(TRUNCATED)
        what = "et"
    while True:
        if len(layers) > MAX_DEPTH:
            return TOO_DEEP, 0, 0, 0, []
        if what == "eframe":  # an Ethernet frame at p (inside a tunnel)
            frame = p
            if p + ETHERNET_SIZE > n:
                return fail(TRUNCATED)
            et, p = _skip_vlan_tags(b, p + ETHERNET_SIZE, _be16(b, p + ETHERNET_ETHERTYPE))
            if p < 0:
                return fail(TRUNCATED)
            if et not in (0x8847, 0x8848, 0x8864):
                if et in (0x0800, 0x86DD) and not _ip_tunnel(b, p, et):
                    return done(frame, INNER_ETHERNET)
            what = "et"
            continue
        if what == "et":
            if et in (0x0800, 0x86DD):
                what = "ip"
            elif et in (0x8847, 0x8848):
                what = "mpls"
            elif et == 0x8864:
                what = "pppoe"
            elif et == 0x6558:
                what = "eframe"
            else:
                return fail(NOT_IP)
            continue
        if what == "mpls":
            for i in range(MAX_MPLS_LABELS + 1):
                if i == MAX_MPLS_LABELS:
                    return TOO_DEEP, 0, 0, 0, []
                if p + MPLS_LABEL_SIZE > n:
                    return TRUNCATED, 0, 0, 0, []
                bos = b[p + MPLS_LABEL_TC_BOS] & 1
                p += MPLS_LABEL_SIZE
                if bos:
                    break
            add(MPLS, 0, ())
            if p >= n:
                return TRUNCATED, 0, 0, 0, []
            nib = b[p] >> 4
            if nib in (4, 6):
                what = "ip"
            elif nib == 0:  # pseudowire control word, then an Ethernet frame
                p += PW_CONTROL_WORD
                what = "eframe"
            else:
                return NOT_IP, 0, 0, 0, []
            continue
        if what == "pppoe":
            if p + PPPOE_SIZE > n:
                return TRUNCATED, 0, 0, 0, []
            if b[p + PPPOE_VERSION_TYPE] != 0x11 or b[p + PPPOE_CODE] != 0:
                return fail(NOT_IP)
            add(PPPOE, _be16(b, p + PPPOE_SESSION), ())
            proto = _be16(b, p + PPPOE_PPP_PROTOCOL)
            p += PPPOE_SIZE
            if proto not in (0x0021, 0x0057):
                return NOT_IP, 0, 0, 0, []
            what = "ip"
            continue
        # what == "ip": an IP header at p
        if p + 1 > n:
            return fail(TRUNCATED)
        v = b[p] >> 4
        if v == 4:
            if p + IPV4_SIZE > n:
                return fail(TRUNCATED)
            ihl = (b[p + IPV4_VERSION_IHL] & 15) * 4
            proto = b[p + IPV4_PROTOCOL]
            tot = _be16(b, p + IPV4_TOTAL_LENGTH)
            frag = _be16(b, p + IPV4_FRAGMENT) & 0x3FFF
            ends = (int.from_bytes(b[p + IPV4_SRC:p + IPV4_SRC + 4], "big") | 0xFFFF00000000,
                    int.from_bytes(b[p + IPV4_DST:p + IPV4_DST + 4], "big") | 0xFFFF00000000)
            body, end = p + ihl, p + tot
            if ihl < IPV4_SIZE or frag or tot < ihl:
                return done(p, INNER_IP)
        elif v == 6:
            if p + IPV6_SIZE > n:
                return fail(TRUNCATED)
            proto = b[p + IPV6_NEXT_HEADER]
            ends = (int.from_bytes(b[p + IPV6_SRC:p + IPV6_SRC + 16], "big"),
                    int.from_bytes(b[p + IPV6_DST:p + IPV6_DST + 16], "big"))
            body = p + IPV6_SIZE
            end = body + _be16(b, p + IPV6_PAYLOAD_LENGTH)
        else:
            return done(p, INNER_IP)
        if proto in (4, 41):
            add(IPIP, 0, ends)
            p, what = body, "ip"
            continue
        if proto == 47:
            if body + GRE_SIZE > n:
                return fail(TRUNCATED)
            fl, gp = _be16(b, body + GRE_FLAGS_VERSION), _be16(b, body + GRE_PROTOCOL)
            if fl & 7:  # version 1 is PPTP's enhanced GRE
                return done(p, INNER_IP)
            q = body + GRE_SIZE
            gkey = 0
            if fl & 0x8000:  # a checksum word
                q += GRE_WORD
            if fl & 0x2000:  # a key word
                if q + GRE_WORD > n:
                    return fail(TRUNCATED)
                gkey = int.from_bytes(b[q:q + GRE_WORD], "big")
                q += GRE_WORD
            if fl & 0x1000:  # a sequence number word
                q += GRE_WORD
            if gp not in (0x0800, 0x86DD, 0x6558, 0x8847, 0x8848, 0x88BE, 0x22EB):
                return done(p, INNER_IP)
            add(GRE, gkey, ends)
            if q > n or q > end:
                return BAD_LENGTH, 0, 0, 0, []
            if gp == 0x88BE and not fl & 0x1000:  # ERSPAN type I: no header
                add(ERSPAN, 0, ())
                p, what = q, "eframe"
            elif gp in (0x88BE, 0x22EB):  # type II (8 bytes) / III (12, +8 with O)
                hl = ERSPAN2_SIZE if gp == 0x88BE else ERSPAN3_SIZE
                if q + hl > n:
                    return TRUNCATED, 0, 0, 0, []
                if gp == 0x22EB and b[q + ERSPAN3_FLAGS + 1] & 1:  # the O flag
                    hl += ERSPAN3_SUBHEADER
                add(ERSPAN, _be16(b, q + ERSPAN2_SESSION) & 0x3FF, ())
                p, what = q + hl, "eframe"
            else:
                p, et, what = q, gp, "et"
            if p > end:
                return BAD_LENGTH, 0, 0, 0, []
            continue
        if proto == 17 and body + UDP_SIZE <= n:
            dport = _be16(b, body + UDP_DPORT)
            ulen = _be16(b, body + UDP_LENGTH)
            h = body + UDP_SIZE  # the VXLAN or GENEVE header
            if dport == VXLAN_PORT:
                if h + VXLAN_SIZE > n:
                    return fail(TRUNCATED)
                if ulen < UDP_SIZE + VXLAN_SIZE or body + ulen > end:
                    add(VXLAN, 0, ends)
                    return BAD_LENGTH, 0, 0, 0, []
                add(VXLAN, int.from_bytes(b[h + VXLAN_VNI:h + VXLAN_VNI + 3], "big"), ends)
                p, what = h + VXLAN_SIZE, "eframe"
                continue
            if dport == GENEVE_PORT:
                if h + GENEVE_SIZE > n:
                    return fail(TRUNCATED)
                hl = GENEVE_SIZE + (b[h + GENEVE_VERSION_OPTLEN] & 0x3F) * 4
                add(GENEVE, int.from_bytes(b[h + GENEVE_VNI:h + GENEVE_VNI + 3], "big"), ends)
                if ulen < UDP_SIZE + hl or body + ulen > end:
                    return BAD_LENGTH, 0, 0, 0, []
                p, et, what = h + hl, _be16(b, h + GENEVE_PROTOCOL), "et"
                if p > n:
                    return TRUNCATED, 0, 0, 0, []
                continue
        return done(p, INNER_IP)


def _ip_tunnel(b: bytes, p: int, et: int) -> bool:
    """Whether the IP header at p carries a tunnel (so peeling goes on)."""
    n = len(b)
    if et == 0x0800:
        if p + IPV4_SIZE > n:
            return False
        proto, body = b[p + IPV4_PROTOCOL], p + (b[p + IPV4_VERSION_IHL] & 15) * 4
        if _be16(b, p + IPV4_FRAGMENT) & 0x3FFF:
            return False
    else:
        if p + IPV6_SIZE > n:
            return False
        proto, body = b[p + IPV6_NEXT_HEADER], p + IPV6_SIZE
    if proto in (4, 41, 47):
        return True
    return (proto == 17 and body + UDP_DPORT + 2 <= n
            and _be16(b, body + UDP_DPORT) in (VXLAN_PORT, GENEVE_PORT))


def _address(x: int) -> str:
    if x >> 32 == 0xFFFF:
        return str(ipaddress.IPv4Address(x & 0xFFFFFFFF))
    return str(ipaddress.IPv6Address(x))


def describe(layers: list[tuple[int, int, tuple]]) -> list[dict]:
    """The JSON form of a tunnel's layers, outermost first."""
    out = []
    for kind, ident, ends in layers:
        d: dict = {"kind": KINDS[kind], "outer": [_address(e) for e in ends] or None}
        if kind in ID_NAMES and not (kind == GRE and ident == 0):
            d[ID_NAMES[kind]] = ident
        out.append(d)
    return out


def describe_text(layers: list[dict]) -> str:
    """'vxlan 10.0.0.1<->10.0.0.2 vni 42 / mpls' from `describe`'s form."""
    parts = []
    for d in layers:
        s = d["kind"]
        if d.get("outer"):
            s += " " + "<->".join(d["outer"])
        for name in ("vni", "key", "session"):
            if name in d:
                s += f" {name} {d[name]}"
        parts.append(s)
    return " / ".join(parts)


class Tunnels:
    """The tunnels of one capture: numbered from 1 in order of appearance, each with its
    layers (`describe`); the decoded `tunnel` column holds these numbers."""

    def __init__(self) -> None:
        self.number: dict[int, int] = {}  # tunnel key -> number
        self.layers: list[list[dict]] = []  # by number - 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tunnels) and (self.number, self.layers) == (other.number,
                                                                               other.layers)

    __hash__ = None  # mutable

    def numbers(self, keys: np.ndarray, data: np.ndarray, offset: np.ndarray,
                caplen: np.ndarray, linktype: np.ndarray) -> np.ndarray:
        """Numbers of the tunnel keys of peeled records (a new tunnel is described from its
        first record: `peel_one` once per tunnel, not per packet)."""
        if len(keys) and keys[0] == keys[-1] and (keys == keys[0]).all():  # one tunnel
            uniq, first, inv = keys[:1], np.zeros(1, np.int64), np.zeros(len(keys), np.int64)
        else:
            uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        nums = np.empty(len(uniq), np.uint32)
        for j in np.argsort(first).tolist():  # new tunnels numbered by first appearance
            k, i = int(uniq[j]), int(first[j])
            if k not in self.number:
                o, c = int(offset[i]), int(caplen[i])
                self.layers.append(describe(peel_one(data[o:o + c].tobytes(), int(linktype[i]))[4]))
                self.number[k] = len(self.layers)
            nums[j] = self.number[k]
        return nums[inv.reshape(-1)]


def peel_numpy(data: np.ndarray, offset: np.ndarray, caplen: np.ndarray, linktype: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`peel` without the compiled loop, record by record (only when it is not built)."""
    m = len(offset)
    status = np.zeros(m, np.int8)
    inner = np.zeros(m, np.int64)
    kind = np.zeros(m, np.int32)
    key = np.zeros(m, np.uint64)
    for i in range(m):
        o, c = int(offset[i]), int(caplen[i])
        s, at, k, h, _ = peel_one(data[o:o + c].tobytes(), int(linktype[i]))
        status[i], inner[i], kind[i], key[i] = s, at, k, h
    return status, inner, kind, key


try:
    from ._decode import peel as _peel_compiled
except ImportError:  # built without a C compiler
    _peel_compiled = None


def peel(data: np.ndarray, offset: np.ndarray, caplen: np.ndarray, linktype: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per record: (status, inner offset from the record start, inner kind, tunnel key)."""
    if _peel_compiled is None:
        return peel_numpy(data, offset, caplen, linktype)
    m = len(offset)
    status = np.zeros(m, np.int8)
    inner = np.zeros(m, np.int64)
    kind = np.zeros(m, np.int32)
    key = np.zeros(m, np.uint64)
    _peel_compiled(data, np.ascontiguousarray(offset, np.int64),
                   np.ascontiguousarray(caplen, np.int64),
                   np.ascontiguousarray(linktype, np.int32), status, inner, kind, key)
    return status, inner, kind, key
