"""Rows of a table as JSON text, written from its columns by a small program of ops.

A JSON document of a million stalls written by `json.dumps` needs a million dicts first,
and pandas' writer cannot nest; so the shape of a row (its keys, nested objects, what may
be null) is written down once as a program (`Program`), and `render` runs it over the
columns, in C (`_jsonrows.c`) or, without a compiler, in Python (`render_python`: the
reference, held equal byte for byte by tests/test_jsonrows.py). Numbers come out as
`json.dumps` writes them (Python's float repr), text as `json.dumps` encodes it (ASCII).
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
            first: str = "{") -> Program:
        """{"key": ..., ...}: each item's value added by its function."""
        for j, (key, add) in enumerate(items):
            self.lit(("," if j else first) + encode(key) + ":")
            add(self)
        return self.lit("}" if items else first + "}")

    def render(self, start: int, stop: int) -> str:
        """Rows start..stop-1 as JSON text, comma-separated."""
        return render(self.ops, start, stop)


def render(ops: list[tuple], start: int, stop: int) -> str:
    """Run `ops` over rows start..stop-1 (compiled when built)."""
    if _compiled is not None:
        return _compiled.render(ops, start, stop)
    return render_python(ops, start, stop)


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
