"""Real HTTP servers on 127.0.0.1 in a thread, for the tests of captures by URL: `serve`
(http.server) serves a directory and records each request's method, path and Range header;
`serve_badly` stalls, goes silent or closes early."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def serve(root: Path) -> Iterator[tuple[str, list[tuple[str, str, str | None]]]]:
    """(base URL, the requests seen so far) while `root` is served."""
    seen: list[tuple[str, str, str | None]] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *args) -> None:  # quiet
            pass

        def send_head(self):  # noqa: ANN201
            seen.append((self.command, self.path, self.headers.get("Range")))
            return super().send_head()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_badly(body: bytes, send: int | None = None, close: bool = False,
                answer_head: bool = True) -> Iterator[str]:
    """The URL of a server (a raw socket on 127.0.0.1, in a thread) that misbehaves: it
    announces `body` (Content-Length) but sends only its first `send` bytes (all when
    None; nothing at all, not even headers, when `answer_head` is false and for every GET
    when `send` is negative), then closes the connection (`close`) or goes silent until
    the server is stopped. HEAD requests get the headers when `answer_head`."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                got = conn.recv(4096)
                if not got:
                    return
                request += got
            head = request.startswith(b"HEAD ")
            if (head and answer_head) or (not head and (send is None or send >= 0)):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
                if not head:
                    conn.sendall(body if send is None else body[:send])
                if head or close or send is None:
                    return
            stop.wait()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/cap.pcap"
    finally:
        stop.set()
        thread.join(5)
        listener.close()
