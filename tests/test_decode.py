"""Decoder tests on synthetic captures (scapy-crafted packets), cross-checked against dpkt.

Every test runs twice: with the compiled decoder (nagleprobe/_decode.c, for the usual
shapes, numpy for the rest) and with the numpy decoder alone. test_decode_compiled.py
compares the two on real and mutated packets."""

from __future__ import annotations

import socket
import struct
from collections import Counter
from pathlib import Path

import dpkt
import dpkt.sll
import dpkt.sll2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nagleprobe.decode
from capgen import TCP_OPTION_ATOMS, Iface, Section, corpus, pcap_bytes, pcapng_bytes, write
from nagleprobe.decode import TCP_COLUMNS, _tcp_options_rows, decode, format_address
from nagleprobe.read import CaptureReader

CORPUS = corpus()
T0 = 1_700_000_000_123_456_000
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def decoder(request, monkeypatch):
    """Run each test with the compiled decoder and with the numpy decoder alone."""
    if request.param == "numpy":
        monkeypatch.setattr(nagleprobe.decode, "_compiled", None)
    elif nagleprobe.decode._compiled is None:
        pytest.skip("nagleprobe._decode not built (no C compiler at install)")
    return request.param


def run(path, chunk_bytes=32 << 20):
    r = CaptureReader(str(path), chunk_bytes=chunk_bytes)
    skipped = Counter()
    parts = [decode(b, skipped) for b in r]
    cols = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, t)
            for k, t in TCP_COLUMNS.items()}
    skipped.update(r.info.skipped)
    return cols, skipped, r.info


def reference(lt, full):
    """dpkt's view of an (uncut) packet: dict of expected column values."""
    raw = None
    if lt == 1:
        ip = dpkt.ethernet.Ethernet(full).data
    elif lt == 113:
        ip = dpkt.sll.SLL(full).data
    elif lt == 276:
        ip = dpkt.sll2.SLL2(full).data
    else:
        raw = full[4:] if lt in (0, 108) else full
        ip = dpkt.ip.IP(raw) if raw[0] >> 4 == 4 else dpkt.ip6.IP6(raw)
    tcp = ip.data
    assert isinstance(tcp, dpkt.tcp.TCP)
    ver = 4 if isinstance(ip, dpkt.ip.IP) else 6
    opts = {k: v for k, v in dpkt.tcp.parse_opts(tcp.opts)}
    flags = tcp.flags | ((tcp.off_x2 & 1) << 8) if hasattr(tcp, "off_x2") else tcp.flags
    return {"ipver": ver, "src": ip.src, "dst": ip.dst, "sport": tcp.sport, "dport": tcp.dport,
            "seq": tcp.seq, "ack": tcp.ack, "flags": flags, "window": tcp.win,
            "payload": len(tcp.data),
            "mss": struct.unpack(">H", opts[2])[0] if 2 in opts else -1,
            "wscale": opts[3][0] if 3 in opts else -1, "sack_ok": int(4 in opts),
            "tsval": struct.unpack(">I", opts[8][:4])[0] if 8 in opts else 0,
            "has_ts": int(8 in opts), "ipid": ip.id if ver == 4 else 0}


def addr_bytes(ver, hi, lo):
    text = format_address(ver, hi, lo)
    fam = socket.AF_INET if ver == 4 else socket.AF_INET6
    return socket.inet_pton(fam, text)


def check(cols, skipped, entries, frames):
    want_skips = Counter(e[4] for e in entries if e[4])
    assert dict(skipped) == dict(want_skips)
    good = [(f, e) for f, e in zip(frames, entries) if e[4] is None]
    assert list(cols["frame"]) == [f for f, _ in good]
    for i, (f, (lt, full, cap, wire, _)) in enumerate(good):
        got = {k: int(cols[k][i]) for k in TCP_COLUMNS}
        if len(cap) < len(full) and wire > len(full):  # the TSO frame: dpkt can't read len 0
            assert got["payload"] == wire - len(cap)
            continue
        ref = reference(lt, full)
        assert addr_bytes(got["ipver"], got["src_hi"], got["src_lo"]) == ref.pop("src")
        assert addr_bytes(got["ipver"], got["dst_hi"], got["dst_lo"]) == ref.pop("dst")
        for k, v in ref.items():
            assert got[k] == v, (f, k, got[k], v)


def test_synthetic_pcapng_all_link_types_vs_dpkt(tmp_path):
    lts = sorted({e[0] for e in CORPUS})
    ifaces = [Iface(lt, tsresol=9 if j % 2 else 0x94) for j, lt in enumerate(lts)]
    recs = [("epb", lts.index(lt), T0 + i * 1000, cap, wire)
            for i, (lt, full, cap, wire, _) in enumerate(CORPUS)]
    path = write(tmp_path / "all.pcapng", pcapng_bytes([Section(ifaces, records=recs)]))
    cols, skipped, info = run(path)
    check(cols, skipped, CORPUS, range(1, len(CORPUS) + 1))
    assert info.packets == len(CORPUS)
    # dtypes and column order are the contract
    assert list(cols) == list(TCP_COLUMNS)
    assert all(cols[k].dtype == t for k, t in TCP_COLUMNS.items())


@pytest.mark.parametrize("nsec", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_synthetic_pcap_per_link_type_vs_dpkt(tmp_path, nsec, big):
    for lt in sorted({e[0] for e in CORPUS} - {147}):
        entries = [e for e in CORPUS if e[0] == lt]
        pk = [(T0 + i * 1000, e[2], e[3]) for i, e in enumerate(entries)]
        path = write(tmp_path / f"{lt}.pcap", pcap_bytes(pk, lt, nsec=nsec, big=big))
        for chunk in (32 << 20, 4096):
            cols, skipped, _ = run(path, chunk)
            check(cols, skipped, entries, range(1, len(entries) + 1))
            assert list(cols["ts_ns"]) == [T0 + (i - 1) * 1000 for i in cols["frame"]]


def test_synthetic_specific_values(tmp_path):
    entries = [e for e in CORPUS if e[0] == 1]
    pk = [(T0, e[2], e[3]) for e in entries]
    cols, _, _ = run(write(tmp_path / "e.pcap", pcap_bytes(pk)))
    syn = int(np.nonzero(cols["flags"] == 0x02)[0][0])
    assert (cols["mss"][syn], cols["wscale"][syn], cols["sack_ok"][syn]) == (1460, 7, 1)
    assert cols["tsval"][syn] == 99 and cols["has_ts"][syn] == 1
    assert cols["flags"].max() == 0x1FF
    v4 = int(np.nonzero(cols["ipver"] == 4)[0][0])
    assert cols["src_hi"][v4] == 0 and cols["src_lo"][v4] == 0xFFFF0A000001
    assert format_address(4, 0, 0xFFFF0A000001) == "10.0.0.1"
    assert format_address(6, 0x20010DB800000000, 1) == "2001:db8::1"
    # snaplen-cut packet keeps its IP payload length
    assert 1000 in set(cols["payload"].tolist()) and 500 in set(cols["payload"].tolist())
    assert 5000 in set(cols["payload"].tolist())  # TSO: from wirelen


def test_synthetic_empty_batch_dtypes(tmp_path):
    from scapy.all import ARP, Ether
    path = write(tmp_path / "arp.pcap", pcap_bytes([(T0, bytes(Ether() / ARP()))]))
    cols, skipped, _ = run(path)
    assert skipped == Counter({"not-ip": 1})
    assert all(len(cols[k]) == 0 and cols[k].dtype == t for k, t in TCP_COLUMNS.items())


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "proxy_any.pcap",
                                  "formats/base_lo6.pcap"])
def test_ip_id_of_real_captures_is_the_ipv4_identification_field(name):
    """Real captures (loopback Ethernet, `tcpdump -i any` cooked, IPv6 loopback): `ipid` is
    each IPv4 packet's identification field as dpkt reads it, 0 for IPv6."""
    cols, _, _ = run(SAMPLES / name)
    with open(SAMPLES / name, "rb") as f:
        r = dpkt.pcap.Reader(f)
        link = {1: dpkt.ethernet.Ethernet, 113: dpkt.sll.SLL}[r.datalink()]
        ips = [link(buf).data for _, buf in r]
    assert cols["ipid"].tolist() == [ip.id if isinstance(ip, dpkt.ip.IP) else 0 for ip in ips]
    if name == "echo_split_lo.pcap":  # the client's SYN, the SYN/ACK (Linux sends ID 0), ACK
        assert cols["ipid"][:3].tolist() == [18691, 0, 18692]
    if name.endswith("6.pcap"):
        assert (cols["ipver"] == 6).all() and not cols["ipid"].any()


def _one_packet_options(opts: bytes) -> tuple[int, int, int, int, int]:
    """The reference: one packet's options parsed byte by byte, as RFC 9293 lays them out."""
    mss, ws, sack, tsval, has_ts = -1, -1, 0, 0, 0
    i, n = 0, len(opts)
    while i < n:
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= n:
            break
        ln = opts[i + 1]
        if ln < 2 or i + ln > n:
            break
        if kind == 2 and ln == 4:
            mss = (opts[i + 2] << 8) | opts[i + 3]
        elif kind == 3 and ln == 3:
            ws = opts[i + 2]
        elif kind == 4 and ln == 2:
            sack = 1
        elif kind == 8 and ln == 10:
            tsval = int.from_bytes(opts[i + 2:i + 6], "big")
            has_ts = 1
        i += ln
    return mss, ws, sack, tsval, has_ts




_OPTION = st.sampled_from(TCP_OPTION_ATOMS)
_OPTIONS = st.one_of(st.binary(max_size=40),
                     st.lists(_OPTION, max_size=12).map(lambda parts: b"".join(parts)[:40]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_OPTIONS, min_size=1, max_size=30))
def test_options_of_many_packets_at_once_match_the_one_packet_parser(blobs):
    data = np.frombuffer(b"".join(blobs) + b"\0", dtype=np.uint8)
    at = np.cumsum([0] + [len(b) for b in blobs[:-1]])
    got = _tcp_options_rows(data, at, np.array([len(b) for b in blobs]))
    for i, b in enumerate(blobs):
        assert tuple(int(col[i]) for col in got) == _one_packet_options(b)


EDITCAP = __import__("shutil").which("editcap")
TSHARK = __import__("shutil").which("tshark")


@pytest.mark.skipif(EDITCAP is None or TSHARK is None, reason="editcap/tshark not installed")
@pytest.mark.parametrize("snaplen", [64, 68])
def test_options_cut_by_the_snap_length_keep_the_packet_and_its_header_fields(snaplen, tmp_path):
    """A real capture cut as `tcpdump -s 64` / `-s 68` cuts it (editcap -s): every packet is
    still analysed, the ones whose TCP options were cut counted as options-cut (as many as
    tshark finds headers longer than the snap length), the stalls and roles unchanged; the
    MSS is guessed, and the text says why."""
    import subprocess

    import nagleprobe

    full = SAMPLES / "confirm_netns_client.pcap"
    cut = tmp_path / f"cut{snaplen}.pcap"
    subprocess.run([EDITCAP, "-s", str(snaplen), str(full), str(cut)], check=True)
    rows = subprocess.run([TSHARK, "-n", "-r", str(full), "-T", "fields", "-e", "ip.hdr_len",
                           "-e", "tcp.hdr_len"], capture_output=True, text=True,
                          check=True).stdout.split("\n")
    longer = sum(14 + int(a) + int(b) > snaplen for a, b in (r.split("\t") for r in rows if r))
    want = nagleprobe.analyze(str(full)).to_dict()
    report = nagleprobe.analyze(str(cut))
    got = report.to_dict()
    assert longer > 0
    assert got["capture"]["skipped"] == {"options-cut": longer}
    assert got["capture"]["tcp_packets"] == want["capture"]["tcp_packets"]
    assert [s["frames"] for s in got["stalls"]] == [s["frames"] for s in want["stalls"]]
    assert [f["roles"] for f in got["flows"]] == ["handshake"]
    assert {e["mss_from"] for e in got["flows"][0]["endpoints"].values()} == {"guessed"}
    assert "MSS guessed (SYN options cut by the snap length)" in report.to_text()
    skipped = Counter()
    cols = [decode(b, skipped) for b in CaptureReader(str(cut))][0]
    ref = [decode(b, Counter()) for b in CaptureReader(str(full))][0]
    for k in ("seq", "ack", "flags", "window", "payload", "sport", "dport"):
        assert np.array_equal(cols[k], ref[k]), k
    assert (cols["mss"] == -1).all() or snaplen == 68


def test_records_of_no_captured_bytes_are_counted_as_empty_records(tmp_path):
    """Issue 18: a record with caplen 0 and an otherwise plausible header (original length
    60, the time of its neighbours) is a frame, but no packet to decode: it is counted under
    `empty-record`, not as a packet cut by the snap length, and the real packets around it
    decode as in the intact capture (frame numbers after it one higher per empty record)."""
    data = (SAMPLES / "echo_split_lo.pcap").read_bytes()
    offs, off = [], 24
    while off + 16 <= len(data):
        offs.append(off)
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    sec, usec = struct.unpack_from("<II", data, offs[10])
    at = offs[11]  # three empty records after record 11 (frame 11), one more at the end
    empty = struct.pack("<IIII", sec, usec, 0, 60)
    path = write(tmp_path / "empty.pcap", data[:at] + empty * 3 + data[at:] + empty)
    intact, intact_skipped, _ = run(SAMPLES / "echo_split_lo.pcap")
    cols, skipped, info = run(path)
    assert skipped == intact_skipped + Counter({"empty-record": 4})
    assert info.packets == len(offs) + 4 and not info.warnings
    assert np.array_equal(cols["frame"], np.where(intact["frame"] > 11, intact["frame"] + 3,
                                                  intact["frame"]))
    assert all(np.array_equal(cols[k], intact[k]) for k in TCP_COLUMNS if k != "frame")
