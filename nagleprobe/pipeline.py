"""read -> decode -> flows -> detect -> report: the library call behind every front end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from .decode import TCP_COLUMNS, decode
from .detect import detect
from .flows import build_flows
from .read import CaptureReader
from .report import Report, build_report
from .stream import DEFAULT_GRACE_S, StreamAnalyzer

Progress = Callable[[CaptureReader, int], None]  # called after each chunk with frames read


def analyze(path: str, chunk_bytes: int = 32 << 20, *, strict: bool = False,
            whole_file: bool = False, grace_s: float = DEFAULT_GRACE_S,
            batch_rows: int | None = None, progress: Progress | None = None) -> Report:
    """Analyse one capture file (pcap/pcapng, optionally gzip; "-" for stdin).

    Streams by default: memory is bounded by the connections open at a time (see
    `nagleprobe.stream`; `grace_s` is its reorder window). `whole_file` decodes everything
    first and analyses it at once (the reference the streamed result must equal).
    Raises `nagleprobe.CaptureError` for input that cannot be read at all. A damaged capture
    (truncated, corrupt records in the middle) is analysed as far as it can be trusted and the
    damage listed in `report.capture["warnings"]`; with `strict=True` it raises instead.
    """
    reader = CaptureReader(path, chunk_bytes=chunk_bytes, strict=strict)
    skipped: Counter = Counter()
    if whole_file:
        return _analyze_whole(reader, skipped)
    stream = None
    frames = 0
    try:
        for batch in reader:
            if stream is None and len(batch.ts_ns):
                kw = {} if batch_rows is None else {"batch_rows": batch_rows}
                stream = StreamAnalyzer(int(batch.ts_ns[0]), grace_s=grace_s, **kw)
            if len(batch):
                frames = int(batch.frame[-1])
            if stream is not None:
                stream.feed(decode(batch, skipped))
            if progress is not None:
                progress(reader, frames)
            del batch  # so the reader can reuse its buffer for the next chunk
        skipped.update(reader.info.skipped)
        return (stream or StreamAnalyzer(workers=0)).finish(reader.info, dict(skipped))
    finally:
        if stream is not None:
            stream.close()


def _analyze_whole(reader: CaptureReader, skipped: Counter) -> Report:
    parts: list[dict[str, np.ndarray]] = []
    origin_ns = None
    for batch in reader:
        if origin_ns is None and len(batch.ts_ns):
            origin_ns = int(batch.ts_ns[0])
        cols = decode(batch, skipped)
        if len(cols["frame"]):
            parts.append(cols)
    if parts:
        cols = {k: np.concatenate([p[k] for p in parts]) for k in TCP_COLUMNS}
    else:
        cols = {k: np.zeros(0, dtype=t) for k, t in TCP_COLUMNS.items()}
    skipped.update(reader.info.skipped)
    flows = build_flows(cols)
    det = detect(flows)
    return build_report(reader.info, dict(skipped), flows, det, origin_ns or 0)
