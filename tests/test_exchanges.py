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


LATENCY_SAMPLES = [*AT_THE_CLIENT, "long_server_split_rtt200_middle", "proxy_any",
                   "chain3_lo", "classic_bulk_tap", "messages/http1_lo", "messages/tls_lo",
                   "messages/dns_lo", "messages/postgres_lo"]


@pytest.mark.parametrize("name", LATENCY_SAMPLES)
def test_each_flow_s_percentiles_are_numpy_s_of_its_exchanges(name):
    """The flows table's latency columns are numpy's percentiles (linear) and maximum of the
    flow's rows of `report.exchanges`, with and without the stalls, rounded to the µs."""
    report = nagleprobe.analyze(str(SAMPLES / f"{name}.pcap"))
    ex, flows = report.exchanges, report.flows
    assert flows["requests"].sum() == len(ex)
    for i, f in flows.iterrows():
        mine = ex[ex["flow"] == i]
        assert f["requests"] == len(mine)
        if not len(mine):
            assert f["exchange_kind"] in ("one-way", "no data")
            assert np.isnan(f["latency_p99_ms"]) and np.isnan(f["stalled_requests_share"])
            continue
        assert f["exchange_kind"] == "request-response"
        for col, tag in (("latency_ms", ""), ("latency_without_stalls_ms", "_without_stalls")):
            v = mine[col].to_numpy()
            for p in (50, 90, 99):
                assert f[f"latency_p{p}_ms{tag}"] == round(float(np.percentile(v, p)), 3)
            assert f[f"latency_max_ms{tag}"] == round(float(v.max()), 3)
        assert f["stalled_requests_share"] == round(float((mine["stalls"] > 0).mean()), 4)


def test_a_bulk_transfer_is_one_way_and_no_latency_is_forced_on_it():
    report = nagleprobe.analyze(str(SAMPLES / "classic_bulk_tap.pcap"))
    (kind,) = report.flows["exchange_kind"]
    assert kind == "one-way" and len(report.exchanges) == 0 and len(report.stalls) > 0
    assert "no requests: its data went one way only" in report.to_text()


@pytest.mark.parametrize("name", ["echo_split_lo", "proxy_any", "long_echo_split_rtt80_client"])
def test_the_engine_s_exchanges_are_the_segments_table_s(name):
    """What the engine kept equals the exchanges rebuilt from the segments table (the one
    definition, `exchanges.exchanges`, on the report's segments and stalls)."""
    report = nagleprobe.analyze(str(SAMPLES / f"{name}.pcap"), keep_segments=True)
    again = exchanges(report.segments, report.stalls)
    pd.testing.assert_frame_equal(report.exchanges, again, rtol=1e-6)


def test_the_compiled_turns_are_the_numpy_turns(monkeypatch):
    from nagleprobe import exchanges as X

    flows = nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"), keep_segments=True).source
    compiled = X.segment_turns(flows.seg)
    monkeypatch.setattr(X, "_compiled", None)
    numpy_ = X.segment_turns(flows.seg)
    assert compiled.row_count > 10
    for k in X.TURN:
        np.testing.assert_array_equal(compiled[k], numpy_[k])


def test_the_latency_line_fits_80_columns_and_says_what_the_flow_table_says():
    report = nagleprobe.analyze(str(SAMPLES / "echo_split_lo.pcap"))
    f = report.flows.loc[0]
    from nagleprobe.humanize import human_ms

    line = (f"  {f['requests']} requests, {100 * f['stalled_requests_share']:.0f}% stalled: "
            f"p50 {human_ms(f['latency_p50_ms'])}, p99 {human_ms(f['latency_p99_ms'])} "
            f"({human_ms(f['latency_p99_ms_without_stalls'])} without the stalls)")
    assert line in report.to_text().splitlines()
    assert len(line) <= 80 and f["latency_p99_ms"] > 40 > 1 > f["latency_p99_ms_without_stalls"]


@pytest.mark.parametrize("name", ["formats/port_reuse", "proxy_any", "echo_split_lo"])
def test_each_endpoint_s_percentiles_are_those_of_every_flow_it_has(name):
    """The endpoints table's latency columns are `latency_summary` of the exchanges grouped by
    the endpoint (port_reuse: one server answering two connections' requests), the server's
    in its JSON endpoint object."""
    report = nagleprobe.analyze(str(SAMPLES / f"{name}.pcap"))
    ex, ep = report.exchanges, report.endpoints
    for side in ("client", "server"):
        of = report.flows[side]
        want = latency_summary(ex, by=of.loc[ex["flow"]].reset_index(drop=True))
        rows = ep[ep["side"] == side]
        for _, e in rows.iterrows():
            if e["endpoint"] not in want.index:
                assert e["requests"] == 0
                continue
            w = want.loc[e["endpoint"]]
            assert e["requests"] == w["requests"] == (of.loc[ex["flow"]] == e["endpoint"]).sum()
            for p in ("p50", "p90", "p99", "max"):
                for tag in ("", "_without_stalls"):
                    assert e[f"latency_{p}_ms{tag}"] == round(float(w[f"{p}_ms{tag}"]), 3)
    if name == "formats/port_reuse":
        server = ep[ep["side"] == "server"]
        assert server["requests"].tolist() == [len(ex)] * 2 and report.flows["requests"].min() > 0
    (f, *_) = report.to_dict()["flows"]
    assert f["endpoints"]["server"]["latency_p99_ms"] == ep.loc[1, "latency_p99_ms"]


def test_a_selection_has_its_flows_exchanges():
    report = nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"))
    for sub, flows in ((report.flow(1), [1]), (report.select(port=8002), [1]),
                       (report.worst(2), [1])):  # (flow 0 has no stall)
        pd.testing.assert_frame_equal(
            sub.exchanges.reset_index(drop=True),
            report.exchanges[report.exchanges["flow"].isin(flows)].reset_index(drop=True))
