"""The damage policy: what a damaged capture costs (skipped stretches, warnings, or with
`strict` a CaptureError) and the plausibility limits that decide where reading resumes."""

from __future__ import annotations

import numpy as np

from ..errors import CaptureError
from ..weirds import Weird
from .source import Gunzip

MAX_WARNINGS = 20  # listed one by one; more are summed up in a last warning
# A pcap record is read only if its header is plausible: fraction below one second, caplen
# <= the file's snap length (MAX_CAPLEN if it has none) and <= a wire length above zero, and
# a time not more than RESYNC_WINDOW_S before or after the latest record read so far (the
# anchor, which only records read move).  Anything else is damage: the records before it are
# kept and reading resumes where a chain of records says so: a candidate record header
# plausible in the same way (and wire length below RESYNC_MAX_WIRELEN, a plausible
# link-layer start, a time at most RESYNC_EARLIER_NS before the anchor) followed by
# RESYNC_CHAIN - 1 more plausible headers with times in order (as far back as that),
# or RESYNC_CHAIN_FAR of them when the candidate's time is more than RESYNC_WINDOW_S after
# the anchor (a legitimate gap in the capture is accepted that way, with no warning) or,
# for the record the walk stopped at alone, before it (a step of the clock back: see clock).
RESYNC_WINDOW_S = 86400
RESYNC_MAX_WIRELEN = 1 << 24
RESYNC_CHAIN = 3
RESYNC_CHAIN_FAR = 8
RESYNC_EARLIER_NS = 500_000_000  # how far back in time a resynchronised chain may go
# (records of `tcpdump -i any` are a little out of order): a header read a byte off has a
# time off by whole seconds (up to 255), or by years
RESYNC_BACK = 3  # a deletion of up to this many bytes inside the last record read: the next
                 # record's header starts up to this many bytes before where it claims
RESYNC_SPAN = 1 << 16  # candidate positions examined per numpy pass
NS_WINDOW = RESYNC_WINDOW_S * 1_000_000_000
# EtherTypes a resynchronised Ethernet record may start with (or an 802.3 length <= 1500)
ETHERTYPES = np.array([0x0800, 0x86DD, 0x8100, 0x88A8, 0x9100, 0x0806, 0x8035, 0x88CC,
                        0x8847, 0x8848, 0x8863, 0x8864, 0x888E, 0x22F0, 0x22EA, 0x88F7],
                       dtype=np.int64)


class DamagePolicy:
    """Recording damage (a part of CaptureReader)."""

    # ------------------------------------------------------------------ damage
    def _skip(self, reason: str, n: int) -> None:
        if n:
            self.info.skipped[reason] = self.info.skipped.get(reason, 0) + n

    def _warn(self, warning: Weird) -> None:
        if len(self.info.warnings) < MAX_WARNINGS:
            self.info.warnings.append(warning)
        else:
            self._unlisted += 1

    def _idb_problem(self, problem: str, where: str, consequence: str) -> None:
        """A flaw in an interface description: a warning (an error with strict), even before
        the first packet."""
        if self.strict:
            raise CaptureError(self.path, problem, where)
        self._warn(Weird("interface-flaw", f"{problem} ({where}); {consequence}"))

    def _damaged(self, code: str, problem: str, where: str, consequence: str) -> None:
        """Damage found (`code`: its kind, see `weirds`): an error before the first record
        (or when strict), else a warning."""
        if self._frames == 0 or self.strict:
            raise CaptureError(self.path, problem, where)
        self._warn(Weird(code, f"{problem} ({where}); {consequence}"))

    def _corrupt(self, problem: str, unit: str, number: int, at: int,
                 defer: bool = False) -> None:
        """A record/block with impossible lengths at file offset `at`: skipped, with the
        bytes up to the next valid one (the warning is written once that is known).  With
        `defer` (a pcap record whose time jumps far ahead: a gap in the capture or damage)
        it is damage only if reading does not resume at `at` itself."""
        where = f"{unit} {number} at byte {at}"
        if not defer:
            self._damage_found(problem, where, unit)
        self._damage = (problem, where, at, defer)

    def _damage_found(self, problem: str, where: str, unit: str) -> None:
        if self._frames == 0 or self.strict:
            raise CaptureError(self.path, problem, where)
        self._skip(f"corrupt-{unit}", 1)

    def _resynced(self, at: int, unit: str) -> None:
        problem, where, start, deferred = self._damage
        self._damage = None
        if deferred:
            if at == start:  # the records after the gap chain on: a real gap, not damage
                return
            self._damage_found(problem, where, unit)
        code = "corrupt-record" if unit == "record" else "corrupt-block"
        if at >= start:
            self._warn(Weird(code, f"{problem} ({where}); skipped {at - start} bytes to the "
                             f"next valid {unit} at byte {at}"))
        else:
            self._warn(Weird(code, f"{problem} ({where}); the next valid {unit} starts "
                             f"{start - at} bytes earlier, at byte {at}, inside the previous "
                             f"{unit} (bytes are missing from that one)"))

    def _finish(self, leftover: int, resync: bool, unit: str = "record",
                number: int | None = None) -> None:
        """End of input: report a corrupt stretch running to the end, a truncated last
        record or block, a truncated or corrupt gzip stream, a download the server cut
        short, and unlisted warnings."""
        gz = self._stream if isinstance(self._stream, Gunzip) else None
        gz_error = gz.error if gz else None
        done = f"analysed the {self._frames} complete packet records"
        if resync:
            problem, where, start, deferred = self._damage
            self._damage = None
            if deferred:
                self._damage_found(problem, where, unit)
            self._warn(Weird("corrupt-record" if unit == "record" else "corrupt-block",
                             f"{problem} ({where}); nothing valid after it: ignored the last "
                             f"{self._pos + leftover - start} bytes"))
        elif leftover:
            num = self._frames + 1 if number is None else number
            which = "the first" if self._frames == 0 else "a"
            inside = f"{unit} {num} at byte {self._pos}"
            if gz_error:  # the gzip stream broke inside this record
                self._damaged("corrupt-gzip", gz_error, f"{gz.error_where}, inside {inside}",
                              done)
                gz_error = None
            else:
                what = "gzip stream" if gz and gz.truncated else "file"
                self._damaged("truncated-capture",
                              f"truncated capture: the {what} ends inside {which} {unit}",
                              inside, done)
        elif gz and gz.truncated:
            self._damaged("truncated-capture", "truncated gzip stream: it ends early",
                          f"uncompressed byte {self._pos}", done)
        if gz_error:
            self._damaged("corrupt-gzip", gz_error, gz.error_where,
                          f"analysed the {self._frames} packet records before it")
        url = self._url
        if url is not None and url.cut_short:  # (also at a record's end: say it anyway)
            self._damaged("truncated-download", f"truncated download: {url.cut_short}",
                          f"byte {url.got} of the download", done)
        if self._unlisted:
            self.info.warnings.append(Weird("more-warnings", f"{self._unlisted} more "
                                            "warnings like these were not listed",
                                            self._unlisted))
            self._unlisted = 0
