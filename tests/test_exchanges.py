"""exchanges: request/response turns and the latency the stalls cost, held to the apps' own
logs. Captured at the client, each exchange's latency is what the client measured for that
request (samples' sidecars: the client's per-request latency, time.monotonic_ns or
std::time::Instant, never computed by nagleprobe)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nagleprobe
from nagleprobe.exchanges import COLUMNS, exchanges, latency_summary

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
AT_THE_CLIENT = ["echo_split_lo", "echo_nodelay_lo", "echo_coalesced_lo", "neg_quickack_lo",
                 "server_split_lo", "long_echo_split_rtt80_client",
                 "long_server_split_rtt80_client", "confirm_netns_client"]


@pytest.mark.parametrize("name", AT_THE_CLIENT)
def test_each_exchange_lasts_what_the_client_measured_for_its_request(name):
    logged = json.loads((SAMPLES / f"{name}.expected.json").read_text())["latency_ms"]
    report = nagleprobe.analyze(str(SAMPLES / f"{name}.pcap"))
    ex = report.exchanges
    assert len(ex) == len(logged)
    assert np.abs(ex["latency_ms"].to_numpy() - np.array(logged)).max() < 0.5
    assert ex["stalls"].sum() == len(report.stalls)  # every stall held up one request


def test_without_the_stalls_a_stalled_request_takes_what_an_unstalled_one_does():
    ex = nagleprobe.analyze(str(SAMPLES / "echo_split_lo.pcap")).exchanges
    stalled = ex[ex["stalls"] > 0]
    assert len(stalled) == 19 and (stalled["latency_ms"] > 40).all()
    assert (stalled["latency_without_stalls_ms"] < 1).all()
    s = latency_summary(ex).loc[0]
    assert s["p99_ms"] > 40 and s["p99_ms_without_stalls"] < 1
    assert s["requests"] == 20 and s["stalled_share"] == pytest.approx(0.95)


def test_a_banner_and_an_unanswered_request_are_no_exchange():
    seg = pd.DataFrame({"flow": [0, 0, 0, 0, 0], "sender": ["server", "client", "server",
                                                            "client", "client"],
                        "time_s": [0.0, 0.1, 0.2, 0.3, 0.4], "payload": [10, 5, 7, 3, 4],
                        "retransmission": False, "keepalive": False})
    stalls = pd.DataFrame({"flow": [0], "released_s": [0.15], "delay_ms": [40.0]})
    ex = exchanges(seg, stalls)  # (synthetic: turns no stack is needed for)
    assert list(ex.columns) == list(COLUMNS)
    assert ex[["request_bytes", "response_bytes", "stalls"]].values.tolist() == [[5, 7, 1]]
    assert ex["latency_ms"].tolist() == pytest.approx([100.0])
    assert ex["latency_without_stalls_ms"].tolist() == pytest.approx([60.0])
