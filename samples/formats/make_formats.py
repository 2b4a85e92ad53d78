#!/usr/bin/env python3
"""Make the format / link-type fixtures in samples/formats/.

Run as root from the repository root:

    python3 samples/formats/make_formats.py            # capture + derive everything
    python3 samples/formats/make_formats.py --derive   # only re-derive from the committed captures

REAL captures (tcpdump on loopback, Linux delayed ACK, Nagle on):
  base_lo.pcap, base_lo6.pcap, snap96.pcap, any_sll.pcap, any_sll2.pcap, port_reuse.pcap

Each run is an echo server on 127.0.0.1:8000 (or [::1]:8000) that echoes every complete
line, and a client that does, per request, write(b"hello "); write(b"world\\r\\n"); read the
13-byte echo.  Nagle holds "world\\r\\n" until the server's delayed ACK of "hello " (40 ms on
Linux) arrives, except while the server is still in quick-ack mode.  The client measures the
latency of every request; expected.json counts requests >= 30 ms as stalls.  It is never
computed by running nagleprobe.

Everything else is DERIVED from those captures, with editcap/mergecap where they can do it
and with the small byte-level code below where no real stack produces the format
(see README.md for which is which).
"""

import gzip
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
from capgen import Iface, Section, pcap_bytes, pcapng_bytes  # noqa: E402 (the one writer)

PORT = 8000
STALL_MS = 30.0
N_REQ = 8


def P(name):
    return os.path.join(HERE, name)


# ---------------------------------------------------------------------------- live part

def echo_server(host, family, n_conn, ready):
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, PORT))
    ls.listen(8)
    ready.set()
    for _ in range(n_conn):
        c, _ = ls.accept()  # Nagle on, default delayed ACK
        buf = b""
        while True:
            try:
                d = c.recv(4096)
            except ConnectionResetError:
                break
            if not d:
                break
            buf += d
            while b"\r\n" in buf:
                line, buf = buf.split(b"\r\n", 1)
                c.sendall(line + b"\r\n")  # echo each complete line
        c.close()
    ls.close()


def split_requests(s, n):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        s.send(b"hello ")
        s.send(b"world\r\n")
        got = b""
        while len(got) < 13:
            d = s.recv(4096)
            if not d:
                raise RuntimeError("server closed early")
            got += d
        lat.append((time.perf_counter() - t0) * 1000.0)
        assert got == b"hello world\r\n", got
    return lat


def client_plain(host, family):
    s = socket.socket(family, socket.SOCK_STREAM)  # Nagle on (default)
    s.connect((host, PORT))
    sport = s.getsockname()[1]
    lat = split_requests(s, N_REQ)
    time.sleep(0.05)
    s.close()
    return [{"client_port": sport, "latency_ms": lat}]


def client_port_reuse(host, family):
    out = []
    for i in range(2):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 40000))
        s.connect((host, PORT))
        lat = split_requests(s, 4)
        time.sleep(0.05)
        # SO_LINGER 0: close with RST, no TIME_WAIT, so port 40000 is free again at once
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        out.append({"client_port": 40000, "latency_ms": lat})
        time.sleep(0.1)
    return out


def port_free(host, family):
    t = socket.socket(family, socket.SOCK_STREAM)
    try:
        t.bind((host, PORT))
        return True
    except OSError:
        return False
    finally:
        t.close()


def capture(name, tcpdump_args, host, family, client, n_conn):
    out = P(name)
    for attempt in range(5):
        while not port_free(host, family):  # another sample maker is using port 8000
            time.sleep(0.5)
        ready = threading.Event()
        th = threading.Thread(target=echo_server, args=(host, family, n_conn, ready), daemon=True)
        th.start()
        ready.wait()
        td = subprocess.Popen(["tcpdump"] + tcpdump_args + ["-w", out, "tcp port %d" % PORT],
                              stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        conns = client(host, family)
        th.join(5)
        time.sleep(0.3)
        td.send_signal(signal.SIGINT)
        td.wait()
        # the capture must hold only our connection(s): someone else may use port 8000
        ports = {c["client_port"] for c in conns}
        seen = capture_client_ports(out)
        if seen == ports:
            return conns
        print(f"{name}: foreign traffic on port {PORT} ({seen} != {ports}), retrying",
              file=sys.stderr)
        time.sleep(1)
    raise SystemExit(f"{name}: could not get a clean capture")


def capture_client_ports(path):
    ports = set()
    for ip, tcp in iter_tcp(path):
        ports.add(tcp.dport if tcp.sport == PORT else tcp.sport)
    return ports


def ground_truth(conns):
    flows = []
    for c in conns:
        lat = [round(x, 3) for x in c["latency_ms"]]
        flows.append({"client_port": c["client_port"], "server_port": PORT,
                      "requests": len(lat), "latency_ms": lat,
                      "stalls": sum(1 for x in lat if x >= STALL_MS),
                      "stalled_requests": [i + 1 for i, x in enumerate(lat) if x >= STALL_MS]})
    return {"flows": len(flows), "stalls": sum(f["stalls"] for f in flows),
            "stall_sender": "client", "per_flow": flows}


def live():
    truth = {}
    v4, v6 = ("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)
    truth["base_lo.pcap"] = ground_truth(capture("base_lo.pcap", ["-i", "lo", "-s", "0"],
                                                 *v4, client_plain, 1))
    truth["base_lo6.pcap"] = ground_truth(capture("base_lo6.pcap", ["-i", "lo", "-s", "0"],
                                                  *v6, client_plain, 1))
    truth["snap96.pcap"] = ground_truth(capture("snap96.pcap", ["-i", "lo", "-s", "96"],
                                                *v4, client_plain, 1))
    truth["snap68.pcap"] = ground_truth(capture("snap68.pcap", ["-i", "lo", "-s", "68"],
                                                *v4, client_plain, 1))
    truth["any_sll.pcap"] = ground_truth(capture("any_sll.pcap", ["-i", "any", "-y", "LINUX_SLL"],
                                                 *v4, client_plain, 1))
    truth["any_sll2.pcap"] = ground_truth(capture("any_sll2.pcap",
                                                  ["-i", "any", "-y", "LINUX_SLL2"],
                                                  *v4, client_plain, 1))
    truth["port_reuse.pcap"] = ground_truth(capture("port_reuse.pcap", ["-i", "lo", "-s", "0"],
                                                    *v4, client_port_reuse, 2))
    with open(P("live_truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    return truth


# ---------------------------------------------------------------------------- file helpers

def read_pcap(path):
    """-> (linktype, snaplen, [(sec, usec, origlen, data)]) for a little-endian usec pcap."""
    b = open(path, "rb").read()
    magic, vmaj, vmin, tz, sig, snap, lt = struct.unpack("<IHHiIII", b[:24])
    assert magic == 0xA1B2C3D4, hex(magic)
    recs, o = [], 24
    while o + 16 <= len(b):
        s, us, cl, ol = struct.unpack("<IIII", b[o:o + 16])
        recs.append((s, us, ol, b[o + 16:o + 16 + cl]))
        o += 16 + cl
    return lt, snap, recs


def ts_ns(s, us):
    return (s * 1_000_000 + us) * 1000


def write_pcap(path, linktype, recs, snaplen=262144, big=False):
    """recs: [(sec, usec, origlen, data)], written by capgen.pcap_bytes (microseconds)."""
    with open(path, "wb") as f:
        f.write(pcap_bytes([(ts_ns(s, us), d, ol) for s, us, ol, d in recs], linktype,
                           big=big, snaplen=snaplen))


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4_fix_csum(ip):
    ihl = (ip[0] & 15) * 4
    ip = bytearray(ip)
    ip[10:12] = b"\0\0"
    ip[10:12] = struct.pack("!H", csum(bytes(ip[:ihl])))
    return bytes(ip)


def tcp_fix_csum(ip):
    """Recompute the TCP checksum of a full IPv4/IPv6 packet (TCP right after the
    fixed header / the given extension-free header)."""
    ip = bytearray(ip)
    if ip[0] >> 4 == 4:
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:tot]
        pseudo = bytes(ip[12:20]) + struct.pack("!BBH", 0, 6, len(tcp))
        off = ihl
    else:
        plen = struct.unpack("!H", ip[4:6])[0]
        tcp = ip[40:40 + plen]
        pseudo = bytes(ip[8:40]) + struct.pack("!IxxxB", len(tcp), 6)
        off = 40
    tcp[16:18] = b"\0\0"
    c = csum(pseudo + bytes(tcp))
    ip[off + 16:off + 18] = struct.pack("!H", c)
    return bytes(ip)


def iter_tcp(path):
    """(ip, tcp) dpkt objects of every TCP packet of any of our files (dpkt-decoded)."""
    import dpkt
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(4)
    with opener(path, "rb") as f:
        rd = dpkt.pcapng.Reader(f) if head == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.UniversalReader(f)
        lt = rd.datalink()
        for ts, buf in rd:
            ip = decode_link(lt, buf)
            if ip is not None and isinstance(ip.data, dpkt.tcp.TCP):
                yield ip, ip.data


def decode_link(lt, buf):
    import dpkt
    if lt == 1:
        eth = dpkt.ethernet.Ethernet(buf)
        return eth.data if isinstance(eth.data, (dpkt.ip.IP, dpkt.ip6.IP6)) else None
    if lt == 113:
        p = dpkt.sll.SLL(buf)
        return p.data if isinstance(p.data, (dpkt.ip.IP, dpkt.ip6.IP6)) else None
    if lt == 276:
        return raw_ip(buf[20:])
    if lt in (12, 101, 228, 229):
        return raw_ip(buf)
    if lt in (0, 108):
        return raw_ip(buf[4:])
    return None


def raw_ip(b):
    import dpkt
    return dpkt.ip.IP(b) if b[0] >> 4 == 4 else dpkt.ip6.IP6(b)


def run(*cmd):
    subprocess.run(cmd, check=True)


# ---------------------------------------------------------------------------- derived part

def derive(truth):
    base = truth["base_lo.pcap"]
    exp = dict(truth)

    def same(name, note, **kw):
        d = dict(base)
        d["derived_from"] = "base_lo.pcap"
        d["note"] = note
        d.update(kw)
        exp[name] = d

    lt, snap, recs = read_pcap(P("base_lo.pcap"))
    assert lt == 1
    cport = base["per_flow"][0]["client_port"]

    # editcap: format conversions
    run("editcap", "-F", "pcapng", P("base_lo.pcap"), P("base_lo.pcapng"))
    same("base_lo.pcapng", "editcap -F pcapng")
    run("editcap", "-F", "nsecpcap", P("base_lo.pcap"), P("base_lo_nsec.pcap"))
    same("base_lo_nsec.pcap", "editcap -F nsecpcap (magic a1b23c4d)")
    for n in ("base_lo.pcap", "base_lo.pcapng"):
        with open(P(n), "rb") as src, gzip.GzipFile(P(n + ".gz"), "wb", 9, mtime=0) as dst:
            dst.write(src.read())
        same(n + ".gz", "gzip of " + n, compressed=True)
    write_pcap(P("base_lo_be.pcap"), lt, recs, snap, big=True)
    same("base_lo_be.pcap", "big-endian pcap headers, same packet bytes")

    # editcap: link type rewrites (strip the 14-byte Ethernet header)
    run("editcap", "-F", "pcap", "-C", "14", "-T", "rawip", P("base_lo.pcap"), P("raw_ip.pcap"))
    same("raw_ip.pcap", "editcap -C 14 -T rawip")
    run("editcap", "-F", "pcap", "-C", "14", "-T", "rawip4", P("base_lo.pcap"), P("ipv4_linktype.pcap"))
    same("ipv4_linktype.pcap", "editcap -C 14 -T rawip4")

    # crafted: BSD loopback headers
    write_pcap(P("null_le.pcap"), 0,
               [(s, u, ol - 10, struct.pack("<I", 2) + d[14:]) for s, u, ol, d in recs])
    same("null_le.pcap", "crafted: DLT_NULL, family 2 little-endian")
    write_pcap(P("loop.pcap"), 108,
               [(s, u, ol - 10, struct.pack(">I", 2) + d[14:]) for s, u, ol, d in recs])
    same("loop.pcap", "crafted: DLT_LOOP, family 2 big-endian")

    # crafted: VLAN tags
    dot1q = struct.pack("!HH", 0x8100, 100)
    write_pcap(P("vlan.pcap"), 1, [(s, u, ol + 4, d[:12] + dot1q + d[12:]) for s, u, ol, d in recs])
    same("vlan.pcap", "crafted: 802.1Q VID 100 after the MACs")
    qinq = struct.pack("!HHHH", 0x88A8, 200, 0x8100, 100)
    write_pcap(P("qinq.pcap"), 1, [(s, u, ol + 8, d[:12] + qinq + d[12:]) for s, u, ol, d in recs])
    same("qinq.pcap", "crafted: 802.1ad S-VID 200 + 802.1Q C-VID 100")

    # crafted: sequence wrap in both directions
    pk = [t for _, t in iter_tcp(P("base_lo.pcap"))]
    syn = next(t for t in pk if t.flags & 0x12 == 0x02)
    synack = next(t for t in pk if t.flags & 0x12 == 0x12)
    c_add = (2**32 - 100 - syn.seq) % 2**32     # client ISN -> 2^32 - 100
    s_add = (2**32 - 50 - synack.seq) % 2**32   # server ISN -> 2^32 - 50
    out = []
    for s, u, ol, d in recs:
        ip = bytearray(d[14:])
        ihl = (ip[0] & 15) * 4
        t = ihl
        sp, dp, seq, ack = struct.unpack("!HHII", ip[t:t + 12])
        flags = ip[t + 13]
        from_client = dp == PORT
        seq = (seq + (c_add if from_client else s_add)) % 2**32
        if flags & 0x10:
            ack = (ack + (s_add if from_client else c_add)) % 2**32
        ip[t + 4:t + 12] = struct.pack("!II", seq, ack)
        out.append((s, u, ol, d[:14] + tcp_fix_csum(bytes(ip))))
    write_pcap(P("seq_wrap.pcap"), 1, out)
    same("seq_wrap.pcap", "crafted: client ISN 2^32-100 (wraps inside request 8's "
         "'world\\r\\n'), server ISN 2^32-50 (wraps inside reply 4); TCP checksums recomputed",
         client_isn=2**32 - 100, server_isn=2**32 - 50)

    # crafted: IPv4 router-alert option on every packet
    out = []
    for s, u, ol, d in recs:
        ip = d[14:]
        assert ip[0] == 0x45
        tot = struct.unpack("!H", ip[2:4])[0] + 4
        nip = bytes([0x46]) + ip[1:2] + struct.pack("!H", tot) + ip[4:20] + b"\x94\x04\x00\x00" + ip[20:]
        out.append((s, u, ol + 4, d[:14] + ipv4_fix_csum(nip)))
    write_pcap(P("ipv4_options.pcap"), 1, out)
    same("ipv4_options.pcap", "crafted: IPv4 Router Alert option (ihl 6) in every packet")

    # crafted: IPv6 hop-by-hop + destination options in every packet
    lt6, snap6, recs6 = read_pcap(P("base_lo6.pcap"))
    out = []
    for s, u, ol, d in recs6:
        ip = d[14:]
        assert ip[0] >> 4 == 6 and ip[6] == 6
        plen = struct.unpack("!H", ip[4:6])[0] + 16
        hbh = bytes([60, 0, 1, 4, 0, 0, 0, 0])    # next = dest opts, PadN(4)
        dst = bytes([6, 0, 1, 4, 0, 0, 0, 0])     # next = TCP, PadN(4)
        nip = ip[:4] + struct.pack("!H", plen) + bytes([0]) + ip[7:40] + hbh + dst + ip[40:]
        out.append((s, u, ol + 16, d[:14] + nip))
    write_pcap(P("ipv6_ext.pcap"), 1, out)
    d6 = dict(truth["base_lo6.pcap"])
    d6.update(derived_from="base_lo6.pcap",
              note="crafted: hop-by-hop + destination options headers (8 B each) in every packet")
    exp["ipv6_ext.pcap"] = d6

    # multi-interface pcapng: Ethernet flow + raw-IP copy with other ports
    other = []
    OC, OS = 50001, 8001
    for s, u, ol, d in recs:
        ip = bytearray(d[14:])
        t = (ip[0] & 15) * 4
        sp, dp = struct.unpack("!HH", ip[t:t + 4])
        ip[t:t + 4] = struct.pack("!HH", OC if sp == cport else OS, OC if dp == cport else OS)
        other.append((s, u, ol - 14, tcp_fix_csum(bytes(ip))))
    tmp = P("_other_raw.pcap")
    write_pcap(tmp, 101, other)
    run("mergecap", "-F", "pcapng", "-w", P("multi_if.pcapng"), P("base_lo.pcap"), tmp)
    os.unlink(tmp)
    f2 = dict(base["per_flow"][0])
    f2.update(client_port=OC, server_port=OS)
    exp["multi_if.pcapng"] = {
        "flows": 2, "stalls": 2 * base["stalls"], "stall_sender": "client",
        "per_flow": [base["per_flow"][0], f2], "derived_from": "base_lo.pcap",
        "note": "mergecap -F pcapng of base_lo.pcap (if 0, EN10MB) and a RAW copy with ports "
                f"{OC}->{OS} (if 1, RAW); same timestamps, flows interleave"}

    # hand-written pcapng: if_tsresol, SPB
    write_pcapng(P("multi_if_tsresol.pcapng"),
                 [(1, 9), (101, 0x80 | 20)],
                 sorted([(0, r, "epb") for r in recs] + [(1, r, "epb") for r in other],
                        key=lambda x: (x[1][0], x[1][1])))
    exp["multi_if_tsresol.pcapng"] = dict(exp["multi_if.pcapng"])
    exp["multi_if_tsresol.pcapng"]["note"] = (
        "crafted pcapng: if 0 EN10MB if_tsresol=9 (ns), if 1 RAW if_tsresol=0x94 (2^-20 s); "
        "same packets as multi_if.pcapng")
    n = len(recs)
    write_pcapng(P("spb.pcapng"), [(1, None)],
                 [(0, r, "spb" if i >= n - 3 else "epb") for i, r in enumerate(recs)])
    same("spb.pcapng", "crafted pcapng: one interface (EN10MB, default us), EPBs except the "
         "last 3 packets (connection teardown) as SPBs (no timestamp)", spb_packets=3)

    # snap96 already real; no_handshake from base_lo
    run("editcap", "-F", "pcap", P("base_lo.pcap"), P("no_handshake.pcap"), "1-3")
    same("no_handshake.pcap", "editcap base_lo.pcap no_handshake.pcap 1-3 (SYN, SYN/ACK, ACK "
         "deleted)", roles="guessed")

    exp["snap68.pcap"] = dict(exp["snap68.pcap"], note=(
        "tcpdump -s 68: data segments keep 2 payload bytes; the SYN and SYN/ACK lose the end "
        "of their TCP options (74 B frames), so MSS/wscale from the SYN may be unavailable"))
    exp["snap96.pcap"] = dict(exp["snap96.pcap"], note=(
        "tcpdump -s 96: every frame here is <= 79 B, so nothing is actually cut (see snap68)"))
    meta = {"_about": "ground truth from the client's own latency measurements "
            f"(request >= {STALL_MS} ms = stall); never from nagleprobe. Broken files: "
            "tests/broken/ (made by tests/broken/make_broken.py)."}
    meta.update({k: exp[k] for k in sorted(exp)})
    with open(P("expected.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def write_pcapng(path, ifaces, packets):
    """ifaces: [(linktype, tsresol or None)]; packets: [(ifid, (sec, usec, origlen, data), kind)],
    kind "epb" or "spb"; written by capgen.pcapng_bytes: one section, no options but
    if_tsresol."""
    records = [("spb", d, ol) if kind == "spb" else ("epb", ifid, ts_ns(s, us), d, ol)
               for ifid, (s, us, ol, d), kind in packets]
    section = Section([Iface(lt, tsresol=res) for lt, res in ifaces], records=records,
                      minimal=True)
    with open(path, "wb") as f:
        f.write(pcapng_bytes([section]))


if __name__ == "__main__":
    if "--derive" in sys.argv:
        truth = json.load(open(P("live_truth.json")))
    else:
        if os.geteuid() != 0:
            raise SystemExit("run as root (tcpdump)")
        truth = live()
    derive(truth)
    print(json.dumps({k: (v.get("stalls"), v.get("flows")) for k, v in truth.items()}))
