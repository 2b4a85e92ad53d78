"""Every byte layout nagleprobe reads or writes, declared once as data (as dpkt declares
`__hdr__`): the magic numbers, pcapng block types and options, and each header (pcap and
pcapng, link layers, IP and TCP, tunnels) as its fields in order with their struct codes.
The readers and their resyncs, `links`, `decode`, `encap` and `annotate` take sizes, offsets
and structs from here, the C loops through the generated nagleprobe/_columns.h (cheader.py).
Nothing here runs per packet: the readers gather whole columns at these offsets, and the
per-record peeler binds the ones it reads once.
"""

from __future__ import annotations

import struct

# magic numbers, as the first 32-bit word of a file read in the file's byte order
PCAP_US = 0xA1B2C3D4  # pcap, microsecond times
PCAP_NS = 0xA1B23C4D  # pcap, nanosecond times
PCAP_KUZNETSOV = 0xA1B2CD34  # the patched libpcap's pcap (longer record headers)
PCAPNG_BOM = 0x1A2B3C4D  # pcapng section header's byte-order magic

# pcapng block types
BT_SHB = 0x0A0D0D0A  # section header: also the first word of every pcapng file
BT_IDB, BT_PB, BT_SPB, BT_NRB, BT_ISB, BT_EPB = 1, 2, 3, 4, 5, 6

# pcapng option codes (OPT_* in every block with options, SHB_*, IF_* in theirs)
OPT_END, OPT_COMMENT, SHB_USERAPPL, IF_TSRESOL, IF_TSOFFSET = 0, 1, 4, 9, 14


class Layout:
    """A header: its fields in order as (name, struct code), packed without padding."""

    __slots__ = ("_offsets", "_structs", "fields", "name", "size")

    def __init__(self, name: str, fields: tuple[tuple[str, str], ...]) -> None:
        self.name = name
        self.fields = fields
        codes = "".join(code for _, code in fields)
        self._structs = {False: struct.Struct("<" + codes), True: struct.Struct(">" + codes)}
        self.size = self._structs[False].size  # bytes of the header
        self._offsets: dict[str, int] = {}
        at = 0
        for key, code in fields:
            self._offsets[key] = at
            at += struct.calcsize("<" + code)

    def __repr__(self) -> str:
        return f"Layout({self.name!r}, {self.fields!r})"

    def offset(self, name: str) -> int:
        """Where field `name` starts, from the header's first byte."""
        return self._offsets[name]

    def word(self, name: str, size: int) -> int:
        """Index of field `name` in the header read as big-endian `size`-byte words (the
        decoder's views of gathered headers); the field must be aligned to its size."""
        at = self._offsets[name]
        if at % size:
            raise ValueError(f"{self.name}: {name} is not {size}-byte aligned")
        return at // size

    def struct(self, big: bool) -> struct.Struct:
        """The whole header as a struct in the given byte order."""
        return self._structs[big]

    def field_struct(self, name: str, big: bool) -> struct.Struct:
        """One field as a struct in the given byte order (unpack_from at header + offset)."""
        return struct.Struct((">" if big else "<") + dict(self.fields)[name])

    def unpack(self, buf: bytes, at: int = 0, big: bool = False) -> dict[str, int]:
        """The header at `at` in `buf`, by field name."""
        return dict(zip(self._offsets, self._structs[big].unpack_from(buf, at)))

    def pack(self, big: bool = False, **values: int) -> bytes:
        """The header with the given field values (every field named)."""
        return self._structs[big].pack(*(values[name] for name, _ in self.fields))


PCAP_FILE = Layout("pcap file header", (
    ("magic", "I"), ("major", "H"), ("minor", "H"), ("thiszone", "i"), ("sigfigs", "I"),
    ("snaplen", "I"), ("network", "I")))
PCAP_RECORD = Layout("pcap record header", (
    ("ts_sec", "I"), ("ts_frac", "I"), ("caplen", "I"), ("wirelen", "I")))

BLOCK = Layout("pcapng block header", (("type", "I"), ("length", "I")))
TRAILER = Layout("pcapng block trailer", (("length", "I"),))  # the block length again
SHB = Layout("pcapng section header block", (
    *BLOCK.fields, ("bom", "I"), ("major", "H"), ("minor", "H"), ("section_length", "q")))
IDB = Layout("pcapng interface description block", (
    *BLOCK.fields, ("linktype", "H"), ("reserved", "H"), ("snaplen", "I")))
# Enhanced and obsolete Packet Blocks share one layout (a PB's first word holds the
# interface id in 16 bits and a drop count in the other 16); a Simple Packet Block has only
# the original length. The packet bytes follow each header.
EPB = Layout("pcapng enhanced packet block", (
    *BLOCK.fields, ("ifid", "I"), ("ts_hi", "I"), ("ts_lo", "I"), ("caplen", "I"),
    ("origlen", "I")))
PB = Layout("pcapng packet block", (
    *BLOCK.fields, ("ifid_drops", "I"), ("ts_hi", "I"), ("ts_lo", "I"), ("caplen", "I"),
    ("origlen", "I")))
SPB = Layout("pcapng simple packet block", (*BLOCK.fields, ("origlen", "I")))
OPTION = Layout("pcapng option", (("code", "H"), ("length", "H")))  # value padded to 4 bytes
TSOFFSET = Layout("pcapng if_tsoffset value", (("seconds", "q"),))

# link-layer headers (by LINKTYPE_*); the network header follows each
ETHERNET = Layout("Ethernet header", (("dst", "6s"), ("src", "6s"), ("ethertype", "H")))
VLAN_TAG = Layout("802.1Q tag after its TPID", (("tci", "H"), ("ethertype", "H")))
SLL = Layout("Linux cooked header", (
    ("packet_type", "H"), ("arphrd", "H"), ("addr_len", "H"), ("addr", "8s"), ("protocol", "H")))
SLL2 = Layout("Linux cooked v2 header", (
    ("protocol", "H"), ("reserved", "H"), ("ifindex", "I"), ("arphrd", "H"),
    ("packet_type", "B"), ("addr_len", "B"), ("addr", "8s")))
LOOPBACK = Layout("BSD loopback header", (("family", "I"),))  # NULL: host order; LOOP: big
HDLC = Layout("HDLC header", (("address", "B"), ("control", "B"), ("protocol", "H")))
NFLOG = Layout("NFLOG header", (("family", "B"), ("version", "B"), ("resource_id", "H")))
NFLOG_TLV = Layout("NFLOG TLV", (("length", "H"), ("type", "H")))  # value padded to 4 bytes
# capture headers in front of another link layer (little-endian; lengths include them)
PKTAP = Layout("PKTAP header", (("length", "I"), ("record_type", "I"), ("dlt", "I")))
RADIOTAP = Layout("radiotap header", (
    ("version", "B"), ("pad", "B"), ("length", "H"), ("present", "I")))
PPI = Layout("PPI header", (("version", "B"), ("flags", "B"), ("length", "H"), ("dlt", "I")))
PRISM = Layout("Prism header", (("code", "I"), ("length", "I")))  # AVS: the same, big-endian
WLAN = Layout("802.11 MAC header", (
    ("fc", "H"), ("duration", "H"), ("addr1", "6s"), ("addr2", "6s"), ("addr3", "6s"),
    ("seq_ctl", "H")))  # then addr4 (6) with both DS bits, QoS (2), HT control (4)
LLC_SNAP = Layout("LLC/SNAP header", (
    ("dsap", "B"), ("ssap", "B"), ("control", "B"), ("oui", "3s"), ("ethertype", "H")))

# the network, transport and tunnel headers the decoders and tunnel peelers read (decode.py,
# encap.py; _decode.c)
IPV4 = Layout("IPv4 header", (
    ("version_ihl", "B"), ("tos", "B"), ("total_length", "H"), ("id", "H"),
    ("fragment", "H"), ("ttl", "B"), ("protocol", "B"), ("checksum", "H"), ("src", "4s"),
    ("dst", "4s")))  # options to 4 * ihl bytes
IPV6 = Layout("IPv6 header", (
    ("version_class_flow", "I"), ("payload_length", "H"), ("next_header", "B"),
    ("hop_limit", "B"), ("src", "16s"), ("dst", "16s")))
UDP = Layout("UDP header", (("sport", "H"), ("dport", "H"), ("length", "H"), ("checksum", "H")))
TCP = Layout("TCP header", (
    ("sport", "H"), ("dport", "H"), ("seq", "I"), ("ack", "I"), ("offset_flags", "H"),
    ("window", "H"), ("checksum", "H"), ("urgent", "H")))  # options to 4 * data offset bytes
GRE_HEADER = Layout("GRE header", (("flags_version", "H"), ("protocol", "H")))  # then optional words
GRE_WORD = 4  # each optional GRE word (checksum and reserved, key, sequence number)
MPLS_LABEL = Layout("MPLS label stack entry", (("label", "H"), ("label_tc_bos", "B"), ("ttl", "B")))
PW_CONTROL_WORD = 4  # an Ethernet pseudowire's control word, after the bottom label
PPPOE_HEADER = Layout("PPPoE session header", (
    ("version_type", "B"), ("code", "B"), ("session", "H"), ("length", "H"),
    ("ppp_protocol", "H")))
VXLAN_HEADER = Layout("VXLAN header", (
    ("flags", "B"), ("reserved", "3s"), ("vni", "3s"), ("reserved2", "B")))
GENEVE_HEADER = Layout("GENEVE header", (
    ("version_optlen", "B"), ("flags", "B"), ("protocol", "H"), ("vni", "3s"),
    ("reserved", "B")))  # then 4 * optlen bytes of options
ERSPAN2 = Layout("ERSPAN type II header", (
    ("version_vlan", "H"), ("session", "H"), ("index", "I")))
ERSPAN3 = Layout("ERSPAN type III header", (
    ("version_vlan", "H"), ("session", "H"), ("timestamp", "I"), ("sgt", "H"),
    ("flags", "H")))  # then an 8-byte platform subheader when the O flag (bit 0) is set
ERSPAN3_SUBHEADER = 8
