"""A connection too long to hold whole, analysed in pieces with its state carried forward.

The stream (`nagleprobe.stream`) holds each connection's packets until it closes. A
connection that never closes (a connection pool, a gRPC channel) would be held whole, so
once a connection's held packets reach a limit its packets are analysed as a *piece*: its
handshake (`handshake.handshake_mask`), the rows carried from the piece before and its new
rows go through the same `build_flows` and `detect.evidence` as any connection, and the
piece *owns* (decides about) the rows up to a cut: every fact anchored at an owned row is
taken from this piece, once. What the whole-connection analysis takes from packets a piece
no longer holds is carried in a `Ledger`:

* rows: the last OVERLAP_ROWS rows before the cut (the lookbacks counted in rows: copies
  of a packet, an ACK's previous row) and those after it (at least LOOKAHEAD_ROWS: the
  next rows looked at after an ACK), contiguous; and before them, per direction, the few
  rows the rule looks back to however far they lie (the last two packets, the last data,
  the rows that set the highest sequence number and ACK sent so far, and the data not yet
  acknowledged, whose round trip is measured when its ACK comes). The handshake is moved
  in sequence space (`handshake.rebased`) so that it ends, and acknowledges, where the
  first row carried begins: sequence numbers, retransmissions and ACKs read exactly as in
  the whole connection, past 4 GiB too;
* facts: packets, retransmissions, frames and times; the largest segments (the MSS when
  no SYN says it); the round-trip samples (how many, the smallest, the first
  TYPICAL_SAMPLES in time order, for the handshake, undelayed and late ACKs); the Nagle
  proofs; the relays' data arrivals;
* the rule's candidates (S1, the late ACK, S2) and the lone-segment ACKs, raw, judged once
  the connection ends with its final round trips, MSS and proofs (`verdicts.Verdicts`): the
  stalls, the vetoes of a proven Nagle rule and the confidence then equal the
  whole-connection analysis', or the connection is named in a warning (`Ledger.inexact`).

What is held per connection is therefore bounded whatever its length: at most PIECE_ROWS
packets not yet analysed (the stream checks after each chunk it reads, so add those of
that chunk) and the rows carried: OVERLAP_ROWS + LOOKAHEAD_ROWS + 2 * (EXTRA_ROWS +
verdicts.OUTSTANDING_ROWS) + the handshake (at most HANDSHAKE_ROWS + 2) + the packets still inside
the reorder window; the candidates and ACKs kept one by one, up to LATE_GAPS delays per
direction, without a SYN a bit per payload size for each of up to MSS_KEPT inferred MSS
values (16 KB each), and a few hundred numbers. What grows is its result: its stalls (kept
raw until it ends, then its rows of the stalls table) and, up to relay.MAX_ARRIVALS for the
whole capture, its data segments for linking relays.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from .columns import Columns, take
from .copies import DUPLICATE_LOOKBACK, find_copies
from .decode import ACK, SYN
from .detect import Detection, evidence, params
from . import exchanges
from .flows import Flows, build_flows, send_mss
from .handshake import HANDSHAKE_ROWS, WRAP, handshake_mask, rebased
from .roundtrips import NEARBY, Samples, late_samples, round_trips, turn_samples
from .tuples import TupleEnds
from .verdicts import Limits, Verdicts

PIECE_ROWS = 1 << 18  # a connection holding this many packets is analysed as a piece
OVERLAP_ROWS = max(DUPLICATE_LOOKBACK, NEARBY)  # contiguous rows before a piece's own
LOOKAHEAD_ROWS = NEARBY  # ... and after them
# rows carried per direction from before those (besides data not yet acknowledged): its
# last two packets and its last data, and for each the rows that set the highest sequence
# number sent (up to it and before it) and the highest ACK sent up to it
EXTRA_ROWS = 3 * 4
_HS, _EXTRA = 1, 2  # kinds of carried rows (0: the contiguous ones)


@dataclass
class Ledger:
    """What one connection analysed in pieces carries from piece to piece (see the module's
    docstring). Made by the first piece (`Ledger.first`); each piece is `add`ed, the last
    with `final`; then `result` gives its flow facts and detection."""

    flow: Columns  # the first piece's flow facts (one flow)
    client_low: bool  # the client is the tuple's lower endpoint
    hs: Columns  # the handshake rows, as captured
    rows: Columns  # rows carried to the next piece (with "known", "kind")
    cut: int = np.iinfo(np.int64).min  # rows before this time were decided
    pieces: int = 0
    seq_target: np.ndarray = field(default_factory=lambda: np.full(2, -1, np.int64))
    ack_target: np.ndarray = field(default_factory=lambda: np.full(2, -1, np.int64))
    packets: int = 0
    duplicates: int = 0
    retransmissions: int = 0
    keepalives: int = 0
    first_frame: int = np.iinfo(np.int64).max
    last_frame: int = -1
    last_ns: int = np.iinfo(np.int64).min
    maxpay: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    at_max: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    undelayed: Samples = field(default_factory=Samples)
    late: Samples = field(default_factory=Samples)
    off: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    not_classic: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    late_mss: set = field(default_factory=set)  # (direction, MSS) of late samples taken
    dropped_outstanding: np.ndarray = field(default_factory=lambda: np.full(2, -1, np.int64))
    arrivals: list[Columns] | None = field(default_factory=list)
    inexact: set = field(default_factory=set)  # why a field may differ from the whole's
    start_frame: int = -1  # frame of its first packet (in time order)
    hs_open: bool = True  # the handshake may still grow
    syn_held: np.ndarray = field(default_factory=lambda: np.zeros(2, bool))
    dropped: bool = False  # rows were let go of (the handshake is moved from then on)
    rtt_handshake: np.ndarray = field(default_factory=lambda: np.full(2, np.nan))
    limits: Limits = field(default_factory=lambda: Limits())
    verdicts: Verdicts = field(init=False)  # its candidates and ACKs, judged at its end
    near_copies: bool = False  # a copy of a packet was found right after it
    # its exchanges so far (`exchanges.paired`), and the last turns, which may still grow
    pairs: list[Columns] = field(default_factory=list)
    turns: Columns = field(default_factory=lambda: Columns.empty(exchanges.TURN))
    had_data: bool = False

    def __post_init__(self) -> None:
        self.verdicts = Verdicts(self.limits, self.inexact)

    # ------------------------------------------------------------------ the pieces
    @classmethod
    def first(cls, rows: Columns, ends: TupleEnds, safe_ns: int | None,
              limits: Limits | None = None) -> Ledger:
        """The ledger of a connection after its first piece, `rows` all its rows so far
        (HELD columns of the stream, with from_low; any order)."""
        led = cls(flow={}, client_low=True, hs=Columns.empty_like(rows),
                  rows=Columns.empty_like({**rows, "known": np.zeros(0, np.int8),
                                          "kind": np.zeros(0, np.int8)}),
                  limits=limits or Limits())
        led.add(rows, ends, safe_ns)
        return led

    def add(self, new: Columns, ends: TupleEnds, safe_ns: int | None) -> None:
        """Analyse the next piece: the carried rows and `new` ones (HELD columns with
        from_low), deciding about the rows before `safe_ns` (later ones may still be joined
        by rows out of time order) but the last LOOKAHEAD_ROWS; all of them if `safe_ns`
        is None (the connection ended)."""
        lim = self.limits
        final = safe_ns is None
        n_new = len(new["frame"])
        hs = dict(self.hs)
        nh = len(hs["frame"])
        rows = in_time_order(Columns.concat([
            {**hs, "known": np.zeros(nh, np.int8), "kind": np.full(nh, _HS, np.int8)},
            self.rows,
            {**new, "known": np.full(n_new, -1, np.int8), "kind": np.zeros(n_new, np.int8)}]))
        kind = rows.pop("kind")
        # the handshake moved to just before the rows carried (as analysed: `cols`)
        cols = self._moved(rows, kind) if self.pieces else rows
        # copies of a packet are looked for as far back as the whole analysis looks once
        # it has found one near; found only that far (before any near one in this
        # connection), the whole analysis finds them only if the capture has near ones
        one = np.zeros(len(rows["frame"]), np.int64)  # (one connection, in time order)
        copies, near = find_copies(cols, None, one, cols["from_low"], far=True)
        known = rows["known"]  # rows judged by a piece before: copy or not, as it found
        copies = np.union1d(copies[known[copies] < 0], np.flatnonzero(known > 0))
        f = build_flows(cols, one, ends, copies)
        self.near_copies |= near > 0
        if f.duplicates > near and not self.near_copies:
            self.inexact.add("the copies of packets seen twice (found only several packets "
                             "after the original)")
        if f.count != 1:  # the stream ends a connection before a SYN with a new ISN
            raise AssertionError(f"a piece of one connection gave {f.count} flows")
        seg = f.seg
        src = _positions(rows["frame"], seg["frame"])  # each segment's row in `rows`
        if not self.pieces:
            self.start_frame = int(seg["frame"][0])
            self.client_low = bool(rows["from_low"][src[0]]) == (int(seg["dir"][0]) == 0)
        # what the handshake says (roles, MSS, window scale: the same in every piece once
        # it is held); its round trips while nothing was let go of (then exact)
        self.flow = dict(f.flow)
        rt = f.flow["rtt_handshake_ms"][0]
        if not self.dropped:
            self.rtt_handshake = rt.copy()
        elif np.isnan(self.rtt_handshake[1]):  # (time alone: SYN -> SYN/ACK)
            self.rtt_handshake[1] = rt[1]
        ts, d = seg["ts_ns"], seg["dir"].astype(np.int64)
        n = len(ts)
        if final:
            cut = np.iinfo(np.int64).max
        else:
            cut = int(ts[n - LOOKAHEAD_ROWS]) if n > LOOKAHEAD_ROWS else self.cut
            cut = max(min(cut, safe_ns), self.cut)
        lo = int(np.searchsorted(ts, self.cut, side="left"))
        hi = int(np.searchsorted(ts, cut, side="left"))
        contiguous = np.flatnonzero(kind[src] == 0)
        s0 = int(contiguous[0]) if len(contiguous) else n
        if not self.dropped:
            s0 = 0
        # the highest ACK each direction had sent before the contiguous rows (exact)
        before = np.full(2, -1, np.int64)
        for k in (0, 1):
            r = np.flatnonzero(d[:s0] == k)
            if len(r):
                before[k] = seg["ack_max"][r[-1]]
        self.pieces += 1
        # copies of packets among the rows decided now (copies only, maybe)
        self.duplicates += int(np.count_nonzero((rows["ts_ns"] >= self.cut)
                                                & (rows["ts_ns"] < cut))) - (hi - lo)
        if hi > lo:
            if self.hs_open:
                self._handshake(seg, src, rows, kind, lo, hi)
            self._own(f, src, cols, lo, hi, before, final, lim)
        if final:
            self.rows = Columns.empty_like(self.rows)
            return
        self._carry(f, src, rows, cols, kind, lo, hi, s0, before, cut, lim)
        self.cut = cut

    def _moved(self, rows: Columns, kind: np.ndarray) -> Columns:
        """`rows` with the handshake rows moved in sequence space (`handshake.rebased`) so
        that each direction's ends, and acknowledges, where its first row carried begins; a
        SYN sent again with the same initial sequence number moves with them (one
        connection, as in the whole analysis)."""
        k = (rows["from_low"] != self.client_low).astype(np.int64)
        h = np.flatnonzero(kind == _HS)
        syn = (rows["flags"] & (SYN | ACK)) == SYN
        isn = np.full(2, -1, np.int64)
        isn[k[h[syn[h]]]] = rows["seq"][h[syn[h]]]
        again = np.flatnonzero(syn & (kind != _HS) & (rows["seq"] == isn[k]))
        return rebased(rows, h, k, 2, self.seq_target, self.ack_target, again)

    def syn_seq(self) -> int | None:
        """The initial sequence number of the connection's first SYN (None without)."""
        syn = np.flatnonzero((self.hs["flags"] & (SYN | ACK)) == SYN)
        return int(self.hs["seq"][syn[0]]) if len(syn) else None

    def _handshake(self, seg: Columns, src: np.ndarray,
                   rows: Columns, kind: np.ndarray, lo: int, hi: int) -> None:
        """Hold for the connection's life the handshake among its rows lo..hi (by their rank
        among all its packets, copies left out) and the first SYN of each direction."""
        pos = np.arange(lo, hi)
        flags = seg["flags"][pos]
        hs = handshake_mask(self.packets + pos - lo, seg["payload"][pos], flags)
        for k in (0, 1):
            syn = np.flatnonzero(((flags & SYN) != 0) & (seg["dir"][pos] == k))
            if len(syn) and not self.syn_held[k]:
                hs[syn[0]] = self.syn_held[k] = True
        rows_hs = src[pos[hs]]
        kind[rows_hs] = _HS
        self.hs = Columns.concat([self.hs, take({k: v for k, v in rows.items() if k != "known"},
                                       rows_hs)])
        self.hs_open = self.packets + (hi - lo) < HANDSHAKE_ROWS or not self.syn_held.all()

    def _own(self, f: Flows, src: np.ndarray, cols: Columns, lo: int, hi: int,
             before: np.ndarray, final: bool, lim: Limits) -> None:
        """Take the facts of the rows `lo`..`hi` of the piece's segments (`cols`: the rows
        as analysed)."""
        seg = f.seg
        ts, d = seg["ts_ns"], seg["dir"].astype(np.int64)
        own = slice(lo, hi)
        frame = seg["frame"]
        self.packets += hi - lo
        if self.dropped and np.isnan(self.rtt_handshake[0]):
            self._client_round_trip(seg, src, cols, lo, hi)
        self.retransmissions += int(np.count_nonzero(seg["retrans"][own]))
        self.keepalives += int(np.count_nonzero(seg["keepalive"][own]))
        self.first_frame = min(self.first_frame, int(frame[own].min()))
        self.last_frame = max(self.last_frame, int(frame[own].max()))
        self.last_ns = max(self.last_ns, int(ts[own].max()))
        pay = seg["payload"]
        for k in (0, 1):
            p = pay[own][d[own] == k]
            p = p[p > 0]
            if not len(p):
                continue
            top = int(p.max())
            if top > self.maxpay[k]:
                self.maxpay[k], self.at_max[k] = top, 0
            if top == self.maxpay[k]:
                self.at_max[k] += int(np.count_nonzero(p == top))
        # round-trip samples whose ACK is owned, and not acknowledged before the
        # contiguous rows (by a packet let go of)
        paired, by, turn, undelayed = turn_samples(seg)
        mine = (by >= lo) & (by < hi) & (seg["end"][paired] > before[d[paired] ^ 1])
        u = mine & undelayed
        self.undelayed.add(d[paired[u]], ts[paired[u]], frame[paired[u]], turn[u])
        mss = self.facts()["mss"].reshape(-1)
        late = paired[mine & ~undelayed]
        late = late[self.undelayed.count[d[late]] == 0]  # (needed only without undelayed)
        self.late_mss.update((int(k), int(mss[k])) for k in np.unique(d[late]))
        late, late_ns = late_samples(seg, late, mss[d[late]])
        self.late.add(d[late], ts[late], frame[late], late_ns)

        facts = self.facts()
        p = params(facts)
        how = facts["mss_how"].reshape(-1)
        self.verdicts.compared(p.mss, how, d, pay)
        ev = evidence(f, p.mss, owned=own, open_end=not final)
        self.off += ev.off
        self.not_classic += ev.not_classic
        self.verdicts.answers(seg, final)
        self.verdicts.add(ev, p, how)
        if self.arrivals is not None:
            r = np.flatnonzero(seg["new_data"][own]) + lo
            self.arrivals.append({"flow": np.zeros(len(r), np.int64),
                                  "dir": d[r].astype(np.int8), "ts_ns": ts[r],
                                  "payload": pay[r].astype(np.int32)})
        t = exchanges.joined(self.turns, exchanges.segment_turns(seg, own))
        self.had_data |= t.row_count > 0
        ex, self.turns = exchanges.paired(t, open_end=True)
        if ex.row_count:
            self.pairs.append(ex)
        # data let go of before its ACK came: its round trip was not measured
        for k in (0, 1):
            lost = self.dropped_outstanding[k]
            acks = np.flatnonzero((d[own] == (k ^ 1)) & (seg["ack"][own] >= 0)) + lo
            if lost >= 0 and len(acks):
                base = _base(cols["ack"][src[acks[-1]]], seg["ack"][acks[-1]])
                top = (int(seg["ack_max"][acks[-1]]) + base) % WRAP
                if (top - lost) % WRAP < 1 << 31:
                    self.inexact.add("round trips of data not carried (more than "
                                     f"{lim.outstanding_rows} packets unacknowledged)")

    def _client_round_trip(self, seg: Columns, src: np.ndarray,
                           cols: Columns, lo: int, hi: int) -> None:
        """The handshake's round trip to the client (SYN/ACK -> the client's first ACK of
        it) when that ACK comes after packets were let go of (the handshake moved): the
        first owned client packet whose highest ACK so far covers the SYN/ACK as captured."""
        hs = self.hs
        sa = np.flatnonzero((hs["flags"] & (SYN | ACK)) == (SYN | ACK))
        if not len(sa):
            return
        sa_end = (int(hs["seq"][sa[0]]) + 1) % WRAP
        sa_ts = int(hs["ts_ns"][sa[0]])
        mine = np.flatnonzero((seg["dir"][lo:hi] == 0) & (seg["ack"][lo:hi] >= 0)) + lo
        if not len(mine):
            return
        base = _base(cols["ack"][src[mine[0]]], seg["ack"][mine[0]])
        top = (seg["ack_max"][mine] + base) % WRAP
        covers = np.flatnonzero((top - sa_end) % WRAP < 1 << 31)
        if len(covers):
            self.rtt_handshake[0] = (int(seg["ts_ns"][mine[covers[0]]]) - sa_ts) / 1e6

    def _carry(self, f: Flows, src: np.ndarray, rows: Columns,
               cols: Columns, kind: np.ndarray, lo: int, hi: int, s0: int,
               before: np.ndarray, cut: int, lim: Limits) -> None:
        """The rows the next piece needs (`rows`, as captured), and where its handshake is
        to end (in raw numbers: `cols`, the rows as analysed, give the relative ones')."""
        seg = f.seg
        ts, d = seg["ts_ns"], seg["dir"].astype(np.int64)
        n = len(ts)
        s = max(s0, hi - OVERLAP_ROWS)
        hs_seg = kind[src] == _HS
        keep = np.zeros(n, dtype=bool)
        end, sent, ack, ack_max = seg["end"], seg["sent_before"], seg["ack"], seg["ack_max"]
        top = np.maximum(end, sent)  # the highest sequence number sent up to each row
        at_s = before.copy()  # highest ACK of each direction before s
        for k in (0, 1):
            mine = np.flatnonzero((d[:s] == k) & ~hs_seg[:s])
            every = np.flatnonzero(d[:s] == k)
            if len(every):
                at_s[k] = ack_max[every[-1]]
            if not len(mine):
                continue
            look = list(mine[-2:])  # the last two packets
            data = mine[seg["payload"][mine] > 0]
            if len(data):
                look.append(data[-1])  # the last data
            for e in look:  # and the rows that set the highest seq and ACK up to them
                keep[e] = True  # (up to and before it: its own sent_before)
                for value, col, upto in ((top[e], end, e), (sent[e], end, e - 1),
                                         (ack_max[e], ack, e)):
                    hit = every[(every <= upto) & (col[every] == value)]
                    if len(hit) and value >= 0:
                        keep[hit[-1]] = True
            keep[every[-1]] = True
        for k in (0, 1):  # data not acknowledged yet (its round trip comes later)
            out = np.flatnonzero((d[:s] == k) & ~hs_seg[:s] & (seg["payload"][:s] > 0)
                                 & (end[:s] > sent[:s]) & (end[:s] > at_s[k ^ 1]))
            if len(out) > lim.outstanding_rows:
                lost = out[len(out) - lim.outstanding_rows - 1]
                self.dropped_outstanding[k] = (int(end[lost]) + _base(
                    cols["seq"][src[lost]], seg["seq"][lost])) % WRAP
                out = out[len(out) - lim.outstanding_rows:]
            keep[out] = True
        keep[:s] &= ~hs_seg[:s]
        self.dropped |= bool((~keep[:s] & ~hs_seg[:s]).any())
        # rows from s on, as captured (copies too: the copies' lookback counts them)
        first = (ts[s], seg["frame"][s]) if s < n else (cut, -1)
        tail = (rows["ts_ns"] > first[0]) | ((rows["ts_ns"] == first[0])
                                               & (rows["frame"] >= first[1]))
        carry = np.zeros(len(rows["frame"]), dtype=bool)
        carry[src[np.flatnonzero(keep[:s])]] = True
        carry |= tail
        carry &= kind != _HS
        decided = rows["ts_ns"] < cut
        analysed = np.zeros(len(rows["frame"]), dtype=bool)  # not a copy of another
        analysed[src] = True
        known = np.where(decided & (rows["known"] < 0),
                         np.where(analysed, 0, 1),
                         rows["known"]).astype(np.int8)
        new_kind = np.where(tail, 0, _EXTRA).astype(np.int8)
        self.rows = {**take(rows, np.flatnonzero(carry)),
                     "known": known[carry], "kind": new_kind[carry]}
        # the handshake of the next piece ends where its first row of each direction
        # begins: what that direction had sent and acknowledged before it
        carried = np.zeros(n, dtype=bool)
        carried[:s] = keep[:s]
        carried[s:] = ~hs_seg[s:]
        for k in (0, 1):
            r = np.flatnonzero(carried & (d == k))
            self.seq_target[k] = self.ack_target[k] = -1
            if not len(r):
                continue
            r1 = r[0]
            if sent[r1] > 0:
                self.seq_target[k] = (int(sent[r1]) + _base(cols["seq"][src[r1]],
                                                            seg["seq"][r1])) % WRAP
            prev = np.flatnonzero(d[:r1] == k)
            with_ack = np.flatnonzero((d == k) & (ack >= 0))
            if len(prev) and ack_max[prev[-1]] >= 0 and len(with_ack):
                w = with_ack[0]
                self.ack_target[k] = (int(ack_max[prev[-1]]) + _base(
                    cols["ack"][src[w]], ack[w])) % WRAP

    # ------------------------------------------------------------------ the results
    def facts(self) -> Columns:
        """The connection's flow facts from what was seen so far (one flow)."""
        out = dict(self.flow)
        observed = self.maxpay.max()
        at_max = np.where(self.maxpay == observed, self.at_max, 0)
        out["mss"], out["mss_how"] = send_mss(self.flow["mss_option"].reshape(-1),
                                              self.flow["syn_timestamps"].reshape(-1),
                                              self.maxpay, at_max)
        rc, rs = self.rtt_handshake
        without = np.flatnonzero((self.undelayed.count == 0) & (self.late.count > 0))
        out.update(round_trips(np.array([rs]), np.array([rc]), self.undelayed.count,
                               self.undelayed.smallest, self.undelayed.upper(), without,
                               self.late.smallest[without], self.late.upper()[without]))
        out.update(packets=np.array([self.packets]), pieces=np.array([self.pieces]),
                   last_ns=np.array([self.last_ns]),
                   retransmissions=np.array([self.retransmissions]),
                   keepalives=np.array([self.keepalives]),
                   first_frame=np.array([self.first_frame]),
                   last_frame=np.array([self.last_frame]))
        return out

    def result(self) -> tuple[Flows, Detection]:
        """The connection's flow facts and detection, judged with its final facts; the
        reasons why a field may differ from the whole-connection analysis in `inexact`."""
        facts = self.facts()
        fallback = (self.undelayed.count == 0) & (self.late.count > 0)
        det = self.verdicts.decide(params(facts), self.off.copy(), self.not_classic.copy(),
                                   fallback, self.late_mss)
        empty = {"flow": np.zeros(0, np.int64)}
        return Flows(seg=empty, flow=facts, starts=np.zeros(1, np.int64)), det

    def exchanged(self) -> tuple[Columns, np.ndarray]:
        """Its exchanges (`exchanges.paired`; call once it ended) and whether it carried data
        (`exchanges.flow_exchanges`' shape)."""
        last, _ = exchanges.paired(self.turns)
        return Columns.concat([*self.pairs, last]), np.array([self.had_data])

    def finish(self, rows: Columns | None, ends: TupleEnds
               ) -> tuple[Flows, Detection]:
        """Analyse the connection's last piece (`rows`, HELD columns with from_low; None:
        none), then give its flow facts and detection (`result`)."""
        self.add(rows if rows is not None else {k: v[:0] for k, v in self.hs.items()}, ends,
                 None)
        return self.result()

    def provisional(self, rows: Columns | None, ends: TupleEnds
                    ) -> tuple[Flows, Detection]:
        """The verdicts the connection would get if it ended now with `rows` (`finish` on a
        copy: this ledger is left as it was, to take the next piece)."""
        return copy.deepcopy(self).finish(rows, ends)

    @property
    def held_rows(self) -> int:
        return len(self.rows["frame"]) + len(self.hs["frame"])


def last_connection(rows: Columns) -> tuple[Columns,
                                                          Columns | None]:
    """One 4-tuple's rows split into those of connections that ended (before the last SYN
    with a new initial sequence number: build_flows starts a connection there) and those of
    the last connection (None before it if there were no others)."""
    rows = in_time_order(rows)
    syn = np.flatnonzero((rows["flags"] & (SYN | ACK)) == SYN)
    new_isn = syn[np.r_[True, rows["seq"][syn[1:]] != rows["seq"][syn[:-1]]]] if len(syn) \
        else syn
    start = int(new_isn[-1]) if len(new_isn) else 0
    if start == 0:
        return rows, None
    return take(rows, np.arange(start, len(rows["frame"]))), take(rows, np.arange(start))


def in_time_order(rows: Columns) -> Columns:
    """Rows in time order, ties in capture order (frame numbers)."""
    order = np.lexsort((rows["frame"], rows["ts_ns"]))
    if np.array_equal(order, np.arange(len(order))):
        return rows
    return take(rows, order)


def _positions(frames: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index in `frames` (distinct) of each of `wanted` (all present)."""
    order = np.argsort(frames, kind="stable")
    return order[np.searchsorted(frames[order], wanted)]


def _base(raw: int, rel: int) -> int:
    """What a relative sequence (or ACK) number adds to give the raw one, modulo 2**32."""
    return (int(raw) - int(rel)) % WRAP
