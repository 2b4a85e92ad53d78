#!/usr/bin/env python3
"""Client/server programs for the nagleprobe sample captures.

Every program is a real kernel TCP socket. Each one writes a JSON log (``--log``) with
its own application-level timings (time.monotonic_ns), which is where the ground truth
in ``<capture>.expected.json`` comes from.

    apps.py echo-server   --port 8000 [--nodelay] [--quickack] [--log-arrivals]
    apps.py echo-client   --dst IP --port 8000 --sport P --n 20 --mode split|coalesced [--nodelay]
                          [--think-ms 40,45,50 (sleep between the two writes, cycled)]
    apps.py confirm-server --port 8000            (TCP_NODELAY, replies 19 B per 30 B message)
    apps.py confirm-client --dst IP --port 8000 --sport P --n 20
    apps.py backend       --port 8002             (answers each 164 B query once complete)
    apps.py proxy         --port 8001 --backend-port 8002 --sport P   (recv(128) -> send)
                          [--backend-host IP] [--read-size 128] [--whole N (recv N, one send)]
    apps.py query-client  --dst IP --port 8001 --sport P --n 20 [--query 164]
    apps.py split-server  --port 8000             (reply = write(20 B header); write(30 B body))
    apps.py req-client    --dst IP --port 8000 --sport P --n 20
    apps.py records-receiver --port 8000          (reads 96 B header + body records)
    apps.py records-sender --dst IP --port 8000 --sport P --n 20 --pace-ms 100
    apps.py sink          --port 8000 [--rcvbuf B --pause-after N --pause-ms MS]
                          [--readsize B --read-gap-ms MS (sleep after every recv)]
    apps.py oneway-client --dst IP --port 8000 --sport P --n 20 --size 20 --gap-ms 100
    apps.py bulk-sender   --dst IP --port 8000 --sport P --bytes N --chunk C
"""
import argparse
import json
import socket
import struct
import time

NS = time.monotonic_ns


def ms(ns):
    return round(ns / 1e6, 3)


def log_write(path, obj):
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)


def listen(port, rcvbuf=0, host="0.0.0.0"):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    ls.bind((host, port))
    ls.listen(4)
    return ls


def connect(dst, port, sport, src="", nodelay=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if nodelay:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((src, sport))
    s.connect((dst, port))
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


# ---------------------------------------------------------------- echo (seeds 000/001)
def echo_server(a):
    ls = listen(a.port)
    c, peer = ls.accept()
    if a.nodelay:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    lines = 0
    quickacks = 0
    arrivals = []  # [absolute monotonic ms, bytes] per recv (same clock in every namespace)
    while True:
        if a.quickack:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        d = c.recv(4096)
        t = NS()
        if a.quickack:
            # re-arm after every recv: the kernel clears quick-ack mode by itself
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            quickacks += 1
        if not d:
            break
        if a.log_arrivals:
            arrivals.append([ms(t), len(d)])
        buf += d
        while b"\r\n" in buf:
            line, buf = buf.split(b"\r\n", 1)
            c.sendall(line + b"\r\n")
            lines += 1
    c.close()
    doc = {"role": "echo-server", "peer": list(peer), "lines": lines,
           "nodelay": a.nodelay, "quickack": a.quickack}
    if a.log_arrivals:
        doc["recv_at_abs_ms_len"] = arrivals
    log_write(a.log, doc)


def echo_client(a):
    s = connect(a.dst, a.port, a.sport, a.src, a.nodelay)
    head, body = b"hello ", b"world\r\n"
    lat = []
    writes = []  # [head write, body write] absolute monotonic ms, per request
    think = [float(x) for x in a.think_ms.split(",")] if a.think_ms else []
    for i in range(a.n):
        t0 = NS()
        if a.mode == "split":
            s.send(head)
            if think:  # application think time between the two writes
                time.sleep(think[i % len(think)] / 1000)
            t1 = NS()
            s.send(body)
            writes.append([ms(t0), ms(t1)])
        else:
            s.send(head + body)
        got = b""
        while not got.endswith(b"\r\n"):
            d = s.recv(4096)
            if not d:
                raise EOFError
            got += d
        lat.append(NS() - t0)
        if a.gap_ms:
            time.sleep(a.gap_ms / 1000)
    s.close()
    doc = {"role": "echo-client", "mode": a.mode, "nodelay": a.nodelay,
           "sport": a.sport, "latency_ms": [ms(x) for x in lat]}
    if think:
        doc["think_ms"] = [think[i % len(think)] for i in range(a.n)]
    if writes and (think or a.log_arrivals):
        doc["write_at_abs_ms"] = writes
    log_write(a.log, doc)


# ---------------------------------------------------------------- confirm (seed 002)
MSG, REPLY, CONFIRM = 30, 19, 12


def confirm_server(a):
    ls = listen(a.port)
    c, peer = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = 0
    try:
        while True:
            recv_exact(c, MSG)
            c.sendall(b"R" * (REPLY - 2) + b"\r\n")
            recv_exact(c, CONFIRM)
            n += 1
    except EOFError:
        pass
    c.close()
    log_write(a.log, {"role": "confirm-server", "rounds": n})


def confirm_client(a):
    s = connect(a.dst, a.port, a.sport, a.src)  # Nagle on (default)
    lat = []
    for i in range(a.n):
        t0 = NS()
        s.send(b"M" * (MSG - 2) + b"\r\n")
        recv_exact(s, REPLY)
        lat.append(NS() - t0)
        s.send(b"C" * (CONFIRM - 2) + b"\r\n")
    time.sleep(0.1)
    s.close()
    log_write(a.log, {"role": "confirm-client", "sport": a.sport,
                      "latency_ms": [ms(x) for x in lat]})


# ---------------------------------------------------------------- proxy (seed 004)
QUERY, ANSWER = 164, 64


def backend(a):
    ls = listen(a.port)
    c, peer = ls.accept()
    n = 0
    arrivals = []
    try:
        while True:
            t0 = None
            got = 0
            while got < a.query:
                d = c.recv(a.query - got)
                if not d:
                    raise EOFError
                if t0 is None:
                    t0 = NS()
                got += len(d)
            arrivals.append(ms(NS() - t0))  # first byte -> whole query
            c.sendall(b"A" * ANSWER)
            n += 1
    except EOFError:
        pass
    c.close()
    log_write(a.log, {"role": "backend", "queries": n, "peer": list(peer),
                      "first_to_last_byte_ms": arrivals})


def proxy(a):
    import select
    ls = listen(a.port)
    c, _ = ls.accept()
    b = connect(a.backend_host, a.backend_port, a.sport, a.src)  # Nagle on
    reads = []
    open_ = True
    while open_:
        r, _, _ = select.select([c, b], [], [])
        for s in r:
            if s is c:
                if a.whole:  # read one whole message, forward it in one send()
                    try:
                        d = recv_exact(c, a.whole)
                    except EOFError:
                        d = b""
                else:
                    d = c.recv(a.read_size)  # the proxy's small buffer (128 B)
                if not d:
                    open_ = False
                    break
                reads.append(len(d))
                b.send(d)  # forwarded at once, one send() per read
            else:
                d = b.recv(4096)
                if not d:
                    open_ = False
                    break
                c.sendall(d)
    b.close()
    c.close()
    log_write(a.log, {"role": "proxy", "sport": a.sport, "read_size": a.read_size,
                      "whole": a.whole, "client_read_sizes": reads})


def query_client(a):
    s = connect(a.dst, a.port, a.sport, a.src)
    lat = []
    for i in range(a.n):
        t0 = NS()
        s.send(b"Q" * a.query)
        recv_exact(s, ANSWER)
        lat.append(NS() - t0)
        if a.gap_ms:
            time.sleep(a.gap_ms / 1000)
    s.close()
    log_write(a.log, {"role": "query-client", "sport": a.sport,
                      "latency_ms": [ms(x) for x in lat]})


# ---------------------------------------------------------------- server-side split
REQ, HDR, BODY = 32, 20, 30


def split_server(a):
    ls = listen(a.port)
    c, peer = ls.accept()
    n = 0
    try:
        while True:
            recv_exact(c, REQ)
            c.send(b"H" * HDR)
            c.send(b"B" * BODY)
            n += 1
    except EOFError:
        pass
    c.close()
    log_write(a.log, {"role": "split-server", "replies": n})


def req_client(a):
    s = connect(a.dst, a.port, a.sport, a.src)
    lat = []
    for i in range(a.n):
        t0 = NS()
        s.send(b"q" * REQ)
        recv_exact(s, HDR + BODY)
        lat.append(NS() - t0)
    s.close()
    log_write(a.log, {"role": "req-client", "sport": a.sport,
                      "latency_ms": [ms(x) for x in lat]})


# ---------------------------------------------------------------- records (seed 003)
RHDR = 96


def records_receiver(a):
    ls = listen(a.port)
    c, peer = ls.accept()
    recs = []
    try:
        while True:
            h = recv_exact(c, RHDR)
            th = NS()
            blen = struct.unpack("!I", h[:4])[0]
            recv_exact(c, blen)
            tb = NS()
            recs.append({"header_at_ms": ms(th), "body_at_ms": ms(tb),
                         "header_to_body_ms": ms(tb - th)})
    except EOFError:
        pass
    c.close()
    log_write(a.log, {"role": "records-receiver", "records": recs})


def records_sender(a):
    s = connect(a.dst, a.port, a.sport, a.src, a.nodelay)
    writes = []
    for i in range(a.n):
        t0 = NS()
        s.send(struct.pack("!I", a.body) + b"h" * (RHDR - 4))
        s.send(b"b" * a.body)
        writes.append(ms(NS() - t0))
        if a.pace_ms:
            time.sleep(a.pace_ms / 1000)
    time.sleep(0.3)
    s.close()
    log_write(a.log, {"role": "records-sender", "sport": a.sport, "body": a.body,
                      "pace_ms": a.pace_ms, "write_pair_ms": writes})


# ---------------------------------------------------------------- sink / one-way / bulk
def sink(a):
    ls = listen(a.port, a.rcvbuf)
    c, peer = ls.accept()
    total = 0
    arrivals = []
    paused = None
    t_start = NS()
    while True:
        if a.pause_after and paused is None and total >= a.pause_after:
            t = NS()
            time.sleep(a.pause_ms / 1000)
            paused = {"at_byte": total, "at_ms": ms(t - t_start), "ms": ms(NS() - t)}
        d = c.recv(a.readsize)
        if not d:
            break
        total += len(d)
        if a.log_arrivals:
            arrivals.append([ms(NS() - t_start), len(d)])
        if a.read_gap_ms:  # a slow reader: the window opens only as fast as this
            time.sleep(a.read_gap_ms / 1000)
    c.close()
    log_write(a.log, {"role": "sink", "bytes": total, "rcvbuf": a.rcvbuf, "pause": paused,
                      "arrivals_ms_len": arrivals})


def oneway_client(a):
    s = connect(a.dst, a.port, a.sport, a.src)
    sends = []
    t_start = NS()
    for i in range(a.n):
        t0 = NS()
        s.send(b"m" * a.size)
        sends.append([ms(t0 - t_start), ms(NS() - t0)])
        time.sleep(a.gap_ms / 1000)
    s.close()
    log_write(a.log, {"role": "oneway-client", "sport": a.sport,
                      "send_at_ms_and_duration_ms": sends})


def bulk_sender(a):
    s = connect(a.dst, a.port, a.sport, a.src, a.nodelay)
    t0 = NS()
    left = a.bytes
    blocked = []
    while left > 0:
        n = min(a.chunk, left)
        t = NS()
        s.sendall(b"x" * n)
        d = NS() - t
        if d > 20e6:
            blocked.append([ms(t - t0), ms(d)])
        left -= n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    total = NS() - t0
    s.close()
    log_write(a.log, {"role": "bulk-sender", "sport": a.sport, "bytes": a.bytes,
                      "chunk": a.chunk, "total_ms": ms(total),
                      "writes_blocked_over_20ms": blocked})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--dst", default="127.0.0.1")
    ap.add_argument("--src", default="")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--sport", type=int, default=0)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--mode", default="split")
    ap.add_argument("--nodelay", action="store_true")
    ap.add_argument("--quickack", action="store_true")
    ap.add_argument("--gap-ms", type=float, default=0)
    ap.add_argument("--backend-host", default="127.0.0.1")
    ap.add_argument("--backend-port", type=int, default=8002)
    ap.add_argument("--pace-ms", type=float, default=0)
    ap.add_argument("--body", type=int, default=656)
    ap.add_argument("--size", type=int, default=20)
    ap.add_argument("--rcvbuf", type=int, default=0)
    ap.add_argument("--readsize", type=int, default=65536)
    ap.add_argument("--pause-after", type=int, default=0)
    ap.add_argument("--pause-ms", type=float, default=0)
    ap.add_argument("--log-arrivals", action="store_true")
    ap.add_argument("--read-gap-ms", type=float, default=0)
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--think-ms", default="", help="comma list, cycled: sleep between writes")
    ap.add_argument("--query", type=int, default=QUERY)
    ap.add_argument("--read-size", type=int, default=128)
    ap.add_argument("--whole", type=int, default=0)
    ap.add_argument("--log", default="")
    a = ap.parse_args()
    fn = globals()[a.cmd.replace("-", "_")]
    fn(a)


if __name__ == "__main__":
    main()
