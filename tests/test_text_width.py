"""The text reports fit a person's terminal: prose wrapped to the width with a hanging
indent, the evidence table in a narrow layout below its wide one's width, the CLI at the
terminal's width (80 when not a terminal), and what a clean flow showed."""

from pathlib import Path

import pytest
from click.testing import CliRunner

import nagleprobe
from nagleprobe.cli import common as cli_module
from nagleprobe.cli import main
from nagleprobe.text_report import _Pre, fit_lines

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + [SAMPLES / "formats" / "base_lo.pcapng"]


def too_long(text: str, width: int, path: str = "") -> list[str]:
    """Lines over `width` that could have been broken (a single word cannot, and the first
    line keeps the capture's path with what the file is: "PATH: pcap, ..., N TCP;")."""
    return [line for line in text.splitlines() if len(line) > width and " " in line.strip()
            and not (path and line.startswith(f"{path}: ") and line.endswith(" TCP;"))]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_every_sample_s_report_fits_80_columns(capture):
    r = nagleprobe.analyze(str(capture))
    assert too_long(r.to_text(80), 80, str(capture)) == []
    assert too_long(r.to_text(), 80, str(capture)) == []  # the default: pipes, CI logs


def test_wrapping_keeps_every_word_and_indents_continuations(echo_split):
    wide, narrow = echo_split.to_text(1000), echo_split.to_text(80)
    fix = next(line for line in wide.splitlines() if line.startswith("  The client "))
    lines = narrow.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("  The client ")))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        block.append(line)
    assert len(block) > 3 and all(line.startswith("    ") for line in block[1:])
    assert " ".join(line.strip() for line in block) == fix.strip()


def test_evidence_table_is_wide_when_it_fits_and_narrow_otherwise(echo_split):
    wide = echo_split.to_text(120)
    assert "  late pure ACK  " in wide and "0.043724" in wide  # the late ACK's time
    narrow = echo_split.to_text(80)
    assert "  late pure ACK  " not in narrow and "0.043724" not in narrow
    row = next(line for line in narrow.splitlines() if line.startswith("    client  #10 "))
    assert row.split() == ["client", "#10", "0.000180", "#11", "#12", "7B", "43.6", "43.5", "0.95"]


def test_fit_lines_wraps_any_prose_line_and_leaves_table_rows_alone():
    long = "  note: " + " ".join(["word"] * 40)
    row = _Pre("    " + "x" * 120)
    out = fit_lines([long, row, "short"], 50)
    assert out[-2:] == [row, "short"]
    assert all(len(line) <= 50 for line in out[:-2]) and out[1].startswith("    word")


def test_cli_uses_80_columns_off_a_terminal_and_the_terminal_s_width_on_one(monkeypatch):
    monkeypatch.chdir(SAMPLES.parent)  # a path as a user types it, whatever the checkout's
    sample = "samples/echo_split_lo.pcap"
    out = CliRunner().invoke(main, ["analyze", sample]).output
    assert max(map(len, out.splitlines())) <= 80 and "FIX for the client" in out
    assert out == nagleprobe.analyze(sample).to_text(80)
    monkeypatch.setattr(cli_module, "text_width", lambda: 120)
    out = CliRunner().invoke(main, ["analyze", sample]).output
    assert 80 < max(map(len, out.splitlines())) <= 120 and "  late pure ACK  " in out


def test_check_text_is_wrapped_on_a_terminal_only(monkeypatch):
    monkeypatch.chdir(SAMPLES.parent)
    sample = "samples/echo_split_lo.pcap"
    whole = CliRunner().invoke(main, ["check", sample]).output
    assert max(map(len, whole.splitlines())) > 100  # a CI log keeps a verdict on one line
    monkeypatch.setattr(cli_module, "stdout_is_terminal", lambda: True)
    monkeypatch.setattr(cli_module, "text_width", lambda: 80)
    wrapped = CliRunner().invoke(main, ["check", sample]).output
    assert max(map(len, wrapped.splitlines())) <= 80
    assert wrapped.split() == whole.split()


def test_a_clean_flow_says_what_was_seen(proxy_any):
    text = proxy_any.to_text(1000, verbose=True)
    clean = next(line for line in text.splitlines() if "127.0.0.1:8001" in line
                 and line.startswith("     0"))
    assert "delayed ACKs: 1 of the server's, ~41 ms" in clean
    assert "quick ACKs: 1 of the client's and 18 of the server's" in clean
    assert clean.endswith("; no sender was held")
    nodelay = nagleprobe.analyze(str(SAMPLES / "echo_nodelay_lo.pcap")).to_text(1000,
                                                                               verbose=True)
    assert "no delayed ACKs seen" in nodelay and "Nagle client off" in nodelay


@pytest.mark.parametrize("page, section", [("README.md", "## One real report"),
                                           ("docs/reports.md", "## Text report")])
def test_the_documented_text_report_is_what_an_80_column_terminal_shows(monkeypatch, page,
                                                                        section):
    text = (SAMPLES.parent / page).read_text()
    block = text.split(section, 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    shown = block.splitlines()
    monkeypatch.chdir(SAMPLES.parent)
    real = nagleprobe.analyze("samples/echo_split_lo.pcap").to_text(80).splitlines()
    n = next(i for i, line in enumerate(real) if line.startswith("    sender")) + 5
    assert shown[:n] == real[:n]
    assert shown[n] == "    ... 15 more stalls (--all-stalls lists them)"
