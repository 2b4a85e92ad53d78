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


def setup_path(fwd_args=(), cli_sysctls=(), one_way_ms=ONE_WAY_MS, rt=False):
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
    # rt: SCHED_FIFO for the forwarder (it blocks in select, never spins), so the other
    # jobs on this shared 2-core machine do not add jitter to the path delay
    fwd = start(nsx("mid", *(RT if rt else ()), PY, FWD, "--a", "c1", "--b", "s1", "--mid", "m1:m2", "--delay-ms", str(one_way_ms),
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
    def __init__(self, ns, iface, name, snaplen=0, linktype=None, bpf=None, bufsize_kb=None):
        self.path = HERE / name
        # --immediate-mode: without it packets still in the ring buffer's open block (up to
        # 1 s of traffic) are lost when tcpdump is stopped
        cmd = ["tcpdump", "-Z", "root", "--immediate-mode", "-i", iface, "-s", str(snaplen), "-U",
               "-nn", "-w", str(self.path)]
        if linktype:
            cmd += ["-y", linktype]
        if bufsize_kb:
            # with --immediate-mode each ring slot holds a whole snaplen (256 KB for "any",
            # which has no MTU): the default 2 MB ring has ~8 slots and tcpdump -i any on
            # the bridge dropped 26 of 214 packets ("dropped by kernel"). Issue-12 captures
            # use a 64 MB ring.
            cmd += ["-B", str(bufsize_kb)]
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


CAPTURE_STATS = {}  # capture file name -> tcpdump's closing counters (received / dropped)


def finish(caps):
    time.sleep(0.5)
    for c in caps:
        err = c.stop()
        CAPTURE_STATS[c.path.name] = " ".join(
            l.strip() for l in err.splitlines() if "packets" in l)
        os.chmod(c.path, 0o644)


RT = ("chrt", "-f", "10")


def app(ns, cmd, log, *args, rt=False):
    return start(nsx(ns, *(RT if rt else ()), PY, APPS, cmd, "--log", str(LOGDIR / log),
                     *map(str, args)))


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
    if f"{name}.pcap" in CAPTURE_STATS and "tcpdump_stats" not in doc:
        doc["tcpdump_stats"] = CAPTURE_STATS[f"{name}.pcap"]
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
                relay={"held_flow": f"{LO_IP}:40014 -> {LO_IP}:8002",
                       "upstream_flow": f"{LO_IP}:40004 -> {LO_IP}:8001", "split": "at-relay"},
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


def neg_window_full_netns():
    name = "neg_window_full_netns"
    rcvbuf, gap_ms, total = 2048, 100, 20 * 1448 + 376  # 20 full segments and a 376 B tail
    setup_bridge()
    caps = captures([("cli", "c0", f"{name}.pcap")])
    srv = app("srv", "sink", f"{name}.srv.json", "--port", 8000, "--rcvbuf", rcvbuf,
              "--readsize", 1448, "--read-gap-ms", gap_ms, "--log-arrivals", rt=True)
    time.sleep(0.2)
    cli = app("cli", "bulk-sender", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40032, "--bytes", total, "--chunk", total, rt=True)
    wait_all([cli, srv])
    finish(caps)
    s, c = load(f"{name}.srv.json"), load(f"{name}.cli.json")
    sidecar(name, 0, None, None, None, "client", {"client": "on", "server": "on"},
            f"Window-limited bulk, not Nagle. Two namespaces joined by a kernel bridge (no "
            f"delay). The receiver (SO_RCVBUF={rcvbuf} on the listener: a window of at most "
            f"1448 B) reads 1448 B, then sleeps {gap_ms} ms, every time; the sender (Linux, "
            f"Nagle on: Minshall's rule, which never holds a tail behind a full segment) "
            f"writes {total} B in one send. Each full segment fills the offered window, so "
            "the next segment (724 B as the window reopens half way, and the final 376 B "
            "tail) leaves the moment the receiver's late ACK opens the window: held by the "
            "window, not by Nagle.", receiver_rcvbuf=rcvbuf, receiver_read_gap_ms=gap_ms,
            receiver_arrivals_ms_len=s["arrivals_ms_len"], sender_total_ms=c["total_ms"],
            bytes=total, nagle_flavour={"client": "minshall", "server": "unknown"})


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


# ------------------------------------------------------------------ issue 12
# Long paths (80 / 200 ms RTT) captured at three points, long-path negatives, tcpdump -i any
# through a bridge (every frame twice), handshake-less excerpts, a proxy on its own host and
# a three-hop proxy chain. Same rules: ground truth from the apps' logs and the setup.
BR_IP = "10.99.1.2"
PX_CLI_IP, PX_IP_C, PX_IP_B, DB_IP = "10.99.1.1", "10.99.1.254", "10.99.2.254", "10.99.2.2"
BIG = {"bufsize_kb": 65536}  # tcpdump -B: see Capture
VANTAGES = {"client": ("cli", "c0", "client veth c0 in cli"),
            "server": ("srv", "s0", "server veth s0 in srv"),
            "middle": ("mid", "m1", "veth m1 in mid, half the path (one-way/2) from each side")}


def three_point(name, which=("client", "server", "middle")):
    return [(VANTAGES[v][0], VANTAGES[v][1], f"{name}_{v}.pcap", BIG) for v in which]


def by_request(recvs, size):
    """Server recv log [[abs ms, len], ...] -> per request (first byte at, last byte at)."""
    out, got, first = [], 0, None
    for t, n in recvs:
        while n > 0:
            if first is None:
                first = t
            take = min(n, size - got)
            got += take
            n -= take
            if got == size:
                out.append((first, t))
                got, first = 0, None
    return out


def delack_cfg(lat, base, rtt):
    """Second estimate: median stalled latency - 2 x the configured RTT (a stalled request
    costs 2 RTT + the delayed ACK). The fastest request, the baseline of classify(), carries
    one-off app warm-up and forwarder jitter; this one carries the forwarder's ~1 ms per
    RTT instead."""
    st = [v for v in lat if v - base >= STALL_EXCESS_MS]
    return round(statistics.median(st) - 2 * rtt, 1) if st else None


def long_echo_split(rtt, sport, n):
    name = f"long_echo_split_rtt{rtt}"
    fwd = setup_path(one_way_ms=rtt / 2, rt=True)
    caps = captures(three_point(name))
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000, "--log-arrivals", rt=True)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", sport, "--n", n, "--mode", "split", "--log-arrivals", rt=True)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    c, s = load(f"{name}.cli.json"), load(f"{name}.srv.json")
    lat = c["latency_ms"]
    cnt, delack, base = classify(lat)  # the fastest request also pays the Nagle round trip
    arr = by_request(s["recv_at_abs_ms_len"], 13)
    gaps = [round(b - a, 3) for a, b in arr]  # head arrival -> body arrival at the server
    ack_delay_srv = [round(g - rtt, 1) for g in gaps]
    st = [d for d, v in zip(ack_delay_srv, lat) if v - base >= STALL_EXCESS_MS]
    for v in VANTAGES:
        sidecar(f"{name}_{v}", cnt, "client" if cnt else None,
                f"{CLI_IP}:{sport}" if cnt else None, delack, v,
                {"client": "on", "server": "on"},
                f"Long path, {rtt} ms RTT (forwarder {rtt / 2} ms one-way, {rtt / 4} ms per hop). "
                f"One run captured at three points at once ({VANTAGES[v][2]} for this file). "
                "Client write('hello ') + write('world\\r\\n') then read the echo, Nagle on, "
                f"{n} requests against a Linux echo server. Every request's body is held by "
                "Nagle until the ACK of the head: in quick-ack mode (first request(s)) that costs "
                "one RTT (request latency = 2 RTT = the fastest), otherwise the server delays "
                "that ACK and the request takes 2 RTT + the delayed ACK. So, unlike classify()'s "
                "use for confirm_netns, the path RTT is NOT subtracted: peer_delayed_ack_ms = "
                "median(latency - fastest) of the stalled requests. Cross-check from the "
                "server's own recv log: head->body arrival gap minus the path RTT "
                "(server_ack_delay_ms, same monotonic clock). A stalled request costs "
                "RTT + delayed ACK on the wire: at the client the pure ACK comes RTT+D after "
                "the head and the body leaves at once; at the server the ACK leaves D after the "
                "head arrives and the body arrives one RTT after the ACK; in the middle RTT/2+D "
                "and RTT/2. peer_delayed_ack_from_config_rtt_ms: median stalled latency - 2 x the "
                "configured RTT (the fastest request carries app warm-up and forwarder jitter "
                "of a few ms, so the estimates differ by a few ms).",
                latency_ms=lat, fastest_request_ms=base, path_rtt_ms=rtt,
                peer_delayed_ack_from_config_rtt_ms=delack_cfg(lat, base, rtt),
                server_head_to_body_ms=gaps, server_ack_delay_ms=ack_delay_srv,
                server_ack_delay_stalled_median_ms=round(statistics.median(st), 1) if st else None)


def long_echo_split_rtt80():
    long_echo_split(80, 40020, 20)


def long_echo_split_rtt200():
    long_echo_split(200, 40021, 10)


def long_server_split(rtt, sport, n):
    name = f"long_server_split_rtt{rtt}"
    fwd = setup_path(one_way_ms=rtt / 2, rt=True)
    caps = captures(three_point(name))
    srv = app("srv", "split-server", f"{name}.srv.json", "--port", 8000, rt=True)
    time.sleep(0.2)
    cli = app("cli", "req-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", sport, "--n", n, rt=True)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    lat = load(f"{name}.cli.json")["latency_ms"]
    cnt, delack, base = classify(lat)
    for v in VANTAGES:
        sidecar(f"{name}_{v}", cnt, "server" if cnt else None,
                f"{SRV_IP}:8000" if cnt else None, delack, v,
                {"client": "on", "server": "on"},
                f"Long path, {rtt} ms RTT (forwarder {rtt / 2} ms one-way). One run captured at "
                f"three points at once ({VANTAGES[v][2]} for this file). Client sends a 32 B "
                "request in one write and reads 50 B; the server replies write(20 B header); "
                f"write(30 B body), {n} requests. The body is held until the client's ACK of the "
                "header: one RTT when the client is in quick-ack mode (fastest request = 2 RTT), "
                "RTT + the client's delayed ACK otherwise. peer_delayed_ack_ms = median(latency "
                "- fastest) of the stalled requests (path RTT not subtracted, the fastest "
                "request already contains it). Counted from the client's latency log. "
                "peer_delayed_ack_from_config_rtt_ms: median stalled latency - 2 x the "
                "configured RTT (the fastest request carries app warm-up and forwarder jitter "
                "of a few ms, so the two estimates differ by a few ms).",
                latency_ms=lat, fastest_request_ms=base, path_rtt_ms=rtt,
                peer_delayed_ack_from_config_rtt_ms=delack_cfg(lat, base, rtt))


def long_server_split_rtt80():
    long_server_split(80, 40022, 20)


def long_server_split_rtt200():
    long_server_split(200, 40023, 10)


def neg_nodelay_split_rtt200():
    name = "neg_nodelay_split_rtt200"
    rtt = 200
    fwd = setup_path(one_way_ms=rtt / 2, rt=True)
    caps = captures([("cli", "c0", f"{name}.pcap", BIG)])
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000, "--log-arrivals", rt=True)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40024, "--n", 10, "--mode", "split", "--nodelay", "--log-arrivals", rt=True)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    c, s = load(f"{name}.cli.json"), load(f"{name}.srv.json")
    lat = c["latency_ms"]
    arr = by_request(s["recv_at_abs_ms_len"], 13)
    gaps = [round(b - a, 3) for a, b in arr]
    sidecar(name, 0, None, None, None, "client", {"client": "off", "server": "on"},
            "Split writes (6 B + 7 B) with TCP_NODELAY on the client over a 200 ms RTT path "
            "(forwarder 100 ms one-way), 10 requests, captured on the client veth c0. The body "
            "leaves right behind the head while the head is unacknowledged (proves Nagle off); "
            "request latency ~ one RTT; the server receives head and body together "
            "(server_head_to_body_ms ~ 0). No stall, no Nagle hold.",
            latency_ms=lat, server_head_to_body_ms=gaps, path_rtt_ms=rtt, stalls_note="0 by construction",
            nagle_holds=0)


def neg_think_quickack_rtt80():
    name = "neg_think_quickack_rtt80"
    rtt, one_way = 80, 40.0
    think = "40,45,50,55,60"
    fwd = setup_path(one_way_ms=one_way, rt=True)
    caps = captures(three_point(name, ("client", "server")))
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000, "--quickack",
              "--log-arrivals", rt=True)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40025, "--n", 20, "--mode", "split", "--think-ms", think,
              "--log-arrivals", rt=True)
    wait_all([cli, srv])
    finish(caps)
    stop(fwd)
    c, s = load(f"{name}.cli.json"), load(f"{name}.srv.json")
    arr = by_request(s["recv_at_abs_ms_len"], 13)
    per = []
    for (th, tb), (ah, ab), tk in zip(c["write_at_abs_ms"], arr, c["think_ms"]):
        # not held: the body arrives one-way after its write; held: it waits for the ACK of
        # the head, which comes back one RTT after the head was written
        extra = round(ab - tb - one_way, 1)
        per.append({"think_ms": tk, "head_write_to_body_write_ms": round(tb - th, 3),
                    "server_head_to_body_ms": round(ab - ah, 3),
                    "body_arrival_minus_write_minus_one_way_ms": extra,
                    "held": extra >= 10.0})
    holds = sum(p["held"] for p in per)
    for v in ("client", "server"):
        sidecar(f"{name}_{v}", 0, None, None, None, v, {"client": "on", "server": "on"},
                "Negative: Nagle holds but no delayed-ACK stall. 80 ms RTT path (forwarder 40 ms "
                f"one-way), one run captured at client veth c0 and server veth s0 ({v} here). "
                f"Client write('hello '), sleeps {think} ms (cycled) of think time, "
                "write('world\\r\\n'), reads the echo; Nagle on. The echo server sets TCP_QUICKACK "
                "before and after every recv, so it ACKs the head at once; that ACK is back at "
                "the client one RTT (80 ms) after the head, later than the body write, so Nagle "
                "holds the body until the prompt ACK: a Nagle hold of RTT - think (20-40 ms), "
                "never a late ACK. nagle_holds counts the requests whose body reached the "
                "server >= 10 ms later than one-way after its write (from the apps' logs, same "
                "monotonic clock); per_request has the raw timings.",
                nagle_holds=holds, per_request=per, latency_ms=c["latency_ms"], path_rtt_ms=rtt,
                one_way_ms=one_way)


def setup_bridge():
    """cli [c0] <-veth-> [c1] mid (bridge br0: c1, s1) [s1] <-veth-> [s0] srv, no delay."""
    teardown()
    for ns in ("cli", "mid", "srv"):
        new_ns(ns)
    run(*nsx("cli", "ip", "link", "add", "c0", "type", "veth", "peer", "name", "c1",
             "netns", "mid"))
    run(*nsx("srv", "ip", "link", "add", "s0", "type", "veth", "peer", "name", "s1",
             "netns", "mid"))
    run(*nsx("cli", "ip", "addr", "add", f"{CLI_IP}/24", "dev", "c0"))
    run(*nsx("srv", "ip", "addr", "add", f"{SRV_IP}/24", "dev", "s0"))
    run(*nsx("mid", "ip", "link", "add", "br0", "type", "bridge"))
    for dev in ("c1", "s1"):
        run(*nsx("mid", "ip", "link", "set", dev, "master", "br0"))
    for ns, dev in (("cli", "c0"), ("mid", "c1"), ("mid", "s1"), ("srv", "s0"), ("mid", "br0")):
        offloads_off(ns, dev)
        run(*nsx(ns, "ip", "link", "set", dev, "up"))
    mac = {ns: json.loads(run(*nsx(ns, "ip", "-j", "link", "show", dev)).stdout)[0]["address"]
           for ns, dev in (("cli", "c0"), ("srv", "s0"))}
    run(*nsx("cli", "ip", "neigh", "replace", SRV_IP, "lladdr", mac["srv"], "dev", "c0",
             "nud", "permanent"))
    run(*nsx("srv", "ip", "neigh", "replace", CLI_IP, "lladdr", mac["cli"], "dev", "s0",
             "nud", "permanent"))
    time.sleep(1.0)  # bridge ports forwarding (no STP, forward delay applies only with STP)


def pcap_records(path):
    """(linktype, [(ts, bytes)]) of a classic pcap, read here with struct (not nagleprobe)."""
    import struct
    data = Path(path).read_bytes()
    magic = data[:4]
    e = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    lt = struct.unpack(e + "I", data[20:24])[0]
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(e + "IIII", data[off:off + 16])
        out.append((sec + frac / (1e9 if nano else 1e6), data[off + 16:off + 16 + incl]))
        off += 16 + incl
    return lt, out


def bridge_any():
    name = "bridge_any"
    setup_bridge()
    tmp_c1, tmp_s1 = LOGDIR / f"{name}.c1.pcap", LOGDIR / f"{name}.s1.pcap"
    caps = captures([("mid", "any", f"{name}.pcap", {"linktype": "LINUX_SLL2", **BIG}),
                     ("mid", "c1", tmp_c1, BIG), ("mid", "s1", tmp_s1, BIG)])
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000, rt=True)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", 40026, "--n", 20, "--mode", "split", rt=True)
    wait_all([cli, srv])
    finish(caps)
    lat = load(f"{name}.cli.json")["latency_ms"]
    n, delack, base = classify(lat)
    # duplicates, two independent ways: (1) the file itself: SLL2 header (20 B) stripped,
    # the same IP packet bytes seen again = a second copy; (2) per-port captures taken at
    # the same time on c1 and s1
    lt, recs = pcap_records(HERE / f"{name}.pcap")
    assert lt == 276, lt  # LINUX_SLL2
    seen, dups, ifidx = {}, 0, {}
    for ts, b in recs:
        idx = int.from_bytes(b[4:8], "big")
        ifidx[idx] = ifidx.get(idx, 0) + 1
        key = b[20:]
        if key in seen:
            dups += 1
            seen[key].append(ts)
        else:
            seen[key] = [ts]
    spread = [round((v[1] - v[0]) * 1e6, 1) for v in seen.values() if len(v) == 2]
    n_c1, n_s1 = len(pcap_records(tmp_c1)[1]), len(pcap_records(tmp_s1)[1])
    sidecar(name, n, "client" if n else None, f"{CLI_IP}:40026" if n else None, delack,
            "middle (tcpdump -i any in the bridge namespace)", {"client": "on", "server": "on"},
            "tcpdump -i any (LINUX_SLL2) in namespace mid, where a Linux bridge br0 joins the "
            "veth ports c1 (to the client 10.99.1.1 in cli) and s1 (to the server 10.99.1.2 in "
            "srv); no delay, no forwarder. Every frame is captured twice: on the ingress port "
            "(In) and on the egress port (Out), microseconds apart; the bridge device itself "
            "does not see forwarded frames. Split-write echo (6 B + 7 B, Nagle on, Linux server "
            "delayed ACK), 20 requests. Stalls counted from the client's latency log. "
            "duplicates = frames whose IP packet (bytes after the 20 B SLL2 header) already "
            "appeared earlier in the file, counted by make_samples.py's own pcap reader; "
            "cross-checked with per-port captures of c1 and s1 taken at the same time "
            "(frames_c1, frames_s1).",
            latency_ms=lat, duplicates=dups, frames_total=len(recs), frames_unique=len(seen),
            frames_by_sll2_ifindex={str(k): v for k, v in sorted(ifidx.items())},
            frames_c1=n_c1, frames_s1=n_s1,
            duplicate_copy_gap_us={"min": min(spread), "median": statistics.median(spread),
                                   "max": max(spread)} if spread else None,
            link_type="LINUX_SLL2",
            tcpdump_stats={k: CAPTURE_STATS.get(k) for k in
                           (f"{name}.pcap", tmp_c1.name, tmp_s1.name)})


def setup_proxy_hosts():
    """cli [c0 10.99.1.1] <-> [c1 10.99.1.254] mid (proxy) [s1 10.99.2.254] <-> [s0 10.99.2.2] srv."""
    teardown()
    for ns in ("cli", "mid", "srv"):
        new_ns(ns)
    run(*nsx("cli", "ip", "link", "add", "c0", "type", "veth", "peer", "name", "c1",
             "netns", "mid"))
    run(*nsx("srv", "ip", "link", "add", "s0", "type", "veth", "peer", "name", "s1",
             "netns", "mid"))
    for ns, dev, ip in (("cli", "c0", PX_CLI_IP), ("mid", "c1", PX_IP_C), ("mid", "s1", PX_IP_B),
                        ("srv", "s0", DB_IP)):
        run(*nsx(ns, "ip", "addr", "add", f"{ip}/24", "dev", dev))
        offloads_off(ns, dev)
        run(*nsx(ns, "ip", "link", "set", dev, "up"))
    mac = {(ns, dev): json.loads(run(*nsx(ns, "ip", "-j", "link", "show", dev)).stdout)[0]["address"]
           for ns, dev in (("cli", "c0"), ("mid", "c1"), ("mid", "s1"), ("srv", "s0"))}
    for ns, dev, ip, peer in (("cli", "c0", PX_IP_C, ("mid", "c1")), ("mid", "c1", PX_CLI_IP, ("cli", "c0")),
                              ("mid", "s1", DB_IP, ("srv", "s0")), ("srv", "s0", PX_IP_B, ("mid", "s1"))):
        run(*nsx(ns, "ip", "neigh", "replace", ip, "lladdr", mac[peer], "dev", dev, "nud",
                 "permanent"))


def proxy_netns_any():
    name = "proxy_netns_any"
    q = 296
    setup_proxy_hosts()
    caps = captures([("mid", "any", f"{name}.pcap", {"linktype": "LINUX_SLL2", **BIG})])
    be = app("srv", "backend", f"{name}.be.json", "--port", 8002, "--query", q, rt=True)
    time.sleep(0.2)
    px = app("mid", "proxy", f"{name}.px.json", "--port", 8001, "--backend-host", DB_IP,
             "--backend-port", 8002, "--sport", 40028, rt=True)
    time.sleep(0.2)
    cli = app("cli", "query-client", f"{name}.cli.json", "--dst", PX_IP_C, "--port", 8001,
              "--sport", 40027, "--n", 20, "--query", q, rt=True)
    wait_all([cli, px, be])
    finish(caps)
    lat = load(f"{name}.cli.json")["latency_ms"]
    be_log, px_log = load(f"{name}.be.json"), load(f"{name}.px.json")
    n, delack, base = classify(lat)
    n_be, _, _ = classify(be_log["first_to_last_byte_ms"])
    sidecar(name, n, "client" if n else None, f"{PX_IP_B}:40028" if n else None, delack,
            "proxy host (tcpdump -i any in the proxy's namespace)",
            {"client": "on", "server": "on"},
            "Seed 004 with the proxy on its own host: client 10.99.1.1:40027 (namespace cli) -> "
            "proxy 10.99.1.254:8001 (namespace mid); proxy 10.99.2.254:40028 -> DB-like "
            "backend 10.99.2.2:8002 (namespace srv); veth links, no delay. The client sends a "
            "296 B query in one write; the proxy reads with a 128-byte buffer and send()s each "
            "read at once (Nagle on): reads 128, 128, 40 -> the wire shows 128, then 168 after "
            "the backend's delayed ACK of the 128. Captured with tcpdump -i any (LINUX_SLL2) "
            "on the proxy host, as in the seed. Stalls are on the proxy->backend flow only; "
            "held side = the proxy as client of that flow. Counted from the client's latency "
            "log, confirmed by the backend's first-byte->last-byte log.",
            held_flow=f"{PX_IP_B}:40028 -> {DB_IP}:8002", latency_ms=lat,
            relay={"held_flow": f"{PX_IP_B}:40028 -> {DB_IP}:8002",
                   "upstream_flow": f"{PX_CLI_IP}:40027 -> {PX_IP_C}:8001", "split": "at-relay"},
            backend_first_to_last_byte_ms=be_log["first_to_last_byte_ms"], backend_stalls=n_be,
            proxy_read_sizes_first_6=px_log["client_read_sizes"][:6], query_bytes=q,
            link_type="LINUX_SLL2")


def chain3_lo():
    name = "chain3_lo"
    q = 296
    setup_lo()
    caps = captures([("nplo", "lo", f"{name}.pcap", BIG)])
    be = app("nplo", "backend", f"{name}.be.json", "--port", 8002, "--query", q, rt=True)
    time.sleep(0.2)
    p2 = app("nplo", "proxy", f"{name}.p2.json", "--port", 8003, "--backend-port", 8002,
             "--sport", 40031, "--read-size", 128, rt=True)
    time.sleep(0.2)
    p1 = app("nplo", "proxy", f"{name}.p1.json", "--port", 8001, "--backend-port", 8003,
             "--sport", 40030, "--whole", q, rt=True)
    time.sleep(0.2)
    cli = app("nplo", "query-client", f"{name}.cli.json", "--dst", LO_IP, "--port", 8001,
              "--sport", 40029, "--n", 20, "--query", q, rt=True)
    wait_all([cli, p1, p2, be])
    finish(caps)
    lat = load(f"{name}.cli.json")["latency_ms"]
    be_log, p1_log, p2_log = (load(f"{name}.{x}.json") for x in ("be", "p1", "p2"))
    n, delack, base = classify(lat)
    n_be, _, _ = classify(be_log["first_to_last_byte_ms"])
    held = f"{LO_IP}:40031 -> {LO_IP}:8002"
    sidecar(name, n, "client" if n else None, f"{LO_IP}:40031" if n else None, delack,
            "loopback", {"client": "on", "server": "on"},
            "Three-hop chain on loopback (namespace nplo, tcpdump -i lo sees all three flows): "
            "client 127.0.0.1:40029 -> proxy1 :8001; proxy1 127.0.0.1:40030 -> proxy2 :8003; "
            "proxy2 127.0.0.1:40031 -> backend :8002. Nagle on everywhere. proxy1 reads each "
            "296 B query whole and forwards it in one send(); proxy2 reads with a 128-byte "
            "buffer and sends each read at once (128, 128, 40 -> wire 128 + 168). Only the "
            "proxy2->backend flow stalls (the 168 wait for the backend's delayed ACK of the "
            "128); the query arrives at proxy2 in one segment and leaves split. Counted from the "
            "client's latency log, confirmed by the backend's first->last byte log.",
            held_flow=held,
            relay={"held_flow": held, "upstream_flow": f"{LO_IP}:40030 -> {LO_IP}:8003",
                   "split": "at-relay"},
            latency_ms=lat, backend_first_to_last_byte_ms=be_log["first_to_last_byte_ms"],
            backend_stalls=n_be, proxy1_read_sizes_first_6=p1_log["client_read_sizes"][:6],
            proxy2_read_sizes_first_6=p2_log["client_read_sizes"][:6], query_bytes=q)


# ---------------------------------------------------------------- excerpts (editcap -r)
def tshark_rows(pcap):
    r = run("tshark", "-r", str(pcap), "-T", "fields", "-E", "separator=,", "-e", "frame.number",
            "-e", "frame.time_epoch", "-e", "ip.src", "-e", "tcp.srcport", "-e", "ip.dst",
            "-e", "tcp.dstport", "-e", "tcp.len", "-e", "tcp.flags.syn", "-e", "tcp.flags.fin")
    rows = []
    for line in r.stdout.splitlines():
        f = line.split(",")
        rows.append({"no": int(f[0]), "t": float(f[1]), "src": f"{f[2]}:{f[3]}",
                     "dst": f"{f[4]}:{f[5]}", "len": int(f[6] or 0),
                     "syn": f[7] in ("1", "True"), "fin": f[8] in ("1", "True")})
    return rows


def stall_frames(rows, sender, receiver, first_len, pick):
    """Per message of sender -> receiver: (small segment, last pure ACK of receiver before the
    released segment, released segment) frame numbers. A message starts with a segment of
    first_len bytes; pick(rows_after) returns the released segment's row."""
    out = []
    for i, r in enumerate(rows):
        if r["src"] == sender and r["dst"] == receiver and r["len"] == first_len:
            rel = pick(rows[i + 1:])
            if rel is None:
                continue
            acks = [x for x in rows[i + 1:rel["no"] - rows[0]["no"]]
                    if x["src"] == receiver and x["dst"] == sender and x["len"] == 0
                    and not x["syn"] and not x["fin"]]
            out.append((r["no"], acks[-1]["no"] if acks else None, rel["no"]))
    return out


def cut(src, dst_name, first, last, doc):
    dst = HERE / f"{dst_name}.pcap"
    # -F pcap: the file is what its name says (editcap writes pcapng by default)
    run("editcap", "-F", "pcap", "-r", str(HERE / src), str(dst), f"{first}-{last}")
    os.chmod(dst, 0o644)
    rows = tshark_rows(dst)
    assert 3 <= len(rows) <= 8, len(rows)
    has_syn = any(r["syn"] for r in rows)
    doc = dict(doc)
    doc.update({"excerpt_of": src, "frames": f"{first}-{last}", "packets": len(rows),
                "roles": "known" if has_syn else "guessed"})
    stalls = doc.pop("stalls")
    sidecar(dst_name, stalls, doc.pop("held_side"), doc.pop("held_endpoint"),
            doc.pop("peer_delayed_ack_ms"), doc.pop("vantage"), doc.pop("nagle"),
            doc.pop("notes"), **doc)


def excerpt(src_pcap, dst_name, sender, receiver, first_len, rel_len, request, stalled_flags,
            truth, before=1, after=1, note=""):
    rows = tshark_rows(HERE / src_pcap)
    pick = lambda rest: next((x for x in rest if x["src"] == sender and x["dst"] == receiver
                              and x["len"] == rel_len), None)
    frames = stall_frames(rows, sender, receiver, first_len, pick)
    assert len(frames) == len(stalled_flags), (len(frames), len(stalled_flags))
    h, a, b = frames[request]
    assert stalled_flags[request]
    first, last = h - before, b + after
    inside = [f for f, st in zip(frames, stalled_flags)
              if st and f[1] is not None and first <= min(f) and max(f) <= last]
    doc = {"stalls": len(inside), "held_side": truth["held_side"],
           "held_endpoint": truth["held_endpoint"],
           "peer_delayed_ack_ms": truth["peer_delayed_ack_ms"], "vantage": truth["vantage"],
           "nagle": truth["nagle"],
           "notes": f"Excerpt without a handshake, cut with editcap -r from {src_pcap} "
                    f"(frames {first}-{last} of the source, renumbered from 1 here): request "
                    f"#{request} (0-based) of the source run, stalled by the source's truth "
                    "(its app logs). stalls = stalled requests of the source whose small segment, "
                    "late pure ACK and released segment are all inside the excerpt. Source "
                    "frames of the stall: small segment, pure ACK, released segment = "
                    f"{h}, {a}, {b}. Roles (client/server) must be guessed: no SYN. " + note,
           "stall_source_frames": [h, a, b],
           "stall_excerpt_frames": [h - first + 1, a - first + 1, b - first + 1],
           "source_request": request}
    cut(src_pcap, dst_name, first, last, doc)


def excerpts():
    """Needs long_echo_split_rtt80 and proxy_netns_any to have been made (echo_split_lo exists)."""
    def truth(name):
        return json.loads((HERE / f"{name}.expected.json").read_text())

    def flags(lat):
        return [v - min(lat) >= STALL_EXCESS_MS for v in lat]

    # 1. long path, client vantage
    t = truth("long_echo_split_rtt80_client")
    excerpt("long_echo_split_rtt80_client.pcap", "excerpt_long_echo_rtt80", f"{CLI_IP}:40020",
            f"{SRV_IP}:8000", 6, 7, 10, flags(t["latency_ms"]), t, after=2,
            note="80 ms RTT path, captured at the client: the pure ACK comes RTT + delayed ACK "
                 "after the small segment.")
    # 2. loopback echo
    t = truth("echo_split_lo")
    excerpt("echo_split_lo.pcap", "excerpt_echo_split_lo", f"{LO_IP}:40000", f"{LO_IP}:8000",
            6, 7, 10, flags(t["latency_ms"]), t, after=2)
    # 3. seed-004-like proxy excerpt: query in, 128 out, proxy ACK to client, DB ACK, 168 out
    src = "proxy_netns_any.pcap"
    t = truth("proxy_netns_any")
    rows = tshark_rows(HERE / src)
    cl, px_c, px_b, db = (f"{PX_CLI_IP}:40027", f"{PX_IP_C}:8001", f"{PX_IP_B}:40028",
                          f"{DB_IP}:8002")
    queries = [r for r in rows if r["src"] == cl and r["dst"] == px_c and r["len"] == 296]
    stalled = flags(t["latency_ms"])
    assert len(queries) == len(stalled)
    byno = {r["no"]: r for r in rows}
    cand, all_stalls = [], []
    for k, qr in enumerate(queries):
        nxt = [r for r in rows if r["no"] > qr["no"]]
        s128 = next(r for r in nxt if r["src"] == px_b and r["dst"] == db)
        rel = next(r for r in nxt if r["src"] == px_b and r["dst"] == db and r["no"] > s128["no"])
        acks = [r for r in rows if s128["no"] < r["no"] < rel["no"] and r["src"] == db
                and r["len"] == 0]
        all_stalls.append((stalled[k], s128["no"], acks[-1]["no"] if acks else None, rel["no"]))
        if not stalled[k] or s128["len"] != 128 or rel["len"] != 168 or not acks:
            continue
        span = [byno[i] for i in range(qr["no"], rel["no"] + 1)]
        shape = [(r["src"], r["dst"], r["len"]) for r in span]
        want = [(cl, px_c, 296), (px_b, db, 128), (px_c, cl, 0), (db, px_b, 0), (px_b, db, 168)]
        cand.append((shape == want, k, qr["no"], s128["no"], acks[-1]["no"], rel["no"]))
    exact = [c for c in cand if c[0]]
    chosen = (exact or cand)[0]
    _, k, qn, s128n, ackn, reln = chosen
    first, last = qn, reln
    inside = [s for s in all_stalls if s[0] and s[2] and first <= s[1] and s[3] <= last]
    doc = {"stalls": len(inside), "held_side": t["held_side"], "held_endpoint": t["held_endpoint"],
           "peer_delayed_ack_ms": t["peer_delayed_ack_ms"], "vantage": t["vantage"],
           "nagle": t["nagle"], "held_flow": t["held_flow"],
           "notes": f"Seed-004-like excerpt without a handshake, cut with editcap -r from {src} "
                    f"(frames {first}-{last}), query #{k} (0-based) of that run, stalled by its "
                    "truth (client latency / backend first->last byte log). Shape as in seed 004: "
                    "client's 296 B query arrives at the proxy, proxy sends 128 B to the DB, "
                    "(proxy's ACK to the client), the DB's late pure ACK, the proxy sends the "
                    "remaining 168 B. "
                    + ("The 5 packets are in exactly the seed's order. " if chosen[0] else
                       "No query had exactly the seed's order; this is the first stalled one. ")
                    + "Roles must be guessed: no SYN.",
           "stall_source_frames": [s128n, ackn, reln],
           "stall_excerpt_frames": [s128n - first + 1, ackn - first + 1, reln - first + 1],
           "source_request": k, "seed_order_queries": [c[1] for c in exact],
           "link_type": "LINUX_SLL2"}
    cut(src, "excerpt_proxy_netns", first, last, doc)



def excerpt_proxy_lo():
    """Seed 004's five packets from proxy_any.pcap, where the proxy has one address (as in
    the seed: 10.67.15.212 both ways), so the excerpt can link the relay: query in, proxy's
    ACK, 128 out, the backend's late pure ACK, the rest out."""
    t = json.loads((HERE / "proxy_any.expected.json").read_text())
    flags = [v - min(t["latency_ms"]) >= STALL_EXCESS_MS for v in t["latency_ms"]]
    excerpt("proxy_any.pcap", "excerpt_proxy_lo", f"{LO_IP}:40014", f"{LO_IP}:8002", 128, 36,
            4, flags, t, before=2, after=0,
            note="The proxy reads with a 128-byte buffer; the 164 B query (frame 1 here) "
                 "arrived whole at the proxy and left as 128 + 36: the relay splits it.")
    side = HERE / "excerpt_proxy_lo.expected.json"
    doc = json.loads(side.read_text())
    doc["relay"] = {"held_flow": f"{LO_IP}:40014 -> {LO_IP}:8002",
                    "upstream_flow": f"{LO_IP}:40004 -> {LO_IP}:8001", "split": "at-relay"}
    side.write_text(json.dumps(doc, indent=2) + "\n")


# ------------------------------------------------ issue 30 item 6: the reaction window
def reaction_path(name, sport, one_way, think, gap, n, vantage, fwd_args=()):
    """Echo over a short netns path: write('hello '), sleep `think` ms, write('world'), read
    the echo, sleep `gap` ms; one run captured at `vantage`. Returns the apps' logs."""
    fwd = setup_path(fwd_args=fwd_args, one_way_ms=one_way, rt=True)
    caps = captures(three_point(name, (vantage,)))
    srv = app("srv", "echo-server", f"{name}.srv.json", "--port", 8000, "--log-arrivals", rt=True)
    time.sleep(0.2)
    cli = app("cli", "echo-client", f"{name}.cli.json", "--dst", SRV_IP, "--port", 8000,
              "--sport", sport, "--n", n, "--mode", "split", "--think-ms", think,
              "--gap-ms", gap, "--log-arrivals", rt=True)
    wait_all([cli, srv])
    finish(caps)
    _, ferr = stop(fwd)
    return load(f"{name}.cli.json"), load(f"{name}.srv.json"), ferr.strip()


def neg_think_reaction_netns():
    """A body written 320 ms after the head, on a 0.3 ms path, seen at the server: its
    delayed ACK of the head leaves ~40 ms after the head, the body arrives ~280 ms after
    it. Think time, never a release."""
    name, think, gap, one_way, extra = "neg_think_reaction_netns", 320, 500, 0.15, 400
    c, s, ferr = reaction_path(name, 40031, one_way, str(think), gap, 8, "server",
                               ("--ack-extra-a2b", str(extra)))
    writes = [round(b - a, 3) for a, b in c["write_at_abs_ms"]]
    arr = by_request(s["recv_at_abs_ms_len"], 13)
    sidecar(f"{name}_server", 0, None, None, None, "server", {"client": "on", "server": "on"},
            f"Issue 30 item 6 (a). 0.3 ms RTT path (forwarder {one_way} ms one-way), captured "
            "at the server veth s0. Client write('hello '), sleeps 320 ms (think time), "
            "write('world\\r\\n'), reads the echo, sleeps 500 ms; Nagle on, 8 requests. The "
            "server's delayed ACK of the head leaves ~40 ms after the head arrives, so every "
            "body is written ~280 ms after that ACK reached the client: nothing is held "
            "(head_write_to_body_write_ms from the client's log, server_head_to_body_ms from "
            f"the server's). The forwarder holds the client's pure ACKs {extra} ms until its "
            "FIN (--ack-extra-a2b), as a client with a slow delayed-ACK timer would, so at "
            "the server each echo's first ACK comes 400 ms late and the next request, which "
            "acknowledges it, 500 ms after it: the client's only turnarounds besides the "
            "handshake hold a delayed ACK or its think time.",
            head_write_to_body_write_ms=writes,
            server_head_to_body_ms=[round(b - a, 3) for a, b in arr],
            path_rtt_ms=2 * one_way, think_ms=think, gap_ms=gap,
            forwarder_extra_client_pure_ack_ms=extra, forwarder_stats=ferr)


def excerpt_reaction_netns():
    """Echo split over a 0.6 ms path seen at the server; the client waits 5 ms after each
    echo, so request/reply turnarounds (~5.6 ms) are the only round trips of an excerpt; cut
    around one stall: the body arrives ~0.6 ms after the server's late ACK."""
    name, one_way, gap = "reaction_netns", 0.3, 5
    c, s, _ = reaction_path(name, 40032, one_way, "", gap, 20, "server")
    lat = c["latency_ms"]
    n, delack, base = classify(lat)
    sidecar(f"{name}_server", n, "client" if n else None, f"{CLI_IP}:40032" if n else None,
            delack, "server", {"client": "on", "server": "on"},
            f"Issue 30 item 6 (b), the whole run. 0.6 ms RTT path (forwarder {one_way} ms "
            "one-way), captured at the server veth s0. Client write('hello ') + "
            "write('world\\r\\n'), reads the echo, sleeps 5 ms; 20 requests. Count from the "
            "client's per-request latency log.", latency_ms=lat, path_rtt_ms=2 * one_way,
            gap_ms=gap)
    t = json.loads((HERE / f"{name}_server.expected.json").read_text())
    excerpt(f"{name}_server.pcap", "excerpt_reaction_netns", f"{CLI_IP}:40032",
            f"{SRV_IP}:8000", 6, 7, 12, [v - min(lat) >= STALL_EXCESS_MS for v in lat], t,
            before=2, after=2,
            note="Seen at the receiver of the split request (the server): its pure ACK is "
                 "late, the body arrives one round trip after it (0.6 ms configured, 0.85 ms in the file). The excerpt's "
                 "only round-trip samples are request/reply turnarounds, which include the "
                 "client's 5 ms wait.")


SCENARIOS = {f.__name__: f for f in (
    echo_split_lo, echo_nodelay_lo, echo_coalesced_lo, confirm_netns, proxy_any,
    records_bulk_netns, records_bulk_win200_netns, server_split_lo, neg_think_time_lo,
    neg_rto_netns, neg_zero_window_netns, neg_window_full_netns, neg_bulk_cwnd_netns,
    neg_nodelay_split_netns, neg_quickack_lo,
    # issue 12 (excerpts needs long_echo_split_rtt80 and proxy_netns_any first)
    long_echo_split_rtt80, long_echo_split_rtt200, long_server_split_rtt80,
    long_server_split_rtt200, neg_nodelay_split_rtt200, neg_think_quickack_rtt80, bridge_any,
    proxy_netns_any, chain3_lo, excerpts, excerpt_proxy_lo,
    # issue 30 item 6
    neg_think_reaction_netns, excerpt_reaction_netns)}


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
