"""The `nagleprobe` command: a thin layer over `nagleprobe.analyze`."""

from __future__ import annotations

import sys
import traceback

import click

from . import __version__
from .errors import CaptureError, ExitStatus
from .pipeline import analyze as run_analysis
from .progress import ProgressBar
from .stream import DEFAULT_GRACE_S

EXIT_HELP = ("Exit status: 0 analysed (stalls or not), 2 usage error, "
             "3 unreadable/corrupt/unsupported capture, 4 internal error.")


@click.group(epilog=EXIT_HELP)
@click.version_option(__version__, prog_name="nagleprobe")
def main() -> None:
    """Find Nagle / delayed-ACK stalls in tcpdump and Wireshark captures."""


@main.command(epilog=EXIT_HELP)
@click.argument("capture", type=str)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Text report for people, or the JSON document.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display on standard error.")
@click.option("--reorder-window", type=click.FloatRange(min=0), default=DEFAULT_GRACE_S,
              show_default=True, metavar="SECONDS",
              help="Capture time a closed connection waits for late or out-of-order packets "
                   "before it is analysed and its packets are freed.")
def analyze(capture: str, fmt: str, debug: bool, quiet: bool, reorder_window: float) -> None:
    """Analyse CAPTURE (pcap or pcapng, optionally gzip-compressed; - for stdin)."""
    bar = None if quiet or not sys.stderr.isatty() else ProgressBar()
    try:
        try:
            report = run_analysis(capture, grace_s=reorder_window, progress=bar)
        finally:
            if bar is not None:
                bar.close()
    except CaptureError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.BAD_CAPTURE)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # a bug: say so in one line unless debugging
        if debug:
            raise
        click.echo(f"nagleprobe: internal error while analysing {capture}: "
                   f"{type(e).__name__}: {e} (rerun with --debug for a traceback)", err=True)
        sys.exit(ExitStatus.INTERNAL)
    if fmt == "json":
        for piece in report.json_pieces():
            sys.stdout.write(piece)
        sys.stdout.write("\n")
    else:
        click.echo(report.to_text(), nl=False)
