"""More link types (decode.py `_LINK`): PPP, PPP in HDLC framing, Cisco HDLC, NFLOG, PKTAP,
IEEE 802.11 bare and under radiotap, PPI and Prism headers.

Synthetic (labelled): the IP packets of the real capture confirm_netns_client.pcap re-framed
with scapy in each link type, in pcap and in one pcapng with an interface of each type; every
file is checked against tshark's dissection of it, and the stalls against the plain capture's.
"""

from __future__ import annotations

import collections
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import nagleprobe
from nagleprobe.decode import decode, decode_numpy, format_address
from nagleprobe.read import CaptureReader

pytest.importorskip("scapy.all")
from scapy.layers.dot11 import Dot11, Dot11QoS, RadioTap  # noqa: E402
from scapy.layers.inet import IP  # noqa: E402
from scapy.layers.l2 import LLC, SNAP  # noqa: E402
from scapy.utils import PcapReader  # noqa: E402

from capgen import Iface, Section, pcap_bytes, pcapng_bytes, write  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
PLAIN = SAMPLES / "confirm_netns_client.pcap"  # real: 10.99.1.1:40010 <-> 10.99.1.2:8000
TSHARK = shutil.which("tshark")
ETH_HDR = bytes.fromhex("020000000002020000000001") + b"\x08\x00"


def nflog(ip: bytes) -> bytes:
    """NFLOG: family AF_INET, version 0, resource id; a prefix TLV, then the payload TLV
    (little-endian length/type, padded to 4 bytes)."""
    def tlv(t: int, v: bytes) -> bytes:
        b = struct.pack("<HH", 4 + len(v), t) + v
        return b + b"\0" * (-len(b) % 4)
    return bytes([2, 0, 0, 1]) + tlv(10, b"nagle\0") + tlv(9, ip)


def pktap(inner_dlt: int, frame: bytes) -> bytes:
    """PKTAP: a 108-byte header (length, record type 1 = packet, the inner link type,
    little-endian)."""
    hdr = struct.pack("<III", 108, 1, inner_dlt) + b"\0" * 96
    return hdr + frame


def dot11(ip: bytes, qos: bool = False) -> bytes:
    """An unprotected 802.11 data frame (to the AP), LLC/SNAP, IPv4."""
    mac = (Dot11(type=2, subtype=8, FCfield=0x01, addr1="02:00:00:00:00:aa",
                 addr2="02:00:00:00:00:01", addr3="02:00:00:00:00:02") / Dot11QoS()
           if qos else Dot11(type=2, subtype=0, FCfield=0x01, addr1="02:00:00:00:00:aa",
                             addr2="02:00:00:00:00:01", addr3="02:00:00:00:00:02"))
    return bytes(mac / LLC(dsap=0xAA, ssap=0xAA, ctrl=3) / SNAP(OUI=0, code=0x0800)) + ip


def ppi(frame: bytes) -> bytes:
    return struct.pack("<BBHI", 0, 0, 8, 105) + frame


def prism(frame: bytes) -> bytes:
    """Prism monitor header: msgcode, msglen 144, device name, then DIDs (zeros here)."""
    return struct.pack("<II", 0x44, 144) + b"wlan0".ljust(16, b"\0") + b"\0" * 120 + frame


# name -> (link type, re-frame(IP packet bytes) -> record bytes, tshark's name of the frame)
FRAMINGS = {
    "ppp": (9, lambda ip: b"\xff\x03\x00\x21" + ip),
    "ppp_unframed": (9, lambda ip: b"\x00\x21" + ip),
    "ppp_hdlc": (50, lambda ip: b"\xff\x03\x00\x21" + ip),
    "ppp_hdlc_cisco": (50, lambda ip: b"\x0f\x00\x08\x00" + ip),
    "c_hdlc": (104, lambda ip: b"\x0f\x00\x08\x00" + ip),
    "nflog": (239, nflog),
    "pktap": (258, lambda ip: pktap(1, ETH_HDR + ip)),
    "pktap_macos_149": (149, lambda ip: pktap(1, ETH_HDR + ip)),
    "ieee802_11": (105, lambda ip: dot11(ip)),
    "radiotap_qos": (127, lambda ip: bytes(RadioTap()) + dot11(ip, qos=True)),
    "ppi": (192, lambda ip: ppi(dot11(ip))),
    "prism": (119, lambda ip: prism(dot11(ip))),
}


def ip_packets() -> list[tuple[bytes, float]]:
    with PcapReader(str(PLAIN)) as r:
        return [(bytes(p[IP]), p.time) for p in r]


def write_framed(name: str, path: Path) -> Path:
    lt, frame = FRAMINGS[name]
    recs = [(int(round(t * 1e9)), f, len(f)) for f in [None] for ip, t in ip_packets()
            for f in [frame(ip)]]
    return write(path, pcap_bytes(recs, lt, nsec=True))


@pytest.fixture(scope="module")
def plain_doc():
    return nagleprobe.analyze(str(PLAIN)).to_dict()


def stalls(doc):
    return [(s["frames"], s["times"], s["delay_ms"], s["endpoint"]) for s in doc["stalls"]]


@pytest.mark.parametrize("name", FRAMINGS)
def test_reframed_capture_has_the_plain_captures_stalls(name, tmp_path, plain_doc):
    """Synthetic (re-framed real packets)."""
    doc = nagleprobe.analyze(str(write_framed(name, tmp_path / f"{name}.pcap"))).to_dict()
    assert doc["capture"]["skipped"] == {}
    assert doc["capture"]["tcp_packets"] == plain_doc["capture"]["tcp_packets"]
    assert stalls(doc) == stalls(plain_doc)
    assert [(f["client"], f["server"], f["roles"]) for f in doc["flows"]] == \
        [(f["client"], f["server"], f["roles"]) for f in plain_doc["flows"]]


def columns(path: Path, decoder=decode):
    skipped = collections.Counter()
    parts = [decoder(b, skipped) for b in CaptureReader(str(path))]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, skipped


# Wireshark reads link type 149 as USER2, not as the PKTAP macOS writes there
TSHARK_READS = [n for n in FRAMINGS if FRAMINGS[n][0] != 149]


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
@pytest.mark.parametrize("name", TSHARK_READS)
def test_reframed_capture_decodes_as_tshark_dissects_it(name, tmp_path):
    path = write_framed(name, tmp_path / f"{name}.pcap")
    out = subprocess.run([TSHARK, "-n", "-r", str(path), "-T", "fields", "-E", "occurrence=l",
                          "-e", "ip.src", "-e", "ip.dst", "-e", "tcp.srcport", "-e",
                          "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    cols, skipped = columns(path)
    assert not skipped
    ours = [[format_address(v, sh, sl), format_address(v, dh, dl), str(sp), str(dp), str(s),
             str(p)] for v, sh, sl, dh, dl, sp, dp, s, p in zip(*(cols[k].tolist() for k in (
                 "ipver", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport", "seq",
                 "payload")))]
    assert rows == ours
    ref, ref_skipped = columns(path, decode_numpy)
    assert ref_skipped == skipped
    for k in cols:
        assert np.array_equal(cols[k], ref[k]), k


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_one_pcapng_with_an_interface_of_each_link_type(tmp_path, plain_doc):
    """Synthetic: packet i of the real capture on interface i % 11, each interface of
    another link type; tshark and nagleprobe read the same packets, stalls unchanged."""
    names = TSHARK_READS
    ifaces = [Iface(FRAMINGS[n][0], tsresol=9) for n in names]
    recs = []
    for i, (ip, t) in enumerate(ip_packets()):
        j = i % len(names)
        frame = FRAMINGS[names[j]][1](ip)
        recs.append(("epb", j, int(round(t * 1e9)), frame, len(frame)))
    path = write(tmp_path / "mixed.pcapng", pcapng_bytes([Section(ifaces, records=recs)]))
    doc = nagleprobe.analyze(str(path)).to_dict()
    assert doc["capture"]["skipped"] == {}
    assert stalls(doc) == stalls(plain_doc)
    out = subprocess.run([TSHARK, "-n", "-r", str(path), "-T", "fields", "-E", "occurrence=l",
                          "-e", "tcp.seq_raw"], capture_output=True, text=True, check=True).stdout
    cols, _ = columns(path)
    assert out.split() == [str(s) for s in cols["seq"].tolist()]


def test_encrypted_and_non_data_80211_frames_are_skipped_with_reasons(tmp_path):
    ip = ip_packets()[3][0]
    protected = bytearray(dot11(ip))
    protected[1] |= 0x40
    beacon = bytes(Dot11(type=0, subtype=8, addr1="ff:ff:ff:ff:ff:ff")) + b"\0" * 40
    write(tmp_path / "w.pcap", pcap_bytes([(10**9 * (i + 1), b, len(b)) for i, b in enumerate(
        (bytes(protected), beacon, dot11(ip)))], 105))
    doc = nagleprobe.analyze(str(tmp_path / "w.pcap")).to_dict()
    assert doc["capture"]["skipped"] == {"encrypted": 1, "not-ip": 1}
    assert doc["capture"]["tcp_packets"] == 1
