"""benchmarks/bench_results.py: a benchmark's printed summary becomes a dated entry of
benchmarks/RESULTS.md, which the Performance page is made from."""

import datetime
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_results  # noqa: E402

SUMMARY = """
10000000 packets, 15 rounds, order rotated each round
| command | wall s | CPU s |
| --- | --- | --- |
| cwalk | 0.72 | 0.71 |

text / C walk: 1.96 (goal 2)
per round text / cwalk: median 1.87
"""


def test_an_entry_has_date_command_commit_and_the_summary_as_markdown():
    when = datetime.datetime(2026, 11, 27, 11, 40, tzinfo=datetime.timezone.utc)
    text = bench_results.entry("bench_cwalk.py", ["--rounds", "15"], SUMMARY, ["63b8780"], when)
    head, machine, *blocks = text.strip().split("\n\n")
    assert head == "## 2026-11-27 11:40 UTC · bench_cwalk.py --rounds 15 · commit 63b8780"
    assert machine.startswith("Machine: ") and "CPUs, Python" in machine
    # the table stays whole and stands apart; every other line is a paragraph of its own
    assert blocks == ["10000000 packets, 15 rounds, order rotated each round",
                      "| command | wall s | CPU s |\n| --- | --- | --- |\n| cwalk | 0.72 | 0.71 |",
                      "text / C walk: 1.96 (goal 2)", "per round text / cwalk: median 1.87"]


def test_the_commit_is_the_checkouts_and_says_when_files_differ(tmp_path):
    got = bench_results.commit(ROOT)
    if got.startswith("unknown"):
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert got.split("+")[0] == head
    assert bench_results.commit(tmp_path) == "unknown (not a git checkout)"


def test_recorded_prints_as_usual_and_appends_one_entry_per_run(tmp_path, capsys):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\nPreamble.\n")
    for n in (1, 2):
        with bench_results.recorded("bench_x.py", str(results), argv=[f"--run={n}"]):
            print(f"summary of run {n}")
        assert f"summary of run {n}" in capsys.readouterr().out
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\nPreamble.\n\n## ")
    heads = re.findall(r"^## \d{4}-\d\d-\d\d \d\d:\d\d UTC · bench_x.py (--run=\d) · commit ",
                       text, re.M)
    assert heads == ["--run=1", "--run=2"]
    assert text.index("summary of run 1") < text.index("summary of run 2")


def test_no_entry_for_dash_or_for_a_run_that_failed(tmp_path, capsys):
    results = tmp_path / "RESULTS.md"
    with bench_results.recorded("bench_x.py", "-", argv=[]):
        print("shown only")
    with pytest.raises(RuntimeError), bench_results.recorded("bench_x.py", str(results), argv=[]):
        print("half a summary")
        raise RuntimeError("the run failed")
    assert not results.exists()
    assert "shown only" in capsys.readouterr().out


@pytest.mark.parametrize("script", ["bench_cwalk.py", "bench_scaling.py"])
def test_the_benchmarks_record_their_summary(script):
    source = (ROOT / "benchmarks" / script).read_text()
    assert f'bench_results.recorded("{script}", args.results' in source
    assert "bench_results.add_argument(ap)" in source
