"""output: an output never lands on an input; FIFOs and devices are written as streams and
stay what they are; a regular file is replaced whole (a symbolic link keeps pointing at
it); a failed write is WriteFailed naming the output, a path that cannot be used
OutputRefused."""

from __future__ import annotations

import os
import re
import socket
import stat
import threading
from pathlib import Path

import pytest

from nagleprobe.annotate import annotate
from nagleprobe.errors import OutputRefused, WriteFailed
from nagleprobe.html_report import write_html
from nagleprobe.output import open_output, refuse_inputs, refuse_report_file, write_output
from nagleprobe.read import CaptureReader

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


@pytest.fixture
def capture(tmp_path):
    """A copy of a real capture (19 stalls) and its bytes, to show it is left intact."""
    path = tmp_path / "e.pcap"
    path.write_bytes((SAMPLES / "echo_split_lo.pcap").read_bytes())
    return path, path.read_bytes()


def read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A thread that opens the FIFO for reading and collects everything written to it."""
    got: list[bytes] = []

    def reader() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t, got


# ------------------------------------------------------------------------- never an input
def test_an_input_is_refused_by_its_path_a_symbolic_link_and_a_hard_link(capture, tmp_path):
    path, original = capture
    (tmp_path / "soft.pcap").symlink_to(path)
    os.link(path, tmp_path / "hard.pcap")
    for name in (path, tmp_path / "soft.pcap", tmp_path / "hard.pcap"):
        with pytest.raises(OutputRefused, match=f"^{re.escape(str(name))}: is an input"):
            write_output(str(name), "<html/>", "the HTML report", [str(path)])
    assert path.read_bytes() == original and (tmp_path / "soft.pcap").is_symlink()


def test_other_files_new_paths_stdin_and_urls_are_not_inputs(capture, tmp_path):
    path, _ = capture
    other = tmp_path / "other.pcap"
    other.write_bytes(b"x")
    for out in (other, tmp_path / "new.html"):
        refuse_inputs(str(out), [str(path), "-", "s3://bucket/e.pcap", str(tmp_path / "gone")])


def test_a_report_file_option_refuses_standard_output_and_an_input_before_analysis(capture,
                                                                                   tmp_path):
    """`-` is refused for a file option (standard output carries the command's report), an
    input as everywhere; another path is left to be written."""
    path, original = capture
    with pytest.raises(OutputRefused, match=r"^--junit -: standard output carries the "
                                            r"report; give a file name for the JUnit report$"):
        refuse_report_file("-", "--junit", "the JUnit report", [str(path)])
    with pytest.raises(OutputRefused, match=f"^{re.escape(str(path))}: is an input: refusing "
                                            "to write the HTML report over it$"):
        refuse_report_file(str(path), "--html", "the HTML report", [str(path)])
    refuse_report_file(str(tmp_path / "new.html"), "--html", "the HTML report", [str(path)])
    assert path.read_bytes() == original and not (tmp_path / "new.html").exists()


def test_the_library_refuses_to_write_over_the_capture_it_read(capture):
    import nagleprobe

    path, original = capture
    with pytest.raises(OutputRefused, match="is an input: refusing to write the HTML report"):
        write_html(nagleprobe.analyze(str(path)), path, plots=False)
    with pytest.raises(OutputRefused, match="refusing to write the annotated capture"):
        annotate(str(path), str(path))
    assert path.read_bytes() == original


# ------------------------------------------------------------------------- regular files
def test_a_regular_file_is_replaced_whole_with_its_permissions(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    out.chmod(0o640)
    write_output(str(out), "new")
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # no temporary left


def test_a_failure_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with open_output(str(out)) as f:
            f.write(b"half a rep")
            raise RuntimeError("the report failed halfway")
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_a_symbolic_link_stays_a_link_and_its_file_gets_the_output(tmp_path):
    target = tmp_path / "reports" / "r.html"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.html"
    link.symlink_to(target)
    write_output(str(link), "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    dangling = tmp_path / "next.html"
    dangling.symlink_to(tmp_path / "reports" / "next.html")
    write_output(str(dangling), "made")
    assert dangling.is_symlink() and (tmp_path / "reports" / "next.html").read_text() == "made"


def test_a_directory_a_socket_and_a_missing_directory_are_refused(tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s"))
    try:
        for path, problem in ((tmp_path, "it is a directory"),
                              (tmp_path / "s", "it is not a regular file"),
                              (tmp_path / "no" / "r.html", "No such file or directory")):
            said = f"^{re.escape(str(path))}: cannot write the JUnit report: {problem}$"
            with pytest.raises(OutputRefused, match=said):
                write_output(str(path), "<x/>", "the JUnit report")
    finally:
        sock.close()
    assert stat.S_ISSOCK(os.lstat(tmp_path / "s").st_mode)


# ------------------------------------------------------------------------- streams
def test_a_fifo_is_written_as_a_stream_and_its_reader_gets_a_valid_pcapng(capture, tmp_path):
    path, original = capture
    fifo = tmp_path / "out.pcapng"
    os.mkfifo(fifo)
    t, got = read_fifo(fifo)
    result = annotate(str(path), str(fifo))
    t.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and path.read_bytes() == original
    copy = tmp_path / "copy.pcapng"
    copy.write_bytes(got[0])
    reader = CaptureReader(str(copy))
    assert reader.info.format == "pcapng"
    assert sum(len(b) for b in reader) == result.packets == 107


@ROOT_ONLY
def test_a_character_device_is_written_into_and_stays_a_device(capture, tmp_path):
    path, original = capture
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    annotate(str(path), str(null))
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.pcap", "null"]
    assert path.read_bytes() == original


@ROOT_ONLY
def test_a_full_device_is_a_write_failure_naming_the_output(tmp_path):
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
    said = f"^{re.escape(str(full))}: cannot write the JUnit report: No space left on device$"
    with pytest.raises(WriteFailed, match=said):
        write_output(str(full), "<x/>" * 100_000, "the JUnit report")
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_a_fifo_whose_reader_left_is_a_write_failure_not_a_quiet_exit(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)

    def leave() -> None:
        with open(fifo, "rb") as f:
            f.read(1)

    t = threading.Thread(target=leave, daemon=True)
    t.start()
    with pytest.raises(WriteFailed, match="cannot write: Broken pipe"):
        with open_output(str(fifo)) as out:
            for _ in range(64):  # well past what the pipe holds
                out.write(b"x" * 65536)
    t.join(10)
