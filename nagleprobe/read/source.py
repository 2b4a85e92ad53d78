"""Where capture bytes come from: files, stdin, pipes, gzip (decompressed in bounded steps,
salvaging what a corrupt stream still gives) and URLs through fsspec."""

from __future__ import annotations

import io
import re
import sys
import zlib
from typing import BinaryIO

from ..errors import CaptureError

GZIP_IN = 64 << 10  # compressed bytes read at a time
GZIP_OUT = 1 << 20  # at most this many uncompressed bytes per zlib call


class Prefixed(io.RawIOBase):
    """A non-seekable stream with already-consumed leading bytes put back in front."""

    def __init__(self, prefix: bytes, raw: BinaryIO, owned: bool = False) -> None:
        self._prefix = prefix
        self._raw = raw
        self._owned = owned  # close `raw` too (a URL's stream; not stdin or a caller's file)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        p = self._prefix
        if p:
            self._prefix = b""
            if n is None or n < 0:
                return p + self._raw.read()
            if n <= len(p):
                self._prefix = p[n:]
                return p[:n]
            return p + self._raw.read(n - len(p))
        return self._raw.read(n)

    def readinto(self, b) -> int:  # pragma: no cover - io plumbing
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if self._owned:
            self._raw.close()
        super().close()


# ------------------------------------------------------------------ captures by URL
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# the fsspec backend each common scheme needs, for the message when it is missing
URL_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
                "abfs": "adlfs", "abfss": "adlfs", "http": "aiohttp", "https": "aiohttp"}
URL_BLOCK = 8 << 20  # bytes fetched per request from an object store (read ahead)
# the longest wait for an http(s) server, in seconds: to connect, for its answer, for each
# further piece of the body (the whole transfer may take longer)
URL_TIMEOUT_S = 30.0


def url_scheme(path: str) -> str | None:
    """The scheme of a capture named by URL ("s3" for s3://bucket/cap.pcap), None for a
    local path."""
    m = _URL.match(path)
    return m.group(1).lower() if m else None


def _install_hint(scheme: str) -> str:
    extra = URL_PACKAGES.get(scheme)
    more = f" {extra}" if extra and extra != "aiohttp" else ""
    return f"pip install 'nagleprobe[remote]'{more}"


def open_url(url: str, timeout: float = URL_TIMEOUT_S) -> BinaryIO:
    """The object at `url` (s3://, gs://, http(s)://, any fsspec protocol) as a binary
    stream read front to back: http(s) as one streamed response (no range requests, nothing
    downloaded first; a server silent for `timeout` seconds, connecting or sending, is an
    error), object stores in read-ahead blocks of URL_BLOCK bytes (their backend's own
    time-outs). Credentials come from the environment, as fsspec finds them. A missing
    fsspec or backend, a missing object, a refused connection or a time-out is a
    `CaptureError` naming the URL."""
    scheme = url_scheme(url) or "?"
    try:
        import fsspec
    except ImportError:
        raise CaptureError(url, f"reading {scheme}:// URLs needs fsspec: "
                           f"{_install_hint(scheme)}") from None
    try:
        if scheme in ("http", "https"):
            import aiohttp
            from fsspec.core import url_to_fs

            wait = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
            fs, path = url_to_fs(url, block_size=0, client_kwargs={"timeout": wait})
            # any size given skips fsspec's HEAD request, which a stream never needs: one
            # request, so a server that never answers costs one time-out
            f = fs.open(path, "rb", size=1)
        else:
            f = fsspec.open(url, "rb", block_size=URL_BLOCK).open()
    except ImportError as e:  # fsspec knows the protocol, its backend is not installed
        backend = URL_PACKAGES.get(scheme, "its fsspec backend")
        raise CaptureError(url, f"reading {scheme}:// URLs needs {backend}: "
                           f"{_install_hint(scheme)} ({e})") from None
    except ValueError as e:
        raise CaptureError(url, f"cannot open this URL: {e}") from None
    except FileNotFoundError as e:  # fsspec's http says so for any failure: say which
        cause = e.__cause__
        status = getattr(cause, "status", None)
        if cause is None or isinstance(cause, FileNotFoundError) or status == 404:
            raise CaptureError(url, "no such file") from None
        problem = (f"HTTP {status} {getattr(cause, 'message', '')}".rstrip() if status
                   else _reason(cause, timeout))
        raise CaptureError(url, f"cannot read: {problem}") from None
    except PermissionError:
        raise CaptureError(url, "permission denied") from None
    except Exception as e:  # a refused connection, a bad status, credentials: one line
        raise CaptureError(url, f"cannot read: {_reason(e, timeout)}") from None
    return UrlStream(f, timeout)


def _reason(e: BaseException, timeout: float | None = None) -> str:
    if isinstance(e, TimeoutError) and timeout is not None:  # aiohttp's are TimeoutErrors
        if "Connection" in type(e).__name__:
            return f"timed out: no connection within {timeout:g} s"
        return f"timed out: the server sent nothing for {timeout:g} s"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _ended_early(e: BaseException) -> bool:
    """Whether `e` says the server closed the connection before the end of its answer
    (fewer bytes than its Content-Length, a chunked body cut)."""
    aiohttp = sys.modules.get("aiohttp")
    return aiohttp is not None and isinstance(e, aiohttp.ClientPayloadError)


def _received(response: object) -> bytes:
    """The bytes an aiohttp response holds, received but not read yet: its reads raise the
    error of a cut connection before they hand these on."""
    held = getattr(getattr(response, "content", None), "_read_nowait", None)
    try:
        return bytes(held(-1)) if held is not None else b""
    except Exception:  # another aiohttp: what was read so far is what arrived
        return b""


class UrlStream(io.RawIOBase):
    """An fsspec file as a raw stream whose read errors are all OSError (the reader turns
    those into a `CaptureError`), except a body cut short by the server: that is the end of
    the data, and `cut_short` says what happened (the reader warns, as for a cut file)."""

    def __init__(self, f, timeout: float | None = None) -> None:  # noqa: ANN001 - fsspec's
        self._f = f
        self.timeout = timeout
        self.got = 0  # bytes of the body read so far
        self.cut_short: str | None = None
        self._tail = b""  # what had arrived when the server cut the body short

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.cut_short:
            data, self._tail = self._tail[:len(b)], self._tail[len(b):]
        else:
            try:
                data = self._f.read(len(b))
            except Exception as e:  # aiohttp's payload errors and time-outs, botocore's...
                if not _ended_early(e):
                    if isinstance(e, OSError) and not isinstance(e, TimeoutError):
                        raise
                    raise OSError(f"{_reason(e, self.timeout)} (after {self.got:,} bytes)"
                                  ) from e
                response = getattr(self._f, "r", None)
                self._tail = _received(response)
                size = self.got + len(self._tail)
                announced = getattr(response, "content_length", None)
                self.cut_short = ("the server closed the connection after "
                                  + (f"{size:,} of the {announced:,} bytes its Content-Length "
                                     "announced" if announced else f"{size:,} bytes"))
                return self.readinto(b)
        b[:len(data)] = data
        self.got += len(data)
        return len(data)

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()


class Gunzip(io.RawIOBase):
    """Streaming gzip decompression (multi-member, zero padding between members allowed) in
    bounded memory: each zlib call may produce at most GZIP_OUT bytes, so a decompression bomb
    costs time, never memory.  A truncated or corrupt stream ends the data early and is flagged
    (`truncated`, `error`) rather than raised, so the records before it can still be used."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._d = zlib.decompressobj(31)
        self._in = b""
        self._between = False  # a member ended; the next one (or padding) has not started
        self._done = False
        self.consumed = 0  # compressed bytes read so far
        self.produced = 0  # uncompressed bytes returned so far
        self.truncated = False
        self.error: str | None = None
        self.error_where = ""
        self._salvaged = bytearray()  # output recovered from a failing zlib call

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        # the views released on return, not when this frame goes (see CaptureReader._fill)
        with memoryview(b) as whole, whole.cast("B") as mv:
            k = 0
            while k < len(mv):
                out = self._inflate(min(len(mv) - k, GZIP_OUT))
                if not out:
                    break
                mv[k:k + len(out)] = out
                k += len(out)
                self.produced += len(out)
        return k

    def read(self, n: int = -1) -> bytes:
        buf = bytearray(n if n is not None and n >= 0 else GZIP_OUT)
        k = self.readinto(buf)
        return bytes(buf[:k])

    def _inflate(self, limit: int) -> bytes:
        """Up to `limit` more uncompressed bytes; b"" only when the data has ended."""
        if self._salvaged:
            out = self._salvaged[:limit]
            del self._salvaged[:limit]
            return bytes(out)
        while not self._done:
            if not self._in:
                self._in = self._raw.read(GZIP_IN)
                if not self._in:
                    self._done = True
                    self.truncated = not self._between
                    break
                self.consumed += len(self._in)
            fresh = self._between
            if fresh:
                rest = self._in.lstrip(b"\0")
                self._in = rest
                if not rest:
                    continue
                self._d = zlib.decompressobj(31)
                self._between = False
            before = self._d.copy()
            try:
                out = self._d.decompress(self._in, limit)
            except zlib.error as e:
                self._done = True
                if fresh:
                    self.error = "data after the end of the gzip stream is not gzip"
                    self.error_where = f"compressed byte {self.consumed - len(self._in)}"
                    break
                self._salvaged = self._salvage(before, self._in)
                self.error = f"corrupt gzip data: {e}"
                self.error_where = f"uncompressed byte {self.produced + len(self._salvaged)}"
                return self._inflate(limit)
            if self._d.eof:
                self._in = self._d.unused_data
                self._between = True
            else:
                self._in = self._d.unconsumed_tail
            if out:
                return out
        return b""

    @staticmethod
    def _salvage(d, data: bytes) -> bytearray:
        """What decompressor `d` yields from `data` before the error it hits: zlib drops the
        output of a failing call (and a bad CRC fails the call that ends the stream), so the
        input is fed again in 64-byte pieces, and the failing piece byte by byte."""
        out = bytearray()
        for i in range(0, len(data), 64):
            piece = data[i:i + 64]
            saved = d.copy()
            try:
                out += d.decompress(piece)
                continue
            except zlib.error:
                pass
            for j in range(len(piece)):
                try:
                    out += saved.decompress(piece[j:j + 1])
                except zlib.error:
                    return out
        return out

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_uncompressed(path: str) -> BinaryIO:
    """The bytes of the capture file `path` as a stream, gzip inflated in bounded memory
    (a corrupt or cut gzip stream just ends early): for copying records as they are, at the
    file offsets `RecordBatch.start` gives."""
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    return Gunzip(raw) if magic == b"\x1f\x8b" else raw
