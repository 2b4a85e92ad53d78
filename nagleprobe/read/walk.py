"""The record and block walks: where each record starts in a chunk (compiled in `_walk.c`
when built, numpy and Python otherwise), and word reads over many offsets at once."""

from __future__ import annotations

import struct
from array import array

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..layouts import BT_SHB
from .formats import KNOWN_BLOCKS

try:
    from .. import _walk as _compiled
except ImportError:  # built without a C compiler: the pure-Python walk
    _compiled = None


def u32(buf: np.ndarray, idx: np.ndarray, big: bool) -> np.ndarray:
    """Gather 32-bit unsigned ints at byte offsets `idx` of uint8 array `buf` as int64."""
    b0 = buf[idx].astype(np.int64)
    b1 = buf[idx + 1].astype(np.int64)
    b2 = buf[idx + 2].astype(np.int64)
    b3 = buf[idx + 3].astype(np.int64)
    if big:
        return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3
    return (b3 << 24) | (b2 << 16) | (b1 << 8) | b0


def u32_rows(buf: np.ndarray, idx: np.ndarray, width: int, big: bool) -> np.ndarray:
    """Gather `width` consecutive 32-bit words at each offset: (n, width) int64. Compiled
    (nagleprobe/_walk.c) when built, else `u32_rows_numpy`."""
    if _compiled is None or len(idx) == 0:
        return u32_rows_numpy(buf, idx, width, big)
    out = np.empty((len(idx), width), dtype=np.int64)
    _compiled.u32_rows(buf, np.ascontiguousarray(idx, dtype=np.int64), width, big, out)
    return out


def u32_rows_numpy(buf: np.ndarray, idx: np.ndarray, width: int, big: bool) -> np.ndarray:
    """`u32_rows` with numpy alone (the reference for the compiled version)."""
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


KNOWN_BLOCK_ARRAY = np.array(sorted(KNOWN_BLOCKS - {BT_SHB}), dtype=np.int64)


def first_decided(c: np.ndarray, status: np.ndarray,
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


def walk_python(buf: bytearray, big: bool, start: int = 0) -> tuple[np.ndarray, int]:
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


def walk_headers(buf: bytearray, big: bool, start: int, frac_mul: int, frac_lim: int = -1,
                  limits: tuple[int, int | None, int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """`walk_python` from `start` with each walked record's header read: (where each header
    begins, ts_ns, caplen, wirelen, the walk's end, the first walked record that is not
    plausible, -1 if none). Not plausible: a time fraction of `frac_lim` or more (if not
    -1); and with `limits` = (the largest captured length, the latest time read before or
    None, the time window in ns), what `CaptureReader._pcap_first_bad` describes. One
    compiled pass when built."""
    if _compiled is None:
        starts, end = walk_python(buf, big, start)
        hdr = u32_rows(np.frombuffer(buf, dtype=np.uint8), starts - 8, 4, big)
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
        k, end, over = _compiled.walk_headers(buf, big, start, frac_mul, *out, frac_lim, caplim,
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
