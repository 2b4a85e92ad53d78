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
compiled (tests/test_encap.py checks that they agree); `peel` picks it when built.
"""

from __future__ import annotations

import ipaddress

import numpy as np

from .layouts import ETHERNET, LOOPBACK, SLL, SLL2, VLAN_TAG
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
        if p + VLAN_TAG.size > len(b):
            return et, -1
        et = _be16(b, p + VLAN_TAG.offset("ethertype"))
        p += VLAN_TAG.size
    return et, p


def _link(b: bytes, lt: int) -> tuple[str, int, int] | None:
    """(what, offset, ethertype) where the record's network layer starts: what is "eth"
    (an ethertype at offset-2 names it) or "ip"; None for link types without tunnels."""
    n = len(b)
    for link, header, field in ((1, ETHERNET, "ethertype"), (113, SLL, "protocol"),
                                (276, SLL2, "protocol")):
        if lt == link:
            if n < header.size:
                return None
            return ("eth", header.size, _be16(b, header.offset(field)))
    if lt in (12, 101, 228, 229):
        return ("ip", 0, 0)
    if lt in (0, 108):
        return ("ip", LOOPBACK.size, 0) if n >= LOOPBACK.size else None
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
            if p + ETHERNET.size > n:
                return fail(TRUNCATED)
            et, p = _skip_vlan_tags(b, p + ETHERNET.size,
                                    _be16(b, p + ETHERNET.offset("ethertype")))
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
                if p + 4 > n:
                    return TRUNCATED, 0, 0, 0, []
                bos = b[p + 2] & 1
                p += 4
                if bos:
                    break
            add(MPLS, 0, ())
            if p >= n:
                return TRUNCATED, 0, 0, 0, []
            nib = b[p] >> 4
            if nib in (4, 6):
                what = "ip"
            elif nib == 0:  # pseudowire control word, then an Ethernet frame
                p += 4
                what = "eframe"
            else:
                return NOT_IP, 0, 0, 0, []
            continue
        if what == "pppoe":
            if p + 8 > n:
                return TRUNCATED, 0, 0, 0, []
            if b[p] != 0x11 or b[p + 1] != 0:
                return fail(NOT_IP)
            add(PPPOE, _be16(b, p + 2), ())
            proto = _be16(b, p + 6)
            p += 8
            if proto not in (0x0021, 0x0057):
                return NOT_IP, 0, 0, 0, []
            what = "ip"
            continue
        # what == "ip": an IP header at p
        if p + 1 > n:
            return fail(TRUNCATED)
        v = b[p] >> 4
        if v == 4:
            if p + 20 > n:
                return fail(TRUNCATED)
            ihl = (b[p] & 15) * 4
            proto = b[p + 9]
            tot = _be16(b, p + 2)
            frag = _be16(b, p + 6) & 0x3FFF
            ends = (int.from_bytes(b[p + 12:p + 16], "big") | 0xFFFF00000000,
                    int.from_bytes(b[p + 16:p + 20], "big") | 0xFFFF00000000)
            body, end = p + ihl, p + tot
            if ihl < 20 or frag or tot < ihl:
                return done(p, INNER_IP)
        elif v == 6:
            if p + 40 > n:
                return fail(TRUNCATED)
            proto = b[p + 6]
            ends = (int.from_bytes(b[p + 8:p + 24], "big"), int.from_bytes(b[p + 24:p + 40], "big"))
            body, end = p + 40, p + 40 + _be16(b, p + 4)
        else:
            return done(p, INNER_IP)
        if proto in (4, 41):
            add(IPIP, 0, ends)
            p, what = body, "ip"
            continue
        if proto == 47:
            if body + 4 > n:
                return fail(TRUNCATED)
            fl, gp = _be16(b, body), _be16(b, body + 2)
            if fl & 7:  # version 1 is PPTP's enhanced GRE
                return done(p, INNER_IP)
            q = body + 4
            gkey = 0
            if fl & 0x8000:
                q += 4
            if fl & 0x2000:
                if q + 4 > n:
                    return fail(TRUNCATED)
                gkey = int.from_bytes(b[q:q + 4], "big")
                q += 4
            if fl & 0x1000:
                q += 4
            if gp not in (0x0800, 0x86DD, 0x6558, 0x8847, 0x8848, 0x88BE, 0x22EB):
                return done(p, INNER_IP)
            add(GRE, gkey, ends)
            if q > n or q > end:
                return BAD_LENGTH, 0, 0, 0, []
            if gp == 0x88BE and not fl & 0x1000:  # ERSPAN type I: no header
                add(ERSPAN, 0, ())
                p, what = q, "eframe"
            elif gp in (0x88BE, 0x22EB):  # type II (8 bytes) / III (12, +8 with O)
                hl = 8 if gp == 0x88BE else 12
                if q + hl > n:
                    return TRUNCATED, 0, 0, 0, []
                if gp == 0x22EB and b[q + 11] & 1:
                    hl += 8
                add(ERSPAN, _be16(b, q + 2) & 0x3FF, ())
                p, what = q + hl, "eframe"
            else:
                p, et, what = q, gp, "et"
            if p > end:
                return BAD_LENGTH, 0, 0, 0, []
            continue
        if proto == 17 and body + 8 <= n:
            dport = _be16(b, body + 2)
            ulen = _be16(b, body + 4)
            if dport == VXLAN_PORT:
                if body + 16 > n:
                    return fail(TRUNCATED)
                if ulen < 16 or body + ulen > end:
                    add(VXLAN, 0, ends)
                    return BAD_LENGTH, 0, 0, 0, []
                add(VXLAN, int.from_bytes(b[body + 12:body + 15], "big"), ends)
                p, what = body + 16, "eframe"
                continue
            if dport == GENEVE_PORT:
                if body + 16 > n:
                    return fail(TRUNCATED)
                hl = 8 + (b[body + 8] & 0x3F) * 4
                add(GENEVE, int.from_bytes(b[body + 12:body + 15], "big"), ends)
                if ulen < 8 + hl or body + ulen > end:
                    return BAD_LENGTH, 0, 0, 0, []
                p, et, what = body + 8 + hl, _be16(b, body + 10), "et"
                if p > n:
                    return TRUNCATED, 0, 0, 0, []
                continue
        return done(p, INNER_IP)


def _ip_tunnel(b: bytes, p: int, et: int) -> bool:
    """Whether the IP header at p carries a tunnel (so peeling goes on)."""
    n = len(b)
    if et == 0x0800:
        if p + 20 > n:
            return False
        proto, body = b[p + 9], p + (b[p] & 15) * 4
        if _be16(b, p + 6) & 0x3FFF:
            return False
    else:
        if p + 40 > n:
            return False
        proto, body = b[p + 6], p + 40
    if proto in (4, 41, 47):
        return True
    return proto == 17 and body + 4 <= n and _be16(b, body + 2) in (VXLAN_PORT, GENEVE_PORT)


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
