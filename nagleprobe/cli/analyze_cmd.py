"""`nagleprobe analyze`: the report of a capture (or a file set) as text, JSON, Wireshark
filters and HTML."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from .. import pipeline
from ..errors import printable
from ..output import open_output, refuse_report_file, to_stdout
from ..pipeline import DEFAULT_IDLE_S, DEFAULT_REORDER_WINDOW_S
from ..progress import ProgressBar
from . import common
from .common import (
    DEBUG_OPTION,
    HOST_SELECTION,
    PORT_SELECTION,
    URL_TIMEOUT_OPTION,
    capture_set,
    one_line_errors,
)

if TYPE_CHECKING:
    from ..report import Report

EXIT_HELP = ("Exit status: 0 analysed (stalls or not), 2 usage error (also a -o or --html "
             "path that is one of the captures or cannot be created), 3 "
             "unreadable/corrupt/unsupported capture (with --strict: also a damaged one), "
             "4 internal error, 7 output not written (standard output, -o or --html: disk "
             "full, I/O error).")


@click.command(epilog=EXIT_HELP, short_help="Find and explain the stalls in a capture (or a set).")
@click.argument("captures", nargs=-1, required=True, type=str, metavar="CAPTURE...")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "wireshark"]),
              default="text", show_default=True,
              help="Text report for people, the JSON document, or Wireshark display filters "
                   "(per flow with stalls: one for the flow, one for its stall frames).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the report (--format) to FILE instead of standard output.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (pictures need the plot extra).")
@click.option("--strict", is_flag=True,
              help="Fail (exit 3) on a truncated or partly corrupt capture instead of analysing "
                   "what can be read and warning.")
@PORT_SELECTION
@HOST_SELECTION
@click.option("--flow", "flow_ids", multiple=True, type=click.IntRange(min=0), metavar="ID",
              help="Report only the flow with this id (repeatable).")
@click.option("--top", type=click.IntRange(min=0), metavar="N",
              help="Report only the N flows that lost the most time to stalls, worst first.")
@click.option("--min-confidence", type=click.FloatRange(0, 1), metavar="C",
              help="Ignore stalls with a confidence below C (default: none; a single stall "
                   "is 0.6, repeated steady ones 0.85-0.95; what each band is worth: "
                   "docs/DETECTION.md): they leave the report and its counts.")
@click.option("--verbose", "-v", is_flag=True,
              help="Text report: the evidence of every flow with stalls (the first ten; by "
                   "default of the worst flow of each fix) and a line per clean flow.")
@click.option("--all-stalls", is_flag=True,
              help="Text report: the evidence of every flow with stalls, every stall of each "
                   "(by default the first twelve).")
@click.option("--time", "-t", "times", type=click.Choice(["flow", "capture", "utc"]),
              default="flow", show_default=True,
              help="Text report: the evidence's times in s since the flow's first packet, "
                   "since the capture's (Wireshark's default), or as UTC time of day.")
@DEBUG_OPTION
@click.option("--progress/--no-progress", default=None,
              help="Show packets, bytes and the ETA on standard error [default: on a terminal]; "
                   "shown from half a second on.")
@click.option("--quiet", "-q", is_flag=True, hidden=True)  # a hidden synonym of --no-progress
@click.option("--reorder-window", type=click.FloatRange(min=0), default=DEFAULT_REORDER_WINDOW_S,
              show_default=True, metavar="SECONDS",
              help="Capture time a closed connection waits for late or out-of-order packets "
                   "before it is analysed and its packets are freed.")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_IDLE_S, show_default=True, metavar="SECONDS",
              help="Capture time after which a connection that has sent nothing is analysed "
                   "and freed as if closed (bounds memory for port scans and SYN floods).")
@URL_TIMEOUT_OPTION
def analyze(captures: tuple[str, ...], fmt: str, output: str | None, html_path: str | None,
            strict: bool, ports: tuple[int, ...], hosts: tuple[str, ...],
            flow_ids: tuple[int, ...], top: int | None, min_confidence: float | None,
            verbose: bool, all_stalls: bool, times: str, debug: bool,
            progress: bool | None, quiet: bool, reorder_window: float,
            idle_timeout: float, url_timeout: float) -> None:
    """Analyse CAPTURE (pcap or pcapng, optionally gzip-compressed; - for stdin).

    Several files, directories and glob patterns are one capture (a file set, e.g. rotated
    by tcpdump -G/-C): records merged by time, so a connection crossing files is one flow;
    frame numbers are then given with the file they are in. Files that saw the same
    connections from different places (the client's and the server's host) are not merged:
    each place is analysed on its own, the report is the first file's place, and its
    Vantages section joins them (verdict at each place, clock offset, where the time went).

    \b
    Examples:
      nagleprobe analyze capture.pcap                  # the text report
      nagleprobe analyze --format json -o report.json capture.pcap.gz
      nagleprobe analyze capture.pcap --html report.html
      nagleprobe analyze -p 8000 --top 3 capture.pcap   # the 3 worst flows on port 8000
      tcpdump -i lo -w - 'tcp port 8000' | nagleprobe analyze -
      nagleprobe analyze 'rotated/cap-*.pcap'           # a file set as one capture
    """
    from ..fileset import set_name

    paths = capture_set(captures)
    if quiet:
        progress = False
    if output == "-":
        output = None
    bar = ProgressBar() if progress or (progress is None and sys.stderr.isatty()) else None
    usage = {KeyError: lambda e: f"--flow: {e.args[0]}"}  # --flow names no flow of the capture
    with one_line_errors(debug, "analysing", set_name(paths), usage):
        for path, option, what in ((html_path, "--html", "the HTML report"),
                                   (output, "-o", "the report")):
            if path is not None:
                refuse_report_file(path, option, what, paths)
        try:
            report = pipeline.analyze(paths if len(paths) > 1 else paths[0], strict=strict,
                                      reorder_window_s=reorder_window,
                                      idle_s=idle_timeout, progress=bar,
                                      url_timeout=url_timeout)
        finally:
            if bar is not None:
                bar.close()
        if ports or hosts or flow_ids or top is not None or min_confidence is not None:
            report = report.select(port=ports, host=hosts, flow=flow_ids, top=top,
                                   min_confidence=min_confidence)
        if html_path is not None:
            _write_html(report, html_path)
        pieces = _report_pieces(report, fmt, common.text_width() if output is None else None,
                                verbose=verbose, all_stalls=all_stalls, times=times)
        if output is not None:
            with open_output(output, "the report", paths) as out:
                for piece in pieces:
                    out.write(piece.encode("utf-8"))
            return
        with to_stdout():
            for piece in pieces:
                sys.stdout.write(piece)


def _report_pieces(report: Report, fmt: str, width: int | None, **text: object
                   ) -> Iterator[str]:
    """The report in `fmt`, in pieces (the JSON of a large capture is written as it is
    made); text `width` None: the report's default; `text`: `Report.to_text`'s options."""
    if fmt == "json":
        yield from report.json_pieces()
        yield "\n"
    elif fmt == "wireshark":
        from ..wireshark import render_filters

        yield render_filters(report)
    else:
        yield report.to_text(**text) if width is None else report.to_text(width, **text)


def _write_html(report: Report, path: str) -> None:
    """The HTML report at `path`, with the command line that made it; without matplotlib,
    without pictures, and a note saying so."""
    import shlex

    from ..html_report import NO_PICTURES, matplotlib_available, write_html

    if not matplotlib_available():  # the report without pictures, and say so
        click.echo(f"nagleprobe: note: {printable(path)}: {NO_PICTURES}", err=True)
    command = shlex.join(["nagleprobe", *sys.argv[1:]])
    write_html(report, path, command=command)  # matplotlib is loaded only here
