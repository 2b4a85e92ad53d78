"""benchmarks/calibrate.py: the share of reported stalls that are true, per confidence band,
as docs/DETECTION.md ("What confidence means") states it."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibrate  # noqa: E402


@pytest.mark.parametrize("confidence, name", [(0.4, "below 0.5"), (0.5, "0.5-0.79"),
                                              (0.6, "0.5-0.79"), (0.79, "0.5-0.79"),
                                              (0.8, "0.8 and above"), (0.95, "0.8 and above")])
def test_a_confidence_falls_in_one_band(confidence, name):
    assert calibrate.BANDS[calibrate.band(confidence)][0] == name


def test_beyond_the_true_count_the_lowest_confidences_are_the_false_ones():
    # three stalls of the labelled sender, two true (one certainly), one of the other side
    got = calibrate.tally([(0.95, True), (0.6, True), (0.9, True), (0.95, False)],
                          certain=1, accepted=2)
    low, mid, high = got
    assert low == [0, 0, 0]
    assert mid == [1, 0, 0]            # the 0.6 is the third: false
    assert high == [3, 2, 1]           # 0.95 and 0.9 true, the other side's 0.95 false


def test_the_table_gives_each_band_its_share_of_true_stalls():
    groups = [calibrate.tally([(0.95, True)] * 4, 3, 4), calibrate.tally([(0.6, False)], 0, 0)]
    rows = calibrate.table({"src": groups}).splitlines()
    assert "| 0.8 and above | src | 1 | 4 | 4 | 100 % | 75 % |" in rows
    assert "| 0.5-0.79 | src | 1 | 1 | 0 | 0 % | 0 % |" in rows


def test_the_detection_page_states_the_bands_and_links_the_results():
    page = (ROOT / "docs" / "DETECTION.md").read_text()
    section = page.split("## What confidence means", 1)[1].split("\n## ", 1)[0]
    for name, _ in calibrate.BANDS:
        assert f"| {name} |" in section, name
    assert "(performance.md)" in section and "benchmarks/calibrate.py" in section
