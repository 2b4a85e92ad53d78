"""Where a capture's records lie in its file, kept by the reader as it goes (`FrameIndex`), so
that a few chosen frames can be read again later by seeking, without walking the file.

Kept for plain (uncompressed) pcap files only: a pcapng record needs its interface's state
and a gzip stream cannot seek. A checkpoint is kept at each batch's first record and every
`STEP` records after it; reading a frame seeks to the checkpoint at or before it and walks at
most STEP - 1 record headers of that batch (its records are consecutive in the file).
"""

from __future__ import annotations

import struct

import numpy as np

from ..columns import distinct
from .formats import RecordBatch

STEP = 256  # records between checkpoints: 10 M records keep 40,000 (frame, offset) pairs
HEADER = 16  # a pcap record header: seconds, fraction, captured length, original length
MAX_RECORD = 1 << 18  # longer than any snap length: a header claiming more is not a record
READ_BYTES = 1 << 16  # read at a time while walking from a checkpoint


class FrameIndex:
    """Checkpoints (frame number, file offset of its record header) of one pcap file."""

    def __init__(self, path: str, big: bool, linktype: int, frac_ns: int) -> None:
        self.path = path
        self._header = struct.Struct(">IIII" if big else "<IIII")
        self._linktype = linktype
        self._frac_ns = frac_ns  # nanoseconds per unit of the headers' fraction field
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._frames = self._offsets = np.zeros(0, np.int64)

    def add(self, first_frame: int, starts: np.ndarray, base: int) -> None:
        """A batch's records: numbered from `first_frame`, their headers at `base + starts`."""
        at = np.arange(0, len(starts), STEP, dtype=np.int64)
        self._parts.append((first_frame + at, base + starts[at].astype(np.int64)))

    def _checkpoints(self) -> tuple[np.ndarray, np.ndarray]:
        if self._parts:
            self._frames = np.concatenate([self._frames, *(f for f, _ in self._parts)])
            self._offsets = np.concatenate([self._offsets, *(o for _, o in self._parts)])
            self._parts = []
        return self._frames, self._offsets

    def read(self, frames: np.ndarray) -> RecordBatch:
        """The records of `frames` (those the index can place), read from the file by
        seeking; OSError if the file cannot be opened."""
        marks, offsets = self._checkpoints()
        wanted = distinct(np.asarray(frames, np.int64))
        cp = np.searchsorted(marks, wanted, side="right") - 1
        ok = (cp >= 0) & (wanted - marks[np.maximum(cp, 0)] < STEP)  # else in no batch read
        wanted, cp = wanted[ok], cp[ok]
        chunks, got, heads = [], [], []
        with open(self.path, "rb") as f:
            for c in distinct(cp).tolist():
                mine = wanted[cp == c].tolist()
                f.seek(int(offsets[c]))
                for frame, head, data in self._walk(f, int(marks[c]), mine):
                    got.append(frame)
                    heads.append(head)
                    chunks.append(data)
        sec, frac, caplen, wirelen = (np.asarray([h[k] for h in heads], np.int64)
                                      for k in range(4))
        return RecordBatch(
            data=np.frombuffer(b"".join(chunks), np.uint8),
            offset=np.cumsum(caplen) - caplen, caplen=caplen, wirelen=wirelen,
            ts_ns=sec * 1_000_000_000 + frac * self._frac_ns,
            linktype=np.full(len(caplen), self._linktype, np.int32),
            frame=np.asarray(got, np.int64))

    def _walk(self, f, frame: int, wanted: list[int]):
        """(frame, header fields, bytes) of each of `wanted` (ascending, of one batch), from
        the record of `frame` at f's position; stops where the file no longer holds such
        records. `buf` holds the file's bytes from where `at` counts; `at` may point past
        its end (a record skipped beyond it)."""
        buf, at = b"", 0

        def have(n: int) -> bool:
            nonlocal buf, at
            if len(buf) - at >= n:
                return True
            if at > len(buf):
                f.seek(at - len(buf), 1)
                buf, at = b"", 0
            buf, at = buf[at:], 0
            buf += f.read(max(n - len(buf), READ_BYTES))
            return len(buf) >= n

        for want in wanted:
            while frame <= want:
                if not have(HEADER):
                    return
                head = self._header.unpack_from(buf, at)
                if head[2] > MAX_RECORD:
                    return
                if frame == want:
                    if not have(HEADER + head[2]):
                        return
                    yield frame, head, buf[at + HEADER:at + HEADER + head[2]]
                at, frame = at + HEADER + head[2], frame + 1
