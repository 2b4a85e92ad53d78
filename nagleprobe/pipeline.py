"""read -> decode -> flows -> detect -> report: the library call behind every front end."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .decode import TCP_COLUMNS, decode
from .detect import detect
from .flows import build_flows
from .read import CaptureReader
from .report import Report, build_report


def analyze(path: str, chunk_bytes: int = 32 << 20, strict: bool = False) -> Report:
    """Analyse one capture file (pcap/pcapng, optionally gzip; "-" for stdin).

    Raises `nagleprobe.CaptureError` for input that cannot be read at all.  A damaged capture
    (truncated, corrupt records in the middle) is analysed as far as it can be trusted and the
    damage listed in `report.capture["warnings"]`; with `strict=True` it raises instead.
    """
    reader = CaptureReader(path, chunk_bytes=chunk_bytes, strict=strict)
    skipped: Counter = Counter()
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
