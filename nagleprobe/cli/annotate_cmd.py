"""`nagleprobe annotate`: a copy of a capture with a comment on each stall's frames."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import ExitStatus, printable
from ..output import STDOUT, is_stdout, to_stdout
from ..humanize import counted
from .common import DEBUG_OPTION, one_line_errors

ANNOTATE_HELP = ("Exit status: 0 written, 2 usage error (standard input; OUTPUT is the capture "
                 "or cannot be created), 3 unreadable/corrupt/unsupported capture, 4 internal "
                 "error, 7 OUTPUT not written (disk full, I/O error).")


@click.command(epilog=ANNOTATE_HELP,
               short_help="Copy a capture with a comment on each stall's frames.")
@click.argument("capture", type=str, metavar="CAPTURE")
@click.argument("more", nargs=-1, type=str, metavar="")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="pcapng file to write (- for standard output; a FIFO or device is written "
                   "as a stream, a file replaced when complete).")
@click.option("--strict", is_flag=True,
              help="Fail (exit 3) on a truncated or partly corrupt capture.")
@DEBUG_OPTION
def annotate(capture: str, more: tuple[str, ...], output: str, strict: bool, debug: bool
             ) -> None:
    """Write CAPTURE as pcapng with a comment on every stall's frames, for Wireshark.

    CAPTURE is one pcap or pcapng file, optionally gzip-compressed (not standard input: it is
    read twice). A file set is refused: annotate each of its files on its own (its
    frames are numbered per file anyway). The three frames of each stall
    (S1, the late pure ACK, S2) get a packet comment, the section header the verdicts; frames,
    times and packet bytes stay as they are, existing comments are kept. In Wireshark the
    display filter  frame.comment contains "nagleprobe"  shows the stall frames.

    \b
    Examples:
      nagleprobe annotate capture.pcap -o annotated.pcapng
      nagleprobe annotate --strict capture.pcap.gz -o annotated.pcapng
    """
    from ..annotate import annotate as run_annotate

    if more or Path(capture).is_dir() or (not Path(capture).exists()
                                          and any(c in capture for c in "*?[")):
        click.echo("nagleprobe: error: annotate copies one capture file: give one file, not a "
                   "set (annotate each file of a set on its own)", err=True)
        sys.exit(ExitStatus.USAGE)
    if capture == "-":
        click.echo("nagleprobe: error: annotate reads the capture twice: give a file, not -",
                   err=True)
        sys.exit(ExitStatus.USAGE)
    to_stderr = is_stdout(output)  # the pcapng goes there: the summary to standard error
    with one_line_errors(debug, "annotating", capture, {}):
        result = run_annotate(capture, output, strict=strict)
    r = result.report
    for w in r.capture["warnings"]:
        click.echo(f"nagleprobe: warning: {w}", err=True)
    with one_line_errors(debug, "annotating", capture, {}), to_stdout():
        click.echo(f"{STDOUT if output == '-' else printable(output)}: "
                   f"{counted(result.packets, 'packet')}, "
                   f"{counted(result.commented, 'frame')} commented "
                   f"({counted(len(r.stalls), 'stall')} in "
                   f"{int((r.flows['stalls'] > 0).sum())} of {counted(len(r.flows), 'TCP flow')})."
                   " In Wireshark: frame.comment contains \"nagleprobe\"", err=to_stderr)
    if result.uncommentable:
        click.echo(f"nagleprobe: warning: {result.uncommentable} stall frames are Simple Packet "
                   "Blocks, which cannot carry a comment; they are left without one", err=True)
