"""The `nagleprobe` command: a thin click layer over the library.

One module per command group, each command's body a few lines over the library:
`analyze_cmd` (analyze), `gate_cmd` (check, and record, which can run the gate),
`watch_cmd` (watch), `annotate_cmd` (annotate), `compare_cmd` (compare); `common` holds the options and the exit
handling they share. This module is the group and the console entry point.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from .. import __version__, _startup  # noqa: F401  (_startup: before numpy)
from ..errors import ExitStatus, WriteFailed
from ..output import STDOUT, discard_stdout
from .analyze_cmd import analyze
from .annotate_cmd import annotate
from .compare_cmd import compare
from .common import output_failed
from .gate_cmd import check, record
from .watch_cmd import watch

MAIN_HELP = ("Exit status: 0 ok (analysed; check: within budget), 1 over the stall budget "
             "(check), 2 usage error, 3 unreadable capture, 4 internal error, 5 capture not "
             "possible (record, watch -i), 6 no TCP flow to check (check), 7 output not written "
             "(disk full, I/O error), 8 time stamps too coarse to show a stall (check), "
             "127 command not found (record). Details: COMMAND --help.")


@click.group(epilog=MAIN_HELP)
@click.version_option(__version__, prog_name="nagleprobe")
def main() -> None:
    """Find Nagle / delayed-ACK stalls in tcpdump and Wireshark captures."""


for _command in (analyze, annotate, check, compare, record, watch):
    main.add_command(_command)


def run() -> None:
    """The console entry point: `main`, then out without tearing the interpreter down
    (freeing a finished analysis object by object is work nothing needs). Skipped only when
    nothing is left to finish: output flushed, no other thread that exit would wait for, no
    child process."""
    try:
        main()  # standalone mode: always ends in SystemExit, but for the OSError below
        code: object = 0
    except SystemExit as e:
        code = e.code
    except OSError as e:  # only click's own output (--help, --version) lets one out
        if not any(f.f_code is click.echo.__code__ for f, _ in traceback.walk_tb(e.__traceback__)):
            raise  # a bug, with its traceback
        code = output_failed(WriteFailed(STDOUT, e))
    left = _flush_stdout()
    if left is not None:
        code = left if left == ExitStatus.OUTPUT_FAILED else code or left
    if not (code is None or isinstance(code, int)) or not _nothing_left():
        raise SystemExit(code)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code or 0)


def _flush_stdout() -> int | None:
    """Flush standard output: None when all is written; else the exit status for output
    that could not be (OUTPUT_FAILED, said on standard error; 1, click's quiet status, when
    its reader closed it), and standard output then points at /dev/null."""
    try:
        sys.stdout.flush()
    except ValueError:  # closed: nothing left to write
        pass
    except BrokenPipeError:
        discard_stdout()
        return 1
    except OSError as e:
        return output_failed(WriteFailed(STDOUT, e))
    return None


def _nothing_left() -> bool:
    import threading

    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        return False
    mp = sys.modules.get("multiprocessing")
    return mp is None or not mp.active_children()
