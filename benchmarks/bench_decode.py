"""Benchmark read+decode (not a test): synthetic ~2 M-packet pcap built with numpy.

    python benchmarks/bench_decode.py [packets] [--pcapng]

A small crafted TCP conversation (handshake, request/response, pure ACKs, Nagle-style small
segments, options on the SYNs, timestamps on every segment) is replicated with shifted client
ports and times, written as one pcap in /tmp, then read and decoded with nagleprobe.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from capgen import (  # noqa: E402
    LT_EN10MB,
    Iface,
    Section,
    pcap_bytes,
    pcap_header,
    pcap_records,
    pcapng_blocks,
    pcapng_bytes,
    pcapng_header,
)
from nagleprobe.decode import decode  # noqa: E402
from nagleprobe.read import CaptureReader  # noqa: E402


def conversation() -> list[tuple[int, bytes]]:
    from scapy.all import IP, TCP, Ether, Raw

    c, s = "10.0.0.1", "10.0.0.2"
    ts = [("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]
    pk = []
    t = 0

    def add(src, dst, sp, dp, flags, seq, ack, n=0, opts=ts):
        nonlocal t
        p = Ether() / IP(src=src, dst=dst) / TCP(sport=sp, dport=dp, flags=flags, seq=seq,
                                                 ack=ack, options=opts)
        if n:
            p = p / Raw(b"x" * n)
        pk.append((t, bytes(p)))
        t += 50_000

    syn_opts = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 0)), ("NOP", None),
                ("WScale", 7)]
    add(c, s, 40000, 80, "S", 1000, 0, opts=syn_opts)
    add(s, c, 80, 40000, "SA", 5000, 1001, opts=syn_opts)
    add(c, s, 40000, 80, "A", 1001, 5001)
    cs, ss = 1001, 5001
    for _ in range(8):
        add(c, s, 40000, 80, "PA", cs, ss, 100)
        cs += 100
        add(s, c, 80, 40000, "A", ss, cs)
        add(s, c, 80, 40000, "PA", ss, cs, 1448)
        ss += 1448
        add(s, c, 80, 40000, "PA", ss, cs, 10)
        ss += 10
        add(c, s, 40000, 80, "A", cs, ss)
    add(c, s, 40000, 80, "FA", cs, ss)
    add(s, c, 80, 40000, "FA", ss, cs + 1)
    add(c, s, 40000, 80, "A", cs + 1, ss + 1)
    return pk


def build(path: str, n_packets: int, snap: int = 0, pcapng: bool = False) -> int:
    conv = conversation()
    k = len(conv)
    reps = max(1, n_packets // k)
    # one conversation written by capgen (the one capture writer), cut into its records; the
    # copies then get their own times and client port
    packets = [(ts, data[:snap] if snap else data, len(data)) for ts, data in conv]
    if pcapng:  # EPB: type, length, interface, ts high/low (us), caplen, origlen, data, length
        hdr = pcapng_header(LT_EN10MB)
        one = pcapng_bytes([Section([Iface(LT_EN10MB)], minimal=True,
                                    records=[("epb", 0, ts, d, wire) for ts, d, wire in packets])])
        assert one.startswith(hdr)
        recs = [b for _, b in pcapng_blocks(one)[2:]]
        ts_at, hdr_len = 12, 28
    else:
        hdr = pcap_header(LT_EN10MB)
        recs = [b for _, b in pcap_records(pcap_bytes(packets, LT_EN10MB))]
        ts_at, hdr_len = 0, 16
    assert len(recs) == k
    pos_ts, pos_sport, pos_dport = [], [], []
    o = 0
    for rec in recs:
        pos_ts.append(o + ts_at)
        pos_sport.append(o + hdr_len + 34)
        pos_dport.append(o + hdr_len + 36)
        o += len(rec)
    tmpl = np.frombuffer(b"".join(recs), np.uint8)
    m = np.tile(tmpl, (reps, 1))
    r = np.arange(reps, dtype=np.int64)
    span_us = k * 50 + 37  # each replica starts a bit later
    base_sec = 1_700_000_000 + (r * span_us) // 1_000_000
    base_us = (r * span_us) % 1_000_000
    port = (1024 + r % 60000).astype(">u2").view(np.uint8).reshape(reps, 2)
    for j, (ts, _) in enumerate(conv):
        us = base_us + ts // 1000
        p = pos_ts[j]
        if pcapng:
            units = (base_sec + us // 1_000_000) * 1_000_000 + us % 1_000_000
            m[:, p:p + 4] = (units >> 32).astype("<u4").view(np.uint8).reshape(reps, 4)
            m[:, p + 4:p + 8] = (units & 0xFFFFFFFF).astype("<u4").view(np.uint8).reshape(reps, 4)
        else:
            sec = (base_sec + us // 1_000_000).astype("<u4").view(np.uint8).reshape(reps, 4)
            usec = (us % 1_000_000).astype("<u4").view(np.uint8).reshape(reps, 4)
            m[:, p:p + 4] = sec
            m[:, p + 4:p + 8] = usec
        # the client port is sport on client->server segments, dport otherwise
        client_is_src = conv[j][1][34:36] == b"\x9c\x40"
        q = pos_sport[j] if client_is_src else pos_dport[j]
        m[:, q:q + 2] = port
    with open(path, "wb") as f:
        f.write(hdr)
        m.tofile(f)
    return reps * k


def main() -> None:
    n = int(next((a for a in sys.argv[1:] if a.isdigit()), 2_000_000))
    pcapng = "--pcapng" in sys.argv[1:]
    path = "/tmp/nagleprobe_bench_decode." + ("pcapng" if pcapng else "pcap")
    t0 = time.perf_counter()
    total = build(path, n, pcapng=pcapng)
    t1 = time.perf_counter()
    size = os.path.getsize(path)
    print(f"built {total:,} packets ({size / 1e6:.0f} MB) in {t1 - t0:.2f} s: {path}")
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        r = CaptureReader(path)
        skipped: Counter = Counter()
        rows = 0
        t_read = 0.0
        ta = time.perf_counter()
        for b in r:
            tb = time.perf_counter()
            t_read += tb - ta
            rows += len(decode(b, skipped)["frame"])
            ta = time.perf_counter()
        dt = time.perf_counter() - t0
        assert rows == total, (rows, total, skipped)
        if best is None or dt < best[0]:
            best = (dt, t_read)
    dt, t_read = best
    print(f"read+decode: {total / dt / 1e6:.2f} M packets/s ({dt:.2f} s; read {t_read:.2f} s, "
          f"decode {dt - t_read:.2f} s; {dt / total * 1e9:.0f} ns/packet)")
    os.unlink(path)


if __name__ == "__main__":
    main()
