"""Stage 1: stream packet records out of a pcap / pcapng capture (optionally gzip, or stdin).

The reader never builds a Python object per packet.  The one loop numpy cannot do is walking
the chain of record (pcap) or block (pcapng) headers to find where each record starts; that
loop only appends start offsets to an `array('q')`.  Everything else (timestamps, lengths,
interface link types) is gathered afterwards with numpy over the chunk's bytes.

Lengths read from the file are never trusted for allocation: a record/block length beyond
libpcap's / Wireshark's sanity limits stops the reader (an error before the first record,
a warning after it).
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import CaptureError

MAX_CAPLEN = 262144  # libpcap's MAXIMUM_SNAPLEN
MAX_BLOCK = 16 << 20  # Wireshark's MAX_BLOCK_SIZE for pcapng blocks

PCAP_US = 0xA1B2C3D4
PCAP_NS = 0xA1B23C4D
PCAP_KUZNETSOV = 0xA1B2CD34
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BOM = 0x1A2B3C4D
BT_IDB, BT_PB, BT_SPB, BT_EPB = 1, 2, 3, 6

LINKTYPE_NAMES = {
    0: "NULL", 1: "EN10MB", 12: "RAW", 101: "RAW", 108: "LOOP", 113: "LINUX_SLL",
    228: "IPV4", 229: "IPV6", 276: "LINUX_SLL2",
    # not decoded, named for messages
    6: "IEEE802_5", 9: "PPP", 10: "FDDI", 50: "PPP_HDLC", 104: "C_HDLC", 105: "IEEE802_11",
    127: "IEEE802_11_RADIOTAP", 147: "USER0", 187: "BLUETOOTH_HCI_H4", 189: "USB_LINUX",
    192: "PPI", 195: "IEEE802_15_4", 220: "USB_LINUX_MMAPPED", 249: "NETLINK", 239: "NFLOG",
}
SUPPORTED_LINKTYPES = frozenset({0, 1, 12, 101, 108, 113, 228, 229, 276})


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


class _Prefixed(io.RawIOBase):
    """A non-seekable stream with already-consumed leading bytes put back in front."""

    def __init__(self, prefix: bytes, raw: BinaryIO) -> None:
        self._prefix = prefix
        self._raw = raw

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


class _Gunzip(io.RawIOBase):
    """Streaming gzip decompression (multi-member) that keeps what it decompressed from a
    truncated stream and just flags the truncation."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._d = zlib.decompressobj(31)
        self._out = bytearray()
        self._done = False
        self.truncated = False

    def readable(self) -> bool:
        return True

    def _more(self) -> bool:
        while not self._done:
            comp = self._raw.read(1 << 20)
            if not comp:
                self._done = True
                tail = self._d.flush()
                if not self._d.eof:
                    self.truncated = True
                if tail:
                    self._out += tail
                    return True
                return False
            out = self._d.decompress(comp)
            while self._d.eof and self._d.unused_data:  # next gzip member
                rest = self._d.unused_data
                self._d = zlib.decompressobj(31)
                out += self._d.decompress(rest)
            if out:
                self._out += out
                return True
        return False

    def readinto(self, b) -> int:
        want = len(b)
        while len(self._out) < want and self._more():
            pass
        k = min(want, len(self._out))
        b[:k] = self._out[:k]
        del self._out[:k]
        return k

    def read(self, n: int = -1) -> bytes:
        buf = bytearray(n)
        k = self.readinto(buf)
        return bytes(buf[:k])

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Interface:
    __slots__ = ("linktype", "snaplen", "tsmul", "tsdiv", "tsshift", "tsoffset_ns")

    def __init__(self, linktype: int, snaplen: int) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        self.tsmul = 1000  # default resolution 10^-6
        self.tsdiv = 1
        self.tsshift = 0  # power-of-two resolution: ns = units * 1e9 >> shift
        self.tsoffset_ns = 0

    def set_tsresol(self, v: int) -> None:
        if v & 0x80:
            self.tsshift = v & 0x7F
            self.tsmul, self.tsdiv = 0, 1
        else:
            e = v & 0x7F
            if e <= 9:
                self.tsmul, self.tsdiv = 10 ** (9 - e), 1
            else:
                self.tsmul, self.tsdiv = 1, 10 ** min(e - 9, 18)
            self.tsshift = 0

    def ts_ns(self, units: np.ndarray) -> np.ndarray:
        """units: uint64 raw timestamps -> int64 ns since the epoch."""
        if self.tsshift:
            k = self.tsshift
            sec = (units >> np.uint64(k)).astype(np.int64)
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
            out = out + self.tsoffset_ns
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
    """Gather `width` consecutive 32-bit words at each offset: (n, width) int64."""
    if len(idx) == 0:
        return np.zeros((0, width), dtype=np.int64)
    w = width * 4
    win = as_strided(buf, shape=(len(buf) - w + 1, w), strides=(1, 1), writeable=False)
    return win[idx].view(">u4" if big else "<u4").astype(np.int64)


def _walk_python(buf: bytearray, big: bool) -> tuple[np.ndarray, int]:
    """Offsets of the caplen field (byte 8) of each pcap record header that starts in `buf`
    (a record's caplen field must lie in the buffer), and the offset after the last one."""
    unpack = struct.Struct(">I" if big else "<I").unpack_from
    starts = array("q")
    append = starts.append
    p = 8
    lim = len(buf) - 8
    while p <= lim:  # the hot loop
        cl, = unpack(buf, p)
        append(p)
        p += cl + 16
    return np.frombuffer(starts, dtype=np.int64), p


def _walk_compiled(buf: bytearray, big: bool) -> tuple[np.ndarray, int]:
    """`_walk_python` in C (nagleprobe/_walk.c), about 30 times faster."""
    out = np.empty(len(buf) // 16 + 1, dtype=np.int64)
    k, p = _walk.walk(buf, big, out)
    return out[:k], p


try:
    from . import _walk
    walk_records = _walk_compiled
except ImportError:  # built without a C compiler: the pure-Python walk
    _walk = None
    walk_records = _walk_python


class CaptureReader:
    """Open a capture, validate its header; iterate to get `RecordBatch`es."""

    def __init__(self, path: str, chunk_bytes: int = 32 << 20) -> None:
        self.path = path
        self.chunk_bytes = max(int(chunk_bytes), 4096)
        self.info = CaptureInfo(path=path)
        self._frames = 0
        self._iterated = False
        self._stream = self._open(path)
        self._pos = 0  # file (uncompressed) offset of the first unconsumed byte
        self._pending = b""
        head = self._read(4)
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
        if self.info.format == "pcapng":
            self._ifaces: list[_Interface] = []
            self._sec_base = 0
            self._big = False
            self._last_ts = 0

    # ------------------------------------------------------------------ input plumbing
    def _open(self, path: str):
        try:
            if path == "-":
                raw = sys.stdin.buffer
                magic = raw.read(2)
                raw = _Prefixed(magic, raw)
            else:
                raw = open(path, "rb")
                magic = raw.read(2)
                raw.seek(0)
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
            return _Gunzip(raw)
        return raw

    def _read(self, n: int) -> bytes:
        """Read up to n bytes (fewer only at end of input)."""
        try:
            out = self._stream.read(n)
            if out is None:  # pragma: no cover - non-blocking streams
                out = b""
            while 0 < len(out) < n:  # short reads on pipes
                more = self._stream.read(n - len(out))
                if not more:
                    break
                out += more
            return out
        except EOFError:
            self._gzip_truncated = True
            return b""
        except (gzip.BadGzipFile, zlib.error) as e:
            raise CaptureError(self.path, f"corrupt gzip data: {e}",
                               f"near uncompressed byte {self._pos}") from None
        except OSError as e:
            raise CaptureError(self.path, f"cannot read: {e.strerror or e}") from None

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
        self.info.link_types.append(linktype_name(lt))
        self._pos = 24

    def _fill(self, carry) -> tuple[bytearray, bool]:
        """A fresh buffer: `carry` followed by up to chunk_bytes of input; (buf, at_eof)."""
        c = len(carry)
        buf = bytearray(c + self.chunk_bytes)
        buf[:c] = carry
        got = self._readinto(memoryview(buf)[c:])
        if got < self.chunk_bytes:
            del buf[c + got:]
        return buf, got == 0

    def _readinto(self, mv: memoryview) -> int:
        total, want = 0, len(mv)
        try:
            while total < want:
                k = self._stream.readinto(mv[total:])
                if not k:
                    break
                total += k
        except EOFError:
            self._gzip_truncated = True
        except (gzip.BadGzipFile, zlib.error) as e:
            raise CaptureError(self.path, f"corrupt gzip data: {e}",
                               f"near uncompressed byte {self._pos + total}") from None
        except OSError as e:
            raise CaptureError(self.path, f"cannot read: {e.strerror or e}") from None
        finally:
            mv.release()
        return total

    def _pcap_chunks(self) -> Iterator[RecordBatch]:
        unpack = struct.Struct(">I" if self._big else "<I").unpack_from
        carry = b""
        eof = False
        while not eof:
            buf, eof = self._fill(carry)
            base = self._pos  # file offset of buf[0]
            n = len(buf)
            starts, p = walk_records(buf, self._big)
            k = len(starts)
            pos = p - 8
            corrupt = None
            if k and pos > n:  # the last record runs past the buffer: carry it over
                k -= 1
                last = int(starts[k])
                pos = last - 8
                cl, = unpack(buf, last)
                if cl > MAX_CAPLEN:
                    corrupt = (pos, f"captured length {cl} exceeds {MAX_CAPLEN}")
            st = starts[:k] - 8 if k else None
            if k:
                data = np.frombuffer(buf, dtype=np.uint8)
                hdr = _u32_rows(data, st, 4, self._big)
                over = hdr[:, 2] > MAX_CAPLEN
                if over.any():
                    j = int(np.argmax(over))
                    corrupt = (int(st[j]), f"captured length {int(hdr[j, 2])} exceeds "
                               f"{MAX_CAPLEN}")
                    st, hdr, k = st[:j], hdr[:j], j
                if k:
                    yield self._pcap_batch(data, st, hdr)
            if corrupt is not None:
                self._pos = base + corrupt[0]
                self._corrupt(corrupt[1], base + corrupt[0])
                return
            carry = bytes(buf[pos:]) if pos < n else b""
            self._pos = base + pos
        if carry:
            self._truncated(len(carry))
        self._end_of_input()

    def _pcap_batch(self, data: np.ndarray, st: np.ndarray, hdr: np.ndarray) -> RecordBatch:
        k = len(st)
        ts = hdr[:, 0] * 1_000_000_000 + hdr[:, 1] * self._ts_frac_mul
        frame = np.arange(self._frames + 1, self._frames + 1 + k, dtype=np.int64)
        self._frames += k
        self.info.packets += k
        return RecordBatch(data=data, offset=st + 16, caplen=hdr[:, 2].copy(),
                           wirelen=hdr[:, 3].copy(), ts_ns=ts,
                           linktype=np.full(k, self._linktype, dtype=np.int32), frame=frame)

    # ------------------------------------------------------------------ pcapng
    def _pcapng_chunks(self) -> Iterator[RecordBatch]:
        carry = self._pending
        self._pending = b""
        eof = False
        block_no = 0  # blocks fully consumed so far
        shb_seen = False
        while not eof:
            buf, eof = self._fill(carry)
            base = self._pos
            n = len(buf)
            starts = array("q")
            append = starts.append
            # segments: (first record index, big-endian?, interface base) - new one per SHB
            segs = [(0, self._big, self._sec_base)]
            pos = 0
            corrupt = None
            big = self._big
            unpack = struct.Struct(">II" if big else "<II").unpack_from
            lim = n - 8
            while pos <= lim:
                if shb_seen and _walk is not None:  # runs of packet blocks, compiled
                    out = np.empty(n // 12 + 1, dtype=np.int64)
                    k, pos, passed = _walk.walk_blocks(buf, pos, big, MAX_BLOCK, out)
                    starts.frombytes(out[:k].tobytes())
                    block_no += passed
                    if pos > lim:
                        break
                bt, bl = unpack(buf, pos)
                if bt == PCAPNG_SHB:
                    if pos + 12 > n:
                        break
                    bom = buf[pos + 8:pos + 12]
                    if bom == b"\x4d\x3c\x2b\x1a":
                        big = False
                    elif bom == b"\x1a\x2b\x3c\x4d":
                        big = True
                    else:
                        corrupt = (pos, block_no, f"section header with bad byte-order magic "
                                   f"{bom.hex()}")
                        break
                    unpack = struct.Struct(">II" if big else "<II").unpack_from
                    bt, bl = unpack(buf, pos)
                    if bl < 28 or bl & 3 or bl > MAX_BLOCK:
                        corrupt = (pos, block_no, f"section header block length {bl} is invalid")
                        break
                    if pos + bl > n:
                        break
                    major = struct.unpack_from(">H" if big else "<H", buf, pos + 12)[0]
                    if major != 1:
                        corrupt = (pos, block_no, f"unsupported pcapng version {major}")
                        break
                    shb_seen = True
                    self._big = big
                    self._sec_base = len(self._ifaces)
                    segs.append((len(starts), big, self._sec_base))
                    pos += bl
                    block_no += 1
                    continue
                if bl < 12 or bl & 3 or bl > MAX_BLOCK:
                    corrupt = (pos, block_no, f"block length {bl} is invalid (must be a "
                               f"multiple of 4 between 12 and {MAX_BLOCK})")
                    break
                end = pos + bl
                if end > n:
                    break
                if not shb_seen:
                    corrupt = (pos, block_no, "pcapng data does not start with a section header")
                    break
                if bt == BT_EPB or bt == BT_SPB or bt == BT_PB:
                    append(pos)
                elif bt == BT_IDB:
                    err = self._parse_idb(buf, pos, bl, big)
                    if err:
                        corrupt = (pos, block_no, err)
                        break
                pos = end
                block_no += 1
            if len(starts):
                yield self._pcapng_batch(buf, starts, segs, base, block_no - 0)
            if corrupt is not None:
                self._corrupt(corrupt[2], base + corrupt[0], block=corrupt[1] + 1)
                return
            carry = bytes(buf[pos:]) if pos < n else b""
            self._pos = base + pos
        if carry:
            self._truncated(len(carry))
        self._end_of_input()

    def _parse_idb(self, buf: bytes, pos: int, bl: int, big: bool) -> str | None:
        e = ">" if big else "<"
        if bl < 20:
            return f"interface description block length {bl} is too short"
        lt, _res, snaplen = struct.unpack_from(e + "HHI", buf, pos + 8)
        iface = _Interface(lt, snaplen)
        o, end = pos + 16, pos + bl - 4
        while o + 4 <= end:
            code, ln = struct.unpack_from(e + "HH", buf, o)
            if code == 0:
                break
            v = o + 4
            if v + ln > end:
                break
            if code == 9 and ln >= 1:
                iface.set_tsresol(buf[v])
            elif code == 14 and ln >= 8:
                iface.tsoffset_ns = struct.unpack_from(e + "q", buf, v)[0] * 1_000_000_000
            o = v + ((ln + 3) & ~3)
        self._ifaces.append(iface)
        name = linktype_name(lt)
        if name not in self.info.link_types:
            self.info.link_types.append(name)
        return None

    def _pcapng_batch(self, buf: bytes, starts: array, segs: list, base: int,
                      _blocks: int) -> RecordBatch:
        data = np.frombuffer(buf, dtype=np.uint8)
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
        bounds = [s[0] for s in segs[1:]] + [k]
        for (lo, big, ibase), hi in zip(segs, bounds):
            if hi <= lo:
                continue
            s = st[lo:hi]
            w = _u32_rows(data, s, 2, big)  # type, length
            btype, bl = w[:, 0], w[:, 1]
            blen[lo:hi] = bl
            ifaces_here = len(self._ifaces) - ibase
            # EPB: ifid ts_hi ts_lo caplen origlen at +8; data at +28
            # PB : ifid(16) drops(16) ts_hi ts_lo caplen origlen; data at +28
            # SPB: origlen at +8; data at +12
            full = btype != BT_SPB
            idx = np.nonzero(full)[0]
            if len(idx):
                f = _u32_rows(data, s[idx] + 8, 5, big)
                ifid = f[:, 0]
                pb = btype[idx] == BT_PB
                if pb.any():
                    ifid = ifid.copy()
                    ifid[pb] = (ifid[pb] >> 16) if big else (ifid[pb] & 0xFFFF)
                ok = ifid < ifaces_here
                g = lo + idx
                ifidx[g] = np.where(ok, ibase + ifid, -1)
                units = ((f[:, 1].astype(np.uint64) << np.uint64(32))
                         | f[:, 2].astype(np.uint64))
                offset[g] = s[idx] + 28
                caplen[g] = f[:, 3]
                wirelen[g] = f[:, 4]
                tsv = np.zeros(len(idx), np.int64)
                if ok.any():
                    ids = ifid[ok] + ibase
                    uts = np.unique(ids)
                    sub = np.zeros(int(ok.sum()), np.int64)
                    for u in uts:
                        m = ids == u
                        sub[m] = self._ifaces[int(u)].ts_ns(units[ok][m])
                    tsv[ok] = sub
                ts[g] = tsv
                have_ts[g] = ok
            sidx = np.nonzero(~full)[0]
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
        bad = (caplen > blen - overhead) | (caplen < 0)
        # SPB timestamps: the previous packet's
        pos_idx = np.where(have_ts, np.arange(k), -1)
        np.maximum.accumulate(pos_idx, out=pos_idx)
        filled = np.where(pos_idx >= 0, ts[np.maximum(pos_idx, 0)], self._last_ts)
        ts = filled
        if k:
            self._last_ts = int(ts[-1])
        lt_table = np.array([i.linktype for i in self._ifaces] + [-1], dtype=np.int32)
        linktype = lt_table[ifidx]  # -1 -> last entry (-1)
        keep = (ifidx >= 0) & ~bad
        if not keep.all():
            nb = int(((ifidx < 0)).sum())
            if nb:
                self._skip("unknown-interface", nb)
            nbad = int((bad & (ifidx >= 0)).sum())
            if nbad:
                self._skip("caplen-exceeds-block", nbad)
            sel = np.nonzero(keep)[0]
            offset, caplen, wirelen, ts = offset[sel], caplen[sel], wirelen[sel], ts[sel]
            linktype, frame = linktype[sel], frame[sel]
        return RecordBatch(data=data, offset=offset, caplen=caplen, wirelen=wirelen,
                           ts_ns=ts, linktype=linktype, frame=frame)

    # ------------------------------------------------------------------ shared
    def _skip(self, reason: str, n: int) -> None:
        self.info.skipped[reason] = self.info.skipped.get(reason, 0) + n

    def _corrupt(self, problem: str, at: int, block: int | None = None) -> None:
        rec = self._frames + 1
        where = (f"block {block} at byte {at}" if block is not None
                 else f"record {rec} at byte {at}")
        if self._frames == 0:
            raise CaptureError(self.path, f"corrupt capture: {problem}", where)
        what = f"block {block}" if block is not None else f"record {rec}"
        self.info.warnings.append(
            f"corrupt {what} at byte {at}: {problem}; analysed the first {self._frames} records")

    def _truncated(self, leftover: int) -> None:
        rec = self._frames + 1
        at = self._pos
        gz = " (gzip stream also ends early)" if self._gz_truncated() else ""
        if self._frames == 0:
            unit = "record" if self.info.format == "pcap" else "block"
            raise CaptureError(self.path, f"truncated capture: file ends inside the first "
                               f"{unit}{gz}", f"{unit} {rec} at byte {at}")
        self.info.warnings.append(
            f"capture ends inside record {rec} at byte {at} (truncated file){gz}; "
            f"analysed the {self._frames} complete records")

    def _gz_truncated(self) -> bool:
        return getattr(self, "_gzip_truncated", False) or getattr(self._stream, "truncated", False)

    def _end_of_input(self) -> None:
        if self._gz_truncated() and not any(
                "truncated" in w for w in self.info.warnings):
            self.info.warnings.append("gzip stream ends early (truncated file); analysed the "
                                      f"{self._frames} complete records")

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


def read_capture(path: str) -> CaptureReader:
    return CaptureReader(path)
