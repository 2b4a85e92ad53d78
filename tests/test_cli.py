"""cli: the command's output formats, exit statuses and one-line errors."""

import gzip
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from capgen import pcap_bytes
from columns import A, P, S
from nagleprobe.cli import main
from nagleprobe.errors import ExitStatus


def pcap_of(frames: list[bytes], linktype: int = 1, ts_step_us: int = 1000) -> bytes:
    """A pcap of the frames, one every `ts_step_us` microseconds."""
    return pcap_bytes([(1_700_000_000_000_000_000 + i * ts_step_us * 1000, f)
                       for i, f in enumerate(frames)], linktype, snaplen=65535)


def tcp_frame(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    """A synthetic Ethernet/IPv4/TCP frame (checksums zero: nagleprobe does not verify them)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 512, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0,
                     bytes([10, 0, 0, 1 if sport == 40000 else 2]),
                     bytes([10, 0, 0, 2 if sport == 40000 else 1])) + tcp
    return b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\x08\x00" + ip


def small_capture() -> bytes:
    return pcap_of([
        tcp_frame(40000, 8000, 100, 0, S),
        tcp_frame(8000, 40000, 900, 101, S | A),
        tcp_frame(40000, 8000, 101, 901, A),
        tcp_frame(40000, 8000, 101, 901, A | P, b"hello "),
    ])


def run(args, input=None):
    return CliRunner().invoke(main, args, input=input)


def test_text_report_names_the_file_and_the_verdict(tmp_path):
    f = tmp_path / "c.pcap"
    f.write_bytes(small_capture())
    r = run(["analyze", str(f)])
    assert r.exit_code == ExitStatus.OK
    # (wrapped to 80 columns: the temporary directory's path is long)
    assert " ".join(r.output.split()).startswith(f"{f}: pcap, EN10MB, 4 packets, 4 TCP")
    assert "No Nagle/delayed-ACK stalls found in 1 TCP flow." in r.output


def test_json_report_has_the_documented_shape(tmp_path):
    f = tmp_path / "c.pcap.gz"
    f.write_bytes(gzip.compress(small_capture()))
    r = run(["analyze", "--format", "json", str(f)])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert set(doc) == {"schema_version", "tool", "capture", "selection", "summary", "flows",
                         "stalls"}
    assert doc["capture"]["compressed"] is True and doc["capture"]["packets"] == 4
    assert doc["selection"] is None  # the whole capture (issue 14: the JSON only grows)
    fl = doc["flows"][0]
    assert (fl["client"], fl["server"], fl["roles"]) == ("10.0.0.1:40000", "10.0.0.2:8000",
                                                           "handshake")
    assert fl["fix"] is None and doc["stalls"] == []
    assert set(fl["endpoints"]["client"]) >= {"nagle", "delayed_ack_ms"}


def test_standard_input_is_read_with_a_dash():
    r = run(["analyze", "-"], input=small_capture())
    assert r.exit_code == 0, r.output
    assert "4 packets" in r.output


@pytest.mark.parametrize("content, problem", [
    (b"", "empty"),
    (b"this is not a capture file at all\n", "not a"),
    (small_capture()[:10], "truncated"),
    (pcap_of([b"\x00" * 40], linktype=147), "link type"),
])
def test_bad_input_is_one_line_naming_the_file_with_its_own_exit_status(tmp_path, content,
                                                                         problem):
    f = tmp_path / "bad.pcap"
    f.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", str(f)],
                          capture_output=True, text=True)
    assert proc.returncode == ExitStatus.BAD_CAPTURE != ExitStatus.USAGE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(f) in lines[0] and problem in lines[0].lower()
    assert "Traceback" not in proc.stderr


def test_missing_file_and_usage_errors_are_distinct(tmp_path):
    r = run(["analyze", str(tmp_path / "nope.pcap")])
    assert r.exit_code == ExitStatus.BAD_CAPTURE
    assert run(["analyze"]).exit_code == ExitStatus.USAGE
    assert run(["analyze", "--format", "xml", "x"]).exit_code == ExitStatus.USAGE


def test_a_capture_without_tcp_is_analysed_and_says_so(tmp_path):
    # synthetic: one Ethernet/IPv4/UDP frame, nothing else
    udp = struct.pack("!HHHH", 5353, 5353, 8, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 1, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + udp
    frame = b"\x00" * 12 + b"\x08\x00" + ip
    path = tmp_path / "udp.pcap"
    path.write_bytes(pcap_of([frame]))
    result = CliRunner().invoke(main, ["analyze", "--format", "json", str(path)])
    assert result.exit_code == ExitStatus.OK, result.output
    doc = json.loads(result.output)
    assert doc["flows"] == [] and doc["stalls"] == []
    assert doc["capture"]["packets"] == 1 and doc["capture"]["tcp_packets"] == 0
    assert sum(doc["capture"]["skipped"].values()) == 1


def test_html_option_writes_the_report_and_leaves_stdout_unchanged(tmp_path):
    pytest.importorskip("matplotlib")
    sample = str(Path(__file__).resolve().parent.parent / "samples" / "echo_split_lo.pcap")
    out = tmp_path / "report.html"
    with_html = run(["analyze", sample, "--html", str(out)])
    assert with_html.exit_code == ExitStatus.OK
    assert with_html.output == run(["analyze", sample]).output
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "19 stalls in 1 of 1 TCP flow" in text


def test_html_file_that_cannot_be_written_is_a_one_line_usage_error(tmp_path):
    pytest.importorskip("matplotlib")
    sample = str(Path(__file__).resolve().parent.parent / "samples" / "echo_split_lo.pcap")
    target = tmp_path / "missing-dir" / "r.html"
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", sample,
                           "--html", str(target)], capture_output=True, text=True)
    assert proc.returncode == ExitStatus.USAGE
    assert proc.stderr.strip().splitlines() == [
        f"nagleprobe: error: {target}: cannot write the HTML report: No such file or directory"]
    assert proc.stdout == ""


def test_help_lists_each_command_with_a_whole_short_summary():
    out = run(["--help"]).output
    commands = out.split("Commands:", 1)[1].split("\n\n", 1)[0].strip().splitlines()
    assert [c.split()[0] for c in commands] == ["analyze", "annotate", "check", "compare", "record",
                                               "watch"]
    for line in commands:
        assert not line.endswith("...") and line.endswith("."), line


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_s_help_has_examples_that_parse(command):
    import shlex

    out = run([command, "--help"]).output
    assert "Examples:\n" in out, command
    examples = out.split("Examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(examples) >= 2
    for line in examples:
        words = shlex.split(line.split("#", 1)[0].split("|")[-1].split(">")[0])
        assert words[:2] == ["nagleprobe", command], line
        main.commands[command].make_context(command, words[2:])  # raises on a bad option


def test_the_console_entry_point_flushes_everything_before_its_quick_exit():
    sample = str(Path(__file__).parent.parent / "samples" / "echo_split_lo.pcap")
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", "--format", "json",
                           sample], capture_output=True, text=True)
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == json.loads(run(["analyze", "--format", "json",
                                                      sample]).output)


def test_the_quick_exit_waits_for_threads_and_children_exit_would_wait_for():
    import threading

    from nagleprobe.cli import _nothing_left

    assert _nothing_left()
    go = threading.Event()
    worker = threading.Thread(target=go.wait)
    worker.start()
    try:
        assert not _nothing_left()
    finally:
        go.set()
        worker.join()
    assert _nothing_left()


@pytest.mark.parametrize("given", [None, "3"])
def test_the_command_keeps_openblas_to_one_thread_unless_told_otherwise(given):
    """Set before numpy loads (OpenBLAS reads it once); a value the user gave is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import nagleprobe.cli, os; print(os.environ['OPENBLAS_NUM_THREADS'])"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (given or "1")
    loaded = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()]
    assert loaded.index("nagleprobe._startup") < loaded.index("numpy")


# ------------------------------------------------------------------ outputs
SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "echo_split_lo.pcap"
NO_SPACE = "nagleprobe: error: standard output: cannot write: No space left on device"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def a_capture(folder: Path) -> tuple[Path, bytes]:
    """A copy of the real echo capture (19 stalls) in `folder`, and its bytes."""
    folder.mkdir(exist_ok=True)
    path = folder / "e.pcap"
    path.write_bytes(SAMPLE.read_bytes())
    return path, path.read_bytes()


@pytest.mark.parametrize("option", ["--html", "--junit"])
@pytest.mark.parametrize("named", ["as given", "through a symbolic link", "in a directory given"])
def test_an_output_that_is_a_capture_read_is_refused_before_the_analysis(tmp_path, option,
                                                                          named):
    cap, original = a_capture(tmp_path / "caps")
    out, arg = cap, cap
    if named == "through a symbolic link":
        out = tmp_path / "report.out"
        out.symlink_to(cap)
    elif named == "in a directory given":
        arg = cap.parent
    command = "analyze" if option == "--html" else "check"
    r = CliRunner().invoke(main, [command, option, str(out), str(arg)])
    what = "HTML" if option == "--html" else "JUnit"
    assert r.exit_code == ExitStatus.USAGE
    [line] = r.stderr.splitlines()
    assert line.startswith(f"nagleprobe: error: {out}: is an input")
    assert line.endswith(f"refusing to write the {what} report over it")
    assert r.stdout == "" and cap.read_bytes() == original and os.path.islink(out) == (
        named == "through a symbolic link")


@pytest.mark.parametrize("option", ["--html", "--junit"])
def test_standard_output_is_no_place_for_a_second_report(tmp_path, option):
    cap, _ = a_capture(tmp_path)
    r = CliRunner().invoke(main, ["analyze" if option == "--html" else "check", option, "-",
                                  str(cap)])
    assert r.exit_code == ExitStatus.USAGE and r.stdout == ""
    assert r.stderr.startswith(f"nagleprobe: error: {option} -: standard output carries the")


def test_annotate_refuses_its_own_capture_through_a_link(tmp_path):
    cap, original = a_capture(tmp_path)
    os.link(cap, tmp_path / "hard.pcapng")
    r = CliRunner().invoke(main, ["annotate", str(cap), "-o", str(tmp_path / "hard.pcapng")])
    assert r.exit_code == ExitStatus.USAGE and cap.read_bytes() == original
    assert r.stderr == (f"nagleprobe: error: {tmp_path / 'hard.pcapng'}: is an input ({cap}): "
                        "refusing to write the annotated capture over it\n")


def test_annotate_writes_into_a_fifo_for_its_reader(tmp_path):
    import threading

    from nagleprobe.read import CaptureReader

    cap, original = a_capture(tmp_path)
    fifo = tmp_path / "to-wireshark"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = CliRunner().invoke(main, ["annotate", str(cap), "-o", str(fifo)])
    reader.join(10)
    assert r.exit_code == ExitStatus.OK, r.stderr
    assert os.path.exists(fifo) and os.stat(fifo).st_mode & 0o170000 == 0o010000  # S_IFIFO
    (tmp_path / "got.pcapng").write_bytes(got[0])
    packets = CaptureReader(str(tmp_path / "got.pcapng"))
    assert packets.info.format == "pcapng" and sum(len(b) for b in packets) == 107
    assert cap.read_bytes() == original


@ROOT_ONLY
def test_annotate_into_a_character_device_leaves_it_a_device(tmp_path):
    import stat

    cap, original = a_capture(tmp_path)
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a copy of /dev/null
    r = CliRunner().invoke(main, ["annotate", str(cap), "-o", str(null)])
    assert r.exit_code == ExitStatus.OK, r.stderr
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.pcap", "null"]
    assert cap.read_bytes() == original


def test_annotate_through_a_symbolic_link_writes_the_file_it_points_to(tmp_path):
    cap, original = a_capture(tmp_path)
    target = tmp_path / "annotated.pcapng"
    target.write_bytes(b"old")
    link = tmp_path / "latest.pcapng"
    link.symlink_to(target)
    r = CliRunner().invoke(main, ["annotate", str(cap), "-o", str(link)])
    assert r.exit_code == ExitStatus.OK, r.stderr
    assert link.is_symlink() and target.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"  # pcapng SHB
    assert cap.read_bytes() == original


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("args", [["analyze", "{cap}"], ["analyze", "--format", "json", "{cap}"],
                                  ["analyze", "--format", "wireshark", "{cap}"],
                                  ["check", "{cap}"], ["watch", "-"],
                                  ["annotate", "{cap}", "-o", "{tmp}/a.pcapng"], ["--version"]])
def test_a_full_standard_output_is_one_line_and_its_own_status(tmp_path, args):
    cap, original = a_capture(tmp_path)
    args = [a.format(cap=cap, tmp=tmp_path) for a in args]
    with open("/dev/full", "w") as full, open(cap, "rb") as stdin:  # watch - reads stdin
        proc = subprocess.run([sys.executable, "-m", "nagleprobe", *args], stdout=full,
                              stdin=stdin, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.stderr.splitlines() == [NO_SPACE], args
    assert proc.returncode == ExitStatus.OUTPUT_FAILED, args
    assert cap.read_bytes() == original


@pytest.mark.parametrize("args, status", [(["analyze", "--format", "json"], 1),
                                          (["check", "--max-stalls", "100"], ExitStatus.OK),
                                          (["check"], ExitStatus.STALLS_FOUND),
                                          (["watch", "-"], 0)])
def test_a_standard_output_closed_by_its_reader_is_a_quiet_exit(args, status):
    """`| head` ends the output quietly; check still exits with its verdict, which CI reads."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        with open(SAMPLE, "rb") as stdin:
            proc = subprocess.run([sys.executable, "-m", "nagleprobe", *args,
                                   *([] if "-" in args else [str(SAMPLE)])], stdout=write_end,
                                  stdin=stdin, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (status, "")


def test_a_bug_in_check_is_an_internal_error_never_over_budget(monkeypatch):
    import nagleprobe.check_output

    def broken(run):
        raise RuntimeError("the renderer broke")

    monkeypatch.setattr(nagleprobe.check_output, "render_text", broken)
    r = CliRunner().invoke(main, ["check", "--max-stalls", "100", str(SAMPLE)])
    assert r.exit_code == ExitStatus.INTERNAL
    assert r.stderr == (f"nagleprobe: internal error while checking {SAMPLE}: RuntimeError: "
                        "the renderer broke (rerun with --debug for a traceback)\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("status", [0, 3])
def test_output_that_fails_only_at_the_final_flush_is_one_line_and_its_own_status(status):
    """The entry point's last flush (a command that left its output buffered)."""
    command = ("import sys\nfrom nagleprobe import cli\n"
               f"cli.main = lambda: (sys.stdout.write('x' * 100), sys.exit({status}))\ncli.run()")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # left buffered
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-c", command], stdout=full, env=env,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines()) == (ExitStatus.OUTPUT_FAILED, [NO_SPACE])


# ------------------------------------------------------------------ the same options everywhere
def options_of(command: str) -> dict[str, list[str]]:
    """Each option of a command (by its long name) with all its spellings, hidden or not."""
    return {next(o for o in p.opts if o.startswith("--")): p.opts + p.secondary_opts
            for p in main.commands[command].params if isinstance(p, click.Option)}


@pytest.mark.parametrize("command", ["analyze", "check", "record", "watch"])
def test_port_is_p_in_every_command_that_selects_by_port(command):
    assert options_of(command)["--port"] == ["--port", "-p"]


def test_watch_selects_as_analyze_does():
    for name in ("--port", "--host", "--min-confidence"):
        assert options_of("watch")[name] == options_of("analyze")[name]


def test_progress_is_spelled_one_way_in_analyze_and_check_and_quiet_still_works():
    assert options_of("analyze")["--progress"] == ["--progress", "--no-progress"]
    assert options_of("check")["--progress"] == ["--progress", "--no-progress"]
    quiet = next(p for p in main.commands["analyze"].params if p.name == "quiet")
    assert quiet.hidden and set(quiet.opts) == {"--quiet", "-q"}


SPLIT_SAMPLE = str(Path(__file__).resolve().parent.parent / "samples" / "echo_split_lo.pcap")


@pytest.mark.parametrize("fmt", ["text", "json", "wireshark"])
def test_output_writes_the_report_standard_output_would_get(tmp_path, fmt):
    out = tmp_path / f"report.{fmt}"
    r = run(["analyze", "--format", fmt, "-o", str(out), SPLIT_SAMPLE])
    assert r.exit_code == ExitStatus.OK and r.stdout == ""
    assert out.read_text(encoding="utf-8") == run(["analyze", "--format", fmt,
                                                    SPLIT_SAMPLE]).stdout
    assert "19" in out.read_text(encoding="utf-8")


def test_output_never_writes_over_a_capture_being_analysed(tmp_path):
    cap = tmp_path / "c.pcap"
    cap.write_bytes(Path(SPLIT_SAMPLE).read_bytes())
    for option in ("-o", "--html"):
        proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", str(cap), option,
                               str(cap)], capture_output=True, text=True)
        assert proc.returncode == ExitStatus.USAGE
        what = "report" if option == "-o" else "HTML report"
        assert proc.stderr.strip().splitlines() == [
            f"nagleprobe: error: {cap}: is an input: refusing to write the {what} over it"]
        assert cap.read_bytes() == Path(SPLIT_SAMPLE).read_bytes()


def test_output_that_cannot_be_written_is_a_one_line_usage_error(tmp_path):
    target = tmp_path / "missing-dir" / "r.txt"
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", SPLIT_SAMPLE, "-o",
                           str(target)], capture_output=True, text=True)
    assert proc.returncode == ExitStatus.USAGE
    assert proc.stderr.strip().splitlines() == [
        f"nagleprobe: error: {target}: cannot write the report: No such file or directory"]
    assert proc.stdout == ""


def test_the_main_help_names_every_exit_status():
    """`nagleprobe --help` is where a CI author looks up a status: each one is there (130 is
    the shell's own for Ctrl-C)."""
    import re

    from nagleprobe.cli import MAIN_HELP

    named = {int(n) for n in re.findall(r"(\d+) [a-z]", MAIN_HELP)}
    assert {int(s) for s in ExitStatus if s != ExitStatus.INTERRUPTED} <= named
