"""Tunnels (nagleprobe/encap.py): the stalls found inside a tunnel are those of the same
traffic seen plain, and each flow says through which tunnel it was seen.

Real: samples/vxlan_underlay.pcap and vxlan_overlay.pcap, one run of kernel VXLAN between two
namespaces captured on the underlay and on the VXLAN device (samples/make_vxlan.py).
Synthetic (labelled): the packets of the real capture confirm_netns_client.pcap re-wrapped
with scapy in every other encapsulation, each file checked against tshark's dissection.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nagleprobe
from nagleprobe import encap
from nagleprobe.decode import decode, decode_numpy, format_address
from nagleprobe.read import CaptureReader

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.erspan import ERSPAN, ERSPAN_II, ERSPAN_III, ERSPAN_PlatformSpecific  # noqa: E402
from scapy.contrib.mpls import MPLS  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import GRE, Dot1Q, Ether  # noqa: E402
from scapy.layers.ppp import PPP, PPPoE  # noqa: E402
from scapy.layers.vxlan import VXLAN  # noqa: E402
from scapy.packet import Raw  # noqa: E402
from scapy.utils import PcapReader, PcapWriter  # noqa: E402
from oracle import analyze_whole

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
PLAIN = SAMPLES / "confirm_netns_client.pcap"  # real: 10.99.1.1:40010 <-> 10.99.1.2:8000
CLIENT = "10.99.1.1"
VTEP = ("192.0.2.1", "192.0.2.2")
VTEP6 = ("2001:db8::1", "2001:db8::2")
TSHARK = shutil.which("tshark")


def geneve(vni: int, proto: int) -> bytes:
    """GENEVE header with one 8-byte option (class 0x0102, type 0x80, 4 bytes of data)."""
    opt = bytes([0x01, 0x02, 0x80, 0x01, 0xDE, 0xAD, 0xBE, 0xEF])
    return bytes([len(opt) // 4, 0, proto >> 8, proto & 0xFF]) + vni.to_bytes(3, "big") + b"\0" + opt


def outer(fwd: bool):
    a, b = VTEP if fwd else VTEP[::-1]
    return IP(src=a, dst=b)


def outer6(fwd: bool):
    a, b = VTEP6 if fwd else VTEP6[::-1]
    return IPv6(src=a, dst=b)


def mac():
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


# name -> (wrap(inner Ethernet frame, inner IP packet, forward?, index) -> outer frame,
#          expected tunnel layers as nagleprobe describes them, tshark field with the id)
WRAPS = {
    "vxlan": (lambda e, ip, fwd, i: mac() / outer(fwd) / UDP(sport=50000 + fwd, dport=4789)
              / VXLAN(vni=7) / e,
              [{"kind": "vxlan", "outer": list(VTEP), "vni": 7}], "vxlan.vni", "7"),
    "vxlan_in_vlan": (lambda e, ip, fwd, i: mac() / Dot1Q(vlan=10) / outer(fwd)
                      / UDP(sport=40000, dport=4789) / VXLAN(vni=4097) / e,
                      [{"kind": "vxlan", "outer": list(VTEP), "vni": 4097}], "vxlan.vni", "4097"),
    "geneve_options": (lambda e, ip, fwd, i: mac() / outer6(fwd) / UDP(sport=1234, dport=6081)
                       / Raw(geneve(99, 0x6558)) / e,
                       [{"kind": "geneve", "outer": list(VTEP6), "vni": 99}], "geneve.vni", "99"),
    "geneve_ip": (lambda e, ip, fwd, i: mac() / outer(fwd) / UDP(sport=1234, dport=6081)
                  / Raw(geneve(5, 0x0800)) / ip,
                  [{"kind": "geneve", "outer": list(VTEP), "vni": 5}], "geneve.vni", "5"),
    "gre_key_seq": (lambda e, ip, fwd, i: mac() / outer(fwd)
                    / GRE(key_present=1, key=1234, seqnum_present=1, sequence_number=i) / ip,
                    [{"kind": "gre", "outer": list(VTEP), "key": 1234}], "gre.key", "1234"),
    "gre_teb_checksum": (lambda e, ip, fwd, i: mac() / outer(fwd)
                         / GRE(chksum_present=1, proto=0x6558) / e,
                         [{"kind": "gre", "outer": list(VTEP)}], "gre.proto", "0x6558"),
    "erspan_1": (lambda e, ip, fwd, i: mac() / outer(fwd) / GRE(proto=0x88BE) / ERSPAN() / e,
                 [{"kind": "gre", "outer": list(VTEP)}, {"kind": "erspan", "outer": None,
                                                          "session": 0}], None, None),
    "erspan_2": (lambda e, ip, fwd, i: mac() / outer(fwd)
                 / GRE(seqnum_present=1, sequence_number=i, proto=0x88BE)
                 / ERSPAN_II(session_id=300) / e,
                 [{"kind": "gre", "outer": list(VTEP)}, {"kind": "erspan", "outer": None,
                                                          "session": 300}], "erspan.spanid", "300"),
    "erspan_3_platform": (lambda e, ip, fwd, i: mac() / outer(fwd)
                          / GRE(seqnum_present=1, sequence_number=i, proto=0x22EB)
                          / ERSPAN_III(session_id=1000, o=1) / ERSPAN_PlatformSpecific() / e,
                          [{"kind": "gre", "outer": list(VTEP)},
                           {"kind": "erspan", "outer": None, "session": 1000}],
                          "erspan.spanid", "1000"),
    "ipip": (lambda e, ip, fwd, i: mac() / outer(fwd) / ip,
             [{"kind": "ip-in-ip", "outer": list(VTEP)}], None, None),
    "ip_in_ipv6": (lambda e, ip, fwd, i: mac() / outer6(fwd) / ip,
                   [{"kind": "ip-in-ip", "outer": list(VTEP6)}], None, None),
    "mpls_stack": (lambda e, ip, fwd, i: mac() / MPLS(label=100 + fwd, s=0) / MPLS(label=16, s=1)
                   / ip, [{"kind": "mpls", "outer": None}], "mpls.label", "16"),
    "mpls_in_gre": (lambda e, ip, fwd, i: mac() / outer(fwd) / GRE(proto=0x8847)
                    / MPLS(label=16, s=1) / ip,
                    [{"kind": "gre", "outer": list(VTEP)}, {"kind": "mpls", "outer": None}],
                    "mpls.label", "16"),
    "pppoe": (lambda e, ip, fwd, i: mac() / PPPoE(sessionid=0x1234) / PPP(proto=0x0021) / ip,
              [{"kind": "pppoe", "outer": None, "session": 0x1234}], "pppoe.session_id",
              "0x1234"),
}


def inner_packets():
    with PcapReader(str(PLAIN)) as r:
        return [(bytes(p), p[IP], p.time) for p in r]


def write_wrapped(name: str, path: Path, packets=None) -> Path:
    """Synthetic: the real capture's frames inside `name`'s encapsulation, same times."""
    wrap = WRAPS[name][0]
    with PcapWriter(str(path), linktype=1, nano=True) as w:
        for i, (eth, ip, t) in enumerate(packets or inner_packets()):
            p = wrap(Ether(eth), ip.copy(), ip.src == CLIENT, i)
            p.time = t
            w.write(p)
    return path


def stall_rows(doc: dict) -> list:
    return [(s["frames"], s["times"], s["delay_ms"], s["endpoint"]) for s in doc["stalls"]]


@pytest.fixture(scope="module")
def plain_doc():
    return nagleprobe.analyze(str(PLAIN)).to_dict()


# ---------------------------------------------------------------------- real VXLAN
def test_real_vxlan_underlay_has_the_stalls_of_the_overlay_capture_of_the_same_run():
    under = nagleprobe.analyze(str(SAMPLES / "vxlan_underlay.pcap")).to_dict()
    over = nagleprobe.analyze(str(SAMPLES / "vxlan_overlay.pcap")).to_dict()
    assert over["summary"]["stalls"] == 19  # ground truth: vxlan_overlay.expected.json
    assert under["summary"]["stalls"] == over["summary"]["stalls"]
    assert [s["frames"] for s in under["stalls"]] == [s["frames"] for s in over["stalls"]]
    # the same segments, a few microseconds apart (captured at two points of one host)
    assert [f["client"] for f in under["flows"]] == [f["client"] for f in over["flows"]]
    assert under["capture"]["skipped"] == {} and under["capture"]["tcp_packets"] == 107
    assert over["flows"][0]["tunnel"] is None
    t = under["flows"][0]["tunnel"]
    assert t["layers"] == [{"kind": "vxlan", "outer": ["10.99.7.1", "10.99.7.2"], "vni": 42}]
    assert under["capture"]["tunnels"] == [t]
    text = nagleprobe.analyze(str(SAMPLES / "vxlan_underlay.pcap")).to_text()
    assert "seen through tunnel 1: vxlan 10.99.7.1<->10.99.7.2 vni 42" in text


# ---------------------------------------------------------------------- synthetic wraps
@pytest.mark.parametrize("name", WRAPS)
def test_rewrapped_capture_has_the_plain_captures_stalls_and_names_its_tunnel(name, tmp_path,
                                                                            plain_doc):
    """Synthetic (scapy re-wrapping of a real capture)."""
    doc = nagleprobe.analyze(str(write_wrapped(name, tmp_path / f"{name}.pcap"))).to_dict()
    assert doc["capture"]["skipped"] == {}
    assert doc["summary"] == plain_doc["summary"]
    assert stall_rows(doc) == stall_rows(plain_doc)
    assert [(f["client"], f["server"], f["roles"]) for f in doc["flows"]] == \
        [(f["client"], f["server"], f["roles"]) for f in plain_doc["flows"]]
    assert [f["tunnel"]["layers"] for f in doc["flows"]] == [WRAPS[name][1]]


def tshark_fields(path: Path, *fields: str) -> list[list[str]]:
    cmd = [TSHARK, "-n", "-r", str(path), "-T", "fields", "-E", "occurrence=l"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
@pytest.mark.parametrize("name", WRAPS)
def test_rewrapped_capture_decodes_as_tshark_dissects_it(name, tmp_path):
    """Synthetic: per frame, the innermost addresses, ports and raw sequence numbers, and the
    tunnel id, as tshark reads them from the same file."""
    path = write_wrapped(name, tmp_path / f"{name}.pcap")
    field = WRAPS[name][2]
    rows = tshark_fields(path, "frame.number", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport",
                         "tcp.seq_raw", "tcp.ack_raw", "tcp.len", *([field] if field else []))
    skipped = collections.Counter()
    cols = {k: np.concatenate([b[k] for b in [decode(x, skipped) for x in CaptureReader(str(path))]])
            for k in ("frame", "ipver", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport",
                      "seq", "ack", "payload", "tunnel")}
    assert len(rows) == len(cols["frame"]) and not skipped
    ours = [[str(f), format_address(v, sh, sl), format_address(v, dh, dl), str(sp), str(dp),
             str(s), str(a), str(p)]
            for f, v, sh, sl, dh, dl, sp, dp, s, a, p in zip(*(cols[k].tolist() for k in (
                "frame", "ipver", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport",
                "seq", "ack", "payload")))]
    assert [r[:8] for r in rows] == ours
    assert set(cols["tunnel"].tolist()) == {1}
    if field:
        assert {int(r[8], 0) for r in rows} == {int(WRAPS[name][3], 0)}


def test_the_same_inner_connection_in_two_tunnels_is_two_flows(tmp_path, plain_doc):
    """Synthetic: the real capture twice in one file, in VXLAN VNI 7 and VNI 8."""
    pk = inner_packets()
    path = tmp_path / "two.pcap"
    with PcapWriter(str(path), linktype=1, nano=True) as w:
        for eth, ip, t in pk:
            for vni in (7, 8):
                p = mac() / outer(ip.src == CLIENT) / UDP(dport=4789) / VXLAN(vni=vni) / Ether(eth)
                p.time = t
                w.write(p)
    doc = nagleprobe.analyze(str(path)).to_dict()
    assert len(doc["flows"]) == 2
    assert [f["tunnel"]["layers"][0]["vni"] for f in doc["flows"]] == [7, 8]
    assert [f["stalls"] for f in doc["flows"]] == [plain_doc["summary"]["stalls"]] * 2
    assert doc["capture"]["skipped"] == {}  # not duplicates: different tunnels
    streamed = analyze_whole(str(path)).to_dict()
    assert streamed["flows"] == doc["flows"]


# ---------------------------------------------------------------------- lies and loops
def frames(path: Path, pkts) -> Path:
    with PcapWriter(str(path), linktype=1) as w:
        for p in pkts:
            w.write(p)
    return path


def test_a_loop_of_tunnels_is_skipped_as_too_deep_not_a_hang(tmp_path):
    inner = IP(src="10.0.0.1", dst="10.0.0.2") / scapy_all.TCP(sport=1, dport=2)
    p = inner
    for _ in range(encap.MAX_DEPTH + 2):
        p = IP(src="192.0.2.1", dst="192.0.2.2") / GRE() / p
    labels = MPLS(label=1, s=0)
    for _ in range(encap.MAX_MPLS_LABELS):
        labels = labels / MPLS(label=1, s=0)
    path = frames(tmp_path / "loop.pcap", [mac() / p, mac() / labels / inner])
    doc = nagleprobe.analyze(str(path)).to_dict()
    assert doc["capture"]["skipped"] == {"encap-too-deep": 2}


def test_a_header_lying_about_its_length_is_skipped_with_its_reason(tmp_path):
    tcp = IP(src="10.0.0.1", dst="10.0.0.2") / scapy_all.TCP(sport=1, dport=2)
    lying = bytearray(geneve(1, 0x0800))
    lying[0] = 0x3F  # 252 bytes of options, more than the packet holds
    pkts = [mac() / outer(True) / UDP(dport=6081) / Raw(bytes(lying)) / tcp,
            mac() / outer(True) / UDP(dport=4789, len=12) / VXLAN() / mac() / tcp]
    doc = nagleprobe.analyze(str(frames(tmp_path / "lie.pcap", pkts))).to_dict()
    assert doc["capture"]["skipped"] == {"encap-bad-length": 2}


# ---------------------------------------------------------------------- C == reference
def all_batches(paths):
    for p in paths:
        yield from CaptureReader(str(p))


def test_compiled_peel_equals_the_reference_on_every_wrap(tmp_path):
    paths = [write_wrapped(n, tmp_path / f"{n}.pcap") for n in WRAPS]
    paths += [SAMPLES / "vxlan_underlay.pcap", SAMPLES / "vxlan_overlay.pcap", PLAIN]
    for b in all_batches(paths):
        got = encap.peel(b.data, b.offset, b.caplen, b.linktype)
        want = encap.peel_numpy(b.data, b.offset, b.caplen, b.linktype)
        for x, y in zip(got, want, strict=True):
            assert np.array_equal(x, y)
        a, c = collections.Counter(), collections.Counter()
        d1, d2 = decode(b, a), decode_numpy(b, c)
        assert a == c
        for k in d1:
            assert np.array_equal(d1[k], d2[k]), k


WRAPPED_BYTES = None


def wrapped_frames() -> list[bytes]:
    global WRAPPED_BYTES
    if WRAPPED_BYTES is None:
        eth, ip, _ = inner_packets()[3]
        WRAPPED_BYTES = [bytes(w(Ether(eth), ip.copy(), True, 0)) for w, *_ in WRAPS.values()]
    return WRAPPED_BYTES


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(WRAPS) - 1), cut=st.integers(0, 200),
       flips=st.lists(st.tuples(st.integers(0, 199), st.integers(0, 255)), max_size=4))
def test_compiled_peel_equals_the_reference_on_cut_and_damaged_records(which, cut, flips):
    """Synthetic: wrapped frames cut short and with bytes overwritten."""
    b = bytearray(wrapped_frames()[which])
    for i, v in flips:
        if i < len(b):
            b[i] = v
    b = bytes(b[:cut] if cut < len(b) else b)
    data = np.frombuffer(b + b"\0" * 8, np.uint8)
    args = (data, np.array([0], np.int64), np.array([len(b)], np.int64), np.array([1], np.int32))
    got, want = encap.peel(*args), encap.peel_numpy(*args)
    for x, y in zip(got, want, strict=True):
        assert np.array_equal(x, y)


def test_tunnels_keep_their_numbers_across_the_files_of_a_set(tmp_path, plain_doc):
    """Synthetic: the real capture in VNI 8 in one file and in VNI 7 in another, read as one
    set: two tunnels, two flows, each tunnel named once (the files number them as one)."""
    pk = inner_packets()
    paths = []
    for vni in (8, 7):
        path = tmp_path / f"vni{vni}.pcap"
        with PcapWriter(str(path), linktype=1, nano=True) as w:
            for eth, ip, t in pk:
                p = mac() / outer(ip.src == CLIENT) / UDP(dport=4789) / VXLAN(vni=vni) / Ether(eth)
                p.time = t
                w.write(p)
        paths.append(str(path))
    doc = nagleprobe.analyze(paths).to_dict()
    assert [t["layers"][0]["vni"] for t in doc["capture"]["tunnels"]] == [8, 7]
    assert sorted(f["tunnel"]["layers"][0]["vni"] for f in doc["flows"]) == [7, 8]
    assert [f["stalls"] for f in doc["flows"]] == [plain_doc["summary"]["stalls"]] * 2
