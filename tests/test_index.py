"""read.index: the reader's checkpoints of a plain pcap file give back any frame's record
by seeking, byte for byte what the reader itself yielded."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pytest

from nagleprobe.read import CaptureReader
from nagleprobe.read.index import STEP

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def records_read(path: Path, chunk_bytes: int) -> tuple[CaptureReader, dict[int, bytes]]:
    """The reader after a whole pass, and every record it yielded by frame number."""
    reader = CaptureReader(str(path), chunk_bytes=chunk_bytes)
    out = {}
    for b in reader:
        for f, o, c in zip(b.frame.tolist(), b.offset.tolist(), b.caplen.tolist()):
            out[f] = bytes(b.data[o:o + c])
    return reader, out


@pytest.mark.parametrize("name,chunk", [("messages/postgres_lo.pcap", 4096),
                                        ("messages/postgres_lo.pcap", 32 << 20),
                                        ("formats/base_lo_be.pcap", 4096),
                                        ("formats/base_lo_nsec.pcap", 8192)])
def test_every_frame_read_by_seeking_is_the_record_the_reader_gave(name, chunk):
    reader, whole = records_read(SAMPLES / name, chunk)
    frames = np.arange(1, len(whole) + 1)
    got = reader.index.read(frames)
    assert got.frame.tolist() == frames.tolist()
    assert [bytes(got.data[o:o + c]) for o, c in zip(got.offset, got.caplen)] == [
        whole[f] for f in frames.tolist()]


def test_a_few_frames_far_apart_and_frames_beyond_the_file():
    reader, whole = records_read(SAMPLES / "messages" / "postgres_lo.pcap", 4096)
    assert len(whole) > STEP  # checkpoints in more than one place
    want = [len(whole), 1, STEP + 3, 2, len(whole) + 1, len(whole) + 500, 0, -4]
    got = reader.index.read(np.array(want))
    expect = sorted(f for f in set(want) if 1 <= f <= len(whole))
    assert got.frame.tolist() == expect
    assert [bytes(got.data[o:o + c]) for o, c in zip(got.offset, got.caplen)] == [
        whole[f] for f in expect]


def test_only_plain_pcap_files_are_indexed(tmp_path):
    src = SAMPLES / "formats" / "base_lo.pcap"
    gz = tmp_path / "c.pcap.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    for path, stream in ((SAMPLES / "formats" / "base_lo.pcapng", None), (gz, None),
                         (src, io.BytesIO(src.read_bytes()))):
        reader = CaptureReader(str(path), stream=stream)
        for _ in reader:
            pass
        assert reader.index is None, path


def test_records_longer_than_a_read_are_walked_past_and_read_whole():
    """postgres_lo holds 12 kB records: with reads of 1 kB, a walk skips past and reads
    across the end of what it has read."""
    from nagleprobe.read import index

    reader, whole = records_read(SAMPLES / "messages" / "postgres_lo.pcap", 32 << 20)
    assert max(map(len, whole.values())) > 3 * 1024
    old, index.READ_BYTES = index.READ_BYTES, 1024
    try:
        for frames in (list(range(1, len(whole) + 1)), list(range(2, len(whole), 7))):
            got = reader.index.read(np.array(frames))
            assert got.frame.tolist() == frames
            assert [bytes(got.data[o:o + c]) for o, c in zip(got.offset, got.caplen)] == [
                whole[f] for f in frames]
    finally:
        index.READ_BYTES = old
