"""Name the message a stall held back, in the application protocol's own terms.

Pure functions on bytes. `recognise(outstanding, held, earlier)` takes one direction's TCP
payload around a stall: `outstanding` the segment left unacknowledged (S1), `held` the
segment Nagle's algorithm held until the peer's delayed ACK (S2), and `earlier` what the
same direction sent just before S1 (oldest first; it may start in the middle of a message).
It walks the protocol's framing from a message boundary, at the start of S1 or else of
`earlier`, to the cut between S1 and S2, and says which messages (or which parts of one)
the cut separated; None when no protocol known here frames the bytes consistently.

The advice follows the boundary: parts of one message written apart (a length prefix and
its body, headers and body, a TLS record's header and body) call for one write per message
("coalesce"); whole independent messages written one after another call for TCP_NODELAY
("nodelay"). Protocols: TLS records, HTTP/1.x, HTTP/2 (`http2`), DNS over TCP, PostgreSQL
(the client's messages), SMTP, MQTT.
"""

from __future__ import annotations

import re

from . import http2
from .framing import COALESCE, NODELAY, NOT_CAPTURED, Message, Say, Unit, Walker, count, within

__all__ = ["COALESCE", "NODELAY", "NOT_CAPTURED", "Message", "recognise"]


def recognise(outstanding: bytes, held: bytes, earlier: bytes = b"") -> Message | None:
    """The messages the cut between `outstanding` and `held` separated, or None."""
    if not outstanding or not held:
        return None
    for _, walk, say in _PROTOCOLS:
        for start in (len(earlier), 0) if earlier else (0,):
            stream = (earlier + outstanding + held)[start:]
            units = walk(stream)
            if not units:
                continue
            cut = len(earlier) + len(outstanding) - start
            before, after, inside = _locate(units, len(outstanding), cut)
            if inside is None and not (before and after):  # the cut is on no boundary seen
                continue
            m = say(before, after, inside, cut)
            if m is not None:
                return m
    return None


def _locate(units: list[Unit], s1: int, cut: int) -> tuple[list[Unit], list[Unit], Unit | None]:
    """(units wholly in S1 before the cut, units starting at or after the cut, the unit
    the cut falls inside or None); `s1` is how many bytes before the cut S1 holds."""
    first = cut - s1
    before = [u for u in units if u.start >= first and u.end <= cut]
    after = [u for u in units if u.start >= cut]
    inside = next((u for u in units if u.start < cut < u.end), None)
    return before, after, inside


# ---------------------------------------------------------------------- TLS
TLS_TYPES = {20: "change-cipher-spec", 21: "alert", 22: "handshake", 23: "application-data",
             24: "heartbeat"}
TLS_MAX_RECORD = (1 << 14) + 2048  # RFC 8446: ciphertext at most 2^14 + 256 (1.2: + 2048)


def _tls_units(data: bytes) -> list[Unit] | None:
    units, at = [], 0
    while at + 5 <= len(data):
        kind, major, minor, n = data[at], data[at + 1], data[at + 2], int.from_bytes(
            data[at + 3:at + 5], "big")
        if kind not in TLS_TYPES or major != 3 or minor > 4 or not 0 < n <= TLS_MAX_RECORD:
            return units if len(units) >= 2 else None
        units.append(Unit(at, at + 5, at + 5 + n, f"TLS {TLS_TYPES[kind]} record"))
        at += 5 + n
    return units or None


def _tls_say(before: list[Unit], after: list[Unit], inside: Unit | None,
             cut: int) -> Message | None:
    if inside is not None:
        size = inside.end - inside.start
        if cut == inside.body:
            return Message("tls", f"the {size - 5}-byte body of a {inside.name}",
                           "its 5-byte record header", "header/body",
                           f"the {inside.name}'s 5-byte header and its {size - 5}-byte body "
                           "were written apart: write each record in one call", COALESCE)
        return within("tls", inside, cut, "record")
    return Message("tls", count(after), count(before), "record/record",
                   f"{count(before)} and {count(after)} went out in separate writes (each "
                   "write to a TLS socket is its own record): write what one message needs "
                   "in one call", COALESCE)


# ---------------------------------------------------------------------- HTTP/1.x
_REQUEST = re.compile(rb"([A-Z]{3,10}) \S+ HTTP/1\.[01]\r\n")
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})[^\r\n]*\r\n")
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r\n]*chunked", re.IGNORECASE)
_EXPECT = re.compile(rb"\r\nexpect:[ \t]*100-continue", re.IGNORECASE)


def _http_units(data: bytes) -> list[Unit] | None:
    units: list[Unit] = []
    at = 0
    while at < len(data):
        req, status = _REQUEST.match(data, at), _STATUS.match(data, at)
        if not (req or status):
            break
        name = (f"{req.group(1).decode()} request" if req
                else f"{status.group(1).decode()} response")
        head_end = data.find(b"\r\n\r\n", at)
        if head_end < 0:  # headers cut by the end of what is known
            units.append(Unit(at, len(data), len(data), name))
            break
        body = head_end + 4
        head = data[at:body]
        if _EXPECT.search(head):
            name += " (Expect: 100-continue)"
        length = _LENGTH.search(head)
        if _CHUNKED.search(head):
            end = _chunks_end(data, body)
        elif length:
            end = body + int(length.group(1))
        else:
            bodiless = req or status.group(1)[:1] == b"1" or status.group(1) in (b"204", b"304")
            end = body if bodiless else len(data)  # a response ended by closing
        units.append(Unit(at, body, end, name))
        at = end
    return units or None


def _chunks_end(data: bytes, at: int) -> int:
    """Where a chunked body starting at `at` ends (past the data known: its end)."""
    while True:
        line = data.find(b"\r\n", at)
        if line < 0:
            return max(len(data), at + 1)
        try:
            n = int(data[at:line].split(b";")[0], 16)
        except ValueError:
            return max(len(data), at + 1)
        if n == 0:
            trailer = data.find(b"\r\n\r\n", line)
            return trailer + 4 if trailer >= 0 else max(len(data), line + 2)
        at = line + 2 + n + 2


def _http_say(before: list[Unit], after: list[Unit], inside: Unit | None,
              cut: int) -> Message | None:
    if inside is not None:
        kind = "request" if "request" in inside.name else "response"
        heads, body = inside.body - inside.start, inside.end - inside.body
        if cut == inside.body:
            return Message("http/1.1", f"the {body}-byte body of the {inside.name}",
                           f"the {kind} headers ({heads} B)", "headers/body",
                           f"the {kind} headers ({heads} B) and body ({body} B) were written "
                           "separately: write them in one call", COALESCE)
        if cut > inside.body:
            return Message("http/1.1", f"the last {inside.end - cut} bytes of the body of the "
                           f"{inside.name}", f"the {kind} headers and {cut - inside.body} bytes"
                           " of its body", "body/body", f"the {kind} body was written in "
                           "pieces: write the whole body in one call", COALESCE)
        return Message("http/1.1", f"the rest of the {inside.name}'s headers",
                       f"the first {cut - inside.start} bytes of its headers", "headers/headers",
                       f"the {kind} headers were written in pieces: write them in one call",
                       COALESCE)
    return Message("http/1.1", f"the next {after[0].name} ({after[0].end - after[0].start} B)",
                   count(before), "message/message", "whole HTTP messages were written one "
                   "after another and each waited for the previous one's ACK: set TCP_NODELAY "
                   "(or write pipelined messages together)", NODELAY)


# ---------------------------------------------------------------------- DNS over TCP
def _dns_units(data: bytes) -> list[Unit] | None:
    units, at = [], 0
    while at + 2 <= len(data):
        n = int.from_bytes(data[at:at + 2], "big")
        msg = data[at + 2:at + 2 + n]
        cut_short = len(msg) < n  # the last message, cut by the end of what is known
        if n < 12 or not (_dns_header_ok(msg) or (cut_short and units and len(msg) < 12)):
            return None
        qr = "message" if len(msg) < 3 else "response" if msg[2] & 0x80 else "query"
        units.append(Unit(at, at + 2, at + 2 + n, f"DNS {qr}"))
        at += 2 + n
    return units or None


def _dns_header_ok(msg: bytes) -> bool:
    """A DNS header and its first question's name (as far as `msg` goes) are plausible."""
    if len(msg) < 12:
        return False
    qd, an, ns, ar = (int.from_bytes(msg[i:i + 2], "big") for i in (4, 6, 8, 10))
    if (msg[2] >> 3) & 0x0F not in (0, 1, 2, 4, 5) or msg[3] & 0x40 or not 1 <= qd <= 4:
        return False  # opcode, the Z bit, a question
    at, total = 12, 0
    while at < len(msg) and msg[at] and max(an, ns, ar) <= 4096:
        total += msg[at] + 1  # labels of at most 63 bytes, names of at most 255
        if msg[at] > 63 or total > 255:
            return False
        at += 1 + msg[at]
    return max(an, ns, ar) <= 4096


def _dns_say(before: list[Unit], after: list[Unit], inside: Unit | None,
             cut: int) -> Message | None:
    if inside is not None:
        size = inside.end - inside.body
        if cut == inside.body:
            return Message("dns", f"the {size}-byte {inside.name}", "its 2-byte length prefix",
                           "prefix/body", f"the 2-byte DNS length prefix and the {size}-byte "
                           f"{inside.name[4:]} were written in two writes: write both in one "
                           "call", COALESCE)
        return Message("dns", f"the last {inside.end - cut} bytes of a {size}-byte "
                       f"{inside.name}", f"its length prefix and first {cut - inside.body} "
                       "bytes", "within a message", f"a {size}-byte {inside.name} was written "
                       "in pieces: write the length prefix and the message in one call",
                       COALESCE)
    return Message("dns", count(after), count(before), "message/message",
                   "independent DNS messages waited for each other's ACK: set TCP_NODELAY "
                   "(or send pipelined queries in one write)", NODELAY)


# ---------------------------------------------------------------------- PostgreSQL
PG_FRONTEND = {"B": "Bind", "C": "Close", "D": "Describe", "E": "Execute", "F": "FunctionCall",
               "H": "Flush", "P": "Parse", "Q": "Query", "S": "Sync", "X": "Terminate",
               "d": "CopyData", "c": "CopyDone", "f": "CopyFail", "p": "password"}
PG_FIXED = {"H": 4, "S": 4, "c": 4, "X": 4}  # frontend messages of one length (Flush, Sync...)
PG_MAX = 1 << 30


def _pg_units(data: bytes) -> list[Unit] | None:
    """The client's messages: a type byte and a 4-byte length each, one of them a type only
    the client sends (Parse, Bind, Query...); the startup message is not framed here."""
    units, at = [], 0
    while at + 5 <= len(data):
        kind, n = chr(data[at]), int.from_bytes(data[at + 1:at + 5], "big")
        if kind not in PG_FRONTEND or not 4 <= n < PG_MAX or PG_FIXED.get(kind, n) != n:
            return None
        units.append(Unit(at, at + 5, at + 1 + n, f"PostgreSQL {PG_FRONTEND[kind]} message"))
        at += 1 + n
    client_only = {"Bind", "FunctionCall", "Parse", "Query", "Terminate", "password"}
    if len(units) < 2 or not any(_pg_kind(u) in client_only for u in units):
        return None
    return units


def _pg_say(before: list[Unit], after: list[Unit], inside: Unit | None,
            cut: int) -> Message | None:
    if inside is not None:
        return within("postgresql", inside, cut, "message")
    kinds = ", ".join(_pg_kind(u) for u in after[:6]) + (", ..." if len(after) > 6 else "")
    held_bytes = sum(u.end - u.start for u in after)
    held = (f"the {kinds} messages ({held_bytes} B)" if len(after) > 1
            else count(after, "PostgreSQL "))
    return Message("postgresql", held, count(before, "PostgreSQL "), "message/message",
                   f"the messages of one query ({count(before, 'PostgreSQL ')}, then "
                   f"{kinds}) were sent in separate writes: write the whole query, through "
                   "its Sync, in one call", COALESCE)


def _pg_kind(u: Unit) -> str:
    """'Bind' of 'PostgreSQL Bind message'."""
    return u.name.removeprefix("PostgreSQL ").removesuffix(" message")


# ---------------------------------------------------------------------- SMTP
_SMTP_VERBS = (b"EHLO", b"HELO", b"MAIL", b"RCPT", b"DATA", b"BDAT", b"RSET", b"NOOP", b"QUIT",
               b"VRFY", b"STARTTLS", b"AUTH")
_BDAT = re.compile(rb"BDAT (\d{1,9})( LAST)?\r\n", re.IGNORECASE)


def _smtp_units(data: bytes) -> list[Unit] | None:
    """Client command lines, each BDAT line followed by its chunk (RFC 3030)."""
    units: list[Unit] = []
    at = 0
    while at < len(data):
        if not data[at:at + 8].upper().startswith(_SMTP_VERBS):
            return units if units and at >= len(data) else None
        line = data.find(b"\r\n", at)
        end = len(data) if line < 0 else line + 2
        verb = data[at:at + 4].upper().decode()
        units.append(Unit(at, end, end, f"SMTP {verb} command line"))
        bdat = _BDAT.match(data, at)
        if bdat:
            n = int(bdat.group(1))
            units.append(Unit(end, end, end + n, "SMTP BDAT chunk"))
            end += n
        at = end
    return units or None


def _smtp_say(before: list[Unit], after: list[Unit], inside: Unit | None,
              cut: int) -> Message | None:
    if inside is not None:
        return None
    last, first = before[-1], after[0]
    if first.name == "SMTP BDAT chunk":
        n = first.end - first.start
        return Message("smtp", f"its {n}-byte BDAT chunk", f"the BDAT command line "
                       f"({last.end - last.start} B)", "command/data", f"each BDAT command "
                       f"line and its {n}-byte chunk were written separately: write them in "
                       "one call", COALESCE)
    return Message("smtp", f"the next {first.name[5:]} ({first.end - first.start} B)",
                   count(before), "command/command", "SMTP commands waited for each "
                   "other's ACK: set TCP_NODELAY (or send pipelined commands in one write)",
                   NODELAY)


# ---------------------------------------------------------------------- MQTT
MQTT_TYPES = ("", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
              "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP",
              "DISCONNECT", "AUTH")


def _mqtt_units(data: bytes) -> list[Unit] | None:
    """Control packets: a type/flags byte, a 1-4 byte remaining length, the rest."""
    units, at = [], 0
    while at < len(data):
        kind, flags = data[at] >> 4, data[at] & 0x0F
        if kind == 0 or (kind in (6, 8, 10) and flags != 2) or (
                kind not in (3, 6, 8, 10) and flags) or (kind == 3 and flags & 6 == 6):
            return None
        n, shift, i = 0, 0, at + 1
        while i < len(data) and i < at + 5:
            n |= (data[i] & 0x7F) << shift
            shift += 7
            i += 1
            if not data[i - 1] & 0x80:
                break
        else:
            if i >= len(data):  # the length itself cut by the end of what is known
                break
            return None
        if not _mqtt_body_ok(kind, flags, n, data[i:i + 2]):
            return None
        units.append(Unit(at, i, i + n, f"MQTT {MQTT_TYPES[kind]}"))
        at = i + n
    # its framing fits many byte strings: only packets that end exactly where the data does
    return units if len(units) >= 2 and at == len(data) else None


def _mqtt_body_ok(kind: int, flags: int, n: int, first: bytes) -> bool:
    """A PUBLISH's topic (and packet id) fit in it; acknowledgements carry a packet id;
    PINGREQ and PINGRESP are empty."""
    if kind == 3 and len(first) == 2:
        return int.from_bytes(first, "big") + 2 + (2 if flags & 6 else 0) <= n
    return n >= 2 if kind in (4, 5, 6, 7, 9, 11) else n == 0 if kind in (12, 13) else True


def _mqtt_say(before: list[Unit], after: list[Unit], inside: Unit | None,
              cut: int) -> Message | None:
    if inside is not None:
        return within("mqtt", inside, cut, "packet")
    return Message("mqtt", count(after), count(before), "packet/packet",
                   f"independent MQTT packets ({count(before)}, then {count(after)}) waited "
                   "for each other's ACK: set TCP_NODELAY", NODELAY)


_PROTOCOLS: list[tuple[str, Walker, Say]] = [
    ("tls", _tls_units, _tls_say),
    ("http/1.1", _http_units, _http_say),
    ("dns", _dns_units, _dns_say),
    ("postgresql", _pg_units, _pg_say),
    ("smtp", _smtp_units, _smtp_say),
    ("http/2", http2.walk, http2.say),
    ("mqtt", _mqtt_units, _mqtt_say),  # last: its framing fits the most byte strings
]

