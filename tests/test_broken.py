"""Hand-broken captures (tests/broken/, documented in its README): each gets exactly the answer
written down when it was made: the exit status and one-line error, or the warnings, packet
count and skipped counts, and with --strict the error its first warning becomes."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nagleprobe.cli import main
from nagleprobe.errors import ExitStatus

BROKEN = Path(__file__).resolve().parent / "broken"
EXPECTED = json.loads((BROKEN / "expected.json").read_text())


def run(*args: str):
    return CliRunner().invoke(main, ["analyze", *args])


def test_every_broken_file_is_documented_and_every_documented_file_exists():
    made = {p.name for p in BROKEN.iterdir() if p.suffix in (".pcap", ".pcapng", ".gz", ".txt")}
    assert made == set(EXPECTED)
    assert all((BROKEN / k).exists() for k in EXPECTED)
    readme = (BROKEN / "README.md").read_text()
    for name, case in EXPECTED.items():
        assert name in readme
        assert case.get("error", case.get("strict_error") or "") in readme


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_file_gets_its_documented_answer(name):
    case = EXPECTED[name]
    path = str(BROKEN / name)
    r = run("--format", "json", path)
    if case["exit"] == ExitStatus.BAD_CAPTURE:
        assert r.exit_code == ExitStatus.BAD_CAPTURE
        assert r.stdout == ""
        assert r.stderr == f"nagleprobe: error: {path}: {case['error']}\n"
        return
    assert r.exit_code == ExitStatus.OK, r.stderr
    cap = json.loads(r.stdout)["capture"]
    assert [w["text"] for w in cap["warnings"]] == case["warnings"]
    assert cap["packets"] == case["packets"]
    assert cap["skipped"] == case["skipped"]
    strict = run("--strict", path)
    if case["strict_error"] is None:
        assert strict.exit_code == ExitStatus.OK, strict.stderr
    else:
        assert strict.exit_code == ExitStatus.BAD_CAPTURE
        assert strict.stdout == ""
        assert strict.stderr == f"nagleprobe: error: {path}: {case['strict_error']}\n"


def test_text_report_shows_the_warnings():
    path = str(BROKEN / "pcap_garbage_inserted.pcap")
    r = run(path)
    assert r.exit_code == ExitStatus.OK
    warning = EXPECTED["pcap_garbage_inserted.pcap"]["warnings"][0]
    # the CLI wraps prose to the width (issue 14): the warning and the header's skip counts
    # are whole once the wrapping is undone, and on their own lines in an unwrapped report
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("warning: "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    assert " ".join(line.strip() for line in lines[start:end]) == f"warning: {warning}"
    header = " ".join(line.strip() for line in lines[:lines.index("")])  # wrapped or not
    assert "1 corrupt-record" in header
    from nagleprobe import analyze

    whole = analyze(path).to_text(width=1000)
    assert f"warning: {warning}\n" in whole
    assert "1 corrupt-record" in whole.splitlines()[0]


def test_damage_after_the_cut_does_not_change_what_came_before():
    """The records read before a corrupt stretch or a cut are analysed as in the intact file."""
    from nagleprobe import analyze

    intact = analyze(str(BROKEN.parent.parent / "samples/formats/base_lo.pcap")).to_dict()
    inserted = analyze(str(BROKEN / "pcap_garbage_inserted.pcap")).to_dict()
    assert inserted["stalls"] == intact["stalls"]  # nothing lost: the garbage was skipped
    cut = analyze(str(BROKEN / "pcap_cut_in_record_header.pcap")).to_dict()
    assert cut["stalls"] == intact["stalls"]  # only the final ACK is lost
