"""The compiled parts of flows and stream (nagleprobe/_flows.c: sequence space,
classification and ACK links, row neighbours, 4-tuple ids) give exactly what their numpy
versions give: on every real capture in samples/ and on random segment streams."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nagleprobe.flows
import nagleprobe.roundtrips
import nagleprobe.segments
import nagleprobe.tuples
from nagleprobe.decode import TCP_COLUMNS, decode
from nagleprobe.flows import build_flows
from nagleprobe.read import CaptureReader

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))
pytestmark = pytest.mark.skipif(nagleprobe.flows._compiled is None,
                                reason="nagleprobe._flows not built (no C compiler at install)")


def neighbours(f) -> list[np.ndarray]:
    """Flows.before and Flows.after of every row, among all rows and among data rows."""
    rows = np.arange(len(f.seg["flow"]))
    return [x for data in (False, True) for x in (*f.before(rows, data), *f.after(rows, data))]


def both(cols: dict[str, np.ndarray]) -> tuple:
    """build_flows and the row neighbours with the compiled parts, and with numpy alone."""
    compiled = build_flows(cols)
    compiled.neighbour_rows = neighbours(compiled)
    kept, nagleprobe.flows._compiled = nagleprobe.flows._compiled, None
    nagleprobe.roundtrips._compiled = nagleprobe.segments._compiled = None
    try:
        reference = build_flows(cols)
        reference.neighbour_rows = neighbours(reference)
    finally:
        nagleprobe.flows._compiled = nagleprobe.roundtrips._compiled = kept
        nagleprobe.segments._compiled = kept
    return compiled, reference


def assert_same(got, want) -> None:
    for a, b in zip(got.neighbour_rows, want.neighbour_rows, strict=True):
        assert np.array_equal(a, b)
    assert list(got.seg) == list(want.seg)
    for k in want.seg:
        assert got.seg[k].dtype == want.seg[k].dtype, k
        assert np.array_equal(got.seg[k], want.seg[k]), k
    for k in want.flow:
        assert np.array_equal(got.flow[k], want.flow[k], equal_nan=got.flow[k].dtype.kind == "f"), k


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_compiled_flows_equal_numpy_on_every_real_capture(path):
    skipped = Counter()
    parts = [decode(b, skipped) for b in CaptureReader(str(path))]
    cols = {k: np.concatenate([p[k] for p in parts]) for k in TCP_COLUMNS}
    compiled, reference = both(cols)
    assert_same(compiled, reference)


FLAGS = st.sampled_from([0x10, 0x10, 0x18, 0x18, 0x02, 0x12, 0x11, 0x19, 0x04, 0x14, 0x00, 0x01])


OFFSET = st.one_of(st.integers(-3000, 3000), st.sampled_from([-1, 0, 1, 2, 10, 11, 1449]))


@settings(max_examples=300, deadline=None)
@given(segments=st.lists(st.tuples(st.integers(0, 3), st.booleans(), FLAGS,
                                   st.integers(0, 2**32 - 1), OFFSET,
                                   st.integers(0, 2**32 - 1), OFFSET,
                                   st.sampled_from([0, 0, 1, 10, 1448, 3000])),
                min_size=1, max_size=60),
       isn_a=st.integers(0, 2**32 - 1), isn_b=st.integers(0, 2**32 - 1))
def test_compiled_flows_equal_numpy_on_random_segments(segments, isn_a, isn_b):
    """Synthetic: up to four connections whose segments jump, wrap around 2**32, repeat and
    go back, with and without ACK, SYN, FIN and RST; numbers near the ISNs or anywhere.
    Connections 2 and 3 have the 4-tuples of 0 and 1 but come through a tunnel."""
    rows = []
    for i, (conn, a_to_b, flags, seq_any, seq_off, ack_any, ack_off, pay) in enumerate(segments):
        near = i % 3 != 0
        own, peer = (isn_a, isn_b) if a_to_b else (isn_b, isn_a)
        seq = (own + seq_off) % 2**32 if near else seq_any
        ack = (peer + ack_off) % 2**32 if near else ack_any
        rows.append((conn, a_to_b, flags, seq, ack, pay, i))
    n = len(rows)
    col = lambda j, t: np.array([r[j] for r in rows], dtype=t)  # noqa: E731
    conn, a_to_b = col(0, np.uint64), col(1, bool)
    a = np.uint64(0xFFFF0A000001)
    b = np.uint64(0xFFFF0A000002)
    cols = {
        "frame": np.arange(1, n + 1, dtype=np.int64),
        "ts_ns": col(6, np.int64) * 1000,
        "ipver": np.full(n, 4, np.uint8),
        "src_hi": np.zeros(n, np.uint64), "src_lo": np.where(a_to_b, a, b),
        "dst_hi": np.zeros(n, np.uint64), "dst_lo": np.where(a_to_b, b, a),
        "sport": np.where(a_to_b, 40000 + conn % 2, 80).astype(np.uint16),
        "dport": np.where(a_to_b, 80, 40000 + conn % 2).astype(np.uint16),
        "seq": col(3, np.uint32), "ack": col(4, np.uint32), "flags": col(2, np.uint16),
        "window": np.full(n, 512, np.uint16), "payload": col(5, np.int32),
        "mss": np.full(n, -1, np.int32), "wscale": np.full(n, -1, np.int16),
        "sack_ok": np.zeros(n, np.uint8), "tsval": np.zeros(n, np.uint32),
        "has_ts": np.zeros(n, np.uint8),
        "ipid": np.arange(n, dtype=np.uint16),  # repeats are resends, not copies
        "tunnel": (conn >= 2).astype(np.uint32),
    }
    assert list(cols) == list(TCP_COLUMNS)
    compiled, reference = both(cols)
    assert_same(compiled, reference)


def tuple_ids_both_ways(chunks: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """nagleprobe.tuples.TupleTable over the chunks, compiled and with numpy alone: they must agree."""
    compiled = nagleprobe.tuples.TupleTable()
    kept, nagleprobe.tuples._compiled = nagleprobe.tuples._compiled, None
    try:
        reference = nagleprobe.tuples.TupleTable()
    finally:
        nagleprobe.tuples._compiled = kept
    out = []
    for c in chunks:
        tid, low = compiled.ids(c)
        want_tid, want_low = reference.ids(c)
        assert np.array_equal(tid, want_tid) and np.array_equal(low, want_low)
        assert compiled.count == reference.count
        out.append(tid)
    for c, tid in zip(chunks, out):  # each row's addresses and ports come back from its tuple
        _, low = compiled.ids(c)
        for tuples in (compiled, reference):
            ends = tuples.ends(np.arange(tuples.count))
            for k in c:
                assert np.array_equal(ends.column(k, tid, low), c[k]), k
    return out


def endpoint_columns(rows: list[tuple]) -> dict[str, np.ndarray]:
    cols = {k: np.array([r[j] for r in rows], dtype=t) for j, (k, t) in enumerate(
        [("src_hi", np.uint64), ("src_lo", np.uint64), ("dst_hi", np.uint64),
         ("dst_lo", np.uint64), ("sport", np.uint16), ("dport", np.uint16)])}
    cols["ipver"] = np.where((cols["src_hi"] | cols["dst_hi"]) != 0, 6, 4).astype(np.uint8)
    return cols


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1),
                          st.sampled_from([0, 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1),
                          st.integers(0, 65535), st.integers(0, 65535)),
                min_size=1, max_size=30),
       st.integers(1, 4))
def test_compiled_tuple_ids_equal_numpy(rows, chunks):
    """Synthetic: addresses and ports equal in every part, or not, in either order, fed in
    chunks: the same ids (by first appearance) and directions."""
    rows += [(r[2], r[3], r[0], r[1], r[5], r[4]) for r in rows]  # the other direction too
    rows += [(r[0], r[1], r[0], r[1], r[4], r[5]) for r in rows]  # same address both ends
    cut = np.linspace(0, len(rows), chunks + 1).astype(int)
    tids = tuple_ids_both_ways([endpoint_columns(rows[a:b]) for a, b in zip(cut, cut[1:])])
    tid = np.concatenate(tids)
    half = len(rows) // 4
    assert np.array_equal(tid[:half], tid[half:2 * half])  # both directions: one tuple


def test_the_compiled_tuple_table_grows_and_keeps_its_ids():
    """Synthetic: 20 k distinct 4-tuples (tables of 1 k slots to start with), seen again in
    later chunks."""
    rng = np.random.default_rng(4)
    n = 20_000
    rows = list(zip(np.zeros(n, np.uint64), rng.integers(0, 50, n, dtype=np.uint64),
                    np.zeros(n, np.uint64), rng.integers(0, 50, n, dtype=np.uint64),
                    rng.integers(0, 65536, n), rng.integers(0, 65536, n)))
    chunks = [endpoint_columns(rows[a:a + 3000]) for a in range(0, n, 3000)]
    tids = tuple_ids_both_ways(chunks + chunks[::-1])
    assert np.array_equal(np.concatenate(tids[:len(chunks)]),
                          np.concatenate(tids[len(chunks):][::-1]))


DTYPES = [np.bool_, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5),
       dtypes=st.lists(st.sampled_from(DTYPES), min_size=1, max_size=4), data=st.data())
def test_compiled_take_rows_equals_numpy(sizes, dtypes, data):
    """Rows gathered from several chunks in any order, columns of any item sizes at once:
    the compiled pass and numpy agree."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    sources = [[rng.integers(0, 2**62, size=k).astype(t) for k in sizes] for t in dtypes]
    which = np.concatenate([np.full(k, j, np.int32) for j, k in enumerate(sizes)])
    rows = np.concatenate([rng.permutation(k) for k in sizes]).astype(np.int64)
    perm = rng.permutation(len(rows))
    which, rows = which[perm], rows[perm]
    got = [np.empty(len(rows), t) for t in dtypes]
    nagleprobe.tuples.take_rows(sources, which, rows, got)
    kept, nagleprobe.tuples._compiled = nagleprobe.tuples._compiled, None
    try:
        want = [np.empty(len(rows), t) for t in dtypes]
        nagleprobe.tuples.take_rows(sources, which, rows, want)
    finally:
        nagleprobe.tuples._compiled = kept
    for column, g, w, t in zip(sources, got, want, dtypes):
        assert np.array_equal(g, w)
        assert np.array_equal(w, np.array([column[c][r] for c, r in zip(which, rows)], t))


def test_compiled_take_rows_refuses_rows_out_of_range():
    out = [np.empty(2, np.int64)]
    with pytest.raises(ValueError, match="take_rows"):
        nagleprobe.tuples.take_rows([[np.arange(3)]], np.array([0, 0]), np.array([1, 3]), out)
    with pytest.raises(ValueError, match="take_rows"):
        nagleprobe.tuples.take_rows([[np.arange(3)]], np.array([0, 1]), np.array([1, 2]), out)
    two = [[np.arange(3), np.arange(3)], [np.arange(3), np.arange(2)]]  # a chunk of 2 rows
    with pytest.raises(ValueError, match="take_rows"):  # in one column: row 2 is not in it
        nagleprobe.tuples.take_rows(two, np.array([1, 1]), np.array([0, 2]),
                                    [np.empty(2, np.int64), np.empty(2, np.int64)])
    with pytest.raises(ValueError, match="take_rows"):  # an output of another length
        nagleprobe.tuples.take_rows([[np.arange(3)]], np.array([0, 0]), np.array([0, 1]),
                                    [np.empty(3, np.int64)])


@pytest.mark.parametrize("one_chunk", [True, False])
def test_rows_left_in_their_chunks_read_as_the_gathered_column(one_chunk):
    rng = np.random.default_rng(7)
    sources = [rng.integers(0, 1 << 30, 50).astype(np.uint32) for _ in range(1 if one_chunk else 3)]
    which = rng.integers(0, len(sources), 200).astype(np.int32)
    rows = rng.integers(0, 50, 200)
    column = np.array([sources[which[i]][r] for i, r in enumerate(rows)])
    lazy = nagleprobe.tuples.RowsOf(sources, which, rows)
    assert len(lazy) == 200 and lazy.dtype == np.uint32
    for index in (np.array([5, 0, 199, 5]), rows % 2 == 0, slice(10, 20), np.zeros(0, np.int64)):
        got = lazy[index]
        assert got.dtype == np.uint32 and np.array_equal(got, column[index])


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 120), min_size=1, max_size=4), ntup=st.integers(1, 30),
       with_live=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_compiled_place_rows_equals_numpy(sizes, ntup, with_live, seed):
    """Held chunks' rows placed among a hand-on's rows: compiled and numpy agree; each
    finished tuple's rows follow each other in chunk and row order, rows taken before and
    tuples staying left out."""
    rng = np.random.default_rng(seed)
    tids = [rng.integers(0, ntup, k) for k in sizes]
    lives = [rng.random(k) < 0.7 if with_live else None for k in sizes]
    done = rng.random(ntup) < 0.6
    count = sum(np.bincount(t[lv] if lv is not None else t, minlength=ntup)
                for t, lv in zip(tids, lives))
    sizes_ = np.where(done, count, 0)
    start = np.cumsum(sizes_) - sizes_

    def placed():
        cursor = np.where(done, start, -1)
        which = np.full(int(sizes_.sum()), -1, np.int32)
        rows = np.full(int(sizes_.sum()), -1, np.int64)
        out = [nagleprobe.tuples.place_rows(t, lv, cursor, c, which, rows)
               for c, (t, lv) in enumerate(zip(tids, lives))]
        return out, cursor, which, rows

    got = placed()
    kept, nagleprobe.tuples._compiled = nagleprobe.tuples._compiled, None
    try:
        want = placed()
    finally:
        nagleprobe.tuples._compiled = kept
    for (k1, taken1, last1), (k2, taken2, last2) in zip(got[0], want[0], strict=True):
        assert k1 == k2 and last1 == last2 and np.array_equal(taken1, taken2)
    for a, b in zip(got[1:], want[1:]):
        assert np.array_equal(a, b)
    _, cursor, which, rows = want
    assert np.array_equal(cursor[done], (start + sizes_)[done])
    expected = [(c, i) for t in np.flatnonzero(done) for c, (tid, lv) in enumerate(zip(tids, lives))
                for i in np.flatnonzero((tid == t) & (lv if lv is not None else True))]
    assert list(zip(which.tolist(), rows.tolist())) == expected


def test_compiled_place_rows_refuses_more_rows_than_places():
    with pytest.raises(ValueError, match="place_rows"):
        nagleprobe.tuples.place_rows(np.array([0, 0, 0]), None, np.array([0]), 0,
                                     np.empty(2, np.int32), np.empty(2, np.int64))


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 200), ntup=st.integers(1, 20), seed=st.integers(0, 2**32 - 1))
def test_compiled_tally_equals_numpy(n, ntup, seed):
    rng = np.random.default_rng(seed)
    tid, ts = rng.integers(0, ntup, n), rng.integers(-10**12, 10**12, n)
    start_rows, start_ts = rng.integers(0, 5, ntup), rng.integers(-10**12, 10**12, ntup)
    got = start_rows.copy(), start_ts.copy()
    nagleprobe.tuples.tally(tid, ts, *got)
    kept, nagleprobe.tuples._compiled = nagleprobe.tuples._compiled, None
    try:
        want = start_rows.copy(), start_ts.copy()
        nagleprobe.tuples.tally(tid, ts, *want)
    finally:
        nagleprobe.tuples._compiled = kept
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert np.array_equal(want[0], start_rows + np.bincount(tid, minlength=ntup))
