"""Connections by 4-tuple: the unordered pair of endpoints (and tunnel) each packet belongs
to, its 64-bit hash, the table that numbers tuples over a stream, and their endpoints back;
and the rows of each tuple counted, placed and gathered for the batch that analyses it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .columns import Columns

try:
    from . import _flows as _compiled  # the 4-tuple table (nagleprobe/_flows.c)
except ImportError:  # built without a C compiler
    _compiled = None

# the 4-tuple hash: xor a word in, multiply, fold the high bits down (as _flows.c mixes)
MIX_MULTIPLIER, MIX_SHIFT = 0x9E3779B97F4A7C15, 29


@dataclass(frozen=True)
class TupleEnds:
    """The two endpoints of each 4-tuple (indexed by tuple id): the IP version, and the
    address words and port of its 'lower' endpoint (`lower`) and of its higher one. With
    each row's direction (`from_low`) they give the row's addresses and ports, so the
    stream holds one byte per packet for them instead of 37."""

    ipver: np.ndarray
    lo_hi: np.ndarray
    lo_lo: np.ndarray
    lo_port: np.ndarray
    hi_hi: np.ndarray
    hi_lo: np.ndarray
    hi_port: np.ndarray
    tunnel: np.ndarray | None = None  # the tunnel number of each tuple (0: none)

    def column(self, name: str, tup: np.ndarray, from_low: np.ndarray) -> np.ndarray:
        """The decoded column `name` (ipver, src_hi, ..., dport, tunnel) of rows of tuples
        `tup` travelling from the lower endpoint where `from_low`."""
        if name == "ipver":
            return self.ipver[tup]
        if name == "tunnel":
            if self.tunnel is None:
                return np.zeros(len(tup), np.uint32)
            return self.tunnel[tup]
        field = name[4:] if name.endswith(("_hi", "_lo")) else "port"
        mine, peer = getattr(self, "lo_" + field)[tup], getattr(self, "hi_" + field)[tup]
        src = name.startswith("src_") or name == "sport"
        return np.where(from_low == src, mine, peer)


def endpoints(c: Columns) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each packet's source and destination endpoint as uint64 words that compare like
    (address, port): one word each when every address is IPv4, else (hi, lo, port); with
    the packet's tunnel number in front when some came through a tunnel (the same
    addresses in two tunnels are two endpoints)."""
    if not (c["src_hi"].any() or c["dst_hi"].any()):  # IPv4 only: (address, port) in 48 bits
        a = [c["src_lo"] << np.uint64(16) | c["sport"]]
        b = [c["dst_lo"] << np.uint64(16) | c["dport"]]
    else:
        a = [c["src_hi"], c["src_lo"], c["sport"].astype(np.uint64)]
        b = [c["dst_hi"], c["dst_lo"], c["dport"].astype(np.uint64)]
    tunnel = c.get("tunnel")
    if tunnel is not None and tunnel.any():
        t = tunnel.astype(np.uint64)
        a, b = [t, *a], [t, *b]
    return a, b


def lower(a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    """a <= b, comparing the words lexicographically."""
    out = a[-1] <= b[-1]
    for x, y in zip(a[-2::-1], b[-2::-1]):
        out = (x < y) | ((x == y) & out)
    return out


def ordered(a: list[np.ndarray], b: list[np.ndarray]
             ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The lower and the higher of endpoints a and b of each row (words as `lower` compares
    them), and whether a is the lower."""
    a_low = lower(a, b)
    return ([np.where(a_low, x, y) for x, y in zip(a, b)],
            [np.where(a_low, y, x) for x, y in zip(a, b)], a_low)


def tuple_ids(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Id of each packet's unordered 4-tuple, numbered by first appearance in record order,
    and whether the packet travels from the 'lower' endpoint."""
    lo, hi, a_low = ordered(*endpoints(c))
    return factorize_words(lo + hi), a_low


def mix(words: list[np.ndarray]) -> np.ndarray:
    """A 64-bit mix of each row's words (as nagleprobe/_flows.c mixes them)."""
    h = np.zeros(len(words[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for w in words:
            h ^= w
            h *= np.uint64(MIX_MULTIPLIER)
            h ^= h >> np.uint64(MIX_SHIFT)
    return h


def factorize_words(cols: list[np.ndarray]) -> np.ndarray:
    """Ids of the distinct rows of uint64 columns, numbered by first appearance."""
    import pandas as pd  # here, not at load: encap imports this module early
    ids = pd.factorize(mix(cols))[0].astype(np.int64)  # collisions are checked below
    first = np.flatnonzero(ids > np.maximum.accumulate(np.r_[-1, ids[:-1]])) if len(ids) else ids
    if not all(np.array_equal(col, col[first][ids]) for col in cols):  # hash collision: exact path
        ids = pd.MultiIndex.from_arrays(cols).factorize()[0].astype(np.int64)
    return ids


def tuple_words(c: Columns) -> tuple[list[np.ndarray], np.ndarray]:
    """Five uint64 words naming each row's unordered 4-tuple (the 'lower' endpoint's address
    hi, lo, the higher's, then the tunnel number << 32 | both ports), as nagleprobe/_flows.c
    makes them, and whether the row travels from the lower endpoint."""
    lo, hi, a_low = ordered([c["src_hi"], c["src_lo"], c["sport"].astype(np.uint64)],
                             [c["dst_hi"], c["dst_lo"], c["dport"].astype(np.uint64)])
    return [lo[0], lo[1], hi[0], hi[1],
            (tunnel_numbers(c).astype(np.uint64) << np.uint64(32)) | (lo[2] << np.uint64(16))
            | hi[2]], a_low


def tunnel_numbers(c: Columns) -> np.ndarray:
    """The rows' tunnel numbers, uint32 (the column itself; 0 where the columns have none)."""
    t = c.get("tunnel")
    return np.zeros(len(c["sport"]), np.uint32) if t is None else np.asarray(t, np.uint32)


class TupleTable:
    """Ids of unordered 4-tuples, numbered by first appearance over all the chunks fed: a
    compiled hash table over the tuples' words when built (nagleprobe/_flows.c), else their
    64-bit mix in a pandas index, checked against the words."""

    def __init__(self) -> None:
        self.count = 0
        self._ver = np.zeros(0, dtype=np.uint8)  # IP version of each tuple
        self._compiled = _compiled  # as built, or as a test switched it (flows._compiled)
        if _compiled is not None:
            self._slots = np.full(1 << 10, -1, dtype=np.int64)
            self._table = np.zeros(5 << 9, dtype=np.uint64)  # five words per id
        else:
            import pandas as pd  # (the numpy path only)

            self._index = pd.Index(np.zeros(0, dtype=np.uint64))
            self._words = [np.zeros(0, dtype=np.uint64) for _ in range(5)]

    def ids(self, c: Columns) -> tuple[np.ndarray, np.ndarray]:
        """Each row's tuple id, and whether it travels from the tuple's lower endpoint."""
        before = self.count
        tid, from_low, first = self._ids(c)
        if self.count > before:  # the IP version of the new tuples, from their first rows
            if self.count > len(self._ver):
                self._ver = np.concatenate([self._ver, np.zeros(
                    max(self.count - len(self._ver), len(self._ver)), dtype=np.uint8)])
            self._ver[before:self.count] = c["ipver"][first[:self.count - before]]
        return tid, from_low

    def ends(self, ids: np.ndarray) -> TupleEnds:
        """The endpoints of the tuples `ids`."""
        if self._compiled is None:
            w = [x[ids] for x in self._words]
        else:
            words = self._table[:5 * self.count].reshape(-1, 5)[ids]
            w = [words[:, j] for j in range(5)]
        return TupleEnds(self._ver[ids], w[0], w[1], (w[4] >> np.uint64(16)) & np.uint64(0xFFFF),
                         w[2], w[3], w[4] & np.uint64(0xFFFF),
                         (w[4] >> np.uint64(32)).astype(np.uint32))

    def _ids(self, c: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._compiled is None:
            return self._ids_numpy(c)
        n = len(c["sport"])
        need = self.count + n  # every row could bring a new tuple
        if len(self._table) < 5 * need:
            table = np.zeros(5 * max(need, 2 * (len(self._table) // 5)), dtype=np.uint64)
            table[:5 * self.count] = self._table[:5 * self.count]
            self._table = table
        if len(self._slots) < 2 * need:
            self._slots = np.full(1 << (2 * need - 1).bit_length(), -1, dtype=np.int64)
            self._compiled.reslot(self._slots, self._table, self.count)
        tid = np.empty(n, dtype=np.int64)
        from_low = np.empty(n, dtype=bool)
        first = np.empty(n, dtype=np.int64)
        self.count = self._compiled.tuple_ids(
            *(np.ascontiguousarray(c[k], np.uint64) for k in ("src_hi", "src_lo", "dst_hi",
                                                               "dst_lo")),
            np.ascontiguousarray(c["sport"], np.uint16),
            np.ascontiguousarray(c["dport"], np.uint16),
            np.ascontiguousarray(tunnel_numbers(c)),
            self._slots, self._table, self.count, tid, from_low.view(np.uint8), first)
        return tid, from_low, first

    def _ids_numpy(self, c: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import pandas as pd  # here, not at load: encap imports this module early
        words, from_low = tuple_words(c)
        codes, uniq = pd.factorize(mix(words))
        pos = self._index.get_indexer(uniq)
        new = np.flatnonzero(pos < 0)
        first = np.zeros(0, dtype=np.int64)  # the first row of each new tuple
        if len(new):
            pos[new] = len(self._index) + np.arange(len(new))
            where = np.full(len(uniq), -1, dtype=np.int64)
            rows = np.arange(len(codes))[::-1]
            where[codes[rows]] = rows  # first row of each code
            self._index = self._index.append(pd.Index(np.asarray(uniq[new], dtype=np.uint64)))
            self._words = [np.concatenate([s, w[where[new]]]) for s, w in zip(self._words, words)]
            first = where[new]
        tid = pos[codes].astype(np.int64)
        for w, stored in zip(words, self._words):
            if not np.array_equal(w, stored[tid]):  # two 4-tuples share a 64-bit hash
                raise RuntimeError("4-tuple hash collision while streaming")
        self.count = len(self._index)
        return tid, from_low, first


def group_order(ids: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative group ids below 2**32 (rows grouped by 4-tuple, in
    their order within): LSD radix passes on 16-bit digits (numpy sorts uint16 stably in
    linear time), much faster than a comparison sort."""
    order = np.argsort((ids & 0xFFFF).astype(np.uint16), kind="stable")
    if len(ids) and int(ids.max()) > 0xFFFF:
        order = order[np.argsort((ids[order] >> 16).astype(np.uint16), kind="stable")]
    return order


def group_starts(group: np.ndarray) -> np.ndarray:
    """Row index where each run of equal values in a sorted `group` begins."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, group[1:] != group[:-1]])


def take_rows(sources: list[list[np.ndarray]], which: np.ndarray, rows: np.ndarray,
              outs: list[np.ndarray]) -> None:
    """outs[c][i] = sources[c][which[i]][rows[i]] for each column c: rows gathered from
    several arrays (the chunks holding a batch's rows, a list of them per column, each of
    its output's dtype); compiled (nagleprobe/_flows.c: every column in one pass over the
    rows) when built, else through one concatenation per column."""
    if _compiled is not None:
        _compiled.take_rows(sources, np.ascontiguousarray(which, np.int32),
                            np.ascontiguousarray(rows, np.int64), outs)
        return
    for column, out in zip(sources, outs):
        offset = np.cumsum([0] + [len(s) for s in column[:-1]], dtype=np.int64)
        np.take(np.concatenate(column), rows + offset[which], out=out)


def tally(tid: np.ndarray, ts: np.ndarray, rows: np.ndarray, last_ts: np.ndarray) -> None:
    """Per tuple (arrays indexed by tuple id, int64): `rows` counts the rows of tuples
    `tid`, and `last_ts` rises to their latest time `ts`. One compiled pass when built,
    else numpy."""
    if _compiled is not None:
        _compiled.tally(np.ascontiguousarray(tid, np.int64), np.ascontiguousarray(ts, np.int64),
                        rows, last_ts)
        return
    np.maximum.at(last_ts, tid, ts)
    rows += np.bincount(tid, minlength=len(rows))


def place_rows(tid: np.ndarray, live: np.ndarray | None, cursor: np.ndarray, chunk: int,
               which: np.ndarray, rows: np.ndarray) -> tuple[int, np.ndarray, int]:
    """Put a held chunk's rows in their places among a hand-on's rows: row i (of tuple
    tid[i]) goes, unless taken before (`live` False; None: none was), to place
    cursor[tid[i]] (-1: its tuple stays), whose cursor moves on; which[place] = `chunk`,
    rows[place] = i. Returns how many rows went, which ones, and the highest place given
    (-1 for none). So the rows of a tuple follow each other in chunk and row order (time
    order), as `build_flows` reads them. One compiled pass when built (nagleprobe/_flows.c),
    else numpy."""
    if _compiled is not None:
        taken = np.empty(len(tid), bool)
        k, last = _compiled.place_rows(
            np.ascontiguousarray(tid, np.int64),
            np.zeros(0, np.uint8) if live is None else np.ascontiguousarray(live).view(np.uint8),
            cursor, chunk, which, rows, taken.view(np.uint8))
        return k, taken, last
    at = cursor[tid]
    if live is not None:
        at[~live] = -1
    taken = at >= 0
    going = np.flatnonzero(taken)
    t = tid[going]
    by_tuple = np.argsort(t, kind="stable")
    t, going = t[by_tuple], going[by_tuple]
    starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]]) if len(t) else np.zeros(0, np.int64)
    counts = np.diff(np.r_[starts, len(t)])
    places = cursor[t] + np.arange(len(t)) - np.repeat(starts, counts)
    if len(places) and int(places.max()) >= len(which):
        raise ValueError("place_rows: inconsistent arrays")
    which[places], rows[places] = chunk, going
    cursor[t[starts]] += counts
    return len(going), taken, int(places.max()) if len(places) else -1


class RowsOf:
    """A column of a batch left in the chunks that hold it: indexing reads just the rows
    asked for (`build_flows` reads some columns at a few rows only: SYN options, the fields
    compared for copies of a packet). Row i is `sources[which[i]][rows[i]]`."""

    def __init__(self, sources: list[np.ndarray], which: np.ndarray, rows: np.ndarray) -> None:
        self.sources, self.which, self.rows = sources, which, rows
        self.dtype = sources[0].dtype

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index) -> np.ndarray:
        rows = self.rows[index]
        out = np.empty(np.shape(rows), self.dtype)
        take_rows([self.sources], np.ravel(self.which[index]), np.ravel(rows), [out.reshape(-1)])
        return out
