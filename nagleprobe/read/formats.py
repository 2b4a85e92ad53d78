"""The capture formats as data: limits, the packet blocks' words (from the byte layouts in
nagleprobe/layouts.py), link types, and the record batches and capture facts the reader
hands on."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import layouts
from ..encap import Tunnels
from ..layouts import BT_EPB, BT_IDB, BT_PB, BT_SHB, BT_SPB
from ..weirds import Weird

MAX_CAPLEN = 262144  # libpcap's MAXIMUM_SNAPLEN
MAX_BLOCK = 16 << 20  # Wireshark's MAX_BLOCK_SIZE for pcapng blocks

# block types of the pcapng spec that are not packets: skipped silently (journal export,
# decryption secrets, custom blocks); anything else is counted as "unknown-block-type"
KNOWN_BLOCKS = frozenset({BT_IDB, BT_PB, BT_SPB, layouts.BT_NRB, layouts.BT_ISB, BT_EPB, 9, 10,
                          0xBAD, 0x40000BAD, BT_SHB})


@dataclass(frozen=True)
class PacketBlock:
    """Where a pcapng packet block keeps its fields, as byte offsets from the block's start
    (after the block type and length words, both 32-bit)."""

    name: str
    words: tuple[str, ...]  # the 32-bit words from `fields` on, in order
    fields: int  # offset of the first of `words`
    data: int  # offset of the packet bytes
    overhead: int  # bytes of a block that are not packet data (with the trailing length)


def _packet_block(name: str, layout: layouts.Layout) -> PacketBlock:
    words = tuple(k for k, _ in layout.fields[len(layouts.BLOCK.fields):])
    return PacketBlock(name, words, layout.offset(words[0]), layout.size,
                       layout.size + layouts.TRAILER.size)


# a Simple Packet Block's interface is the section's first
PACKET_BLOCKS = {BT_EPB: _packet_block("EPB", layouts.EPB), BT_PB: _packet_block("PB", layouts.PB),
                 BT_SPB: _packet_block("SPB", layouts.SPB)}
EPB, SPB = PACKET_BLOCKS[BT_EPB], PACKET_BLOCKS[BT_SPB]
# the shortest block of each type (a packet block with no packet bytes; an IDB's fields)
MIN_BLOCK = {**{t: b.overhead for t, b in PACKET_BLOCKS.items()},
             BT_IDB: layouts.IDB.size + layouts.TRAILER.size}
# type, length and trailing length; a section header's
MIN_BLOCK_LEN = layouts.BLOCK.size + layouts.TRAILER.size
MIN_SHB_LEN = layouts.SHB.size + layouts.TRAILER.size


def block_length_ok(bl, least: int = MIN_BLOCK_LEN):  # noqa: ANN001, ANN201 (int or array)
    """Whether a pcapng block length can be true: a multiple of 4, at least `least`, at most
    MAX_BLOCK. Works on an int or elementwise on an array; `_walk.c` (walk_blocks) checks
    the same (tests/test_walk.py pins them equal)."""
    return (bl >= least) & (bl <= MAX_BLOCK) & ((bl & 3) == 0)


LINKTYPE_NAMES = {
    0: "NULL", 1: "EN10MB", 12: "RAW", 101: "RAW", 108: "LOOP", 113: "LINUX_SLL",
    228: "IPV4", 229: "IPV6", 276: "LINUX_SLL2", 9: "PPP", 50: "PPP_HDLC", 104: "C_HDLC",
    239: "NFLOG", 258: "PKTAP", 149: "PKTAP", 105: "IEEE802_11", 127: "IEEE802_11_RADIOTAP",
    192: "PPI", 119: "PRISM_HEADER",
    # not decoded, named for messages
    6: "IEEE802_5", 10: "FDDI", 147: "USER0", 187: "BLUETOOTH_HCI_H4", 189: "USB_LINUX",
    195: "IEEE802_15_4", 220: "USB_LINUX_MMAPPED", 249: "NETLINK",
}
# 149 is LINKTYPE_USER2 by the registry, but macOS tcpdump writes its PKTAP headers as 149
SUPPORTED_LINKTYPES = frozenset({0, 1, 12, 101, 108, 113, 228, 229, 276, 9, 50, 104, 239, 258,
                                 149, 105, 127, 192, 119})


def linktype_name(lt: int) -> str:
    return LINKTYPE_NAMES.get(int(lt), f"LINKTYPE_{int(lt)}")


@dataclass
class RecordBatch:
    data: np.ndarray  # uint8, the bytes this batch's packets live in
    offset: np.ndarray  # int64, start of each packet's link-layer bytes in `data`
    caplen: np.ndarray  # int64, captured length
    wirelen: np.ndarray  # int64, original length on the wire
    ts_ns: np.ndarray  # int64, nanoseconds since the epoch
    linktype: np.ndarray  # int32, LINKTYPE_* of each record (pcapng: from its interface)
    frame: np.ndarray  # int64, 1-based frame number (counts every packet record)
    # int64, where each packet's block starts in a pcapng file, counting uncompressed bytes:
    # for copying blocks as they are (`annotate`); None if not known, and for pcap (whose
    # records `annotate` rewrites from `data`)
    start: np.ndarray | None = None
    # the capture's tunnel numbering, which the decoder extends (encap.Tunnels)
    tunnels: Tunnels | None = None
    # int64, each record's interface (pcapng: its index over the file's interface blocks);
    # None for pcap, whose records all have the file's one
    iface: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offset)

    def rows(self, index: np.ndarray) -> RecordBatch:
        """The records `index` selects, over the same bytes (what the decoder reads of
        them: not `start` or `iface`)."""
        return RecordBatch(data=self.data, offset=self.offset[index], caplen=self.caplen[index],
                           wirelen=self.wirelen[index], ts_ns=self.ts_ns[index],
                           linktype=self.linktype[index], frame=self.frame[index],
                           tunnels=self.tunnels)


@dataclass
class CaptureInfo:
    path: str
    format: str = ""
    compressed: bool = False
    link_types: list[str] = field(default_factory=list)
    packets: int = 0
    warnings: list[Weird] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    tunnels: Tunnels = field(default_factory=Tunnels)  # the tunnels decoded (numbers, layers)
    # the coarsest effective time resolution (ns) of the interfaces that carried packets,
    # declared or observed (see `clock`); None before any packet
    time_step_ns: int | None = None


class Interface:
    __slots__ = ("linktype", "snaplen", "tsmul", "tsdiv", "tsshift", "tsoffset_ns")

    MAX_TSOFFSET_S = 1 << 33  # if_tsoffset beyond ~270 years is nonsense: ignored

    def __init__(self, linktype: int, snaplen: int) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        self.tsmul = 1000  # default resolution 10^-6
        self.tsdiv = 1
        self.tsshift = 0  # power-of-two resolution: ns = units * 1e9 >> shift
        self.tsoffset_ns = 0

    def set_tsresol(self, v: int) -> str | None:
        """Units of 10^-e s (bit 7 clear) or 2^-e s (bit 7 set; 0x80 is whole seconds).
        A resolution finer than 64-bit timestamps can count since 1970 in (10^-19 s,
        2^-63 s) is refused: the default (microseconds) stays and the problem is returned."""
        e = v & 0x7F
        if v & 0x80:
            if e > 63:
                return f"if_tsresol 0x{v:02x} (2^-{e} s) is finer than 64-bit timestamps can hold"
            self.tsshift = e
            self.tsmul, self.tsdiv = (0, 1) if e else (1_000_000_000, 1)
        else:
            if e > 19:
                return f"if_tsresol 0x{v:02x} (10^-{e} s) is finer than 64-bit timestamps can hold"
            if e <= 9:
                self.tsmul, self.tsdiv = 10 ** (9 - e), 1
            else:
                self.tsmul, self.tsdiv = 1, 10 ** (e - 9)
            self.tsshift = 0
        return None

    @property
    def resolution_ns(self) -> float:
        """The declared time resolution in ns (if_tsresol; 1000 by default)."""
        if self.tsshift:
            return 1e9 / (1 << self.tsshift)
        return self.tsmul if self.tsdiv == 1 else 1 / self.tsdiv

    def set_tsoffset(self, seconds: int) -> None:
        if abs(seconds) <= self.MAX_TSOFFSET_S:
            self.tsoffset_ns = seconds * 1_000_000_000

    def ts_ns(self, units: np.ndarray) -> np.ndarray:
        """units: uint64 raw timestamps -> int64 ns since the epoch (wraps, never raises, on
        absurd values)."""
        if self.tsshift:
            k = self.tsshift
            sec = (units >> np.uint64(k)).astype(np.int64) if k < 64 else np.zeros_like(
                units, dtype=np.int64)
            frac = units & np.uint64((1 << k) - 1) if k < 64 else units
            if k > 33:  # keep frac * 1e9 inside 64 bits
                frac = frac >> np.uint64(k - 33)
                k2 = 33
            else:
                k2 = k
            ns = (frac * np.uint64(1_000_000_000)) >> np.uint64(k2)
            out = sec * 1_000_000_000 + ns.astype(np.int64)
        elif self.tsdiv > 1:
            out = (units // np.uint64(self.tsdiv)).astype(np.int64)
        else:
            out = units.astype(np.int64) * self.tsmul
        if self.tsoffset_ns:
            out = out + np.int64(self.tsoffset_ns)
        return out
