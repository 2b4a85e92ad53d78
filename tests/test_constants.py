"""Each constant the compiled loops share with Python is declared in Python and written for C
into one generated header, nagleprobe/_columns.h (C cannot import Python's), which every C
module includes; the compiled modules export the values they were built with, and these
must equal Python's. The detection thresholds are not copied at all: Python passes them to
`_detect.c` (see tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nagleprobe import cheader, decode, encap, tuples

PACKAGE = Path(decode.__file__).parent
C_SOURCES = sorted(PACKAGE.glob("*.c"))

_decode = pytest.importorskip("nagleprobe._decode", reason="compiled decoder not built")
_flows = pytest.importorskip("nagleprobe._flows", reason="compiled flow loops not built")


@pytest.mark.parametrize("compiled, python, names", [
    (_decode, decode, ("SYN", "V4_MAPPED", "COMPILED_COLUMNS")),
    (_decode, encap, ("MAX_VLAN_TAGS", "MAX_DEPTH", "MAX_MPLS_LABELS")),
    (_flows, decode, ("FIN", "SYN", "RST", "ACK")),
    (_flows, tuples, ("MIX_MULTIPLIER", "MIX_SHIFT")),
    (_decode, tuples, ("MIX_MULTIPLIER", "MIX_SHIFT")),
])
def test_the_compiled_copies_equal_pythons(compiled, python, names):
    for name in names:
        assert getattr(compiled, name) == getattr(python, name), name



def test_the_header_is_current_with_the_python_declarations():
    assert cheader.HEADER.read_text() == cheader.render(), \
        "nagleprobe/_columns.h is stale: run python3 -m nagleprobe.cheader"


def test_the_header_declares_every_compiled_column_with_its_dtypes_c_type():
    text = cheader.HEADER.read_text()
    declared = re.findall(r"X\((\w+), (\w+)\)", text)
    assert [name for name, _ in declared] == list(decode.COMPILED_COLUMNS)
    for name, ctype in declared:
        dtype = decode.TCP_COLUMNS[name]
        assert ctype == ("u" if dtype.kind == "u" else "") + f"int{dtype.itemsize * 8}_t"
    assert f"#define N_COMPILED_COLUMNS {len(declared)}" in text


def test_the_compiled_columns_are_the_decoded_ones_the_batch_and_peeler_do_not_give():
    assert list(decode.COMPILED_COLUMNS) == [
        k for k in decode.TCP_COLUMNS if k not in ("frame", "ts_ns", "tunnel")]


def test_a_column_type_the_header_cannot_express_is_refused():
    with pytest.raises(ValueError, match="float64"):
        cheader.c_type(np.dtype(np.float64))


@pytest.mark.parametrize("source", C_SOURCES, ids=lambda p: p.name)
def test_every_c_module_includes_the_header_and_defines_none_of_its_names(source):
    text = source.read_text()
    assert '#include "_columns.h"' in text
    shared = set(re.findall(r"^#define (\w+)", cheader.HEADER.read_text(), re.MULTILINE))
    defined = set(re.findall(r"^\s*#define (\w+)", text, re.MULTILINE))
    for body in re.findall(r"enum\s*{([^}]*)}", text):
        defined |= set(re.findall(r"[A-Za-z_]\w*", body))
    assert not shared & defined


def test_the_python_peeler_reads_the_offsets_the_compiled_one_does():
    """encap.py binds the sizes and offsets it reads under the names _columns.h gives
    _decode.c's peel: every such name has one value in both."""
    header = cheader.HEADER.read_text()
    defined = dict(re.findall(r"^#define (\w+) (\d+)$", header, re.MULTILINE))
    shared = sorted(n for n in defined if hasattr(encap, n))
    assert len(shared) >= 30, shared
    assert {n: getattr(encap, n) for n in shared} == {n: int(defined[n]) for n in shared}
