"""Errors a user can cause, and the exit statuses the CLI maps them to."""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """Process exit statuses of the `nagleprobe` command (documented in the README)."""

    OK = 0  # analysed; with `check`: within budget
    STALLS_FOUND = 1  # `check`: a capture is over the stall budget
    USAGE = 2  # bad command line (click's own status)
    BAD_CAPTURE = 3  # unreadable, cut before any packet, unsupported; --strict: any damage
    INTERNAL = 4  # a bug in nagleprobe
    CANNOT_CAPTURE = 5  # `record`: not permitted (not root), no tcpdump, interface, output file
    EMPTY = 6  # `check`: a capture with no TCP flow to check (after selection); --allow-empty
    COMMAND_NOT_FOUND = 127  # `record`: the command to run does not exist (the shell's status)


class CaptureError(Exception):
    """A capture that cannot be read; the message names the file, the problem and where."""

    def __init__(self, path: str, problem: str, where: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.where = where
        text = f"{path}: {problem}"
        if where:
            text += f" ({where})"
        super().__init__(text)
