"""Errors a user can cause, and the exit statuses the CLI maps them to."""

from __future__ import annotations

import enum
import unicodedata


class ExitStatus(enum.IntEnum):
    """Process exit statuses of the `nagleprobe` command (documented in docs/cli.md)."""

    OK = 0  # analysed; with `check`: within budget
    STALLS_FOUND = 1  # `check`: a capture is over the stall budget
    USAGE = 2  # bad command line (click's own status)
    BAD_CAPTURE = 3  # unreadable, cut before any packet, unsupported; --strict: any damage
    INTERNAL = 4  # a bug in nagleprobe
    CANNOT_CAPTURE = 5  # `record`: not permitted (not root), no tcpdump, interface, output file
    EMPTY = 6  # `check`: a capture with no TCP flow to check (after selection); --allow-empty
    OUTPUT_FAILED = 7  # writing standard output or an output file failed (disk full, I/O error)
    UNRESOLVED = 8  # `check`: time stamps too coarse to show a delayed-ACK stall (10 ms or more)
    COMMAND_NOT_FOUND = 127  # `record`: the command to run does not exist (the shell's status)
    INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as the shell reports it


_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


class BudgetError(ValueError):
    """A budget or selection setting that makes no sense; the message names where it came
    from."""


def _noncharacter(o: int) -> bool:
    """Whether code point `o` is one of Unicode's 66 noncharacters (U+FDD0..U+FDEF and the
    last two of every plane): reserved for a program's internal use, never text."""
    return 0xFDD0 <= o <= 0xFDEF or (o & 0xFFFE) == 0xFFFE


def printable(text: str) -> str:
    """`text` (a file name, or anything read from a capture) safe to print in any output:
    every character that could end a line, drive a terminal or a CI log (control
    characters, line and paragraph separators, bidirectional overrides), cannot be written
    as UTF-8 (the lone surrogates that stand for the undecodable bytes of a non-UTF-8 file
    name) or is no text (noncharacters) becomes a backslash escape: \\xNN (the byte, for
    those surrogates), \\uNNNN or \\UNNNNNNNN. That covers every character XML 1.0
    forbids (C0 controls, surrogates, U+FFFE, U+FFFF) and those it and HTML discourage (C1
    controls, the other noncharacters), so the result is well-formed in XML and HTML
    documents too. Other text is returned unchanged."""
    if text.isprintable() and text.isascii():
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # surrogateescape: the original byte
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0:
            out.append(f"\\x{o:02x}")
        elif ch in _BIDI or unicodedata.category(ch) in ("Cs", "Zl", "Zp") or _noncharacter(o):
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)


def printable_lines(text: str) -> str:
    """`printable`, line by line: the line feeds kept (a multi-line JUnit message), every
    other character as `printable` escapes it."""
    return "\n".join(printable(line) for line in text.split("\n"))


def utf8_safe(text: str) -> str:
    """`text` with the lone surrogates of an undecodable file name as \\xNN escapes, so that
    it can be written as UTF-8 (JSON keeps its own escapes for everything else)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
                       else f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c
                       for c in text)


class OutputRefused(Exception):
    """An output path that must not or cannot be written (one of the inputs, a directory, a
    missing directory): a usage error, found before anything is written; the message names
    the path."""


class WriteFailed(Exception):
    """Writing an output failed once it was open (disk full, I/O error, a FIFO's reader gone):
    the environment's fault, neither the user's nor the capture's. `name` is the path, or
    "standard output"."""

    def __init__(self, name: str, error: OSError, what: str = "") -> None:
        self.name = name
        self.error = error
        super().__init__(f"{printable(name)}: cannot write{' ' + what if what else ''}: "
                         f"{error.strerror or error}")


class CaptureError(Exception):
    """A capture that cannot be read; the message names the file, the problem and where."""

    def __init__(self, path: str, problem: str, where: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.where = where
        text = f"{printable(path)}: {printable(problem)}"
        if where:
            text += f" ({where})"
        super().__init__(text)


class TargetError(CaptureError):
    """An argument that names no capture: a directory without capture files, a pattern that
    matches nothing, or standard input among other files (a usage error on the command
    line)."""
