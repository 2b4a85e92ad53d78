"""pcapng files: sections, interfaces and packet blocks (EPB, PB, SPB), their trailing
length copies checked in bulk, and resynchronisation after a corrupt block."""

from __future__ import annotations

from array import array
from typing import Iterator

import numpy as np

from ..errors import CaptureError
from ..layouts import (
    BLOCK,
    BT_EPB,
    BT_IDB,
    BT_PB,
    BT_SHB,
    BT_SPB,
    IDB,
    IF_TSOFFSET,
    IF_TSRESOL,
    OPT_END,
    OPTION,
    PCAPNG_BOM,
    SHB,
    TRAILER,
    TSOFFSET,
)
from ..weirds import Weird
from . import walk
from .damage import RESYNC_SPAN
from .formats import (
    EPB,
    KNOWN_BLOCKS,
    MAX_BLOCK,
    MIN_BLOCK,
    MIN_BLOCK_LEN,
    MIN_SHB_LEN,
    SPB,
    Interface,
    RecordBatch,
    block_length_ok,
    linktype_name,
)
from .walk import KNOWN_BLOCK_ARRAY, first_decided, u32, u32_rows

# a section header's byte-order magic as the file has it -> whether the section is big-endian
BYTE_ORDER = {PCAPNG_BOM.to_bytes(4, "little"): False, PCAPNG_BOM.to_bytes(4, "big"): True}
BOM_AT, BOM_END = SHB.offset("bom"), SHB.offset("bom") + 4
LENGTH_AT = BLOCK.offset("length")


class PcapngBlocks:
    """Reading pcapng blocks (a part of CaptureReader)."""

    # ------------------------------------------------------------------ pcapng
    def _pcapng_chunks(self) -> Iterator[RecordBatch]:
        carry = self._pending
        self._pending = b""
        need = 0
        eof = False
        block_no = 0  # blocks fully consumed so far
        resync = False
        while not eof:
            buf, eof = self._fill(carry, need)
            base, n, need = self._pos, len(buf), 0
            data = np.frombuffer(buf, dtype=np.uint8)
            pos = 0
            while True:
                if resync:
                    pos, found, need = self._pcapng_resync(data, pos, eof)
                    if not found:
                        break
                    resync = False
                    block_no += 1  # the corrupt stretch
                    self._resynced(base + pos, "block")
                starts = array("q")
                append = starts.append
                # segments: (first record index, big-endian?, interface base) - new one per SHB
                segs = [(0, self._big, self._sec_base)]
                # (first record index, interfaces described before it) pairs: a packet block
                # may only name an interface whose description precedes it
                described = array("q", (0, len(self._ifaces)))
                bad = None
                big = self._big
                unpack = BLOCK.struct(big).unpack_from
                trailer = TRAILER.struct(big).unpack_from
                lim = n - BLOCK.size
                checked = 0  # starts[:checked] have had their trailing length checked
                min_block, max_block = MIN_BLOCK_LEN, MAX_BLOCK
                epb, spb, pb = BT_EPB, BT_SPB, BT_PB
                while pos <= lim:
                    if walk._compiled is not None:  # a run of packet blocks, compiled
                        out = np.empty((n - pos) // MIN_BLOCK_LEN + 1, dtype=np.int64)
                        k, pos, passed = walk._compiled.walk_blocks(buf, pos, big, max_block, out)
                        all_checked = checked == len(starts)
                        starts.frombytes(out[:k].tobytes())
                        if all_checked:  # the walk checked the trailing lengths of its blocks
                            checked = len(starts)
                        block_no += passed
                        if pos > lim:
                            continue  # ends the loop through its `else`: the trailer check
                    bt, bl = unpack(buf, pos)
                    end = pos + bl
                    # The hot loop: packet blocks with a sane length; their trailing length
                    # copies are compared in bulk before any other block is read, and at the end.
                    # (block_length_ok written out: without the compiled walk this runs per block)
                    if (bt == epb or bt == spb or bt == pb) and (
                            min_block <= bl <= max_block and not bl & 3 and end <= n):
                        append(pos)
                        pos = end
                        block_no += 1
                        continue
                    j = self._bad_trailer(data, starts, checked, big)
                    checked = len(starts)
                    if j is not None:
                        break
                    if bt != BT_SHB:
                        if not block_length_ok(bl):
                            bad = (pos, f"block length {bl} is invalid (must be a multiple of 4 "
                                   f"between {MIN_BLOCK_LEN} and {MAX_BLOCK})")
                            break
                        if end > n:
                            need = bl
                            break
                        tl, = trailer(buf, end - TRAILER.size)
                        if tl != bl:
                            bad = (pos, f"block length {bl} does not match the length {tl} "
                                   "at the end of the block")
                            break
                        if bt == BT_IDB:
                            err = self._parse_idb(buf, pos, bl, big,
                                                  f"block {block_no + 1} at byte {base + pos}")
                            if err:
                                bad = (pos, err)
                                break
                            if described[-2] == len(starts):
                                described[-1] = len(self._ifaces)
                            else:
                                described.extend((len(starts), len(self._ifaces)))
                        elif bt not in KNOWN_BLOCKS:
                            self._skip("unknown-block-type", 1)
                        pos = end
                        block_no += 1
                        continue
                    # a section header: its byte-order magic sets how the section is read
                    if pos + BOM_END > n:
                        break
                    bom = bytes(buf[pos + BOM_AT:pos + BOM_END])
                    big = BYTE_ORDER.get(bom)
                    if big is None:
                        bad = (pos, f"section header with a bad byte-order magic {bom.hex()}")
                        break
                    unpack = BLOCK.struct(big).unpack_from
                    trailer = TRAILER.struct(big).unpack_from
                    bt, bl = unpack(buf, pos)
                    if not block_length_ok(bl, MIN_SHB_LEN):
                        bad = (pos, f"section header block length {bl} is invalid")
                        break
                    if pos + bl > n:
                        need = bl
                        break
                    tl, = trailer(buf, pos + bl - TRAILER.size)
                    if tl != bl:
                        bad = (pos, f"block length {bl} does not match the length {tl} "
                               "at the end of the block")
                        break
                    major = SHB.unpack(buf, pos, big)["major"]
                    if major != 1:
                        bad = (pos, f"unsupported pcapng version {major}")
                        break
                    self._big = big
                    self._sec_base = len(self._ifaces)
                    segs.append((len(starts), big, self._sec_base))
                    pos += bl
                    block_no += 1
                else:
                    j = self._bad_trailer(data, starts, checked, big)
                if j is not None:  # a packet block walked over had a wrong length
                    block_no -= len(starts) - j
                    at = starts[j]
                    bl, = trailer(buf, at + LENGTH_AT)
                    tl, = trailer(buf, at + bl - TRAILER.size)
                    bad = (at, f"block length {bl} does not match the length {tl} at the end "
                           "of the block")
                    need = 0
                    del starts[j:]
                if len(starts):
                    yield self._pcapng_batch(data, starts, segs, described, base)
                if bad is None:
                    break
                self._corrupt(f"corrupt block: {bad[1]}", "block", block_no + 1, base + bad[0])
                resync = True
                need = 0
                pos = bad[0] + 1
            carry = bytes(buf[pos:]) if pos < n else b""
            buf = data = None  # let _fill reuse the buffer once the batches are dropped
            self._pos = base + pos
        self._finish(len(carry), resync, unit="block", number=block_no + 1)

    @staticmethod
    def _bad_trailer(data: np.ndarray, starts: array, first: int, big: bool) -> int | None:
        """Index of the first packet block in starts[first:] whose trailing length copy differs
        from its length (the blocks are complete), or None."""
        if len(starts) <= first:
            return None
        st = np.frombuffer(starts, dtype=np.int64)[first:].copy()  # no view left: `starts` grows
        bl = u32_rows(data, st + LENGTH_AT, 1, big)[:, 0]
        bad = np.flatnonzero(u32_rows(data, st + bl - TRAILER.size, 1, big)[:, 0] != bl)
        return first + int(bad[0]) if len(bad) else None

    def _pcapng_resync(self, data: np.ndarray, start: int, eof: bool) -> tuple[int, bool, int]:
        """The first position >= start where a block of a known type starts whose trailing
        length copy matches its length: (pos, True, 0).  Without one in the buffer: (pos to
        carry on from, False, bytes needed from there)."""
        n = len(data)
        big = self._big
        q = start
        while q <= n - BOM_END:  # candidates whose header, to a section's magic, is in `data`
            m = min(n - BOM_END + 1 - q, RESYNC_SPAN)
            c = np.arange(q, q + m, dtype=np.int64)
            h = u32_rows(data, c, len(BLOCK.fields), big)
            bt, bl = h[:, 0], h[:, 1]
            ok = np.isin(bt, KNOWN_BLOCK_ARRAY) & block_length_ok(bl)
            shb = np.flatnonzero(bt == BT_SHB)
            for i in shb:  # a section header has its own byte order
                sbig = BYTE_ORDER.get(bytes(data[q + i + BOM_AT:q + i + BOM_END]))
                if sbig is not None:
                    v = int(u32(data, c[i:i + 1] + LENGTH_AT, sbig)[0])
                    if block_length_ok(v, MIN_SHB_LEN):
                        ok[i] = True
                        bl[i] = v
            idx = np.flatnonzero(ok)
            if len(idx):
                c, bl = c[idx], bl[idx]
                end = c + bl
                complete = end <= n
                tl = np.full(len(c), -1, np.int64)
                ic = np.flatnonzero(complete)
                if len(ic):
                    tl[ic] = u32(data, end[ic] - TRAILER.size, big)
                    for j in ic[np.isin(idx[ic], shb)]:  # SHB trailers in their own order
                        sbig = BYTE_ORDER[bytes(data[c[j] + BOM_AT:c[j] + BOM_END])]
                        tl[j] = int(u32(data, end[j:j + 1] - TRAILER.size, sbig)[0])
                status = np.where(complete & (tl == bl), 1, np.where(~complete & (not eof), 2, 0))
                decided = first_decided(c, status, bl)
                if decided:
                    return decided
            q += m
        return (n if eof else q), False, 0

    def _parse_idb(self, buf: bytes, pos: int, bl: int, big: bool, where: str) -> str | None:
        if bl < MIN_BLOCK[BT_IDB]:
            return f"interface description block length {bl} is too short"
        idb = IDB.unpack(buf, pos, big)
        lt = idb["linktype"]
        iface = Interface(lt, idb["snaplen"])
        number = len(self._ifaces) - self._sec_base
        o, end = pos + IDB.size, pos + bl - TRAILER.size
        option = OPTION.struct(big).unpack_from
        while o + OPTION.size <= end:
            code, ln = option(buf, o)
            if code == OPT_END:
                break
            v = o + OPTION.size
            if v + ln > end:
                self._idb_problem(f"interface {number}: option {code} of length {ln} runs past "
                                  "the end of its block", where, "its options after it ignored")
                break
            if code == IF_TSRESOL and ln >= 1:
                problem = iface.set_tsresol(buf[v])
                if problem:
                    self._idb_problem(f"interface {number}: {problem}", where,
                                      "its times read as microseconds (the default)")
            elif code == IF_TSOFFSET and ln >= TSOFFSET.size:
                iface.set_tsoffset(TSOFFSET.unpack(buf, v, big)["seconds"])
            o = v + ((ln + 3) & ~3)
        # identical interfaces share one object: 2 M tiny interface blocks cost a list
        key = (iface.linktype, iface.snaplen, iface.tsmul, iface.tsdiv, iface.tsshift,
               iface.tsoffset_ns)
        iface = self._iface_pool.setdefault(key, iface)
        self._ifaces.append(iface)
        self._lt_table = None
        name = linktype_name(lt)
        if name not in self.info.link_types:
            self.info.link_types.append(name)
        return None

    def _undescribed(self, ifaces_before: int, where: str) -> None:
        """A packet block naming an interface not described before it in its section: no
        link type or time resolution to read it by, so nothing is assumed and it is skipped
        (an error when strict). Said once per kind; capture.skipped counts every one."""
        problem = ("packet block before any interface description block of its section"
                   if ifaces_before <= 0 else
                   "packet block names an interface the section does not describe")
        if self.strict:
            raise CaptureError(self.path, problem, where)
        if problem not in self._undescribed_warned:
            self._undescribed_warned.add(problem)
            self._warn(Weird("undescribed-interface", f"{problem} ({where}); skipped, as is "
                             "any later one like it: no link type or time resolution to "
                             "read it by"))

    def _pcapng_batch(self, data: np.ndarray, starts: array, segs: list, described: array,
                      base: int = 0) -> RecordBatch:
        st = np.frombuffer(starts, dtype=np.int64)
        k = len(st)
        # how many interfaces were described before each block (one number in the usual case:
        # all interface blocks of the batch came before its packet blocks)
        marks = np.frombuffer(described, dtype=np.int64)
        before = int(marks[1]) if len(marks) == 2 else marks[1::2][
            np.searchsorted(marks[0::2], np.arange(k), side="right") - 1]
        frame = np.arange(self._frames + 1, self._frames + 1 + k, dtype=np.int64)
        self._frames += k
        self.info.packets += k
        offset = np.zeros(k, np.int64)
        caplen = np.zeros(k, np.int64)
        wirelen = np.zeros(k, np.int64)
        ts = np.full(k, -1, np.int64)
        have_ts = np.zeros(k, bool)
        ifidx = np.full(k, -1, np.int64)
        blen = np.zeros(k, np.int64)
        short = np.zeros(k, bool)
        bounds = [s[0] for s in segs[1:]] + [k]
        for (lo, big, ibase), hi in zip(segs, bounds):
            if hi <= lo:
                continue
            s = st[lo:hi]
            # type, length, and (EPB, PB) the five words after them, read in one pass if
            # the last block holds them (they are then garbage for SPBs, and not used)
            seven = s[-1] + EPB.data <= len(data)
            w = u32_rows(data, s, 7 if seven else 2, big)
            btype, bl = w[:, 0], w[:, 1]
            blen[lo:hi] = bl
            spb = btype == BT_SPB
            too_short = bl < np.where(spb, MIN_BLOCK[BT_SPB], MIN_BLOCK[BT_EPB])
            short[lo:hi] = too_short
            ifaces_here = before - ibase if np.ndim(before) == 0 else before[lo:hi] - ibase
            # the words of formats.PACKET_BLOCKS: f[:, 0] ifid, 1-2 time, 3 caplen, 4 origlen
            idx = np.nonzero(~spb & ~too_short)[0]
            if len(idx):
                # the usual case, only EPBs and PBs: slices (views), not index lists (copies)
                every = len(idx) == hi - lo
                g = slice(lo, hi) if every else lo + idx
                at = s if every else s[idx]
                if seven:
                    f = w[:, 2:] if every else w[idx, 2:]
                else:
                    f = u32_rows(data, at + EPB.fields, len(EPB.words), big)
                ifid = f[:, 0]
                pb = btype[idx] == BT_PB
                if pb.any():
                    ifid = ifid.copy()
                    ifid[pb] = (ifid[pb] >> 16) if big else (ifid[pb] & 0xFFFF)
                ok = ifid < (ifaces_here if np.ndim(ifaces_here) == 0 else ifaces_here[idx])
                ids = ibase + ifid
                ifidx[g] = np.where(ok, ids, -1)
                units = ((f[:, 1].astype(np.uint64) << np.uint64(32))
                         | f[:, 2].astype(np.uint64))
                offset[g] = at + EPB.data
                caplen[g] = f[:, 3]
                wirelen[g] = f[:, 4]
                # each interface's blocks get its clock (all of them: a slice, no copies)
                known = slice(None) if ok.all() else ok
                present = np.flatnonzero(np.bincount(ids[known]))  # the interfaces in use
                tsv = np.zeros(len(idx), np.int64)
                for u in present:
                    m = known if len(present) == 1 else ok & (ids == u)
                    tsv[m] = self._ifaces[int(u)].ts_ns(units[m])
                ts[g] = tsv
                have_ts[g] = ok
            sidx = np.nonzero(spb & ~too_short)[0]
            if len(sidx):
                g = lo + sidx
                ol = u32_rows(data, s[sidx] + SPB.fields, 1, big)[:, 0]
                space = bl[sidx] - SPB.overhead
                # an SPB belongs to the section's first interface, if described before it
                has = ifaces_here > 0 if np.ndim(ifaces_here) == 0 else ifaces_here[sidx] > 0
                ifidx[g] = np.where(has, ibase, -1)
                snap = (self._ifaces[ibase].snaplen or MAX_BLOCK) if np.any(has) else MAX_BLOCK
                caplen[g] = np.minimum(np.minimum(ol, snap), space)
                wirelen[g] = ol
                offset[g] = s[sidx] + SPB.data
        # caplen must fit in the block, beside its overhead
        overhead = np.where(offset - st == SPB.data, SPB.overhead, EPB.overhead)
        bad = ~short & ((caplen > blen - overhead) | (caplen < 0))
        # SPB timestamps: the previous packet's
        if not have_ts.all():
            pos_idx = np.where(have_ts, np.arange(k), -1)
            np.maximum.accumulate(pos_idx, out=pos_idx)
            ts = np.where(pos_idx >= 0, ts[np.maximum(pos_idx, 0)], self._last_ts)
        if k:
            self._last_ts = int(ts[-1])
        lt_table = self._lt_table
        if lt_table is None or len(lt_table) != len(self._ifaces) + 1:
            lt_table = self._lt_table = np.array([i.linktype for i in self._ifaces] + [-1],
                                                 dtype=np.int32)
        linktype = lt_table[ifidx]  # -1 -> last entry (-1)
        keep = (ifidx >= 0) & ~bad
        start = st + base
        if not keep.all():
            unknown = np.flatnonzero((ifidx < 0) & ~short)
            if unknown.size:
                j = int(unknown[0])
                ibase = next(sg[2] for sg in reversed(segs) if sg[0] <= j)
                self._undescribed(int(before if np.ndim(before) == 0 else before[j]) - ibase,
                                  f"frame {int(frame[j])} at byte {self._pos + int(st[j])}")
            self._skip("corrupt-block", int(short.sum()))
            self._skip("unknown-interface", int(((ifidx < 0) & ~short).sum()))
            self._skip("caplen-exceeds-block", int((bad & (ifidx >= 0)).sum()))
            sel = np.nonzero(keep)[0]
            offset, caplen, wirelen, ts = offset[sel], caplen[sel], wirelen[sel], ts[sel]
            linktype, frame, start, ifidx = linktype[sel], frame[sel], start[sel], ifidx[sel]
        return RecordBatch(data=data, offset=offset, caplen=caplen, wirelen=wirelen,
                           ts_ns=ts, linktype=linktype, frame=frame, start=start,
                           tunnels=self.info.tunnels, iface=ifidx)
