"""What `hostile.py` needs around the cases: running the real CLI with a time limit, the
state of a directory's files before and after, HTTP servers that misbehave, a FIFO reader,
and a synthetic pcapng with packet blocks before its interface block."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


@dataclass
class Result:
    """What one run of the CLI did."""

    status: int | None  # None: killed at the time limit
    stdout: bytes
    stderr: bytes
    seconds: float


def nagleprobe(args: list, cwd: Path, limit: float, stdout: int | None = None,
               during: Callable[[subprocess.Popen], None] | None = None) -> Result:
    """`python -m nagleprobe ARGS` in `cwd` (this tree first on the path), in its own process
    group, killed with it after `limit` seconds. `during(proc)` runs once it has started
    (a signal to send, files to delete, a FIFO to read); `stdout` replaces the pipe."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "nagleprobe", *args], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if stdout is None else stdout,
                            stderr=subprocess.PIPE, start_new_session=True)
    beside = threading.Thread(target=during, args=(proc,), daemon=True) if during else None
    if beside:
        beside.start()
    try:
        out, err = proc.communicate(timeout=limit)
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = None
    seconds = time.monotonic() - t0
    if beside:
        beside.join(limit)  # done before the directory is looked at again
    return Result(status, out or b"", err or b"", seconds)


def snapshot(d: Path) -> dict[str, tuple]:
    """Every entry under `d` (links not followed): its kind and, for a regular file, the
    SHA-256 of its bytes; for a link, its target; for a device, its numbers."""
    state: dict[str, tuple] = {}
    for top, dirs, files in os.walk(os.fsencode(d)):
        for name in dirs + files:
            p = os.path.join(top, name)
            st = os.lstat(p)
            key = os.fsdecode(os.path.relpath(p, os.fsencode(d)))
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    state[key] = ("file", hashlib.sha256(f.read()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                state[key] = ("link", os.readlink(p))
            elif stat.S_ISCHR(st.st_mode):
                state[key] = ("char device", st.st_rdev)
            elif stat.S_ISFIFO(st.st_mode):
                state[key] = ("fifo",)
            elif stat.S_ISDIR(st.st_mode):
                state[key] = ("dir",)
    return state


def damaged_inputs(before: dict[str, tuple], after: dict[str, tuple],
                   allowed_gone: Callable[[str], bool] = lambda k: False) -> list[str]:
    """The entries of `before` that are gone or changed in `after`."""
    out = []
    for k, v in before.items():
        if k not in after:
            if not allowed_gone(k):
                out.append(f"{k!r} gone")
        elif after[k] != v:
            out.append(f"{k!r} changed: " + (f"{v[0]} -> {after[k][0]}" if after[k][0] != v[0]
                                             else f"another {v[0]} now"))
    return out


# ------------------------------------------------------------------ misbehaving servers
@contextmanager
def http_server(mode: str, body: bytes) -> Iterator[str]:
    """A URL on 127.0.0.1 served by a thread that misbehaves:
    `stall`: headers (the full Content-Length) and the first 1000 bytes, then silence;
    `silent`: accepts the connection, reads the request, never answers;
    `short`: a Content-Length 5000 bytes larger than the body, which it sends, then closes."""
    stop = threading.Event()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.2)
            while not stop.is_set():
                request = b""
                try:
                    while b"\r\n\r\n" not in request:
                        got = conn.recv(4096)
                        if not got:
                            return
                        request += got
                except socket.timeout:
                    continue
                except OSError:
                    return
                head = request.split(b" ", 1)[0] == b"HEAD"
                length = len(body) + (5000 if mode == "short" else 0)
                headers = (f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nContent-Type: "
                           "application/octet-stream\r\nAccept-Ranges: none\r\n\r\n").encode()
                try:
                    if mode == "silent":
                        stop.wait()
                        return
                    conn.sendall(headers)
                    if head:
                        continue
                    if mode == "stall":
                        conn.sendall(body[:1000])
                        stop.wait()
                        return
                    conn.sendall(body)  # short: then close, thousands of bytes owed
                    return
                except OSError:
                    return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/capture.pcap"
    finally:
        stop.set()
        srv.close()


def fifo_reader(path: Path, into: list[bytes]) -> threading.Thread:
    """A thread that opens the FIFO `path` for reading (blocking until a writer opens it)
    and keeps what it reads in `into`."""
    def read() -> None:
        try:
            with open(path, "rb") as f:
                into.append(f.read())
        except OSError:  # the FIFO replaced or removed: nothing read
            pass

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


# ------------------------------------------------------------------ synthetic captures
def pcap_records(name: str = "echo_split_lo.pcap") -> tuple[int, list[tuple[int, bytes]]]:
    """(link type, [(ts in microseconds, frame)]) of a little-endian microsecond sample."""
    raw = (SAMPLES / name).read_bytes()
    linktype = struct.unpack_from("<I", raw, 20)[0]
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, usec, incl, _ = struct.unpack_from("<IIII", raw, off)
        out.append((sec * 1_000_000 + usec, raw[off + 16:off + 16 + incl]))
        off += 16 + incl
    return linktype, out


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) & 3)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def epb_before_idb(orphans: int = 10) -> bytes:
    """Synthetic pcapng from a real sample's packets: a section header, `orphans` Enhanced
    Packet Blocks, only then the Interface Description Block, then the other packets."""
    linktype, recs = pcap_records()
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = _block(1, struct.pack("<HHI", linktype, 0, 262144))

    def epb(ts: int, frame: bytes) -> bytes:
        return _block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(frame),
                                     len(frame)) + frame)

    blocks = [epb(t, f) for t, f in recs]
    return shb + b"".join(blocks[:orphans]) + idb + b"".join(blocks[orphans:])
