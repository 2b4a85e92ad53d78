"""Captures by URL: a real HTTP server on 127.0.0.1 (http.server in a thread) serves the
bundled captures, plain and gzip, and the analysis by URL equals the local file's; fsspec's
other protocols (memory://) through the same layer; missing packages and unreachable
servers are one-line errors naming the URL; a server that stalls or goes silent is one
after the time-out, one that cuts the body short a truncated capture."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import nagleprobe
from httpserve import serve, serve_badly
from nagleprobe.check import Budget, expand_targets, run_check
from nagleprobe.cli import main
from nagleprobe.errors import CaptureError, ExitStatus
from nagleprobe.read import URL_TIMEOUT_S

pytest.importorskip("fsspec", reason="URLs need the remote extra (fsspec, aiohttp)")
pytest.importorskip("aiohttp", reason="http(s) URLs need aiohttp (the remote extra)")

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples"
SPLIT = SAMPLES / "echo_split_lo.pcap"
PROXY = SAMPLES / "proxy_any.pcap"
GZIP_CUT = HERE / "broken" / "pcap_gzip_cut.pcap.gz"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, served directory, requests seen): the sample captures, plain and gzip."""
    root = tmp_path_factory.mktemp("www")
    for src in (SPLIT, PROXY, GZIP_CUT):
        shutil.copy(src, root / src.name)
    for src in (SPLIT, PROXY):
        (root / (src.name + ".gz")).write_bytes(gzip.compress(src.read_bytes()))
    with serve(root) as (base, seen):
        yield base, root, seen


def without_path(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["capture"].pop("path")
    return doc


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "echo_split_lo.pcap.gz",
                                  "proxy_any.pcap", "proxy_any.pcap.gz"])
def test_a_capture_by_http_url_gives_the_local_file_s_report(served, name):
    base, root, _ = served
    remote = nagleprobe.analyze(f"{base}/{name}")
    local = nagleprobe.analyze(str(root / name))
    assert remote.capture["path"] == f"{base}/{name}"
    assert remote.capture["compressed"] == name.endswith(".gz")
    assert without_path(remote.to_dict()) == without_path(local.to_dict())
    assert len(remote.stalls) == len(local.stalls) > 0


def test_http_is_read_as_one_streamed_response_not_ranges_or_a_download_first(served):
    base, _, seen = served
    seen.clear()
    nagleprobe.analyze(f"{base}/proxy_any.pcap.gz")
    # one request: no HEAD first (a silent server costs one time-out), no ranges
    assert seen == [("GET", "/proxy_any.pcap.gz", None)]


def test_a_damaged_capture_by_url_is_analysed_up_to_its_damage_as_the_local_file(served):
    base, root, _ = served
    remote = nagleprobe.analyze(f"{base}/{GZIP_CUT.name}")
    local = nagleprobe.analyze(str(root / GZIP_CUT.name))
    assert remote.capture["warnings"] == local.capture["warnings"]
    assert any("gzip" in w for w in remote.capture["warnings"])
    with pytest.raises(CaptureError, match="truncated capture: the gzip stream ends"):
        nagleprobe.analyze(f"{base}/{GZIP_CUT.name}", strict=True)


def test_the_cli_analyses_a_url_and_prints_the_local_report_under_the_url(served):
    base, root, _ = served
    url = f"{base}/echo_split_lo.pcap.gz"
    remote = CliRunner().invoke(main, ["analyze", url])
    local = CliRunner().invoke(main, ["analyze", str(root / "echo_split_lo.pcap.gz")])
    assert remote.exit_code == 0, remote.output
    assert remote.output.splitlines()[0].startswith(f"{url}: pcap (gzip), EN10MB, 107 packets")
    # everything after the first line (which names the file, and wraps by its length)
    body = remote.output.split("\n\n", 1)[1]
    assert body == local.output.split("\n\n", 1)[1]
    assert "19 stalls" in body


def test_a_missing_object_is_no_such_file(served):
    base, _, _ = served
    with pytest.raises(CaptureError, match=r"/nope\.pcap: no such file$"):
        nagleprobe.analyze(f"{base}/nope.pcap")
    r = CliRunner().invoke(main, ["analyze", f"{base}/nope.pcap"])
    assert r.exit_code == ExitStatus.BAD_CAPTURE
    assert r.output == f"nagleprobe: error: {base}/nope.pcap: no such file\n"


def test_a_server_that_refuses_the_connection_is_a_one_line_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/cap.pcap"
    r = CliRunner().invoke(main, ["analyze", url])
    assert r.exit_code == ExitStatus.BAD_CAPTURE
    assert r.output.startswith(f"nagleprobe: error: {url}: cannot read: ")
    assert "Traceback" not in r.output and r.output.count("\n") == 1


def test_check_reads_urls_and_gives_the_verdicts_of_the_local_files(served):
    base, root, _ = served
    names = ["echo_split_lo.pcap.gz", "proxy_any.pcap", "nope.pcap"]
    by_url = run_check([f"{base}/{n}" for n in names], Budget(), jobs=2)
    local = run_check([str(root / n) for n in names], Budget(), jobs=2)
    assert [v.status for v in by_url.verdicts] == [v.status for v in local.verdicts] == [
        ExitStatus.STALLS_FOUND, ExitStatus.STALLS_FOUND, ExitStatus.BAD_CAPTURE]
    assert [v.stalls for v in by_url.verdicts] == [v.stalls for v in local.verdicts]


def test_other_fsspec_protocols_and_object_store_patterns_work_the_same_way():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/fleet-test/2024/a.pcap", SPLIT.read_bytes())
    fs.pipe("/fleet-test/2024/b.pcap.gz", gzip.compress(PROXY.read_bytes()))
    fs.pipe("/fleet-test/2024/notes.txt", b"not a capture")
    try:
        targets = expand_targets(["memory://fleet-test/2024/*"])
        assert [t.path for t in targets] == ["memory:///fleet-test/2024/a.pcap",
                                             "memory:///fleet-test/2024/b.pcap.gz"]
        run = run_check(targets, Budget(), jobs=1)  # memory:// lives in this process only
        assert [v.stalls for v in run.verdicts] == [
            len(nagleprobe.analyze(str(SPLIT)).stalls), len(nagleprobe.analyze(str(PROXY)).stalls)]
        empty = expand_targets(["memory://fleet-test/none-*.pcap"])
        assert empty[0].problem == "no object matches this pattern"
    finally:
        fs.rm("/fleet-test", recursive=True)


def test_a_url_whose_fsspec_backend_is_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "s3fs", None)  # as if not installed
    with pytest.raises(CaptureError) as e:
        nagleprobe.analyze("s3://bucket/caps/cap.pcap.gz")
    assert str(e.value).startswith("s3://bucket/caps/cap.pcap.gz: reading s3:// URLs needs "
                                   "s3fs: pip install 'nagleprobe[remote]' s3fs")
    r = CliRunner().invoke(main, ["analyze", "s3://bucket/caps/cap.pcap.gz"])
    assert r.exit_code == ExitStatus.BAD_CAPTURE and r.output.count("\n") == 1


def test_a_url_without_fsspec_says_to_install_the_remote_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(CaptureError, match=r"reading https:// URLs needs fsspec: pip install "
                                           r"'nagleprobe\[remote\]'$"):
        nagleprobe.analyze("https://example.invalid/cap.pcap")


def test_local_paths_that_look_odd_are_still_local_files(tmp_path):
    odd = tmp_path / "http:" / "x.pcap"  # "http:/x.pcap" has no "//": a local path
    odd.parent.mkdir()
    shutil.copy(SPLIT, odd)
    assert len(nagleprobe.analyze(str(odd)).stalls) == 19


# ------------------------------------------------------------------ servers that misbehave
def nagleprobe_cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The command in a process of its own (all it writes to stderr is seen), and how long
    it took; killed after 60 s (a hang fails the test)."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "nagleprobe", *args], env=env,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return r, time.monotonic() - t0


def test_a_server_that_stops_sending_is_an_error_after_the_time_out():
    """Headers and 1,000 bytes, then silence: analyze used to wait past 75 s."""
    with serve_badly(SPLIT.read_bytes(), send=1000) as url:
        r, took = nagleprobe_cli("analyze", "--url-timeout", "1", url)
    assert r.returncode == ExitStatus.BAD_CAPTURE
    assert r.stderr == (f"nagleprobe: error: {url}: cannot read: timed out: the server sent "
                        "nothing for 1 s (after 1,000 bytes)\n")
    assert r.stdout == "" and took < 20


@pytest.mark.parametrize("answer_head", [True, False], ids=["silent-get", "silent-head"])
def test_a_server_that_never_answers_fails_check_in_one_line(answer_head):
    with serve_badly(SPLIT.read_bytes(), send=-1, answer_head=answer_head) as url:
        r, took = nagleprobe_cli("check", "--no-config", "--url-timeout", "0.5", url)
    assert r.returncode == ExitStatus.BAD_CAPTURE, r.stdout + r.stderr
    assert f"ERROR {url}: cannot read: timed out: the server sent nothing for 0.5 s" in r.stdout
    assert "Traceback" not in r.stderr and "Unclosed" not in r.stderr and took < 20


def test_the_library_takes_the_time_out_as_a_keyword():
    with serve_badly(SPLIT.read_bytes(), send=1000) as url:
        t0 = time.monotonic()
        with pytest.raises(CaptureError, match=r"timed out: the server sent nothing for 0\.5 s"):
            nagleprobe.analyze(url, url_timeout=0.5)
        assert time.monotonic() - t0 < 10
        verdict = run_check([url], Budget(), jobs=1, url_timeout=0.5).verdicts[0]
    assert verdict.status == ExitStatus.BAD_CAPTURE and "timed out" in verdict.error


def test_the_default_time_out_is_the_documented_one():
    assert URL_TIMEOUT_S == 30
    assert "[default: 30.0; x>0]" in " ".join(CliRunner().invoke(main, ["analyze", "--help"])
                                         .output.split())
    page = " ".join((HERE.parent / "docs" / "formats.md").read_text().split())
    assert "`--url-timeout SECONDS` (default 30;" in page


@pytest.mark.parametrize("sent", [5000, 9334 - 16], ids=["mid-capture", "last-record"])
def test_a_body_cut_short_is_analysed_up_to_the_cut_with_a_warning(sent):
    """The server announces the whole capture (Content-Length) and closes the connection
    after `sent` bytes: the records that arrived are analysed, as for a cut file."""
    raw = SPLIT.read_bytes()
    assert len(raw) == 9334
    with serve_badly(raw, send=sent, close=True) as url:
        report = nagleprobe.analyze(url)
        with pytest.raises(CaptureError, match="truncated"):
            nagleprobe.analyze(url, strict=True)
        r, _ = nagleprobe_cli("analyze", url)
    local = nagleprobe.analyze(SPLIT)
    complete = 57 if sent == 5000 else 106
    assert report.capture["packets"] == complete
    assert len(report.stalls) == len(local.stalls[local.stalls["released_frame"] <= complete])
    assert report.capture["warnings"][-1] == (
        f"truncated download: the server closed the connection after {sent:,} of the 9,334 "
        f"bytes its Content-Length announced (byte {sent} of the download); analysed the "
        f"{complete} complete packet records")
    assert r.returncode == 0 and r.stdout.startswith(f"{url}: pcap, EN10MB, {complete} packets")
