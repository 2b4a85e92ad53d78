"""`nagleprobe compare`: did the fix work -- two captures (or saved reports) of one service."""

from __future__ import annotations

import json
import sys

import click

from ..output import open_output, refuse_report_file, to_stdout
from .common import DEBUG_OPTION, URL_TIMEOUT_OPTION, one_line_errors

COMPARE_HELP = ("Exit status: 0 compared, 2 usage error (also a -o path that is an input or "
                "cannot be created), 3 unreadable capture or report, 4 internal error, "
                "7 output not written (disk full, I/O error).")


@click.command(epilog=COMPARE_HELP,
               short_help="Compare two captures of one service, before and after a fix.")
@click.argument("before", type=str)
@click.argument("after", type=str)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="What changed for people, or the JSON comparison.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the comparison to FILE instead of standard output.")
@DEBUG_OPTION
@URL_TIMEOUT_OPTION
def compare(before: str, after: str, fmt: str, output: str | None, debug: bool,
            url_timeout: float) -> None:
    """Compare BEFORE and AFTER: captures (pcap, pcapng, gzip) or reports saved with
    analyze --format json (a .json file).

    Connections are matched by their server endpoint and client host (the client's port
    changes between runs). Per such group: flows, stalls, time lost and the longest stall,
    the requests and their latency's p50 and p99, each side's Nagle state and delayed-ACK
    timer, before -> after.

    \b
    Examples:
      nagleprobe compare before.pcap after.pcap
      nagleprobe compare main.json branch.pcap   # main.json: analyze --format json -o
      nagleprobe compare before.pcap after.pcap --format json -o changes.json
    """
    from ..compare import compare as compared
    from ..compare import load_report, render_text

    if output == "-":
        output = None
    with one_line_errors(debug, "comparing", before, {}):
        if output is not None:
            refuse_report_file(output, "-o", "the comparison", [before, after])
        docs = [load_report(p, url_timeout=url_timeout) for p in (before, after)]
        result = compared(*docs)
        text = (json.dumps(result, indent=1) + "\n" if fmt == "json" else render_text(result))
        if output is not None:
            with open_output(output, "the comparison", [before, after]) as out:
                out.write(text.encode("utf-8"))
            return
        with to_stdout():
            sys.stdout.write(text)
