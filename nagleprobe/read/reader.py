"""`CaptureReader`: opens a capture, recognises its format and yields `RecordBatch`es; a
small facade over the source, the pcap and pcapng walks and the damage policy."""

from __future__ import annotations

import mmap
import os
import stat
import sys
from typing import BinaryIO, Iterator

import numpy as np

from ..errors import CaptureError
from ..layouts import BT_SHB, PCAP_KUZNETSOV, PCAP_NS, PCAP_US
from .clock import Clock
from .damage import DamagePolicy
from .formats import CaptureInfo, Interface, RecordBatch
from .index import FrameIndex
from .pcap import PcapRecords
from .pcapng import PcapngBlocks
from .source import URL_TIMEOUT_S, Gunzip, Prefixed, UrlStream, open_url, url_scheme


class CaptureReader(PcapRecords, PcapngBlocks, DamagePolicy):
    """Open a capture, validate its header; iterate to get `RecordBatch`es.

    Damage after the first packet record (truncation, corrupt records or blocks, a corrupt
    gzip stream) becomes a warning in `info.warnings`, or with `strict=True` a `CaptureError`.
    A plain regular pcap file is mapped a chunk at a time, not copied (see `_map`; its
    batches' `data` are then read-only); `map_file=False` reads it like any other input.
    `url_timeout`: the longest wait, in seconds, for an http(s) server (see `open_url`).
    """

    def __init__(self, path: str, chunk_bytes: int = 32 << 20, strict: bool = False,
                 stream: BinaryIO | None = None, *, map_file: bool = True,
                 url_timeout: float = URL_TIMEOUT_S) -> None:
        self.path = path
        self._url: UrlStream | None = None  # a URL's stream (what arrived, how it ended)
        self._url_timeout = url_timeout
        self._given = stream  # a binary file object to read instead of `path` (its name)
        self.chunk_bytes = max(int(chunk_bytes), 4096)
        self.strict = strict
        self.info = CaptureInfo(path=path)
        self._frames = 0
        self._iterated = False
        self._size: int | None = None  # size of a plain regular file: sizes the buffers
        self._unlisted = 0  # warnings beyond MAX_WARNINGS
        self._damage: tuple[str, str, int, bool] | None = None  # corrupt stretch skipped
        self._pos = 0  # file (uncompressed) offset of the first unconsumed byte
        self._pending = b""
        self._spare: bytearray | None = None  # the last chunk buffer, for reuse
        self._mapped = False  # chunks are maps of the file, not buffers read (see _map)
        self._map_file = map_file
        self._clock = Clock()  # implausible times, steps of the clock, time resolution
        # where the records lie in the file, for reading a few again (plain pcap files only)
        self.index: FrameIndex | None = None
        self._stream = self._open(path)
        try:
            self._start(path)
        except BaseException:  # the input is closed on any failure (a URL's connection too)
            self.close()
            raise

    def _start(self, path: str) -> None:
        """Recognise the format from the first bytes, read its file header."""
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
        if le == BT_SHB:
            self.info.format = "pcapng"
            self._pending = head
            self._ifaces: list[Interface] = []
            self._iface_pool: dict[tuple, Interface] = {}
            self._lt_table: np.ndarray | None = None
            self._sec_base = 0
            self._big = False
            self._last_ts = 0
            self._undescribed_warned: set[str] = set()  # kinds of packet block warned about
            self._clock.declared = lambda i: self._ifaces[i].resolution_ns
        elif le in (PCAP_US, PCAP_NS) or be in (PCAP_US, PCAP_NS):
            self.info.format = "pcap"
            self._open_pcap(head)
            self._clock.declared = lambda i, r=float(self._ts_frac_mul): r
            # a plain regular pcap file is mapped a chunk at a time rather than copied by
            # read() (pcapng, gzip, pipes, URLs and streams given are read)
            self._mapped = self._map_file and self._size is not None
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
                raw = Prefixed(magic, raw)
            elif url_scheme(path):
                raw = self._url = open_url(path, self._url_timeout)
                magic = raw.read(2)
                raw = Prefixed(magic, raw, owned=True)
            else:
                raw = open(path, "rb")
                magic = raw.read(2)
                raw.seek(0)
                st = os.fstat(raw.fileno())
                if stat.S_ISREG(st.st_mode):
                    self._size = st.st_size
        except FileNotFoundError:
            if os.path.islink(path):
                raise CaptureError(path, "dangling symbolic link: its target "
                                   f"{os.readlink(path)} does not exist") from None
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
            return Gunzip(raw)
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

    def _fill(self, carry: bytes, need: int = 0) -> tuple[bytearray | memoryview, bool]:
        """A buffer of `carry` followed by up to chunk_bytes of input (at least enough for
        `need` bytes in all, for a record known to be that long); (buf, at_eof).

        The previous buffer is reused when nothing else refers to it any more (its batches
        were dropped): memory already mapped is refilled without faulting in fresh pages."""
        c = len(carry)
        want = max(self.chunk_bytes, need - c)
        if self._size is not None:  # don't allocate a whole chunk for a small file
            want = min(want, max(self._size - self._pos - c, 0) + 4096)
        if self._mapped:
            mapped = self._map(c, want)
            if mapped is not None:
                return mapped, False
        old, self._spare = self._spare, None
        buf = None
        if old is not None and sys.getrefcount(old) == 2:  # `old` and the call's argument
            try:
                if len(old) > c + want:
                    del old[c + want:]
                else:
                    old.extend(bytes(c + want - len(old)))
                buf = old
            except BufferError:  # a view of it is still alive somewhere: not reused
                pass
        del old
        buf = bytearray(c + want) if buf is None else buf
        buf[:c] = carry
        # the views are released explicitly: a Python-level readinto (gzip, a URL's stream)
        # holds them in its frame, and a sampling profiler (Dask workers run one) can keep
        # that frame alive; an export left would then forbid resizing the buffer
        with memoryview(buf) as whole, whole[c:] as tail:
            got = self._readinto(tail)
        if got < want:
            try:
                del buf[c + got:]
            except BufferError:  # exported after all: a copy of what was read
                buf = buf[:c + got]
        self._spare = buf
        return buf, got == 0

    def _map(self, c: int, want: int) -> memoryview | None:
        """`_fill` without copying, for a plain regular file: a read-only map of the file
        from the carry's start (self._pos; the carry, `c` bytes, is what the file holds
        there) to up to `want` bytes after the carry, the bytes read() would give. None at
        the end of the file as its size says now: read() then tells whether it has really
        ended (it may have grown, or its size be unknown, as in /proc), and the file is
        mapped again if it has grown.

        Each chunk is mapped at the file's size at the time, so a file truncated since
        is never mapped past its end (touching that is SIGBUS), and after each batch the
        walk goes on only with what the file still holds (`_unmap_lost`). A file truncated
        while its chunk is walked or a batch decoded still kills the process with SIGBUS:
        map_file=False for files that may be. The map goes when the last view of it (the
        chunk's batches) goes."""
        start, f = self._pos, self._stream
        try:
            got = min(want, os.fstat(f.fileno()).st_size - start - c)
            if got <= 0:
                f.seek(start + c)  # read() goes on from there
                return None
            lo = start - start % mmap.ALLOCATIONGRANULARITY
            m = mmap.mmap(f.fileno(), start + c + got - lo, access=mmap.ACCESS_READ, offset=lo)
            f.seek(start + c + got)  # where read() would be (input_progress reads it)
        except (OSError, ValueError):  # cannot be mapped (a file system without mmap): read
            self._mapped = False
            f.seek(start + c)
            return None
        return memoryview(m)[start - lo:]

    def _unmap_lost(self, buf: bytearray | memoryview, data: np.ndarray
                    ) -> tuple[bytearray | memoryview | bytes, np.ndarray]:
        """(buf, data): the chunk `buf` (the file's bytes from self._pos) and its array
        `data`, less what a truncation of the file since it was mapped took away, then
        copied: touching a map past the file's end is SIGBUS. A read() buffer, or a map the
        file still holds all of, as they are."""
        if not isinstance(buf, memoryview):
            return buf, data
        size = os.fstat(self._stream.fileno()).st_size
        if size >= self._pos + len(buf):
            return buf, data
        held = bytes(buf[:max(size - self._pos, 0)])
        return held, np.frombuffer(held, dtype=np.uint8)

    def _readinto(self, mv: memoryview) -> int:
        total, want = 0, len(mv)
        try:
            while total < want:
                # released explicitly, as in _fill
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

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[RecordBatch]:
        if self._iterated:
            raise RuntimeError("a CaptureReader can be iterated only once")
        self._iterated = True
        try:
            chunks = self._pcap_chunks() if self.info.format == "pcap" else self._pcapng_chunks()
            clock = self._clock
            for batch in chunks:
                out = self._clocked(clock.batch(batch, self._pos))
                del batch  # only the consumer holds a batch: its buffer is reused after it
                while out:
                    yield out.pop(0)
            yield from self._clocked(clock.flush())
            self.info.time_step_ns = clock.time_step_ns()
            # first: what every output must show, whatever else went wrong
            self.info.warnings[:0] = clock.finish()
        finally:
            self.close()

    def _clocked(self, batches: list[RecordBatch]) -> list[RecordBatch]:
        """Batches the clock has judged, its findings recorded (implausible times are damage:
        an error when strict)."""
        clock = self._clock
        if clock.first_implausible and self.strict:
            raise CaptureError(self.path, *clock.first_implausible)
        self._skip("implausible-time", clock.implausible - self.info.skipped.get(
            "implausible-time", 0))
        for w in clock.warnings:
            self._warn(w)
        clock.warnings.clear()
        return batches

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


def read_capture(path: str, strict: bool = False) -> CaptureReader:
    """A `CaptureReader` for `path` ("-" for standard input)."""
    return CaptureReader(path, strict=strict)
