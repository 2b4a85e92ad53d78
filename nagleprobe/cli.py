"""The `nagleprobe` command: a thin layer over `nagleprobe.analyze`."""

from __future__ import annotations

import sys
import traceback

import click

from . import __version__
from .errors import CaptureError, ExitStatus
from .pipeline import analyze as run_analysis

EXIT_HELP = ("Exit status: 0 analysed (stalls or not), 2 usage error, "
             "3 unreadable/corrupt/unsupported capture (with --strict: also a damaged one), "
             "4 internal error.")


@click.group(epilog=EXIT_HELP)
@click.version_option(__version__, prog_name="nagleprobe")
def main() -> None:
    """Find Nagle / delayed-ACK stalls in tcpdump and Wireshark captures."""


@main.command(epilog=EXIT_HELP)
@click.argument("capture", type=str)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Text report for people, or the JSON document.")
@click.option("--strict", is_flag=True,
              help="Fail (exit 3) on a truncated or partly corrupt capture instead of analysing "
                   "what can be read and warning.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def analyze(capture: str, fmt: str, strict: bool, debug: bool) -> None:
    """Analyse CAPTURE (pcap or pcapng, optionally gzip-compressed; - for stdin)."""
    try:
        report = run_analysis(capture, strict=strict)
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
        click.echo(report.to_json())
    else:
        click.echo(report.to_text(), nl=False)
