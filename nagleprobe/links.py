"""Link layers for the numpy decoder: where each record's network header starts, per link
type (Ethernet with VLAN tags, Linux cooked v1/v2, raw IP, BSD loopback, PPP and HDLC,
NFLOG, PKTAP, 802.11 with radiotap/PPI/Prism), and what is dropped on the way. The headers'
sizes and field offsets are those declared in nagleprobe/layouts.py."""

from __future__ import annotations

import collections

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .encap import MAX_VLAN_TAGS, VLAN_TPIDS
from .layouts import (
    ETHERNET,
    HDLC,
    LLC_SNAP,
    LOOPBACK,
    NFLOG,
    NFLOG_TLV,
    PKTAP,
    PPI,
    PRISM,
    RADIOTAP,
    SLL,
    SLL2,
    VLAN_TAG,
    WLAN,
)
from .read import RecordBatch

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD

# network-layer classification codes (internal)
NOT_IP, UNSUPPORTED, TRUNC = 0, 1, 2


def gather(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """(len(at), width) uint8 block of the bytes at each offset (caller checked bounds).

    Fancy-indexes rows of a sliding-window view, so numpy copies `width` contiguous bytes per
    row instead of gathering byte by byte.
    """
    if len(data) < width:  # only for empty selections of tiny batches
        data = np.concatenate([data, np.zeros(width, np.uint8)])
    win = as_strided(data, shape=(len(data) - width + 1, width), strides=(1, 1),
                     writeable=False)
    return win[at]


def be16(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    return (data[at].astype(np.int64) << 8) | data[at + 1]


class Drops:
    """Counts rows dropped by reason."""

    def __init__(self, counter: collections.Counter) -> None:
        self.c = counter

    def add(self, reason: str, n: int) -> None:
        if n:
            self.c[reason] += int(n)


# ---------------------------------------------------------------------- link layer
def link_layer(batch: RecordBatch, drops: Drops) -> tuple[np.ndarray, np.ndarray]:
    """Per record: absolute offset of the network header and its IP version (4/6, else 0)."""
    n = len(batch.offset)
    l3 = np.zeros(n, dtype=np.int64)
    ver = np.zeros(n, dtype=np.int8)
    lt = batch.linktype
    if n and lt[0] == lt[-1] and (lt == lt[0]).all():
        groups = [(int(lt[0]), None)]
    else:
        groups = [(int(u), np.nonzero(lt == u)[0]) for u in np.unique(lt)]
    for ltype, rows in groups:
        off = batch.offset if rows is None else batch.offset[rows]
        cap = batch.caplen if rows is None else batch.caplen[rows]
        res = _LINK.get(ltype)
        if res is None:
            drops.add("unsupported-link-type", len(off))
            continue
        g_l3, g_ver = res(batch.data, off, cap, drops)
        if rows is None:
            l3, ver = g_l3, g_ver
        else:
            l3[rows] = g_l3
            ver[rows] = g_ver
    return l3, ver


def _classify_ethertype(et: np.ndarray, ok: np.ndarray, drops: Drops) -> np.ndarray:
    ver = np.where(et == ETH_IPV4, 4, np.where(et == ETH_IPV6, 6, 0)).astype(np.int8)
    ver[~ok] = 0
    drops.add("not-ip", int((ok & (ver == 0)).sum()))
    return ver


def _link_en10mb(data, off, cap, drops):
    ok = cap >= ETHERNET.size
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    at = np.where(ok, off + ETHERNET.offset("ethertype"), 0)  # never read beyond a short record
    et = np.where(ok, be16(data, at), 0)
    hdr = np.full(len(off), ETHERNET.size, dtype=np.int64)
    for _ in range(MAX_VLAN_TAGS):
        tagged = ok & np.isin(et, VLAN_TPIDS)
        if not tagged.any():
            break
        t = np.nonzero(tagged)[0]
        fits = cap[t] >= hdr[t] + VLAN_TAG.size
        short = t[~fits]
        if len(short):
            drops.add("truncated-headers", len(short))
            ok[short] = False
            et[short] = 0
        t = t[fits]
        et[t] = be16(data, off[t] + hdr[t] + VLAN_TAG.offset("ethertype"))
        hdr[t] += VLAN_TAG.size
    return off + hdr, _classify_ethertype(et, ok, drops)


def _link_sll(data, off, cap, drops):
    ok = cap >= SLL.size
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    et = np.where(ok, be16(data, np.where(ok, off + SLL.offset("protocol"), 0)), 0)
    return off + SLL.size, _classify_ethertype(et, ok, drops)


def _link_sll2(data, off, cap, drops):
    ok = cap >= SLL2.size
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    et = np.where(ok, be16(data, np.where(ok, off + SLL2.offset("protocol"), 0)), 0)
    return off + SLL2.size, _classify_ethertype(et, ok, drops)


def _link_raw(data, off, cap, drops):
    ok = cap >= 1
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    nib = np.where(ok, data[np.where(ok, off, 0)] >> 4, 0)
    ver = np.where(nib == 4, 4, np.where(nib == 6, 6, 0)).astype(np.int8)
    drops.add("not-ip", int((ok & (ver == 0)).sum()))
    ver[~ok] = 0
    return off, ver


def _link_fixed(v):
    def f(data, off, cap, drops):
        return off, np.full(len(off), v, dtype=np.int8)
    return f


def _family(fam: np.ndarray, ok: np.ndarray, drops: Drops) -> np.ndarray:
    ver = np.where(fam == 2, 4, np.where((fam == 24) | (fam == 28) | (fam == 30), 6, 0))
    ver = ver.astype(np.int8)
    ver[~ok] = 0
    drops.add("not-ip", int((ok & (ver == 0)).sum()))
    return ver


def _link_null(data, off, cap, drops):
    ok = cap >= LOOPBACK.size
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    b = gather(data, np.where(ok, off, 0), LOOPBACK.size).astype(np.int64)
    le = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
    be = b[:, 3] | (b[:, 2] << 8) | (b[:, 1] << 16) | (b[:, 0] << 24)
    fam = np.where(le <= 0xFFFF, le, be)  # written in the capturing host's byte order
    return off + LOOPBACK.size, _family(fam, ok, drops)


def _link_loop(data, off, cap, drops):
    ok = cap >= LOOPBACK.size
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    b = gather(data, np.where(ok, off, 0), LOOPBACK.size).astype(np.int64)
    fam = b[:, 3] | (b[:, 2] << 8) | (b[:, 1] << 16) | (b[:, 0] << 24)
    return off + LOOPBACK.size, _family(fam, ok, drops)


def _le16(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    return data[at].astype(np.int64) | (data[at + 1].astype(np.int64) << 8)


def _le32(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    return _le16(data, at) | (_le16(data, at + 2) << 16)


def _short(ok: np.ndarray, drops: Drops) -> np.ndarray:
    drops.add("truncated-headers", len(ok) - int(ok.sum()))
    return ok


def _ppp_protocol(data, at, ok, drops):
    """IP version of the PPP protocol field at `at` (2 bytes; 1 if compressed): 0x21 IPv4,
    0x57 IPv6; and the field's length."""
    first = data[np.where(ok, at, 0)].astype(np.int64)
    compressed = (first & 1) == 1
    proto = np.where(compressed, first, be16(data, np.where(ok, at, 0)))
    ver = np.where(proto == 0x21, 4, np.where(proto == 0x57, 6, 0)).astype(np.int8)
    ver[~ok] = 0
    drops.add("not-ip", int((ok & (ver == 0)).sum()))
    return ver, np.where(compressed, 1, 2)


def _link_ppp(data, off, cap, drops):
    """PPP (9): the PPP header, after 0xFF 0x03 (address, control) when HDLC-framed."""
    ok = _short(cap >= 2, drops)
    at = np.where(ok, off, 0)
    framed = ok & (data[at] == 0xFF) & (data[at + 1] == 0x03)
    hdr = np.where(framed, 2, 0)
    ok &= _short(~ok | (cap >= hdr + 2), drops)
    ver, plen = _ppp_protocol(data, off + hdr, ok, drops)
    return off + hdr + plen, ver


def _link_ppp_hdlc(data, off, cap, drops):
    """PPP in HDLC framing (50): address, control, then a PPP protocol, or with Cisco's
    address 0x0F / 0x8F an Ethertype."""
    ok = _short(cap >= HDLC.size, drops)
    at = np.where(ok, off, 0)
    cisco = ok & ((data[at] == 0x0F) | (data[at] == 0x8F))
    proto = HDLC.offset("protocol")
    ver, _ = _ppp_protocol(data, off + proto, ok & ~cisco, Drops(collections.Counter()))
    et = be16(data, at + proto)
    ver = np.where(cisco, np.where(et == ETH_IPV4, 4, np.where(et == ETH_IPV6, 6, 0)), ver)
    ver = ver.astype(np.int8)
    ver[~ok] = 0
    drops.add("not-ip", int((ok & (ver == 0)).sum()))
    return off + HDLC.size, ver


def _link_c_hdlc(data, off, cap, drops):
    """Cisco HDLC (104): address, control, Ethertype."""
    ok = _short(cap >= HDLC.size, drops)
    et = np.where(ok, be16(data, np.where(ok, off + HDLC.offset("protocol"), 0)), 0)
    return off + HDLC.size, _classify_ethertype(et, ok, drops)


NFLOG_PAYLOAD = 9


def _link_nflog(data, off, cap, drops):
    """NFLOG (239): a 4-byte header, then TLVs (length and type in the capturing host's byte
    order: little-endian here), padded to 4 bytes; the packet is the NFULA_PAYLOAD value."""
    n = len(off)
    l3 = np.zeros(n, np.int64)
    found = np.zeros(n, bool)
    ok = _short(cap >= NFLOG.size, drops)
    end = off + cap
    pos = off + NFLOG.size
    live = np.flatnonzero(ok)
    tlv = NFLOG_TLV.size
    for _ in range(MAX_NFLOG_TLVS):
        live = live[pos[live] + tlv <= end[live]]
        if not len(live):
            break
        p = pos[live]
        ln = _le16(data, p + NFLOG_TLV.offset("length"))
        typ = _le16(data, p + NFLOG_TLV.offset("type")) & 0x7FFF
        hit = (typ == NFLOG_PAYLOAD) & (ln > tlv) & (p + ln <= end[live])
        l3[live[hit]] = p[hit] + tlv
        found[live[hit]] = True
        go = ~hit & (ln >= tlv)
        live = live[go]
        pos[live] = p[go] + ((ln[go] + 3) & ~3)
    drops.add("not-ip", int((ok & ~found).sum()))
    first = data[np.where(found, l3, 0)] >> 4
    ver = np.where(found & (first == 4), 4, np.where(found & (first == 6), 6, 0)).astype(np.int8)
    drops.add("not-ip", int((found & (ver == 0)).sum()))
    return l3, ver


_WRAPPERS = frozenset({258, 149, 127, 192, 119})


def _inner(data, off, cap, inner_lt, ok, drops):
    """The link layer under a capture header (PKTAP, radiotap, PPI, Prism): rows grouped by
    the link type the header names."""
    n = len(off)
    l3 = np.zeros(n, np.int64)
    ver = np.zeros(n, np.int8)
    for lt in np.unique(inner_lt[ok]).tolist():
        rows = np.flatnonzero(ok & (inner_lt == lt))
        res = None if lt in _WRAPPERS else _LINK.get(int(lt))
        if res is None:
            drops.add("unsupported-link-type", len(rows))
            continue
        l3[rows], ver[rows] = res(data, off[rows], cap[rows], drops)
    return l3, ver


def _link_pktap(data, off, cap, drops):
    """PKTAP (258; 149 as macOS writes it): a header of its own length, record type and
    link type of the packet after it (little-endian), then that packet."""
    ok = _short(cap >= PKTAP.size, drops)
    at = np.where(ok, off, 0)
    hl, dlt = _le32(data, at + PKTAP.offset("length")), _le32(data, at + PKTAP.offset("dlt"))
    ok &= _short(~ok | ((hl >= PKTAP.size) & (hl <= cap)), drops)
    return _inner(data, off + hl, cap - hl, dlt, ok, drops)


def _link_radiotap(data, off, cap, drops):
    """802.11 with a radiotap header (127): its length is at byte 2 (little-endian)."""
    at = RADIOTAP.offset("length")
    ok = _short(cap >= at + 2, drops)
    hl = _le16(data, np.where(ok, off, 0) + at)
    ok &= _short(~ok | ((hl >= RADIOTAP.size) & (hl <= cap)), drops)
    return _inner(data, off + hl, cap - hl, np.full(len(off), 105), ok, drops)


def _link_ppi(data, off, cap, drops):
    """PPI (192): length (2 bytes at 2) and link type (4 bytes at 4), little-endian."""
    ok = _short(cap >= PPI.size, drops)
    at = np.where(ok, off, 0)
    hl, dlt = _le16(data, at + PPI.offset("length")), _le32(data, at + PPI.offset("dlt"))
    ok &= _short(~ok | ((hl >= PPI.size) & (hl <= cap)), drops)
    return _inner(data, off + hl, cap - hl, dlt, ok, drops)


def _link_prism(data, off, cap, drops):
    """802.11 with a Prism monitor header (119): its length at byte 4 (host byte order,
    little-endian here), or an AVS header (magic 0x8021100x, big-endian length)."""
    ok = _short(cap >= PRISM.size, drops)
    at = np.where(ok, off, 0)
    ln = at + PRISM.offset("length")
    avs = (be16(data, at) == 0x8021) & ((be16(data, at + 2) & 0xFFF0) == 0x1000)
    hl = np.where(avs, (be16(data, ln) << 16) | be16(data, ln + 2), _le32(data, ln))
    ok &= _short(~ok | ((hl >= PRISM.size) & (hl <= cap)), drops)
    return _inner(data, off + hl, cap - hl, np.full(len(off), 105), ok, drops)


def _link_80211(data, off, cap, drops):
    """IEEE 802.11 data frames (105) carrying LLC/SNAP: the MAC header (24 bytes, +6 with
    four addresses, +2 QoS, +4 HT control), then AA AA 03 00 00 00 and an Ethertype.
    Protected (encrypted) frames are skipped as `encrypted`, others as not-ip."""
    ok = _short(cap >= WLAN.size, drops)
    at = np.where(ok, off, 0)
    fc0, fc1 = data[at].astype(np.int64), data[at + 1].astype(np.int64)
    data_frame = ok & (((fc0 >> 2) & 3) == 2) & (((fc0 >> 4) & 4) == 0)  # data, not null
    qos = ((fc0 >> 4) & 8) != 0
    hdr = WLAN.size + np.where((fc1 & 3) == 3, 6, 0) + np.where(qos, 2, 0) \
        + np.where(qos & ((fc1 & 0x80) != 0), 4, 0)
    protected = data_frame & ((fc1 & 0x40) != 0)
    drops.add("encrypted", int(protected.sum()))
    drops.add("not-ip", int((ok & ~data_frame).sum()))
    ok = data_frame & ~protected
    fits = cap >= hdr + LLC_SNAP.size
    drops.add("truncated-headers", int((ok & ~fits).sum()))
    ok &= fits
    s = np.where(ok, off + hdr, 0)
    snap = (data[s] == 0xAA) & (data[s + 1] == 0xAA) & (data[s + 2] == 0x03) \
        & (data[s + 3] == 0) & (data[s + 4] == 0) & (data[s + 5] == 0)
    drops.add("not-ip", int((ok & ~snap).sum()))
    ok &= snap
    et = np.where(ok, be16(data, s + LLC_SNAP.offset("ethertype")), 0)
    return off + hdr + LLC_SNAP.size, _classify_ethertype(et, ok, drops)


_LINK = {
    1: _link_en10mb, 113: _link_sll, 276: _link_sll2, 12: _link_raw, 101: _link_raw,
    228: _link_fixed(4), 229: _link_fixed(6), 0: _link_null, 108: _link_loop,
    9: _link_ppp, 50: _link_ppp_hdlc, 104: _link_c_hdlc, 239: _link_nflog,
    258: _link_pktap, 149: _link_pktap, 105: _link_80211, 127: _link_radiotap,
    192: _link_ppi, 119: _link_prism,
}
MAX_NFLOG_TLVS = 32
