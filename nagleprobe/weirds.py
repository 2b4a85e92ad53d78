"""Capture warnings as named, counted facts (as Zeek's weirds): every warning has a code
from `WEIRDS`, a count and its sentence.

A warning is a `Weird`: the sentence itself (a `str`, so the text, check and HTML reports
print it as it is), which also knows its `code` and `count`. The JSON document writes each
as {"code", "count", "text"} (`fact`), the notebook as a row of `Report.warnings`. Every
producer names its code (`Weird(code, text, count)`); the codes and their descriptions are defined
here only (the JSON schema and docs/json.md list the same, a test holds them to it).
"""

from __future__ import annotations

from typing import Any, Self

# code -> what it means; `count` is how many of it the warning stands for (packets,
# connections, SYNs or warnings as its text says; 1 for one event)
WEIRDS: dict[str, str] = {
    "coarse-time": "An interface's time stamps move in steps too coarse to show a "
                   "delayed-ACK stall (10 ms or more): finding no stall means nothing.",
    "clock-step-back": "The clock stepped back: the records from there on are analysed on "
                       "their own time base, joined to the one before.",
    "implausible-time": "A record's time is far from both its neighbours': it is skipped "
                        "(the first is named; capture.skipped counts them all).",
    "interface-flaw": "A flaw in a pcapng interface description: the option or value is "
                      "ignored.",
    "undescribed-interface": "A pcapng packet block names no interface described before it: "
                             "it and any later one like it are skipped.",
    "corrupt-record": "A pcap record with impossible lengths: skipped with the bytes up to "
                      "the next valid record.",
    "corrupt-block": "A pcapng block with impossible lengths: skipped with the bytes up to "
                     "the next valid block.",
    "truncated-capture": "The file or its gzip stream ends early (inside a record, or before "
                         "the end of the stream): the complete records are analysed.",
    "corrupt-gzip": "The gzip stream is corrupt: the records before the damage are analysed.",
    "truncated-download": "The server closed a download early: what arrived is analysed.",
    "more-warnings": "More warnings of the reader than are listed (the count says how many).",
    "file-left-out": "A file of a set could not be read: it is left out, the rest analysed.",
    "vantages-joined": "The files are captures of the same connections from several places: "
                       "the report is vantage 1's, the vantages section joins them.",
    "syn-seq-jump": "SYNs with a new initial sequence number that fit no connection on their "
                    "4-tuple: left out of the analysis (capture.skipped counts them).",
    "late-packet": "TCP packets that arrived more than the reorder window after their "
                   "connection closed: left out of it.",
    "late-syn": "Late packets that were SYNs older than their analysed connection's last "
                "packet: the streamed result differs from the whole file's.",
    "idle-flushed": "Connections idle longer than the idle time-out, analysed before they "
                    "closed.",
    "inexact-pieces": "Connections analysed in pieces whose result may differ from the "
                      "whole-connection analysis in the way the text names.",
    "late-in-pieces": "TCP packets of a connection analysed in pieces that arrived more than "
                      "the reorder window after later packets of it: left out of it.",
    "same-isn-reuse": "Connections that reuse the 4-tuple and initial sequence number of one "
                      "closed before them: analysed as one.",
    "relays-not-linked": "Too many data segments to link relays: no flow is linked to the "
                         "flow that fed it.",
}


class Weird(str):
    """A capture warning: its sentence, with its `code` (one of WEIRDS) and `count`."""

    code: str
    count: int

    def __new__(cls, code: str, text: str, count: int = 1) -> Self:
        """The warning `text`, of kind `code`, standing for `count` of it."""
        if code not in WEIRDS:
            raise ValueError(f"undocumented warning code {code!r} (see nagleprobe.weirds)")
        self = super().__new__(cls, text)
        self.code, self.count = code, int(count)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return Weird, (self.code, str(self), self.count)

    def retold(self, text: str) -> Weird:
        """The same fact in other words (a file set's warning prefixed with its file)."""
        return Weird(self.code, text, self.count)


def fact(w: Weird) -> dict[str, Any]:
    """A warning as the JSON document writes it: {"code", "count", "text"}."""
    return {"code": w.code, "count": w.count, "text": str(w)}
