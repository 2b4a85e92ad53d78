"""read -> decode -> flows -> detect -> report: the library call behind every front end.

Reading and decoding need numpy only, and so does the analysis (pandas is loaded only when a
report's DataFrames are asked for, see `report`); `analyze` loads the analysis modules
in a thread while it reads and decodes the first chunks of the capture.
"""

from __future__ import annotations

import io
import os
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from .columns import Columns
from .decode import TCP_COLUMNS, decode
from .errors import CaptureError
from .fileset import SetReader, capture_paths, merge_columns, set_name
from .read import URL_TIMEOUT_S, CaptureReader
from .weirds import Weird

if TYPE_CHECKING:
    from .flows import Flows
    from .report import Report

Progress = Callable[[CaptureReader, int], None]  # called after each chunk with frames read
# How long the stream holds a connection's packets (nagleprobe.stream), defined here, where the
# CLI and the library read them before the analysis modules load:
# a connection silent this long (capture time) is analysed and freed as if closed: a port
# scan or SYN flood leaves a million connections half open
DEFAULT_IDLE_S = 3600.0
# a closed connection waits this long for stragglers: the last ACK, RST after FIN and a few
# FIN retransmissions fit in it
DEFAULT_REORDER_WINDOW_S = 2.0
EARLY_CHUNKS = 8  # at most this many decoded chunks wait for the analysis modules to load


def _load_analysis() -> None:
    from . import stream  # noqa: F401  (and with it flows, detect and report)


def analyze(path: str | os.PathLike[str] | BinaryIO | list[str | os.PathLike[str]],
            chunk_bytes: int = 32 << 20, *,
            strict: bool = False, keep_segments: bool = False,
            reorder_window_s: float = DEFAULT_REORDER_WINDOW_S,
            batch_rows: int | None = None, progress: Progress | None = None,
            idle_s: float = DEFAULT_IDLE_S, piece_rows: int | None = None,
            url_timeout: float = URL_TIMEOUT_S) -> Report:
    """Analyse one capture (pcap/pcapng, optionally gzip): a path or URL, "-" for stdin, or a
    binary file object (an open file, `io.BytesIO`, a pipe or socket stream), read from where
    it stands and left open; the report names it by its `name` ("<stream>" without one).
    A directory, a glob pattern or a list of them is one capture (a file set), as on the
    command line; one that names no capture file raises `nagleprobe.errors.TargetError` (a
    CaptureError).

    Streams by default: memory is bounded by the connections open at a time (see
    `nagleprobe.stream`; `reorder_window_s` is its reorder window), and a connection holding
    `piece_rows` packets (default `nagleprobe.pieces.PIECE_ROWS`) is analysed in pieces, so
    what is held of one that never closes is bounded too. `keep_segments` also keeps every
    decoded packet (memory grows with the capture), so `report.segments` needs no second
    reading of the capture (standard input and other streams cannot be read twice).
    Raises `nagleprobe.CaptureError` for input that cannot be read at all. A damaged capture
    (truncated, corrupt records in the middle) is analysed as far as it can be trusted and the
    damage listed in `report.capture["warnings"]`; with `strict=True` it raises instead.
    `url_timeout`: the longest wait, in seconds, for an http(s) server (to connect, for its
    answer, for more of the body); then a `CaptureError`.
    """
    stream = None
    paths = None
    if isinstance(path, (list, tuple, str, os.PathLike)):
        paths = capture_paths([os.fspath(p) for p in path] if isinstance(path, (list, tuple))
                              else [os.fspath(path)])
        if len(paths) == 1:
            path, paths = paths[0], None
        else:
            from .vantage import vantage_groups

            groups = vantage_groups(paths, url_timeout)
            if len(groups) > 1:
                kw = dict(chunk_bytes=chunk_bytes, strict=strict, keep_segments=keep_segments,
                          reorder_window_s=reorder_window_s, batch_rows=batch_rows,
                          progress=progress, idle_s=idle_s, piece_rows=piece_rows,
                          url_timeout=url_timeout)
                return _joined([analyze(g if len(g) > 1 else g[0], **kw) for g in groups],
                               groups)
    if paths is None and not isinstance(path, (str, os.PathLike)):
        if isinstance(path, io.TextIOBase) or not callable(getattr(path, "read", None)):
            raise TypeError(f"analyze() takes a path or a binary file object (opened with "
                            f"'rb'), not {type(path).__name__}")
        name = getattr(path, "name", None)
        stream, path = path, name if isinstance(name, str) and name else "<stream>"
    start = _position(stream)
    loader = threading.Thread(target=_load_analysis, name="nagleprobe-import")
    loader.start()
    try:
        reader = open_reader(paths or path, chunk_bytes, strict, url_timeout, stream)
        skipped: Counter = Counter()
        kept: list[Columns] | None = [] if keep_segments else None
        chunks = decoded(reader, skipped, progress, kept)
        early: deque = deque()  # chunks decoded while the analysis modules load
        while (loader.is_alive() and len(early) < EARLY_CHUNKS
               and (chunk := next(chunks, None)) is not None):
            early.append(chunk)
        loader.join()
        report = with_files(reader, _analyze_stream(reader, skipped, early, chunks,
                                                     reorder_window_s, batch_rows, idle_s,
                                                     piece_rows))
        if kept is not None:
            report.source = reassembled(kept)
        if start is not None:  # a seekable stream: its held messages can be read again
            report.payload_stream = (stream, start)
        return report
    finally:
        loader.join()


def _position(stream: BinaryIO | None) -> int | None:
    """Where a seekable stream stands (None: no stream, or one that cannot seek)."""
    try:
        return stream.tell() if stream is not None and stream.seekable() else None
    except (OSError, ValueError, AttributeError):
        return None


def open_reader(path: str | os.PathLike[str] | list[str], chunk_bytes: int = 32 << 20,
                strict: bool = False, url_timeout: float = URL_TIMEOUT_S,
                stream: BinaryIO | None = None) -> CaptureReader | SetReader:
    """The reader of one capture: a path or URL (with `stream`: its name, read from the
    stream), or the paths of a file set (read as one capture, in time order)."""
    if isinstance(path, list):
        return SetReader(path, chunk_bytes=chunk_bytes, strict=strict, url_timeout=url_timeout)
    return CaptureReader(os.fspath(path), chunk_bytes=chunk_bytes, strict=strict, stream=stream,
                         url_timeout=url_timeout)


def decoded(reader: CaptureReader | SetReader, skipped: Counter,
            progress: Progress | None = None, kept: list[Columns] | None = None
            ) -> Iterator[tuple[int | None, Columns]]:
    """(first timestamp of the chunk or None, its decoded TCP columns) per chunk read; each
    chunk's columns also appended to `kept` if given."""
    for first_ns, cols in _decoded(reader, skipped, progress):
        if kept is not None and len(cols["frame"]):
            kept.append(cols)
        yield first_ns, cols


def _decoded(reader: CaptureReader | SetReader, skipped: Counter, progress: Progress | None
             ) -> Iterator[tuple[int | None, Columns]]:
    if isinstance(reader, SetReader):
        for group in reader:  # one step of the merge: slices of several files
            first_ns = min(int(b.ts_ns.min()) for b in group)
            cols = merge_columns([decode(b, skipped) for b in group])
            del group
            if progress is not None:
                progress(reader, reader.records)
            yield first_ns, cols
        return
    frames = 0
    for batch in reader:
        first_ns = int(batch.ts_ns[0]) if len(batch.ts_ns) else None
        if len(batch):
            frames = int(batch.frame[-1])
        cols = decode(batch, skipped)
        del batch  # so the reader can reuse its buffer for the next chunk
        if progress is not None:
            progress(reader, frames)
        yield first_ns, cols
        del cols  # the stream keeps what it holds; the rest is free for the next chunk


def _analyze_stream(reader: CaptureReader | SetReader, skipped: Counter, early: deque,
                    chunks: Iterator[tuple[int | None, Columns]],
                    reorder_window_s: float, batch_rows: int | None,
                    idle_s: float = DEFAULT_IDLE_S, piece_rows: int | None = None) -> Report:
    from .stream import StreamAnalyzer

    stream = None
    try:
        while early or (chunk := next(chunks, None)) is not None:
            first_ns, cols = early.popleft() if early else chunk
            chunk = None
            if stream is None and first_ns is not None:
                kw = {} if batch_rows is None else {"batch_rows": batch_rows}
                if piece_rows is not None:
                    kw["piece_rows"] = piece_rows
                stream = StreamAnalyzer(first_ns, reorder_window_s, idle_s, **kw)
            if stream is not None:
                stream.feed(cols)
                if reader.strict and (stream.late_packets or stream.late_in_pieces):
                    raise CaptureError(reader.path, "a TCP packet arrived more than "
                                       f"{reorder_window_s:g} s (capture time) after its "
                                       "connection closed (raise --reorder-window)",
                                       f"frame {stream.first_late_frame}")
            del cols
        skipped.update(reader.info.skipped)
        stream = stream or StreamAnalyzer(0, reorder_window_s, idle_s, workers=0)
        return stream.finish(reader.info, dict(skipped))
    finally:
        if stream is not None:
            stream.close()


def reassembled(parts: list[Columns]) -> Flows:
    """Every connection of the decoded chunks `parts`, reassembled at once (`build_flows`):
    the segments of a report. Judging is the stream's; this only rebuilds the flows."""
    from .flows import build_flows

    return build_flows({k: np.concatenate([p[k] for p in parts]) for k in TCP_COLUMNS}
                       if parts else Columns.empty(TCP_COLUMNS))


def with_files(reader: CaptureReader | SetReader, report: Report) -> Report:
    """The report, told how to read its capture again (for `segments`; where its records
    lie for `held`), and for a file set each frame number back in its own file (see
    `nagleprobe.report.name_files`)."""
    report.reread = reread
    if not isinstance(reader, SetReader):
        report.frame_index = reader.index
        return report
    from .report import name_files

    name_files(report, reader.files)
    return report


def _joined(reports: list[Report], groups: list[list[str]]) -> Report:
    """The report of the first vantage, the others joined to it (`Report.vantages`), and a
    warning saying so, so that no front end shows one vantage as the whole set."""
    from .vantage import join

    report = reports[0]
    report.vantage_doc = join(reports, groups)
    files = sum(len(g) for g in groups)
    report.capture["warnings"].insert(0, Weird(
        "vantages-joined", f"the {files} files are captures of the same connections from "
        f"{len(groups)} places (vantages): each analysed on its own; this report is of "
        f"vantage 1 ({set_name(groups[0])}), the vantages section joins them"))
    return report


def reread(report: Report) -> Flows:
    """The reassembled flows of a streamed analysis, which freed each connection's packets
    once analysed: read the file (or the files of a set) again, whole, and check it gives the
    same flows."""
    files, flows = report.capture.get("files"), report.flows
    path = [f["path"] for f in files if f["packets"]] if files else report.capture["path"]
    if isinstance(path, list):
        if not all(os.path.isfile(p) for p in path):
            raise ValueError(f"{path[0]}: a file of the set is gone: its segments cannot be "
                             "read again")
    elif path == "-" or not os.path.isfile(path):
        raise ValueError(f"{path}: the segments of a streamed analysis come from reading the "
                         "capture again, and it cannot be re-read (use nagleprobe.analyze(path, "
                         "keep_segments=True) to keep them)")
    reader = open_reader(path)
    whole = reassembled([cols for _, cols in decoded(reader, Counter())])
    ids = flows["id"].to_numpy()
    clients = whole.flow["client"]
    if not (ids < len(clients)).all() or not np.array_equal(clients[ids],
                                                            flows["client"].to_numpy()):
        raise ValueError(f"{path}: the file changed since it was analysed")
    return whole
