"""The terms messages are named in: a protocol's units and the message a stall held.

Shared by `messages` and the protocols kept in modules of their own: a walker cuts one
direction's bytes into `Unit`s, a `Say` names the cut as a `Message`; `within` and `count`
are the sentences several protocols share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

NOT_CAPTURED = "payload not captured"  # said where the capture holds none of the payload
COALESCE, NODELAY = "coalesce", "nodelay"


@dataclass(frozen=True)
class Message:
    """What a stall's outstanding and held bytes were, and the fix in the protocol's terms."""

    protocol: str  # "tls", "http/1.1", "http/2", "dns", "postgresql", "smtp", "mqtt"
    held: str  # what the held segment carried, e.g. "the 36-byte DNS query"
    before: str  # what was outstanding, e.g. "its 2-byte length prefix"
    split: str  # the boundary the writes fell on, e.g. "prefix/body"
    fix: str  # the sentence an engineer acts on
    advice: str  # COALESCE or NODELAY


@dataclass(frozen=True)
class Unit:
    """One protocol message in a stream: bytes [start, end), its header ending at `body`."""

    start: int
    body: int
    end: int
    name: str  # e.g. "TLS application-data record", "DNS query", "response"


Walker = Callable[[bytes], "list[Unit] | None"]  # a stream's units from offset 0, or None
Say = Callable[[list[Unit], list[Unit], "Unit | None", int], "Message | None"]


def within(protocol: str, inside: Unit, cut: int, what: str) -> Message:
    """The cut fell inside one message (`what`: "record", "packet"...): one write each."""
    size = inside.end - inside.start
    return Message(protocol, f"the last {inside.end - cut} bytes of the {size}-byte "
                   f"{inside.name}", f"its first {cut - inside.start} bytes", f"within a {what}",
                   f"the {inside.name} ({size} B) was written in pieces: write each {what} in "
                   "one call", COALESCE)


def count(units: list[Unit], drop: str = "") -> str:
    """'the 214-byte TLS handshake record' or '2 TLS application-data records (214 B, 46 B)'
    (`drop`: a prefix of the names left out, e.g. "PostgreSQL ")."""
    if len(units) == 1:
        return f"the {units[0].end - units[0].start}-byte {units[0].name.removeprefix(drop)}"
    names = {u.name.removeprefix(drop) for u in units}
    one = len(names) == 1
    sizes = ", ".join(f"{u.end - u.start} B" if one else f"{u.name.removeprefix(drop)} "
                      f"{u.end - u.start} B" for u in units[:4])
    more = ", ..." if len(units) > 4 else ""
    return f"{len(units)} {names.pop() + 's' if one else 'messages'} ({sizes}{more})"
