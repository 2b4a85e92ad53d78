#!/usr/bin/env python3
"""Userspace L2 bridge with per-direction delay, used to build the netns samples.

Runs inside the middle namespace (``mid``) and bridges ethernet frames between two
veth ends with raw AF_PACKET sockets (ARP is bridged too, so the endpoints simply
share one /24). The kernel has no netem, so this is how delay and loss are made.

    forwarder.py --a c1 --b s1 [--mid m1:m2] --delay-ms 5
        [--drop-data-a2b N]        drop the Nth TCP data segment (payload > 0) going a -> b
        [--ack-extra-b2a MS]       delay pure ACKs (no payload, no SYN/FIN/RST) going
                                   b -> a by MS more (emulates a slower delayed-ACK timer
                                   of the host behind b)
        [--ack-extra-a2b MS]       the same for pure ACKs going a -> b (the client's),
                                   until a FIN goes a -> b (the closing ACKs would
                                   otherwise come after the connection closed)

``a`` is the client side, ``b`` the server side. Stops on SIGTERM/SIGINT and prints
counters as JSON on stderr.
"""
import argparse
import heapq
import json
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def tcp_info(frame):
    """(payload_len, flags) of an IPv4/TCP ethernet frame, or None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6 or len(ip) < ihl + 20:
        return None
    total = struct.unpack("!H", ip[2:4])[0]
    tcp = ip[ihl:]
    doff = (tcp[12] >> 4) * 4
    flags = tcp[13]
    return total - ihl - doff, flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--mid", default="",
                    help="M1:M2, a veth pair inside mid: bridge a<->M1 and M2<->b, half the "
                         "delay on each hop, so a capture on M1 sits in the middle of the path")
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--drop-data-a2b", type=int, default=0)
    ap.add_argument("--ack-extra-b2a", type=float, default=0.0)
    ap.add_argument("--ack-extra-a2b", type=float, default=0.0)
    args = ap.parse_args()

    socks = {}
    names = [args.a, args.b]
    peer = {args.a: args.b, args.b: args.a}
    hop = 1.0
    if args.mid:
        m1, m2 = args.mid.split(":")
        names += [m1, m2]
        peer = {args.a: m1, m1: args.a, m2: args.b, args.b: m2}
        hop = 0.5
    for name in names:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind((name, 0))
        s.setblocking(False)
        socks[name] = s
    delay = hop * args.delay_ms / 1000.0
    extra = args.ack_extra_b2a / 1000.0
    extra_a2b = args.ack_extra_a2b / 1000.0
    stats = {"a2b": 0, "b2a": 0, "dropped": [], "acks_extra_delayed": 0}
    data_a2b = 0
    queue = []  # (release_time, seq, out_iface, frame)
    seq = 0
    running = [True]

    def stop(*_):
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    fds = {s.fileno(): name for name, s in socks.items()}

    while running[0]:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, frame = heapq.heappop(queue)
            try:
                socks[out].send(frame)
            except OSError as e:
                print(f"send on {out} failed: {e}", file=sys.stderr)
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else 0.2
        try:
            ready, _, _ = select.select(list(fds), [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd in ready:
            name = fds[fd]
            s = socks[name]
            while True:
                try:
                    frame, addr = s.recvfrom(65535)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue
                release = now + delay
                info = tcp_info(frame)
                if name == args.a:  # counted/dropped once, on the client-side hop
                    stats["a2b"] += 1
                    if info and info[1] & 0x01:  # FIN: the close is not held
                        extra_a2b = 0.0
                    if extra_a2b and info and info[0] == 0 and not (info[1] & 0x07):
                        release += extra_a2b
                        stats["acks_extra_delayed"] += 1
                    if info and info[0] > 0:
                        data_a2b += 1
                        if data_a2b == args.drop_data_a2b:
                            stats["dropped"].append(data_a2b)
                            continue
                elif name == args.b:  # held once, on the server-side hop
                    stats["b2a"] += 1
                    if extra and info and info[0] == 0 and not (info[1] & 0x07):
                        release += extra
                        stats["acks_extra_delayed"] += 1
                seq += 1
                heapq.heappush(queue, (release, seq, peer[name], frame))
    # flush what is still queued
    for _, _, out, frame in sorted(queue):
        try:
            socks[out].send(frame)
        except OSError:
            pass
    print(json.dumps(stats), file=sys.stderr)


if __name__ == "__main__":
    main()
