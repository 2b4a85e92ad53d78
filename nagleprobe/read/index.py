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

from .formats import RecordBatch

STEP = 256  # records between checkpoints: 10 M records keep 40,000 (frame, offset) pairs
HEADER = 16  # a pcap record header: seconds, fraction, captured length, original length
MAX_RECORD = 1 << 18  # longer than any snap length: a header claiming more is not a record


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
        wanted = np.unique(np.asarray(frames, np.int64))
        cp = np.searchsorted(marks, wanted, side="right") - 1
        chunks, got, caplens, wirelens, stamps = [], [], [], [], []
        with open(self.path, "rb") as f:
            walking, frame = -1, 0  # the checkpoint walked from, the frame at f's position
            for want, c in zip(wanted.tolist(), cp.tolist()):
                if c < 0 or want - int(marks[c]) >= STEP:
                    continue  # before the first record, or in no batch (a damaged stretch)
                if c != walking or frame > want:
                    f.seek(int(offsets[c]))
                    walking, frame = c, int(marks[c])
                record = self._walk_to(f, frame, want)
                frame = want + 1
                if record is None:
                    walking = -1
                    continue
                sec, frac, caplen, wirelen, data = record
                chunks.append(data)
                got.append(want)
                caplens.append(caplen)
                wirelens.append(wirelen)
                stamps.append(sec * 1_000_000_000 + frac * self._frac_ns)
        lengths = np.asarray(caplens, np.int64)
        return RecordBatch(
            data=np.frombuffer(b"".join(chunks), np.uint8),
            offset=np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            if len(lengths) else lengths, caplen=lengths,
            wirelen=np.asarray(wirelens, np.int64), ts_ns=np.asarray(stamps, np.int64),
            linktype=np.full(len(lengths), self._linktype, np.int32),
            frame=np.asarray(got, np.int64))

    def _walk_to(self, f, frame: int, want: int) -> tuple[int, int, int, int, bytes] | None:
        """Past the records from `frame` (at f's position) to `want`, whose header and
        bytes are returned; None where the file no longer holds such records."""
        while True:
            head = f.read(HEADER)
            if len(head) < HEADER:
                return None
            sec, frac, caplen, wirelen = self._header.unpack(head)
            if caplen > MAX_RECORD:
                return None
            if frame == want:
                data = f.read(caplen)
                return (sec, frac, caplen, wirelen, data) if len(data) == caplen else None
            f.seek(caplen, 1)
            frame += 1
