"""Rows of a table as JSON text, written from its columns by a small program of ops.

A JSON document of a million stalls written by `json.dumps` needs a million dicts first,
and pandas' writer cannot nest; so the shape of a row (its keys, nested objects, what may
be null) is written down once as a program (`Program`), and `render` runs it over the
columns, in C (`_jsonrows.c`) or, without a compiler, in Python (`render_python`: the
reference, held equal byte for byte by tests/test_jsonrows.py). Numbers come out as
`json.dumps` writes them (Python's float repr), text as `json.dumps` encodes it (ASCII).
`objects` runs the same program column by column into the Python objects `json.loads`
would make of that text, without the text (`Report.to_dict`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii as _encode_str
from typing import Any

import numpy as np

try:
    from . import _jsonrows as _compiled
except ImportError:  # built without a C compiler
    _compiled = None

LIT, INT, FLOAT, BOOL, TEXT, MAYBE, INTLIST, SPARSE = range(8)
MAX_DECIMALS = 9


def encode(value: Any) -> str:
    """One value as compact JSON (as the document writes it)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def decimals(x: np.ndarray) -> int:
    """The fewest decimals k (up to MAX_DECIMALS) with np.round(x, k) == x everywhere (NaN
    aside), else -1: the compiled writer makes the digits of such values itself."""
    finite = x[np.isfinite(x)]
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: no k, repr writes them
        for k in range(MAX_DECIMALS + 1):
            if np.array_equal(np.round(finite, k), finite):
                return k
    return -1


def factorize(objects: np.ndarray | Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """(codes, distinct): each object's index among the distinct objects (in order of first
    sight; -1 for None and NaN, i.e. missing) and those objects (compiled when built)."""
    objects = np.asarray(objects, dtype=object).reshape(-1)
    if _compiled is None:
        return factorize_python(objects)
    codes = np.empty(len(objects), dtype=np.int64)
    return codes, _compiled.factorize(objects, codes)


def factorize_python(objects: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """The reference for `_jsonrows.factorize`."""
    index: dict[Any, int] = {}
    codes = np.fromiter((-1 if v is None or (isinstance(v, float) and math.isnan(v))
                         else index.setdefault(v, len(index)) for v in objects.tolist()),
                        dtype=np.int64, count=len(objects))
    return codes, list(index)


class Program:
    """The ops that write one row (see _jsonrows.c for their meaning); built key by key."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []
        self._sealed = 0  # ops before this are a MAYBE's: text is not joined to them

    def lit(self, text: str) -> Program:
        if len(self.ops) > self._sealed and self.ops[-1][0] == LIT:
            self.ops[-1] = (LIT, self.ops[-1][1] + text)
        else:
            self.ops.append((LIT, text))
        return self

    def value(self, col: np.ndarray, null: np.ndarray | None = None) -> Program:
        """A column's value, by its type: integers (null where `null` is set), floats (NaN:
        null), booleans, else text (None or NaN: null)."""
        col = np.asarray(col)
        kind = col.dtype.kind
        if kind in "iu":
            self.ops.append((INT, np.ascontiguousarray(col, dtype=np.int64),
                             None if null is None else np.ascontiguousarray(null, dtype=np.bool_)))
        elif kind == "f":
            x = np.ascontiguousarray(col, dtype=np.float64)
            self.ops.append((FLOAT, x, decimals(x)))
        elif kind == "b":
            self.ops.append((BOOL, np.ascontiguousarray(col, dtype=np.bool_)))
        else:
            self.text(col)
        return self

    def text(self, col: np.ndarray | Sequence[Any]) -> Program:
        """Text (or any JSON-able objects) per row, each distinct value encoded once."""
        codes, uniques = factorize(col)
        self.ops.append((TEXT, codes, [_encode_str(u) if type(u) is str else encode(u)
                                       for u in uniques]))
        return self

    def raw(self, fragments: Sequence[str]) -> Program:
        """Per row, JSON text written as it is."""
        return self.coded(np.arange(len(fragments), dtype=np.int64), fragments)

    def coded(self, codes: np.ndarray, fragments: Sequence[str]) -> Program:
        """Per row r, the JSON text fragments[codes[r]] written as it is."""
        self.ops.append((TEXT, np.ascontiguousarray(codes, dtype=np.int64), list(fragments)))
        return self

    def maybe(self, null: np.ndarray, build: Callable[[Program], object]) -> Program:
        """null where `null` is set, else what `build` adds."""
        inner = Program()
        build(inner)
        self.ops.append((MAYBE, np.ascontiguousarray(null, dtype=np.bool_), len(inner.ops)))
        self.ops.extend(inner.ops)
        self._sealed = len(self.ops)
        return self

    def int_list(self, values: np.ndarray, offsets: np.ndarray, prefix: str,
                 suffix: str) -> Program:
        """prefix + comma-separated values[offsets[r]:offsets[r + 1]] + suffix (null if none)."""
        self.ops.append((INTLIST, np.ascontiguousarray(values, dtype=np.int64),
                         np.ascontiguousarray(offsets, dtype=np.int64), prefix, suffix))
        return self

    def sparse(self, keys: Sequence[str], cols: Sequence[np.ndarray]) -> Program:
        """An object of the integer columns that are nonzero in the row."""
        self.ops.append((SPARSE, [encode(k) + ":" for k in keys],
                         [np.ascontiguousarray(c, dtype=np.int64) for c in cols]))
        return self

    def obj(self, items: Sequence[tuple[str, Callable[[Program], object]]],
            first: str = "{", tail: Sequence[str] | None = None) -> Program:
        """{"key": ..., ...}: each item's value added by its function; then per row the
        JSON text `tail` gives (',"key":value' or "", for a key only some rows have)."""
        for j, (key, add) in enumerate(items):
            self.lit(("," if j else first) + encode(key) + ":")
            add(self)
        if tail is not None and items:  # marked, for `objects` to read as further keys
            self.ops.append((TEXT, np.arange(len(tail), dtype=np.int64), list(tail), TAIL))
        return self.lit("}" if items else first + "}")

    def render(self, start: int, stop: int) -> str:
        """Rows start..stop-1 as JSON text, comma-separated."""
        return render(self.ops, start, stop)

    def objects(self, start: int, stop: int) -> list[Any]:
        """Rows start..stop-1 as the objects `json.loads` makes of their text."""
        return _values(_tree(self.ops), np.arange(start, stop, dtype=np.int64))


def render(ops: list[tuple], start: int, stop: int) -> str:
    """Run `ops` over rows start..stop-1 (compiled when built)."""
    if _compiled is not None:
        return _compiled.render(ops, start, stop)
    return render_python(ops, start, stop)


def dicts(keys: list[str], cols: list[list[Any]], rows: int) -> list[dict[str, Any]]:
    """Per row, {keys[j]: cols[j][row]} (compiled when built)."""
    if _compiled is not None:
        return _compiled.dicts(keys, cols, rows)
    return [dict(zip(keys, r)) for r in zip(*cols)] if cols else [{} for _ in range(rows)]


def _float(x: float) -> str:
    if math.isnan(x):
        return "null"
    if math.isinf(x):
        raise ValueError("Out of range float values are not JSON compliant")
    return repr(x)


def render_python(ops: list[tuple], start: int, stop: int) -> str:
    """The reference for `_jsonrows.render`: the same text, one value at a time."""
    out: list[str] = []
    for r in range(start, stop):
        if r > start:
            out.append(",")
        i = 0
        while i < len(ops):
            op = ops[i]
            code = op[0]
            if code == LIT:
                out.append(op[1])
            elif code == INT:
                out.append("null" if op[2] is not None and op[2][r] else str(int(op[1][r])))
            elif code == FLOAT:
                out.append(_float(float(op[1][r])))
            elif code == BOOL:
                out.append("true" if op[1][r] else "false")
            elif code == TEXT:
                c = int(op[1][r])
                out.append("null" if c < 0 else op[2][c])
            elif code == MAYBE:
                if op[1][r]:
                    out.append("null")
                    i += op[2]
            elif code == INTLIST:
                vals = op[1][op[2][r]:op[2][r + 1]]
                out.append(op[3] + ",".join(map(str, vals.tolist())) + op[4] if len(vals)
                           else "null")
            elif code == SPARSE:
                out.append("{" + ",".join(k + str(int(c[r])) for k, c in zip(op[1], op[2])
                                          if c[r]) + "}")
            i += 1
    return "".join(out)


# ------------------------------------------------------------------- rows as Python objects
# A program read as a tree: ("obj", keys, children), ("maybe", mask, child) or ("op", op).
# Its literal text is only braces, commas and keys (`Program.obj` writes nothing else); an
# object's `tail` (per row ',"key":value...' or "") is its last child, ("tail", op), keyed None.
TAIL = "tail"

def _tree(ops: Sequence[tuple]) -> tuple:
    """The value the ops write, as a tree (see above)."""
    tokens: list[tuple] = []  # ("{",), ("}",), ("key", name) or ("value", tree)
    i = 0
    while i < len(ops):
        op = ops[i]
        if op[0] == LIT:
            tokens += _lit_tokens(op[1])
        elif op[0] == MAYBE:
            tokens.append(("value", ("maybe", op[1], _tree(ops[i + 1:i + 1 + op[2]]))))
            i += op[2]
        elif len(op) > 3 and op[3] == TAIL:
            tokens += [("key", None), ("value", ("tail", op))]
        else:
            tokens.append(("value", ("op", op)))
        i += 1
    tree, end = _parse(tokens, 0)
    if end != len(tokens):
        raise ValueError("jsonrows: a program must write one value per row")
    return tree


def _lit_tokens(text: str) -> list[tuple]:
    out: list[tuple] = []
    pos = 0
    while pos < len(text):
        c = text[pos]
        if c in "{}":
            out.append((c,))
        elif c == '"':
            key, pos = _decoder.raw_decode(text, pos)
            out.append(("key", key))
            continue
        elif c not in ",:":
            raise ValueError(f"jsonrows: literal {text!r} is not an object's keys")
        pos += 1
    return out


_decoder = json.JSONDecoder()


def _parse(tokens: list[tuple], pos: int) -> tuple[tuple, int]:
    """(tree, position after it) of the value starting at tokens[pos]."""
    if tokens[pos][0] == "value":
        return tokens[pos][1], pos + 1
    if tokens[pos][0] != "{":
        raise ValueError(f"jsonrows: {tokens[pos]!r} where a value should start")
    keys: list[str] = []
    children: list[tuple] = []
    pos += 1
    while tokens[pos][0] != "}":
        keys.append(tokens[pos][1])
        child, pos = _parse(tokens, pos + 1)
        children.append(child)
    return ("obj", keys, children), pos + 1


def _values(tree: tuple, rows: np.ndarray) -> list[Any]:
    """The tree's value in each of `rows`, as `json.loads` reads the text `render` writes."""
    kind = tree[0]
    if kind == "obj":
        if tree[1] and tree[1][-1] is None:  # a tail: each row's further keys, in order
            out = dicts(tree[1][:-1], [_values(c, rows) for c in tree[2][:-1]], len(rows))
            texts, codes = tree[2][-1][1][2], tree[2][-1][1][1][rows].tolist()
            for d, c in zip(out, codes):
                if texts[c]:
                    d.update(json.loads("{" + texts[c][1:] + "}"))
            return out
        return dicts(tree[1], [_values(child, rows) for child in tree[2]], len(rows))
    if kind == "maybe":
        there = ~np.asarray(tree[1])[rows]
        out: list[Any] = [None] * len(rows)
        for j, v in zip(np.flatnonzero(there).tolist(), _values(tree[2], rows[there])):
            out[j] = v
        return out
    op = tree[1]
    code = op[0]
    if code in (INT, FLOAT, BOOL):
        vals = op[1][rows].tolist()
        if code == INT and op[2] is not None:
            missing = op[2][rows]
        elif code == FLOAT:
            x = op[1][rows]
            if np.isinf(x).any():
                raise ValueError("Out of range float values are not JSON compliant")
            missing = np.isnan(x)
        else:
            return vals
        for j in np.flatnonzero(missing).tolist():
            vals[j] = None
        return vals
    if code == TEXT:
        texts = op[2]
        codes = op[1][rows].tolist()
        read = json.loads("[" + ",".join(texts) + "]")
        if any(isinstance(v, (list, dict)) for v in read):  # each row its own copy
            return [None if c < 0 else json.loads(texts[c]) for c in codes]
        read.append(None)  # code -1
        return [read[c] for c in codes]
    if code == INTLIST:  # the rows' lists gathered, written by `render`, read back
        starts, counts = op[2][rows], op[2][rows + 1] - op[2][rows]
        offsets = np.concatenate([[0], np.cumsum(counts)])
        at = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1])
        text = render([(INTLIST, op[1][at], offsets, op[3], op[4])], 0, len(rows))
        return json.loads("[" + text + "]")
    if code == SPARSE:
        keys = [json.loads(k[:-1]) for k in op[1]]
        cols = [c[rows].tolist() for c in op[2]]
        return [{k: v for k, v in zip(keys, r) if v} for r in zip(*cols)]
    raise ValueError(f"jsonrows: unknown op {code}")
