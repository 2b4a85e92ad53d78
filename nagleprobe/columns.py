"""A table of named columns: the shape every stage passes on (decoded packets, flows, stalls).

`Columns` is a dict of name -> 1-D numpy array, all of one length, so code that indexes it by
name keeps working; it adds the table operations that were helpers scattered over the stages:
its schema, a selection of rows, and the join of several tables with the same columns.
Every operation is one numpy call per column: no per-row Python work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

Schema = Mapping[str, np.dtype]


class Columns(dict[str, np.ndarray]):
    """Named columns of equal length (a dict, so `cols["ts_ns"]` is a column)."""

    @classmethod
    def empty(cls, schema: Schema) -> Columns:
        """No rows, in the schema's column order and dtypes."""
        return cls({k: np.zeros(0, dtype=t) for k, t in schema.items()})

    @classmethod
    def concat(cls, parts: Iterable[Mapping[str, np.ndarray] | None]) -> Columns:
        """The rows of `parts` one after another (None parts are left out; at least one part
        remains), with the columns of the first part."""
        kept = [p for p in parts if p is not None]
        return cls({k: np.concatenate([p[k] for p in kept]) for k in kept[0]})

    @property
    def schema(self) -> dict[str, np.dtype]:
        """Column name -> dtype, in column order."""
        return {k: v.dtype for k, v in self.items()}

    @property
    def row_count(self) -> int:
        """How many rows (0 for a table without columns)."""
        return len(next(iter(self.values()))) if self else 0

    def take(self: Mapping[str, np.ndarray], index: np.ndarray | slice) -> Columns:
        """The rows `index` selects (positions, a boolean mask or a slice) of every column.
        Callable on any mapping of columns: `Columns.take(mapping, index)`."""
        return Columns({k: v[index] for k, v in self.items()})

    def empty_like(self: Mapping[str, np.ndarray]) -> Columns:
        """No rows, with these columns and dtypes (callable on any mapping of columns)."""
        return Columns({k: v[:0] for k, v in self.items()})


take = Columns.take  # the same selection for callers that hold a plain mapping of columns


def distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a) for integers, sorted (numpy's own imports numpy.ma on first use)."""
    a = np.sort(a)
    return a[np.flatnonzero(np.r_[True, a[1:] != a[:-1]])] if len(a) else a
