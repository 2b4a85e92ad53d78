"""The byte layouts declared once: they agree with dpkt's declarations of the same headers,
and a header packed from them reads back field by field in either byte order."""

from __future__ import annotations

import struct

import pytest

from nagleprobe import layouts
from nagleprobe.read import formats

pytest.importorskip("dpkt")
from dpkt import (  # after the skip
    ethernet,
    gre,
    ip,
    ip6,
    loopback,
    pcap,
    pcapng,
    pppoe,
    sll,
    sll2,
    tcp,
    udp,
)


def dpkt_codes(hdr) -> list[str]:
    """A dpkt __hdr__'s struct codes, without pcapng's trailing length copy, signedness aside
    (dpkt reads pcap's thiszone unsigned, SLL2's ifindex signed)."""
    return [code.upper() for name, code, _ in hdr if name != "_len"]


@pytest.mark.parametrize("ours, theirs", [
    (layouts.PCAP_FILE, pcap.FileHdr),
    (layouts.PCAP_RECORD, pcap.PktHdr),
    (layouts.SHB, pcapng.SectionHeaderBlockLE),
    (layouts.IDB, pcapng.InterfaceDescriptionBlockLE),
    (layouts.EPB, pcapng.EnhancedPacketBlockLE),
    (layouts.OPTION, pcapng.PcapngOptionLE),
    (layouts.SLL, sll.SLL),
    (layouts.SLL2, sll2.SLL2),
    (layouts.ETHERNET, ethernet.Ethernet),
    (layouts.LOOPBACK, loopback.Loopback),
    (layouts.IPV4, ip.IP),
    (layouts.IPV6, ip6.IP6),
    (layouts.UDP, udp.UDP),
    (layouts.TCP, tcp.TCP),
    (layouts.GRE_HEADER, gre.GRE),
], ids=lambda x: getattr(x, "name", None) or x.__name__)
def test_each_layout_has_dpkts_fields_in_dpkts_order(ours, theirs):
    assert [code.upper() for _, code in ours.fields] == dpkt_codes(theirs.__hdr__)


def test_the_pppoe_header_is_dpkts_and_the_ppp_protocol_after_it():
    codes = [code for _, code in layouts.PPPOE_HEADER.fields]
    assert codes[:-1] == dpkt_codes(pppoe.PPPoE.__hdr__) and codes[-1] == "H"


def test_the_magic_numbers_are_dpkts():
    assert layouts.PCAP_US == pcap.TCPDUMP_MAGIC
    assert layouts.PCAP_NS == pcap.TCPDUMP_MAGIC_NANO
    assert layouts.PCAP_KUZNETSOV == pcap.MODPCAP_MAGIC
    assert layouts.BT_SHB == pcapng.PCAPNG_BT_SHB
    assert layouts.PCAPNG_BOM == pcapng.BYTE_ORDER_MAGIC
    assert (layouts.BT_IDB, layouts.BT_EPB, layouts.BT_SPB) == (
        pcapng.PCAPNG_BT_IDB, pcapng.PCAPNG_BT_EPB, pcapng.PCAPNG_BT_SPB)
    assert (layouts.OPT_END, layouts.OPT_COMMENT, layouts.SHB_USERAPPL, layouts.IF_TSRESOL,
            layouts.IF_TSOFFSET) == (
        pcapng.PCAPNG_OPT_ENDOFOPT, pcapng.PCAPNG_OPT_COMMENT,
        pcapng.PCAPNG_OPT_SHB_USERAPPL, pcapng.PCAPNG_OPT_IF_TSRESOL,
        pcapng.PCAPNG_OPT_IF_TSOFFSET)


def test_sizes_and_offsets_are_the_specifications():
    assert (layouts.PCAP_FILE.size, layouts.PCAP_RECORD.size) == (24, 16)
    assert layouts.PCAP_RECORD.offset("caplen") == 8
    assert layouts.PCAP_FILE.offset("network") == 20
    assert (layouts.SHB.size, layouts.IDB.size, layouts.EPB.size, layouts.SPB.size) == (
        24, 16, 28, 12)
    assert layouts.SHB.offset("bom") == 8 and layouts.SHB.offset("section_length") == 16
    assert layouts.EPB.offset("caplen") == layouts.PB.offset("caplen") == 20
    assert (layouts.ETHERNET.size, layouts.ETHERNET.offset("ethertype")) == (14, 12)
    assert (layouts.SLL.size, layouts.SLL.offset("protocol")) == (16, 14)
    assert (layouts.SLL2.size, layouts.SLL2.offset("protocol")) == (20, 0)


def test_word_indexes_fields_in_word_views_and_refuses_unaligned_ones():
    assert layouts.TCP.word("seq", 4) == 1 and layouts.TCP.word("window", 2) == 7
    assert layouts.IPV6.word("dst", 8) == 3
    with pytest.raises(ValueError, match="aligned"):
        layouts.IPV4.word("protocol", 2)


@pytest.mark.parametrize("big", [False, True])
def test_a_packed_header_unpacks_to_its_fields(big):
    values = {"type": layouts.BT_EPB, "length": 40, "ifid": 3, "ts_hi": 7, "ts_lo": 9,
              "caplen": 5, "origlen": 6}
    raw = layouts.EPB.pack(big, **values)
    assert len(raw) == layouts.EPB.size
    assert layouts.EPB.unpack(b"xx" + raw, 2, big) == values
    assert raw[:4] == layouts.BT_EPB.to_bytes(4, "big" if big else "little")
    assert layouts.EPB.field_struct("caplen", big).unpack_from(
        raw, layouts.EPB.offset("caplen")) == (5,)
    with pytest.raises(KeyError):
        layouts.EPB.pack(big, type=1)
    with pytest.raises(struct.error):
        layouts.EPB.unpack(raw[:-1], 0, big)


def test_the_readers_packet_blocks_come_from_the_layouts():
    for bt, layout in ((layouts.BT_EPB, layouts.EPB), (layouts.BT_PB, layouts.PB),
                       (layouts.BT_SPB, layouts.SPB)):
        block = formats.PACKET_BLOCKS[bt]
        assert block.data == layout.size
        assert block.fields == layouts.BLOCK.size
        assert block.words == tuple(name for name, _ in layout.fields[2:])
    assert formats.MIN_SHB_LEN == 28 and formats.MIN_BLOCK_LEN == 12
