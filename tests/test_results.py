"""Joining the judged batches (nagleprobe/results.py): every column of every batch lands at
its flow's place in the whole capture's numbering, each batch's copy let go of as it is
joined, and batches already in order are copied, not reordered."""

import numpy as np

from nagleprobe.results import _join_stalls, _placed, _take


def test_batches_already_in_order_are_copied_in_place():
    assert _placed(np.arange(5)) is None
    parts = [np.array([1, 2]), np.array([3]), np.array([4, 5])]
    out = _take(parts, None)
    assert out.tolist() == [1, 2, 3, 4, 5] and parts == []  # the parts let go of


def test_each_row_goes_where_the_order_puts_it():
    order = np.array([3, 0, 4, 1, 2])  # the old row of each new one
    parts = [np.array(["a", "b"], dtype=object), np.array(["c", "d", "e"], dtype=object)]
    joined = np.concatenate(parts)
    out = _take(parts, _placed(order))
    assert out.tolist() == joined[order].tolist() == ["d", "a", "e", "b", "c"]
    assert out.dtype == object and parts == []


def test_parts_of_different_widths_join_as_concatenate_would():
    parts = [np.array([1, 2], dtype=np.int32), np.array([3.5])]
    assert _take(parts, _placed(np.array([2, 1, 0]))).tolist() == [3.5, 2.0, 1.0]


def test_stalls_follow_their_flows_to_the_new_numbers():
    """Batch 0 holds old flows 0 and 1, batch 1 old flow 2, which started first: it becomes
    flow 0, and its stalls come first, each flow's stalls in their own order."""
    batches = [{"flow": np.array([0, 0, 1]), "delay_ms": np.array([40.0, 41.0, 200.0])},
               {"flow": np.array([0, 0]), "delay_ms": np.array([5.0, 6.0])}]
    order = np.array([2, 0, 1])  # the old id of each new id
    out = _join_stalls(batches, order, np.array([0, 2, 3]))
    assert out["flow"].tolist() == [0, 0, 1, 1, 2]
    assert out["delay_ms"].tolist() == [5.0, 6.0, 40.0, 41.0, 200.0]
    assert all(not b for b in batches)  # every batch's columns let go of
