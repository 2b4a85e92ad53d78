"""Streamed analysis (nagleprobe.stream) equals the whole-file analysis, in bounded memory."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nagleprobe
import nagleprobe.stream
from nagleprobe.decode import decode
from nagleprobe.pipeline import DEFAULT_IDLE_S, DEFAULT_REORDER_WINDOW_S, analyze
from nagleprobe.read import CaptureReader
from nagleprobe.stream import StreamAnalyzer
from replicate import replicate, seen_twice
from oracle import analyze_whole

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))
TINY_CHUNK = 4096  # the reader's smallest chunk: every sample spans several
KNOBS = {"reorder_window_s": DEFAULT_REORDER_WINDOW_S, "idle_s": DEFAULT_IDLE_S}


def stream(path: Path, chunk: int = TINY_CHUNK, **kw) -> tuple[nagleprobe.Report, StreamAnalyzer]:
    """Streamed analysis, returning the analyzer too (its batch and memory counters)."""
    reader = CaptureReader(str(path), chunk_bytes=chunk)
    skipped: Counter = Counter()
    st = None
    for batch in reader:
        st = st or StreamAnalyzer(int(batch.ts_ns[0]), **{**KNOBS, **kw})
        st.feed(decode(batch, skipped))
    skipped.update(reader.info.skipped)
    return st.finish(reader.info, dict(skipped)), st


def stream_rows(path: Path, rows: int = 1, **kw) -> tuple[nagleprobe.Report, StreamAnalyzer]:
    """Streamed analysis fed `rows` decoded rows at a time (finer than any reader chunk)."""
    reader = CaptureReader(str(path))
    skipped: Counter = Counter()
    batches = list(reader)
    cols = decode(batches[0], skipped)
    st = StreamAnalyzer(int(batches[0].ts_ns[0]), **{**KNOBS, **kw})
    for i in range(0, len(cols["frame"]), rows):
        st.feed({k: v[i:i + rows] for k, v in cols.items()})
    skipped.update(reader.info.skipped)
    return st.finish(reader.info, dict(skipped)), st


def chunk_of_frame(path: Path, chunk: int = TINY_CHUNK) -> dict[int, int]:
    return {int(f): i for i, b in enumerate(CaptureReader(str(path), chunk_bytes=chunk))
            for f in b.frame}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_streamed_json_equals_whole_file_json_on_every_sample(path):
    report = analyze_whole(str(path))
    whole = report.to_json()
    assert analyze(str(path)).to_json() == whole
    # tiny chunks, each connection handed on soon after it closed (50 ms, or twice the
    # longest round trip on long paths: a packet later than the reorder window is late by definition),
    # one batch per connection
    window = max(0.05, 2 * np.nan_to_num(report.flows["rtt_ms"].max()) / 1e3)
    assert stream(path, reorder_window_s=window, batch_rows=1)[0].to_json() == whole
    # one packet at a time: every stall and handshake is split between feeds
    assert stream_rows(path, reorder_window_s=window, batch_rows=1)[0].to_json() == whole


def test_tiny_chunks_split_stalls_across_chunk_boundaries():
    split = 0
    for path in CAPTURES:
        where = chunk_of_frame(path)
        for s in analyze(str(path), chunk_bytes=TINY_CHUNK).stalls.itertuples():
            split += where[s.small_frame] != where[s.released_frame]
    assert split >= 10, split  # 17 with the committed samples


MIX = ["echo_split_lo.pcap", "neg_bulk_cwnd_netns.pcap", "server_split_lo.pcap",
       "neg_nodelay_split_netns.pcap", "neg_quickack_lo.pcap"]


def test_many_interleaved_connections_are_analysed_in_batches_with_the_same_result(tmp_path):
    cap = tmp_path / "mix.pcap"
    cap.write_bytes(replicate(MIX, copies=30, every_ns=100_000_000))  # 150 connections
    whole = analyze_whole(str(cap))
    rep, st = stream(cap, chunk=64 << 10, reorder_window_s=0.2, batch_rows=2000)
    assert rep.to_json() == whole.to_json()
    for table in ("flows", "stalls", "endpoints"):  # the notebook tables too, dtypes and all
        pd.testing.assert_frame_equal(getattr(rep, table), getattr(whole, table))
    assert len(whole.flows) == 150 and whole.stall_count == 30 * 2 * 19
    assert st.batches >= 5
    # memory: only the connections still open are held, far fewer rows than the capture has
    assert st.peak_pending_rows < whole.capture["tcp_packets"] / 3


def test_batches_analysed_in_worker_threads_give_the_same_report(tmp_path):
    cap = tmp_path / "mix.pcap"
    cap.write_bytes(replicate(MIX, copies=10, every_ns=100_000_000))
    serial, st0 = stream(cap, chunk=64 << 10, reorder_window_s=0.2, batch_rows=500, workers=0)
    threaded, st2 = stream(cap, chunk=64 << 10, reorder_window_s=0.2, batch_rows=500, workers=2)
    assert st0.batches == st2.batches >= 5
    assert threaded.to_json() == serial.to_json()
    assert serial.stall_count == 10 * 2 * 19


def test_an_error_in_a_worker_thread_is_raised_to_the_caller(monkeypatch):
    def broken(cols, tuples=None, ends=None):
        raise ValueError("flows broke")
    monkeypatch.setattr(nagleprobe.engine, "build_flows", broken)
    with pytest.raises(ValueError, match="flows broke"):
        stream(SAMPLES / "echo_split_lo.pcap", workers=2)


def test_records_out_of_time_order_within_the_grace_window_change_nothing(tmp_path):
    cap = tmp_path / "jitter.pcap"
    cap.write_bytes(replicate(MIX[:3], copies=10, every_ns=100_000_000, jitter_ns=3_000_000))
    whole = analyze_whole(str(cap))
    rep, st = stream(cap, chunk=16 << 10, reorder_window_s=0.2, batch_rows=500)
    assert st.batches >= 3
    assert rep.to_json() == whole.to_json()
    assert whole.stall_count > 0


def test_a_4tuple_reused_after_hand_on_starts_a_new_connection(tmp_path):
    cap = tmp_path / "reuse.pcap"
    # the same ports three times, 2 s apart, each time with new ISNs
    cap.write_bytes(replicate(["echo_split_lo.pcap"], copies=3, every_ns=2_000_000_000,
                              port_step=0, isn_step=1_000_000))
    whole = analyze_whole(str(cap))
    rep, st = stream_rows(cap, rows=1, reorder_window_s=0.1, batch_rows=1)
    assert len(whole.flows) == 3 and whole.stall_count == 3 * 19
    assert st.batches == 3
    assert rep.to_json() == whole.to_json()


def test_packets_after_the_grace_window_are_left_out_with_a_warning(tmp_path):
    cap = tmp_path / "late.pcap"
    cap.write_bytes(replicate(["echo_split_lo.pcap"], copies=1, every_ns=0))
    whole = analyze_whole(str(cap))
    assert not whole.capture["warnings"]
    rep, st = stream_rows(cap, reorder_window_s=0.0, batch_rows=1)  # handed on at once: the last ACK is late
    assert rep.capture["warnings"] == ["1 TCP packets arrived more than 0 s (capture time) "
                                       "after their connection closed and were left out of it"]
    assert rep.capture["tcp_packets"] == whole.capture["tcp_packets"] - 1
    assert rep.stall_count == whole.stall_count


def test_empty_and_non_tcp_captures_give_the_empty_report(tmp_path):
    from capgen import pcap_bytes
    cap = tmp_path / "empty.pcap"
    cap.write_bytes(pcap_bytes([]))
    assert analyze(str(cap)).to_json() == analyze_whole(str(cap)).to_json()


def test_progress_is_called_after_each_chunk_with_the_frames_read():
    seen = []
    path = SAMPLES / "neg_bulk_cwnd_netns.pcap"
    analyze(str(path), chunk_bytes=TINY_CHUNK, progress=lambda r, frames: seen.append(frames))
    assert len(seen) > 10 and seen == sorted(seen)
    assert seen[-1] == 1755


@pytest.mark.parametrize("name", ["proxy_any.pcap", "neg_bulk_cwnd_netns.pcap"])
def test_json_written_in_pieces_is_the_same_document(name):
    rep = analyze(str(SAMPLES / name))
    pieces = list(rep.json_pieces(rows_per_piece=7))
    assert len(pieces) == 2 + -(-rep.stall_count // 7)
    assert "".join(pieces) == rep.to_json()
    assert json.loads("".join(pieces)) == rep.to_dict()


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "proxy_any.pcap",
                                  "neg_bulk_cwnd_netns.pcap"])
def test_every_packet_seen_twice_gives_the_same_analysis_with_the_copies_counted(name, tmp_path):
    """Synthetic derivations of real captures (echo on loopback, the proxy captured with
    `tcpdump -i any`, a bulk transfer whose packets are microseconds apart so that copies
    interleave with the next packets): each record written twice, the copy 3 us later. The
    copies are dropped before the analysis and counted under skipped["duplicate"]; flows,
    endpoints and stalls are those of the sample, the stalls' frames renumbered as the file
    numbers them; streamed and whole-file analyses agree."""
    data, frame_of = seen_twice(name)
    path = tmp_path / f"twice_{name}"
    path.write_bytes(data)
    once = analyze_whole(str(SAMPLES / name))
    whole = analyze_whole(str(path))
    n = once.capture["packets"]
    assert whole.capture["packets"] == 2 * n
    assert whole.capture["skipped"] == {**once.capture["skipped"], "duplicate": n}
    assert whole.capture["tcp_packets"] == once.capture["tcp_packets"]
    pd.testing.assert_frame_equal(whole.endpoints, once.endpoints)
    # tcp_stream is left out: wireshark.tcp_streams gives none when anything was skipped
    flows = (whole.flows.drop(columns="tcp_stream"), once.flows.drop(columns="tcp_stream"))
    for got, want in (flows, (whole.stalls, once.stalls.copy())):
        for col in [c for c in want.columns if c.endswith("_frame")]:
            want[col] = np.array([frame_of[f] for f in want[col]], dtype=np.int64)
        pd.testing.assert_frame_equal(got, want)
    assert len(once.stalls) == {"echo_split_lo.pcap": 19, "proxy_any.pcap": 19}.get(name, 0)
    assert analyze(str(path)).to_json() == whole.to_json()
    assert stream(path, reorder_window_s=0.05, batch_rows=1)[0].to_json() == whole.to_json()
    head = " ".join(str(whole).split("\n\n")[0].split())  # the lines before the verdict
    assert f"skipped: {n:,} duplicate" in head
    assert (f"{n:,} duplicate packets (the same packet seen twice, as `tcpdump -i any` does on "
            "bridges/veth) dropped before analysis") in head  # no verb: right for 1 as for n


def first_hand_on(path: Path, **kw) -> tuple[int, nagleprobe.Report]:
    """The chunk after whose feeding the stream first handed rows on, and the report."""
    reader = CaptureReader(str(path), chunk_bytes=16 << 10)
    skipped: Counter = Counter()
    st, first = None, None
    for i, batch in enumerate(reader):
        st = st or StreamAnalyzer(int(batch.ts_ns[0]), **{**KNOBS, **kw})
        st.feed(decode(batch, skipped))
        if first is None and st.batches:
            first = i
    skipped.update(reader.info.skipped)
    return first, st.finish(reader.info, dict(skipped))


def test_idle_analysis_threads_are_handed_what_is_ready_before_a_batch_fills(tmp_path,
                                                                           monkeypatch):
    """With analysis threads and none of them busy, the rows ready go on once there are
    IDLE_BATCH_ROWS of them (not a batch's worth, nor half of all held): the threads start
    early in a capture; the report is the same."""
    cap = tmp_path / "mix.pcap"
    cap.write_bytes(replicate(MIX, copies=10, every_ns=100_000_000))
    monkeypatch.setattr(nagleprobe.stream, "IDLE_BATCH_ROWS", 100)
    serial_at, serial = first_hand_on(cap, reorder_window_s=0.2, batch_rows=1 << 30, workers=0)
    threaded_at, threaded = first_hand_on(cap, reorder_window_s=0.2, batch_rows=1 << 30,
                                          workers=2)
    assert threaded_at < serial_at
    assert threaded.to_json() == serial.to_json()
