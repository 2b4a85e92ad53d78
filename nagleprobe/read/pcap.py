"""pcap files: the file header, record headers checked in bulk, and resynchronisation after
a corrupt record (a chain of plausible headers says where records start again)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ..errors import CaptureError
from ..layouts import ETHERNET, PCAP_FILE, PCAP_NS, PCAP_RECORD, PCAP_US, SLL
from .damage import (
    ETHERTYPES,
    NS_WINDOW,
    RESYNC_BACK,
    RESYNC_CHAIN,
    RESYNC_CHAIN_FAR,
    RESYNC_EARLIER_NS,
    RESYNC_MAX_WIRELEN,
    RESYNC_SPAN,
)
from .formats import MAX_CAPLEN, SUPPORTED_LINKTYPES, RecordBatch, linktype_name
from .index import FrameIndex
from .walk import first_decided, u32_rows, walk_headers

HEADER = PCAP_RECORD.size  # a record's header: its packet bytes follow
CAPLEN_AT = PCAP_RECORD.offset("caplen")  # where walk_headers' positions point
WIRELEN_AT = PCAP_RECORD.offset("wirelen")


class PcapRecords:
    """Reading pcap records (a part of CaptureReader)."""

    # ------------------------------------------------------------------ pcap
    def _open_pcap(self, head: bytes) -> None:
        rest = self._read(PCAP_FILE.size - len(head))
        got = len(head) + len(rest)
        if got < PCAP_FILE.size:
            raise CaptureError(self.path, f"truncated pcap file header: {got} of "
                               f"{PCAP_FILE.size} bytes", f"byte {got}")
        le = int.from_bytes(head, "little")
        self._big = le not in (PCAP_US, PCAP_NS)
        fh = PCAP_FILE.unpack(head + rest, big=self._big)
        self._ts_frac_mul = 1000 if fh["magic"] == PCAP_US else 1
        self._frac_lim = 1_000_000 if fh["magic"] == PCAP_US else 1_000_000_000
        major, minor, snaplen = fh["major"], fh["minor"], fh["snaplen"]
        if major != 2:
            raise CaptureError(self.path, f"unsupported pcap version {major}.{minor}",
                               f"byte {PCAP_FILE.offset('major')}")
        lt = fh["network"] & 0xFFFF
        if lt not in SUPPORTED_LINKTYPES:
            raise CaptureError(self.path, f"unsupported link type {lt} ({linktype_name(lt)}); "
                               "nagleprobe reads EN10MB, LINUX_SLL, LINUX_SLL2, RAW, IPV4, "
                               "IPV6, NULL and LOOP captures",
                               f"byte {PCAP_FILE.offset('network')}")
        self._linktype = lt
        self._linktypes = np.zeros(0, np.int32)
        self._snaplen = snaplen if 0 < snaplen <= MAX_CAPLEN else MAX_CAPLEN
        self._anchor: int | None = None  # latest time (ns) of the records read so far
        # the record rejected for its time alone: its length, where it ends, its time
        self._jump_len = self._jump_end = self._jump_ts = -1
        self.info.link_types.append(linktype_name(lt))
        self._pos = PCAP_FILE.size
        if not self.info.compressed and self._size is not None and self._given is None:
            self.index = FrameIndex(self.path, self._big, lt, self._ts_frac_mul)

    def _pcap_chunks(self) -> Iterator[RecordBatch]:
        big = self._big
        carry = b""
        need = 0
        eof = False
        resync = False  # skipping a corrupt stretch: looking for the next valid record
        while not eof:
            buf, eof = self._fill(carry, need)
            base, n, need = self._pos, len(buf), 0  # base: file offset of buf[0]
            data = np.frombuffer(buf, dtype=np.uint8)
            p = 0  # where the next record starts
            while True:
                if resync:
                    p, found, need = self._pcap_resync(data, p, eof, self._damage[2] - base,
                                                       self._damage[3])
                    if not found:
                        break
                    resync = False
                    # reading on where the walk stopped: a jump of the time that the records
                    # after it keep (a gap, a step of the clock: see clock.py)
                    jumped = self._damage[3] and base + p == self._damage[2]
                    if self._damage[3] and base + p == self._jump_end:
                        # reading on right after it: a whole record whose time alone is wrong
                        self._damage = None
                        self._frames += 1
                        self.info.packets += 1
                        at = self._jump_end - self._jump_len
                        self._clock.implausible_record(self._jump_ts,
                                                       f"frame {self._frames} at byte {at}")
                    else:
                        self._resynced(base + p, "record")
                    # the chain vouches for the record found: its time is the anchor now
                    t = int(self._pcap_plausible(data, np.array([p], np.int64))[2][0])
                    self._anchor = t if self._anchor is None or jumped else max(self._anchor, t)
                # every record header from p on (whose caplen field is in the buffer)
                st, ts, cl, wl, w, first = walk_headers(
                    buf, big, p, self._ts_frac_mul, self._frac_lim,
                    (min(MAX_CAPLEN, self._snaplen), self._anchor, NS_WINDOW))
                k = len(st)
                end = w - CAPLEN_AT  # where the record after the walked ones starts
                bad = self._pcap_first_bad(data, st, ts, cl, wl, first) if first >= 0 else None
                if bad is not None:
                    j = bad[0]
                    end = int(st[j])
                    k = j
                elif k and end > n:  # the last record runs past the buffer: carry it over
                    k -= 1
                    end = int(st[k])
                    need = int(cl[k]) + HEADER
                if k:
                    if self.index is not None:
                        self.index.add(self._frames + 1, st[:k], base)
                    yield self._pcap_batch(data, st[:k], ts[:k], cl[:k], wl[:k])
                    buf, data = self._unmap_lost(buf, data)  # (a file truncated meanwhile)
                    n = len(buf)
                if bad is None:
                    p = end
                    break
                _, problem, jump = bad
                if jump and k == 0 and end == p:  # (cannot happen: the resync set the anchor)
                    jump = 0
                # where the record ends, should it be whole with a wrong time (see above)
                self._jump_len = HEADER + int(cl[j])
                self._jump_end, self._jump_ts = base + end + self._jump_len, int(ts[j])
                self._corrupt(f"corrupt record: {problem}", "record", self._frames + 1,
                              base + end, defer=jump != 0)
                resync = True
                need = 0
                # a deletion in the last record read puts the next header a little earlier
                # (and its time off: a time far back may be either)
                p = end if jump > 0 else max(end - RESYNC_BACK,
                                             int(st[k - 1]) + HEADER if k else p)
            carry = bytes(buf[p:]) if p < n else b""
            # let _fill reuse the buffer, and the heap the walk's arrays, once the batches
            # are dropped
            buf = data = st = ts = cl = wl = None
            self._pos = base + p
        if resync and self._damage[3] and self._pos + len(carry) == self._jump_end:
            # the last record, whole, its time alone far from the others'
            self._damage, resync, carry = None, False, b""
            self._frames += 1
            self.info.packets += 1
            self._clock.implausible_record(
                self._jump_ts, f"frame {self._frames} at byte {self._jump_end - self._jump_len}")
        self._finish(len(carry), resync)

    def _pcap_first_bad(self, data: np.ndarray, st: np.ndarray, ts: np.ndarray, cl: np.ndarray,
                        wl: np.ndarray, j: int) -> tuple[int, str, int]:
        """What is wrong with walked record `j`, the first one not plausible (as
        `walk_headers` judges): (j, problem, jump) where jump is 1 (-1) when the only problem
        is a time too far after (before) the anchor, which may be a real gap (a step of the
        clock), else 0. The anchor is the latest time before the record; the records before
        it are all plausible, so only they move it."""
        c, w = int(cl[j]), int(wl[j])
        if c > MAX_CAPLEN:
            return j, f"captured length {c} exceeds the limit of {MAX_CAPLEN} bytes", 0
        if c > self._snaplen:
            return j, f"captured length {c} exceeds the snap length {self._snaplen}", 0
        if w <= 0:
            return j, "original length 0", 0
        if c > w:
            return j, f"captured length {c} exceeds the original length {w}", 0
        frac = int(u32_rows(data, st[j:j + 1] + PCAP_RECORD.offset("ts_frac"), 1,
                            self._big)[0, 0])
        if frac >= self._frac_lim:
            return j, f"time fraction {frac} is not below {self._frac_lim}", 0
        prev = int(ts[0]) if self._anchor is None else self._anchor
        if j:
            prev = max(prev, int(ts[:j].max()))
        d = (int(ts[j]) - prev) / 1e9
        if d < 0:
            return j, f"time is {-d:.0f} s before the records read so far", -1
        return j, f"time is {d:.0f} s after the records read so far", 1

    def _pcap_batch(self, data: np.ndarray, st: np.ndarray, ts: np.ndarray, caplen: np.ndarray,
                    wirelen: np.ndarray) -> RecordBatch:
        k = len(st)
        frame = np.arange(self._frames + 1, self._frames + 1 + k, dtype=np.int64)
        self._frames += k
        self.info.packets += k
        top = int(ts.max())
        self._anchor = top if self._anchor is None else max(self._anchor, top)
        if len(self._linktypes) < k:  # one read-only column for every batch: no fill per chunk
            self._linktypes = np.full(max(k, 2 * len(self._linktypes)), self._linktype, np.int32)
            self._linktypes.flags.writeable = False
        return RecordBatch(data=data, offset=st + HEADER, caplen=caplen, wirelen=wirelen, ts_ns=ts,
                           linktype=self._linktypes[:k], frame=frame, tunnels=self.info.tunnels)

    def _pcap_plausible(self, data: np.ndarray, pos: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Could a record header start at each of `pos` (the header alone)? (mask, caplen,
        ts_ns)."""
        h = u32_rows(data, pos, len(PCAP_RECORD.fields), self._big)  # the header's words
        cl, wl = h[:, 2], h[:, 3]
        ok = ((h[:, 1] < self._frac_lim) & (cl <= self._snaplen) & (cl <= wl) & (wl > 0)
              & (wl <= RESYNC_MAX_WIRELEN))
        return ok, cl, h[:, 0] * 1_000_000_000 + h[:, 1] * self._ts_frac_mul

    def _link_plausible(self, data: np.ndarray, pos: np.ndarray, cl: np.ndarray) -> np.ndarray:
        """Does the record whose header is at each of `pos` start like a frame of the file's
        link type (records too short to tell pass)?"""
        lt, n = self._linktype, len(data)
        at = pos + HEADER
        if lt == 1:  # Ethernet: a known EtherType or an 802.3 length
            can = (cl >= ETHERNET.size) & (at + ETHERNET.size <= n)
            et = np.zeros(len(pos), np.int64)
            i = np.flatnonzero(can)
            e = at[i] + ETHERNET.offset("ethertype")
            et[i] = (data[e].astype(np.int64) << 8) | data[e + 1]
            return ~can | (et <= 1500) | np.isin(et, ETHERTYPES)
        if lt in (12, 101, 228, 229):  # raw IP: version 4 or 6
            can = (cl >= 1) & (at < n)
            v = np.zeros(len(pos), np.int64)
            i = np.flatnonzero(can)
            v[i] = data[at[i]] >> 4
            return ~can | (v == 4) | (v == 6)
        if lt == 113:  # SLL: packet type 0-4
            pt = SLL.offset("packet_type")
            can = (cl >= pt + 2) & (at + pt + 2 <= n)
            v = np.zeros(len(pos), np.int64)
            i = np.flatnonzero(can)
            v[i] = (data[at[i] + pt].astype(np.int64) << 8) | data[at[i] + pt + 1]
            return ~can | (v <= 4)
        return np.ones(len(pos), bool)

    def _pcap_resync(self, data: np.ndarray, start: int, eof: bool,
                     damage: int, jump: bool = False) -> tuple[int, bool, int]:
        """The first position >= start where a chain of plausible records starts (see
        RESYNC_CHAIN; or plausible records end exactly at the end of the file): (pos, True,
        0).  Without one in the buffer: (pos to carry on from, False, bytes needed from
        there).  A candidate before `damage` (where the damaged header was read) needs the
        whole chain: with bytes deleted at the start of that header, the one just before it
        reads as a record whose time is off by whole seconds. With `jump` (the record at
        `damage` was rejected for its time alone) that record may start a chain whatever its
        time: a step of the clock back (or a gap forward) kept by RESYNC_CHAIN_FAR records."""
        n = len(data)
        q = start
        while q <= n - HEADER:
            m = min(n - HEADER + 1 - q, RESYNC_SPAN)
            # zeros (a zeroed page, a gzip bomb): no header there has a wire length
            if not data[q + WIRELEN_AT:q + m - 1 + WIRELEN_AT + 4].any():
                q += m
                continue
            c = np.arange(q, q + m, dtype=np.int64)
            ok, cl, ts = self._pcap_plausible(data, c)
            if self._anchor is not None:
                ok &= (ts >= self._anchor - RESYNC_EARLIER_NS) | ((c == damage) & jump)
            idx = np.flatnonzero(ok)
            ok[idx] = self._link_plausible(data, c[idx], cl[idx])
            c, cl, ts = c[ok], cl[ok], ts[ok]
            if len(c):
                decided = first_decided(c, *self._pcap_chain(data, c, cl, ts, eof,
                                                              c < damage))
                if decided:
                    return decided
            q += m
        return (n if eof else q), False, 0

    def _pcap_chain(self, data: np.ndarray, c: np.ndarray, cl: np.ndarray, ts: np.ndarray,
                    eof: bool, whole: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For candidate record starts `c` (plausible headers, captured lengths `cl`, times
        `ts`): status 1 = the next RESYNC_CHAIN - 1 headers (RESYNC_CHAIN_FAR - 1 for a
        candidate far from the anchor) are plausible too with times in order (or the records
        end exactly at EOF: see at_eof), 2 = undecided until more data is read
        (`need` bytes from c), 0 = rejected."""
        n = len(data)
        far = ((ts > self._anchor + NS_WINDOW) | (ts < self._anchor - NS_WINDOW)
               if self._anchor is not None else np.zeros(len(c), bool))
        want = np.where(far, RESYNC_CHAIN_FAR, RESYNC_CHAIN) - 1
        # records ending exactly at the end of the file vouch for themselves, but a candidate
        # far after the anchor needs RESYNC_CHAIN of them, and one before the damage a
        # second record whose time checks its own
        at_eof = np.where(far, RESYNC_CHAIN, np.where(whole, 2, 1))
        status = np.zeros(len(c), np.int8)
        need = np.zeros(len(c), np.int64)
        undecided = np.ones(len(c), bool)
        p, length, last = c, cl, ts.copy()
        for step in range(RESYNC_CHAIN_FAR - 1):
            enough = undecided & (want <= step)
            status[enough] = 1
            undecided &= ~enough
            end = p + HEADER + length  # end of this record = start of the next header
            done = undecided & (end == n) & eof & (step + 1 >= at_eof)
            status[done] = 1
            undecided &= ~done
            short = undecided & (end + HEADER > n)
            if not eof:
                status[short] = 2
                need[short] = end[short] + HEADER - c[short]
            undecided &= ~short
            idx = np.flatnonzero(undecided)
            if not len(idx):
                break
            ok, nxt, t = self._pcap_plausible(data, end[idx])
            ok &= ((t >= last[idx] - RESYNC_EARLIER_NS)
                   & (t <= last[idx] + NS_WINDOW))
            undecided[idx[~ok]] = False
            length = np.zeros(len(c), np.int64)
            length[idx] = nxt
            last = last.copy()
            last[idx] = np.maximum(last[idx], t)
            p = end
        status[undecided] = 1
        return status, need
