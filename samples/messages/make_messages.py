#!/usr/bin/env python3
"""Make the real captures of application protocols stalled by Nagle + delayed ACK.

Run as root from the repository root (needs iproute2, tcpdump, openssl,
dnsmasq, dnspython, PostgreSQL, pg8000, hypercorn, httpcore, h2):

    sudo python3 samples/messages/make_messages.py             # all scenarios
    sudo python3 samples/messages/make_messages.py http1_lo    # some of them

Each scenario runs in a fresh private network namespace `npmsg` (its own loopback, nothing
else on the capture), deleted afterwards. The side that splits its messages writes them in
separate send() calls without TCP_NODELAY; every such call is logged (side, bytes, what it
was) to `<name>.writes.json`, the ground truth the tests compare the named messages with.
"""
from __future__ import annotations

import http.client
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NS = "npmsg"
HOST = "127.0.0.1"
REQUESTS = 6


class Log:
    """The writes of the apps, in order: what the capture should show."""

    def __init__(self) -> None:
        self.writes: list[dict] = []
        self.lock = threading.Lock()

    def add(self, side: str, size: int, what: str) -> None:
        with self.lock:
            self.writes.append({"side": side, "bytes": size, "what": what})


class LoggedWriter:
    """A handler's wfile that logs each write (unchanged otherwise: one write, one send)."""

    def __init__(self, raw, log: Log) -> None:
        self.raw, self.log, self.headers_done = raw, log, False

    def write(self, data) -> int:
        what = "body" if self.headers_done else "headers"
        self.headers_done = not self.headers_done  # SimpleHTTPRequestHandler: headers, body
        self.log.add("server", len(data), what)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def __getattr__(self, name):
        return getattr(self.raw, name)


def http_server(log: Log, root: str, tls: ssl.SSLContext | None):
    """The standard library's SimpleHTTPRequestHandler serving `root`, HTTP/1.1 keep-alive
    (its defaults otherwise: Nagle on; headers flushed in one write, the file in another)."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def setup(self):
            super().setup()
            self.wfile = LoggedWriter(self.wfile, log)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer((HOST, 8443 if tls else 8080), Handler)
    if tls:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def get_file(log: Log, tmp: str, tls: ssl.SSLContext | None,
             conn: http.client.HTTPConnection) -> None:
    """`conn` GETs a 24-byte file REQUESTS times on one connection from `http_server`."""
    Path(tmp, "status.json").write_bytes(b'{"ok": true, "n": 1234}\n')
    srv = http_server(log, tmp, tls)
    for _ in range(REQUESTS):
        conn.request("GET", "/status.json")
        conn.getresponse().read()
    conn.close()
    srv.shutdown()


def http1_lo(log: Log, tmp: str) -> None:
    """http.server answers 6 keep-alive GETs of a 24-byte file from http.client."""
    get_file(log, tmp, None, http.client.HTTPConnection(HOST, 8080))


def tls_lo(log: Log, tmp: str) -> None:
    """http1_lo over TLS 1.3 (Python's ssl module, OpenSSL): each write is one TLS record of
    22 more bytes (5-byte header, content type, 16-byte AEAD tag)."""
    key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.minimum_version = ssl.TLSVersion.TLSv1_3
    sctx.load_cert_chain(cert, key)
    cctx = ssl.create_default_context(cafile=cert)
    get_file(log, tmp, sctx, http.client.HTTPSConnection("localhost", 8443, context=cctx))


def dns_lo(log: Log, tmp: str) -> None:
    """dnsmasq answers 6 A queries (built by dnspython) on one TCP connection from a client
    that writes each query's 2-byte length prefix and the query in two send() calls."""
    import dns.message

    pid = os.path.join(tmp, "dnsmasq.pid")
    subprocess.run(["dnsmasq", "--conf-file=/dev/null", "--port=53", f"--listen-address={HOST}",
                    "--bind-interfaces", "--no-resolv", "--no-hosts", f"--pid-file={pid}",
                    "--address=/example.test/192.0.2.7"], check=True)
    try:
        time.sleep(0.3)
        with socket.create_connection((HOST, 53)) as s:
            for i in range(REQUESTS):
                q = dns.message.make_query(f"host{i}.example.test", "A").to_wire()
                prefix = len(q).to_bytes(2, "big")
                log.add("client", 2, "prefix")
                s.send(prefix)
                log.add("client", len(q), "query")
                s.send(q)
                n = int.from_bytes(_recv(s, 2), "big")
                dns.message.from_wire(_recv(s, n))
    finally:
        with open(pid) as f:
            os.kill(int(f.read()), 15)


def postgres_lo(log: Log, tmp: str) -> None:
    """PostgreSQL answers 18 INSERTs of a 12000-byte text parameter from pg8000: its Bind
    message is larger than the 8 KiB write buffer and goes out at once; the Flush, Execute,
    Flush and Sync messages after it wait in the buffer for the flush at Sync, then Nagle."""
    import pg8000.core
    import pg8000.native

    data = os.path.join(tmp, "pg")
    os.chmod(tmp, 0o755)
    os.mkdir(data, 0o700)
    os.chown(data, 65534, 65534)  # nobody: PostgreSQL does not run as root
    as_nobody = ["runuser", "-u", "nobody", "--"]
    subprocess.run([*as_nobody, "initdb", "-D", data, "-U", "postgres", "--auth=trust"],
                   check=True, capture_output=True)
    pg = subprocess.Popen([*as_nobody, "postgres", "-D", data, "-k", data, "-h", HOST,
                           "-p", "5432", "-c", "fsync=off"], stderr=subprocess.DEVNULL)
    write = pg8000.core._write

    def logged(sock, d):  # each message pg8000 writes into its buffer, in order
        log.add("client", len(d), chr(d[0]) if d[:1].isalpha() else "startup")
        return write(sock, d)

    try:
        for _ in range(50):
            try:
                conn = pg8000.native.Connection("postgres", host=HOST, port=5432)
                break
            except (OSError, pg8000.native.InterfaceError, pg8000.native.DatabaseError):
                time.sleep(0.2)  # the server is still starting
        conn.run("CREATE TABLE notes (body text)")
        pg8000.core._write = logged
        for _ in range(3 * REQUESTS):  # the server's ACK is delayed only now and then
            conn.run("INSERT INTO notes VALUES (:b)", b="x" * 12000)
        pg8000.core._write = write
        conn.close()
    finally:
        pg8000.core._write = write
        pg.terminate()
        pg.wait(10)


_H2_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"stored": %d}' % len(body)})
"""


def http2_lo(log: Log, tmp: str) -> None:
    """hypercorn serves 6 HTTP/2 (prior knowledge, cleartext) POSTs of a 30-byte JSON body
    from httpcore's HTTP2Connection, the HTTP/2 client of httpx: it writes each request's
    HEADERS frame and its DATA frame in separate socket writes. httpcore's own socket
    backend sets TCP_NODELAY (httpcore/_backends/sync.py); here its SyncStream wraps a
    plain socket (Nagle on, the socket default), so nothing else differs."""
    import hyperframe.frame
    import httpcore
    from httpcore._backends.sync import SyncStream

    class LoggedStream(SyncStream):
        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            if buffer:  # httpcore also writes b"" when h2 has nothing to send
                log.add("client", len(buffer), _h2_frames(buffer, hyperframe.frame.Frame))
            super().write(buffer, timeout)

    Path(tmp, "app.py").write_text(_H2_APP)
    srv = subprocess.Popen([sys.executable, "-m", "hypercorn", "--bind", f"{HOST}:8000",
                            "app:app"], cwd=tmp, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                sock = socket.create_connection((HOST, 8000))
                break
            except OSError:
                time.sleep(0.1)  # the server is still starting
        origin = httpcore.Origin(b"http", HOST.encode(), 8000)
        with httpcore.HTTP2Connection(origin, LoggedStream(sock)) as conn:
            for i in range(REQUESTS):
                body = b'{"note": "hello", "seq": %04d}' % i
                conn.request("POST", f"http://{HOST}:8000/notes", content=body,
                             headers={"content-type": "application/json"})
    finally:
        srv.terminate()
        srv.wait(10)


def _h2_frames(data: bytes, frame: type) -> str:
    """The frames of one write, e.g. "HEADERS" or "DATA+DATA" (the preface as PREFACE)."""
    names, at = [], 0
    if data.startswith(b"PRI * HTTP/2.0"):
        names.append("PREFACE")
        at = 24
    while at + 9 <= len(data):
        f, n = frame.parse_frame_header(memoryview(data[at:at + 9]))
        names.append(type(f).__name__.removesuffix("Frame").upper())
        at += 9 + n
    return "+".join(names)


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise EOFError("server closed the connection")
        out += got
    return out


SCENARIOS = {f.__name__: f for f in (http1_lo, tls_lo, dns_lo, postgres_lo, http2_lo)}


def inside(name: str) -> None:
    """Run one scenario in the namespace, captured on its loopback."""
    out = HERE / f"{name}.pcap"
    cap = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "0", "-U", "-w", str(out)],
                           stderr=subprocess.PIPE, text=True)
    while "listening" not in (cap.stderr.readline() or "listening"):
        pass
    time.sleep(0.3)
    log = Log()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            SCENARIOS[name](log, tmp)
        time.sleep(0.5)
    finally:
        cap.send_signal(2)
        cap.wait(10)
    (HERE / f"{name}.writes.json").write_text(json.dumps(log.writes, indent=1) + "\n")


def main(names: list[str]) -> None:
    for name in names or list(SCENARIOS):
        subprocess.run(["ip", "netns", "del", NS], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "add", NS], check=True)
        try:
            subprocess.run(["ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up"],
                           check=True)
            subprocess.run(["ip", "netns", "exec", NS, sys.executable, __file__, "--inside",
                            name], check=True)
        finally:
            subprocess.run(["ip", "netns", "del", NS], check=False, capture_output=True)
        print(f"{name}: {HERE / (name + '.pcap')}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        inside(sys.argv[2])
    else:
        main(sys.argv[1:])
