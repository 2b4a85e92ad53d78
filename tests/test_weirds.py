"""weirds: every capture warning is a named, counted fact; its code is defined once
(`WEIRDS`), named by its producer, and documented in the schema and docs/json.md."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest

from nagleprobe.json_report import json_schema
from nagleprobe.pipeline import analyze
from nagleprobe.weirds import WEIRDS, Weird, fact

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ROOT / "tests" / "broken"


def _codes(node: ast.expr, where: str) -> set[str]:
    """The codes an argument can be: a literal, either branch of `a if c else b`, or the
    parameter `code` (whose callers are read instead)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _codes(node.body, where) | _codes(node.orelse, where)
    if isinstance(node, ast.Name) and node.id == "code":
        return set()
    raise AssertionError(f"{where}: a warning code that is not written out: {ast.unparse(node)}")


def produced_codes() -> set[str]:
    """Every code the package's producers name: the first argument of each `Weird(...)`
    (and of `_damaged(...)`, which passes its `code` on)."""
    found = set()
    for path in sorted((ROOT / "nagleprobe").rglob("*.py")):
        if path.name == "weirds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                if name in ("Weird", "_damaged"):
                    found |= _codes(node.args[0], f"{path.name}:{node.lineno}")
    return found


def test_every_code_produced_is_documented_and_every_documented_code_produced():
    assert produced_codes() == set(WEIRDS)


def test_a_code_that_is_not_written_out_is_found():
    call = ast.parse("Weird(kind, 'text')").body[0].value
    with pytest.raises(AssertionError, match="not written out"):
        _codes(call.args[0], "x.py:1")


def test_the_schema_names_every_code_with_its_description():
    warning = json_schema()["$defs"]["warning"]
    assert {c["const"]: c["description"] for c in warning["properties"]["code"]["oneOf"]} \
        == WEIRDS
    assert json_schema()["properties"]["schema_version"]["const"] == 2


def test_the_json_page_lists_every_code_with_its_description():
    page = (ROOT / "docs" / "json.md").read_text().split("\n## Warnings\n", 1)[1]
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (.*) \|$", page, re.MULTILINE))
    assert rows == WEIRDS


def test_an_undocumented_code_is_refused():
    with pytest.raises(ValueError, match="undocumented warning code 'no-such-thing'"):
        Weird("no-such-thing", "text")


def test_a_warning_is_its_text_and_keeps_its_code_and_count_through_pickle():
    w = Weird("late-packet", "12 TCP packets arrived late", 12)
    assert w == "12 TCP packets arrived late" and f"warning: {w}" == \
        "warning: 12 TCP packets arrived late"
    back = pickle.loads(pickle.dumps(w))  # check's worker processes send reports back
    assert (back.code, back.count, str(back)) == ("late-packet", 12, str(w))
    assert fact(back) == {"code": "late-packet", "count": 12, "text": str(w)}
    assert w.retold(f"a.pcap: {w}").code == "late-packet"


@pytest.mark.parametrize("name, code", [
    ("pcap_garbage_inserted.pcap", "corrupt-record"),
    ("pcap_gzip_cut.pcap.gz", "truncated-capture"),
    ("pcapng_clock_step_back.pcapng", "clock-step-back"),
    ("truncated_record.pcap", "truncated-capture"),
])
def test_a_damaged_capture_s_warning_is_one_fact_in_json_notebook_and_text(name, code):
    r = analyze(str(BROKEN / name))
    doc = r.to_dict()
    assert [w["code"] for w in doc["capture"]["warnings"]] == [code]
    (w,) = doc["capture"]["warnings"]
    assert w["count"] == 1 and w["text"] == r.capture["warnings"][0]
    assert f"\nwarning: {w['text']}\n" in r.to_text(width=10_000)
    table = r.warnings
    assert list(table.columns) == ["code", "count", "text"]
    assert table.to_dict("records") == doc["capture"]["warnings"]


def test_a_capture_without_warnings_has_an_empty_warnings_table():
    r = analyze(str(ROOT / "samples" / "echo_split_lo.pcap"))
    assert r.to_dict()["capture"]["warnings"] == []
    assert list(r.warnings.columns) == ["code", "count", "text"] and r.warnings.empty
