"""Whether this machine lets the tests capture real traffic (root or CAP_NET_RAW, tcpdump).

Capture tests call `require_capture()`: it skips them with the reason when capture is not
possible (pyproject's `-rs` prints it). .ci/run runs as root, installs tcpdump and sets
NAGLEPROBE_REQUIRE_CAPTURE=1, which turns that skip into a failure: in CI these tests must
really run.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest

from nagleprobe.tcpdump import Capture, RecordError


@functools.lru_cache(maxsize=1)
def capture_unavailable() -> str | None:
    """Why loopback capture is impossible here, found by trying it (None: it works)."""
    with tempfile.TemporaryDirectory() as d:
        cap = Capture(Path(d) / "probe.pcap", "lo", ports=[9])
        try:
            cap.start()
        except RecordError as e:
            return str(e)
        cap.stop(0)
    return None


def require_capture() -> None:
    reason = capture_unavailable()
    if reason and os.environ.get("NAGLEPROBE_REQUIRE_CAPTURE") == "1":
        pytest.fail(f"NAGLEPROBE_REQUIRE_CAPTURE=1 but capture is not possible: {reason}")
    if reason:
        pytest.skip(f"real capture not possible here: {reason}")
