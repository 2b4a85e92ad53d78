#!/usr/bin/env python3
"""Real captures of a CLASSIC-Nagle sender (RFC 896) for nagleprobe, with ground truth.

Run as root from the repository root:

    sudo python3 samples/classic/make_classic.py                 # all scenarios
    sudo python3 samples/classic/make_classic.py classic_bulk_tap  # some of them

The classic sender is ``npclassic`` (samples/classic/src/main.rs), a TCP client on the
smoltcp 0.12 userspace stack attached to a TAP device; smoltcp's Nagle test holds a
sub-MSS segment while *any* data is unacknowledged (see samples/README.md). Its peer is a
real Linux kernel socket (samples/classic/peer.py). Needs cargo (the crate is built with
``cargo build --release`` if the binary is missing or older than its source), iproute2
(ip netns, ip tuntap, veth), tcpdump, ethtool.

Topologies; every name starts with ``npc`` so nothing collides with make_samples.py
(nplo/cli/mid/srv). Namespaces are created fresh per scenario and always deleted.

* tap: namespace ``npcl`` with TAP ``npctap0`` (kernel side 10.98.1.2/24, the Linux peer);
  npclassic owns the other end of the TAP as 10.98.1.1 (MAC 02:00:00:00:00:01). Capture on
  npctap0: both endpoints are on this wire, path RTT ~0.
* path: ``npcm`` holds TAP ``npctap1`` (npclassic, 10.98.2.1) and veth ``npcv1``; the
  Linux peer is in ``npcs`` on ``npcv0`` 10.98.2.2/24. samples/forwarder.py in npcm bridges
  npctap1 <-> npcv1 with 5 ms one-way (10 ms RTT) and optionally holds the peer's pure
  ACKs longer (--ack-extra-b2a). Capture on npctap1 (the classic sender's wire).

Ground truth (``samples/<name>.expected.json``) comes only from the applications' own
timing logs (npclassic: std::time::Instant; peer.py: time.monotonic_ns), never from
nagleprobe. Same stall rule as make_samples.py: a message is stalled when it took
>= 25 ms more than the fastest (records over a path: more than RTT + 25 ms);
peer_delayed_ack_ms = median excess minus the path RTT.
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

HERE = Path(__file__).resolve().parent          # samples/classic
SAMPLES = HERE.parent                            # samples
BIN = HERE / "target" / "release" / "npclassic"
PEER = str(HERE / "peer.py")
FWD = str(SAMPLES / "forwarder.py")
PY = sys.executable or "python3"
ALL_NS = ["npcl", "npcm", "npcs"]
CLASSIC_MAC = "02:00:00:00:00:01"
TAP_CLI, TAP_SRV = "10.98.1.1", "10.98.1.2"
PATH_CLI, PATH_SRV = "10.98.2.1", "10.98.2.2"
ONE_WAY_MS = 5.0
PATH_RTT_MS = 2 * ONE_WAY_MS
STALL_EXCESS_MS = 25.0
MSS = 1460
RCVBUF = 65536  # bulk receiver's SO_RCVBUF: no autotuning, see classic_bulk_tap
# The machine is shared (2 cores, other developers' test runs): the apps and the forwarder
# run SCHED_FIFO so their wake-ups are not delayed by that load. They sleep in select()/recv().
RT = ["chrt", "-f", "10"] if shutil.which("chrt") else []
LOGDIR = Path(tempfile.mkdtemp(prefix="nagleprobe-classic-"))
PROCS = []


def run(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r


def nsx(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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


def build():
    srcs = [HERE / "Cargo.toml", HERE / "Cargo.lock", *sorted((HERE / "src").glob("*.rs"))]
    newest = max(s.stat().st_mtime for s in srcs if s.exists())
    if not BIN.exists() or BIN.stat().st_mtime < newest:
        run("cargo", "build", "--release", "--locked", "--manifest-path", str(HERE / "Cargo.toml"))


# ------------------------------------------------------------------ namespaces
def teardown():
    for p in list(PROCS):
        try:
            stop(p, signal.SIGKILL, 2)
        except Exception:
            pass
    existing = run("ip", "netns", "list", check=False).stdout.split()
    for ns in ALL_NS:
        if ns in existing:
            run("ip", "netns", "del", ns, check=False)


def new_ns(ns):
    run("ip", "netns", "add", ns)
    run(*nsx(ns, "ip", "link", "set", "lo", "up"))
    for k in ("all", "default"):
        run(*nsx(ns, "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1"), check=False)


def offloads_off(ns, dev):
    if shutil.which("ethtool"):
        run(*nsx(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"),
            check=False)


def setup_tap():
    """npcl: TAP npctap0, kernel side 10.98.1.2 (Linux peer), npclassic on the other end."""
    teardown()
    new_ns("npcl")
    run(*nsx("npcl", "ip", "tuntap", "add", "dev", "npctap0", "mode", "tap"))
    offloads_off("npcl", "npctap0")
    run(*nsx("npcl", "ip", "addr", "add", f"{TAP_SRV}/24", "dev", "npctap0"))
    run(*nsx("npcl", "ip", "link", "set", "npctap0", "up"))
    # no ARP from the Linux side (smoltcp itself ARPs once, before the SYN)
    run(*nsx("npcl", "ip", "neigh", "replace", TAP_CLI, "lladdr", CLASSIC_MAC, "dev", "npctap0",
             "nud", "permanent"))


def setup_path(fwd_args=()):
    """npcm: TAP npctap1 (npclassic) <-forwarder-> veth npcv1 | npcv0 10.98.2.2 in npcs."""
    teardown()
    new_ns("npcm")
    new_ns("npcs")
    run(*nsx("npcm", "ip", "tuntap", "add", "dev", "npctap1", "mode", "tap"))
    run(*nsx("npcm", "ip", "link", "add", "npcv1", "type", "veth", "peer", "name", "npcv0",
             "netns", "npcs"))
    run(*nsx("npcs", "ip", "addr", "add", f"{PATH_SRV}/24", "dev", "npcv0"))
    for ns, dev in (("npcm", "npctap1"), ("npcm", "npcv1"), ("npcs", "npcv0")):
        offloads_off(ns, dev)
        run(*nsx(ns, "ip", "link", "set", dev, "up"))
    for dev in ("npctap1", "npcv1"):
        run(*nsx("npcm", "ip", "link", "set", dev, "promisc", "on"))
    run(*nsx("npcs", "ip", "neigh", "replace", PATH_CLI, "lladdr", CLASSIC_MAC, "dev", "npcv0",
             "nud", "permanent"))
    fwd = start(nsx("npcm", *RT, PY, FWD, "--a", "npctap1", "--b", "npcv1", "--delay-ms",
                    str(ONE_WAY_MS), *fwd_args))
    time.sleep(0.3)
    return fwd


# ------------------------------------------------------------------ capture
class Capture:
    def __init__(self, ns, iface, name):
        self.path = SAMPLES / name
        self.p = start(nsx(ns, "tcpdump", "-Z", "root", "--immediate-mode", "-i", iface, "-s",
                           "0", "-U", "-nn", "-w", str(self.path)))

    def wait_ready(self):
        seen = []
        for _ in range(5):
            line = self.p.stderr.readline()
            seen.append(line.strip())
            if "listening on" in line:
                return
            if not line:
                break
        raise RuntimeError(f"tcpdump did not start: {seen}")

    def stop(self):
        stop(self.p, signal.SIGINT)
        os.chmod(self.path, 0o644)


def capture(ns, iface, name):
    c = Capture(ns, iface, name)
    c.wait_ready()
    time.sleep(0.3)
    return c


def peer(ns, cmd, log, *args):
    return start(nsx(ns, *RT, PY, PEER, cmd, "--log", str(LOGDIR / log), *map(str, args)))


def wait_listen(ns, port=8000, timeout=5.0):
    """Wait until the Linux peer listens (a fixed sleep lost the race once: RST to the SYN)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if run(*nsx(ns, "ss", "-Hltn", f"sport = :{port}"), check=False).stdout.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on :{port} in {ns}")


def classic(ns, log, *args):
    return start(nsx(ns, *RT, str(BIN), "--log", str(LOGDIR / log), *map(str, args)))


def wait_all(procs, timeout=60):
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"timed out: {p.args}")
        _, err = p.communicate()
        if p in PROCS:
            PROCS.remove(p)
        if p.returncode != 0:
            raise RuntimeError(f"failed {p.args}: {err}")


def load(log):
    with open(LOGDIR / log) as f:
        return json.load(f)


# ------------------------------------------------------------------ ground truth
def classify(values_ms, path_rtt_ms=0.0):
    """(stalls, delayed-ACK estimate, fastest, stalled indexes): stalled = >= 25 ms above the
    fastest; the estimate is the median excess of the stalled ones minus the path RTT."""
    base = min(values_ms)
    excess = [v - base for v in values_ms]
    idx = [i for i, e in enumerate(excess) if e >= STALL_EXCESS_MS]
    if not idx:
        return 0, None, base, []
    return len(idx), round(statistics.median(excess[i] for i in idx) - path_rtt_ms, 1), base, idx


def sidecar(name, stalls, held_side, held_endpoint, delack, vantage, nagle, flavour, notes,
            **extra):
    doc = {"capture": f"{name}.pcap", "stalls": stalls, "held_side": held_side,
           "held_endpoint": held_endpoint, "peer_delayed_ack_ms": delack, "vantage": vantage,
           "nagle": nagle, "nagle_flavour": flavour, "notes": notes, "real_capture": True}
    doc.update(extra)
    with open(SAMPLES / f"{name}.expected.json", "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"{name}: stalls={stalls} held={held_side} {held_endpoint} delack={delack}")


STACK = ("npclassic (samples/classic, smoltcp 0.12.0 userspace TCP on a TAP device, classic "
         "RFC 896 Nagle: a sub-MSS segment waits while any data is unacknowledged; its own "
         "delayed ACK 10 ms)")


def flavour(nagle_on):
    return {"client": "classic" if nagle_on else "off", "server": "unknown"}


# ------------------------------------------------------------------ scenarios
def reqresp_tap(name, sport, mode, nagle_on):
    """fulltail / small request-response over the TAP, Linux peer in npcl."""
    setup_tap()
    cap = capture("npcl", "npctap0", f"{name}.pcap")
    if mode == "fulltail":
        srv = peer("npcl", "msg-server", f"{name}.srv.json", "--host", TAP_SRV, "--port", 8000,
                   "--size", MSS + 100, "--reply", 64)
    else:
        srv = peer("npcl", "echo-server", f"{name}.srv.json", "--host", TAP_SRV, "--port", 8000)
    wait_listen("npcl")
    cli = classic("npcl", f"{name}.cli.json", "--tap", "npctap0", "--ip", f"{TAP_CLI}/24",
                  "--dst", TAP_SRV, "--port", 8000, "--sport", sport, "--mode", mode,
                  "--n", 20, "--msg", MSS + 100, "--reply", 64,
                  "--nagle", "on" if nagle_on else "off")
    wait_all([cli, srv])
    time.sleep(0.5)
    cap.stop()
    c, s = load(f"{name}.cli.json"), load(f"{name}.srv.json")
    return c, s


def classic_fulltail_tap():
    name, sport = "classic_fulltail_tap", 40100
    c, s = reqresp_tap(name, sport, "fulltail", True)
    n, delack, base, idx = classify(c["latency_ms"])
    n_srv, _, _, idx_srv = classify(s["first_to_last_byte_ms"])
    assert n == n_srv and idx == idx_srv, (idx, idx_srv)
    sidecar(name, n, "client" if n else None, f"{TAP_CLI}:{sport}" if n else None, delack,
            "client", {"client": "on", "server": "on"}, flavour(True),
            f"Classic-Nagle sender {STACK} -> Linux kernel socket 10.98.1.2:8000 on the TAP's "
            "kernel side (captured on the TAP: both ends on this wire, path RTT ~0). 20 "
            f"requests, each ONE send of {MSS + 100} B = one full {MSS} B segment + a 100 B "
            "tail; the Linux server reads the whole message and replies 64 B. The tail is held "
            "while the lone full segment is unacknowledged (classic rule; Linux's Minshall rule "
            "would send it) and leaves right after the Linux receiver's delayed ACK of that "
            "segment. The first request is fast: a fresh Linux connection quick-ACKs. Counted "
            "from the client's per-request latency log; the server's first->last byte log "
            "gives the same stalled requests.",
            stalled_requests=idx, latency_ms=c["latency_ms"],
            server_first_to_last_byte_ms=s["first_to_last_byte_ms"],
            server_recv_sizes_per_message=s["recv_sizes_per_message"],
            fastest_ms=base, path_rtt_ms=0.0, mss=MSS, message_bytes=MSS + 100,
            client_write_at_ms=c["write_at_ms"], client_ack_delay_ms=c["ack_delay_ms"],
            app_log="client per-request latency (std::time::Instant) and server first/last "
                    "byte of each message (time.monotonic_ns)")


def classic_fulltail_nonagle_tap():
    name, sport = "classic_fulltail_nonagle_tap", 40103
    c, s = reqresp_tap(name, sport, "fulltail", False)
    n, _, base, idx = classify(c["latency_ms"])
    sidecar(name, n, None, None, None, "client", {"client": "off", "server": "on"},
            flavour(False),
            "Negative of classic_fulltail_tap: same 20 requests of one full segment + 100 B "
            "tail, but smoltcp's Nagle is switched off (set_nagle_enabled(false), smoltcp's "
            "equivalent of TCP_NODELAY): the tail leaves right behind the unacknowledged "
            "full segment, nothing waits for the delayed ACK. Counted from the client's "
            "latency log (and the server's first->last byte log).",
            stalled_requests=idx, latency_ms=c["latency_ms"],
            server_first_to_last_byte_ms=s["first_to_last_byte_ms"],
            server_recv_sizes_per_message=s["recv_sizes_per_message"], fastest_ms=base,
            client_ack_delay_ms=c["ack_delay_ms"])


def classic_small_tap():
    name, sport = "classic_small_tap", 40102
    c, s = reqresp_tap(name, sport, "small", True)
    n, delack, base, idx = classify(c["latency_ms"])
    n_srv, _, _, idx_srv = classify(s["first_to_last_byte_ms"])
    assert n == n_srv and idx == idx_srv, (idx, idx_srv)
    sidecar(name, n, "client" if n else None, f"{TAP_CLI}:{sport}" if n else None, delack,
            "client", {"client": "on", "server": "on"}, flavour(True),
            f"Classic-Nagle sender {STACK}: write 'hello ' (6 B, leaves at once), write "
            "'world\\r\\n' (7 B), read the 13 B echo from a Linux line-echo server on the TAP's "
            "kernel side; 20 requests (the shape of echo_split_lo). Here S1 is small, so the "
            "classic and Minshall rules agree: the body waits for the server's delayed ACK of "
            "the head. First request fast (quick-ack start). Counted from the client's latency "
            "log; the server's head->end-of-line log gives the same requests.",
            stalled_requests=idx, latency_ms=c["latency_ms"],
            server_first_to_last_byte_ms=s["first_to_last_byte_ms"], fastest_ms=base,
            path_rtt_ms=0.0, client_ack_delay_ms=c["ack_delay_ms"])


def classic_small_nonagle_tap():
    name, sport = "classic_small_nonagle_tap", 40104
    c, s = reqresp_tap(name, sport, "small", False)
    n, _, base, idx = classify(c["latency_ms"])
    sidecar(name, n, None, None, None, "client", {"client": "off", "server": "on"},
            flavour(False),
            "Negative of classic_small_tap: 6 B + 7 B writes with smoltcp's Nagle off: the "
            "body leaves while the head is unacknowledged (proves Nagle off), no stall.",
            stalled_requests=idx, latency_ms=c["latency_ms"],
            server_first_to_last_byte_ms=s["first_to_last_byte_ms"], fastest_ms=base,
            client_ack_delay_ms=c["ack_delay_ms"])


def bulk(name, sport, sizes, cycles, pace_ms, path=False, fwd_args=(), quickack=False, rcvbuf=0,
         link_mbps=0):
    if path:
        fwd = setup_path(fwd_args)
        ns_c, ns_s, tap, cli_ip, srv_ip = "npcm", "npcs", "npctap1", PATH_CLI, PATH_SRV
    else:
        fwd = None
        setup_tap()
        ns_c, ns_s, tap, cli_ip, srv_ip = "npcl", "npcl", "npctap0", TAP_CLI, TAP_SRV
    cap = capture(ns_c, tap, f"{name}.pcap")
    srv = peer(ns_s, "records-receiver", f"{name}.srv.json", "--host", srv_ip, "--port", 8000,
               *(["--quickack"] if quickack else []), "--rcvbuf", rcvbuf)
    wait_listen(ns_s)
    cli = classic(ns_c, f"{name}.cli.json", "--tap", tap, "--ip", f"{cli_ip}/24", "--dst",
                  srv_ip, "--port", 8000, "--sport", sport, "--mode", "bulk", "--sizes",
                  ",".join(map(str, sizes)), "--cycles", cycles, "--mss", MSS, "--tail", 100,
                  "--pace-ms", pace_ms, "--link-mbps", link_mbps)
    wait_all([cli, srv])
    time.sleep(0.5)
    cap.stop()
    ferr = stop(fwd)[1].strip() if fwd else None
    return load(f"{name}.cli.json"), load(f"{name}.srv.json"), ferr


def bulk_tap(name, sport, link_mbps):
    c, s, _ = bulk(name, sport, (1, 3, 5), 7, 100, rcvbuf=RCVBUF, link_mbps=link_mbps)
    recs = s["records"]
    f2l = [r["first_to_last_byte_ms"] for r in recs]
    ks = [(r["bytes"] - 100) // MSS for r in recs]
    # the stall rule per record size: a record is stalled when its first->last byte time is
    # >= 25 ms above the fastest record of the same k (a k = 5 record takes ~6 ms to cross a
    # 10 Mbit/s link even when nothing is held)
    base = {k: min(v for v, kk in zip(f2l, ks) if kk == k) for k in set(ks)}
    excess = [v - base[k] for v, k in zip(f2l, ks)]
    idx = [i for i, e in enumerate(excess) if e >= STALL_EXCESS_MS]
    n = len(idx)
    delack = round(statistics.median(excess[i] for i in idx), 1) if idx else None
    by_k = {}
    for i, k in enumerate(ks):
        by_k.setdefault(str(k), [0, 0])
        by_k[str(k)][0] += 1
        by_k[str(k)][1] += i in idx
    if link_mbps:
        link = (f"npclassic paces its frames as a {link_mbps} Mbit/s link would (it sleeps each "
                "frame's serialization time after handing it to the TAP: ~1.2 ms per full "
                "frame), so the segments of a record reach Linux spaced, the reader drains "
                "them as they come, Linux ACKs every second full segment and the last (odd) "
                "one is lone: its ACK is delayed and the classic sender holds the tail until "
                "then, for k = 1, 3 and 5 alike.")
    else:
        link = ("Frames leave back to back (no link rate): the k = 3 and k = 5 bursts reach "
                "Linux within ~20 us and the reader drains a whole burst in one recv(); "
                "Linux then ACKs all of it at once from the read (more than one MSS unACKed), "
                "so the 'odd last segment' is not lone and those tails are not held by a "
                "delayed ACK; the k = 1 records stall. See classic_bulk_10mbit_tap for the same "
                "records on a 10 Mbit/s-paced link.")
    sidecar(name, n, "client" if n else None, f"{TAP_CLI}:{sport}" if n else None, delack,
            "client", {"client": "on", "server": "on"}, flavour(True),
            f"Classic-Nagle bulk sender {STACK} -> Linux receiver 10.98.1.2:8000 that only "
            f"reads (SO_RCVBUF {RCVBUF}: fixed buffer; with autotuning, Linux ACKs every "
            "segment at once while its window grows). TAP, path RTT ~0. Records of k full "
            "1460 B segments + a 100 B tail, each ONE send, k cycling 1, 3, 5 (7 cycles, 21 "
            "records), one record every 100 ms. " + link + " The first records are not held "
            "long: a fresh Linux connection quick-ACKs. Counted from the receiver's "
            "first->last byte log per record (stalled: >= 25 ms above the fastest record of the "
            "same k); per_k = {k: [records, stalled]}.",
            stalled_records=idx, per_k=by_k, first_to_last_byte_ms=f2l,
            record_bytes=[r["bytes"] for r in recs],
            receiver_recv_sizes=[r["recv_sizes"] for r in recs],
            fastest_ms_per_k={str(k): v for k, v in sorted(base.items())},
            path_rtt_ms=0.0, pace_ms=100, link_mbps=link_mbps or None, receiver_rcvbuf=RCVBUF,
            sender_write_to_all_acked_ms=c["write_to_all_acked_ms"],
            client_ack_delay_ms=c["ack_delay_ms"])


def classic_bulk_tap():
    bulk_tap("classic_bulk_tap", 40101, 0)


def classic_bulk_10mbit_tap():
    bulk_tap("classic_bulk_10mbit_tap", 40106, 10)


def classic_bulk_win200_netns():
    name, sport = "classic_bulk_win200_netns", 40105
    extra = 190.0
    c, s, ferr = bulk(name, sport, (1, 3, 5), 7, 500, path=True,
                      fwd_args=("--ack-extra-b2a", str(extra)), quickack=True)
    recs = s["records"]
    f2l = [r["first_to_last_byte_ms"] for r in recs]
    # as make_samples.records(): not held ~0; held behind a quick ACK ~RTT; behind a late ACK
    # ACK delay + RTT. Stall = more than RTT + 25 ms.
    idx = [i for i, v in enumerate(f2l) if v - PATH_RTT_MS >= STALL_EXCESS_MS]
    delack = round(statistics.median(f2l[i] for i in idx) - PATH_RTT_MS, 1) if idx else None
    sidecar(name, len(idx), "client" if idx else None, f"{PATH_CLI}:{sport}" if idx else None,
            delack, "client", {"client": "on", "server": "on"}, flavour(True),
            f"Seed-003 shape: classic-Nagle bulk sender {STACK} (Windows-like) -> a receiver "
            "with a ~200 ms delayed ACK. The receiver is a Linux socket at 10.98.2.2:8000 in "
            "another namespace that only reads, with TCP_QUICKACK re-armed around every "
            "recv() so the kernel ACKs every segment at once; samples/forwarder.py between the "
            "TAP and the receiver's veth (5 ms one-way, 10 ms RTT) holds every pure ACK of the "
            "receiver 190 ms more, so the whole ~200 ms ACK delay is the emulated peer timer "
            "(as records_bulk_win200_netns). Records of k = 1, 3, 5 full 1460 B segments + a "
            "100 B tail, one send each, one record every 500 ms, 21 records. Every tail waits "
            "for the late ACK of the last full segment. Captured on the TAP (sender's wire). "
            "peer_delayed_ack_ms = median(first->last byte) minus the 10 ms RTT. Counted from "
            "the receiver's first->last byte log.",
            stalled_records=idx, first_to_last_byte_ms=f2l,
            record_bytes=[r["bytes"] for r in recs],
            receiver_recv_sizes=[r["recv_sizes"] for r in recs], pace_ms=500,
            forwarder_extra_pure_ack_ms=extra, path_rtt_ms=PATH_RTT_MS,
            sender_write_to_all_acked_ms=c["write_to_all_acked_ms"],
            client_ack_delay_ms=c["ack_delay_ms"], forwarder_stats=ferr)


SCENARIOS = {f.__name__: f for f in (
    classic_fulltail_tap, classic_bulk_tap, classic_bulk_10mbit_tap, classic_small_tap, classic_fulltail_nonagle_tap,
    classic_small_nonagle_tap, classic_bulk_win200_netns)}


def main():
    if os.geteuid() != 0:
        sys.exit("run as root (namespaces, TAP, tcpdump)")
    names = sys.argv[1:] or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            sys.exit(f"unknown scenario {n}; choose from {', '.join(SCENARIOS)}")
    build()
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
