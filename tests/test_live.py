"""`nagleprobe watch` and the live analysis (nagleprobe/live.py): each stall reported once, as
soon as it is proven, equal to the whole-connection analysis, in bounded memory per
connection; the three inputs (stdin, a growing file, tcpdump on an interface)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from oracle import analyze_whole

from capgen import pcap_records
from capture_env import require_capture
from nagleprobe import analyze
from nagleprobe.decode import decode
from nagleprobe.handshake import HANDSHAKE_ROWS
from nagleprobe.live import MAX_UNANALYSED_ROWS, LiveAnalyzer
from nagleprobe.pieces import EXTRA_ROWS, LOOKAHEAD_ROWS, OVERLAP_ROWS
from nagleprobe.read import CaptureReader
from nagleprobe.verdicts import Limits
from splitwrite import free_port

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))
SPLITWRITE = str(Path(__file__).resolve().parent / "splitwrite.py")
STALL_FIELDS = ("sender", "endpoint", "delay_ms", "held_bytes")
# known better as the connection goes on: the round trips (the ACK delay is the gap less the
# path) and the stalls' repeats (confidence)
REFINED_FIELDS = ("peer_ack_delay_ms", "confidence")


def fed_in_pieces(path: Path, piece: int, window: int, **selection
                  ) -> tuple[list[dict], LiveAnalyzer]:
    """The stall events of a capture fed `piece` packets at a time."""
    live = LiveAnalyzer(window_rows=window, **selection)
    events: list[dict] = []
    skipped: Counter = Counter()
    for batch in CaptureReader(str(path)):
        cols = decode(batch, skipped)
        for at in range(0, len(cols["frame"]), piece):
            events += live.feed({k: v[at:at + piece] for k, v in cols.items()})
    return [e for e in events if e["event"] == "stall"], live


def whole(path: Path) -> dict[int, dict]:
    """The whole-connection analysis' stalls by released (S2) frame."""
    st = analyze_whole(str(path)).stalls
    return {int(r["released_frame"]): r for r in st.to_dict("records")}


@pytest.mark.parametrize("piece,window", [(200, 4096), (1, 16)])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_the_stalls_reported_live_are_the_whole_connection_analysis_stalls(path, piece, window):
    """Fed a few hundred packets at a time, or one at a time with a window of 16 packets
    (longer connections carried by their Ledger), the stalls reported equal those of
    the whole-connection analysis: each once, the same frames, senders, bytes and delays.
    Fed a few hundred at a time, all of a sample's round trips and repeats are in view
    when its stalls are proven, so the peer's ACK delay and the confidence are equal too."""
    events, _ = fed_in_pieces(path, piece, window)
    want = whole(path)
    frames = [e["frames"][2] for e in events]
    assert len(frames) == len(set(frames)), "a stall was reported twice"
    assert sorted(frames) == sorted(want)
    for e in events:
        w = want[e["frames"][2]]
        assert e["frames"][:2] == [w["small_frame"], w["ack_frame"]]
        assert {k: e[k] for k in STALL_FIELDS} == {k: w[k] for k in STALL_FIELDS}
        if piece == 200:
            assert {k: e[k] for k in REFINED_FIELDS} == {k: w[k] for k in REFINED_FIELDS}


def test_a_first_stall_is_reported_before_it_repeats_with_the_confidence_known_then():
    """Fed one packet at a time, the first stall of a sender is reported as soon as its S2
    arrives: with one stall seen its confidence is that of a single stall (0.6 plus the
    known-timer bonus), the whole analysis gives it 0.95 once it has repeated."""
    events, _ = fed_in_pieces(SAMPLES / "echo_split_lo.pcap", 1, 4096)
    want = whole(SAMPLES / "echo_split_lo.pcap")
    first = events[0]
    assert first["confidence"] < want[first["frames"][2]]["confidence"] == 0.95
    assert events[-1]["confidence"] == want[events[-1]["frames"][2]]["confidence"]


@pytest.mark.parametrize("selection, count", [
    ({"ports": (8002,)}, 19), ({"ports": (8001,)}, 0), ({"hosts": ("127.0.0.1",)}, 19),
    ({"hosts": ("10.0.0.0/8",)}, 0),
    ({"ports": (8002,), "hosts": ("127.0.0.0/8",), "min_confidence": 0.9}, 19),
    ({"min_confidence": 0.96}, 0)])
def test_a_selection_reports_the_stalls_analyze_selects_and_no_others(selection, count):
    """proxy_any: flow 0 on port 8001 has no stall, flow 1 on port 8002 all 19 (0.95)."""
    path = SAMPLES / "proxy_any.pcap"
    events, _ = fed_in_pieces(path, 200, 4096, **selection)
    want = analyze(str(path)).select(port=selection.get("ports"), host=selection.get("hosts"),
                                     min_confidence=selection.get("min_confidence")).stalls
    assert len(events) == len(want) == count
    assert sorted(e["frames"][2] for e in events) == sorted(want["released_frame"].tolist())


def test_a_stall_below_the_confidence_is_reported_once_its_repeats_raise_it():
    """Fed one packet at a time, echo_split_lo's first stall is proven at a single stall's
    confidence (below 0.9); with --min-confidence 0.9 it is held back, then reported once
    the next stalls have raised it, as the whole analysis counts it."""
    path = SAMPLES / "echo_split_lo.pcap"
    everything, _ = fed_in_pieces(path, 1, 4096)
    assert everything[0]["confidence"] < 0.9
    events, _ = fed_in_pieces(path, 1, 4096, min_confidence=0.9)
    frames = [e["frames"][2] for e in events]
    assert len(frames) == len(set(frames)) == 19
    assert sorted(frames) == sorted(whole(path))
    assert all(e["confidence"] >= 0.9 for e in events)


def test_watch_takes_the_selection_options_of_analyze():
    raw = (SAMPLES / "proxy_any.pcap").read_bytes()
    for args, stalls in ((["-p", "8002"], 19), (["--port", "8001"], 0),
                         (["--host", "10.0.0.0/8"], 0), (["--min-confidence", "0.9"], 19)):
        proc = subprocess.run([sys.executable, "-m", "nagleprobe", "watch", *args, "-"],
                              input=raw, capture_output=True, check=True)
        lines = proc.stdout.decode().splitlines()
        assert len([x for x in lines if " stall flow " in x]) == stalls, args
        assert any(x.startswith("watch ended: ") for x in lines)


def long_connection(copies: int) -> dict[str, np.ndarray]:
    """One connection that never closes: echo_split_lo's handshake, then its request and
    answer rounds again and again (sequence numbers, acknowledgements and times moved on
    by one round each copy), as decoded columns."""
    skipped: Counter = Counter()
    cols = decode(next(iter(CaptureReader(str(SAMPLES / "echo_split_lo.pcap")))), skipped)
    flags = cols["flags"]
    body = np.flatnonzero(np.arange(len(flags)) >= 3)
    body = body[: np.argmax((flags[body] & 0x05) != 0)]  # up to the first FIN / RST
    client = cols["sport"][body] == cols["sport"][0]
    pay = cols["payload"][body].astype(np.int64)
    sent = [int(pay[client].sum()), int(pay[~client].sum())]
    span = int(cols["ts_ns"][body[-1]] - cols["ts_ns"][body[0]]) + 1_000_000
    k = np.arange(copies).repeat(len(body))
    out = {name: np.concatenate([v[:3], np.tile(v[body], copies)]) for name, v in cols.items()}
    mine = np.tile(client, copies)
    seq_by = np.where(mine, sent[0], sent[1]) * k
    ack_by = np.where(mine, sent[1], sent[0]) * k
    out["seq"][3:] = (out["seq"][3:].astype(np.int64) + seq_by) % (1 << 32)
    out["ack"][3:] = (out["ack"][3:].astype(np.int64) + ack_by) % (1 << 32)
    out["ts_ns"][3:] += span * k
    out["frame"] = np.arange(1, len(out["frame"]) + 1)
    return out


def test_a_ledger_lets_go_of_the_stalls_watch_has_reported():
    """Kept raw for the connection's end, they would grow without bound on a connection
    that never closes (each provisional verdict copying them): once reported and decided,
    they go; what is kept is the candidates the Ledger keeps one by one and the window's."""
    cols = long_connection(60)
    window, piece, kept = 64, 50, 32
    live = LiveAnalyzer(window_rows=window, piece_limits=Limits(kept_candidates=kept))
    reported = 0
    for at in range(0, len(cols["frame"]), piece):
        reported += sum(e["event"] == "stall"
                        for e in live.feed({k: v[at:at + piece] for k, v in cols.items()}))
    (led,) = live._ledgers.values()
    assert reported > 5 * (window + piece + kept)  # many more than may be kept
    assert len(led.verdicts.kept()[0]) <= window + piece + kept


def test_what_is_held_per_connection_is_bounded_whatever_its_length():
    """A connection that never closes, 200 rounds of a real conversation, fed 50 packets at
    a time: the analyser never holds more than the window, one piece and the rows its
    Ledger carries (as in tests/test_pieces.py: the contiguous context, the handshake, per
    direction the rows the rule looks back to and at most two unacknowledged data rows),
    and still reports every stall of the whole-connection analysis."""
    cols = long_connection(200)
    window, piece = 64, 50
    live = LiveAnalyzer(window_rows=window)
    events = []
    for at in range(0, len(cols["frame"]), piece):
        events += live.feed({k: v[at:at + piece] for k, v in cols.items()})
    events = [e for e in events if e["event"] == "stall"]
    carried = OVERLAP_ROWS + LOOKAHEAD_ROWS + HANDSHAKE_ROWS + 2 * (EXTRA_ROWS + 2)
    assert live.peak_held_rows <= window + piece + carried
    assert live.remembered_stalls <= window  # only the stalls whose S2 is still held
    assert live.pieced == 1  # carried by its Ledger
    from nagleprobe.detect import detect
    from nagleprobe.flows import build_flows

    want = detect(build_flows(cols)).stalls
    assert len(want["flow"]) > 3000  # the test means something: many stalls, far apart
    assert sorted(e["frames"][2] for e in events) == sorted(want["released_frame"].tolist())


def test_rows_fed_faster_than_the_analyses_are_analysed_anyway_before_they_pile_up():
    """Input coming faster than the analyses (a file read at full speed): once
    MAX_UNANALYSED_ROWS rows wait, the analysis runs anyway and the rows beyond the window
    are handed to the connection's Ledger."""
    cols = long_connection(1000)
    window, piece = 64, 1000
    live = LiveAnalyzer(window_rows=window)
    stalls = 0
    for at in range(0, len(cols["frame"]), piece):
        got = live.feed({k: v[at:at + piece] for k, v in cols.items()}, analyse=False)
        stalls += sum(e["event"] == "stall" for e in got)
    assert len(cols["frame"]) > 5 * MAX_UNANALYSED_ROWS
    assert live.peak_held_rows <= HANDSHAKE_ROWS + window + MAX_UNANALYSED_ROWS + piece
    assert stalls > 0


def test_a_connection_past_4_gib_of_sequence_space_is_still_read_right():
    """Sequence numbers wrap (4 GiB sent): each round of the conversation 128 MiB further on
    in the client's sequence space (as if a bulk transfer not captured came between them),
    5 GiB over the connection. Carried by its Ledger past the window, the connection's
    packets are still new data and its stalls found, as in the whole-connection analysis."""
    copies = 40
    cols = long_connection(copies)
    n = len(cols["seq"])
    round_of = np.maximum(np.arange(n) - 3, 0) // ((n - 3) // copies)
    client = cols["sport"] == cols["sport"][0]
    jump = round_of.astype(np.int64) * (128 << 20)
    cols["seq"][client] = (cols["seq"][client].astype(np.int64) + jump[client]) % (1 << 32)
    acks = ~client & ((cols["flags"] & 0x10) != 0)
    cols["ack"][acks] = (cols["ack"][acks].astype(np.int64) + jump[acks]) % (1 << 32)
    assert int(jump.max()) > 1 << 32
    live = LiveAnalyzer(window_rows=32)
    events = []
    for at in range(0, n, 20):
        events += live.feed({k: v[at:at + 20] for k, v in cols.items()})
    from nagleprobe.detect import detect
    from nagleprobe.flows import build_flows

    assert live.pieced == 1
    want = detect(build_flows(long_connection(copies))).stalls["released_frame"]
    got = sorted(e["frames"][2] for e in events if e["event"] == "stall")
    assert got == sorted(want.tolist())


def test_a_packet_older_than_what_the_ledger_decided_is_left_out_and_told():
    """A long connection's packet that turns up after its Ledger decided about its time (a
    capture out of time order) cannot join it: it is left out, and the final report says
    how many were."""
    cols = long_connection(20)
    late = 40  # a data packet of the first rounds, fed last
    order = np.r_[np.arange(late), np.arange(late + 1, len(cols["frame"])), late]
    cols = {k: v[order] for k, v in cols.items()}
    live = LiveAnalyzer(window_rows=32)
    for at in range(0, len(cols["frame"]), 20):
        live.feed({k: v[at:at + 20] for k, v in cols.items()})
    assert live.late_in_pieces == 1
    final = live.final({"packets": len(cols["frame"]), "skipped": {}, "warnings": []})
    assert final["tcp_packets"] == len(cols["frame"])
    assert [w for w in final["warnings"] if w["text"].startswith("1 TCP packets arrived after")
            and w["code"] == "late-in-pieces" and w["count"] == 1]


def test_a_long_connection_let_go_of_is_judged_for_good_and_a_doubt_is_named():
    """Once a connection carried by a Ledger is let go of (here: idle), its Ledger judges it
    for good, and what may differ from the whole analysis is named in the final report's
    warnings: with no candidate kept one by one, the first one was judged before the
    later, shorter round trip that makes it a stall (tests/test_pieces.py)."""
    from test_pieces import later_round_trip  # (it imports this module)

    cols = later_round_trip()
    last = len(cols["frame"]) - 1
    other = {k: v[[last]].copy() for k, v in cols.items()}  # another connection, 2 s later
    other["sport"] += 1
    other["ts_ns"] += 2_000_000_000
    other["frame"] += 1
    live = LiveAnalyzer(window_rows=16, idle_s=1.0, piece_limits=Limits(kept_candidates=0))
    for at in range(len(cols["frame"])):
        live.feed({k: v[at:at + 1] for k, v in cols.items()})
    assert live.pieced == 1 and not live.inexact
    live.feed(other)
    assert live.pieced == 0
    final = live.final({"packets": last + 2, "skipped": {}, "warnings": []})
    assert any(w["text"].startswith("1 of the connections analysed in pieces may differ") and
               "verdicts of candidates judged before the final round trips" in w["text"]
               and w["code"] == "inexact-pieces" for w in final["warnings"])


def test_a_stall_a_later_round_trip_reveals_is_reported_though_its_rows_were_decided():
    """The Ledger keeps its candidates raw and judges them again with what it learns later:
    the first candidate of this conversation becomes a stall only once a much shorter round
    trip is seen, far beyond the window (tests/test_pieces.py); it is reported then, once,
    as the whole analysis finds it."""
    from test_pieces import later_round_trip  # (it imports this module)

    cols = later_round_trip()
    events, live = [], LiveAnalyzer(window_rows=16)
    for at in range(len(cols["frame"])):
        events += live.feed({k: v[at:at + 1] for k, v in cols.items()})
    want = analyze_whole_columns(cols)
    assert live.pieced == 1 and len(want) == 1
    assert [e["frames"] for e in events if e["event"] == "stall"] == want


def analyze_whole_columns(cols: dict[str, np.ndarray]) -> list[list[int]]:
    """The whole analysis' stalls of decoded columns, as [S1, late ACK, S2] frames."""
    from nagleprobe.detect import detect
    from nagleprobe.flows import build_flows

    st = detect(build_flows(cols)).stalls
    return [list(x) for x in zip(st["small_frame"].tolist(), st["ack_frame"].tolist(),
                                 st["released_frame"].tolist())]


def test_a_4tuple_opened_again_while_carried_by_a_ledger():
    """A long connection that never closed, then a SYN with a new initial sequence number on
    its 4-tuple: the first connection is judged for good, the second starts anew (held
    whole, then carried by its own Ledger), and every stall of both is reported once."""
    first, second = long_connection(10), long_connection(10)
    client = second["sport"] == second["sport"][0]
    acked = (second["flags"] & 0x10) != 0
    second["seq"] = ((second["seq"].astype(np.int64) + np.where(client, 12345, 777))
                     % (1 << 32)).astype(second["seq"].dtype)
    second["ack"] = np.where(acked, (second["ack"].astype(np.int64)
                                     + np.where(client, 777, 12345)) % (1 << 32),
                             second["ack"]).astype(second["ack"].dtype)
    second["ts_ns"] += first["ts_ns"][-1] + 1_000_000_000 - second["ts_ns"][0]
    second["frame"] += first["frame"][-1]
    cols = {k: np.concatenate([first[k], second[k]]) for k in first}
    events, live = [], LiveAnalyzer(window_rows=32)
    for at in range(0, len(cols["frame"]), 20):
        events += live.feed({k: v[at:at + 20] for k, v in cols.items()})
    want = analyze_whole_columns(cols)
    got = [e["frames"] for e in events if e["event"] == "stall"]
    assert len(want) == 380 and live.pieced == 1
    assert sorted(got) == sorted(want)


def test_summaries_count_the_stalls_of_each_period_and_the_final_report_all():
    cmd = [sys.executable, "-m", "nagleprobe", "watch", "--format", "jsonl",
           "--summary-every", "1", str(SAMPLES / "long_echo_split_rtt80_client.pcap")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    events = [json.loads(x) for x in out.splitlines()]
    stalls = [e for e in events if e["event"] == "stall"]
    summaries = [e for e in events if e["event"] == "summary"]
    final = events[-1]
    assert final["event"] == "final" and final["stalls"] == len(stalls) == 19
    assert len(summaries) >= 3  # the conversation lasts longer than 3 s
    assert sum(s["stalls"] for s in summaries) == 19
    assert {"time", "flow", "client", "server", "sender", "endpoint", "delay_ms",
            "peer_ack_delay_ms", "frames", "confidence"} <= set(stalls[0])
    # each summary comes right after the stalls of its period: those released before its
    # time (read at once from a file, every stall is counted in the period of its S2)
    since: list[dict] = []
    for e in events:
        if e["event"] == "stall":
            since.append(e)
        elif e["event"] == "summary":
            assert e["stalls"] == len(since)
            assert all(x["time"] <= e["time"] for x in since)
            assert e["lost_ms"] == pytest.approx(sum(x["delay_ms"] for x in since), abs=0.01)
            since = []


def _interruptible() -> None:
    """In the child: Ctrl-C (SIGINT) as in a terminal's foreground job, even when the tests
    run in the background of a shell (which starts its background jobs ignoring SIGINT, and
    Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def watch_proc(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nagleprobe", "watch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible, **kw)


def read_lines(proc: subprocess.Popen, into: list) -> threading.Thread:
    """Collect (arrival time, line) of the process's output in a thread."""
    def run() -> None:
        for text in proc.stdout:
            into.append((time.monotonic(), text))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_for(cond, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_follow_reads_a_growing_file_with_a_record_cut_at_its_end(tmp_path):
    """--follow: the stalls of what has been written come out while the file is still
    being written, even when it ends in the middle of a record; Ctrl-C gives the final
    report and exit status 0."""
    raw = (SAMPLES / "echo_split_lo.pcap").read_bytes()
    recs = pcap_records(raw)
    cut = recs[60][0] + 7  # 7 bytes into the header of record 61
    path = tmp_path / "growing.pcap"
    path.write_bytes(raw[:cut])
    lines: list = []
    proc = watch_proc("--follow", str(path), "--format", "jsonl")
    reader = read_lines(proc, lines)
    try:
        assert wait_for(lambda: len(lines) >= 10), "no stall lines while the file grows"
        first_part = [json.loads(x) for _, x in lines]
        assert all(e["frames"][2] <= 60 for e in first_part)
        with open(path, "ab") as f:
            f.write(raw[cut:])
        assert wait_for(lambda: len(lines) >= 19)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
    reader.join(5)
    events = [json.loads(x) for _, x in lines]
    assert events[-1]["event"] == "final" and events[-1]["stalls"] == 19
    assert sorted(e["frames"][2] for e in events if e["event"] == "stall") == sorted(
        whole(SAMPLES / "echo_split_lo.pcap"))


def blocked_opening_a_fifo(pid: int) -> bool:
    """Whether the process sleeps in open() of a FIFO that nobody writes (Linux's wchan);
    where the kernel hides wchan, after two seconds (the child has long reached open())."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        wchan = "0"
    if wchan in ("", "0"):
        time.sleep(2)
        return True
    return wchan == "wait_for_partner"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("follow", [False, True], ids=["CAPTURE", "--follow"])
def test_a_stop_while_waiting_for_a_fifo_writer_gives_the_final_report(tmp_path, sig, follow):
    """Opening a FIFO nobody has opened for writing blocks; Ctrl-C or a service manager's
    SIGTERM then still gives the final report (of nothing) and exit status 0."""
    import os

    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    proc = watch_proc(*(["--follow"] if follow else []), str(fifo))
    try:
        assert wait_for(lambda: blocked_opening_a_fifo(proc.pid)), "never reached open()"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.startswith("watch ended: 0 packets read, 0 TCP in 0 connections; 0 stalls")
    assert err == ""


@pytest.mark.parametrize("args,status,says", [
    ((), 2, "give one input"),
    (("-", "-i", "lo"), 2, "give one input"),
    (("--filter", "tcp", "-"), 2, "--filter needs -i"),
    (("no-such.pcap",), 3, "no-such.pcap: No such file"),
    (("README.md",), 3, "not a pcap or pcapng capture"),
    (("-i", "no-such-if0"), 5, ""),
])
def test_bad_input_is_one_line_and_an_exit_status(args, status, says):
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "watch", *args], cwd=root,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == status, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr
    assert "Traceback" not in proc.stderr


def test_stdin_stream_gives_each_stall_line_then_the_final_report():
    raw = (SAMPLES / "server_split_lo.pcap").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "watch", "-"], input=raw,
                          capture_output=True, check=True)
    text = proc.stdout.decode().splitlines()
    stalls = [x for x in text if " stall flow " in x]
    assert len(stalls) == len(whole(SAMPLES / "server_split_lo.pcap")) > 0
    assert any(x.startswith("watch ended: ") for x in text)


def test_live_capture_reports_stalls_before_the_client_finishes():
    """Real traffic: tcpdump on loopback (watch -i lo) while a split-write client runs; its
    stall lines arrive before the client has finished."""
    require_capture()
    port = free_port()
    lines: list = []
    proc = watch_proc("-i", "lo", "--filter", f"tcp port {port}", "--format", "jsonl")
    reader = read_lines(proc, lines)
    try:
        said = proc.stderr.readline()  # once tcpdump listens (or the error)
        assert "watching lo" in said, said
        client = subprocess.run([sys.executable, SPLITWRITE, "--port", str(port),
                                 "--requests", "60"], capture_output=True, text=True,
                                check=True)
        finished = time.monotonic()
        truth = json.loads(client.stdout)
        assert wait_for(lambda: len(lines) >= 20, 10)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
    reader.join(5)
    events = [(t, json.loads(x)) for t, x in lines]
    stalls = [(t, e) for t, e in events if e["event"] == "stall"]
    early = [e for t, e in stalls if t < finished]
    assert len(early) >= 10, f"{len(early)} of {len(stalls)} stall lines before the client ended"
    assert all(e["sender"] == "client" and 25 <= e["peer_ack_delay_ms"] <= 600 for _, e in stalls)
    slow = sum(1 for ms in truth["latency_ms"] if ms >= 25)
    assert abs(len(stalls) - slow) <= 2
    assert events[-1][1]["event"] == "final"


WATCH_SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "nagleprobe" / "schema"
                           / "watch-events.schema.json").read_text())


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "proxy_any.pcap", "bridge_any.pcap",
                                  "formats/port_reuse.pcap"])
def test_every_jsonl_event_has_the_schema_shipped_in_the_package(name):
    import jsonschema

    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "watch", "--format", "jsonl",
                           "--summary-every", "0.2", str(SAMPLES / name)],
                          capture_output=True, text=True, check=True)
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    assert {e["event"] for e in events} == {"stall", "summary", "final"}
    for e in events:
        jsonschema.validate(e, WATCH_SCHEMA)


def test_the_docs_name_every_field_of_the_jsonl_events():
    page = (Path(__file__).resolve().parent.parent / "docs" / "fleets-live.md").read_text()
    section = page.split("## Live traffic: `nagleprobe watch`", 1)[1].split("\n## ", 1)[0]
    for kind in WATCH_SCHEMA["oneOf"]:
        for name in kind["properties"]:
            assert f"`{name}`" in section or name == "event", name
