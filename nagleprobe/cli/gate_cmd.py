"""The CI gate: `nagleprobe check`, and `nagleprobe record`, which captures a command's
traffic and (with --check) runs the gate on it with the same budget options."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from ..errors import ExitStatus, printable
from ..output import discard_stdout, open_output, refuse_report_file, to_stdout
from ..read import URL_TIMEOUT_S
from . import common
from .common import DEBUG_OPTION, URL_TIMEOUT_OPTION, host_option, one_line_errors, print_notes

if TYPE_CHECKING:
    from ..check import CheckRun

GATE_HELP = ("Exit status: 0 every capture within budget, 1 a capture over budget (or worse "
             "than --baseline), 2 usage error (options, pyproject settings, a --junit path "
             "that is a capture, a --baseline that is no saved report), 3 a "
             "capture unreadable (or no capture file found; with --strict also a damaged one), "
             "4 internal error, 6 a capture with no TCP flow to check (EMPTY; --allow-empty "
             "permits it), 7 output not written "
             "(standard output or --junit: disk full, I/O error), 8 a capture within budget "
             "whose time stamps are too coarse to show a delayed-ACK stall (UNRESOLVED: "
             "steps of ten milliseconds or more). With several captures the "
             "most severe verdict wins: 4 > 3 > 8 > 6 > 1 > 0.")
RECORD_HELP = ("Exit status: the command's own status; 5 capture not possible (not root, no "
               "tcpdump, no such interface, output not writable), 127 command not found, "
               "2 usage error, 4 internal error. With --check, a command that succeeded is followed by the "
               "gate's status (0, 1, 3, 4, 6, 7 or 8; see `nagleprobe check --help`).")

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
    click.option("--host", "hosts", multiple=True, callback=host_option, metavar="H",
                 help="Check only flows with an endpoint at this address or in this network "
                      "(repeatable)."),
    click.option("--baseline", type=click.Path(dir_okay=False), metavar="FILE",
                 help="Also fail a capture worse than this report (saved with analyze "
                      "--format json): more stalls, or more time lost or a higher p99 request "
                      "latency by over 10 % and 1 ms, per client host and server. Without "
                      "limits set, only this is checked."),
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
    DEBUG_OPTION,
]


def _gate_options(f):  # type: ignore[no-untyped-def]
    for option in reversed(_GATE_OPTIONS):
        f = option(f)
    return f


@click.command(epilog=GATE_HELP, short_help="CI gate: fail captures over the stall budget.")
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


@click.command(epilog=RECORD_HELP, context_settings={"allow_interspersed_args": False},
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
    from ..tcpdump import RecordError
    from ..tcpdump import record as run_recorded

    with one_line_errors(bool(opts["debug"]), "recording", output, {}):
        try:
            result = run_recorded(list(command), output, interface=interface, ports=ports,
                                  bpf=bpf, snaplen=snaplen)
        except RecordError as e:
            if opts["debug"]:
                traceback.print_exc()
            click.echo(f"nagleprobe: error: {e}", err=True)
            sys.exit(e.status)
    click.echo(f"nagleprobe: {result.summary()}", err=True)
    if result.returncode != 0 or not run_gate:
        sys.exit(result.returncode)
    _gate([output], ports, opts)


def _gate(captures: list[str], ports: tuple[int, ...], opts: dict, jobs: int | None = None,
          merge: bool = False, dask: str | None = None, progress: bool | None = None,
          url_timeout: float = URL_TIMEOUT_S) -> NoReturn:
    """`_run_gate`, then exit with its status; whatever goes wrong is one line and the
    status `one_line_errors` gives it (a bug: 4, never 1, which CI reads as over budget)."""
    from ..fileset import set_name

    with one_line_errors(bool(opts["debug"]), "checking", set_name(captures), {}):
        status = _run_gate(captures, ports, opts, jobs, merge, dask, progress, url_timeout)
    sys.exit(status)


def _run_gate(captures: list[str], ports: tuple[int, ...], opts: dict, jobs: int | None = None,
              merge: bool = False, dask: str | None = None,
              progress: bool | None = None, url_timeout: float = URL_TIMEOUT_S) -> ExitStatus:
    """Load the budget, check the captures (on the Dask scheduler at `dask` if given), write
    every requested output; the exit status. `progress`: show it (None: on a terminal)."""
    from ..budget import command_budget
    from ..check import BudgetError, expand_targets, run_check
    from ..compare import Baseline
    from ..errors import CaptureError
    from ..check_output import junit_pieces

    try:
        budget, source = command_budget(
            Path(opts["config"]) if opts["config"] else None, not opts["no_config"],
            max_stalls=opts["max_stalls"], max_stall_ms=opts["max_stall_ms"],
            max_lost_share=opts["max_lost_share"], min_confidence=opts["min_confidence"],
            ports=ports, hosts=opts["hosts"], allow_empty=True if opts["allow_empty"] else None,
            baseline=opts["baseline"])
        baseline = Baseline.load(opts["baseline"]) if opts["baseline"] else None
    except (BudgetError, CaptureError) as e:
        click.echo(f"nagleprobe: error: {printable(str(e))}", err=True)
        return ExitStatus.USAGE
    targets = expand_targets(captures)
    print_notes(targets.notes)
    if opts["junit"]:
        refuse_report_file(opts["junit"], "--junit", "the JUnit report",
                           [t.path for t in targets])
    client = None
    if dask is not None:
        from ..fleet import SchedulerError, connect

        try:
            client = connect(dask)
        except SchedulerError as e:
            click.echo(f"nagleprobe: error: {printable(str(e))}", err=True)
            return ExitStatus.USAGE
    bar = None
    if progress or (progress is None and len(targets) > 1 and sys.stderr.isatty()):
        from ..progress import FleetProgress

        bar = FleetProgress(len(targets))
    try:
        run = run_check(targets, budget, jobs=jobs, with_documents=opts["fmt"] == "json",
                        config=str(source) if source else None, strict=bool(opts["strict"]),
                        merge=merge, client=client, progress=bar, url_timeout=url_timeout,
                        baseline=baseline)
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
        with open_output(opts["junit"], "the JUnit report", [t.path for t in targets]) as out:
            for piece in junit_pieces(run):
                out.write(piece.encode("utf-8"))
    _print_run(run, opts)
    return run.status


def _print_run(run: CheckRun, opts: dict) -> None:
    """The verdicts on standard output: text (wrapped to a person's terminal; a pipe keeps
    each verdict on one line) or JSON; --github's annotations before them (on standard
    error with JSON)."""
    from ..check_output import render_github, render_text

    try:
        with to_stdout():
            if opts["github"]:
                click.echo(render_github(run), nl=False, err=opts["fmt"] == "json")
            if opts["fmt"] == "json":
                for piece in run.json_pieces():
                    sys.stdout.write(piece)
                sys.stdout.write("\n")
            elif common.stdout_is_terminal():
                from ..text_report import fit_lines

                click.echo("\n".join(fit_lines(render_text(run).splitlines(),
                                               common.text_width())) + "\n", nl=False)
            else:
                click.echo(render_text(run), nl=False)
    except BrokenPipeError:  # its reader took what it wanted (`| head`): the verdict stands
        discard_stdout()
