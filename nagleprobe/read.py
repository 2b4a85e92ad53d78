"""Stage 1: stream packet records out of a pcap / pcapng capture (optionally gzip, or stdin).

The reader never builds a Python object per packet.  The one loop numpy cannot do is walking
the chain of record (pcap) or block (pcapng) headers to find where each record starts; that
loop only appends start offsets to an `array('q')`.  Everything else (timestamps, lengths,
interface link types) is gathered afterwards with numpy over the chunk's bytes.

Hostile input: lengths read from the file are checked against libpcap's / Wireshark's limits
before anything is read or allocated from them, and buffers never exceed the chunk size plus
one bounded record.  Damage is handled the same way everywhere:

* before the first packet record it is a `CaptureError` (nothing to analyse);
* after it (a truncated last record, a corrupt record or block in the middle, a corrupt gzip
  stream) it is a warning in `CaptureInfo.warnings`, and the reader goes on with whatever
  can still be trusted: after a record or block with an impossible length it looks for the
  next position where a consistent chain of records (pcap) or a block whose trailing length
  matches (pcapng) starts, and counts the skipped stretch in `CaptureInfo.skipped`;
* with `strict=True` every such warning is raised as a `CaptureError` instead.
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .encap import Tunnels
from .errors import CaptureError

MAX_CAPLEN = 262144  # libpcap's MAXIMUM_SNAPLEN
MAX_BLOCK = 16 << 20  # Wireshark's MAX_BLOCK_SIZE for pcapng blocks
MAX_WARNINGS = 20  # listed one by one; more are summed up in a last warning
GZIP_IN = 64 << 10  # compressed bytes read at a time
GZIP_OUT = 1 << 20  # at most this many uncompressed bytes per zlib call
# A pcap record is read only if its header is plausible: fraction below one second, caplen
# <= the file's snap length (MAX_CAPLEN if it has none) and <= a wire length above zero, and
# a time not more than RESYNC_WINDOW_S before or after the latest record read so far (the
# anchor, which only records read move).  Anything else is damage: the records before it are
# kept and reading resumes where a chain of records says so: a candidate record header
# plausible in the same way (and wire length below RESYNC_MAX_WIRELEN, a plausible
# link-layer start, a time at most RESYNC_EARLIER_NS before the anchor) followed by
# RESYNC_CHAIN - 1 more plausible headers with times in order (as far back as that),
# or RESYNC_CHAIN_FAR of them when the candidate's time is more than RESYNC_WINDOW_S after
# the anchor (a legitimate gap in the capture is accepted that way, with no warning).
RESYNC_WINDOW_S = 86400
RESYNC_MAX_WIRELEN = 1 << 24
RESYNC_CHAIN = 3
RESYNC_CHAIN_FAR = 8
RESYNC_EARLIER_NS = 500_000_000  # how far back in time a resynchronised chain may go
# (records of `tcpdump -i any` are a little out of order): a header read a byte off has a
# time off by whole seconds (up to 255), or by years
RESYNC_BACK = 3  # a deletion of up to this many bytes inside the last record read: the next
                 # record's header starts up to this many bytes before where it claims
RESYNC_SPAN = 1 << 16  # candidate positions examined per numpy pass
_NS_WINDOW = RESYNC_WINDOW_S * 1_000_000_000
# EtherTypes a resynchronised Ethernet record may start with (or an 802.3 length <= 1500)
_ETHERTYPES = np.array([0x0800, 0x86DD, 0x8100, 0x88A8, 0x9100, 0x0806, 0x8035, 0x88CC,
                        0x8847, 0x8848, 0x8863, 0x8864, 0x888E, 0x22F0, 0x22EA, 0x88F7],
                       dtype=np.int64)

PCAP_US = 0xA1B2C3D4
PCAP_NS = 0xA1B23C4D
PCAP_KUZNETSOV = 0xA1B2CD34
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BOM = 0x1A2B3C4D
BT_IDB, BT_PB, BT_SPB, BT_NRB, BT_ISB, BT_EPB = 1, 2, 3, 4, 5, 6
# block types of the pcapng spec that are not packets: skipped silently (journal export,
# decryption secrets, custom blocks); anything else is counted as "unknown-block-type"
KNOWN_BLOCKS = frozenset({BT_IDB, BT_PB, BT_SPB, BT_NRB, BT_ISB, BT_EPB, 9, 10, 0xBAD,
                          0x40000BAD, PCAPNG_SHB})
MIN_BLOCK = {BT_EPB: 32, BT_PB: 32, BT_SPB: 16, BT_IDB: 20}
MIN_BLOCK_LEN, MIN_SHB_LEN = 12, 28  # type, length and trailing length; a section header's


def block_length_ok(bl, least: int = MIN_BLOCK_LEN):  # noqa: ANN001, ANN201 (int or array)
    """Whether a pcapng block length can be true: a multiple of 4, at least `least`, at most
    MAX_BLOCK. Works on an int or elementwise on an array; `_walk.c` (walk_blocks) checks
    the same (tests/test_walk.py pins them equal)."""
    return (bl >= least) & (bl <= MAX_BLOCK) & ((bl & 3) == 0)


LINKTYPE_NAMES = {
    0: "NULL", 1: "EN10MB", 12: "RAW", 101: "RAW", 108: "LOOP", 113: "LINUX_SLL",
    228: "IPV4", 229: "IPV6", 276: "LINUX_SLL2", 9: "PPP", 50: "PPP_HDLC", 104: "C_HDLC",
    239: "NFLOG", 258: "PKTAP", 149: "PKTAP", 105: "IEEE802_11", 127: "IEEE802_11_RADIOTAP",
    192: "PPI", 119: "PRISM_HEADER",
    # not decoded, named for messages
    6: "IEEE802_5", 10: "FDDI", 147: "USER0", 187: "BLUETOOTH_HCI_H4", 189: "USB_LINUX",
    195: "IEEE802_15_4", 220: "USB_LINUX_MMAPPED", 249: "NETLINK",
}
# 149 is LINKTYPE_USER2 by the registry, but macOS tcpdump writes its PKTAP headers as 149
SUPPORTED_LINKTYPES = frozenset({0, 1, 12, 101, 108, 113, 228, 229, 276, 9, 50, 104, 239, 258,
                                 149, 105, 127, 192, 119})


def linktype_name(lt: int) -> str:
    return LINKTYPE_NAMES.get(int(lt), f"LINKTYPE_{int(lt)}")


@dataclass
class RecordBatch:
    data: np.ndarray  # uint8, the bytes this batch's packets live in
    offset: np.ndarray  # int64, start of each packet's link-layer bytes in `data`
    caplen: np.ndarray  # int64, captured length
    wirelen: np.ndarray  # int64, original length on the wire
    ts_ns: np.ndarray  # int64, nanoseconds since the epoch
    linktype: np.ndarray  # int32, LINKTYPE_* of each record (pcapng: from its interface)
    frame: np.ndarray  # int64, 1-based frame number (counts every packet record)
    # int64, where each record's header (pcap) or block (pcapng) starts in the file, counting
    # uncompressed bytes: for copying records as they are (`annotate`); None if not known
    start: np.ndarray | None = None
    # the capture's tunnel numbering, which the decoder extends (encap.Tunnels)
    tunnels: Tunnels | None = None

    def __len__(self) -> int:
        return len(self.offset)


@dataclass
class CaptureInfo:
    path: str
    format: str = ""
    compressed: bool = False
    link_types: list[str] = field(default_factory=list)
    packets: int = 0
    warnings: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    tunnels: Tunnels = field(default_factory=Tunnels)  # the tunnels decoded (numbers, layers)


class _Prefixed(io.RawIOBase):
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


def url_scheme(path: str) -> str | None:
    """The scheme of a capture named by URL ("s3" for s3://bucket/cap.pcap), None for a
    local path."""
    m = _URL.match(path)
    return m.group(1).lower() if m else None


def _install_hint(scheme: str) -> str:
    extra = URL_PACKAGES.get(scheme)
    more = f" {extra}" if extra and extra != "aiohttp" else ""
    return f"pip install 'nagleprobe[remote]'{more}"


def open_url(url: str) -> BinaryIO:
    """The object at `url` (s3://, gs://, http(s)://, any fsspec protocol) as a binary
    stream read front to back: http(s) as one streamed response (no range requests, nothing
    downloaded first), object stores in read-ahead blocks of URL_BLOCK bytes. Credentials
    come from the environment, as fsspec finds them. A missing fsspec or backend, a missing
    object or a refused connection is a `CaptureError` naming the URL."""
    scheme = url_scheme(url) or "?"
    try:
        import fsspec
    except ImportError:
        raise CaptureError(url, f"reading {scheme}:// URLs needs fsspec: "
                           f"{_install_hint(scheme)}") from None
    kw = {"block_size": 0} if scheme in ("http", "https") else {"block_size": URL_BLOCK}
    try:
        f = fsspec.open(url, "rb", **kw).open()
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
                   else _reason(cause))
        raise CaptureError(url, f"cannot read: {problem}") from None
    except PermissionError:
        raise CaptureError(url, "permission denied") from None
    except Exception as e:  # a refused connection, a bad status, credentials: one line
        raise CaptureError(url, f"cannot read: {_reason(e)}") from None
    return _UrlStream(f)


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class _UrlStream(io.RawIOBase):
    """An fsspec file as a raw stream whose read errors are all OSError (the reader turns
    those into a truncation warning or a `CaptureError`)."""

    def __init__(self, f) -> None:  # noqa: ANN001 - an fsspec file
        self._f = f
        self.size = getattr(f, "size", None)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            data = self._f.read(len(b))
        except OSError:
            raise
        except Exception as e:  # aiohttp's payload errors, botocore's, ...
            raise OSError(_reason(e)) from e
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()


class _Gunzip(io.RawIOBase):
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
        mv = memoryview(b).cast("B")
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


class _Interface:
    __slots__ = ("linktype", "snaplen", "tsmul", "tsdiv", "tsshift", "tsoffset_ns")

    MAX_TSOFFSET_S = 1 << 33  # if_tsoffset beyond ~270 years is nonsense: ignored

    def __init__(self, linktype: int, snaplen: int) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        self.tsmul = 1000  # default resolution 10^-6
        self.tsdiv = 1
        self.tsshift = 0  # power-of-two resolution: ns = units * 1e9 >> shift
        self.tsoffset_ns = 0

    def set_tsresol(self, v: int) -> str | None:
        """Units of 10^-e s (bit 7 clear) or 2^-e s (bit 7 set; 0x80 is whole seconds).
        A resolution finer than 64-bit timestamps can count since 1970 in (10^-19 s,
        2^-63 s) is refused: the default (microseconds) stays and the problem is returned."""
        e = v & 0x7F
        if v & 0x80:
            if e > 63:
                return f"if_tsresol 0x{v:02x} (2^-{e} s) is finer than 64-bit timestamps can hold"
            self.tsshift = e
            self.tsmul, self.tsdiv = (0, 1) if e else (1_000_000_000, 1)
        else:
            if e > 19:
                return f"if_tsresol 0x{v:02x} (10^-{e} s) is finer than 64-bit timestamps can hold"
            if e <= 9:
                self.tsmul, self.tsdiv = 10 ** (9 - e), 1
            else:
                self.tsmul, self.tsdiv = 1, 10 ** (e - 9)
            self.tsshift = 0
        return None

    def set_tsoffset(self, seconds: int) -> None:
        if abs(seconds) <= self.MAX_TSOFFSET_S:
            self.tsoffset_ns = seconds * 1_000_000_000

    def ts_ns(self, units: np.ndarray) -> np.ndarray:
        """units: uint64 raw timestamps -> int64 ns since the epoch (wraps, never raises, on
        absurd values)."""
        if self.tsshift:
            k = self.tsshift
            sec = (units >> np.uint64(k)).astype(np.int64) if k < 64 else np.zeros_like(
                units, dtype=np.int64)
            frac = units & np.uint64((1 << k) - 1) if k < 64 else units
            if k > 33:  # keep frac * 1e9 inside 64 bits
                frac = frac >> np.uint64(k - 33)
                k2 = 33
            else:
                k2 = k
            ns = (frac * np.uint64(1_000_000_000)) >> np.uint64(k2)
            out = sec * 1_000_000_000 + ns.astype(np.int64)
        elif self.tsdiv > 1:
            out = (units // np.uint64(self.tsdiv)).astype(np.int64)
        else:
            out = units.astype(np.int64) * self.tsmul
        if self.tsoffset_ns:
            out = out + np.int64(self.tsoffset_ns)
        return out


def _u32(buf: np.ndarray, idx: np.ndarray, big: bool) -> np.ndarray:
    """Gather 32-bit unsigned ints at byte offsets `idx` of uint8 array `buf` as int64."""
    b0 = buf[idx].astype(np.int64)
    b1 = buf[idx + 1].astype(np.int64)
    b2 = buf[idx + 2].astype(np.int64)
    b3 = buf[idx + 3].astype(np.int64)
    if big:
        return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3
    return (b3 << 24) | (b2 << 16) | (b1 << 8) | b0


def _u32_rows(buf: np.ndarray, idx: np.ndarray, width: int, big: bool) -> np.ndarray:
    """Gather `width` consecutive 32-bit words at each offset: (n, width) int64. Compiled
    (nagleprobe/_walk.c) when built, else `_u32_rows_numpy`."""
    if _walk is None or len(idx) == 0:
        return _u32_rows_numpy(buf, idx, width, big)
    out = np.empty((len(idx), width), dtype=np.int64)
    _walk.u32_rows(buf, np.ascontiguousarray(idx, dtype=np.int64), width, big, out)
    return out


def _u32_rows_numpy(buf: np.ndarray, idx: np.ndarray, width: int, big: bool) -> np.ndarray:
    """`_u32_rows` with numpy alone (the reference for the compiled version)."""
    if len(idx) == 0:
        return np.zeros((0, width), dtype=np.int64)
    dt = ">u4" if big else "<u4"
    r = int(idx[0]) & 3
    if not ((idx & 3) != r).any():  # all on one 4-byte grid (pcapng blocks): index words
        words = np.frombuffer(buf, dtype=dt, offset=r, count=(len(buf) - r) // 4)
        at = (idx - r) >> 2
        if width == 1:
            return words[at].astype(np.int64)[:, None]
        return words[at[:, None] + np.arange(width)].astype(np.int64)
    w = width * 4
    win = as_strided(buf, shape=(len(buf) - w + 1, w), strides=(1, 1), writeable=False)
    return win[idx].view(dt).astype(np.int64)


_KNOWN_BLOCKS = np.array(sorted(KNOWN_BLOCKS - {PCAPNG_SHB}), dtype=np.int64)


def _first_decided(c: np.ndarray, status: np.ndarray,
                   need: np.ndarray) -> tuple[int, bool, int] | None:
    """Resync: the first candidate start in `c` that is valid (status 1) or undecided until
    more data is read (status 2, `need` bytes from it), as (pos, found, need); None if all
    candidates were rejected."""
    hit = np.flatnonzero(status)
    if not len(hit):
        return None
    i = int(hit[0])
    if status[i] == 1:
        return int(c[i]), True, 0
    return int(c[i]), False, int(need[i])


def _walk_python(buf: bytearray, big: bool, start: int = 0) -> tuple[np.ndarray, int]:
    """Offsets of the caplen field (byte 8) of each pcap record header from `start` on whose
    caplen field lies in `buf`, and the offset after the last record."""
    unpack = struct.Struct(">I" if big else "<I").unpack_from
    starts = array("q")
    append = starts.append
    p = start + 8
    lim = len(buf) - 8
    while p <= lim:  # the hot loop
        cl, = unpack(buf, p)
        append(p)
        p += cl + 16
    return np.frombuffer(starts, dtype=np.int64), p


def _walk_headers(buf: bytearray, big: bool, start: int, frac_mul: int, frac_lim: int = -1,
                  limits: tuple[int, int | None, int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """`_walk_python` from `start` with each walked record's header read: (where each header
    begins, ts_ns, caplen, wirelen, the walk's end, the first walked record that is not
    plausible, -1 if none). Not plausible: a time fraction of `frac_lim` or more (if not
    -1); and with `limits` = (the largest captured length, the latest time read before or
    None, the time window in ns), what `CaptureReader._pcap_first_bad` describes. One
    compiled pass when built."""
    if _walk is None:
        starts, end = _walk_python(buf, big, start)
        hdr = _u32_rows(np.frombuffer(buf, dtype=np.uint8), starts - 8, 4, big)
        ts = hdr[:, 0] * 1_000_000_000 + hdr[:, 1] * frac_mul
        bad = hdr[:, 1] >= frac_lim if frac_lim >= 0 else np.zeros(len(ts), bool)
        if limits is not None and len(ts):
            caplim, anchor, window = limits
            cl, wl = hdr[:, 2], hdr[:, 3]
            prev = np.maximum.accumulate(ts)  # the latest time before each record
            prev[1:] = prev[:-1]
            prev[0] = ts[0] if anchor is None else anchor
            if anchor is not None:
                np.maximum(prev, anchor, out=prev)
            bad |= ((cl > caplim) | (cl > wl) | (wl <= 0) | (ts < prev - window)
                    | (ts > prev + window))
        over = np.flatnonzero(bad)
        return (starts - 8, ts, hdr[:, 2].copy(), hdr[:, 3].copy(), end,
                int(over[0]) if len(over) else -1)
    caplim, anchor, window = limits if limits is not None else (-1, None, 0)
    parts, first, done = [], -1, 0
    per = 48  # room for records of 48 bytes and more (any TCP/IP packet), then for any record
    while True:
        out = [np.empty(max(len(buf) - start, 0) // per + 1, dtype=np.int64) for _ in range(4)]
        k, end, over = _walk.walk_headers(buf, big, start, frac_mul, *out, frac_lim, caplim,
                                          anchor or 0, anchor is not None, window)
        if first < 0 and over >= 0:
            first = done + over
        done += k
        parts.append([o[:k] for o in out])
        if k:
            top = int(out[1][:k].max())
            anchor = top if anchor is None else max(anchor, top)
        if end > len(buf) - 8:
            break
        start, per = end - 8, 16
    if len(parts) == 1:
        return (*parts[0], end, first)
    return (*(np.concatenate(col) for col in zip(*parts)), end, first)


try:
    from . import _walk
except ImportError:  # built without a C compiler: the pure-Python walk
    _walk = None


class CaptureReader:
    """Open a capture, validate its header; iterate to get `RecordBatch`es.

    Damage after the first packet record (truncation, corrupt records or blocks, a corrupt
    gzip stream) becomes a warning in `info.warnings`, or with `strict=True` a `CaptureError`.
    """

    def __init__(self, path: str, chunk_bytes: int = 32 << 20, strict: bool = False,
                 stream: BinaryIO | None = None) -> None:
        self.path = path
        self._given = stream  # a binary file object to read instead of `path` (its name)
        self.chunk_bytes = max(int(chunk_bytes), 4096)
        self.strict = strict
        self.info = CaptureInfo(path=path)
        self._frames = 0
        self._iterated = False
        self._size: int | None = None  # size of a plain regular file: sizes the buffers
        self._unlisted = 0  # warnings beyond MAX_WARNINGS
        self._damage: tuple[str, str, int, bool] | None = None  # corrupt stretch skipped
        self._stream = self._open(path)
        self._pos = 0  # file (uncompressed) offset of the first unconsumed byte
        self._pending = b""
        self._spare: bytearray | None = None  # the last chunk buffer, for reuse
        head = self._read(4)
        if len(head) < 4 and self.info.compressed:
            raise CaptureError(path, "truncated gzip stream: it holds only "
                               f"{len(head)} bytes of data", f"uncompressed byte {len(head)}")
        if len(head) == 0:
            raise CaptureError(path, "empty file")
        if len(head) < 4:
            raise CaptureError(path, "not a pcap or pcapng capture: file is only "
                               f"{len(head)} bytes", "byte 0")
        le = int.from_bytes(head, "little")
        be = int.from_bytes(head, "big")
        if le == PCAPNG_SHB:
            self.info.format = "pcapng"
            self._pending = head
            self._ifaces: list[_Interface] = []
            self._iface_pool: dict[tuple, _Interface] = {}
            self._lt_table: np.ndarray | None = None
            self._sec_base = 0
            self._big = False
            self._last_ts = 0
        elif le in (PCAP_US, PCAP_NS) or be in (PCAP_US, PCAP_NS):
            self.info.format = "pcap"
            self._open_pcap(head)
        elif PCAP_KUZNETSOV in (le, be):
            raise CaptureError(path, "unsupported capture format: Kuznetsov-patched pcap "
                               "(convert it with editcap)", "byte 0")
        else:
            what = "gzip-compressed data" if self.info.compressed else "data"
            raise CaptureError(path, f"not a pcap or pcapng capture: {what} starts with "
                               f"{head.hex(' ')}", "byte 0")

    # ------------------------------------------------------------------ input plumbing
    def _open(self, path: str):
        try:
            if path == "-" or self._given is not None:
                raw = sys.stdin.buffer if self._given is None else self._given
                magic = raw.read(2)
                raw = _Prefixed(magic, raw)
            elif url_scheme(path):
                raw = open_url(path)
                magic = raw.read(2)
                raw = _Prefixed(magic, raw, owned=True)
            else:
                raw = open(path, "rb")
                magic = raw.read(2)
                raw.seek(0)
                st = os.fstat(raw.fileno())
                if stat.S_ISREG(st.st_mode):
                    self._size = st.st_size
        except FileNotFoundError:
            raise CaptureError(path, "no such file") from None
        except IsADirectoryError:
            raise CaptureError(path, "is a directory, not a capture file") from None
        except PermissionError:
            raise CaptureError(path, "permission denied") from None
        except OSError as e:
            raise CaptureError(path, f"cannot read: {e.strerror or e}") from None
        if magic == b"\x1f\x8b":
            self.info.compressed = True
            self._size = None
            return _Gunzip(raw)
        return raw

    def _read(self, n: int) -> bytes:
        """Read up to n bytes of the file header (fewer only at end of input)."""
        try:
            out = self._stream.read(n)
            if out is None:  # pragma: no cover - non-blocking streams
                out = b""
            while 0 < len(out) < n:  # short reads on pipes
                more = self._stream.read(n - len(out))
                if not more:
                    break
                out += more
        except OSError as e:
            raise CaptureError(self.path, f"cannot read: {e.strerror or e}") from None
        gz_error = getattr(self._stream, "error", None)
        if len(out) < n and gz_error:
            raise CaptureError(self.path, gz_error, self._stream.error_where)
        return out

    def _fill(self, carry: bytes, need: int = 0) -> tuple[bytearray, bool]:
        """A buffer of `carry` followed by up to chunk_bytes of input (at least enough for
        `need` bytes in all, for a record known to be that long); (buf, at_eof).

        The previous buffer is reused when nothing else refers to it any more (its batches
        were dropped): refilling memory already mapped is 4 times faster than a fresh one."""
        c = len(carry)
        want = max(self.chunk_bytes, need - c)
        if self._size is not None:  # don't allocate a whole chunk for a small file
            want = min(want, max(self._size - self._pos - c, 0) + 4096)
        old, self._spare = self._spare, None
        if old is not None and sys.getrefcount(old) == 2:  # `old` and the call's argument
            buf = old
            if len(buf) > c + want:
                del buf[c + want:]
            else:
                buf.extend(bytes(c + want - len(buf)))
        else:
            buf = bytearray(c + want)
        del old
        self._spare = buf
        buf[:c] = carry
        got = self._readinto(memoryview(buf)[c:])
        if got < want:
            del buf[c + got:]
        return buf, got == 0

    def _readinto(self, mv: memoryview) -> int:
        total, want = 0, len(mv)
        try:
            while total < want:
                # released explicitly: a Python-level readinto (a URL's stream) leaves the
                # view in its frame, and a sampling profiler (Dask workers run one) can keep
                # that frame alive; the export would then forbid resizing the buffer
                view = mv[total:]
                try:
                    k = self._stream.readinto(view)
                finally:
                    view.release()
                if not k:
                    break
                total += k
        except OSError as e:
            raise CaptureError(self.path, f"cannot read: {e.strerror or e}") from None
        finally:
            mv.release()
        return total

    # ------------------------------------------------------------------ pcap
    def _open_pcap(self, head: bytes) -> None:
        rest = self._read(20)
        if len(rest) < 20:
            raise CaptureError(self.path, f"truncated pcap file header: {4 + len(rest)} of "
                               "24 bytes", f"byte {4 + len(rest)}")
        le = int.from_bytes(head, "little")
        self._big = le not in (PCAP_US, PCAP_NS)
        magic = int.from_bytes(head, "big" if self._big else "little")
        self._ts_frac_mul = 1000 if magic == PCAP_US else 1
        self._frac_lim = 1_000_000 if magic == PCAP_US else 1_000_000_000
        e = ">" if self._big else "<"
        major, minor, _zone, _sigfigs, snaplen, network = struct.unpack(e + "HHiIII", rest)
        if major != 2:
            raise CaptureError(self.path, f"unsupported pcap version {major}.{minor}", "byte 4")
        lt = network & 0xFFFF
        if lt not in SUPPORTED_LINKTYPES:
            raise CaptureError(self.path, f"unsupported link type {lt} ({linktype_name(lt)}); "
                               "nagleprobe reads EN10MB, LINUX_SLL, LINUX_SLL2, RAW, IPV4, "
                               "IPV6, NULL and LOOP captures", "byte 20")
        self._linktype = lt
        self._snaplen = snaplen if 0 < snaplen <= MAX_CAPLEN else MAX_CAPLEN
        self._anchor: int | None = None  # latest time (ns) of the records read so far
        self.info.link_types.append(linktype_name(lt))
        self._pos = 24

    def _pcap_chunks(self) -> Iterator[RecordBatch]:
        big = self._big
        carry = b""
        need = 0
        eof = False
        resync = False  # skipping a corrupt stretch: looking for the next valid record
        while not eof:
            buf, eof = self._fill(carry, need)
            base, n, need = self._pos, len(buf), 0  # base: file offset of buf[0]
            data = np.frombuffer(buf, dtype=np.uint8)
            p = 0  # where the next record starts
            while True:
                if resync:
                    p, found, need = self._pcap_resync(data, p, eof, self._damage[2] - base)
                    if not found:
                        break
                    resync = False
                    self._resynced(base + p, "record")
                    # the chain vouches for the record found: its time is the anchor now
                    t = int(self._pcap_plausible(data, np.array([p], np.int64))[2][0])
                    self._anchor = t if self._anchor is None else max(self._anchor, t)
                # every record header from p on (whose caplen field is in the buffer)
                st, ts, cl, wl, w, first = _walk_headers(
                    buf, big, p, self._ts_frac_mul, self._frac_lim,
                    (min(MAX_CAPLEN, self._snaplen), self._anchor, _NS_WINDOW))
                k = len(st)
                end = w - 8  # where the record after the walked ones starts
                bad = self._pcap_first_bad(data, st, ts, cl, wl, first) if first >= 0 else None
                if bad is not None:
                    j = bad[0]
                    end = int(st[j])
                    k = j
                elif k and end > n:  # the last record runs past the buffer: carry it over
                    k -= 1
                    end = int(st[k])
                    need = int(cl[k]) + 16
                if k:
                    yield self._pcap_batch(data, st[:k], ts[:k], cl[:k], wl[:k], base)
                if bad is None:
                    p = end
                    break
                _, problem, gap = bad
                if gap and k == 0 and end == p:  # (cannot happen: the resync set the anchor)
                    gap = False
                self._corrupt(f"corrupt record: {problem}", "record", self._frames + 1,
                              base + end, defer=gap)
                resync = True
                need = 0
                # a deletion in the last record read puts the next header a little earlier
                p = end if gap else max(end - RESYNC_BACK, int(st[k - 1]) + 16 if k else p)
            carry = bytes(buf[p:]) if p < n else b""
            buf = data = None  # let _fill reuse the buffer once the batches are dropped
            self._pos = base + p
        self._finish(len(carry), resync)

    def _pcap_first_bad(self, data: np.ndarray, st: np.ndarray, ts: np.ndarray, cl: np.ndarray,
                        wl: np.ndarray, j: int) -> tuple[int, str, bool]:
        """What is wrong with walked record `j`, the first one not plausible (as
        `_walk_headers` judges): (j, problem, whether the only problem is a time too far after
        the anchor, which may be a real gap). The anchor is the latest time before the
        record; the records before it are all plausible, so only they move it."""
        c, w = int(cl[j]), int(wl[j])
        if c > MAX_CAPLEN:
            return j, f"captured length {c} exceeds the limit of {MAX_CAPLEN} bytes", False
        if c > self._snaplen:
            return j, f"captured length {c} exceeds the snap length {self._snaplen}", False
        if w <= 0:
            return j, "original length 0", False
        if c > w:
            return j, f"captured length {c} exceeds the original length {w}", False
        frac = int(_u32_rows(data, st[j:j + 1] + 4, 1, self._big)[0, 0])
        if frac >= self._frac_lim:
            return j, f"time fraction {frac} is not below {self._frac_lim}", False
        prev = int(ts[0]) if self._anchor is None else self._anchor
        if j:
            prev = max(prev, int(ts[:j].max()))
        d = (int(ts[j]) - prev) / 1e9
        if d < 0:
            return j, f"time is {-d:.0f} s before the records read so far", False
        return j, f"time is {d:.0f} s after the records read so far", True

    def _pcap_batch(self, data: np.ndarray, st: np.ndarray, ts: np.ndarray, caplen: np.ndarray,
                    wirelen: np.ndarray, base: int = 0) -> RecordBatch:
        k = len(st)
        frame = np.arange(self._frames + 1, self._frames + 1 + k, dtype=np.int64)
        self._frames += k
        self.info.packets += k
        top = int(ts.max())
        self._anchor = top if self._anchor is None else max(self._anchor, top)
        return RecordBatch(data=data, offset=st + 16, caplen=caplen, wirelen=wirelen, ts_ns=ts,
                           linktype=np.full(k, self._linktype, dtype=np.int32), frame=frame,
                           start=st + base, tunnels=self.info.tunnels)

    def _pcap_plausible(self, data: np.ndarray, pos: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Could a record header start at each of `pos` (the header alone)? (mask, caplen,
        ts_ns)."""
        h = _u32_rows(data, pos, 4, self._big)
        cl, wl = h[:, 2], h[:, 3]
        ok = ((h[:, 1] < self._frac_lim) & (cl <= self._snaplen) & (cl <= wl) & (wl > 0)
              & (wl <= RESYNC_MAX_WIRELEN))
        return ok, cl, h[:, 0] * 1_000_000_000 + h[:, 1] * self._ts_frac_mul

    def _link_plausible(self, data: np.ndarray, pos: np.ndarray, cl: np.ndarray) -> np.ndarray:
        """Does the record whose header is at each of `pos` start like a frame of the file's
        link type (records too short to tell pass)?"""
        lt, n = self._linktype, len(data)
        at = pos + 16
        if lt == 1:  # Ethernet: a known EtherType or an 802.3 length
            can = (cl >= 14) & (at + 14 <= n)
            et = np.zeros(len(pos), np.int64)
            i = np.flatnonzero(can)
            et[i] = (data[at[i] + 12].astype(np.int64) << 8) | data[at[i] + 13]
            return ~can | (et <= 1500) | np.isin(et, _ETHERTYPES)
        if lt in (12, 101, 228, 229):  # raw IP: version 4 or 6
            can = (cl >= 1) & (at < n)
            v = np.zeros(len(pos), np.int64)
            i = np.flatnonzero(can)
            v[i] = data[at[i]] >> 4
            return ~can | (v == 4) | (v == 6)
        if lt == 113:  # SLL: packet type 0-4
            can = (cl >= 2) & (at + 2 <= n)
            v = np.zeros(len(pos), np.int64)
            i = np.flatnonzero(can)
            v[i] = (data[at[i]].astype(np.int64) << 8) | data[at[i] + 1]
            return ~can | (v <= 4)
        return np.ones(len(pos), bool)

    def _pcap_resync(self, data: np.ndarray, start: int, eof: bool,
                     damage: int) -> tuple[int, bool, int]:
        """The first position >= start where a chain of plausible records starts (see
        RESYNC_CHAIN; or plausible records end exactly at the end of the file): (pos, True,
        0).  Without one in the buffer: (pos to carry on from, False, bytes needed from
        there).  A candidate before `damage` (where the damaged header was read) needs the
        whole chain: with bytes deleted at the start of that header, the one just before it
        reads as a record whose time is off by whole seconds."""
        n = len(data)
        q = start
        while q <= n - 16:
            m = min(n - 15 - q, RESYNC_SPAN)
            if not data[q + 12:q + m + 15].any():  # zeros (a zeroed page, a gzip bomb): no
                q += m                               # header there has a wire length
                continue
            c = np.arange(q, q + m, dtype=np.int64)
            ok, cl, ts = self._pcap_plausible(data, c)
            if self._anchor is not None:
                ok &= ts >= self._anchor - RESYNC_EARLIER_NS
            idx = np.flatnonzero(ok)
            ok[idx] = self._link_plausible(data, c[idx], cl[idx])
            c, cl, ts = c[ok], cl[ok], ts[ok]
            if len(c):
                decided = _first_decided(c, *self._pcap_chain(data, c, cl, ts, eof,
                                                              c < damage))
                if decided:
                    return decided
            q += m
        return (n if eof else q), False, 0

    def _pcap_chain(self, data: np.ndarray, c: np.ndarray, cl: np.ndarray, ts: np.ndarray,
                    eof: bool, whole: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For candidate record starts `c` (plausible headers, captured lengths `cl`, times
        `ts`): status 1 = the next RESYNC_CHAIN - 1 headers (RESYNC_CHAIN_FAR - 1 for a
        candidate far after the anchor) are plausible too with times in order (or the records
        end exactly at EOF: see at_eof), 2 = undecided until more data is read
        (`need` bytes from c), 0 = rejected."""
        n = len(data)
        far = (ts > self._anchor + _NS_WINDOW) if self._anchor is not None else np.zeros(
            len(c), bool)
        want = np.where(far, RESYNC_CHAIN_FAR, RESYNC_CHAIN) - 1
        # records ending exactly at the end of the file vouch for themselves, but a candidate
        # far after the anchor needs RESYNC_CHAIN of them, and one before the damage a
        # second record whose time checks its own
        at_eof = np.where(far, RESYNC_CHAIN, np.where(whole, 2, 1))
        status = np.zeros(len(c), np.int8)
        need = np.zeros(len(c), np.int64)
        undecided = np.ones(len(c), bool)
        p, length, last = c, cl, ts.copy()
        for step in range(RESYNC_CHAIN_FAR - 1):
            enough = undecided & (want <= step)
            status[enough] = 1
            undecided &= ~enough
            end = p + 16 + length  # end of this record = start of the next header
            done = undecided & (end == n) & eof & (step + 1 >= at_eof)
            status[done] = 1
            undecided &= ~done
            short = undecided & (end + 16 > n)
            if not eof:
                status[short] = 2
                need[short] = end[short] + 16 - c[short]
            undecided &= ~short
            idx = np.flatnonzero(undecided)
            if not len(idx):
                break
            ok, nxt, t = self._pcap_plausible(data, end[idx])
            ok &= ((t >= last[idx] - RESYNC_EARLIER_NS)
                   & (t <= last[idx] + _NS_WINDOW))
            undecided[idx[~ok]] = False
            length = np.zeros(len(c), np.int64)
            length[idx] = nxt
            last = last.copy()
            last[idx] = np.maximum(last[idx], t)
            p = end
        status[undecided] = 1
        return status, need

    # ------------------------------------------------------------------ pcapng
    def _pcapng_chunks(self) -> Iterator[RecordBatch]:
        carry = self._pending
        self._pending = b""
        need = 0
        eof = False
        block_no = 0  # blocks fully consumed so far
        resync = False
        while not eof:
            buf, eof = self._fill(carry, need)
            base, n, need = self._pos, len(buf), 0
            data = np.frombuffer(buf, dtype=np.uint8)
            pos = 0
            while True:
                if resync:
                    pos, found, need = self._pcapng_resync(data, pos, eof)
                    if not found:
                        break
                    resync = False
                    block_no += 1  # the corrupt stretch
                    self._resynced(base + pos, "block")
                starts = array("q")
                append = starts.append
                # segments: (first record index, big-endian?, interface base) - new one per SHB
                segs = [(0, self._big, self._sec_base)]
                bad = None
                big = self._big
                unpack = struct.Struct(">II" if big else "<II").unpack_from
                trailer = struct.Struct(">I" if big else "<I").unpack_from
                lim = n - 8
                checked = 0  # starts[:checked] have had their trailing length checked
                max_block, epb, spb, pb = MAX_BLOCK, BT_EPB, BT_SPB, BT_PB
                while pos <= lim:
                    if _walk is not None:  # a run of packet blocks, compiled
                        out = np.empty((n - pos) // 12 + 1, dtype=np.int64)
                        k, pos, passed = _walk.walk_blocks(buf, pos, big, max_block, out)
                        all_checked = checked == len(starts)
                        starts.frombytes(out[:k].tobytes())
                        if all_checked:  # the walk checked the trailing lengths of its blocks
                            checked = len(starts)
                        block_no += passed
                        if pos > lim:
                            continue  # ends the loop through its `else`: the trailer check
                    bt, bl = unpack(buf, pos)
                    end = pos + bl
                    # The hot loop: packet blocks with a sane length; their trailing length
                    # copies are compared in bulk before any other block is read, and at the end.
                    # (block_length_ok written out: without the compiled walk this runs per block)
                    if (bt == epb or bt == spb or bt == pb) and (
                            12 <= bl <= max_block and not bl & 3 and end <= n):
                        append(pos)
                        pos = end
                        block_no += 1
                        continue
                    j = self._bad_trailer(data, starts, checked, big)
                    checked = len(starts)
                    if j is not None:
                        break
                    if bt != PCAPNG_SHB:
                        if not block_length_ok(bl):
                            bad = (pos, f"block length {bl} is invalid (must be a multiple of 4 "
                                   f"between {MIN_BLOCK_LEN} and {MAX_BLOCK})")
                            break
                        if end > n:
                            need = bl
                            break
                        tl, = trailer(buf, end - 4)
                        if tl != bl:
                            bad = (pos, f"block length {bl} does not match the length {tl} "
                                   "at the end of the block")
                            break
                        if bt == BT_IDB:
                            err = self._parse_idb(buf, pos, bl, big,
                                                  f"block {block_no + 1} at byte {base + pos}")
                            if err:
                                bad = (pos, err)
                                break
                        elif bt not in KNOWN_BLOCKS:
                            self._skip("unknown-block-type", 1)
                        pos = end
                        block_no += 1
                        continue
                    # a section header: its byte-order magic sets how the section is read
                    if pos + 12 > n:
                        break
                    bom = buf[pos + 8:pos + 12]
                    if bom == b"\x4d\x3c\x2b\x1a":
                        big = False
                    elif bom == b"\x1a\x2b\x3c\x4d":
                        big = True
                    else:
                        bad = (pos, f"section header with a bad byte-order magic {bom.hex()}")
                        break
                    unpack = struct.Struct(">II" if big else "<II").unpack_from
                    trailer = struct.Struct(">I" if big else "<I").unpack_from
                    bt, bl = unpack(buf, pos)
                    if not block_length_ok(bl, MIN_SHB_LEN):
                        bad = (pos, f"section header block length {bl} is invalid")
                        break
                    if pos + bl > n:
                        need = bl
                        break
                    tl, = trailer(buf, pos + bl - 4)
                    if tl != bl:
                        bad = (pos, f"block length {bl} does not match the length {tl} "
                               "at the end of the block")
                        break
                    major = struct.unpack_from(">H" if big else "<H", buf, pos + 12)[0]
                    if major != 1:
                        bad = (pos, f"unsupported pcapng version {major}")
                        break
                    self._big = big
                    self._sec_base = len(self._ifaces)
                    segs.append((len(starts), big, self._sec_base))
                    pos += bl
                    block_no += 1
                else:
                    j = self._bad_trailer(data, starts, checked, big)
                if j is not None:  # a packet block walked over had a wrong length
                    block_no -= len(starts) - j
                    at = starts[j]
                    bl, = trailer(buf, at + 4)
                    tl, = trailer(buf, at + bl - 4)
                    bad = (at, f"block length {bl} does not match the length {tl} at the end "
                           "of the block")
                    need = 0
                    del starts[j:]
                if len(starts):
                    yield self._pcapng_batch(data, starts, segs, base)
                if bad is None:
                    break
                self._corrupt(f"corrupt block: {bad[1]}", "block", block_no + 1, base + bad[0])
                resync = True
                need = 0
                pos = bad[0] + 1
            carry = bytes(buf[pos:]) if pos < n else b""
            buf = data = None  # let _fill reuse the buffer once the batches are dropped
            self._pos = base + pos
        self._finish(len(carry), resync, unit="block", number=block_no + 1)

    @staticmethod
    def _bad_trailer(data: np.ndarray, starts: array, first: int, big: bool) -> int | None:
        """Index of the first packet block in starts[first:] whose trailing length copy differs
        from its length (the blocks are complete), or None."""
        if len(starts) <= first:
            return None
        st = np.frombuffer(starts, dtype=np.int64)[first:].copy()  # no view left: `starts` grows
        bl = _u32_rows(data, st + 4, 1, big)[:, 0]
        bad = np.flatnonzero(_u32_rows(data, st + bl - 4, 1, big)[:, 0] != bl)
        return first + int(bad[0]) if len(bad) else None

    def _pcapng_resync(self, data: np.ndarray, start: int, eof: bool) -> tuple[int, bool, int]:
        """The first position >= start where a block of a known type starts whose trailing
        length copy matches its length: (pos, True, 0).  Without one in the buffer: (pos to
        carry on from, False, bytes needed from there)."""
        n = len(data)
        big = self._big
        q = start
        while q <= n - 12:
            m = min(n - 11 - q, RESYNC_SPAN)
            c = np.arange(q, q + m, dtype=np.int64)
            h = _u32_rows(data, c, 2, big)
            bt, bl = h[:, 0], h[:, 1]
            ok = np.isin(bt, _KNOWN_BLOCKS) & block_length_ok(bl)
            shb = np.flatnonzero(bt == PCAPNG_SHB)
            for i in shb:  # a section header has its own byte order
                bom = bytes(data[q + i + 8:q + i + 12])
                if bom in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
                    sbig = bom[0] == 0x1A
                    v = int(_u32(data, c[i:i + 1] + 4, sbig)[0])
                    if block_length_ok(v, MIN_SHB_LEN):
                        ok[i] = True
                        bl[i] = v
            idx = np.flatnonzero(ok)
            if len(idx):
                c, bl = c[idx], bl[idx]
                end = c + bl
                complete = end <= n
                tl = np.full(len(c), -1, np.int64)
                ic = np.flatnonzero(complete)
                if len(ic):
                    tl[ic] = _u32(data, end[ic] - 4, big)
                    for j in ic[np.isin(idx[ic], shb)]:  # SHB trailers in their own order
                        sbig = data[c[j] + 8] == 0x1A
                        tl[j] = int(_u32(data, end[j:j + 1] - 4, bool(sbig))[0])
                status = np.where(complete & (tl == bl), 1, np.where(~complete & (not eof), 2, 0))
                decided = _first_decided(c, status, bl)
                if decided:
                    return decided
            q += m
        return (n if eof else q), False, 0

    def _parse_idb(self, buf: bytes, pos: int, bl: int, big: bool, where: str) -> str | None:
        e = ">" if big else "<"
        if bl < MIN_BLOCK[BT_IDB]:
            return f"interface description block length {bl} is too short"
        lt, _res, snaplen = struct.unpack_from(e + "HHI", buf, pos + 8)
        iface = _Interface(lt, snaplen)
        number = len(self._ifaces) - self._sec_base
        o, end = pos + 16, pos + bl - 4
        while o + 4 <= end:
            code, ln = struct.unpack_from(e + "HH", buf, o)
            if code == 0:
                break
            v = o + 4
            if v + ln > end:
                self._idb_problem(f"interface {number}: option {code} of length {ln} runs past "
                                  "the end of its block", where, "its options after it ignored")
                break
            if code == 9 and ln >= 1:
                problem = iface.set_tsresol(buf[v])
                if problem:
                    self._idb_problem(f"interface {number}: {problem}", where,
                                      "its times read as microseconds (the default)")
            elif code == 14 and ln >= 8:
                iface.set_tsoffset(struct.unpack_from(e + "q", buf, v)[0])
            o = v + ((ln + 3) & ~3)
        # identical interfaces share one object: 2 M tiny interface blocks cost a list
        key = (iface.linktype, iface.snaplen, iface.tsmul, iface.tsdiv, iface.tsshift,
               iface.tsoffset_ns)
        iface = self._iface_pool.setdefault(key, iface)
        self._ifaces.append(iface)
        self._lt_table = None
        name = linktype_name(lt)
        if name not in self.info.link_types:
            self.info.link_types.append(name)
        return None

    def _pcapng_batch(self, data: np.ndarray, starts: array, segs: list, base: int = 0
                      ) -> RecordBatch:
        st = np.frombuffer(starts, dtype=np.int64)
        k = len(st)
        frame = np.arange(self._frames + 1, self._frames + 1 + k, dtype=np.int64)
        self._frames += k
        self.info.packets += k
        offset = np.zeros(k, np.int64)
        caplen = np.zeros(k, np.int64)
        wirelen = np.zeros(k, np.int64)
        ts = np.full(k, -1, np.int64)
        have_ts = np.zeros(k, bool)
        ifidx = np.full(k, -1, np.int64)
        blen = np.zeros(k, np.int64)
        short = np.zeros(k, bool)
        bounds = [s[0] for s in segs[1:]] + [k]
        for (lo, big, ibase), hi in zip(segs, bounds):
            if hi <= lo:
                continue
            s = st[lo:hi]
            # type, length, and (EPB, PB) the five fields after them, read in one pass if
            # the last block holds them (they are then garbage for SPBs, and not used)
            seven = s[-1] + 28 <= len(data)
            w = _u32_rows(data, s, 7 if seven else 2, big)
            btype, bl = w[:, 0], w[:, 1]
            blen[lo:hi] = bl
            spb = btype == BT_SPB
            too_short = bl < np.where(spb, MIN_BLOCK[BT_SPB], MIN_BLOCK[BT_EPB])
            short[lo:hi] = too_short
            ifaces_here = len(self._ifaces) - ibase
            # EPB: ifid ts_hi ts_lo caplen origlen at +8; data at +28
            # PB : ifid(16) drops(16) ts_hi ts_lo caplen origlen; data at +28
            # SPB: origlen at +8; data at +12
            idx = np.nonzero(~spb & ~too_short)[0]
            if len(idx):
                # the usual case, only EPBs and PBs: slices, not index lists (much faster)
                every = len(idx) == hi - lo
                g = slice(lo, hi) if every else lo + idx
                at = s if every else s[idx]
                if seven:
                    f = w[:, 2:] if every else w[idx, 2:]
                else:
                    f = _u32_rows(data, at + 8, 5, big)
                ifid = f[:, 0]
                pb = btype[idx] == BT_PB
                if pb.any():
                    ifid = ifid.copy()
                    ifid[pb] = (ifid[pb] >> 16) if big else (ifid[pb] & 0xFFFF)
                ok = ifid < ifaces_here
                ids = ibase + ifid
                ifidx[g] = np.where(ok, ids, -1)
                units = ((f[:, 1].astype(np.uint64) << np.uint64(32))
                         | f[:, 2].astype(np.uint64))
                offset[g] = at + 28
                caplen[g] = f[:, 3]
                wirelen[g] = f[:, 4]
                # each interface's blocks get its clock (all of them: a slice, no copies)
                known = slice(None) if ok.all() else ok
                present = np.flatnonzero(np.bincount(ids[known]))  # the interfaces in use
                tsv = np.zeros(len(idx), np.int64)
                for u in present:
                    m = known if len(present) == 1 else ok & (ids == u)
                    tsv[m] = self._ifaces[int(u)].ts_ns(units[m])
                ts[g] = tsv
                have_ts[g] = ok
            sidx = np.nonzero(spb & ~too_short)[0]
            if len(sidx):
                g = lo + sidx
                ol = _u32_rows(data, s[sidx] + 8, 1, big)[:, 0]
                space = bl[sidx] - 16
                if ifaces_here > 0:
                    ifidx[g] = ibase
                    snap = self._ifaces[ibase].snaplen or MAX_BLOCK
                    caplen[g] = np.minimum(np.minimum(ol, snap), space)
                else:
                    caplen[g] = np.minimum(ol, space)
                wirelen[g] = ol
                offset[g] = s[sidx] + 12
        # caplen must fit in the block: EPB/PB 32 bytes of overhead, SPB 16
        overhead = np.where(offset - st == 12, 16, 32)
        bad = ~short & ((caplen > blen - overhead) | (caplen < 0))
        # SPB timestamps: the previous packet's
        if not have_ts.all():
            pos_idx = np.where(have_ts, np.arange(k), -1)
            np.maximum.accumulate(pos_idx, out=pos_idx)
            ts = np.where(pos_idx >= 0, ts[np.maximum(pos_idx, 0)], self._last_ts)
        if k:
            self._last_ts = int(ts[-1])
        lt_table = self._lt_table
        if lt_table is None or len(lt_table) != len(self._ifaces) + 1:
            lt_table = self._lt_table = np.array([i.linktype for i in self._ifaces] + [-1],
                                                 dtype=np.int32)
        linktype = lt_table[ifidx]  # -1 -> last entry (-1)
        keep = (ifidx >= 0) & ~bad
        if self.strict and (ifidx < 0).any() and (unknown := np.flatnonzero(
                (ifidx < 0) & ~short)).size:  # damage, which strict reading refuses
            j = int(unknown[0])
            raise CaptureError(self.path, "packet block names an interface the section does "
                               "not describe", f"frame {int(frame[j])} at byte "
                               f"{self._pos + int(st[j])}")
        start = st + base
        if not keep.all():
            self._skip("corrupt-block", int(short.sum()))
            self._skip("unknown-interface", int(((ifidx < 0) & ~short).sum()))
            self._skip("caplen-exceeds-block", int((bad & (ifidx >= 0)).sum()))
            sel = np.nonzero(keep)[0]
            offset, caplen, wirelen, ts = offset[sel], caplen[sel], wirelen[sel], ts[sel]
            linktype, frame, start = linktype[sel], frame[sel], start[sel]
        return RecordBatch(data=data, offset=offset, caplen=caplen, wirelen=wirelen,
                           ts_ns=ts, linktype=linktype, frame=frame, start=start,
                           tunnels=self.info.tunnels)

    # ------------------------------------------------------------------ damage
    def _skip(self, reason: str, n: int) -> None:
        if n:
            self.info.skipped[reason] = self.info.skipped.get(reason, 0) + n

    def _warn(self, text: str) -> None:
        if len(self.info.warnings) < MAX_WARNINGS:
            self.info.warnings.append(text)
        else:
            self._unlisted += 1

    def _idb_problem(self, problem: str, where: str, consequence: str) -> None:
        """A flaw in an interface description: a warning (an error with strict), even before
        the first packet."""
        if self.strict:
            raise CaptureError(self.path, problem, where)
        self._warn(f"{problem} ({where}); {consequence}")

    def _damaged(self, problem: str, where: str, consequence: str) -> None:
        """Damage found: an error before the first record (or when strict), else a warning."""
        if self._frames == 0 or self.strict:
            raise CaptureError(self.path, problem, where)
        self._warn(f"{problem} ({where}); {consequence}")

    def _corrupt(self, problem: str, unit: str, number: int, at: int,
                 defer: bool = False) -> None:
        """A record/block with impossible lengths at file offset `at`: skipped, with the
        bytes up to the next valid one (the warning is written once that is known).  With
        `defer` (a pcap record whose time jumps far ahead: a gap in the capture or damage)
        it is damage only if reading does not resume at `at` itself."""
        where = f"{unit} {number} at byte {at}"
        if not defer:
            self._damage_found(problem, where, unit)
        self._damage = (problem, where, at, defer)

    def _damage_found(self, problem: str, where: str, unit: str) -> None:
        if self._frames == 0 or self.strict:
            raise CaptureError(self.path, problem, where)
        self._skip(f"corrupt-{unit}", 1)

    def _resynced(self, at: int, unit: str) -> None:
        problem, where, start, deferred = self._damage
        self._damage = None
        if deferred:
            if at == start:  # the records after the gap chain on: a real gap, not damage
                return
            self._damage_found(problem, where, unit)
        if at >= start:
            self._warn(f"{problem} ({where}); skipped {at - start} bytes to the next valid "
                       f"{unit} at byte {at}")
        else:
            self._warn(f"{problem} ({where}); the next valid {unit} starts {start - at} "
                       f"bytes earlier, at byte {at}, inside the previous {unit} (bytes are "
                       "missing from that one)")

    def _finish(self, leftover: int, resync: bool, unit: str = "record",
                number: int | None = None) -> None:
        """End of input: report a corrupt stretch running to the end, a truncated last
        record or block, a truncated or corrupt gzip stream, and unlisted warnings."""
        gz = self._stream if isinstance(self._stream, _Gunzip) else None
        gz_error = gz.error if gz else None
        done = f"analysed the {self._frames} complete packet records"
        if resync:
            problem, where, start, deferred = self._damage
            self._damage = None
            if deferred:
                self._damage_found(problem, where, unit)
            self._warn(f"{problem} ({where}); nothing valid after it: ignored the last "
                       f"{self._pos + leftover - start} bytes")
        elif leftover:
            num = self._frames + 1 if number is None else number
            which = "the first" if self._frames == 0 else "a"
            inside = f"{unit} {num} at byte {self._pos}"
            if gz_error:  # the gzip stream broke inside this record
                self._damaged(gz_error, f"{gz.error_where}, inside {inside}", done)
                gz_error = None
            else:
                what = "gzip stream" if gz and gz.truncated else "file"
                self._damaged(f"truncated capture: the {what} ends inside {which} {unit}",
                              inside, done)
        elif gz and gz.truncated:
            self._damaged("truncated gzip stream: it ends early",
                          f"uncompressed byte {self._pos}", done)
        if gz_error:
            self._damaged(gz_error, gz.error_where,
                          f"analysed the {self._frames} packet records before it")
        if self._unlisted:
            self.info.warnings.append(f"{self._unlisted} more warnings like these "
                                      "were not listed")
            self._unlisted = 0

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[RecordBatch]:
        if self._iterated:
            raise RuntimeError("a CaptureReader can be iterated only once")
        self._iterated = True
        try:
            if self.info.format == "pcap":
                yield from self._pcap_chunks()
            else:
                yield from self._pcapng_chunks()
        finally:
            self.close()

    def close(self) -> None:
        s = self._stream
        try:
            if s is not sys.stdin.buffer:
                s.close()
        except Exception:  # pragma: no cover
            pass

    def input_progress(self) -> tuple[int, int | None]:
        """(bytes of the input consumed so far, its total size or None when unknown), both
        counting compressed bytes for gzip input: for progress displays."""
        raw = getattr(self._stream, "_raw", self._stream)
        size = getattr(self, "_input_size", None)
        try:
            if size is None and raw is not sys.stdin.buffer and os.path.isfile(self.path):
                size = self._input_size = os.fstat(raw.fileno()).st_size
            done = raw.tell() if size is not None else self._pos
        except (OSError, ValueError, AttributeError):  # closed: read to the end
            return (size if size is not None else self._pos), size
        return done, size

    def __enter__(self) -> "CaptureReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_uncompressed(path: str) -> BinaryIO:
    """The bytes of the capture file `path` as a stream, gzip inflated in bounded memory
    (a corrupt or cut gzip stream just ends early): for copying records as they are, at the
    file offsets `RecordBatch.start` gives."""
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    return _Gunzip(raw) if magic == b"\x1f\x8b" else raw


def read_capture(path: str, strict: bool = False) -> CaptureReader:
    """A `CaptureReader` for `path` ("-" for standard input)."""
    return CaptureReader(path, strict=strict)
