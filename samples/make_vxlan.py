#!/usr/bin/env python3
"""Regenerate vxlan_underlay.pcap / vxlan_overlay.pcap: real stalled traffic in a kernel VXLAN
tunnel, captured on the underlay and on the overlay interface in the same run.

Run as root from the repository root:

    sudo python3 samples/make_vxlan.py

Topology (namespaces created fresh, always deleted):

    vxa [u0 10.99.7.1/24] <-veth-> [u1 10.99.7.2/24] vxb            (underlay)
    vxa [vx0 10.99.8.1/24] ==== VXLAN VNI 42, UDP 4789 ==== [vx0 10.99.8.2/24] vxb  (overlay)

The echo client (vxa, 10.99.8.1:40060, split writes, 20 requests) talks to the line echo
server (vxb, 10.99.8.2:8000) through the tunnel: the body waits for the server's delayed
ACK of the head, as in echo_split_lo. `tcpdump -i u0` sees the VXLAN packets (outer
Ethernet/IPv4/UDP/VXLAN, inner Ethernet/IPv4/TCP); `tcpdump -i vx0` the same segments
unwrapped. Offloads are off on the veths and the VXLAN devices. Ground truth from the
client's latency log, as make_samples.py computes it.
"""
import sys

import make_samples as m

NS = ("vxa", "vxb")
NAME = "vxlan"
SPORT = 40060


def teardown():
    existing = m.run("ip", "netns", "list", check=False).stdout
    for ns in NS:
        if any(line.split()[0] == ns for line in existing.splitlines() if line.strip()):
            m.run("ip", "netns", "del", ns, check=False)


def setup():
    teardown()
    for ns in NS:
        m.new_ns(ns)
    m.run(*m.nsx("vxa", "ip", "link", "add", "u0", "type", "veth", "peer", "name", "u1",
                 "netns", "vxb"))
    for ns, dev, ip, peer, inner in (("vxa", "u0", "10.99.7.1", "10.99.7.2", "10.99.8.1"),
                                     ("vxb", "u1", "10.99.7.2", "10.99.7.1", "10.99.8.2")):
        m.run(*m.nsx(ns, "ip", "addr", "add", f"{ip}/24", "dev", dev))
        m.offloads_off(ns, dev)
        m.run(*m.nsx(ns, "ip", "link", "set", dev, "up"))
        m.run(*m.nsx(ns, "ip", "link", "add", "vx0", "type", "vxlan", "id", "42", "remote",
                     peer, "local", ip, "dstport", "4789", "dev", dev))
        m.run(*m.nsx(ns, "ip", "addr", "add", f"{inner}/24", "dev", "vx0"))
        m.offloads_off(ns, "vx0")
        m.run(*m.nsx(ns, "ip", "link", "set", "vx0", "up"))
    # permanent neighbours on both layers: no ARP in the captures
    mac = {}
    for ns, dev in (("vxa", "u0"), ("vxb", "u1"), ("vxa", "vx0"), ("vxb", "vx0")):
        mac[ns, dev] = m.json.loads(m.run(*m.nsx(ns, "ip", "-j", "link", "show", dev)).stdout
                                    )[0]["address"]
    for ns, dev, ip, other in (("vxa", "u0", "10.99.7.2", ("vxb", "u1")),
                               ("vxb", "u1", "10.99.7.1", ("vxa", "u0")),
                               ("vxa", "vx0", "10.99.8.2", ("vxb", "vx0")),
                               ("vxb", "vx0", "10.99.8.1", ("vxa", "vx0"))):
        m.run(*m.nsx(ns, "ip", "neigh", "replace", ip, "lladdr", mac[other], "dev", dev,
                     "nud", "permanent"))


def main():
    try:
        setup()
        caps = m.captures([("vxa", "u0", f"{NAME}_underlay.pcap"),
                           ("vxa", "vx0", f"{NAME}_overlay.pcap")])
        srv = m.app("vxb", "echo-server", f"{NAME}.srv.json", "--port", 8000)
        m.time.sleep(0.2)
        cli = m.app("vxa", "echo-client", f"{NAME}.cli.json", "--dst", "10.99.8.2", "--port",
                    8000, "--sport", SPORT, "--n", 20, "--mode", "split")
        m.wait_all([cli, srv])
        m.finish(caps)
        lat = m.load(f"{NAME}.cli.json")["latency_ms"]
        n, delack, base = m.classify(lat)
        for where, notes in (
                ("underlay", "Captured on the underlay veth u0: every TCP segment inside "
                 "Ethernet/IPv4/UDP 4789/VXLAN VNI 42 between VTEPs 10.99.7.1 and 10.99.7.2, "
                 "made by the kernel's vxlan driver."),
                ("overlay", "Captured on the VXLAN device vx0 itself: the same segments as "
                 "vxlan_underlay.pcap, unwrapped.")):
            m.sidecar(f"{NAME}_{where}", n, "client" if n else None,
                      f"10.99.8.1:{SPORT}" if n else None, delack, "client",
                      {"client": "on", "server": "on"},
                      "Client write('hello ') + write('world\\r\\n') then read, 20 times, "
                      "through a kernel VXLAN tunnel between two namespaces; the body waits "
                      "for the server's delayed ACK. " + notes
                      + " Same run as the other vxlan_* capture. Count from the client's "
                      "per-request latency log.", latency_ms=lat,
                      app_log="client per-request latency (time.monotonic_ns)")
    finally:
        for p in list(m.PROCS):
            try:
                m.stop(p, m.signal.SIGKILL, 2)
            except Exception:
                pass
        teardown()


if __name__ == "__main__":
    sys.exit(main())
