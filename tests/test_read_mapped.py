"""A plain regular pcap file is mapped a chunk at a time (CaptureReader._map) instead of read
into a buffer: the batches must be the very ones read() gives, on every sample and damaged
capture, at any chunk size, and for files that grow or are truncated while they are read."""

from __future__ import annotations

import mmap
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from capgen import pcap_bytes, write
from nagleprobe.decode import TCP_COLUMNS, decode
from nagleprobe.errors import CaptureError
from nagleprobe.read import CaptureReader

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted(str(p.relative_to(ROOT)) for d in ("samples", "samples/formats", "tests/broken")
                  for p in (ROOT / d).iterdir()
                  if p.is_file() and p.suffix not in (".json", ".py", ".md"))
T0 = 1_700_000_000_000_000_000


def _batches(path: str, map_file: bool, **kw) -> tuple[list, object]:
    """Everything each batch holds (its record bytes, not its buffer), the decoded columns,
    and the reader's info and progress; or the CaptureError."""
    out, skipped = [], Counter()
    try:
        r = CaptureReader(path, map_file=map_file, **kw)
        for b in r:
            cols = decode(b, skipped)
            out.append(([None if getattr(b, k) is None else getattr(b, k).tolist()
                         for k in ("offset", "caplen", "wirelen", "ts_ns", "linktype", "frame",
                                   "start")],  # (start: pcapng only)
                        [b.data[o:o + c].tobytes() for o, c in zip(b.offset, b.caplen)],
                        {k: cols[k].tolist() for k in TCP_COLUMNS}))
        return out, (r.info.packets, r.info.warnings, r.info.skipped, dict(skipped),
                     r.input_progress())
    except CaptureError as e:
        return out, str(e)


@pytest.mark.parametrize("name", CAPTURES)
@pytest.mark.parametrize("chunk", [4096, 5000, 32 << 20])
def test_mapped_and_read_give_the_same_batches(name, chunk):
    path = str(ROOT / name)
    for strict in (False, True):
        assert (_batches(path, True, chunk_bytes=chunk, strict=strict)
                == _batches(path, False, chunk_bytes=chunk, strict=strict))


def test_a_plain_pcap_is_mapped_and_the_others_are_not(tmp_path):
    path = str(ROOT / "samples" / "bridge_any.pcap")
    b = next(iter(CaptureReader(path)))
    assert isinstance(b.data.base.obj, mmap.mmap) and not b.data.flags.writeable
    b = next(iter(CaptureReader(path, map_file=False)))
    assert isinstance(b.data.base.obj, bytearray)
    ng = next(p for p in (ROOT / "samples" / "formats").iterdir() if p.suffix == ".pcapng")
    b = next(iter(CaptureReader(str(ng))))
    assert isinstance(b.data.base.obj, bytearray)
    with open(path, "rb") as f:  # a stream given (live, watch) is read
        b = next(iter(CaptureReader(path, stream=f)))
    assert isinstance(b.data.base.obj, bytearray)


def _pcap(n: int, first: int = 0) -> bytes:
    """n records of 100 bytes (and no file header if `first`)."""
    recs = [(T0 + i * 1000, bytes([i % 251]) * 100) for i in range(first, first + n)]
    b = pcap_bytes(recs)
    return b[24:] if first else b


def _changed_while_read(path: str, map_file: bool, change, chunk: int = 16384
                        ) -> tuple[list, object]:
    """Read in `chunk`-byte chunks, calling change() after the second batch (each batch
    consumed before the next is read, as the pipeline does)."""
    out = []
    r = CaptureReader(path, chunk_bytes=chunk, map_file=map_file)
    for i, b in enumerate(r):
        out.append((b.frame.tolist(), b.ts_ns.tolist(),
                    [b.data[o:o + c].tobytes() for o, c in zip(b.offset, b.caplen)]))
        del b
        if i == 1:
            change()
    return out, (r.info.packets, r.info.warnings)


RECORD = 116  # bytes of each record of _pcap


@pytest.mark.parametrize("keep", [24 + 300 * RECORD, 24 + 300 * RECORD + 50, 40000])
def test_a_file_truncated_after_the_bytes_read_is_read_as_read_reads_it(tmp_path, keep):
    """Cut after what the reader has read (the carry of the second chunk at most): it sees
    the file end there, as read() does (and warns of a record cut short)."""
    results = []
    for map_file in (True, False):
        path = write(tmp_path / f"t{map_file}.pcap", _pcap(1000))
        results.append(_changed_while_read(path, map_file, lambda: os.truncate(path, keep)))
    assert results[0] == results[1]
    assert results[0][1][0] == (keep - 24) // RECORD
    assert bool(results[0][1][1]) == bool((keep - 24) % RECORD)


@pytest.mark.parametrize("keep", [0, 24, 5000, 24 + 200 * RECORD, 24 + 282 * RECORD + 30])
def test_a_file_truncated_inside_the_bytes_mapped_is_not_touched_past_its_end(tmp_path, keep):
    """Cut inside what was mapped (read() holds a copy of those bytes, a map loses them):
    no SIGBUS, the batches already given are whole, and the reader stops at the cut."""
    path = write(tmp_path / "t.pcap", _pcap(1000))
    got, (packets, warnings) = _changed_while_read(path, True, lambda: os.truncate(path, keep))
    read, _ = _changed_while_read(write(tmp_path / "r.pcap", _pcap(1000)), False, lambda: None)
    assert got[:2] == read[:2]
    assert packets <= max(len(read[0][0]) + len(read[1][0]), (keep - 24) // RECORD)
    assert [f for b in got for f in b[0]] == list(range(1, packets + 1))


def test_a_file_growing_while_mapped_is_followed(tmp_path):
    results = []
    for map_file in (True, False):
        path = write(tmp_path / f"g{map_file}.pcap", _pcap(600))

        def grow(path=path):
            with open(path, "ab") as f:
                f.write(_pcap(150, first=600))
        results.append(_changed_while_read(path, map_file, grow))
    assert results[0] == results[1]
    assert results[0][1] == (750, [])


def test_a_file_that_cannot_be_mapped_is_read(tmp_path, monkeypatch):
    path = write(tmp_path / "m.pcap", _pcap(300))
    want = _batches(path, False, chunk_bytes=4096)

    def refuse(*a, **kw):
        raise OSError(19, "No such device")
    monkeypatch.setattr(mmap, "mmap", refuse)
    assert _batches(path, True, chunk_bytes=4096) == want


def test_held_mapped_batches_stay_valid_after_the_reader_closes():
    path = str(ROOT / "samples" / "bridge_any.pcap")
    kept = list(CaptureReader(path, chunk_bytes=4096))  # the reader closed its file
    again = list(CaptureReader(path, chunk_bytes=4096, map_file=False))
    assert len(kept) >= 3
    for a, b in zip(kept, again):
        assert np.array_equal(a.offset, b.offset)
        assert [a.data[o:o + c].tobytes() for o, c in zip(a.offset, a.caplen)] == [
            b.data[o:o + c].tobytes() for o, c in zip(b.offset, b.caplen)]


def test_a_chunk_is_unmapped_before_the_next_is_mapped():
    """Batches dropped as they come (the pipeline): one chunk mapped at a time, as the
    read() path holds one buffer."""
    import weakref

    path = str(ROOT / "samples" / "bridge_any.pcap")
    previous, n = None, 0
    for b in CaptureReader(path, chunk_bytes=4096):
        assert previous is None or previous() is None
        previous = weakref.ref(b.data.base.obj)
        n += 1
        del b
    assert n >= 3
