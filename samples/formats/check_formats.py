#!/usr/bin/env python3
"""Cross-check the fixtures in samples/formats/ without nagleprobe.

Reads every file with scapy's raw readers (pcap either byte order / ns, pcapng with per-interface
link type and if_tsresol, SPB, gzip), strips the link header itself, decodes IP/TCP with dpkt and
compares (time, ports, flags, seq, ack, payload length from the IP header) with base_lo.pcap /
base_lo6.pcap after the transformation each file claims.  Exit status 1 on any mismatch.

    python3 samples/formats/check_formats.py
"""
import os
import struct
import sys

from scapy.utils import RawPcapNgReader, RawPcapReader

HERE = os.path.dirname(os.path.abspath(__file__))


def records(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x1f\x8b\x08\x00" or head[:2] == b"\x1f\x8b":
        import gzip
        with gzip.open(path, "rb") as g:
            head = g.read(4)
    ng = head == b"\x0a\x0d\x0d\x0a"
    r = RawPcapNgReader(path) if ng else RawPcapReader(path)
    last_ts = None
    for data, m in r:
        if ng:
            if m.tshigh is None:  # SPB: no timestamp
                ts, lt = last_ts, m.linktype
            else:
                ts = ((m.tshigh << 32) | m.tslow) * 10**9 // m.tsresol
                lt = m.linktype
        else:
            frac = 1 if r.nano else 1000
            ts, lt = m.sec * 10**9 + m.usec * frac, r.linktype
        last_ts = ts
        yield ts, lt, data, m.wirelen


def strip_link(lt, d):
    if lt == 1:
        et, o = struct.unpack("!H", d[12:14])[0], 14
        while et in (0x8100, 0x88A8):
            et, o = struct.unpack("!H", d[o + 2:o + 4])[0], o + 4
        return d[o:], ("vlan" if o > 14 else "eth", o)
    if lt == 113:
        return d[16:], ("sll", 16)
    if lt == 276:
        return d[20:], ("sll2", 20)
    if lt in (12, 101, 228, 229):
        return d, ("raw", 0)
    if lt == 0:
        assert struct.unpack("<I", d[:4])[0] == 2, d[:4]
        return d[4:], ("null", 4)
    if lt == 108:
        assert struct.unpack(">I", d[:4])[0] == 2, d[:4]
        return d[4:], ("loop", 4)
    raise ValueError(lt)


def tcp_rows(path):
    rows = []
    t0 = None
    for ts, lt, d, wirelen in records(path):
        ipb, _ = strip_link(lt, d)
        v = ipb[0] >> 4
        if v == 4:
            ihl = (ipb[0] & 15) * 4
            tot = struct.unpack("!H", ipb[2:4])[0]
            assert ipb[9] == 6
            t, iplen = ihl, tot - ihl
        else:
            plen = struct.unpack("!H", ipb[4:6])[0]
            nh, t = ipb[6], 40
            while nh in (0, 60, 43):
                nh, t = ipb[t], t + (ipb[t + 1] + 1) * 8
            assert nh == 6
            iplen = plen - (t - 40)
        sp, dp, seq, ack, off, fl = struct.unpack("!HHIIBB", ipb[t:t + 14])
        paylen = iplen - (off >> 4) * 4
        t0 = ts if t0 is None else t0
        rows.append(((ts - t0) // 1000, sp, dp, fl, seq, ack, paylen))
    return rows


def main():
    ok = True

    def check(name, got, want, what=""):
        nonlocal ok
        if got != want:
            ok = False
            print(f"FAIL {name} {what}")
            for a, b in zip(got, want):
                if a != b:
                    print("   got", a, "want", b)
                    break
            if len(got) != len(want):
                print("   lengths", len(got), len(want))
        else:
            print(f"ok   {name} {what} ({len(got)} TCP packets)")

    f = lambda n: os.path.join(HERE, n)
    base = tcp_rows(f("base_lo.pcap"))
    for n in ["base_lo.pcapng", "base_lo_nsec.pcap", "base_lo.pcap.gz", "base_lo.pcapng.gz",
              "base_lo_be.pcap", "raw_ip.pcap", "ipv4_linktype.pcap", "null_le.pcap",
              "loop.pcap", "vlan.pcap", "qinq.pcap", "ipv4_options.pcap"]:
        check(n, tcp_rows(f(n)), base, "== base_lo")
    check("no_handshake.pcap", tcp_rows(f("no_handshake.pcap")),
          [(r[0] - base[3][0],) + r[1:] for r in base[3:]], "== base_lo minus frames 1-3")
    spb = tcp_rows(f("spb.pcapng"))
    check("spb.pcapng", [r[1:] for r in spb], [r[1:] for r in base], "headers == base_lo")
    check("spb.pcapng", [r[0] for r in spb[:-3]], [r[0] for r in base[:-3]], "EPB times")
    # seq_wrap: same but for seq/ack
    sw = tcp_rows(f("seq_wrap.pcap"))
    check("seq_wrap.pcap", [r[:4] + r[6:] for r in sw], [r[:4] + r[6:] for r in base],
          "non-seq fields")
    cisn, sisn = sw[0][4], sw[1][4]
    print("     seq_wrap ISNs client", cisn, "=2^32-%d" % (2**32 - cisn),
          "server", sisn, "=2^32-%d" % (2**32 - sisn))
    rel = lambda rows, c, s: [((r[4] - (c if r[2] == 8000 else s)) % 2**32,
                               ((r[5] - (s if r[2] == 8000 else c)) % 2**32) if r[3] & 16 else 0)
                              for r in rows]
    check("seq_wrap.pcap", rel(sw, cisn, sisn), rel(base, base[0][4], base[1][4]),
          "relative seq/ack")
    wraps = [i + 1 for i, r in enumerate(sw) if r[6] and r[4] + r[6] > 2**32]
    print("     seq_wrap frames whose payload straddles 2^32:", wraps)
    # v6
    b6 = tcp_rows(f("base_lo6.pcap"))
    check("ipv6_ext.pcap", tcp_rows(f("ipv6_ext.pcap")), b6, "== base_lo6")
    # multi_if: base + a copy with ports 50001 <-> 8001
    cport = base[0][1]
    mp = lambda p: 50001 if p == cport else 8001
    other = [r[:1] + (mp(r[1]), mp(r[2])) + r[3:] for r in base]
    want = sorted(base + other, key=lambda r: r[0])
    for n in ["multi_if.pcapng", "multi_if_tsresol.pcapng"]:
        got = tcp_rows(f(n))
        a = sorted([r for r in got if 8000 in r[1:3]]) == sorted(base)
        b = [r[1:] for r in got if 8001 in r[1:3]] == [r[1:] for r in other]
        tb = max(abs(x[0] - y[0]) for x, y in zip([r for r in got if 8001 in r[1:3]], other))
        if not (a and b and tb <= 1):
            ok = False
        print(("ok  " if a and b and tb <= 1 else "FAIL"), n,
              "flow 8000 == base_lo:", a, " flow 8001 == port-rewritten copy:", b,
              " max time error us:", tb, f"({len(got)} TCP packets)")
    # snap / any / real captures: only summarise
    for n in ["snap96.pcap", "snap68.pcap", "any_sll.pcap", "any_sll2.pcap", "base_lo6.pcap",
              "port_reuse.pcap"]:
        rows = tcp_rows(f(n))
        data = [r for r in rows if r[6]]
        flows = {(r[1], r[2]) for r in rows}
        syns = sum(1 for r in rows if r[3] & 0x12 == 0x02)
        print(f"info {n}: {len(rows)} TCP packets, {len(data)} with data, "
              f"payload bytes {sum(r[6] for r in data)}, SYNs {syns}, port pairs {sorted(flows)}")
    # caplen < wirelen in the snap captures
    for n in ["snap96.pcap", "snap68.pcap"]:
        cut = sum(1 for _, _, d, w in records(f(n)) if len(d) < w)
        print(f"info {n}: {cut} records with caplen < wire length")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
