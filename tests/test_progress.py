"""progress: the stderr line shown during long analyses, and when it is not shown."""

import io
from pathlib import Path

from click.testing import CliRunner

from nagleprobe.cli import main
from nagleprobe.pipeline import analyze
from nagleprobe.progress import ProgressBar

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "neg_bulk_cwnd_netns.pcap"


def test_line_shows_packets_bytes_rate_and_eta_when_the_size_is_known():
    text = ProgressBar.line(1_204_000, 110_200_000, 453_000_000, 1.0)
    assert text == ("1,204,000 packets, 110.2 MB of 453.0 MB (24%), 1.20 M packets/s, "
                    "110.2 MB/s, ETA 0:03")


def test_line_without_a_known_size_has_no_percentage_or_eta():
    text = ProgressBar.line(5000, 2_000_000, None, 2.0)
    assert text == "5,000 packets, 2.0 MB, 0.00 M packets/s, 1.0 MB/s"


def test_bar_redraws_in_place_during_the_analysis_and_erases_itself():
    out = io.StringIO()
    bar = ProgressBar(out=out, interval=0, delay=0, in_place=True)
    analyze(str(SAMPLE), chunk_bytes=4096, progress=bar)
    bar.close()
    text = out.getvalue()
    draws = text.split("\r")[1:-1]
    assert len(draws) > 10
    assert draws[-1].startswith("1,755 packets, ") and "of " in draws[-1] and "ETA" in draws[-1]
    assert text.endswith("\r\x1b[K")


def test_no_progress_output_when_stderr_is_not_a_terminal_or_with_quiet():
    for args in ([], ["--quiet"]):
        res = CliRunner().invoke(main, ["analyze", *args, str(SAMPLE)])
        assert res.exit_code == 0
        assert res.stderr == ""
        assert "No Nagle/delayed-ACK stalls found" in res.stdout


def test_each_redraw_fits_the_terminal_width_so_no_stale_line_is_left():
    """A line longer than the terminal wraps, and "\\r" then returns only to the start of its
    last row: each redraw must stay within the width (one column short of it)."""
    out = io.StringIO()
    bar = ProgressBar(out=out, interval=0, width=40, delay=0, in_place=True)
    analyze(str(SAMPLE), chunk_bytes=4096, progress=bar)
    bar.close()
    draws = [d.removesuffix("\x1b[K") for d in out.getvalue().split("\r")[1:-1]]
    assert len(draws) > 10 and all(len(d) == 39 for d in draws)
    assert draws[-1].startswith("1,755 packets, ")


def test_width_of_a_stream_that_is_not_a_terminal_is_80():
    assert ProgressBar(out=io.StringIO()).width() == 80


def test_width_is_the_terminal_s_it_draws_on():
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 37, 0, 0))
        with os.fdopen(os.dup(slave), "w") as tty:
            assert ProgressBar(out=tty).width() == 37
    finally:
        os.close(master)
        os.close(slave)


class Clock:
    """time.monotonic for the progress module, set by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reader:
    """What the display asks of a reader: bytes read of the input's size."""

    def input_progress(self):
        return 2_000_000, 8_000_000


def test_nothing_is_drawn_for_a_run_shorter_than_half_a_second(monkeypatch):
    from nagleprobe import progress

    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    for in_place in (True, False):
        out = io.StringIO()
        bar = ProgressBar(out=out, in_place=in_place)
        for t in (0.1, 0.3, 0.49):
            clock.now += t - (clock.now - bar.start)
            bar(Reader(), 100)
        bar.close()
        assert out.getvalue() == "", in_place
        clock.now = bar.start + progress.DELAY_S + 0.01
        bar(Reader(), 5000)
        assert "5,000 packets, 2.0 MB of 8.0 MB (25%)" in out.getvalue()


def test_off_a_terminal_the_progress_is_a_log_line_every_ten_seconds(monkeypatch):
    from nagleprobe import progress

    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    bar = ProgressBar(out=out)  # a StringIO is no terminal
    start = bar.start
    for t in range(1, 26):  # a chunk every second for 25 s
        clock.now = start + t
        bar(Reader(), 1000 * t)
    bar.close()
    lines = out.getvalue().split("\n")
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert [x.split(" packets")[0] for x in lines[:-1]] == [
        "nagleprobe: 1,000", "nagleprobe: 11,000", "nagleprobe: 21,000"]
    assert lines[-1] == ""


def test_analyze_progress_in_a_log_and_its_old_spelling_quiet(tmp_path):
    """--progress draws off a terminal too (a CI log), --no-progress and the old -q/--quiet
    draw nothing; standard output is the same report every time."""
    runs = {args: CliRunner().invoke(main, ["analyze", *args, str(SAMPLE)])
            for args in ((), ("--progress",), ("--no-progress",), ("-q",), ("--quiet",))}
    assert all(r.exit_code == 0 for r in runs.values())
    assert len({r.stdout for r in runs.values()}) == 1
    assert all(r.stderr == "" for args, r in runs.items() if args != ("--progress",))
    help_text = CliRunner().invoke(main, ["analyze", "--help"]).output
    assert "--progress / --no-progress" in help_text and "--quiet" not in help_text
