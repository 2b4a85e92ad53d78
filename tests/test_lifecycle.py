"""lifecycle: a 4-tuple's state in the stream. Closed takes a RST or a FIN from each end,
a SYN starts the closing flags again, and a SYN repeating the ISN of a closed connection is
counted as a reuse that cannot be told apart."""

from __future__ import annotations

import numpy as np

from nagleprobe.decode import ACK, FIN, RST, SYN
from nagleprobe.lifecycle import TupleState


def state(tuples: int) -> TupleState:
    t = TupleState()
    t.table.count = tuples  # (as if the table had seen them)
    t.grow()
    return t


def saw(t: TupleState, tid, from_low, flags, seq=None):
    tid, flags = np.array(tid), np.array(flags, np.uint8)
    seq = np.zeros(len(tid), np.uint32) if seq is None else np.array(seq, np.uint32)
    t.saw(tid, np.array(from_low), flags, seq, (flags & (SYN | ACK)) == SYN)


def test_a_connection_is_closed_by_a_fin_from_each_end_or_one_rst():
    t = state(3)
    saw(t, [0, 1, 1, 2], [True, True, False, False], [FIN | ACK, FIN | ACK, FIN | ACK, RST])
    assert t.is_closed().tolist() == [False, True, True]


def test_a_syn_after_the_fins_starts_the_connection_again():
    t = state(1)
    saw(t, [0, 0, 0], [True, False, True], [FIN | ACK, FIN | ACK, SYN], seq=[0, 0, 777])
    assert t.is_closed().tolist() == [False]
    assert t.last_syn.tolist() == [777]


def test_a_syn_repeating_the_isn_of_a_closed_connection_is_a_reuse():
    t = state(1)
    tid = np.zeros(4, np.int64)
    flags = np.array([SYN, FIN | ACK, RST, SYN], np.uint8)
    cols = {"seq": np.array([5, 6, 6, 5], np.uint32), "ts_ns": np.arange(4, dtype=np.int64),
            "frame": np.arange(1, 5, dtype=np.int64)}
    assert t.same_isn(tid, (flags & (SYN | ACK)) == SYN, flags, cols) == (1, 4)
    cols["seq"][3] = 9  # a new ISN: a new connection, no reuse
    assert t.same_isn(tid, (flags & (SYN | ACK)) == SYN, flags, cols) == (0, None)
