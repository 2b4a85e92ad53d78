"""The `nagleprobe` command: a thin layer over `nagleprobe.analyze`.

Over 500 lines because of its six commands' click declarations (options, help texts,
examples); each command's body is a few lines over the library, and every option's
behaviour lives there.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from . import __version__, _startup, pipeline  # noqa: F401  (_startup: before numpy)
from .errors import (CaptureError, ExitStatus, OutputRefused, TargetError, WriteFailed,
                     printable)
from .output import (STDOUT, discard_stdout, is_stdout, open_output, refuse_inputs,
                     to_stdout, write_output)
from .pipeline import DEFAULT_IDLE_S, DEFAULT_REORDER_WINDOW_S
from .progress import ProgressBar
from .read import URL_TIMEOUT_S
from .words import counted

if TYPE_CHECKING:
    from .report import Report

EXIT_HELP = ("Exit status: 0 analysed (stalls or not), 2 usage error (also a -o or --html "
             "path that is one of the captures or cannot be created), 3 "
             "unreadable/corrupt/unsupported capture (with --strict: also a damaged one), "
             "4 internal error, 7 output not written (standard output, -o or --html: disk "
             "full, I/O error).")


MAIN_HELP = ("Exit status: 0 ok (analysed; check: within budget), 1 over the stall budget "
             "(check), 2 usage error, 3 unreadable capture, 4 internal error, 5 capture not "
             "possible (record, watch -i), 6 no TCP flow to check (check), 7 output not written "
             "(disk full, I/O error), 8 time stamps too coarse to show a stall (check), "
             "127 command not found (record). Details: COMMAND --help.")


def run() -> None:
    """The console entry point: `main`, then out without tearing the interpreter down.

    Freeing a finished analysis object by object at exit takes about 0.08 s, 8 % of a
    1 M-packet run. Skipped only when nothing is left to finish: output flushed, no other
    thread that exit would wait for, no child process."""
    try:
        main()  # standalone mode: always ends in SystemExit, but for the OSError below
        code: object = 0
    except SystemExit as e:
        code = e.code
    except OSError as e:  # only click's own output (--help, --version) lets one out
        if not any(f.f_code is click.echo.__code__ for f, _ in traceback.walk_tb(e.__traceback__)):
            raise  # a bug, with its traceback
        code = _output_failed(WriteFailed(STDOUT, e))
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
        return _output_failed(WriteFailed(STDOUT, e))
    return None


def _nothing_left() -> bool:
    import threading

    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        return False
    mp = sys.modules.get("multiprocessing")
    return mp is None or not mp.active_children()


URL_TIMEOUT_OPTION = click.option(
    "--url-timeout", type=click.FloatRange(min=0, min_open=True), default=URL_TIMEOUT_S,
    show_default=True, metavar="SECONDS",
    help="Longest wait for an http(s) server: to connect, for its answer, for more of the "
         "capture; then that capture is unreadable (exit 3).")


@click.group(epilog=MAIN_HELP)
@click.version_option(__version__, prog_name="nagleprobe")
def main() -> None:
    """Find Nagle / delayed-ACK stalls in tcpdump and Wireshark captures."""


@main.command(epilog=EXIT_HELP, short_help="Find and explain the stalls in a capture (or a set).")
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
@click.option("--port", "-p", "ports", multiple=True, type=click.IntRange(1, 65535),
              metavar="P", help="Report only flows with an endpoint on this port (repeatable).")
@click.option("--host", "hosts", multiple=True, callback=lambda c, p, v: _host_option(c, p, v),
              metavar="H", help="Report only flows with an endpoint at this address or in this "
                                "network, e.g. 10.0.0.0/8 (repeatable).")
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
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
@click.option("--progress/--no-progress", default=None,
              help="Show packets, bytes and the ETA on standard error [default: on a terminal]; "
                   "shown from half a second on.")
@click.option("--quiet", "-q", is_flag=True, hidden=True)  # the old spelling of --no-progress
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
    from .fileset import set_name

    paths = _capture_set(captures)
    capture = set_name(paths)
    if quiet:
        progress = False
    if output == "-":
        output = None
    bar = ProgressBar() if progress or (progress is None and sys.stderr.isatty()) else None
    usage = {KeyError: lambda e: f"--flow: {e.args[0]}"}  # --flow names no flow of the capture
    with _one_line_errors(debug, "analysing", capture, usage):
        for path, option, what in ((html_path, "--html", "the HTML report"),
                                   (output, "-o", "the report")):
            if path is not None:
                _refuse_output(path, option, what, paths)
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
        pieces = _report_pieces(report, fmt, _text_width() if output is None else None,
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
        from .wireshark import render_filters

        yield render_filters(report)
    else:
        yield report.to_text(**text) if width is None else report.to_text(width, **text)


def _capture_set(args: tuple[str, ...]) -> list[str]:
    """The files CAPTURE... names (directories and glob patterns expanded); a usage error
    (exit 2) for an argument that names none, or standard input among other files."""
    from .fileset import capture_paths

    notes: list[str] = []
    try:
        paths = capture_paths(args, notes)
    except TargetError as e:
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(ExitStatus.USAGE)
    _print_notes(notes)
    return paths


def _print_notes(notes: list[str]) -> None:
    """What finding the captures left out (a file under a second name, a directory gone),
    on standard error."""
    for note in notes:
        click.echo(f"nagleprobe: note: {note}", err=True)


def _refuse_output(path: str, option: str, what: str, inputs: list[str]) -> None:
    """Refuse, before any analysis, an output file that is one of the inputs, or standard
    output, which carries the command's own report."""
    if path == "-":
        raise OutputRefused(f"{option} -: standard output carries the report; give a file "
                            "name for " + what)
    refuse_inputs(path, inputs, what)


def _output_failed(e: WriteFailed) -> ExitStatus:
    """Say that an output could not be written; its exit status."""
    if e.name == STDOUT:
        discard_stdout()  # what is still buffered for it must not fail again at exit
    click.echo(f"nagleprobe: error: {e}", err=True)
    return ExitStatus.OUTPUT_FAILED


@contextmanager
def _one_line_errors(debug: bool, doing: str, capture: str,
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
        sys.exit(_output_failed(e))
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


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _text_width() -> int:
    """The terminal's width when standard output is one, else the report's default (80)."""
    import shutil

    from .text_report import TEXT_WIDTH

    if not _stdout_is_terminal():
        return TEXT_WIDTH
    return max(40, shutil.get_terminal_size((TEXT_WIDTH, 24)).columns)


ANNOTATE_HELP = ("Exit status: 0 written, 2 usage error (standard input; OUTPUT is the capture "
                 "or cannot be created), 3 unreadable/corrupt/unsupported capture, 4 internal "
                 "error, 7 OUTPUT not written (disk full, I/O error).")


@main.command(epilog=ANNOTATE_HELP, short_help="Copy a capture with a comment on each stall's frames.")
@click.argument("capture", type=str, metavar="CAPTURE")
@click.argument("more", nargs=-1, type=str, metavar="")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="pcapng file to write (- for standard output; a FIFO or device is written "
                   "as a stream, a file replaced when complete).")
@click.option("--strict", is_flag=True,
              help="Fail (exit 3) on a truncated or partly corrupt capture.")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
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
    from .annotate import annotate as run_annotate

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
    with _one_line_errors(debug, "annotating", capture, {}):
        result = run_annotate(capture, output, strict=strict)
    r = result.report
    for w in r.capture["warnings"]:
        click.echo(f"nagleprobe: warning: {w}", err=True)
    with _one_line_errors(debug, "annotating", capture, {}), to_stdout():
        click.echo(f"{STDOUT if output == '-' else printable(output)}: "
                   f"{counted(result.packets, 'packet')}, "
                   f"{counted(result.commented, 'frame')} commented "
                   f"({counted(len(r.stalls), 'stall')} in "
                   f"{int((r.flows['stalls'] > 0).sum())} of {counted(len(r.flows), 'TCP flow')})."
                   " In Wireshark: frame.comment contains \"nagleprobe\"", err=to_stderr)
    if result.uncommentable:
        click.echo(f"nagleprobe: warning: {result.uncommentable} stall frames are Simple Packet "
                   "Blocks, which cannot carry a comment; they are left without one", err=True)


def _write_html(report: Report, path: str) -> None:
    import shlex

    from .html_report import NO_PICTURES, matplotlib_available, write_html

    if not matplotlib_available():  # the report without pictures, and say so
        click.echo(f"nagleprobe: note: {printable(path)}: {NO_PICTURES}", err=True)
    command = shlex.join(["nagleprobe", *sys.argv[1:]])
    write_html(report, path, command=command)  # matplotlib is loaded only here


# ------------------------------------------------------------------ check / record (the CI gate)
GATE_HELP = ("Exit status: 0 every capture within budget, 1 a capture over budget, 2 usage "
             "error (options, pyproject settings, a --junit path that is a capture), 3 a "
             "capture unreadable (or no capture file found; with --strict also a damaged one), "
             "4 internal error, 6 a capture with no TCP flow to check (EMPTY; --allow-empty "
             "permits it), 7 output not written "
             "(standard output or --junit: disk full, I/O error), 8 a capture within budget "
             "whose time stamps are too coarse to show a delayed-ACK stall (UNRESOLVED: "
             "steps of ten milliseconds or more). With several captures the "
             "most severe verdict wins: 4 > 3 > 8 > 6 > 1 > 0.")
RECORD_HELP = ("Exit status: the command's own status; 5 capture not possible (not root, no "
               "tcpdump, no such interface, output not writable), 127 command not found, "
               "2 usage error. With --check, a command that succeeded is followed by the "
               "gate's status (0, 1, 3, 4, 6, 7 or 8; see `nagleprobe check --help`).")


def _host_option(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
                 ) -> tuple[str, ...]:
    if not value:  # (no import of selection when no host is given)
        return value
    from .errors import BudgetError
    from .selection import parse_host

    try:
        return tuple(parse_host(v) for v in value)
    except BudgetError as e:
        raise click.BadParameter(str(e)) from None


_GATE_OPTIONS = [
    click.option("--max-stalls", type=click.IntRange(min=0), metavar="N",
                 help="Stalls allowed per capture [default: 0 when no other limit is set]."),
    click.option("--max-stall-ms", type=click.FloatRange(min=0), metavar="MS",
                 help="Milliseconds lost to stalls allowed per capture."),
    click.option("--max-lost-share", type=click.FloatRange(0, 100), metavar="PCT",
                 help="Percent of any one flow's duration that stalls may take."),
    click.option("--min-confidence", type=click.FloatRange(0, 1), metavar="C",
                 help="Ignore stalls with a confidence below C (default: none; a single "
                      "stall is 0.6, repeated steady ones 0.85-0.95; see docs/DETECTION.md)."),
    click.option("--host", "hosts", multiple=True, callback=_host_option, metavar="H",
                 help="Check only flows with an endpoint at this address or in this network "
                      "(repeatable)."),
    click.option("--config", type=click.Path(exists=True, dir_okay=False), metavar="TOML",
                 help="Read [tool.nagleprobe.check] from this file instead of the nearest "
                      "pyproject.toml."),
    click.option("--no-config", is_flag=True, help="Ignore pyproject.toml settings."),
    click.option("--allow-empty", is_flag=True,
                 help="Pass a capture with no TCP flow to check (after --port/--host) instead "
                      "of failing it as EMPTY (exit 6)."),
    click.option("--strict", is_flag=True,
                 help="A damaged capture (cut short, corrupt records) is unreadable (exit 3) "
                      "instead of checked up to its damage with warnings."),
    click.option("--junit", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
                 help="Write a JUnit XML report (a test case per capture and per flow)."),
    click.option("--github", is_flag=True,
                 help="Print GitHub Actions annotations (::error / ::warning) per flow."),
    click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                 show_default=True, help="Verdicts for people, or the JSON document: "
                 '{"budget", "passed", "exit_status", "captures": [analyze document + '
                 '"check"]}.'),
    click.option("--debug", is_flag=True, help="Show a traceback on errors."),
]


def _gate_options(f):  # type: ignore[no-untyped-def]
    for option in reversed(_GATE_OPTIONS):
        f = option(f)
    return f


def _run_gate(captures: list[str], ports: tuple[int, ...], opts: dict, jobs: int | None = None,
              merge: bool = False, dask: str | None = None,
              progress: bool | None = None, url_timeout: float = URL_TIMEOUT_S) -> ExitStatus:
    """Load the budget, check the captures (on the Dask scheduler at `dask` if given), write
    every requested output; the exit status. `progress`: show it (None: on a terminal)."""
    from .check import Budget, BudgetError, expand_targets, load_budget, run_check
    from .check_output import render_github, render_junit, render_text

    try:
        budget, source = (Budget(), None) if opts["no_config"] else load_budget(
            Path(opts["config"]) if opts["config"] else None)
        budget = budget.merged(max_stalls=opts["max_stalls"], max_stall_ms=opts["max_stall_ms"],
                               max_lost_share=opts["max_lost_share"],
                               min_confidence=opts["min_confidence"], ports=ports,
                               hosts=opts["hosts"],
                               allow_empty=True if opts["allow_empty"] else None)
    except BudgetError as e:
        click.echo(f"nagleprobe: error: {e}", err=True)
        return ExitStatus.USAGE
    targets = expand_targets(captures)
    _print_notes(targets.notes)
    if opts["junit"]:
        _refuse_output(opts["junit"], "--junit", "the JUnit report", [t.path for t in targets])
    client = None
    if dask is not None:
        from .fleet import SchedulerError, connect

        try:
            client = connect(dask)
        except SchedulerError as e:
            click.echo(f"nagleprobe: error: {printable(str(e))}", err=True)
            return ExitStatus.USAGE
    bar = None
    if progress or (progress is None and len(targets) > 1 and sys.stderr.isatty()):
        from .progress import FleetProgress

        bar = FleetProgress(len(targets))
    try:
        run = run_check(targets, budget, jobs=jobs, with_documents=opts["fmt"] == "json",
                        config=str(source) if source else None, strict=bool(opts["strict"]),
                        merge=merge, client=client, progress=bar, url_timeout=url_timeout)
    finally:
        if bar is not None:
            bar.close()
        if client is not None:
            client.close()
    if opts["debug"]:
        for v in run.verdicts:
            if v.error:
                click.echo(f"nagleprobe: debug: {v.error}", err=True)
    if opts["junit"]:
        write_output(opts["junit"], render_junit(run), "the JUnit report",
                     [t.path for t in targets])
    try:
        with to_stdout():
            if opts["github"]:
                click.echo(render_github(run), nl=False, err=opts["fmt"] == "json")
            if opts["fmt"] == "json":
                click.echo(run.to_json())
            elif _stdout_is_terminal():  # a person's terminal: wrap to it (pipes keep lines)
                from .text_report import fit_lines

                click.echo("\n".join(fit_lines(render_text(run).splitlines(), _text_width()))
                           + "\n", nl=False)
            else:
                click.echo(render_text(run), nl=False)
    except BrokenPipeError:  # its reader took what it wanted (`| head`): the verdict stands
        discard_stdout()
    return run.status


def _gate(captures: list[str], ports: tuple[int, ...], opts: dict, jobs: int | None = None,
          merge: bool = False, dask: str | None = None, progress: bool | None = None,
          url_timeout: float = URL_TIMEOUT_S) -> NoReturn:
    """`_run_gate`, then exit with its status; whatever goes wrong is one line and the
    status `_one_line_errors` gives it (a bug: 4, never 1, which CI reads as over budget)."""
    from .fileset import set_name

    with _one_line_errors(bool(opts["debug"]), "checking", set_name(captures), {}):
        status = _run_gate(captures, ports, opts, jobs, merge, dask, progress, url_timeout)
    sys.exit(status)


@main.command(epilog=GATE_HELP, short_help="CI gate: fail captures over the stall budget.")
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...")
@click.option("--port", "-p", "ports", multiple=True, type=click.IntRange(1, 65535),
              metavar="P", help="Check only flows with an endpoint on this port (repeatable).")
@_gate_options
@click.option("--jobs", "-j", type=click.IntRange(min=1), metavar="N",
              help="Captures analysed at once [default: one per core].")
@click.option("--merge", is_flag=True,
              help="Judge all the files given as one capture (a file set, e.g. rotated by "
                   "tcpdump -G/-C: connections crossing files are one flow), one verdict; "
                   "files from several places of the same connections are judged at the "
                   "first file's place, with a warning.")
@click.option("--dask", metavar="ADDRESS",
              help="Analyse the captures on the workers of this Dask scheduler (e.g. "
                   "tcp://10.0.0.5:8786; needs nagleprobe[dask]); the workers read the "
                   "files, so give paths or URLs they can reach.")
@click.option("--progress/--no-progress", default=None,
              help="Show captures done, packets/s and failures on standard error "
                   "[default: on a terminal, with several captures].")
@URL_TIMEOUT_OPTION
def check(captures: tuple[str, ...], ports: tuple[int, ...], jobs: int | None,
          merge: bool, dask: str | None, progress: bool | None, url_timeout: float,
          **opts: object) -> None:
    """Fail when CAPTURE... (files, directories, glob patterns) show too many stalls.

    Each file gets its own verdict; --merge judges them all as one capture (a file set).

    The budget (default: no stall at all) comes from [tool.nagleprobe.check] in the nearest
    pyproject.toml (keys as the options: max-stalls, max-stall-ms, max-lost-share,
    min-confidence, ports, hosts, allow-empty); options given here override it.

    \b
    Examples:
      nagleprobe check traffic.pcap                    # exit 1 if it has any stall
      nagleprobe check captures/ 'more/**/*.pcap.gz'   # directories, glob patterns
      nagleprobe check --max-stalls 3 -p 8000 traffic.pcap
      nagleprobe check --junit nagle.xml --github --strict traffic.pcap
      nagleprobe check --dask tcp://10.0.0.5:8786 /shared/caps/ 's3://bucket/caps/*.pcap.gz'
    """
    _gate(list(captures), ports, opts, jobs, merge, dask, progress, url_timeout)


@main.command(epilog=RECORD_HELP, context_settings={"allow_interspersed_args": False},
              short_help="Capture a command's TCP traffic with tcpdump.")
@click.option("--interface", "-i", default="lo", show_default=True,
              help="Interface to capture on (`any` for all).")
@click.option("--port", "-p", "ports", multiple=True, type=click.IntRange(1, 65535),
              metavar="P", help="Capture (and check) only TCP traffic on this port "
                                "(repeatable; default: all TCP).")
@click.option("--filter", "bpf", metavar="BPF",
              help="A tcpdump filter expression instead of the port filter.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="Capture file to write (pcap).")
@click.option("--snaplen", type=click.IntRange(68, 262144), default=256, show_default=True,
              help="Bytes kept per packet (headers are enough).")
@click.option("--check", "run_gate", is_flag=True,
              help="Run the gate on the capture afterwards (same budget options as check).")
@_gate_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(interface: str, ports: tuple[int, ...], bpf: str | None, output: str,
           snaplen: int, run_gate: bool, command: tuple[str, ...], **opts: object) -> None:
    """Capture the TCP traffic of COMMAND with tcpdump: nagleprobe record -o f.pcap -- CMD...

    tcpdump starts first (needs root or CAP_NET_RAW), the command runs when it is
    listening, and the capture stops when the command ends.

    \b
    Examples:
      nagleprobe record -o run.pcap -- python3 load_test.py
      nagleprobe record -p 8000 -o run.pcap --check -- ./client --requests 100
      nagleprobe record -i eth0 --filter 'tcp port 443' -o run.pcap -- curl https://host/
    """
    from .record import RecordError
    from .record import record as run_recorded

    try:
        result = run_recorded(list(command), output, interface=interface, ports=ports,
                              bpf=bpf, snaplen=snaplen)
    except RecordError as e:
        if opts["debug"]:
            traceback.print_exc()
        click.echo(f"nagleprobe: error: {e}", err=True)
        sys.exit(e.status)
    except KeyboardInterrupt:
        sys.exit(ExitStatus.INTERRUPTED)
    s = result.stats
    click.echo(f"nagleprobe: recorded {s.captured if s.captured is not None else '?'} packets "
               f"on {interface} to {output}"
               + (f" ({s.dropped} dropped by the kernel)" if s.dropped else "")
               + f"; command exited with {result.returncode}", err=True)
    if result.returncode != 0 or not run_gate:
        sys.exit(result.returncode)
    _gate([output], ports, opts)


WATCH_HELP = ("Exit status: 0 at the end of input or on Ctrl-C or SIGTERM (after the final "
              "report; also while waiting for a FIFO's writer or the capture's header), "
              "2 usage error, 3 unreadable capture, 5 capture not possible (-i: not root, no "
              "tcpdump, no such interface, bad filter), 4 internal error, 7 standard output "
              "not writable (disk full, I/O error).")


@main.command(epilog=WATCH_HELP, short_help="Report stalls in live traffic as they happen.")
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
@click.option("--port", "-p", "ports", multiple=True, type=click.IntRange(1, 65535),
              metavar="P", help="Report only flows with an endpoint on this port (repeatable).")
@click.option("--host", "hosts", multiple=True, callback=lambda c, p, v: _host_option(c, p, v),
              metavar="H", help="Report only flows with an endpoint at this address or in this "
                                "network, e.g. 10.0.0.0/8 (repeatable).")
@click.option("--min-confidence", type=click.FloatRange(0, 1), metavar="C",
              help="Ignore stalls with a confidence below C (a first stall is 0.6; held back "
                   "until its repeats raise it).")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
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

    from .watch import LIVE_CHUNK_BYTES, LiveStream
    from .watch import watch as run_watch
    from .read import CaptureReader
    from .record import Capture, RecordError

    given = [x for x in (capture, follow, interface) if x is not None]
    if len(given) != 1:
        click.echo("nagleprobe: error: give one input: CAPTURE (- for stdin), --follow FILE "
                   "or -i IFACE", err=True)
        sys.exit(ExitStatus.USAGE)
    if bpf is not None and interface is None:
        click.echo("nagleprobe: error: --filter needs -i IFACE", err=True)
        sys.exit(ExitStatus.USAGE)

    from .text_report import fit_lines

    width = _text_width() if fmt == "text" and _stdout_is_terminal() else None

    def emit(text: str) -> None:
        if width is not None:  # a terminal: within its width (a pipe keeps one line each)
            text = "\n".join(fit_lines(text.split("\n"), width))
        with to_stdout():  # flushed: a pipe to jq or a log shipper sees each line at once
            sys.stdout.write(text + "\n")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a service manager's stop: the final report too
    cap = None
    name = capture or follow or f"interface {interface}"
    with _one_line_errors(debug, "watching", name, {}):
        try:
            if interface is not None:
                cap = Capture("-", interface, bpf=bpf or "tcp", snaplen=snaplen)
                raw = cap.start_pipe()
                click.echo(f"nagleprobe: watching {printable(interface)} "
                           f"({printable(cap.filter)}); Ctrl-C for the final report", err=True)
            try:  # stopped before the capture's header came: the report of nothing
                if capture == "-":
                    raw = sys.stdin.buffer
                elif cap is None:
                    try:  # a FIFO blocks here until something opens it for writing
                        raw = open(follow or capture, "rb")
                    except OSError as e:
                        raise CaptureError(name, e.strerror or str(e)) from None
                stream = LiveStream(raw, follow=follow is not None, name=name)
                reader = CaptureReader(name, chunk_bytes=LIVE_CHUNK_BYTES, stream=stream)
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


def line_for_nothing(fmt: str) -> str:
    """The final report of a watch stopped before any packet."""
    from .live import LiveAnalyzer
    from .watch import line

    return line(LiveAnalyzer().final({"packets": 0, "skipped": {}, "warnings": []}), fmt)
