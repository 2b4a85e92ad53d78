"""Each constant the compiled loops share with Python is written in both languages (C cannot
import Python's); the compiled modules export their copies, and these must equal Python's.
The detection thresholds are not copied at all: Python passes them to `_detect.c` (see
tests/test_docs.py)."""

from __future__ import annotations

import pytest

from nagleprobe import decode, encap, tuples

_decode = pytest.importorskip("nagleprobe._decode", reason="compiled decoder not built")
_flows = pytest.importorskip("nagleprobe._flows", reason="compiled flow loops not built")


@pytest.mark.parametrize("compiled, python, names", [
    (_decode, decode, ("SYN", "V4_MAPPED")),
    (_decode, encap, ("MAX_VLAN_TAGS", "MAX_DEPTH", "MAX_MPLS_LABELS")),
    (_flows, decode, ("FIN", "SYN", "RST", "ACK")),
    (_flows, tuples, ("MIX_MULTIPLIER", "MIX_SHIFT")),
    (_decode, tuples, ("MIX_MULTIPLIER", "MIX_SHIFT")),
])
def test_the_compiled_copies_equal_pythons(compiled, python, names):
    for name in names:
        assert getattr(compiled, name) == getattr(python, name), name

