#!/usr/bin/env python3
"""Linux kernel-socket peers of the classic-Nagle (smoltcp) client, each logging its own timings.

    peer.py msg-server --port 8000 --size 1560 --reply 64 --log F
        reads messages of exactly --size bytes; logs when the first and the last byte of
        each message was read (time.monotonic_ns), then replies --reply bytes.
    peer.py echo-server --port 8000 --log F
        line echo ("hello " + "world\\r\\n"); logs first byte -> end of line per request.
    peer.py records-receiver --port 8000 --log F [--quickack] [--rcvbuf B]
        only reads records whose first 4 bytes are their length; logs first -> last byte.
        --quickack: TCP_QUICKACK before and after every recv() (ACK every segment at once).
        --rcvbuf: SO_RCVBUF on the listener (fixed buffer: no receive-window autotuning).
"""
import argparse
import json
import socket
import time

NS = time.monotonic_ns


def ms(ns):
    return round(ns / 1e6, 3)


def listen(host, port, rcvbuf=0):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:  # fixed receive buffer (no autotuning), set on the listener
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    ls.bind((host, port))
    ls.listen(1)
    return ls


class Reader:
    """recv() into a buffer, remembering when each chunk arrived."""

    def __init__(self, c, quickack=False):
        self.c, self.buf, self.quickack = c, b"", quickack
        self.t_last_chunk = None

    def more(self):
        if self.quickack:
            self.c.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        d = self.c.recv(65536)
        t = NS()
        if self.quickack:
            self.c.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        if not d:
            raise EOFError
        self.buf += d
        self.t_last_chunk = t
        return t, len(d)

    def take(self, n):
        """Return (bytes, t_first_byte, t_last_byte, chunks) for the next n bytes."""
        t_first = self.t_last_chunk if self.buf else None
        chunks = []
        while len(self.buf) < n:
            t, k = self.more()
            chunks.append(k)
            if t_first is None:
                t_first = t
        out, self.buf = self.buf[:n], self.buf[n:]
        return out, t_first, self.t_last_chunk, chunks


def msg_server(a):
    c, peer = listen(a.host, a.port).accept()
    r = Reader(c)
    f2l, chunks_per_msg = [], []
    try:
        while True:
            _, t1, t2, ch = r.take(a.size)
            f2l.append(ms(t2 - t1))
            chunks_per_msg.append(ch)
            c.sendall(b"R" * a.reply)
    except EOFError:
        pass
    c.close()
    return {"role": "msg-server", "peer": list(peer), "size": a.size, "reply": a.reply,
            "messages": len(f2l), "first_to_last_byte_ms": f2l,
            "recv_sizes_per_message": chunks_per_msg}


def echo_server(a):
    c, peer = listen(a.host, a.port).accept()
    r = Reader(c)
    f2l = []
    try:
        while True:
            t_first = r.t_last_chunk if r.buf else None
            while b"\r\n" not in r.buf:
                t, _ = r.more()
                if t_first is None:
                    t_first = t
            line, r.buf = r.buf.split(b"\r\n", 1)
            f2l.append(ms(r.t_last_chunk - t_first))
            c.sendall(line + b"\r\n")
    except EOFError:
        pass
    c.close()
    return {"role": "echo-server", "peer": list(peer), "lines": len(f2l),
            "first_to_last_byte_ms": f2l}


def records_receiver(a):
    c, peer = listen(a.host, a.port, a.rcvbuf).accept()
    r = Reader(c, a.quickack)
    recs = []
    try:
        while True:
            ch0 = []
            while len(r.buf) < 4:
                _, k = r.more()
                ch0.append(k)
            # t_first: when the record's first bytes were read
            t_first = r.t_last_chunk
            n = int.from_bytes(r.buf[:4], "big")
            _, _, t_last, ch = r.take(n)
            recs.append({"bytes": n, "first_at_ms": ms(t_first), "first_to_last_byte_ms":
                         ms(t_last - t_first), "recv_sizes": ch0 + ch})
    except EOFError:
        pass
    c.close()
    return {"role": "records-receiver", "peer": list(peer), "quickack": a.quickack,
            "rcvbuf": a.rcvbuf,
            "records": recs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["msg-server", "echo-server", "records-receiver"])
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--size", type=int, default=1560)
    ap.add_argument("--reply", type=int, default=64)
    ap.add_argument("--quickack", action="store_true")
    ap.add_argument("--rcvbuf", type=int, default=0)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    doc = globals()[a.cmd.replace("-", "_")](a)
    with open(a.log, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
