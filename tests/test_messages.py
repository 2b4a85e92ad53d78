"""messages: the held message of a stall named in the application protocol's own terms;
payloads: the TCP payload bytes of chosen frames read back from a capture.

The real captures in samples/messages were made by make_messages.py, which logged every
write of the side that split its messages (<name>.writes.json): the names are checked
against those writes, not against the recogniser's own output."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nagleprobe
from nagleprobe.messages import COALESCE, NODELAY, NOT_CAPTURED, recognise
from nagleprobe.payloads import payloads, stall_messages

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MESSAGES = SAMPLES / "messages"
TLS13_OVERHEAD = 5 + 1 + 16  # record header, inner content type, AEAD tag


def writes(name: str) -> list[dict]:
    return json.loads((MESSAGES / f"{name}.writes.json").read_text())


def named(name: str):
    path = str(MESSAGES / f"{name}.pcap")
    report = nagleprobe.analyze(path)
    assert report.stall_count > 0, f"{name}: the capture shows no stall"
    return report, stall_messages(report, path)


def sizes_of(log: list[dict], what: str) -> set[int]:
    return {w["bytes"] for w in log if w["what"] == what}


# ---------------------------------------------------------------------- real traffic
def test_dns_prefix_written_apart_from_the_query():
    """The client wrote each query's 2-byte length prefix and the query in two calls."""
    report, named_ = named("dns_lo")
    queries = sizes_of(writes("dns_lo"), "query")
    assert len(named_) == report.stall_count
    for (_, stall), (_, m) in zip(report.stalls.iterrows(), named_.iterrows()):
        assert stall["sender"] == "client"
        assert m["protocol"] == "dns"
        assert m["before_message"] == "its 2-byte length prefix"
        assert stall["held_bytes"] in queries
        assert m["held_message"] == f"the {stall['held_bytes']}-byte DNS query"
        assert m["split"] == "prefix/body" and m["advice"] == COALESCE
        assert "write both in one call" in m["fix"]


def test_http1_response_headers_written_apart_from_the_body():
    """http.server flushed the response headers, then wrote the file."""
    report, named_ = named("http1_lo")
    log = writes("http1_lo")
    (headers,), (body,) = sizes_of(log, "headers"), sizes_of(log, "body")
    for (_, stall), (_, m) in zip(report.stalls.iterrows(), named_.iterrows()):
        assert stall["sender"] == "server"
        assert m["protocol"] == "http/1.1"
        assert m["before_message"] == f"the response headers ({headers} B)"
        assert m["held_message"] == f"the {body}-byte body of the 200 response"
        assert m["split"] == "headers/body" and m["advice"] == COALESCE
        assert f"({headers} B) and body ({body} B) were written separately" in m["fix"]


def test_tls_each_write_is_a_record():
    """Over TLS 1.3 the headers and the body are two records; a stall's held record is the
    body's (or, behind a session ticket the server sent unprompted, both)."""
    report, named_ = named("tls_lo")
    log = writes("tls_lo")
    (headers,), (body,) = sizes_of(log, "headers"), sizes_of(log, "body")
    h, b = headers + TLS13_OVERHEAD, body + TLS13_OVERHEAD
    record = "TLS application-data record"
    seen = set()
    for (_, stall), (_, m) in zip(report.stalls.iterrows(), named_.iterrows()):
        assert stall["sender"] == "server" and m["protocol"] == "tls"
        assert m["split"] == "record/record" and m["advice"] == COALESCE
        if m["before_message"] == f"the {h}-byte {record}":
            assert m["held_message"] == f"the {b}-byte {record}"
            seen.add("headers/body")
        else:  # the first response, behind a session ticket: its records held (after
            # any other ticket), the record outstanding not one the application wrote
            sizes = re.fullmatch(rf"\d+ {record}s \(([\d B,]+)\)", m["held_message"])
            assert sizes, m["held_message"]
            held = [int(x) for x in re.findall(r"\d+", sizes.group(1))]
            assert held[-2:] == [h, b] and sum(held) == stall["held_bytes"]
            assert m["before_message"] not in (f"the {h}-byte {record}", f"the {b}-byte {record}")
            seen.add("tickets")
    assert "headers/body" in seen


def test_postgres_query_messages_written_after_a_large_bind():
    """pg8000 sent its Bind (larger than its write buffer) at once and the Flush, Execute,
    Flush, Sync after it in the next write."""
    report, named_ = named("postgres_lo")
    log = writes("postgres_lo")
    (bind,) = sizes_of(log, "B")
    whats = [w["what"] for w in log]
    after = log[whats.index("B") + 1:]
    tail = after[:[w["what"] for w in after].index("S") + 1]  # up to the Sync flushed
    names = {"H": "Flush", "E": "Execute", "S": "Sync"}
    held = ", ".join(names[w["what"]] for w in tail)
    for (_, stall), (_, m) in zip(report.stalls.iterrows(), named_.iterrows()):
        assert stall["sender"] == "client" and m["protocol"] == "postgresql"
        assert m["before_message"] == f"the {bind}-byte Bind message"
        assert stall["held_bytes"] == sum(w["bytes"] for w in tail)
        assert m["held_message"] == f"the {held} messages ({stall['held_bytes']} B)"
        assert m["advice"] == COALESCE


def test_http2_data_frames_flushed_apart_from_the_headers():
    """httpcore wrote each POST's HEADERS frame (with a WINDOW_UPDATE of its stream) and
    then its two DATA frames (the body, then the empty END_STREAM one) in separate writes."""
    report, named_ = named("http2_lo")
    log = writes("http2_lo")
    requests = [(log[i]["bytes"], log[i + 1]["bytes"], log[i + 2]["bytes"])
                for i in range(len(log) - 2) if log[i]["what"] == "HEADERS+WINDOWUPDATE"
                and log[i + 1]["what"] == log[i + 2]["what"] == "DATA"]
    assert len(requests) == 6 and len(named_) == report.stall_count <= len(requests)
    window_update = 9 + 4  # RFC 9113 6.9: a frame header and a 4-byte increment
    streams = []
    for (_, stall), (_, m) in zip(report.stalls.iterrows(), named_.iterrows()):
        stream = int(re.search(r"of stream (\d+)", m["held_message"]).group(1))
        streams.append(stream)
        heads, body, end = requests[(stream - 1) // 2]  # client streams: 1, 3, 5...
        headers = heads - window_update
        assert stall["sender"] == "client" and m["protocol"] == "http/2"
        assert stall["held_bytes"] == body + end
        assert m["held_message"] == f"2 DATA frames of stream {stream} ({body} B, {end} B)"
        assert m["before_message"] == (f"2 frames of stream {stream} (HEADERS {headers} B, "
                                       f"WINDOW_UPDATE {window_update} B)")
        assert m["split"] == "HEADERS/DATA" and m["advice"] == COALESCE
        assert m["fix"].startswith(f"the {headers}-byte HEADERS frame and the {body}-byte DATA "
                                   f"frame of stream {stream} were flushed separately")
    assert streams == sorted(set(streams)) and all(s % 2 for s in streams)


# ---------------------------------------------------------------------- field captures
FIELD = Path("/work/shared/field")  # third-party captures, read in place


def field(name: str):
    """(report, named stalls, the label's notes) of a third-party capture."""
    path = FIELD / name
    if not path.exists():
        pytest.skip(f"field capture {path} absent")
    labels = {c["file"]: c for c in json.loads((FIELD / "labels.json").read_text())}
    report = nagleprobe.analyze(str(path))
    return report, stall_messages(report, str(path)), labels[name]["notes"]


def test_field_dns_axfr_prefix_written_apart_from_the_query():
    _, named_, notes = field("pos__chrissanders_dns_axfr.pcapng")
    size = int(re.search(r"the (\d+)-byte AXFR query", notes).group(1))
    (m,) = named_.to_dict("records")
    assert m["protocol"] == "dns" and m["before_message"] == "its 2-byte length prefix"
    assert m["held_message"] == f"the {size}-byte DNS query" and m["advice"] == COALESCE


def test_field_smtp_bdat_line_written_apart_from_its_chunk():
    """Each stall's S1 is a 'BDAT n' line, its S2 the n-byte chunk (read with dpkt)."""
    report, named_, notes = field("pos__zeek_smtp_rfc3030-bdat-multipart-chunked.pcap")
    assert "'BDAT n'" in notes
    raw = dpkt_payloads(FIELD / "pos__zeek_smtp_rfc3030-bdat-multipart-chunked.pcap")
    for (_, stall), (_, m) in zip(report.stalls.iterrows(), named_.iterrows()):
        line = raw[stall["small_frame"]]
        n = int(re.fullmatch(rb"BDAT (\d+)( LAST)?\r\n", line).group(1))
        assert m["protocol"] == "smtp" and m["split"] == "command/data"
        assert m["before_message"] == f"the BDAT command line ({len(line)} B)"
        assert m["held_message"] == f"its {n}-byte BDAT chunk" and m["advice"] == COALESCE


def test_field_mqtt_puback_then_publish_want_nodelay():
    """Windows MQTT client: a 4-byte PUBACK outstanding, its next PUBLISH held."""
    report, named_, _ = field("pos__nfstream_coap_mqtt.pcap")
    assert len(named_) == report.stall_count > 300
    assert (named_["protocol"] == "mqtt").all() and (named_["advice"] == NODELAY).all()
    assert (named_["before_message"] == "the 4-byte MQTT PUBACK").all()
    alone = named_["held_message"].str.fullmatch(r"the \d+-byte MQTT PUBLISH")
    held = report.stalls["held_bytes"][alone]
    assert alone.mean() > 0.9 and set(held) <= {60, 64}
    assert (named_["held_message"][alone] == [f"the {n}-byte MQTT PUBLISH" for n in held]).all()


def test_field_unknown_protocols_are_not_named():
    """OpenFlow, and SMTP typed a key at a time (no command line whole), stay unnamed."""
    for name in ("pos__tcpdump_of10_pf5240.pcap",
                 "edge__zeek_communityid_ipv6_smtp_interactive.pcap"):
        report, named_, _ = field(name)
        assert report.stall_count and named_["protocol"].isna().all()


# ---------------------------------------------------------------------- payloads
def ethernet_ip(buf: bytes) -> dpkt.Packet:
    return dpkt.ethernet.Ethernet(buf).data


def dpkt_payloads(path: Path, ip_of=ethernet_ip) -> dict[int, bytes]:
    """dpkt's reading of every TCP payload of a pcap, by frame; `ip_of` finds the IP packet
    of a record."""
    out = {}
    with open(path, "rb") as f:
        for frame, (_, buf) in enumerate(dpkt.pcap.Reader(f), start=1):
            ip = ip_of(buf)
            if isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)) and isinstance(ip.data, dpkt.tcp.TCP):
                out[frame] = bytes(ip.data.data)
    return out


@pytest.mark.parametrize("name", ["dns_lo", "http1_lo", "tls_lo"])
def test_payloads_match_dpkt(name):
    path = MESSAGES / f"{name}.pcap"
    expected = dpkt_payloads(path)
    assert any(expected.values())
    assert payloads(str(path), expected) == expected


def test_payloads_of_linux_cooked_capture_match_dpkt():
    path = SAMPLES / "proxy_any.pcap"
    expected = dpkt_payloads(path, lambda buf: dpkt.sll.SLL(buf).data)
    some = sorted(expected)[::3]
    assert payloads(str(path), some) == {f: expected[f] for f in some}


def vxlan_inner(buf: bytes) -> dpkt.Packet:
    """dpkt's reading of a VXLAN frame's inner IP packet (UDP 4789, 8-byte VXLAN header)."""
    outer = dpkt.ethernet.Ethernet(buf).data
    if isinstance(outer.data, dpkt.udp.UDP) and outer.data.dport == 4789:
        return dpkt.ethernet.Ethernet(outer.data.data[8:]).data
    return outer


def test_payloads_of_tunnelled_capture_match_dpkt():
    path = SAMPLES / "vxlan_overlay.pcap"
    expected = dpkt_payloads(path, vxlan_inner)
    assert b"hello world\r\n" in expected.values()
    assert payloads(str(path), expected) == expected


@pytest.mark.parametrize("name", ["echo_split_lo", "classic_bulk_tap", "vxlan_overlay"])
def test_samples_of_a_private_protocol_are_not_named(name):
    """The team's own test protocol (text and bulk bytes) is none of the known ones."""
    path = str(SAMPLES / f"{name}.pcap")
    report = nagleprobe.analyze(path)
    named_ = stall_messages(report, path)
    assert report.stall_count and named_["protocol"].isna().all()
    assert named_["held_message"].isna().all()  # payload captured: nothing to say about it


def test_payloads_only_frames_asked_for_and_tcp():
    path = str(MESSAGES / "http1_lo.pcap")
    got = payloads(path, [13, 13, 99999])
    assert list(got) == [13] and len(got[13]) == 24
    assert payloads(path, []) == {}


def cut_copy(src: Path, dst: Path, keep: int) -> None:
    """Synthetic: `src` (a little-endian microsecond pcap of Ethernet/IPv4/TCP) with every
    record cut `keep` bytes after its TCP header, as a snap length just past the headers
    would have cut it (header lengths vary: SYN options stay whole)."""
    data = src.read_bytes()
    head = bytearray(data[:24])
    struct.pack_into("<I", head, 16, 14 + 60 + 60 + keep)
    out, at = [bytes(head)], 24
    while at + 16 <= len(data):
        sec, usec, cap, wire = struct.unpack_from("<IIII", data, at)
        record = data[at + 16:at + 16 + cap]
        ip = dpkt.ethernet.Ethernet(record).data
        body = record[:14 + ip.hl * 4 + ip.data.off * 4 + keep]
        out.append(struct.pack("<IIII", sec, usec, len(body), wire) + body)
        at += 16 + cap
    dst.write_bytes(b"".join(out))


def test_snaplen_cut_payload_is_what_was_captured(tmp_path):
    src = MESSAGES / "http1_lo.pcap"
    full = dpkt_payloads(src)
    cut = tmp_path / "cut.pcap"
    cut_copy(src, cut, 10)
    got = payloads(str(cut), full)
    assert got == {f: p[:10] for f, p in full.items()}


def test_snaplen_cut_stalls_say_payload_not_captured(tmp_path):
    src = MESSAGES / "http1_lo.pcap"
    cut = tmp_path / "cut.pcap"
    cut_copy(src, cut, 0)
    report = nagleprobe.analyze(str(cut))
    assert report.stall_count == nagleprobe.analyze(str(src)).stall_count
    named_ = stall_messages(report, str(cut))
    assert list(named_["held_message"]) == [NOT_CAPTURED] * report.stall_count
    assert named_["protocol"].isna().all()


# ---------------------------------------------------------------------- synthetic bytes
def tls_record(kind: int, body: bytes) -> bytes:
    return bytes([kind, 3, 3]) + len(body).to_bytes(2, "big") + body


def test_synthetic_tls_record_header_written_apart_from_its_body():
    rec = tls_record(23, bytes(300))
    m = recognise(rec[:5], rec[5:])
    assert m is not None and m.split == "header/body"
    assert m.held == "the 300-byte body of a TLS application-data record"
    assert m.before == "its 5-byte record header" and m.advice == COALESCE


def test_synthetic_tls_record_split_inside_its_body():
    first = tls_record(22, bytes(40))
    rec = tls_record(23, bytes(300))
    m = recognise(rec[:100], rec[100:], earlier=first)
    assert m is not None and m.split == "within a record"
    assert m.held == "the last 205 bytes of the 305-byte TLS application-data record"


def test_synthetic_http_pipelined_requests_want_nodelay():
    a = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    b = b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
    m = recognise(a, b)
    assert m is not None and m.split == "message/message" and m.advice == NODELAY
    assert m.held == f"the next GET request ({len(b)} B)"


def test_synthetic_http_request_body_after_expect_continue():
    head = (b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: 5\r\n\r\n")
    m = recognise(head, b"hello")
    assert m is not None and m.split == "headers/body"
    assert m.held == "the 5-byte body of the POST request (Expect: 100-continue)"
    assert m.before == f"the request headers ({len(head)} B)"


def test_synthetic_http_chunked_body_written_in_pieces():
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    m = recognise(b"5\r\nhello\r\n", b"0\r\n\r\n", earlier=head)
    assert m is not None and m.split == "body/body"
    assert m.held == "the last 5 bytes of the body of the 200 response"


def test_synthetic_http_response_starting_mid_stream_is_found_from_earlier():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"
    m = recognise(head[10:], b"body", earlier=head[:10])
    assert m is not None and m.before == f"the response headers ({len(head)} B)"


def dns_query() -> bytes:
    """A 29-byte query for a.example (synthetic)."""
    return (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
            b"\x01a\x07example\x00\x00\x01\x00\x01")


def test_synthetic_dns_pipelined_queries_want_nodelay():
    q = dns_query()
    framed = len(q).to_bytes(2, "big") + q
    m = recognise(framed, framed)
    assert m is not None and m.advice == NODELAY
    assert m.held == f"the {len(framed)}-byte DNS query"


def test_synthetic_dns_query_split_inside():
    q = dns_query()
    framed = len(q).to_bytes(2, "big") + q
    m = recognise(framed[:14], framed[14:])
    assert m is not None and m.split == "within a message"
    assert m.held == f"the last {len(framed) - 14} bytes of a {len(q)}-byte DNS query"


def test_synthetic_two_bytes_before_a_non_dns_message_is_not_dns():
    assert recognise(b"\x00\x05", b"hello") is None
    body = b"\x00\x00\x00\x00" + bytes(20)  # a DNS header would need a question
    assert recognise(len(body).to_bytes(2, "big"), body) is None


def test_synthetic_postgres_frontend_split_inside_a_message():
    q = b"Q" + (4 + 9).to_bytes(4, "big") + b"SELECT 1\x00"
    sync = b"S\x00\x00\x00\x04"
    m = recognise(sync + q[:7], q[7:])
    assert m is not None and m.protocol == "postgresql"
    assert m.held == f"the last {len(q) - 7} bytes of the {len(q)}-byte PostgreSQL Query message"


def h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(
        4, "big") + payload


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_SETTINGS = h2_frame(4, 0, 0, bytes(12))  # two settings
H2_HEADERS = h2_frame(1, 0x04, 1, bytes(49))  # END_HEADERS, a body follows
H2_DATA = h2_frame(0, 0x01, 1, b'{"n": 1}')  # END_STREAM


def test_synthetic_http2_headers_flushed_apart_from_their_data():
    m = recognise(H2_HEADERS, H2_DATA, earlier=H2_PREFACE + H2_SETTINGS)
    assert m is not None and m.protocol == "http/2" and m.split == "HEADERS/DATA"
    assert m.held == "the 17-byte DATA frame of stream 1"
    assert m.before == "the 58-byte HEADERS frame of stream 1" and m.advice == COALESCE
    assert m.fix == ("the 58-byte HEADERS frame and the 17-byte DATA frame of stream 1 were "
                     "flushed separately: flush once per request (or response)")


def test_synthetic_http2_body_in_pieces_wants_coalescing():
    a, b = h2_frame(0, 0, 5, bytes(100)), h2_frame(0, 0x01, 5, bytes(20))
    m = recognise(a, b, earlier=h2_frame(8, 0, 0, bytes(4)))
    assert m is not None and m.split == "DATA/DATA" and m.advice == COALESCE


def test_synthetic_http2_frames_of_other_streams_want_nodelay():
    """A GET's HEADERS (END_STREAM) then the next request's: independent frames."""
    get1, get3 = h2_frame(1, 0x05, 1, bytes(30)), h2_frame(1, 0x05, 3, bytes(12))
    m = recognise(H2_PREFACE + H2_SETTINGS + get1, get3)
    assert m is not None and m.protocol == "http/2" and m.split == "frame/frame"
    assert m.held == "the 21-byte HEADERS frame of stream 3" and m.advice == NODELAY
    assert m.before == ("the connection preface and 2 frames (SETTINGS 21 B, HEADERS 39 B)")


def test_synthetic_http2_cut_inside_a_frame():
    m = recognise(H2_DATA[:9], H2_DATA[9:], earlier=H2_HEADERS)
    assert m is not None and m.protocol == "http/2" and m.split == "within a frame"
    assert m.held == "the last 8 bytes of the 17-byte HTTP/2 DATA frame of stream 1"


@pytest.mark.parametrize("bad", [
    h2_frame(4, 0, 1, bytes(6)),  # SETTINGS on a stream
    h2_frame(0, 0, 0, bytes(8)),  # DATA on the connection
    h2_frame(8, 0, 0, bytes(5)),  # WINDOW_UPDATE of 5 bytes
    h2_frame(0, 0x02, 1, bytes(8)),  # a flag DATA does not define
    h2_frame(1, 0x04, 1 | 1 << 31, bytes(8)),  # the reserved bit set
    h2_frame(12, 0, 1, bytes(8)),  # no such type here
])
def test_synthetic_http2_header_breaking_its_types_rules_is_not_http2(bad):
    m = recognise(H2_HEADERS, bad)
    assert m is None or m.protocol != "http/2"


@pytest.mark.parametrize("outstanding, held", [
    (b"hello world\n", b"and more\n"),
    (bytes(range(40)), bytes(range(40, 200))),
    (b"", b"x"),
    (b"x", b""),
])
def test_synthetic_unknown_bytes_are_not_named(outstanding, held):
    assert recognise(outstanding, held) is None


FRAMED = st.sampled_from([b"\x16\x03\x03\x00\x05", b"\x00\x1d", b"GET / HTTP/1.1\r\n",
                          b"HTTP/1.1 200 OK\r\n", b"Q\x00\x00\x00\x05", b"BDAT 3\r\n",
                          b"\x30\x02", b"\r\n\r\n", b"Content-Length: 9\r\n",
                          b"\x00\x00\x04\x08\x00\x00\x00\x00\x01", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"])
PIECES = st.lists(st.one_of(st.binary(max_size=40), FRAMED), max_size=6).map(b"".join)


@settings(max_examples=400, deadline=None)
@given(PIECES, PIECES, PIECES)
def test_synthetic_any_bytes_give_a_message_or_none(outstanding, held, earlier):
    """Whatever the bytes (random, or pieces of the known framings), recognise answers."""
    m = recognise(outstanding, held, earlier)
    assert m is None or (m.held and m.before and m.fix and m.advice in (COALESCE, NODELAY))


def test_synthetic_random_bytes_are_not_named():
    """Seeded random payloads of the usual sizes: no framing fits them by chance."""
    rng = random.Random(33)
    sizes = [1, 2, 4, 10, 40, 200, 1000]
    named_ = [m.protocol for _ in range(5000)
              if (m := recognise(rng.randbytes(rng.choice(sizes[:-1])),
                                 rng.randbytes(rng.choice(sizes)))) is not None]
    assert named_ == []


def test_the_report_names_its_stalls_messages_row_by_row():
    path = SAMPLES / "messages" / "dns_lo.pcap"
    report = nagleprobe.analyze(str(path))
    m = report.messages
    assert list(m.index) == list(report.stalls.index) and len(m) == len(report.stalls) > 0
    assert set(m["protocol"]) == {"dns"} and set(m["advice"]) == {"coalesce"}
    assert report.messages is m  # read once


def test_a_report_of_a_stream_cannot_read_its_messages_again():
    import io

    report = nagleprobe.analyze(io.BytesIO((SAMPLES / "messages" / "dns_lo.pcap").read_bytes()))
    with pytest.raises(ValueError, match="read from the capture file again"):
        report.messages
