"""A benchmark run's printed summary, appended to benchmarks/RESULTS.md (the Performance page).

    ap = argparse.ArgumentParser(); bench_results.add_argument(ap); args = ap.parse_args()
    ...  # the runs, one JSON line each
    with bench_results.recorded("bench_cwalk.py", args.results, trees=[tree]):
        print(...)  # the summary: shown as always, and appended as a dated entry

An entry is `## DATE TIME UTC · SCRIPT ARGS · commit HASH` (the commit of each tree measured,
`+changes` when its tracked files differ from it), the machine, then the summary as
Markdown: its table lines kept together, every other line a paragraph of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"


def add_argument(ap: argparse.ArgumentParser) -> None:
    """The `--results FILE` option every recording benchmark takes (`-`: record nothing)."""
    ap.add_argument("--results", default=str(RESULTS),
                    help="append the summary to this file (default: benchmarks/RESULTS.md; "
                         "'-' appends nowhere)")


def commit(tree: Path) -> str:
    """The short hash of `tree`'s checked-out commit, `+changes` when its tracked files differ."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    changed = git("diff", "--quiet", "HEAD").returncode != 0
    return head.stdout.strip() + ("+changes" if changed else "")


def markdown(summary: str) -> str:
    """The printed summary as Markdown: table rows kept together, other lines one paragraph
    each (blank lines separate every block, so a table is never glued to a line above it)."""
    blocks: list[list[str]] = []
    for line in summary.strip("\n").splitlines():
        table = line.startswith("|")
        if not line.strip():
            continue
        if table and blocks and blocks[-1][0].startswith("|"):
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return "\n\n".join("\n".join(b) for b in blocks)


def entry(script: str, argv: list[str], summary: str, commits: list[str],
          when: datetime.datetime) -> str:
    """One dated entry of RESULTS.md."""
    command = " ".join([script, *argv])
    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
               f"{platform.python_version()}, {platform.system()} {platform.release()}, load "
               f"average {os.getloadavg()[0]:.1f}")
    return (f"## {when:%Y-%m-%d %H:%M} UTC · {command} · commit {', '.join(commits)}\n\n"
            f"Machine: {machine}.\n\n{markdown(summary)}\n")


class _Tee(io.TextIOBase):
    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


@contextlib.contextmanager
def recorded(script: str, results: str, trees: list[Path] | None = None,
             argv: list[str] | None = None) -> Iterator[None]:
    """Print as usual inside; on a normal exit, append what was printed to `results` as an
    entry (not when `results` is '-', nor when the block raised: a failed run is no result)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, buf)):
        yield
    if results == "-":
        return
    text = entry(script, sys.argv[1:] if argv is None else argv, buf.getvalue(),
                 [commit(t) for t in trees or [HERE.parent]],
                 datetime.datetime.now(datetime.timezone.utc))
    path = Path(results)
    before = path.read_text() if path.exists() else ""
    with path.open("a") as f:
        f.write(("\n" if before and not before.endswith("\n\n") else "") + text)
    print(f"\n(appended to {path})", file=sys.stderr)
