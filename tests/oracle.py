"""The reference every way of running the engine is held to: the whole capture decoded first,
every connection rebuilt and judged at once (`build_flows` -> `detect`), one report.

It is not a product path (the product streams: `nagleprobe.stream`); it is the simplest
reading of the rules, so the streamed, pieced and live results are compared with it.
"""

from __future__ import annotations

import os
from collections import Counter

from nagleprobe import syns
from nagleprobe.detect import detect
from nagleprobe.fileset import capture_paths
from nagleprobe.pipeline import decoded, open_reader, reassembled, with_files
from nagleprobe.report import Report, build_report


def analyze_whole(path: str | os.PathLike[str] | list) -> Report:
    """The report of one capture (a path, or the paths of a file set) judged whole."""
    paths = capture_paths([os.fspath(p) for p in path] if isinstance(path, (list, tuple))
                          else [os.fspath(path)])
    reader = open_reader(paths if len(paths) > 1 else paths[0])
    skipped: Counter = Counter()
    parts, origin_ns = [], None
    for first_ns, _ in decoded(reader, skipped, None, parts):
        if origin_ns is None:
            origin_ns = first_ns
    skipped.update(reader.info.skipped)
    flows = reassembled(parts)
    if flows.duplicates:
        skipped["duplicate"] += flows.duplicates
    jumps = syns.Tally()
    jumps.add(flows.syn_jumps)
    given = reader.info.warnings
    skipped_all, warnings = jumps.told(dict(skipped), list(given))
    report = build_report(reader.info, skipped_all, flows, detect(flows), origin_ns or 0)
    report.capture["warnings"][:len(given)] = warnings  # before the analysis', as streamed
    report.source = flows
    return with_files(reader, report)
