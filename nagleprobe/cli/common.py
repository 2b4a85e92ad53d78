"""What the commands share: options, finding the captures, the terminal's width, and
every failure as one line and an exit status."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from ..errors import CaptureError, ExitStatus, OutputRefused, TargetError, WriteFailed, printable
from ..output import STDOUT, discard_stdout
from ..read import URL_TIMEOUT_S

URL_TIMEOUT_OPTION = click.option(
    "--url-timeout", type=click.FloatRange(min=0, min_open=True), default=URL_TIMEOUT_S,
    show_default=True, metavar="SECONDS",
    help="Longest wait for an http(s) server: to connect, for its answer, for more of the "
         "capture; then that capture is unreadable (exit 3).")


DEBUG_OPTION = click.option("--debug", is_flag=True, help="Show a traceback on errors.")


def host_option(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
                ) -> tuple[str, ...]:
    """The --host values as networks; a bad one is click's usage error."""
    if not value:  # (no import of selection when no host is given)
        return value
    from ..errors import BudgetError
    from ..selection import parse_host

    try:
        return tuple(parse_host(v) for v in value)
    except BudgetError as e:
        raise click.BadParameter(str(e)) from None


PORT_SELECTION = click.option(
    "--port", "-p", "ports", multiple=True, type=click.IntRange(1, 65535), metavar="P",
    help="Report only flows with an endpoint on this port (repeatable).")
HOST_SELECTION = click.option(
    "--host", "hosts", multiple=True, callback=host_option, metavar="H",
    help="Report only flows with an endpoint at this address or in this network, e.g. "
         "10.0.0.0/8 (repeatable).")


def capture_set(args: tuple[str, ...]) -> list[str]:
    """The files CAPTURE... names (directories and glob patterns expanded); a usage error
    (exit 2) for an argument that names none, or standard input among other files."""
    from ..fileset import capture_paths

    notes: list[str] = []
    try:
        paths = capture_paths(args, notes)
    except TargetError as e:
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.USAGE)
    print_notes(notes)
    return paths


def print_notes(notes: list[str]) -> None:
    """What finding the captures left out (a file under a second name, a directory gone),
    on standard error."""
    for note in notes:
        click.echo(f"nagleprobe: note: {note}", err=True)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def text_width() -> int:
    """The terminal's width when standard output is one, else the report's default (80)."""
    import shutil

    from ..text_report import TEXT_WIDTH

    if not stdout_is_terminal():
        return TEXT_WIDTH
    return max(40, shutil.get_terminal_size((TEXT_WIDTH, 24)).columns)


def output_failed(e: WriteFailed) -> ExitStatus:
    """Say that an output could not be written; its exit status."""
    if e.name == STDOUT:
        discard_stdout()  # what is still buffered for it must not fail again at exit
    click.echo(f"nagleprobe: error: {e}", err=True)
    return ExitStatus.OUTPUT_FAILED


@contextmanager
def one_line_errors(debug: bool, doing: str, capture: str,
                    usage: dict[type[Exception], Callable[[Exception], str]]) -> Iterator[None]:
    """Every failure as one line and an exit status: an unreadable capture 3, a refused
    output path and the `usage` errors (each with its message) 2, an output that could not
    be written 7, Ctrl-C 130, a closed standard output click's quiet exit, anything else an
    internal error 4 (with --debug, a traceback)."""
    try:
        yield
    except CaptureError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.BAD_CAPTURE)
    except OutputRefused as e:
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.USAGE)
    except WriteFailed as e:
        if debug:
            traceback.print_exc()
        sys.exit(output_failed(e))
    except KeyboardInterrupt:
        sys.exit(ExitStatus.INTERRUPTED)
    except BrokenPipeError:
        raise
    except Exception as e:
        message = next((m for kind, m in usage.items() if isinstance(e, kind)), None)
        if message is not None:
            if debug:
                traceback.print_exc()
            click.echo(f"nagleprobe: error: {message(e)}", err=True)
            sys.exit(ExitStatus.USAGE)
        if debug:
            raise
        click.echo(f"nagleprobe: internal error while {doing} {printable(capture)}: "
                   f"{type(e).__name__}: {e} (rerun with --debug for a traceback)", err=True)
        sys.exit(ExitStatus.INTERNAL)
