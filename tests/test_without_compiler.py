"""Without the compiled parts (no C compiler when nagleprobe was installed), the numpy and
Python code gives the same report on every real capture."""

import sys
from pathlib import Path

import pytest

import nagleprobe.jsonrows
import nagleprobe.read.walk
import nagleprobe.stream
from nagleprobe.pipeline import analyze
from replicate import seen_twice

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))


def without_compiled_parts(monkeypatch) -> None:
    """Every module of the package that uses a compiled extension (`_compiled`) as if it had
    not been built."""
    users = [m for name, m in list(sys.modules.items())
             if name.startswith("nagleprobe.") and hasattr(m, "_compiled")]
    assert len(users) >= 6, users  # the loaded analysis modules
    for module in users:
        monkeypatch.setattr(module, "_compiled", None)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_the_report_is_the_same_without_the_compiled_parts(path, monkeypatch):
    compiled = analyze(str(path), chunk_bytes=16 << 10).to_json()
    without_compiled_parts(monkeypatch)
    assert analyze(str(path), chunk_bytes=16 << 10).to_json() == compiled


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "proxy_any.pcap",
                                  "neg_bulk_cwnd_netns.pcap"])
def test_duplicates_are_dropped_the_same_without_the_compiled_parts(name, tmp_path,
                                                                     monkeypatch):
    """Synthetic derivations of real captures, every packet seen twice (tests/replicate.py)."""
    path = tmp_path / name
    path.write_bytes(seen_twice(name)[0])
    compiled = analyze(str(path), chunk_bytes=16 << 10).to_json()
    without_compiled_parts(monkeypatch)
    report = analyze(str(path), chunk_bytes=16 << 10)
    assert report.capture["skipped"]["duplicate"] == report.capture["packets"] // 2
    assert report.to_json() == compiled
