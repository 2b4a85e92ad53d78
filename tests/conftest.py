import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

import nagleprobe  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="session")
def echo_split():
    """Report of the real echo capture: client writes 6 + 7 bytes, 19 stalls of ~44 ms."""
    return nagleprobe.analyze(str(SAMPLES / "echo_split_lo.pcap"))


@pytest.fixture(scope="session")
def proxy_any():
    """Report of the real proxy capture: 2 flows, 19 stalls on the proxy->backend flow (1)."""
    return nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"))


@pytest.fixture(scope="session")
def win200():
    """Report of the real records capture with an emulated 200 ms delayed-ACK peer: 20 stalls."""
    return nagleprobe.analyze(str(SAMPLES / "records_bulk_win200_netns.pcap"))
