"""Absurd SYN options (issue 18, point 8): an announced MSS of 1 with timestamps gave a send
MSS of -11; a window scale of 255 is taken as 14 (RFC 7323). Built from a real sample."""

from __future__ import annotations

import struct
from pathlib import Path

import nagleprobe

ROOT = Path(__file__).resolve().parent.parent


def with_syn_options(tmp_path, mss: int, wscale: int) -> str:
    data = bytearray((ROOT / "samples" / "echo_split_lo.pcap").read_bytes())
    off, done = 24, 0
    while off + 16 <= len(data) and done < 2:  # the SYN and the SYN-ACK
        incl, = struct.unpack_from("<I", data, off + 8)
        frame = off + 16
        tcp = frame + 14 + (data[frame + 14] & 0x0F) * 4
        if data[tcp + 13] & 0x02:
            opts, end = tcp + 20, tcp + (data[tcp + 12] >> 4) * 4
            i = opts
            while i < end:
                kind = data[i]
                if kind in (0, 1):
                    i += 1
                    continue
                if kind == 2:
                    struct.pack_into("!H", data, i + 2, mss)
                elif kind == 3:
                    data[i + 2] = wscale
                i += data[i + 1]
            done += 1
        off += 16 + incl
    assert done == 2
    p = tmp_path / "opts.pcap"
    p.write_bytes(bytes(data))
    return str(p)


def test_mss_1_with_timestamps_and_window_scale_255(tmp_path):
    r = nagleprobe.analyze(with_syn_options(tmp_path, 1, 255))
    ep = r.endpoints
    assert ep["mss"].tolist() == [1, 1] and set(ep["mss_from"]) == {"syn"}
    assert ep["window_scale"].tolist() == [14, 14]
    assert (r.segments["window_bytes"].dropna() >= 0).all()
    d = r.to_dict()
    assert all(e["mss"] >= 1 for f in d["flows"] for e in f["endpoints"].values())


def test_mss_13_with_timestamps_is_1(tmp_path):
    r = nagleprobe.analyze(with_syn_options(tmp_path, 13, 7))
    assert r.endpoints["mss"].tolist() == [1, 1]
    assert r.endpoints["window_scale"].tolist() == [7, 7]


def test_strict_refuses_packets_dropped_as_late(tmp_path):
    """A packet arriving long after its connection was analysed is left out with a warning;
    with --strict that is damage like any other (issue 18, point 8)."""
    import pytest

    from capgen import pcap_bytes
    from nagleprobe.errors import CaptureError
    from replicate import sample_packets, shift_ports
    t0 = 1_700_000_000 * 10**9
    pk = [(t0 + t, f) for t, f in sample_packets("echo_split_lo.pcap")]
    later = [(t + 10**10, shift_ports(f, 1)) for t, f in pk]  # another connection, 10 s on
    late = (later[-1][0] + 1000, pk[10][1])  # a copy of frame 11, 11 s after its flow closed
    p = tmp_path / "late.pcap"
    p.write_bytes(pcap_bytes(pk + later + [late]))
    r = nagleprobe.analyze(str(p), chunk_bytes=4096)  # (the late packet in a chunk of its own)
    assert r.capture["warnings"] == ["1 TCP packets arrived more than 2 s (capture time) after "
                                     "their connection closed and were left out of it"]
    with pytest.raises(CaptureError) as e:
        nagleprobe.analyze(str(p), strict=True, chunk_bytes=4096)
    assert str(e.value) == (f"{p}: a TCP packet arrived more than 2 s (capture time) after its "
                            f"connection closed (raise --reorder-window) (frame {2 * len(pk) + 1})")
