"""`nagleprobe watch`: stalls in live traffic as they are proven, from standard input, a
file still being written or tcpdump on an interface."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

import click

from ..errors import CaptureError, ExitStatus, printable
from ..output import to_stdout
from . import common
from .common import DEBUG_OPTION, HOST_SELECTION, PORT_SELECTION, one_line_errors

if TYPE_CHECKING:
    from ..read import CaptureReader
    from ..watch import LiveStream

WATCH_HELP = ("Exit status: 0 at the end of input or on Ctrl-C or SIGTERM (after the final "
              "report; also while waiting for a FIFO's writer or the capture's header), "
              "2 usage error, 3 unreadable capture, 5 capture not possible (-i: not root, no "
              "tcpdump, no such interface, bad filter), 4 internal error, 7 standard output "
              "not writable (disk full, I/O error).")


@click.command(epilog=WATCH_HELP, short_help="Report stalls in live traffic as they happen.")
@click.argument("capture", required=False, type=str)
@click.option("--follow", "-f", "follow", type=str, metavar="FILE",
              help="Read FILE while it is being written (keep reading at its end; Ctrl-C "
                   "stops).")
@click.option("--interface", "-i", metavar="IFACE",
              help="Run tcpdump on IFACE (needs root or CAP_NET_RAW, as `record`).")
@click.option("--filter", "bpf", metavar="EXPR",
              help="With -i: the tcpdump filter expression [default: tcp].")
@click.option("--snaplen", type=click.IntRange(68, 262144), default=256, show_default=True,
              help="With -i: bytes kept per packet (headers are enough).")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text",
              show_default=True, help="One line of text per event, or one JSON object.")
@click.option("--summary-every", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, metavar="SECONDS",
              help="Capture time between summaries (one line per flow with stalls then).")
@click.option("--window", "window_rows", type=click.IntRange(min=16), default=4096,
              show_default=True, metavar="PACKETS",
              help="Packets of each open connection held and analysed (the memory bound).")
@PORT_SELECTION
@HOST_SELECTION
@click.option("--min-confidence", type=click.FloatRange(0, 1), metavar="C",
              help="Ignore stalls with a confidence below C (a first stall is 0.6; held back "
                   "until its repeats raise it).")
@DEBUG_OPTION
def watch(capture: str | None, follow: str | None, interface: str | None, bpf: str | None,
          snaplen: int, fmt: str, summary_every: float, window_rows: int,
          ports: tuple[int, ...], hosts: tuple[str, ...], min_confidence: float | None,
          debug: bool) -> None:
    """Report each stall as soon as it is proven, from a capture still being written.

    CAPTURE is - for a pcap/pcapng stream on standard input (or a finished file); or
    --follow FILE for a file still being written; or -i IFACE to run tcpdump. A summary
    per flow with stalls every --summary-every seconds; at the end of input or on Ctrl-C,
    the final report.

    \b
    Examples:
      tcpdump -U -w - 'tcp port 443' | nagleprobe watch -
      nagleprobe watch --follow /var/tmp/cap.pcap --format jsonl
      nagleprobe watch -i eth0 --filter 'tcp port 8000'
      nagleprobe watch -i any -p 8000 --host 10.0.0.0/8 --min-confidence 0.9
    """
    import signal

    from ..tcpdump import Capture, RecordError
    from ..watch import watch as run_watch

    _one_input(capture, follow, interface, bpf)
    emit = _emitter(fmt)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a service manager's stop: the final report too
    cap, raw = None, None
    name = capture or follow or f"interface {interface}"
    with one_line_errors(debug, "watching", name, {}):
        try:
            if interface is not None:
                cap = Capture("-", interface, bpf=bpf or "tcp", snaplen=snaplen)
                raw = cap.start_pipe()
                click.echo(f"nagleprobe: watching {printable(interface)} "
                           f"({printable(cap.filter)}); Ctrl-C for the final report", err=True)
            try:  # stopped before the capture's header came: the report of nothing
                reader, stream = _open_reader(capture, follow, raw, name)
            except KeyboardInterrupt:
                emit(line_for_nothing(fmt))
                return
            run_watch(reader, emit, fmt, summary_s=summary_every, window_rows=window_rows,
                      stream=stream, ports=ports, hosts=hosts, min_confidence=min_confidence)
        except RecordError as e:
            if debug:
                traceback.print_exc()
            click.echo(f"nagleprobe: error: {e}", err=True)
            sys.exit(e.status)
        except BrokenPipeError:  # the reader of our output went away: nothing more to say
            if cap is not None:
                cap.stop(0)
            os._exit(0)
        finally:
            if cap is not None:
                cap.stop(0)


def _one_input(capture: str | None, follow: str | None, interface: str | None,
               bpf: str | None) -> None:
    """A usage error (exit 2) unless exactly one input is given, and --filter only with -i."""
    if len([x for x in (capture, follow, interface) if x is not None]) != 1:
        click.echo("nagleprobe: error: give one input: CAPTURE (- for stdin), --follow FILE "
                   "or -i IFACE", err=True)
        sys.exit(ExitStatus.USAGE)
    if bpf is not None and interface is None:
        click.echo("nagleprobe: error: --filter needs -i IFACE", err=True)
        sys.exit(ExitStatus.USAGE)


def _emitter(fmt: str) -> Callable[[str], None]:
    """Writes an event's lines to standard output, flushed (a pipe to jq or a log shipper
    sees each line at once); on a terminal, text within its width (a pipe keeps one line
    each)."""
    from ..text_report import fit_lines

    width = common.text_width() if fmt == "text" and common.stdout_is_terminal() else None

    def emit(text: str) -> None:
        if width is not None:
            text = "\n".join(fit_lines(text.split("\n"), width))
        with to_stdout():
            sys.stdout.write(text + "\n")

    return emit


def _open_reader(capture: str | None, follow: str | None, raw: BinaryIO | None, name: str
                 ) -> tuple[CaptureReader, LiveStream]:
    """The reader of the watched capture: tcpdump's pipe `raw`, standard input (`-`) or a
    file (a FIFO blocks here until something opens it for writing); it returns once the
    capture's header has come."""
    from ..read import CaptureReader
    from ..watch import LIVE_CHUNK_BYTES, LiveStream

    if capture == "-":
        raw = sys.stdin.buffer
    elif raw is None:
        try:
            raw = open(follow or capture, "rb")  # type: ignore[arg-type]
        except OSError as e:
            raise CaptureError(name, e.strerror or str(e)) from None
    stream = LiveStream(raw, follow=follow is not None, name=name)
    return CaptureReader(name, chunk_bytes=LIVE_CHUNK_BYTES, stream=stream), stream


def line_for_nothing(fmt: str) -> str:
    """The final report of a watch stopped before any packet."""
    from ..live import LiveAnalyzer
    from ..watch import line

    return line(LiveAnalyzer().final({"packets": 0, "skipped": {}, "warnings": []}), fmt)
