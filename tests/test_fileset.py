"""fileset: several captures (rotated, split, per-flow) read as one capture.

The set must give what the whole capture gives (same stalls at the same times), and name
for each stall frame the file it is in and its frame number there, as Wireshark numbers it
when that file is opened."""

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nagleprobe import analyze
from nagleprobe.cli import main
from nagleprobe.errors import CaptureError, ExitStatus
from nagleprobe.fileset import SetReader, expand_targets, is_capture_name
from nagleprobe.read import CaptureReader
from oracle import analyze_whole

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SETS = SAMPLES / "sets"
ROTATED = json.loads((SETS / "echo_split_rotated_lo.expected.json").read_text())
POINTS = ("small", "ack", "released")

needs_editcap = pytest.mark.skipif(shutil.which("editcap") is None, reason="needs editcap "
                                   "(wireshark-common) to split a sample")


def rotated_files() -> list[str]:
    return [str(SETS / ROTATED["capture"] / f) for f in ROTATED["files"]]


def ns(col) -> np.ndarray:
    """A datetime column as ns since the epoch."""
    return col.astype("int64").to_numpy()


def stall_times(report) -> np.ndarray:
    """Each stall's S1, late ACK and S2 times (ns since the epoch), in report order."""
    return np.stack([ns(report.stalls[f"{k}_time"]) for k in POINTS], axis=1)


def frame_times(path: str) -> dict[int, int]:
    """Frame number -> time (ns) of every record of one file, read on its own."""
    out = {}
    for b in CaptureReader(path):
        out.update(zip(b.frame.tolist(), b.ts_ns.tolist()))
    return out


def assert_same_as_whole(set_report, whole_report, tolerance_ns: int = 0) -> None:
    """Same flows and stalls; stall times equal (within `tolerance_ns`: two tcpdump
    processes capturing the same packets stamp them up to a few microseconds apart)."""
    assert len(set_report.stalls) == len(whole_report.stalls) > 0
    diff = np.abs(stall_times(set_report) - stall_times(whole_report))
    assert diff.max() <= tolerance_ns
    assert len(set_report.flows) == len(whole_report.flows)
    for c in ("client", "server", "packets", "stalls"):
        assert set_report.flows[c].tolist() == whole_report.flows[c].tolist()
    lost = set_report.flows["stall_ms"].to_numpy() - whole_report.flows["stall_ms"].to_numpy()
    assert np.abs(lost).max() <= 2 * tolerance_ns / 1e6 * len(set_report.stalls) + 1e-9


def assert_frames_name_their_file(report) -> None:
    """Every stall frame (file, frame) is, read from that file alone, the packet at the
    stall's time."""
    times = {f["path"]: frame_times(f["path"]) for f in report.capture["files"]}
    for k in POINTS:
        for path, frame, t in zip(report.stalls[f"{k}_file"], report.stalls[f"{k}_frame"],
                                  ns(report.stalls[f"{k}_time"])):
            assert times[path][frame] == t, (k, path, frame)


# ------------------------------------------------------------------ real rotated set
def test_a_set_rotated_by_tcpdump_equals_the_whole_capture_of_the_same_run():
    files = rotated_files()
    assert len(files) >= 3  # the connection crosses at least two file boundaries
    whole = analyze(str(SETS / ROTATED["whole_capture"]))
    merged = analyze(files)
    assert len(merged.stalls) == ROTATED["stalls"]  # the apps' own count
    assert_same_as_whole(merged, whole, tolerance_ns=20_000)
    assert len(merged.flows) == 1  # one connection, not one per file
    assert set(merged.stalls["small_file"]) > {files[0]}  # stalls in several files
    assert_frames_name_their_file(merged)
    assert [f["path"] for f in merged.capture["files"]] == files
    assert sum(f["packets"] for f in merged.capture["files"]) == merged.capture["packets"]


def test_a_directory_given_to_analyze_is_its_capture_files_as_one_set():
    merged = analyze([t.path for t in expand_targets([str(SETS / ROTATED["capture"])])])
    assert len(merged.stalls) == ROTATED["stalls"]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_the_frame_named_is_the_one_wireshark_shows_in_that_file():
    merged = analyze(rotated_files())
    row = merged.stalls.iloc[len(merged.stalls) // 2]
    out = subprocess.run(["tshark", "-r", row["released_file"], "-Y",
                          f"frame.number == {row['released_frame']}", "-T", "fields",
                          "-e", "frame.time_epoch"], capture_output=True, text=True, check=True)
    t_ns = int(row["released_time"].value)
    assert abs(float(out.stdout.strip()) * 1e9 - t_ns) < 1000


def test_streamed_and_whole_file_analysis_of_a_set_agree():
    a = analyze(rotated_files())
    b = analyze_whole(rotated_files())
    np.testing.assert_array_equal(stall_times(a), stall_times(b))
    assert a.stalls["small_file"].tolist() == b.stalls["small_file"].tolist()


# ------------------------------------------------------------------ editcap sets
@pytest.fixture
def editcap_set(tmp_path) -> list[str]:
    """chain3_lo.pcap (three connections through a relay) cut into 40-packet pieces by
    editcap -c; one piece gzipped, one converted to pcapng, the rest pcap."""
    if shutil.which("editcap") is None:
        pytest.skip("needs editcap (wireshark-common) to split a sample")
    subprocess.run(["editcap", "-F", "pcap", "-c", "40", str(SAMPLES / "chain3_lo.pcap"),
                    str(tmp_path / "piece.pcap")], check=True)
    pieces = sorted(tmp_path.glob("piece*.pcap"))
    assert len(pieces) >= 5
    gz = pieces[1].with_suffix(".pcap.gz")
    gz.write_bytes(gzip.compress(pieces[1].read_bytes()))
    pieces[1].unlink()
    ng = pieces[2].with_suffix(".pcapng")
    subprocess.run(["editcap", "-F", "pcapng", str(pieces[2]), str(ng)], check=True)
    pieces[2].unlink()
    return [str(p) for p in sorted(tmp_path.iterdir())]


def test_an_editcap_split_set_of_mixed_formats_equals_the_whole_capture(editcap_set):
    merged = analyze(editcap_set)
    assert_same_as_whole(merged, analyze(str(SAMPLES / "chain3_lo.pcap")))
    assert_frames_name_their_file(merged)
    kinds = {(f["format"], f["compressed"]) for f in merged.capture["files"]}
    assert kinds == {("pcap", False), ("pcap", True), ("pcapng", False)}
    # the relay linking works across files too
    whole = analyze(str(SAMPLES / "chain3_lo.pcap"))
    assert (merged.flows["relay_upstream_flow"].tolist()
            == whole.flows["relay_upstream_flow"].tolist())


def test_files_given_out_of_order_are_merged_by_time(editcap_set):
    merged = analyze(editcap_set[::-1])
    assert_same_as_whole(merged, analyze(str(SAMPLES / "chain3_lo.pcap")))


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_files_that_overlap_in_time_are_merged_by_time(tmp_path):
    """One file per connection (as one file per interface gives): every file spans the
    whole run."""
    files = []
    for port in (8001, 8002, 8003):
        out = tmp_path / f"port{port}.pcap"
        subprocess.run(["tshark", "-r", str(SAMPLES / "chain3_lo.pcap"), "-Y",
                        f"tcp.port == {port}", "-F", "pcap", "-w", str(out)], check=True)
        files.append(str(out))
    merged = analyze(files)
    assert_same_as_whole(merged, analyze(str(SAMPLES / "chain3_lo.pcap")))
    assert_frames_name_their_file(merged)


def test_a_set_reader_never_holds_files_that_do_not_overlap_the_merge_point(editcap_set):
    """Memory: a rotated set is read one file (two at a boundary) at a time."""
    reader = SetReader(editcap_set, chunk_bytes=4096)
    most = 0
    for group in reader:
        open_now = sum(1 for m in reader._members if m.reader is not None and not m.done)
        most = max(most, open_now)
    assert most <= 2


# ------------------------------------------------------------------ bad input
def test_one_unreadable_file_is_named_and_the_rest_is_analysed(tmp_path):
    bad = tmp_path / "broken.pcap"
    bad.write_bytes(b"this is not a capture at all")
    files = rotated_files()
    report = analyze([files[0], str(bad), *files[1:]])
    assert len(report.flows) == 1 and len(report.stalls) == ROTATED["stalls"]
    warn = [w for w in report.capture["warnings"] if "broken.pcap" in w]
    assert len(warn) == 1 and "not a pcap or pcapng capture" in warn[0]
    entry = [f for f in report.capture["files"] if f["path"] == str(bad)]
    assert entry and entry[0]["error"]
    with pytest.raises(CaptureError, match="broken.pcap"):
        analyze([files[0], str(bad)], strict=True)


def test_a_set_of_only_unreadable_files_is_an_unreadable_capture(tmp_path):
    for n in ("a.pcap", "b.pcap"):
        (tmp_path / n).write_bytes(b"garbage!")
    r = CliRunner().invoke(main, ["analyze", str(tmp_path / "a.pcap"), str(tmp_path / "b.pcap")])
    assert r.exit_code == ExitStatus.BAD_CAPTURE
    assert "a.pcap" in r.output and "Traceback" not in r.output


def test_an_empty_directory_or_a_pattern_matching_nothing_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert r.exit_code == ExitStatus.USAGE and "no capture files" in r.output
    r = CliRunner().invoke(main, ["analyze", str(tmp_path / "cap-*.pcap")])
    assert r.exit_code == ExitStatus.USAGE and "no file matches" in r.output


def test_tcpdump_C_rotation_names_are_capture_names():
    assert is_capture_name("cap.pcap") and is_capture_name("cap.pcap12")
    assert is_capture_name("x.pcapng3.gz") and not is_capture_name("notes.txt")


# ------------------------------------------------------------------ the CLI and outputs
def test_analyze_json_names_the_files_and_each_stall_frame_file():
    files = rotated_files()
    r = CliRunner().invoke(main, ["analyze", "--format", "json", *files])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [f["path"] for f in doc["capture"]["files"]] == files
    st = doc["stalls"][-1]
    assert set(st["files"]) == set(POINTS) and st["files"]["released"] in files
    assert st["frames"]["released"] <= doc["capture"]["files"][-1]["packets"]
    assert doc["flows"][0]["tcp_stream"] is None  # Wireshark numbers streams per file
    per_file = doc["flows"][0]["wireshark"]["stall_frames_filters"]
    assert list(per_file) == [f for f in files if f in per_file] and len(per_file) >= 3


def test_analyze_text_lists_the_files_and_shows_frames_with_their_file(monkeypatch):
    monkeypatch.chdir(SETS)  # short names: a checkout's long path would wrap the file lines
    r = CliRunner().invoke(main, ["analyze", ROTATED["capture"]])
    assert r.exit_code == 0, r.output
    assert f"{len(ROTATED['files'])} files read as one capture" in r.output
    assert "f2#" in r.output and "f1 " in r.output
    single = CliRunner().invoke(main, ["analyze", ROTATED["whole_capture"]])
    assert "f1#" not in single.output and "files read as one" not in single.output


def test_check_judges_each_file_alone_unless_merged():
    files = rotated_files()
    r = CliRunner().invoke(main, ["check", "--no-config", "--max-stalls", "30", *files])
    assert r.exit_code == ExitStatus.OK, r.output  # no file of 1 s holds 30 of the 59 stalls
    assert r.output.count("\n") >= len(files)
    r = CliRunner().invoke(main, ["check", "--no-config", "--max-stalls", "30", "--merge", *files])
    assert r.exit_code == ExitStatus.STALLS_FOUND
    assert f"{ROTATED['stalls']} stalls" in r.output


def test_annotate_refuses_a_set_in_one_line(tmp_path):
    r = CliRunner().invoke(main, ["annotate", *rotated_files()[:2], "-o", str(tmp_path / "o")])
    assert r.exit_code == ExitStatus.USAGE and "one capture file" in r.output
    r = CliRunner().invoke(main, ["annotate", str(SETS / ROTATED["capture"]),
                                  "-o", str(tmp_path / "o")])
    assert r.exit_code == ExitStatus.USAGE


def test_the_json_of_a_mixed_set_follows_the_schema_with_no_undocumented_field(editcap_set):
    from test_json_schema import STRICT

    doc = json.loads(analyze(editcap_set).to_json())
    assert doc["capture"]["format"] == "mixed"
    STRICT.validate(doc)


def test_the_segments_of_a_set_give_each_frame_in_its_file():
    merged = analyze(rotated_files())
    seg = merged.segments
    assert seg["file"].nunique() == len(ROTATED["files"])
    times = {p: frame_times(p) for p in rotated_files()}
    t = ns(seg["time"])
    assert all(times[p][f] == x for p, f, x in zip(seg["file"], seg["frame"], t))
