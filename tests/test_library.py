"""The library and its optional parts: analyze() on file objects, a one-line repr, and what
happens without matplotlib (the `plot` extra): the plot module says how to install it, and
--html writes the report without pictures and says so."""

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import nagleprobe

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SPLIT = SAMPLES / "echo_split_lo.pcap"
# run Python as if matplotlib were not installed (a None entry makes its import fail)
NO_MPL = "import sys; sys.modules['matplotlib'] = None; "


def test_analyze_takes_binary_file_objects_and_leaves_them_open(echo_split):
    want = json.loads(echo_split.to_json())  # a copy: to_dict() shares the capture dict
    del want["capture"]["path"]

    def same(report) -> bool:
        doc = json.loads(report.to_json())
        del doc["capture"]["path"]
        return doc == want

    data = SPLIT.read_bytes()
    assert same(r := nagleprobe.analyze(io.BytesIO(data))) and r.capture["path"] == "<stream>"
    with open(SPLIT, "rb") as f:
        r = nagleprobe.analyze(f)
        assert not f.closed
    assert same(r) and r.capture["path"] == str(SPLIT)
    gz = nagleprobe.analyze(io.BytesIO(gzip.compress(data)))
    assert gz.capture["compressed"] and gz.summary() == echo_split.summary()
    assert same(nagleprobe.analyze(SPLIT))  # a pathlib.Path


def test_analyze_reads_a_non_seekable_stream():
    proc = subprocess.Popen(["cat", str(SPLIT)], stdout=subprocess.PIPE)
    try:
        r = nagleprobe.analyze(proc.stdout)
    finally:
        proc.stdout.close()
        proc.wait()
    assert r.summary()["stalls"] == 19


ROTATED = SAMPLES / "sets" / "echo_split_rotated_lo"


def test_a_directory_a_glob_pattern_and_a_list_of_files_are_one_capture_as_on_the_cli():
    files = sorted(str(p) for p in ROTATED.glob("*.pcap"))
    assert len(files) > 1
    want = nagleprobe.analyze(files).summary()
    assert want["stalls"] > 0
    for target in (ROTATED, f"{ROTATED}/", f"{ROTATED}/*.pcap", [f"{ROTATED}/cap-*.pcap"]):
        r = nagleprobe.analyze(target)
        assert r.summary() == want, target
        assert [f["path"] for f in r.capture["files"]] == files


@pytest.mark.parametrize("target, problem", [
    ("nothing-here-*.pcap", "no file matches this pattern"),
    (["-", str(SPLIT)], "standard input cannot be part of a file set"),
])
def test_a_target_naming_no_capture_is_a_target_error_naming_it(target, problem):
    from nagleprobe.errors import TargetError

    with pytest.raises(TargetError, match=problem) as e:
        nagleprobe.analyze(target)
    assert isinstance(e.value, nagleprobe.CaptureError)


def test_a_directory_without_captures_is_a_target_error_naming_it(tmp_path):
    (tmp_path / "notes.txt").write_text("no capture here")
    with pytest.raises(nagleprobe.CaptureError,
                       match=f"^{tmp_path}: no capture files .* in this directory$"):
        nagleprobe.analyze(tmp_path)


def test_analyze_refuses_a_text_file_with_a_clear_message():
    with open(SPLIT, encoding="latin-1") as f, pytest.raises(TypeError, match="binary file"):
        nagleprobe.analyze(f)


def test_a_bad_stream_is_a_capture_error_naming_it():
    with pytest.raises(nagleprobe.CaptureError, match="<stream>: not a pcap"):
        nagleprobe.analyze(io.BytesIO(b"hello, this is not a capture"))


def test_repr_is_one_line_with_file_flows_stalls_and_time_lost(echo_split, proxy_any):
    assert repr(echo_split) == (f"<nagleprobe.Report {str(SPLIT)!r}: 1 flow, 19 stalls, "
                                f"832.0 ms lost>")
    assert repr(proxy_any.select(port=1)).endswith(": 0 flows, 0 stalls, 0.0 ms lost>")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_plot_without_matplotlib_says_how_to_install_it():
    out = run_python(NO_MPL + "from nagleprobe import plot")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ImportError: nagleprobe.plot draws with matplotlib, which is not installed: "
        "pip install 'nagleprobe[plot]' (or pip install matplotlib)")


def test_html_without_matplotlib_is_written_without_pictures_and_says_so(tmp_path):
    html = tmp_path / "r.html"
    out = run_python(NO_MPL + "from nagleprobe.cli import main; sys.argv = ['nagleprobe', "
                     f"'analyze', {str(SPLIT)!r}, '--html', {str(html)!r}]; main()")
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == (f"nagleprobe: note: {html}: The pictures are left out: they "
                                  "need matplotlib, which is not installed (pip install "
                                  "'nagleprobe[plot]').")
    assert "19 stalls in 1 of 1 TCP flow" in out.stdout
    text = html.read_text()
    assert "<img" not in text and "The pictures are left out" in text
    assert "19 stalls in 1 of 1 TCP flow" in text
