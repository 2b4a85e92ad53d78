"""Fleets: `analyze_many` and `check --dask` on a real Dask cluster (a
`distributed.LocalCluster` of 2 worker processes, one for this module) give the local run's
verdicts and tables; a capture that fails on a worker gets its ERROR verdict and the others
go on; a scheduler that cannot be reached is a one-line usage error within seconds."""

from __future__ import annotations

import gzip
import io
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import nagleprobe
from httpserve import serve
from nagleprobe.check import Budget, expand_targets, run_check
from nagleprobe.cli import main
from nagleprobe.errors import ExitStatus
from nagleprobe.fleet import DASK_TIMEOUT_S, SchedulerError, analyze_many, connect
from nagleprobe.progress import FleetProgress

distributed = pytest.importorskip("distributed", reason="fleets need the dask extra")

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples"
SPLIT = str(SAMPLES / "echo_split_lo.pcap")
NODELAY = str(SAMPLES / "echo_nodelay_lo.pcap")
PROXY = str(SAMPLES / "proxy_any.pcap")
EMPTY = str(HERE / "broken" / "empty.pcap")
NOT_A_CAPTURE = str(HERE / "broken" / "not_a_capture.txt")
GZIP_CUT = str(HERE / "broken" / "pcap_gzip_cut.pcap.gz")
MISSING = str(SAMPLES / "no-such-capture.pcap")
FLEET = [SPLIT, EMPTY, NODELAY, NOT_A_CAPTURE, PROXY, GZIP_CUT, MISSING,
         str(SAMPLES / "long_echo_split_rtt80_middle.pcap")]


@pytest.fixture(scope="module")
def cluster():
    """A real LocalCluster: 2 worker processes, one thread each (slow to start: one per
    module). Yields (client, scheduler address)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        yield client, lc.scheduler_address


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gate(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["check", "--no-config", *args])
    return r.exit_code, r.stdout, r.stderr


# ------------------------------------------------------------------ same verdicts as local
def test_the_cluster_gives_the_local_run_s_verdicts_documents_and_tables(cluster):
    client, _ = cluster
    local = run_check(FLEET, Budget(), jobs=2, with_documents=True)
    remote = run_check(FLEET, Budget(), client=client, with_documents=True)
    assert remote.to_dict() == local.to_dict()
    assert [v.status for v in remote.verdicts] == [
        ExitStatus.STALLS_FOUND, ExitStatus.BAD_CAPTURE, ExitStatus.OK,
        ExitStatus.BAD_CAPTURE, ExitStatus.STALLS_FOUND, ExitStatus.STALLS_FOUND,
        ExitStatus.BAD_CAPTURE, ExitStatus.STALLS_FOUND]
    assert remote.status == ExitStatus.BAD_CAPTURE


def test_analyze_many_on_the_cluster_equals_the_local_pool_and_the_single_analyses(cluster):
    client, _ = cluster
    on_cluster = analyze_many(FLEET, client=client)
    local = analyze_many(FLEET)
    for name in ("flows", "stalls", "endpoints"):
        assert getattr(on_cluster, name).equals(getattr(local, name)), name
    assert on_cluster.verdicts.drop(columns="seconds").equals(
        local.verdicts.drop(columns="seconds"))
    assert [v.to_dict() for v in on_cluster.run.verdicts] == [
        v.to_dict() for v in local.run.verdicts]
    # the combined tables are the single analyses' tables, each under its capture's path
    readable = local.verdicts.loc[local.verdicts["error"].isna(), "capture"].tolist()
    assert readable == [p for p in FLEET if p not in (EMPTY, NOT_A_CAPTURE, MISSING)]
    assert list(on_cluster.stalls["capture"].unique()) == [
        p for p in readable if len(nagleprobe.analyze(p).stalls)]
    for p in readable:
        alone = nagleprobe.analyze(p)
        mine = on_cluster.stalls[on_cluster.stalls["capture"] == p].drop(columns="capture")
        assert mine.reset_index(drop=True).equals(alone.stalls.reset_index(drop=True))
        assert (on_cluster.flows["capture"] == p).sum() == len(alone.flows)
    assert on_cluster.flows.columns[0] == "capture"
    assert on_cluster.failed["capture"].tolist() == [EMPTY, NOT_A_CAPTURE, MISSING]


def test_analyze_many_connects_to_a_scheduler_address_given_as_text(cluster):
    _, address = cluster
    fleet = analyze_many([SPLIT, PROXY], client=address)
    assert fleet.verdicts["stalls"].tolist() == [19, len(nagleprobe.analyze(PROXY).stalls)]
    assert repr(fleet).startswith("<nagleprobe.Fleet: 2 captures, 0 failed")


def test_check_dask_prints_the_local_verdicts_and_exits_with_the_local_status(cluster):
    _, address = cluster
    code, out, _ = gate("--dask", address, *FLEET)
    local_code, local_out, _ = gate(*FLEET)
    assert (code, out) == (local_code, local_out)
    assert code == ExitStatus.BAD_CAPTURE
    lines = out.splitlines()
    assert f"ERROR {EMPTY}: empty file" in lines
    assert f"ERROR {MISSING}: no such file" in lines
    assert any(line.startswith(f"PASS {NODELAY}") for line in lines)
    assert lines[-1].startswith("nagleprobe check: 8 captures: 1 within budget, 4 over "
                                "budget, 3 unreadable")


def test_relative_paths_are_read_by_workers_in_other_directories_and_named_as_given(
        cluster, monkeypatch):
    client, _ = cluster
    monkeypatch.chdir(SAMPLES)  # the workers' directory stays where they started
    run = run_check(["echo_split_lo.pcap", "../tests/broken/empty.pcap"], Budget(),
                    client=client, with_documents=True)
    assert [v.path for v in run.verdicts] == ["echo_split_lo.pcap", "../tests/broken/empty.pcap"]
    assert run.verdicts[0].stalls == 19
    assert run.verdicts[0].document["capture"]["path"] == "echo_split_lo.pcap"
    assert run.verdicts[1].error == "../tests/broken/empty.pcap: empty file"


def test_workers_read_captures_by_url_themselves(cluster, tmp_path):
    client, _ = cluster
    shutil.copy(SPLIT, tmp_path / "a.pcap")
    (tmp_path / "b.pcap.gz").write_bytes(gzip.compress(Path(PROXY).read_bytes()))
    with serve(tmp_path) as (base, seen):
        urls = [f"{base}/a.pcap", f"{base}/b.pcap.gz", f"{base}/gone.pcap"]
        fleet = analyze_many(urls, client=client)
    assert fleet.verdicts["exit_status"].tolist() == [
        ExitStatus.STALLS_FOUND, ExitStatus.STALLS_FOUND, ExitStatus.BAD_CAPTURE], \
        fleet.verdicts["error"].tolist()
    assert fleet.verdicts["error"].iloc[2] == f"{base}/gone.pcap: no such file"
    local = analyze_many([SPLIT, PROXY])
    assert fleet.stalls.drop(columns="capture").equals(local.stalls.drop(columns="capture"))
    assert ("GET", "/b.pcap.gz", None) in seen


def test_a_task_the_cluster_cannot_run_is_that_capture_s_internal_error(cluster):
    client, _ = cluster
    futures = {client.submit(_crash, pure=False): 0}  # a worker-side failure
    verdicts = []
    from nagleprobe.check import Target, _collect

    _collect(futures, distributed.as_completed(list(futures), loop=client.loop),
             [Target("x.pcap")], lambda i, v: verdicts.append(v),
             lambda e: f"the Dask task failed: {type(e).__name__}: {e}")
    assert verdicts[0].status == ExitStatus.INTERNAL
    assert verdicts[0].error == "x.pcap: the Dask task failed: OSError: worker lost its disk"


def _crash() -> None:
    raise OSError("worker lost its disk")


# ------------------------------------------------------------------ the verdicts table
def test_verdicts_are_a_table_one_row_per_capture_in_the_order_given():
    fleet = analyze_many([SPLIT, EMPTY, NODELAY], jobs=1)
    v = fleet.verdicts
    assert list(v.columns) == ["capture", "status", "exit_status", "stalls", "stall_ms",
                               "flows", "flows_selected", "ignored_stalls", "packets",
                               "seconds", "reasons", "error", "warnings"]
    assert v["capture"].tolist() == [SPLIT, EMPTY, NODELAY]
    assert v["status"].tolist() == ["fail", "unreadable", "pass"]
    assert v["exit_status"].tolist() == [1, 3, 0]
    assert v["stalls"].tolist() == [19, 0, 0]
    assert v["error"].tolist()[1] == f"{EMPTY}: empty file" and v["error"].isna().tolist() == [
        True, False, True]
    assert v["packets"].iloc[0] == nagleprobe.analyze(SPLIT).capture["packets"]
    assert fleet.failed["capture"].tolist() == [EMPTY]
    assert [c.path for c in fleet.run.verdicts] == [SPLIT, EMPTY, NODELAY]  # the dataclasses
    assert len(repr(fleet)) < 100


# ------------------------------------------------------------------ no scheduler
def test_an_unreachable_scheduler_is_a_one_line_usage_error_within_the_timeout():
    address = f"tcp://127.0.0.1:{closed_port()}"
    t0 = time.monotonic()
    code, out, err = gate("--dask", address, SPLIT)
    took = time.monotonic() - t0
    assert code == ExitStatus.USAGE
    assert out == ""
    assert err.startswith(f"nagleprobe: error: cannot reach the Dask scheduler at {address}")
    assert err.count("\n") == 1
    assert took < DASK_TIMEOUT_S + 5


def test_a_server_that_is_not_a_dask_scheduler_is_refused_within_the_timeout(tmp_path):
    with serve(tmp_path) as (base, _):  # an HTTP server: accepts, never speaks Dask
        address = "tcp://" + base.removeprefix("http://")
        t0 = time.monotonic()
        with pytest.raises(SchedulerError, match=f"{address}"):
            connect(address, timeout=2)
        assert time.monotonic() - t0 < 2 + 5


def test_a_malformed_address_is_a_one_line_usage_error():
    code, _, err = gate("--dask", "no-port-here", SPLIT)
    assert code == ExitStatus.USAGE
    assert err.startswith("nagleprobe: error: cannot reach the Dask scheduler at no-port-here")
    assert err.count("\n") == 1


def test_dask_not_installed_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    code, _, err = gate("--dask", "tcp://127.0.0.1:8786", SPLIT)
    assert code == ExitStatus.USAGE
    assert err == ("nagleprobe: error: --dask needs dask.distributed: pip install "
                   "'nagleprobe[dask]'\n")


# ------------------------------------------------------------------ progress
def test_progress_counts_captures_packets_and_failures():
    out = io.StringIO()
    bar = FleetProgress(3, out=out, interval=0, in_place=False, delay=0)
    run_check([SPLIT, EMPTY, PROXY], Budget(), jobs=1, progress=bar)
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "nagleprobe: 1 of 3 captures", "nagleprobe: 2 of 3 captures",
        "nagleprobe: 3 of 3 captures"]
    assert lines[-1].endswith(", 1 failed")
    assert bar.packets == (nagleprobe.analyze(SPLIT).capture["packets"]
                           + nagleprobe.analyze(PROXY).capture["packets"])
    assert "ETA" in lines[0] and "ETA" not in lines[-1]


def test_progress_line_shows_the_rate():
    bar = FleetProgress(200, out=io.StringIO())
    bar.done, bar.packets, bar.failed = 50, 3_000_000, 2
    assert bar.line(2.0) == "50 of 200 captures, 1.50 M packets/s, 2 failed, ETA 0:06"
    bar.packets = 1000
    assert bar.line(2.0).startswith("50 of 200 captures, 500 packets/s")


def test_check_progress_flag_writes_to_stderr_and_leaves_stdout_alone():
    code, out, err = gate("--progress", SPLIT, NODELAY)
    quiet_code, quiet_out, quiet_err = gate(SPLIT, NODELAY)
    assert (code, out) == (quiet_code, quiet_out)
    assert "2 of 2 captures" in err and "0 failed" in err
    assert quiet_err == ""


def test_expand_targets_keeps_urls_for_the_workers():
    t = expand_targets(["https://example.invalid/caps/a.pcap?sig=x", SPLIT])
    assert [x.path for x in t] == ["https://example.invalid/caps/a.pcap?sig=x", SPLIT]
    assert all(x.problem is None for x in t)


def test_the_combined_tables_are_the_reports_tables_each_under_its_capture_dtypes_too():
    import pandas as pd

    fleet = analyze_many(FLEET, jobs=2)
    readable = [p for p in FLEET if p not in (EMPTY, NOT_A_CAPTURE, MISSING)]
    for name in ("flows", "stalls", "endpoints"):
        parts = []
        for p in readable:
            t = getattr(nagleprobe.analyze(p), name).copy()
            t.insert(0, "capture", p)
            parts.append(t)
        pd.testing.assert_frame_equal(getattr(fleet, name), pd.concat(parts, ignore_index=True))
    none = analyze_many([EMPTY, MISSING], jobs=2)
    assert list(none.stalls.columns) == ["capture"] and len(none.stalls) == 0
