#!/usr/bin/env python3
"""Regenerate the real sample captures of nagleprobe and their ground-truth sidecars.

Run as root from the repository root:

    sudo python3 samples/make_samples.py            # all scenarios
    sudo python3 samples/make_samples.py echo_split_lo proxy_any   # some of them

Needs: iproute2 (ip netns, veth), tcpdump, ethtool (optional, offloads off), Python 3.
No netem is needed: delay and loss come from samples/forwarder.py, a userspace L2 bridge
running in the middle namespace.

Topologies (all namespaces are created fresh for every scenario and always deleted):

* loopback: one private namespace ``nplo``; the apps talk over its ``lo`` (127.0.0.1),
  so nothing else on the machine shares the capture.
* netns path:  cli [c0 10.99.1.1/24] <-veth-> [c1] mid [s1] <-veth-> [s0 10.99.1.2/24] srv
  ``mid`` runs forwarder.py bridging c1 <-> m1 and m2 <-> s1 (m1/m2: a veth pair inside
  mid, the "middle" capture point) with 2.5 ms per hop, 5 ms one-way each direction
  (plus optional loss / extra delay of pure ACKs). TSO/GSO/GRO and TX checksum offload are
  off on every veth, so the captures show wire-sized segments with valid checksums.

Every app logs its own timings (time.monotonic_ns) to JSON; the sidecar
``<name>.expected.json`` is computed from those logs and the known setup, never from
nagleprobe.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
APPS = str(HERE / "apps.py")
FWD = str(HERE / "forwarder.py")
PY = sys.executable or "python3"
CLI_IP, SRV_IP = "10.99.1.1", "10.99.1.2"
LO_IP = "127.0.0.1"
ONE_WAY_MS = 5.0
PATH_RTT_MS = 2 * ONE_WAY_MS
STALL_EXCESS_MS = 25.0  # a request counts as stalled if it took this much over the fastest
ALL_NS = ["nplo", "cli", "mid", "srv"]
LOGDIR = Path(tempfile.mkdtemp(prefix="nagleprobe-samples-"))
PROCS = []  # everything we started, to be stopped on failure


def run(*cmd, check=True, quiet=False):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r


def nsx(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def start(cmd, **kw):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    PROCS.append(p)
    return p


def stop(p, sig=signal.SIGTERM, timeout=5):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    out, err = p.communicate()
    if p in PROCS:
        PROCS.remove(p)
    return out, err


# ------------------------------------------------------------------ namespaces
def teardown():
    for p in list(PROCS):
        try:
            stop(p, signal.SIGKILL, 2)
        except Exception:
            pass
    existing = run("ip", "netns", "list", check=False).stdout
    for ns in ALL_NS:
        if any(line.split()[0] == ns for line in existing.splitlines() if line.strip()):
            run("ip", "netns", "del", ns, check=False)


def new_ns(ns):
    run("ip", "netns", "add", ns)
    run(*nsx(ns, "ip", "link", "set", "lo", "up"))
    for k in ("all", "default"):
        run(*nsx(ns, "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1"), check=False)


def offloads_off(ns, dev):
    if shutil.which("ethtool"):
        run(*nsx(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
                 "tx", "off"), check=False)


def setup_lo():
    teardown()
    new_ns("nplo")


def setup_path(fwd_args=(), cli_sysctls=()):
    teardown()
    for ns in ("cli", "mid", "srv"):
        new_ns(ns)
    run(*nsx("cli", "ip", "link", "add", "c0", "type", "veth", "peer", "name", "c1",
             "netns", "mid"))
    run(*nsx("srv", "ip", "link", "add", "s0", "type", "veth", "peer", "name", "s1",
             "netns", "mid"))
    run(*nsx("cli", "ip", "addr", "add", f"{CLI_IP}/24", "dev", "c0"))
    run(*nsx("srv", "ip", "addr", "add", f"{SRV_IP}/24", "dev", "s0"))
    run(*nsx("mid", "ip", "link", "add", "m1", "type", "veth", "peer", "name", "m2"))
    for ns, dev in (("cli", "c0"), ("mid", "c1"), ("mid", "s1"), ("srv", "s0"), ("mid", "m1"),
                    ("mid", "m2")):
        offloads_off(ns, dev)
        run(*nsx(ns, "ip", "link", "set", dev, "up"))
    for dev in ("c1", "s1", "m1", "m2"):
        run(*nsx("mid", "ip", "link", "set", dev, "promisc", "on"))
    for s in cli_sysctls:
        run(*nsx("cli", "sysctl", "-qw", s))
    fwd = start(nsx("mid", PY, FWD, "--a", "c1", "--b", "s1", "--mid", "m1:m2", "--delay-ms", str(ONE_WAY_MS),
                    *fwd_args))
    time.sleep(0.3)
    # permanent neighbour entries: no ARP in the captures, no ARP refresh mid-run
    mac = {ns: json.loads(run(*nsx(ns, "ip", "-j", "link", "show", dev)).stdout)[0]["address"]
           for ns, dev in (("cli", "c0"), ("srv", "s0"))}
    run(*nsx("cli", "ip", "neigh", "replace", SRV_IP, "lladdr", mac["srv"], "dev", "c0",
             "nud", "permanent"))
    run(*nsx("srv", "ip", "neigh", "replace", CLI_IP, "lladdr", mac["cli"], "dev", "s0",
             "nud", "permanent"))
    return fwd


# ------------------------------------------------------------------ capture
class Capture:
    def __init__(self, ns, iface, name, snaplen=0, linktype=None, bpf=None):
        self.path = HERE / name
        # --immediate-mode: without it packets still in the ring buffer's open block (up to
        # 1 s of traffic) are lost when tcpdump is stopped
        cmd = ["tcpdump", "-Z", "root", "--immediate-mode", "-i", iface, "-s", str(snaplen), "-U",
               "-nn", "-w", str(self.path)]
        if linktype:
            cmd += ["-y", linktype]
        if bpf:
            cmd += bpf.split()
        self.p = start(nsx(ns, *cmd))

    def wait_ready(self):
        seen = []
        for _ in range(5):  # e.g. "data link type LINUX_SLL2" comes first
            line = self.p.stderr.readline()
            seen.append(line.strip())
            if "listening on" in line:
                return
            if not line:
                break
        raise RuntimeError(f"tcpdump did not start: {seen}")

    def stop(self):
        _, err = stop(self.p, signal.SIGINT)
        return err.strip()


def captures(specs):
    caps = [Capture(*s[:3], **(s[3] if len(s) > 3 else {})) for s in specs]
    for c in caps:
        c.wait_ready()
    time.sleep(0.3)
    return caps


def finish(caps):
    time.sleep(0.5)
    for c in caps:
        c.stop()
        os.chmod(c.path, 0o644)


def app(ns, cmd, log, *args):
    return start(nsx(ns, PY, APPS, cmd, "--log", str(LOGDIR / log), *map(str, args)))


def wait_all(procs, timeout=60):
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"app timed out: {p.args}")
        out, err = p.communicate()
        PROCS.remove(p) if p in PROCS else None
        if p.returncode != 0:
            raise RuntimeError(f"app failed {p.args}: {err}")


def load(log):
    with open(LOGDIR / log) as f:
        return json.load(f)


# ------------------------------------------------------------------ ground truth
def classify(values_ms, path_rtt_ms=0.0):
    """Stalls = values more than STALL_EXCESS_MS above the fastest one.

    Returns (stall count, delayed-ACK estimate). In a stall the held data waits for the
    peer's delayed ACK and, through a path, also for that ACK's and the data's trip, so the
    path RTT is taken off the median excess."""
    base = min(values_ms)
    excess = [v - base for v in values_ms]
    stalled = [e for e in excess if e >= STALL_EXCESS_MS]
    if not stalled:
        return 0, None, base
    return len(stalled), round(statistics.median(stalled) - path_rtt_ms, 1), base


def sidecar(name, stalls, held_side, held_endpoint, delack, vantage, nagle, notes, **extra):
    doc = {"capture": f"{name}.pcap", "stalls": stalls, "held_side": held_side,
           "held_endpoint": held_endpoint, "peer_delayed_ack_ms": delack, "vantage": vantage,
           "nagle": nagle, "notes": notes, "real_capture": True}
    doc.update(extra)
    with open(HERE / f"{name}.expected.json", "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"{name}: stalls={stalls} held={held_side} {held_endpoint} delack={delack}")


# ------------------------------------------------------------------ scenarios
def echo_lo(name, sport, mode, nodelay=False, quickack=False):
    setup_lo()
    caps = captures([("nplo", "lo", f"{name}.pcap")])
    srv = app("nplo", "echo-server", f"{name}.srv.json", "--port", 8000,
              *(["--quickack"] if quickack else []))
    time.sleep(0.2)
    cli = app("nplo", "echo-client", f"{name}.cli.json", "--dst", LO_IP, "--port", 8000,
              "--sport", sport, "--n", 20, "--mode", mode, *(["--nodelay"] if nodelay else []))
    wait_all([cli, srv])
    finish(caps)
    lat = load(f"{name}.cli.json")["latency_ms"]
    n, delack, base = classify(lat)
    return lat, n, delack


def echo_split_lo():
    name = "echo_split_lo"
    lat, n, delack = echo_lo(name, 40000, "split")
    sidecar(name, n, "client" if n else None, f"{LO_IP}:40000" if n else None, delack,
            "loopback", {"client": "on", "server": "on"},
            "Seeds 000/001. Client write('hello ') + write('world\\r\\n') then read, 20 times, "
            "against a line echo server. The body waits for the server's delayed ACK of the "
            "head. The first request(s) are fast: a fresh connection starts in quick-ack mode. "
            "Count from the client's per-request latency log.", latency_ms=lat,
            app_log="client per-request latency (time.monotonic_ns)")


def echo_nodelay_lo():
    name = "echo_nodelay_lo"
    lat, n, delack = echo_lo(name, 40001, "split", nodelay=True)
    sidecar(name, n, None, None, None, "loopback", {"client": "off", "server": "on"},
            "Same split writes as echo_split_lo but the client sets TCP_NODELAY: the body "
            "leaves while the head is unacknowledged (proves Nagle off), no stall.",
            latency_ms=lat)


def echo_coalesced_lo():
    name = "echo_coalesced_lo"
    lat, n, delack = echo_lo(name, 40002, "coalesced")
    sidecar(name, n, None, None, None, "loopback", {"client": "on", "server": "on"},
            "Same as echo_split_lo but head+body in one write: one segment per request, "
            "nothing is held. Nagle is on but never shows.", latency_ms=lat)


def neg_quickack_lo():
    name = "neg_quickack_lo"
    lat, n, delack = echo_lo(name, 40009, "split", quickack=True)
    sidecar(name, n, None, None, None, "loopback", {"client": "on", "server": "on"},
            "Split writes with Nagle on, but the echo server sets TCP_QUICKACK before and after "
            "every recv(), so it ACKs the head at once and the body follows within "
            "microseconds: no late pure ACK, no stall (latencies in latency_ms).",
            latency_ms=lat)


def confirm_netns():
    name = "confirm_netns"
    fwd = setup_path()
    caps = captures([("cli", "c0", f"{name}_client.pcap"), ("srv", "s0", f"{name}_server.pcap"),
                     ("mid", "m1", f"{name}_middle.pcap")])
    srv = app("srv", "confirm-server", f"{name}.srv.json", "--port", 8000)
    time.sleep(0.2)
    cli = app("cli", "confirm-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40010, "--n", 20)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    lat = load(f"{name}.cli.json")["latency_ms"]
    n, delack, base = classify(lat, PATH_RTT_MS)
    for vantage in ("client", "server", "middle"):
        sidecar(f"{name}_{vantage}", n, "client" if n else None,
                f"{CLI_IP}:40010" if n else None, delack, vantage,
                {"client": "on", "server": "off"},
                "Seed 002. One run captured at three points at once (client veth c0 in cli, "
                "server veth s0 in srv, veth m1 in mid, halfway: 2.5 ms from each side). Client (Nagle on) sends a "
                "30 B message, server (TCP_NODELAY) replies 19 B, client sends a 12 B "
                "confirmation and then the next message, which Nagle holds until the server's "
                "delayed ACK of the confirmation arrives. Path: 5 ms one-way each direction. "
                "Round latency = message write -> reply read; a stalled round costs the "
                "delayed ACK plus one path RTT; peer_delayed_ack_ms has the 10 ms RTT removed.",
                latency_ms=lat, path_rtt_ms=PATH_RTT_MS, fastest_round_ms=base)


def proxy_any():
    name = "proxy_any"
    setup_lo()
    # libpcap 1.10 gives "any" LINUX_SLL2 by default when writing; ask for v1 explicitly
    caps = captures([("nplo", "any", f"{name}.pcap", {"linktype": "LINUX_SLL"}),
                     ("nplo", "any", f"{name}_sll2.pcap", {"linktype": "LINUX_SLL2"})])
    be = app("nplo", "backend", f"{name}.be.json", "--port", 8002)
    time.sleep(0.2)
    px = app("nplo", "proxy", f"{name}.px.json", "--port", 8001, "--backend-port", 8002,
             "--sport", 40014)
    time.sleep(0.2)
    cli = app("nplo", "query-client", f"{name}.cli.json", "--dst", LO_IP, "--port", 8001,
              "--sport", 40004, "--n", 20)
    wait_all([cli, px, be])
    finish(caps)
    lat = load(f"{name}.cli.json")["latency_ms"]
    be_log = load(f"{name}.be.json")
    n, delack, base = classify(lat)
    n_be, _, _ = classify(be_log["first_to_last_byte_ms"])
    for fname, lt in ((name, "LINUX_SLL v1 (tcpdump -i any -y LINUX_SLL; libpcap 1.10.3 would pick SLL2 by default)"),
                      (f"{name}_sll2", "LINUX_SLL2 (tcpdump -i any -y LINUX_SLL2)")):
        sidecar(fname, n, "client" if n else None, f"{LO_IP}:40014" if n else None, delack,
                "loopback", {"client": "on", "server": "on"},
                f"Seed 004, link type {lt}; both files are the same run. Client "
                "127.0.0.1:40004 -> proxy 127.0.0.1:8001; proxy 127.0.0.1:40014 -> backend "
                "127.0.0.1:8002. The proxy reads with a 128-byte buffer and send()s each read "
                "at once (Nagle on), so each 164 B query goes to the backend as 128 + 36; the "
                "36 wait for the backend's delayed ACK of the 128. Stalls are on the "
                "proxy->backend flow, held side = the proxy as client of that flow. The "
                "client->proxy flow has no stall. Counted from the client's latency log and "
                "confirmed by the backend's first-byte->last-byte log.",
                held_flow=f"{LO_IP}:40014 -> {LO_IP}:8002", latency_ms=lat,
                backend_first_to_last_byte_ms=be_log["first_to_last_byte_ms"],
                backend_stalls=n_be)


def server_split_lo():
    name = "server_split_lo"
    setup_lo()
    caps = captures([("nplo", "lo", f"{name}.pcap")])
    srv = app("nplo", "split-server", f"{name}.srv.json", "--port", 8000)
    time.sleep(0.2)
    cli = app("nplo", "req-client", f"{name}.cli.json", "--dst", LO_IP, "--port", 8000,
              "--sport", 40006, "--n", 20)
    wait_all([cli, srv])
    finish(caps)
    lat = load(f"{name}.cli.json")["latency_ms"]
    n, delack, base = classify(lat)
    sidecar(name, n, "server" if n else None, f"{LO_IP}:8000" if n else None, delack,
            "loopback", {"client": "on", "server": "on"},
            "Server-side split: client sends a 32 B request in one write and reads 50 B; "
            "the server replies write(20 B header); write(30 B body). The body waits for the "
            "client's delayed ACK of the header. Counted from the client's latency log.",
            latency_ms=lat)


def records(name, sport, pace_ms, fwd_args=(), extra_ack_ms=0.0, n=20, nodelay=False):
    fwd = setup_path(fwd_args)
    caps = captures([("cli", "c0", f"{name}.pcap")])
    srv = app("srv", "records-receiver", f"{name}.srv.json", "--port", 8000)
    time.sleep(0.2)
    cli = app("cli", "records-sender", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", sport, "--n", n, "--pace-ms", pace_ms, "--body", 656,
              *(["--nodelay"] if nodelay else []))
    wait_all([cli, srv])
    finish(caps)
    _, ferr = stop(fwd)
    recs = load(f"{name}.srv.json")["records"]
    h2b = [r["header_to_body_ms"] for r in recs]
    # A record that is not held has header and body arriving together (~0 ms). Held
    # behind a quick ACK it takes one path RTT; held behind a late (delayed) ACK it takes
    # the ACK delay plus the RTT. Stall = more than RTT + STALL_EXCESS_MS.
    stalled = [v for v in h2b if v - PATH_RTT_MS >= STALL_EXCESS_MS]
    delack = round(statistics.median(stalled) - PATH_RTT_MS, 1) if stalled else None
    return h2b, len(stalled), delack, ferr.strip()


def records_bulk_netns():
    name = "records_bulk_netns"
    h2b, n, delack, _ = records(name, 40003, 100)
    sidecar(name, n, "client" if n else None, f"{CLI_IP}:40003" if n else None, delack,
            "client", {"client": "on", "server": "on"},
            "Seed 003 shape on Linux. Sender 10.99.1.1:40003 writes records as "
            "write(96 B header); write(656 B body), one record every 100 ms, to a receiver "
            "10.99.1.2:8000 that only reads, through the forwarder (5 ms one-way). Captured on "
            "the sender's veth. Observed on Linux 6.18: each header leaves alone, the body is "
            "held by Nagle, but the receiver (which never sends data, so never enters "
            "interactive/pingpong mode) ACKs the header at once, so the body is held one path "
            "RTT (~10 ms), not a delayed-ACK time: 0 delayed-ACK stalls. Unpaced records "
            "coalesce into full segments and do not stall either (see README). Counted from "
            "the receiver's header->body arrival log.", header_to_body_ms=h2b,
            pace_ms=100, path_rtt_ms=PATH_RTT_MS)


def records_bulk_win200_netns():
    name = "records_bulk_win200_netns"
    extra = 190.0
    h2b, n, delack, ferr = records(name, 40013, 500, ("--ack-extra-b2a", str(extra)))
    sidecar(name, n, "client" if n else None, f"{CLI_IP}:40013" if n else None, delack,
            "client", {"client": "on", "server": "on"},
            "As records_bulk_netns (one record every 500 ms) but the forwarder holds every "
            "pure ACK of the receiver for an extra 190 ms, emulating a ~200 ms (Windows/AIX-"
            "like) delayed-ACK timer as seen by the Linux sender. The Linux receiver itself "
            "ACKs at once (see records_bulk_netns), so the whole ACK delay is the forwarder's. "
            "Every header leaves alone and every 656 B body waits ~200 ms for its ACK. "
            "peer_delayed_ack_ms = receiver-side ACK delay (header_to_body minus the 10 ms path "
            "RTT). Counted from the receiver's header->body arrival log.",
            header_to_body_ms=h2b, pace_ms=500, forwarder_extra_pure_ack_ms=extra,
            path_rtt_ms=PATH_RTT_MS, forwarder_stats=ferr)


def neg_think_time_lo():
    name = "neg_think_time_lo"
    setup_lo()
    caps = captures([("nplo", "lo", f"{name}.pcap")])
    srv = app("nplo", "sink", f"{name}.srv.json", "--port", 8000, "--log-arrivals")
    time.sleep(0.2)
    cli = app("nplo", "oneway-client", f"{name}.cli.json", "--dst", LO_IP, "--port", 8000,
              "--sport", 40007, "--n", 20, "--size", 20, "--gap-ms", 100)
    wait_all([cli, srv])
    finish(caps)
    arr = load(f"{name}.srv.json")["arrivals_ms_len"]
    sends = load(f"{name}.cli.json")["send_at_ms_and_duration_ms"]
    gaps = [round(b[0] - a[0], 3) for a, b in zip(arr, arr[1:])]
    sidecar(name, 0, None, None, None, "loopback", {"client": "on", "server": "on"},
            "Client sends a 20 B message every 100 ms (one write each), the server never "
            "replies. The server's delayed ACKs are late, but every message is written long "
            "after the previous one was acknowledged (think time), so nothing is held. Server "
            "arrival gaps stay ~100 ms.", arrival_gaps_ms=gaps, messages=len(arr))


def neg_rto_netns():
    name = "neg_rto_netns"
    drop = 12
    # Tail loss probe would repair a lone lost segment in ~2 RTT; turn it off on the client
    # so the loss is repaired by a real retransmission timeout (>= 200 ms).
    fwd = setup_path(("--drop-data-a2b", str(drop)), cli_sysctls=("net.ipv4.tcp_early_retrans=0",))
    caps = captures([("cli", "c0", f"{name}.pcap")])
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40008, "--n", 20, "--mode", "coalesced", "--nodelay")
    wait_all([cli, srv])
    finish(caps)
    _, ferr = stop(fwd)
    lat = load(f"{name}.cli.json")["latency_ms"]
    slow = [i for i, v in enumerate(lat) if v - min(lat) >= STALL_EXCESS_MS]
    sidecar(name, 0, None, None, None, "client", {"client": "off", "server": "on"},
            f"Request/response with one write per request and TCP_NODELAY on the client, "
            f"through the forwarder, which drops the client's {drop}th data segment. With tail "
            "loss probes disabled on the client (net.ipv4.tcp_early_retrans=0) the segment is "
            "resent after a retransmission timeout (>= 200 ms). One slow request, not a "
            "Nagle stall: the resent segment is old sequence space.",
            latency_ms=lat, slow_requests=slow, forwarder_stats=ferr)


def neg_zero_window_netns():
    name = "neg_zero_window_netns"
    fwd = setup_path()
    caps = captures([("cli", "c0", f"{name}.pcap")])
    srv = app("srv", "sink", f"{name}.srv.json", "--port", 8000, "--rcvbuf", 4096,
              "--readsize", 2048, "--pause-after", 8192, "--pause-ms", 300)
    time.sleep(0.2)
    cli = app("cli", "bulk-sender", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40011, "--bytes", 60000, "--chunk", 4096)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    s, c = load(f"{name}.srv.json"), load(f"{name}.cli.json")
    sidecar(name, 0, None, None, None, "client", {"client": "on", "server": "on"},
            "Receiver with SO_RCVBUF=4096 (set on the listener) reads 2 KB at a time, stops "
            "reading for 300 ms after 8 KB; the sender (Nagle on, 4 KB writes, 60000 B) fills "
            "the window, gets a zero window, probes, and resumes on the window update. Not a "
            "Nagle stall.", receiver_pause=s["pause"],
            sender_writes_blocked_over_20ms=c["writes_blocked_over_20ms"],
            sender_total_ms=c["total_ms"])


def neg_bulk_cwnd_netns():
    name = "neg_bulk_cwnd_netns"
    fwd = setup_path()
    caps = captures([("cli", "c0", f"{name}.pcap", {"snaplen": 80})])
    srv = app("srv", "sink", f"{name}.srv.json", "--port", 8000)
    time.sleep(0.2)
    cli = app("cli", "bulk-sender", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40012, "--bytes", 1500000, "--chunk", 65536)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    c = load(f"{name}.cli.json")
    sidecar(name, 0, None, None, None, "client", {"client": "on", "server": "on"},
            "Bulk transfer of 1.5 MB in 64 KB writes through the forwarder (10 ms RTT), "
            "captured with snaplen 80 (headers only) to stay small. Slow start / cwnd-limited "
            "rounds: the held segments are full-sized, not a Nagle stall.",
            snaplen=80, sender_total_ms=c["total_ms"], bytes=1500000)


def neg_nodelay_split_netns():
    name = "neg_nodelay_split_netns"
    fwd = setup_path()
    caps = captures([("cli", "c0", f"{name}.pcap")])
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40005, "--n", 20, "--mode", "split", "--nodelay")
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    lat = load(f"{name}.cli.json")["latency_ms"]
    n, _, base = classify(lat, PATH_RTT_MS)
    sidecar(name, n, None, None, None, "client", {"client": "off", "server": "on"},
            "Split writes (6 B + 7 B) with TCP_NODELAY on the client, through the forwarder "
            "(10 ms RTT): the body leaves right behind the head, both unacknowledged; request "
            "latency ~ one RTT. No stall; proves Nagle off on the client.", latency_ms=lat)


SCENARIOS = {f.__name__: f for f in (
    echo_split_lo, echo_nodelay_lo, echo_coalesced_lo, confirm_netns, proxy_any,
    records_bulk_netns, records_bulk_win200_netns, server_split_lo, neg_think_time_lo,
    neg_rto_netns, neg_zero_window_netns, neg_bulk_cwnd_netns, neg_nodelay_split_netns,
    neg_quickack_lo)}


def main():
    if os.geteuid() != 0:
        sys.exit("run as root (namespaces, tcpdump)")
    names = sys.argv[1:] or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            sys.exit(f"unknown scenario {n}; choose from {', '.join(SCENARIOS)}")
    try:
        for n in names:
            print(f"== {n}", flush=True)
            SCENARIOS[n]()
            teardown()
    finally:
        teardown()
        print(f"app logs kept in {LOGDIR}")


if __name__ == "__main__":
    main()
