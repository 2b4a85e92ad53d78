"""Stage 1: stream packet records out of a pcap / pcapng capture (optionally gzip, or stdin).

The reader never builds a Python object per packet.  The one loop numpy cannot do is walking
the chain of record (pcap) or block (pcapng) headers to find where each record starts; that
loop only appends start offsets to an `array('q')`.  Everything else (timestamps, lengths,
interface link types) is gathered afterwards with numpy over the chunk's bytes.

Hostile input: lengths read from the file are checked against libpcap's / Wireshark's limits
before anything is read or allocated from them, and buffers never exceed the chunk size plus
one bounded record.  Damage is handled the same way everywhere:

* before the first packet record it is a `CaptureError` (nothing to analyse);
* after it (a truncated last record, a corrupt record or block in the middle, a corrupt gzip
  stream) it is a warning in `CaptureInfo.warnings`, and the reader goes on with whatever
  can still be trusted: after a record or block with an impossible length it looks for the
  next position where a consistent chain of records (pcap) or a block whose trailing length
  matches (pcapng) starts, and counts the skipped stretch in `CaptureInfo.skipped`;
* with `strict=True` every such warning is raised as a `CaptureError` instead.

The package, one concern per module: `formats` (the formats as data: the packet blocks' words
from the byte layouts of `nagleprobe.layouts`, limits, link types; `RecordBatch`,
`CaptureInfo`), `source` (files,
stdin, gzip, URLs), `walk` (where records start: compiled `_walk.c` or numpy/Python),
`pcap` and `pcapng` (each format's reading and resynchronisation), `damage` (the damage
policy and its limits), `clock` (implausible times, steps of the clock, time resolution),
`index` (where a pcap file's records lie, to read a few again by seeking)
and `reader` (`CaptureReader`, the facade over them).
"""

from .damage import MAX_WARNINGS, RESYNC_WINDOW_S
from .formats import (
    KNOWN_BLOCKS,
    LINKTYPE_NAMES,
    MAX_BLOCK,
    MAX_CAPLEN,
    MIN_BLOCK,
    SUPPORTED_LINKTYPES,
    CaptureInfo,
    RecordBatch,
    block_length_ok,
    linktype_name,
)
from .index import FrameIndex
from .reader import CaptureReader, read_capture
from .source import URL_TIMEOUT_S, open_uncompressed, open_url, url_scheme
from .walk import u32_rows, u32_rows_numpy, walk_headers, walk_python

__all__ = ["KNOWN_BLOCKS", "LINKTYPE_NAMES", "MAX_BLOCK", "MAX_CAPLEN", "MAX_WARNINGS",
           "MIN_BLOCK", "RESYNC_WINDOW_S", "SUPPORTED_LINKTYPES", "URL_TIMEOUT_S", "CaptureInfo",
           "CaptureReader", "FrameIndex", "RecordBatch", "block_length_ok", "linktype_name", "open_uncompressed",
           "open_url", "read_capture", "u32_rows", "u32_rows_numpy", "url_scheme", "walk_headers",
           "walk_python"]
