"""A copy of a capture for Wireshark: pcapng, with a packet comment on the three frames of
every stall and the verdicts in the section header's comment.

    analyse (the usual streamed analysis) -> read the capture again, copying its records a
    chunk at a time, adding an `opt_comment` to the frames that need one.

* pcapng input is copied byte for byte (blocks of every kind, existing options and comments
  kept); a commented packet block gets its options rewritten (existing ones kept, ours
  appended) and its length fields updated; the first section header gets the verdicts as a
  comment and its section length set to -1 (unknown), since the section grew. Simple Packet
  Blocks cannot carry options: a stall frame stored as one stays without a comment (counted).
* pcap input becomes one pcapng section with one interface (the pcap's link type and snap
  length, `if_tsresol` 6 or 9 as the pcap's micro- or nanosecond timestamps) and one
  Enhanced Packet Block per record, with the record's time, lengths and bytes. The blocks
  are built with numpy a chunk at a time.

Memory: the analysis's (bounded) plus, per stall, three frame numbers and their comments'
row; the copying holds one reader chunk (32 MiB) and its blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from . import __version__
from .errors import CaptureError
from .layouts import (
    BLOCK,
    BT_EPB,
    BT_IDB,
    BT_PB,
    BT_SHB,
    BT_SPB,
    EPB,
    IDB,
    IF_TSRESOL,
    OPT_COMMENT,
    OPT_END,
    OPTION,
    PCAP_FILE,
    PCAP_NS,
    PCAP_RECORD,
    PCAP_US,
    PCAPNG_BOM,
    SHB,
    SHB_USERAPPL,
    TRAILER,
)
from .output import Output, open_output, refuse_inputs
from .read import CaptureReader, open_uncompressed, u32_rows
from .selection import worst_first

if TYPE_CHECKING:
    from .report import Report

WHAT = "the annotated capture"  # the output, in messages
MAX_OPTION = 65535  # an option's length field is 16 bits
END_OF_OPTIONS = OPTION.pack(code=OPT_END, length=0)  # the same bytes in either byte order
# the words of an Enhanced Packet Block's header, by field (all 32-bit)
EPB_WORD = {name: EPB.offset(name) // 4 for name, _ in EPB.fields}
SHB_LISTED_FLOWS = 200  # flows named one by one in the section header's comment
ROLES = ("small", "ack", "released")
COPY_PIECE = 1 << 20  # bytes copied at a time between commented pcapng blocks
GROUP = 1 << 16  # pcap records converted at once (bounds numpy's temporaries)


@dataclass
class AnnotateResult:
    """What `annotate` wrote."""

    output: str
    report: Report
    packets: int  # packet records written
    commented: int  # frames that got a comment
    uncommentable: int  # stall frames stored as Simple Packet Blocks (no options possible)


class _Comments:
    """The comment texts of the stall frames, built when a frame is written (not held as
    strings: a capture with a million stalls would need hundreds of MB for them)."""

    def __init__(self, report: Report) -> None:
        st = report.stalls
        n = len(st)
        flow = st["flow"].to_numpy()
        # each stall's number within its flow (stalls are sorted by flow, then S2's frame)
        first = np.r_[0, np.flatnonzero(flow[1:] != flow[:-1]) + 1] if n else np.zeros(0, int)
        counts = np.diff(np.r_[first, n])
        self.k = np.arange(n) - np.repeat(first, counts) + 1
        self.of = np.repeat(counts, counts)
        frames = np.concatenate([st[f"{r}_frame"].to_numpy() for r in ROLES]).astype(np.int64)
        role = np.repeat(np.arange(3), n)
        row = np.tile(np.arange(n), 3)
        order = np.lexsort((role, frames))
        self.frames, self.role, self.row = frames[order], role[order], row[order]
        self.unique = np.unique(self.frames)
        self.col = {c: st[c].to_numpy() for c in ("flow", "sender", "small_bytes", "delay_ms",
                                                   "peer_ack_delay_ms", "held_bytes",
                                                   "reaction_ms")}
        fl = report.flows
        self.fix = {int(i): (s, e, a) for i, s, e, a in zip(
            fl["id"].tolist(), fl["fix_side"].tolist(), fl["fix_endpoint"].tolist(),
            fl["fix_action"].tolist())}

    def wanted(self, frames: np.ndarray) -> np.ndarray:
        """Mask of the given frames that get comments."""
        if not len(self.unique):
            return np.zeros(len(frames), dtype=bool)
        at = np.minimum(np.searchsorted(self.unique, frames), len(self.unique) - 1)
        return self.unique[at] == frames

    def texts(self, frames: np.ndarray) -> list[list[bytes]]:
        """The comments of each of the given frames (one per stall it belongs to), UTF-8."""
        lo = np.searchsorted(self.frames, frames, side="left")
        hi = np.searchsorted(self.frames, frames, side="right")
        j = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())]
                           or [np.zeros(0, np.int64)])
        rows = self.row[j]
        cols = {c: v[rows].tolist() for c, v in self.col.items()}
        k, of = self.k[rows].tolist(), self.of[rows].tolist()
        texts = [self._text(r, {c: v[i] for c, v in cols.items()}, k[i], of[i]).encode("utf-8")
                 for i, r in enumerate(self.role[j].tolist())]
        bounds = np.r_[0, np.cumsum(hi - lo)].tolist()
        return [texts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def _text(self, role: int, s: dict, k: int, of: int) -> str:
        flow = int(s["flow"])
        head = f"nagleprobe: stall {k} of {of} (flow {flow}): "
        if role == 0:
            side, endpoint, action = self.fix.get(flow, (None, None, None))
            fix = f"; fix {side} {endpoint} {action}" if side else ""
            return (f"{head}S1 small segment ({s['small_bytes']} B), the next data held "
                    f"{s['delay_ms']:.1f} ms{fix}")
        if role == 1:
            peer = "server" if s["sender"] == "client" else "client"
            return (f"{head}late pure ACK ({peer}'s delayed ACK, "
                    f"{s['peer_ack_delay_ms']:.1f} ms)")
        return (f"{head}S2 released ({s['held_bytes']} B, {s['delay_ms']:.1f} ms after S1, "
                f"{s['reaction_ms']:.3f} ms after the ACK)")


def capture_comment(report: Report) -> str:
    """The section header's comment: the verdict and, per flow with stalls, its fix."""
    lines = [f"nagleprobe {__version__}: {report.verdict()}"]
    stalled = worst_first(report.flows[report.flows["stalls"] > 0])
    for f in stalled.head(SHB_LISTED_FLOWS).to_dict("records"):
        lines.append(f"flow {f['id']}: client {f['client']} -> server {f['server']}: "
                     f"{f['stalls']} stalls, {f['stall_ms']:.1f} ms lost "
                     f"({100 * f['lost_share']:.1f}% of {f['duration_s']:.3f} s); fix: "
                     f"{f['fix_side']} {f['fix_endpoint']} {f['fix_action']}")
    if len(stalled) > SHB_LISTED_FLOWS:
        lines.append(f"... {len(stalled) - SHB_LISTED_FLOWS} more flows with stalls "
                     "(nagleprobe analyze --format json lists them all)")
    if len(stalled):
        lines.append('The stall frames carry packet comments: display filter '
                     'frame.comment contains "nagleprobe".')
    return "\n".join(lines)


def _option(code: int, value: bytes, big: bool) -> bytes:
    value = value[:MAX_OPTION]
    return OPTION.pack(big, code=code, length=len(value)) + value + b"\0" * (-len(value) & 3)


def _options_end(block: bytes, at: int, big: bool) -> int:
    """Where the options from `at` end, before their end-of-options marker (the block's
    trailing length if they have none or do not parse: they are then kept whole)."""
    end = len(block) - TRAILER.size
    option = OPTION.struct(big).unpack_from
    p = at
    while p + OPTION.size <= end:
        code, ln = option(block, p)
        if code == OPT_END:
            return p
        p += OPTION.size + ln + (-ln & 3)
    return end


def _with_options(block: bytes, opts_at: int, extra: bytes, big: bool,
                  section: bool = False) -> bytes:
    """`block` with the options `extra` added after its own, lengths updated (and, for a
    `section` header, its section length set to -1: unknown)."""
    body = bytearray(block[:_options_end(block, opts_at, big)] + extra + END_OF_OPTIONS)
    if section:
        SHB.field_struct("section_length", big).pack_into(body, SHB.offset("section_length"), -1)
    return _with_length(body, big)


def _with_length(block: bytes, big: bool) -> bytes:
    """A block (header, body, no trailer) with its length word set and the trailing copy."""
    n = len(block) + TRAILER.size
    at = BLOCK.offset("length")
    return (bytes(block[:at]) + TRAILER.pack(big, length=n) + bytes(block[at + TRAILER.size:])
            + TRAILER.pack(big, length=n))


def annotate(path: str, output: str, report: Report | None = None, *,
             strict: bool = False) -> AnnotateResult:
    """Write `output` (pcapng): the capture `path` with comments on every stall's frames and
    the verdicts in the section header. `report`: its analysis, if already made. `output`
    follows `nagleprobe.output`: never the capture itself; `-`, a FIFO or a device is
    written as a stream, a file replaced only when complete."""
    if path == "-":
        raise CaptureError(path, "annotate reads the capture twice: give a file, not "
                           "standard input")
    refuse_inputs(output, [path], WHAT)  # refused before a long analysis, not after it
    if report is None:
        from .pipeline import analyze

        report = analyze(path, strict=strict)
    comments = _Comments(report)
    reader = CaptureReader(path, strict=strict)
    try:
        with open_output(output, WHAT, [path]) as out:
            if reader.info.format == "pcap":
                packets, commented, spb = _pcap_to_pcapng(path, reader, out, comments, report)
            else:
                packets, commented, spb = _copy_pcapng(path, reader, out, comments, report)
    finally:
        reader.close()
    return AnnotateResult(output, report, packets, commented, spb)


# ------------------------------------------------------------------ pcap -> pcapng
def _pcap_to_pcapng(path: str, reader: CaptureReader, out: Output, comments: _Comments,
                    report: Report) -> tuple[int, int, int]:
    with open_uncompressed(path) as raw:
        head = raw.read(PCAP_FILE.size)
    big = int.from_bytes(head[:4], "little") not in (PCAP_US, PCAP_NS)
    fh = PCAP_FILE.unpack(head, big=big)
    ns = fh["magic"] == PCAP_NS
    big_out = False  # the copy is little-endian
    shb_opts = (_option(OPT_COMMENT, capture_comment(report).encode("utf-8"), big_out)
                + _option(SHB_USERAPPL, f"nagleprobe {__version__}".encode(), big_out))
    shb = SHB.pack(big_out, type=BT_SHB, length=0, bom=PCAPNG_BOM, major=1, minor=0,
                   section_length=-1) + shb_opts + END_OF_OPTIONS
    idb = (IDB.pack(big_out, type=BT_IDB, length=0, linktype=fh["network"] & 0xFFFF, reserved=0,
                    snaplen=fh["snaplen"])
           + _option(IF_TSRESOL, bytes([9 if ns else 6]), big_out) + END_OF_OPTIONS)
    for block in (shb, idb):
        out.write(_with_length(block, big_out))
    per_s = 1_000_000_000 if ns else 1_000_000  # the file's time units per second
    packets = commented = 0
    for batch in reader:
        for a in range(0, len(batch), GROUP):
            sl = slice(a, a + GROUP)
            frame = batch.frame[sl]
            want = np.flatnonzero(comments.wanted(frame))
            extra = [b"".join(_option(OPT_COMMENT, t, big_out) for t in texts)
                     for texts in comments.texts(frame[want])]
            # the times as the file has them (the batch's are on the joined clock after a
            # step of it: see read/clock.py)
            sec_frac = u32_rows(batch.data, batch.offset[sl] - PCAP_RECORD.size, 2, big)
            units = sec_frac[:, 0] * per_s + sec_frac[:, 1]
            out.write(_epbs(batch.data, batch.offset[sl], batch.caplen[sl], batch.wirelen[sl],
                            units, want, extra))
            packets += len(frame)
            commented += len(want)
    return packets, commented, 0


def _epbs(data: np.ndarray, offset: np.ndarray, caplen: np.ndarray, wirelen: np.ndarray,
          units: np.ndarray, want: np.ndarray, extra: list[bytes]) -> memoryview:
    """Enhanced Packet Blocks (little-endian, interface 0) of the records whose bytes are at
    `offset` in `data`; records `want` get the options `extra` (plus an end marker)."""
    k = len(offset)
    opt = np.zeros(k, dtype=np.int64)
    opt[want] = [len(x) + 4 for x in extra]
    blen = EPB.size + TRAILER.size + caplen + (-caplen & 3) + opt
    at = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(blen, out=at[1:])
    out = np.zeros(int(at[-1]), dtype=np.uint8)
    if not k:
        return memoryview(out)
    words = out.view("<u4")
    w = at[:-1] >> 2
    words[w + EPB_WORD["type"]] = BT_EPB
    words[w + EPB_WORD["length"]] = blen
    words[w + EPB_WORD["ts_hi"]] = units >> 32
    words[w + EPB_WORD["ts_lo"]] = units & 0xFFFFFFFF
    words[w + EPB_WORD["caplen"]] = caplen
    words[w + EPB_WORD["origlen"]] = wirelen
    words[(at[1:] >> 2) - 1] = blen
    # the packet bytes: the same runs of bytes, at other places (one masked copy; the masks
    # repeat an in/out pattern by the runs' lengths)
    lo = int(offset[0])
    hi = int(offset[-1] + caplen[-1])
    gaps = np.r_[0, offset[1:] - (offset[:-1] + caplen[:-1])]
    src = np.repeat(np.tile([False, True], k), np.stack([gaps, caplen], axis=1).reshape(-1))
    dst = np.repeat(np.tile([False, True, False], k),
                    np.stack([np.full(k, EPB.size), caplen, blen - EPB.size - caplen],
                             axis=1).reshape(-1))
    out[dst] = data[lo:hi][src]
    for i, x in zip(want.tolist(), extra):
        p = int(at[i] + EPB.size + caplen[i] + (-caplen[i] & 3))
        out[p:p + len(x)] = np.frombuffer(x, dtype=np.uint8)
    return memoryview(out)


# ------------------------------------------------------------------ pcapng -> pcapng
def _copy_pcapng(path: str, reader: CaptureReader, out: Output, comments: _Comments,
                 report: Report) -> tuple[int, int, int]:
    # where the stall frames' blocks start (the reader finds them; the copy then needs no
    # parsing of its own but for those blocks and the first section header)
    starts, frames = [], []
    packets = 0
    for batch in reader:
        m = np.flatnonzero(comments.wanted(batch.frame))
        starts.append(batch.start[m])
        frames.append(batch.frame[m])
        packets += len(batch)
    at = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    fr = np.concatenate(frames) if frames else np.zeros(0, np.int64)
    commented = spb = 0
    with open_uncompressed(path) as raw:
        pos = _copy_first_shb(raw, out, capture_comment(report))
        texts: list[list[bytes]] = []
        for i, p in enumerate(at.tolist()):
            if i % GROUP == 0:  # the comments of the next GROUP frames
                texts = comments.texts(fr[i:i + GROUP])
            _copy(raw, out, p - pos)
            head = raw.read(BLOCK.size)
            big = int.from_bytes(head[:4], "little") not in (BT_EPB, BT_PB, BT_SPB)
            btype, blen = BLOCK.struct(big).unpack(head)
            block = head + raw.read(blen - BLOCK.size)
            pos = p + blen
            if btype == BT_SPB:  # no options in a Simple Packet Block
                out.write(block)
                spb += 1
                continue
            caplen = EPB.unpack(block, 0, big)["caplen"]  # (a Packet Block's is there too)
            extra = b"".join(_option(OPT_COMMENT, t, big) for t in texts[i % GROUP])
            out.write(_with_options(block, EPB.size + caplen + (-caplen & 3), extra, big))
            commented += 1
        _copy(raw, out, None)
    return packets, commented, spb


def _copy_first_shb(raw: BinaryIO, out: Output, comment: str) -> int:
    """Copy the first section header with `comment` added; the input offset after it."""
    bom_at = SHB.offset("bom")
    head = raw.read(bom_at + 4)
    big = head[bom_at:] != PCAPNG_BOM.to_bytes(4, "little")
    blen = BLOCK.unpack(head, 0, big)["length"]
    block = head + raw.read(blen - len(head))
    extra = _option(OPT_COMMENT, comment.encode("utf-8"), big)
    out.write(_with_options(block, SHB.size, extra, big, section=True))
    return blen


def _copy(raw: BinaryIO, out: Output, n: int | None) -> None:
    """Copy n bytes (all that is left if None) from raw to out."""
    while n is None or n > 0:
        piece = raw.read(COPY_PIECE if n is None else min(n, COPY_PIECE))
        if not piece:
            return
        out.write(piece)
        if n is not None:
            n -= len(piece)
