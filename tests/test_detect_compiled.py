"""The compiled evidence chain (nagleprobe/_detect.c) gives exactly what detect's numpy
version gives: on every real capture in samples/ and on random conversations."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nagleprobe.detect
from columns import Conversation, event_strategy, packets, play
from nagleprobe.decode import TCP_COLUMNS, decode
from nagleprobe.detect import detect
from nagleprobe.flows import build_flows
from nagleprobe.read import CaptureReader

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))
pytestmark = pytest.mark.skipif(nagleprobe.detect._compiled is None,
                                reason="nagleprobe._detect not built (no C compiler at install)")


def assert_same_detection(cols: dict[str, np.ndarray]) -> int:
    """detect with the compiled chain and with numpy alone agree in every output; returns
    how many stalls they found."""
    f = build_flows(cols)
    got = detect(f)
    kept, nagleprobe.detect._compiled = nagleprobe.detect._compiled, None
    try:
        want = detect(f)
    finally:
        nagleprobe.detect._compiled = kept
    for events in ("stalls", "holds"):
        g, w = getattr(got, events), getattr(want, events)
        assert list(g) == list(w)
        for k in w:
            assert g[k].dtype == w[k].dtype, (events, k)
            assert np.array_equal(g[k], w[k]), (events, k)
    for k in ("nagle_off_proofs", "not_classic_proofs", "held_behind_small", "held_behind_full",
              "flavour", "late_acks", "late_ack_median_ms", "quick_acks", "why_not", "answered"):
        a, b = getattr(got, k), getattr(want, k)
        assert a.dtype == b.dtype, k
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), k
    return len(want.stalls["flow"])


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_compiled_chain_equals_numpy_on_every_real_capture(path):
    skipped = Counter()
    parts = [decode(b, skipped) for b in CaptureReader(str(path))]
    assert_same_detection({k: np.concatenate([p[k] for p in parts]) for k in TCP_COLUMNS})


def test_the_real_captures_give_the_comparison_stalls_to_compare():
    found = 0
    for path in CAPTURES:
        parts = [decode(b, Counter()) for b in CaptureReader(str(path))]
        cols = {k: np.concatenate([p[k] for p in parts]) for k in TCP_COLUMNS}
        found += len(detect(build_flows(cols)).stalls["flow"])
    assert found >= 100


EVENT = event_strategy()


@settings(max_examples=300, deadline=None)
@given(conversations=st.lists(st.tuples(st.booleans(), st.sampled_from([0.05, 2.0, 30.0]),
                                        st.lists(EVENT, min_size=1, max_size=40)),
                              min_size=1, max_size=3))
def test_compiled_chain_equals_numpy_on_random_conversations(conversations):
    """Synthetic: small writes answered by ACKs after delays around the delayed-ACK timers
    and the round trip (often the stall's shape), other writes and ACKs, retransmissions and
    zero windows, with and without a handshake."""
    rows = []
    for j, (handshake, rtt, events) in enumerate(conversations):
        conv = Conversation(f"10.0.0.1:{40000 + j}", "10.0.0.2:8000", mss=1448)
        play(conv, conv.handshake(0.0, rtt) if handshake else 0.0, events)
        rows += conv.rows
    for i, r in enumerate(rows, 1):
        r["frame"] = i
    assert_same_detection(packets(rows))



@pytest.mark.parametrize("flow, direction", [([0, 1, 0], [0, 1, 0]), ([0, 0, 0], [0, 2, 0]),
                                             ([-1, 0, 0], [0, 1, 0]), ([0, 0, 1], [0, 1, 0])],
                         ids=["unsorted", "dir", "negative", "beyond"])
def test_compiled_chain_refuses_inconsistent_columns(flow, direction):
    """Rows out of flow order, a direction not 0/1, or a flow beyond the MSS table (one flow
    here) are a ValueError, not a read out of bounds."""
    conv = Conversation("10.0.0.1:40000", "10.0.0.2:8000")
    conv.handshake(0)
    f = build_flows(conv.columns())
    assert len(f.seg["flow"]) == 3
    f.seg["flow"] = np.array(flow, dtype=np.int64)
    f.seg["dir"] = np.array(direction, dtype=np.int8)
    with pytest.raises(ValueError, match="inconsistent"):
        nagleprobe.detect._chain_compiled(f, np.ones(2, dtype=np.int64))
