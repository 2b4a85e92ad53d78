"""Stage 2: decode the TCP/IP headers of a `RecordBatch` into columns.

All per-packet work is numpy gathers over the batch's bytes: rows are grouped by link type,
the network-layer offset is computed vectorised, then each header is gathered as a 2-D
(rows x header bytes) block and read through big-endian views.  Only rare packets go through
a Python loop: IPv6 packets with extension headers and packets whose TCP options are not in
the usual "NOP NOP timestamp" layout (SYNs, mostly).

Payload length always comes from the IP lengths, never from the captured length, so
snaplen-truncated captures (`tcpdump -s 96`) decode fully.
"""

from __future__ import annotations

import collections
import ipaddress

import numpy as np

from . import encap
from .columns import Columns
from .layouts import IPV4, IPV6, TCP
from .links import Drops, gather, link_layer
from .read import RecordBatch

try:
    from . import _decode as _compiled
except ImportError:  # built without a C compiler: the numpy decoder does everything
    _compiled = None

TCP_COLUMNS: dict[str, np.dtype] = {
    "frame": np.dtype(np.int64),
    "ts_ns": np.dtype(np.int64),
    "ipver": np.dtype(np.uint8),
    "src_hi": np.dtype(np.uint64),
    "src_lo": np.dtype(np.uint64),
    "dst_hi": np.dtype(np.uint64),
    "dst_lo": np.dtype(np.uint64),
    "sport": np.dtype(np.uint16),
    "dport": np.dtype(np.uint16),
    "seq": np.dtype(np.uint32),
    "ack": np.dtype(np.uint32),
    "flags": np.dtype(np.uint16),
    "window": np.dtype(np.uint16),
    "payload": np.dtype(np.int32),
    "mss": np.dtype(np.int32),
    "wscale": np.dtype(np.int16),
    "sack_ok": np.dtype(np.uint8),
    "tsval": np.dtype(np.uint32),
    "has_ts": np.dtype(np.uint8),
    "ipid": np.dtype(np.uint16),  # IPv4 identification (0 for IPv6): tells copies from resends
    "tunnel": np.dtype(np.uint32),  # 0, or the number of the tunnel it came through (encap.py)
}
# the columns the compiled loop writes (the batch gives frame and ts_ns, the peeler tunnel),
# in TCP_COLUMNS order: the order its buffers are passed in (nagleprobe/_columns.h)
COMPILED_COLUMNS = tuple(k for k in TCP_COLUMNS if k not in ("frame", "ts_ns", "tunnel"))

FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, NS = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x100
# as Wireshark names the bits, lowest first (NS is AE, AccECN, today)
TCP_FLAG_NAMES = ("FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "AE")
V6_EXT = (0, 43, 60, 44, 51)
V4_MAPPED = 0x0000FFFF00000000
# An IP length of 0 (TSO/GSO super-frames, IPv6 jumbograms) is taken from the record's wire
# length; beyond this it is a corrupt record, not a real segment (Linux BIG TCP stops at 512 KiB).
MAX_LENGTH_FROM_WIRE = 1 << 24
# the fields the numpy decoder reads (nagleprobe/layouts.py), as indexes into the views of
# its gathered headers: bytes, then big-endian 16-, 32- and 64-bit words
V4_VERSION_IHL, V4_PROTOCOL = IPV4.offset("version_ihl"), IPV4.offset("protocol")
V4_LENGTH, V4_ID, V4_FRAGMENT = (IPV4.word(f, 2) for f in ("total_length", "id", "fragment"))
V4_SRC, V4_DST = IPV4.word("src", 4), IPV4.word("dst", 4)
V6_PAYLOAD_LENGTH, V6_NEXT_HEADER = IPV6.word("payload_length", 2), IPV6.offset("next_header")
V6_SRC, V6_DST = IPV6.word("src", 8), IPV6.word("dst", 8)  # each two words: high, low
TCP_SPORT, TCP_DPORT, TCP_WINDOW = (TCP.word(f, 2) for f in ("sport", "dport", "window"))
TCP_SEQ, TCP_ACK = TCP.word("seq", 4), TCP.word("ack", 4)
TCP_OFFSET = TCP.offset("offset_flags")  # data offset (high nibble), NS; the flags after


def format_address(ipver: int, hi: int, lo: int) -> str:
    """'10.0.0.1' or '2001:db8::1' from the decoder's split 128-bit address."""
    hi, lo = int(hi), int(lo)
    if int(ipver) == 4:
        return str(ipaddress.IPv4Address(lo & 0xFFFFFFFF))
    return str(ipaddress.IPv6Address((hi << 64) | lo))


# ---------------------------------------------------------------------- network layer
def _ipv4(data, batch, rows, l3, drops):
    """-> rows, l4, avail (bytes after the IP header per IP lengths), src_lo, dst_lo, ipid."""
    end = batch.offset[rows] + batch.caplen[rows]
    fits = l3 + IPV4.size <= end
    if not fits.all():
        drops.add("truncated-headers", len(fits) - int(fits.sum()))
        rows, l3, end = rows[fits], l3[fits], end[fits]
    h = gather(data, l3, IPV4.size)
    ihl = (h[:, V4_VERSION_IHL] & 0x0F).astype(np.int64) * 4
    good = ((h[:, V4_VERSION_IHL] >> 4) == 4) & (ihl >= IPV4.size)
    h16 = h.view(">u2")
    h32 = h.view(">u4")
    tot = h16[:, V4_LENGTH].astype(np.int64)
    notcp = h[:, V4_PROTOCOL] != 6
    frag = (h16[:, V4_FRAGMENT] & 0x3FFF) != 0
    tso = tot == 0
    if tso.any():
        wire = batch.wirelen[rows]
        tot = np.where(tso, wire - (l3 - batch.offset[rows]), tot)
        good &= ~(tso & (tot > MAX_LENGTH_FROM_WIRE))
    # order of reasons: bad version/ihl, truncated options, not tcp, fragment, bad lengths
    bad1 = ~good
    trunc = good & (l3 + ihl > end)
    ok = good & ~trunc
    nt = ok & notcp
    ok &= ~notcp
    fr = ok & frag
    ok &= ~frag
    bad2 = ok & (tot < ihl + TCP.size)
    ok &= ~bad2
    if not ok.all():
        drops.add("bad-header", int(bad1.sum()) + int(bad2.sum()))
        drops.add("truncated-headers", int(trunc.sum()))
        drops.add("not-tcp", int(nt.sum()))
        drops.add("ip-fragment", int(fr.sum()))
        sel = np.nonzero(ok)[0]
        rows, l3, ihl, tot, h16, h32 = rows[sel], l3[sel], ihl[sel], tot[sel], h16[sel], h32[sel]
    src = h32[:, V4_SRC].astype(np.uint64) | np.uint64(V4_MAPPED)
    dst = h32[:, V4_DST].astype(np.uint64) | np.uint64(V4_MAPPED)
    return rows, l3 + ihl, tot - ihl, src, dst, h16[:, V4_ID].astype(np.uint16)


def _ipv6(data, batch, rows, l3, drops):
    """-> rows, l4, avail, src_hi, src_lo, dst_hi, dst_lo."""
    end = batch.offset[rows] + batch.caplen[rows]
    fits = l3 + IPV6.size <= end
    if not fits.all():
        drops.add("truncated-headers", len(fits) - int(fits.sum()))
        rows, l3, end = rows[fits], l3[fits], end[fits]
    h = gather(data, l3, IPV6.size)
    good = (h[:, 0] >> 4) == 6
    plen = h.view(">u2")[:, V6_PAYLOAD_LENGTH].astype(np.int64)
    nh = h[:, V6_NEXT_HEADER]
    jumbo = plen == 0
    if jumbo.any():
        plen = np.where(jumbo, batch.wirelen[rows] - (l3 - batch.offset[rows]) - IPV6.size,
                        plen)
        good &= ~(jumbo & (plen > MAX_LENGTH_FROM_WIRE))
    l4 = l3 + IPV6.size
    avail = plen.copy()
    ext = good & np.isin(nh, V6_EXT)
    tcp = good & (nh == 6)
    ok = tcp.copy()
    drops.add("bad-header", int((~good).sum()))
    if ext.any():
        for i in np.nonzero(ext)[0]:
            res = _walk_v6_ext(data, int(l3[i]), int(end[i]), int(nh[i]))
            if isinstance(res, str):
                drops.add(res, 1)
            else:
                ok[i] = True
                l4[i] = l3[i] + IPV6.size + res
                avail[i] = plen[i] - res
    drops.add("not-tcp", int((good & ~tcp & ~ext).sum()))
    h64 = h.view(">u8")
    if not ok.all():
        sel = np.nonzero(ok)[0]
        rows, l4, avail, h64 = rows[sel], l4[sel], avail[sel], h64[sel]
    h64 = h64.astype(np.uint64)
    return rows, l4, avail, h64[:, V6_SRC], h64[:, V6_SRC + 1], h64[:, V6_DST], h64[:, V6_DST + 1]


def _walk_v6_ext(data: np.ndarray, l3: int, end: int, nh: int) -> int | str:
    """Length of the extension headers before TCP, or a skip reason."""
    b = data[l3 + IPV6.size:end].tobytes()
    p = 0
    while nh in V6_EXT:
        if p + 8 > len(b):
            return "truncated-headers"
        if nh == 44:
            fo = (b[p + 2] << 8) | b[p + 3]
            if fo & 0xFFF9:  # offset != 0 or M set
                return "ip-fragment"
            ln = 8
        elif nh == 51:
            ln = (b[p + 1] + 2) * 4
        else:
            ln = (b[p + 1] + 1) * 8
        nh = b[p]
        p += ln
    if nh != 6:
        return "not-tcp"
    return p


# ---------------------------------------------------------------------- transport layer
def _tcp_options_rows(data: np.ndarray, at: np.ndarray, length: np.ndarray
                      ) -> tuple[np.ndarray, ...]:
    """TCP options of many packets at once: (mss, wscale, sack_ok, tsval, has_ts) arrays from
    the `length` option bytes at each offset `at` (the last of a kind wins; parsing stops at
    end-of-list or a malformed option). Every packet's parser state (its
    position in its options) advances one option per step, in lockstep; at most 40 steps."""
    m = len(at)
    width = 40
    cols = np.minimum(at[:, None] + np.arange(width), len(data) - 1)
    opts = data[cols].astype(np.int64)
    mss = np.full(m, -1, np.int64)
    ws = np.full(m, -1, np.int64)
    sack = np.zeros(m, np.int64)
    tsval = np.zeros(m, np.int64)
    has_ts = np.zeros(m, np.int64)
    n = np.minimum(length.astype(np.int64), width)
    live = np.flatnonzero(n > 0)
    pos = np.zeros(m, np.int64)
    while len(live):
        p, r = pos[live], live
        kind = opts[r, p]
        nop = kind == 1
        pos[r[nop]] += 1
        opt = (kind != 0) & ~nop & (p + 1 < n[r])
        r, p, kind = r[opt], p[opt], kind[opt]
        ln = opts[r, np.minimum(p + 1, width - 1)]
        ok = (ln >= 2) & (p + ln <= n[r])
        r, p, kind, ln = r[ok], p[ok], kind[ok], ln[ok]
        at_ = lambda k: opts[r, np.minimum(p + k, width - 1)]  # noqa: E731
        sel = (kind == 2) & (ln == 4)
        mss[r[sel]] = (at_(2)[sel] << 8) | at_(3)[sel]
        sel = (kind == 3) & (ln == 3)
        ws[r[sel]] = at_(2)[sel]
        sack[r[(kind == 4) & (ln == 2)]] = 1
        sel = (kind == 8) & (ln == 10)
        tsval[r[sel]] = ((at_(2)[sel] << 24) | (at_(3)[sel] << 16) | (at_(4)[sel] << 8)
                         | at_(5)[sel])
        has_ts[r[sel]] = 1
        pos[r] += ln
        nxt = np.concatenate([live[nop], r])
        live = np.sort(nxt[pos[nxt] < n[nxt]])
    return mss, ws, sack, tsval, has_ts


def _without_empty(batch: RecordBatch, skipped: collections.Counter) -> RecordBatch:
    """The batch less its records of no captured bytes (caplen 0, a plausible header
    otherwise: zeroed pages, broken writers), counted as `empty-record` rather than lumped
    with packets cut by the snap length."""
    empty = batch.caplen == 0
    if not empty.any():
        return batch
    skipped["empty-record"] += int(empty.sum())
    keep = np.flatnonzero(~empty)
    return RecordBatch(data=batch.data, offset=batch.offset[keep], caplen=batch.caplen[keep],
                       wirelen=batch.wirelen[keep], ts_ns=batch.ts_ns[keep],
                       linktype=batch.linktype[keep], frame=batch.frame[keep],
                       start=None if batch.start is None else batch.start[keep],
                       tunnels=batch.tunnels)


def decode(batch: RecordBatch, skipped: collections.Counter) -> Columns:
    """Columnar TCP headers of the batch's TCP packets; everything else counted in `skipped`.

    Records in the usual shapes are decoded by the compiled loop (nagleprobe/_decode.c) when
    it is built; the rest, and everything without it, by the numpy decoder below; records
    carrying a tunnel are peeled (encap.py) and their inner packets decoded, the tunnel's
    number (in the capture's `batch.tunnels`) in the `tunnel` column."""
    batch = _without_empty(batch, skipped)
    if _compiled is None or len(batch.offset) == 0:
        return _decode_rest(batch, skipped, compiled=False)
    n = len(batch.offset)
    out = {k: np.empty(n, dtype=TCP_COLUMNS[k]) for k in _compiled.COMPILED_COLUMNS}
    slow = np.empty(n, np.int64)
    k, s = _compiled.decode(batch.data, np.ascontiguousarray(batch.offset, np.int64),
                            np.ascontiguousarray(batch.caplen, np.int64),
                            np.ascontiguousarray(batch.linktype, np.int32), slow,
                            *out.values())
    if k == n:  # every record decoded: no row selection needed
        return Columns({"frame": batch.frame, "ts_ns": batch.ts_ns, **out,
                        "tunnel": np.zeros(n, np.uint32)})
    slow = slow[:s]
    row = np.delete(np.arange(n), slow)  # the records decoded, in order
    cols = Columns({"frame": batch.frame[row], "ts_ns": batch.ts_ns[row],
                    **{c: v[:k] for c, v in out.items()}, "tunnel": np.zeros(k, np.uint32)})
    if not s:
        return cols
    rest = _decode_rest(batch if s == n else batch.rows(slow), skipped)
    if not len(rest["frame"]) or not k:  # one of the two parts is empty: nothing to merge
        return rest if not k else cols
    order = np.argsort(np.concatenate([row, np.searchsorted(batch.frame, rest["frame"])]),
                       kind="stable")
    return Columns.concat([cols, rest]).take(order)


def _decode_rest(batch: RecordBatch, skipped: collections.Counter, compiled: bool = True
                 ) -> Columns:
    """The numpy decoder for records outside the compiled loop's shapes; those it cannot
    read are tried as tunnels (with the compiled peeler and decoder for the inner packets
    unless not `compiled`)."""
    if not len(batch.offset):
        return Columns.empty(TCP_COLUMNS)
    if compiled:  # peel first: tunnels are never plain TCP, so the rest is decoded once
        undecoded = np.arange(len(batch.offset))
        status, inner, kind, key = encap.peel(batch.data, batch.offset, batch.caplen,
                                              batch.linktype)
        tun = status != encap.NOT_TUNNEL
        if not tun.any():
            return _decode_plain(batch, skipped)
        plain = _decode_plain(batch.rows(np.flatnonzero(~tun)), skipped)
    else:  # peeling is per packet here: only what the numpy decoder could not read
        trial: collections.Counter = collections.Counter()
        plain = _decode_plain(batch, trial)
        undecoded = np.flatnonzero(~np.isin(batch.frame, plain["frame"]))
        status, inner, kind, key = encap.peel_numpy(
            batch.data, batch.offset[undecoded], batch.caplen[undecoded],
            batch.linktype[undecoded])
        tun = status != encap.NOT_TUNNEL
        if not tun.any():
            skipped.update(trial)
            return plain
        # the numpy decoder's reasons for the records that are not tunnels
        _decode_plain(batch.rows(undecoded[~tun]), skipped)
    peeled = status == encap.PEELED
    if not peeled.all():
        for st, reason in encap.REASONS.items():
            n_st = int(np.count_nonzero(status == st))
            if n_st:
                skipped[reason] += n_st
    if len(peeled) == len(batch.offset) and peeled.all():  # all tunnelled: no row selection
        ok = rows = slice(None)
        sub = batch.rows(rows)
    else:
        ok = np.flatnonzero(peeled)
        if not len(ok):
            return plain
        rows = undecoded[ok]
        sub = batch.rows(rows)
    at = inner[ok]
    sub.offset = sub.offset + at
    sub.caplen = sub.caplen - at
    sub.wirelen = sub.wirelen - at
    sub.linktype = kind[ok].astype(np.int32)
    # inner packets: no further tunnels (peeled to the last)
    cols = decode(sub, skipped) if compiled else _decode_plain(sub, skipped)
    if len(cols["frame"]):
        tunnels = batch.tunnels if batch.tunnels is not None else encap.Tunnels()
        got = (slice(None) if len(cols["frame"]) == len(sub.frame)
               else np.searchsorted(sub.frame, cols["frame"]))
        cols["tunnel"] = tunnels.numbers(key[ok][got], batch.data, batch.offset[rows][got],
                                         batch.caplen[rows][got], batch.linktype[rows][got])
    if not len(plain["frame"]):
        return cols
    order = np.argsort(np.concatenate([plain["frame"], cols["frame"]]), kind="stable")
    return Columns.concat([plain, cols]).take(order)


def decode_numpy(batch: RecordBatch, skipped: collections.Counter) -> Columns:
    """`decode` without compiled code: every record shape, and the reference for the
    compiled loops."""
    return _decode_rest(_without_empty(batch, skipped), skipped, compiled=False)


def _decode_plain(batch: RecordBatch, skipped: collections.Counter) -> Columns:
    """The numpy decoder of records without tunnels."""
    n = len(batch.offset)
    if n == 0:
        return Columns.empty(TCP_COLUMNS)
    drops = Drops(skipped)
    data = batch.data
    l3, ver = link_layer(batch, drops)

    r4 = np.nonzero(ver == 4)[0]
    r6 = np.nonzero(ver == 6)[0]
    if len(r6) == 0:
        rows, l4, avail, slo, dlo, ipid = _ipv4(data, batch, r4, l3[r4], drops)
        shi = dhi = np.zeros(len(rows), np.uint64)
        ipver = np.full(len(rows), 4, np.uint8)
    else:
        a = _ipv4(data, batch, r4, l3[r4], drops)
        b = _ipv6(data, batch, r6, l3[r6], drops)
        rows = np.concatenate([a[0], b[0]])
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        l4 = np.concatenate([a[1], b[1]])[order]
        avail = np.concatenate([a[2], b[2]])[order]
        z = np.zeros(len(a[0]), np.uint64)
        shi = np.concatenate([z, b[3]])[order]
        slo = np.concatenate([a[3], b[4]])[order]
        dhi = np.concatenate([z, b[5]])[order]
        dlo = np.concatenate([a[4], b[6]])[order]
        ipver = np.concatenate([np.full(len(a[0]), 4, np.uint8),
                                np.full(len(b[0]), 6, np.uint8)])[order]
        ipid = np.concatenate([a[5], np.zeros(len(b[0]), np.uint16)])[order]

    # TCP fixed header
    end = batch.offset[rows] + batch.caplen[rows]
    fits = l4 + TCP.size <= end
    if not fits.all():
        drops.add("truncated-headers", len(fits) - int(fits.sum()))
        sel = np.nonzero(fits)[0]
        rows, l4, avail, end = rows[sel], l4[sel], avail[sel], end[sel]
        shi, slo, dhi, dlo, ipver = shi[sel], slo[sel], dhi[sel], dlo[sel], ipver[sel]
        ipid = ipid[sel]
    t = gather(data, l4, TCP.size)
    doff = (t[:, TCP_OFFSET] >> 4).astype(np.int64) * 4
    beyond = l4 + doff > end
    # a header longer than the IP length is bad, or truncated when also cut short (as before)
    trunc = (doff >= TCP.size) & beyond & (doff > avail)
    drops.add("truncated-headers", int(trunc.sum()))
    bad = (doff < TCP.size) | (doff > avail)
    if bad.any():
        drops.add("bad-header", int((bad & ~trunc).sum()))
        sel = np.nonzero(~bad)[0]
        rows, l4, avail, t, doff, end = rows[sel], l4[sel], avail[sel], t[sel], doff[sel], end[sel]
        shi, slo, dhi, dlo, ipver = shi[sel], slo[sel], dhi[sel], dlo[sel], ipver[sel]
        ipid = ipid[sel]
    # options cut by the snap length (-s 64): the 20-byte header is whole, so the packet is
    # kept, its options unknown (counted as options-cut; the MSS is then inferred). Options
    # read up to the cut would mislead: a cut timestamp option changes the MSS in use, a cut
    # window scale the window.
    cut = l4 + doff > end
    drops.add("options-cut", int(np.count_nonzero(cut)))
    olen = np.where(cut, TCP.size, doff)  # header bytes whose options are read
    m = len(rows)
    t16 = t.view(">u2")
    t32 = t.view(">u4")
    flags = ((t[:, TCP_OFFSET].astype(np.uint16) & 1) << 8) | t[:, TCP_OFFSET + 1]

    # TCP options
    mss = np.full(m, -1, np.int32)
    wscale = np.full(m, -1, np.int16)
    sack_ok = np.zeros(m, np.uint8)
    tsval = np.zeros(m, np.uint32)
    has_ts = np.zeros(m, np.uint8)
    withopt = np.nonzero(olen > TCP.size)[0]
    if len(withopt):
        slow = np.zeros(m, bool)
        slow[withopt] = True
        big = withopt[olen[withopt] >= TCP.size + 12]
        if len(big):
            o = gather(data, l4[big] + TCP.size, 12)
            nopnop = (o[:, 0] == 1) & (o[:, 1] == 1) & (o[:, 2] == 8) & (o[:, 3] == 10)
            first = (o[:, 0] == 8) & (o[:, 1] == 10)
            at4 = np.ascontiguousarray(o[:, 4:8]).view(">u4")[:, 0]  # NOP NOP TS
            at2 = np.ascontiguousarray(o[:, 2:6]).view(">u4")[:, 0]  # TS first
            hit = nopnop | first
            hv = np.where(nopnop, at4, at2)
            tsval[big[hit]] = hv[hit]
            has_ts[big[hit]] = 1
            slow[big[hit]] = False
        slow |= (flags & SYN) != 0
        slow &= olen > TCP.size
        rest = np.nonzero(slow)[0]
        if len(rest):
            got = _tcp_options_rows(data, l4[rest] + TCP.size, olen[rest] - TCP.size)
            for col, vals in zip((mss, wscale, sack_ok, tsval, has_ts), got):
                col[rest] = vals

    return Columns({
        "frame": batch.frame[rows],
        "ts_ns": batch.ts_ns[rows],
        "ipver": ipver,
        "src_hi": shi,
        "src_lo": slo,
        "dst_hi": dhi,
        "dst_lo": dlo,
        "sport": t16[:, TCP_SPORT].astype(np.uint16),
        "dport": t16[:, TCP_DPORT].astype(np.uint16),
        "seq": t32[:, TCP_SEQ].astype(np.uint32),
        "ack": t32[:, TCP_ACK].astype(np.uint32),
        "flags": flags.astype(np.uint16),
        "window": t16[:, TCP_WINDOW].astype(np.uint16),
        "payload": (avail - doff).astype(np.int32),
        "mss": mss,
        "wscale": wscale,
        "sack_ok": sack_ok,
        "tsval": tsval,
        "has_ts": has_ts,
        "ipid": ipid,
        "tunnel": np.zeros(len(rows), np.uint32),
    })
