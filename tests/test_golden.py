"""Golden outputs: the text report, `check`'s text and its JUnit XML for a few samples, stored
in tests/golden/ and compared byte for byte, so any change to what users read shows up in a
review as a diff of these files.

After a deliberate change to an output, rewrite them and review the diff:

    NAGLEPROBE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nagleprobe.cli import main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("NAGLEPROBE_UPDATE_GOLDEN") == "1"
SAMPLES = {  # name: the captures, relative to the repository (as a user in a checkout types)
    "echo_split_lo": ["samples/echo_split_lo.pcap"],
    "classic_small_tap": ["samples/classic_small_tap.pcap"],
    "long_echo_split_rtt200_middle": ["samples/long_echo_split_rtt200_middle.pcap"],
    "proxy_any_sll2": ["samples/proxy_any_sll2.pcap"],
    "base_lo_pcapng_gz": ["samples/formats/base_lo.pcapng.gz"],
    "neg_quickack_lo": ["samples/neg_quickack_lo.pcap"],
    "rotated_set": sorted(str(p.relative_to(ROOT)) for p in
                          (ROOT / "samples/sets/echo_split_rotated_lo").glob("*.pcap*")),
}


def masked(text: str) -> str:
    """What truly varies between runs: the run's timings in the JUnit XML."""
    return re.sub(r'time="[0-9.]+"', 'time="T"', text)


def outputs(captures: list[str], tmp_path: Path) -> dict[str, str]:
    runner = CliRunner()
    junit = tmp_path / "junit.xml"
    got = {"analyze.txt": runner.invoke(main, ["analyze", "--quiet", *captures],
                                        terminal_width=100).output,
           "check.txt": runner.invoke(main, ["check", "--no-progress", "--no-config", "-j", "1",
                                             "--junit", str(junit),
                                             *captures], terminal_width=100).output}
    got["junit.xml"] = masked(junit.read_text())
    return got


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_outputs_are_the_golden_ones(name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    for suffix, text in outputs(SAMPLES[name], tmp_path).items():
        path = GOLDEN / f"{name}.{suffix}"
        if UPDATE:
            path.write_text(text)
        assert path.exists(), f"{path} missing: run with NAGLEPROBE_UPDATE_GOLDEN=1"
        assert text == path.read_text(), f"{path.name} differs (see the module docstring)"


def test_every_golden_file_belongs_to_a_sample():
    names = {f"{n}.{s}" for n in SAMPLES for s in ("analyze.txt", "check.txt", "junit.xml")}
    assert {p.name for p in GOLDEN.iterdir() if p.name != "README.md"} == names
