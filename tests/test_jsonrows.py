"""The JSON row writer: its compiled and Python forms write the same bytes, and those bytes
are what `json.dumps` writes for the same values."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import nagleprobe
from nagleprobe import json_report, jsonrows
from nagleprobe.jsonrows import Program, render_python

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))
compiled = pytest.mark.skipif(jsonrows._compiled is None, reason="built without a C compiler")


def both(p: Program, rows: int) -> str:
    """The rows written by the compiled writer, checked equal to the Python one's."""
    text = p.render(0, rows)
    assert render_python(p.ops, 0, rows) == text
    return text


def dumps(values) -> str:
    return ",".join(json.dumps(v, separators=(",", ":")) for v in values)


# floats that test each way repr writes a number: exponents, negative zero, integral
# values, the edges of the fixed-point path, rounded and unrounded values
AWKWARD = [0.0, -0.0, 1.0, -2.0, 0.1, 1e-4, 9.9e-5, 1e-5, 6.7e-05, 0.000180, 43.593, 1e15,
           1e16, 123456789.123456, 2.0 ** 60, 1 / 3, math.pi, -1e-7, 5e-324, 1.7976931348623157e308]


@compiled
@pytest.mark.parametrize("k", [None, 0, 1, 3, 6, 9])
def test_floats_are_written_as_python_repr_writes_them(k):
    rng = np.random.default_rng(k or 0)
    awkward = AWKWARD if k is None else AWKWARD[:-1]  # (rounding the largest double overflows)
    x = np.concatenate([awkward, rng.normal(0, 1e3, 2000), rng.exponential(1e-4, 2000),
                        rng.uniform(-1e12, 1e12, 500)])
    if k is not None:
        x = np.round(x, k)
    p = Program().value(x)
    if k is not None:
        assert p.ops[0][2] <= k  # the writer makes these digits itself
    assert both(p, len(x)) == dumps(x.tolist())


@compiled
def test_nan_is_null_and_infinity_an_error():
    assert both(Program().value(np.array([np.nan, 1.5])), 2) == "null,1.5"
    with pytest.raises(ValueError, match="not JSON compliant"):
        Program().value(np.array([np.inf])).render(0, 1)
    with pytest.raises(ValueError, match="not JSON compliant"):
        render_python(Program().value(np.array([-np.inf])).ops, 0, 1)


@compiled
def test_integers_booleans_and_missing_integers():
    ints = np.array([0, -1, 2**63 - 1, -2**63, 42], dtype=np.int64)
    assert both(Program().value(ints), 5) == dumps(ints.tolist())
    assert both(Program().value(np.array([True, False])), 2) == "true,false"
    missing = np.array([False, True, False])
    assert both(Program().value(np.array([3, -1, -7]), missing), 3) == "3,null,-7"
    assert both(Program().value(np.array([1, 2], dtype=np.uint16)), 2) == "1,2"


@compiled
def test_factorize_numbers_distinct_objects_in_order_of_first_sight_and_missing_as_minus_one():
    objects = np.array(["b", None, "a", "b", float("nan"), np.float64("nan"), "a", 7],
                       dtype=object)
    for codes, distinct in (jsonrows.factorize(objects), jsonrows.factorize_python(objects)):
        assert codes.tolist() == [0, -1, 1, 0, -1, -1, 1, 2]
        assert distinct == ["b", "a", 7]
    assert jsonrows.factorize(np.zeros(0, dtype=object))[0].dtype == np.int64
    with pytest.raises(TypeError):  # unhashable objects: an error, never a wrong code
        jsonrows.factorize([1, 2, {}])


@compiled
def test_text_is_encoded_as_json_dumps_encodes_it():
    texts = ['plain', 'quote " and \\ backslash', "tab\tnewline\n\x01", "caf\u00e9 \u2192 \U0001F600",
             None, "plain", float("nan")]
    out = both(Program().text(np.array(texts, dtype=object)), len(texts))
    want = [json.dumps(t) if isinstance(t, str) else "null" for t in texts]
    assert out == ",".join(want)
    assert out.isascii()


@compiled
def test_objects_lists_and_nulls_nest():
    p = Program()
    p.obj([("a", lambda q: q.value(np.array([1, 2, 3]))),
           ("b", lambda q: q.maybe(np.array([False, True, False]), lambda g: g.obj(
               [("x", lambda h: h.value(np.array([0.5, 0.25, 0.125])))]))),
           ("c", lambda q: q.int_list(np.array([7, 8, 9]), np.array([0, 2, 2, 3]),
                                      '"in {', '}"')),
           ("d", lambda q: q.sparse(["p", "q"], [np.array([0, 1, 0]), np.array([2, 0, 0])]))])
    rows = json.loads("[" + both(p, 3) + "]")
    assert rows == [{"a": 1, "b": {"x": 0.5}, "c": "in {7,8}", "d": {"q": 2}},
                    {"a": 2, "b": None, "c": None, "d": {"p": 1}},
                    {"a": 3, "b": {"x": 0.125}, "c": "in {9}", "d": {}}]


@compiled
def test_malformed_programs_are_refused_not_read_out_of_bounds():
    short = Program().value(np.array([1, 2]))
    with pytest.raises(ValueError, match="wrong type or length"):
        short.render(0, 3)
    with pytest.raises(ValueError, match="MAYBE skips past the end"):
        jsonrows.render([(jsonrows.MAYBE, np.array([True]), 5)], 0, 1)
    with pytest.raises(IndexError):
        jsonrows.render([(jsonrows.TEXT, np.array([3]), ['"a"'])], 0, 1)
    with pytest.raises(ValueError, match="not ASCII"):
        jsonrows.render([(jsonrows.LIT, "\u00e9")], 0, 1)
    with pytest.raises(IndexError):
        jsonrows.render([(jsonrows.INTLIST, np.array([1]), np.array([0, 5]), "", "")], 0, 1)


@compiled
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_samples_flows_and_stalls_are_written_the_same_by_both(path):
    r = nagleprobe.analyze(str(path))
    both(json_report.flow_program(r), len(r.flows))
    both(json_report.stall_program(r.stalls), len(r.stalls))


def objects_both(p: Program, start: int, stop: int) -> list:
    """The rows as objects, compiled and in Python, checked equal to the text read back."""
    want = json.loads("[" + render_python(p.ops, start, stop) + "]")
    got = p.objects(start, stop)
    assert json.dumps(got) == json.dumps(want)  # types and key order too
    saved, jsonrows._compiled = jsonrows._compiled, None
    try:
        assert json.dumps(p.objects(start, stop)) == json.dumps(want)
    finally:
        jsonrows._compiled = saved
    return got


@pytest.mark.parametrize("seed", range(4))
def test_objects_are_what_the_text_reads_back_as_over_any_rows(seed):
    rng = np.random.default_rng(seed)
    n = 300
    texts = np.array(rng.choice(["a", "é \" \\", None, "z\n"], n), dtype=object)
    null = rng.random(n) < 0.3
    counts = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    p = Program().obj([
        ("i", lambda q: q.value(rng.integers(-2**63, 2**63 - 1, n), rng.random(n) < 0.2)),
        ("f", lambda q: q.value(np.where(rng.random(n) < 0.2, np.nan,
                                         np.round(rng.normal(0, 1e3, n), 3)))),
        ("b", lambda q: q.value(rng.random(n) < 0.5)),
        ("t", lambda q: q.text(texts)),
        ("m", lambda q: q.maybe(null, lambda g: g.obj(
            [("x", lambda h: h.value(np.arange(n) * 0.5)),
             ("e", lambda h: h.obj([]))]))),
        ("l", lambda q: q.int_list(rng.integers(0, 1000, offsets[-1]), offsets, '"in {', '}"')),
        ("s", lambda q: q.sparse(["p", "q"], [rng.integers(0, 2, n), rng.integers(0, 3, n)])),
        ("r", lambda q: q.raw(['{"k":[1,2]}' if v % 2 else "null" for v in range(n)]))])
    rows = objects_both(p, 0, n)
    assert len(rows) == n and rows[1]["r"] == {"k": [1, 2]}
    assert rows[1]["r"] is not rows[3]["r"]  # each row its own (mutable) objects
    objects_both(p, 17, 161)
    assert objects_both(p, 5, 5) == []


def test_objects_refuse_infinity_and_text_that_is_not_keys():
    with pytest.raises(ValueError, match="not JSON compliant"):
        Program().value(np.array([1.0, np.inf])).objects(0, 2)
    assert Program().value(np.array([1.0, np.nan])).objects(0, 2) == [1.0, None]
    shared = Program()
    shared.ops.append((jsonrows.TEXT, np.array([0, 0, -1]), ["[1]"]))
    a, b, none = shared.objects(0, 3)
    assert a == b == [1] and a is not b and none is None
    with pytest.raises(ValueError, match="not an object's keys"):
        Program().lit("[").objects(0, 1)
