"""A tiny real server/client pair for the capture tests: the client writes each request in
two pieces (header, then body) and reads the reply, over loopback.

With Nagle on (the default) the body waits for the server's delayed ACK of the header:
~40 ms per request on Linux, except the first (a fresh connection starts in quick-ack
mode). With --nodelay the client sets TCP_NODELAY and nothing waits.

    python splitwrite.py --port P [--requests N] [--nodelay]

Prints one JSON line: {"port", "nodelay", "latency_ms": [...]} measured by the client
(time.monotonic_ns), the ground truth the tests compare nagleprobe's findings with.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time

HEADER, BODY = b"HEAD 0001 ", b"body of the request\n"


def serve_once(listener: socket.socket) -> None:
    """Answer every newline-terminated request of one connection with a short reply."""
    conn, _ = listener.accept()
    with conn:
        buf = b""
        while True:
            data = conn.recv(4096)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                _, buf = buf.split(b"\n", 1)
                conn.sendall(b"OK\n")


def run(port: int, requests: int = 12, nodelay: bool = False) -> list[float]:
    """Start the server, send `requests` split-write requests, return their latencies (ms)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    server = threading.Thread(target=serve_once, args=(listener,), daemon=True)
    server.start()
    latencies = []
    with socket.create_connection(("127.0.0.1", port)) as client:
        if nodelay:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(requests):
            t0 = time.monotonic_ns()
            client.send(HEADER)
            client.send(BODY)
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = client.recv(64)
                if not chunk:
                    raise EOFError("server closed the connection")
                reply += chunk
            latencies.append((time.monotonic_ns() - t0) / 1e6)
    server.join(5)
    listener.close()
    return latencies


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--nodelay", action="store_true")
    a = ap.parse_args()
    lat = run(a.port, a.requests, a.nodelay)
    print(json.dumps({"port": a.port, "nodelay": a.nodelay, "latency_ms": lat}))
