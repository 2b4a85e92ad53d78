"""The `nagleprobe` command: a thin layer over `nagleprobe.analyze`."""

from __future__ import annotations

import importlib.util
import sys
import traceback

import click

from . import __version__
from .errors import CaptureError, ExitStatus
from .pipeline import analyze as run_analysis
from .report import Report

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
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (pictures need the plot extra).")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def analyze(capture: str, fmt: str, html_path: str | None, debug: bool) -> None:
    """Analyse CAPTURE (pcap or pcapng, optionally gzip-compressed; - for stdin)."""
    if html_path is not None and importlib.util.find_spec("matplotlib") is None:
        click.echo("nagleprobe: error: --html needs matplotlib for its pictures: "
                   "pip install 'nagleprobe[plot]'", err=True)
        sys.exit(ExitStatus.USAGE)
    try:
        report = run_analysis(capture)
        if html_path is not None:
            _write_html(report, html_path)
    except CaptureError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.BAD_CAPTURE)
    except HtmlWriteError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.USAGE)
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


class HtmlWriteError(Exception):
    """The --html file could not be written (a usage problem, not a capture problem)."""


def _write_html(report: Report, path: str) -> None:
    from .html_report import write_html  # matplotlib is loaded only when asked for

    try:
        write_html(report, path)
    except OSError as e:
        raise HtmlWriteError(f"{path}: cannot write the HTML report: {e.strerror or e}") from e
