"""HTTP/2 frames (RFC 9113), for `messages.recognise`: which frames a stall's cut separated.

A stream of frames, the client's optionally opened by the 24-byte connection preface: each a
9-byte header (3-byte payload length, type, flags, reserved bit + 31-bit stream id) and its
payload. The frames of one stream on both sides of the cut (HEADERS then its DATA, DATA in
pieces) are one request or response flushed in several writes: flush once ("coalesce").
Frames of different streams or of the connection (SETTINGS, PING...) are independent.
"""

from __future__ import annotations

import re

from .framing import COALESCE, NODELAY, Message, Unit, within

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_FRAME = 1 << 14  # SETTINGS_MAX_FRAME_SIZE's initial value; larger needs the peer's consent
# type: (name, the flags it defines, its payload length or None, its stream: 0, 1 (not 0), None)
TYPES = {0: ("DATA", 0x09, None, 1), 1: ("HEADERS", 0x2D, None, 1), 2: ("PRIORITY", 0, 5, 1),
         3: ("RST_STREAM", 0, 4, 1), 4: ("SETTINGS", 0x01, None, 0),
         5: ("PUSH_PROMISE", 0x0C, None, 1), 6: ("PING", 0x01, 8, 0), 7: ("GOAWAY", 0, None, 0),
         8: ("WINDOW_UPDATE", 0, 4, None), 9: ("CONTINUATION", 0x04, None, 1)}
_STREAM = re.compile(r" of stream (\d+)$")


def walk(data: bytes) -> list[Unit] | None:
    """The frames of `data` (the last may run past its end), or None where a header breaks
    the rules of its type; two frames at least, or the preface and one."""
    units, at = [], 0
    if data.startswith(PREFACE):
        units.append(Unit(0, len(PREFACE), len(PREFACE), "HTTP/2 connection preface"))
        at = len(PREFACE)
    while at + 9 <= len(data):
        n, kind, flags = int.from_bytes(data[at:at + 3], "big"), data[at + 3], data[at + 4]
        stream = int.from_bytes(data[at + 5:at + 9], "big")
        if kind not in TYPES or not _header_ok(kind, flags, n, stream):
            return None
        name = f"HTTP/2 {TYPES[kind][0]} frame" + (f" of stream {stream}" if stream else "")
        units.append(Unit(at, at + 9, at + 9 + n, name))
        at += 9 + n
    return units if len(units) >= 2 else None


def _header_ok(kind: int, flags: int, n: int, stream: int) -> bool:
    """A frame header as RFC 9113 section 6 allows it: defined flags only, the payload length
    of its type, the stream it belongs on, the reserved bit unset."""
    _, defined, length, on = TYPES[kind]
    if flags & ~defined or n > MAX_FRAME or stream >> 31 or (length is not None and n != length):
        return False
    if kind == 4 and (n % 6 or (flags and n)):  # SETTINGS: 6-byte settings; an ACK is empty
        return False
    return on is None or (stream != 0) == bool(on)


def say(before: list[Unit], after: list[Unit], inside: Unit | None,
        cut: int) -> Message | None:
    """Frames of one stream flushed apart: coalesce; else independent frames: TCP_NODELAY."""
    if inside is not None:
        return within("http/2", inside, cut, "frame")
    both = {_stream(u) for u in before} & {_stream(u) for u in after} - {0}
    if both:  # one stream's frames on both sides: its HEADERS (else its last frame) first
        mine = [u for u in before if _stream(u) in both]
        last = next((u for u in mine if _kind(u) == "HEADERS"), mine[-1])
        first = next(u for u in after if _stream(u) == _stream(last))
        return Message("http/2", _frames(after), _frames(before), f"{_kind(last)}/{_kind(first)}",
                       f"the {_size(last)}-byte {_kind(last)} frame and the {_size(first)}-byte "
                       f"{_kind(first)} frame of stream {_stream(last)} were flushed separately: "
                       "flush once per request (or response)", COALESCE)
    return Message("http/2", _frames(after), _frames(before), "frame/frame",
                   f"independent HTTP/2 frames ({_frames(before)}, then {_frames(after)}) "
                   "waited for each other's ACK: set TCP_NODELAY", NODELAY)


def _frames(units: list[Unit]) -> str:
    """'the 39-byte DATA frame of stream 3', '2 DATA frames of stream 3 (39 B, 9 B)',
    '2 frames of stream 3 (HEADERS 15 B, WINDOW_UPDATE 13 B)' or '3 frames (SETTINGS 9 B, ...)'."""
    short = units[0].name.removeprefix("HTTP/2 ")
    if short == "connection preface" and len(units) > 1:  # the preface is no frame
        return "the connection preface and " + _frames(units[1:])
    if len(units) == 1:
        return f"the {_size(units[0])}-byte {short}"
    streams = {_stream(u) for u in units}
    one_kind = len({_kind(u) for u in units}) == 1
    whose = f" of stream {streams.pop()}" if len(streams) == 1 and 0 not in streams else ""
    what = f"{_kind(units[0])} frames" if one_kind else "frames"
    sizes = ", ".join(f"{_size(u)} B" if one_kind else f"{_kind(u)} {_size(u)} B"
                      for u in units[:4])
    return f"{len(units)} {what}{whose} ({sizes}" + (", ...)" if len(units) > 4 else ")")


def _kind(u: Unit) -> str:
    """'HEADERS' of 'HTTP/2 HEADERS frame of stream 3'."""
    return u.name.split()[1] if u.name.startswith("HTTP/2 ") else u.name


def _size(u: Unit) -> int:
    return u.end - u.start


def _stream(u: Unit) -> int:
    """The stream a frame belongs to, 0 for the connection's frames and the preface."""
    m = _STREAM.search(u.name)
    return int(m.group(1)) if m else 0
