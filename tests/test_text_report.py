"""The text report read at a glance (nagleprobe/text_report.py): within the width, first line
included; short for a clean capture; a table of the stalled flows, one fix per endpoint, a
legend over the evidence; clean flows in one line unless asked; singular for one; times as
asked; `watch` lines within a terminal's width too."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import nagleprobe
from nagleprobe.cli import common as cli_module
from nagleprobe.cli import main
from nagleprobe.text_report import TEXT_WIDTH, fit_lines

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
FIELD = Path("/work/shared/field")
FIELD_CAPTURES = sorted(FIELD.glob("*.pcap*")) if FIELD.exists() else []
COAP = FIELD / "pos__nfstream_coap_mqtt.pcap"
AXFR = FIELD / "pos__chrissanders_dns_axfr.pcapng"  # one stall
needs_field = pytest.mark.skipif(not COAP.exists(), reason=f"{FIELD} (field captures) absent")


def analyze_cli(*args, width=None, monkeypatch=None):
    if width is not None:
        monkeypatch.setattr(cli_module, "text_width", lambda: width)
    r = CliRunner().invoke(main, ["analyze", "-q", *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.output


def test_the_pipe_default_is_80_columns():
    assert TEXT_WIDTH == 80


@pytest.mark.parametrize("capture", FIELD_CAPTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("width", [80, None], ids=["terminal80", "pipe"])
def test_every_field_capture_fits_80_columns_and_a_screen(capture, width, monkeypatch):
    out = analyze_cli(capture, width=width, monkeypatch=monkeypatch)
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    r = nagleprobe.analyze(str(capture))
    if not r.stall_count:
        assert len(lines) <= 30
    if capture == COAP:
        assert len(lines) <= 60


@needs_field
def test_four_parallel_clients_get_a_table_row_each_and_one_fix():
    text = nagleprobe.analyze(str(COAP)).to_text(80)
    lines = text.splitlines()
    head = lines.index("  flow  stalls      lost  fix on  client -> server")
    rows = lines[head + 1:head + 5]
    assert [r.split()[0] for r in rows] == ["1", "0", "2", "3"]  # worst first
    assert all(r.split()[4] == "client" and " 192.168.56.1:" in r for r in rows)  # "3.99 s"
    assert text.count("FIX for the ") == 1 and "FIX for the client 192.168.56.1 (flows 1, 0, " \
        "2, 3):" in text
    assert text.count("should send each message in one write") == 1
    # the evidence of the worst flow; the others named, with how to see theirs
    assert re.findall(r"^Flow (\d+):", text, re.M) == ["1"]
    assert "The evidence of flows 0, 2, 3 is left out" in text
    verbose = nagleprobe.analyze(str(COAP)).to_text(80, verbose=True)
    assert re.findall(r"^Flow (\d+):", verbose, re.M) == ["1", "0", "2", "3"]
    assert verbose.count("FIX for the ") == 1


def test_the_evidence_has_a_legend_of_its_columns(echo_split):
    text = echo_split.to_text(80)
    legend = " ".join(text.split("Evidence columns: ", 1)[1].split("\n\n", 1)[0].split())
    for column in ("S1 ", "ACK ", "S2 ", "#: Wireshark frame numbers", "held:", "stall ms:",
                   "peer ms:", "conf:"):
        assert column in legend
    assert text.index("Evidence columns: ") < text.index("    sender  S1 #")
    clean = nagleprobe.analyze(str(SAMPLES / "echo_nodelay_lo.pcap")).to_text(80)
    assert "Evidence columns" not in clean and "sender  S1 #" not in clean


def test_clean_flows_are_one_line_unless_verbose(proxy_any, monkeypatch):
    text = proxy_any.to_text(80)
    said = [line for line in text.splitlines() if "without stalls" in line]
    assert said == ["Flows without stalls: 1 (-v lists each with what it showed)."]
    assert "127.0.0.1:8001  " not in text  # the clean flow 0 is not listed
    out = analyze_cli("-v", SAMPLES / "proxy_any_sll2.pcap")
    assert "Flows without stalls (1):" in out and re.search(r"^ +0  127\.0\.0\.1:\d+ -> ", out,
                                                            re.M)


@needs_field
def test_a_capture_of_25_clean_flows_says_so_in_a_few_lines():
    text = nagleprobe.analyze(str(FIELD / "neg__chrissanders_http_espn.pcapng")).to_text(80)
    assert len(text.splitlines()) <= 8
    assert "No Nagle/delayed-ACK stalls found in 25 TCP flows." in text
    assert " ".join(text.split()).endswith("Flows without stalls: 25 (-v lists each with what "
                                           "it showed); in 4 of them Nagle held writes a round "
                                           "trip without a delayed ACK for 10% or more of the "
                                           "flow.")


def test_all_stalls_lists_every_stall_of_every_flow(echo_split):
    rows = lambda t: [x for x in t.splitlines() if re.match(r"    client  #\d+ ", x)]  # noqa
    assert len(rows(echo_split.to_text(80))) == 12 < echo_split.stall_count
    every = echo_split.to_text(80, all_stalls=True)
    assert len(rows(every)) == echo_split.stall_count and "more stall" not in every


@needs_field
def test_one_is_singular_everywhere():
    text = nagleprobe.analyze(str(AXFR)).to_text(80)
    assert "1 stall in 1 of 1 TCP flow," in text and "  1 stall, 218.4 ms lost" in text
    for wrong in ("1 stalls", "1 packets", "1 flows", "1 writes", "1 quick ACKs"):
        assert not re.search(rf"(?<![\d,.]){wrong}", text), wrong
    assert "roles from" not in text


def test_one_is_singular_in_annotate_and_in_a_file_set_s_name(tmp_path):
    from nagleprobe.fileset import set_name
    from nagleprobe.humanize import counted

    assert counted(1, "stall") == "1 stall" and counted(2, "stall") == "2 stalls"
    assert counted(1, "fix", "fixes") == "1 fix" and counted(3, "fix", "fixes") == "3 fixes"
    assert set_name(["a.pcap", "b.pcap"]) == "a.pcap (+1 file)"
    assert set_name(["a.pcap", "b.pcap", "c.pcap"]) == "a.pcap (+2 files)"
    r = CliRunner().invoke(main, ["annotate", str(SAMPLES / "echo_split_lo.pcap"), "-o",
                                  str(tmp_path / "a.pcapng")])
    assert "(19 stalls in 1 of 1 TCP flow)" in r.output


@needs_field
def test_times_since_the_flow_the_capture_or_as_utc():
    r = nagleprobe.analyze(str(COAP))
    first = lambda t: next(x for x in t.splitlines() if x.startswith("    client  #49 "))  # noqa
    assert first(r.to_text(80)).split()[2] == "13.152243"  # since the flow's first packet
    assert first(r.to_text(80, times="capture")).split()[2] == "121949561.191360"
    from datetime import datetime, timezone

    st = r.columns("stalls")
    ns = int(st["small_time"][st["small_frame"] == 49][0])
    when = datetime.fromtimestamp(ns // 1000 / 1e6, timezone.utc)
    utc = r.to_text(80, times="utc")
    assert first(utc).split()[2] == when.strftime("%H:%M:%S.%f")
    assert "UTC time of day (2016-02-19)" in " ".join(utc.split())
    with pytest.raises(ValueError, match="times"):
        r.to_text(80, times="local")


def test_the_time_option_reaches_the_report(monkeypatch):
    sample = SAMPLES / "echo_split_lo.pcap"
    out = analyze_cli("-t", "capture", sample)
    assert out == nagleprobe.analyze(str(sample)).to_text(80, times="capture")
    assert "since the capture's first packet" in " ".join(out.split())


def test_a_number_is_never_split_from_its_unit():
    line = "  note: " + "x" * 60 + " ~44 ms, 3.99 s, 7 B, 12 stalls and 99.1% of it"
    for width in range(60, 90):
        out = fit_lines([line], width)
        assert " ".join(x.strip() for x in out) == line.strip()
        for x in out:
            assert not re.search(r"\d$", x) or len(out) == 1, (width, out)


def test_a_path_longer_than_the_width_is_broken_after_its_slashes(tmp_path):
    deep = tmp_path / ("d" * 30) / ("e" * 30) / ("f" * 30)
    deep.mkdir(parents=True)
    capture = deep / "echo_split_lo.pcap"
    capture.write_bytes((SAMPLES / "echo_split_lo.pcap").read_bytes())
    text = nagleprobe.analyze(str(capture)).to_text(80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    head = "".join(lines[:lines.index(next(x for x in lines if x.startswith("  pcap, ")))])
    assert head == f"{capture}:"


def test_watch_lines_fit_a_terminal_and_stay_whole_in_a_pipe(monkeypatch):
    sample = str(SAMPLES / "echo_split_lo.pcap")
    piped = CliRunner().invoke(main, ["watch", sample]).output.splitlines()
    stalls = [x for x in piped if " stall flow " in x]
    assert len(stalls) == 19  # a pipe: a line per stall, whatever its length
    monkeypatch.setattr(cli_module, "stdout_is_terminal", lambda: True)
    monkeypatch.setattr(cli_module, "text_width", lambda: 80)
    shown = CliRunner().invoke(main, ["watch", sample]).output
    assert max(map(len, shown.splitlines())) <= 80
    assert shown.split() == "\n".join(piped).split()
