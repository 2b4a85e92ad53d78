"""The named column table: schema, selection of rows, joining tables, empty tables."""

from __future__ import annotations

import numpy as np
import pytest

from nagleprobe.columns import Columns, distinct, take
from nagleprobe.decode import TCP_COLUMNS


def table(n: int, start: int = 0) -> Columns:
    return Columns({"frame": np.arange(start, start + n, dtype=np.int64),
                    "flags": np.arange(n, dtype=np.uint16) % 3})


def test_an_empty_table_has_the_schemas_columns_in_order_and_no_rows():
    cols = Columns.empty(TCP_COLUMNS)
    assert list(cols) == list(TCP_COLUMNS)
    assert cols.schema == TCP_COLUMNS
    assert cols.row_count == 0
    assert all(len(v) == 0 for v in cols.values())


def test_a_table_is_a_dict_of_its_columns():
    cols = table(4)
    assert isinstance(cols, dict)
    assert cols["frame"].tolist() == [0, 1, 2, 3]
    assert cols.row_count == 4
    assert Columns().row_count == 0


def test_take_selects_the_same_rows_of_every_column_by_position_mask_or_slice():
    cols = table(5)
    for index, frames in ((np.array([4, 0]), [4, 0]), (cols["flags"] == 0, [0, 3]),
                          (slice(1, 3), [1, 2])):
        got = cols.take(index)
        assert isinstance(got, Columns)
        assert got["frame"].tolist() == frames
        assert got["flags"].tolist() == cols["flags"][index].tolist()
        assert got.schema == cols.schema


def test_take_works_on_a_plain_mapping_of_columns():
    plain = dict(table(3))
    got = take(plain, np.array([2]))
    assert isinstance(got, Columns) and got["frame"].tolist() == [2]


def test_concat_puts_the_parts_rows_one_after_another_leaving_out_none():
    got = Columns.concat([table(2), None, table(3, start=10)])
    assert got["frame"].tolist() == [0, 1, 10, 11, 12]
    assert got.schema == table(1).schema


def test_concat_of_one_part_is_a_copy_not_the_part():
    part = table(2)
    got = Columns.concat([part])
    got["frame"][0] = 99
    assert part["frame"][0] == 0


def test_concat_needs_a_part():
    with pytest.raises(IndexError):
        Columns.concat([None])


def test_empty_like_keeps_columns_and_dtypes_without_rows():
    got = Columns.empty_like({"a": np.ones(3, np.int8), "b": np.ones(3, np.float32)})
    assert got.schema == {"a": np.dtype(np.int8), "b": np.dtype(np.float32)}
    assert got.row_count == 0


def test_distinct_is_numpys_unique_of_integers():
    rng = np.random.default_rng(7)
    for a in (np.zeros(0, np.int64), rng.integers(-5, 50, 1000), np.arange(10)[::-1]):
        assert np.array_equal(distinct(a), np.unique(a))
    assert distinct(np.zeros(0, np.int64)).dtype == np.int64
