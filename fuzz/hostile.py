#!/usr/bin/env python3
"""Run the real CLI against the hostile cases of issue 31, each in its own temporary
directory with a time limit, and check the safe outcome.

    python3 fuzz/hostile.py                   # every case
    python3 fuzz/hostile.py -k url -k glob    # the cases whose name holds one of these
    python3 fuzz/hostile.py --limit 90 --list

Every case must: end within the limit (no hang); leave each file, link, FIFO and device it
found in its directory as it was (hashes before and after); never print a traceback; exit
with a documented status (nagleprobe.errors.ExitStatus), the one the issue expects; write a
one-line error when it fails; and write well-formed XML for --junit. The expected outcomes
are listed in fuzz/README.md. Not part of the test suite: the cases take minutes (the URL
ones wait for time-outs) and need root for the device node. Prints a line per case, then
"N cases tried, M failed" and the failures; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hostile_env import (
    ROOT,
    SAMPLES,
    Result,
    damaged_inputs,
    epb_before_idb,
    fifo_reader,
    http_server,
    nagleprobe,
    snapshot,
)

sys.path.insert(0, str(ROOT))
from nagleprobe.errors import ExitStatus  # noqa: E402  (this tree's, as the CLI runs it)

SPLIT = SAMPLES / "echo_split_lo.pcap"  # 107 packets, 19 stalls: check exits 1
NODELAY = SAMPLES / "echo_nodelay_lo.pcap"  # no stall: check exits 0
SPLIT_PACKETS = 107
DOCUMENTED = {int(s) for s in ExitStatus}
OK, STALLS, USAGE, BAD = (int(ExitStatus.OK), int(ExitStatus.STALLS_FOUND),
                          int(ExitStatus.USAGE), int(ExitStatus.BAD_CAPTURE))
# a failed write's own status (issue 31: e.g. 7 OUTPUT_FAILED), if this tree has one
WRITE_FAILED = {int(s) for s in ExitStatus if "OUTPUT" in s.name or "WRITE" in s.name}
# what XML 1.0 forbids
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
MARK = "zz9"  # follows the hostile character in each hostile name


@dataclass
class Case:
    """A command line and what a safe run of it looks like."""

    name: str
    args: list
    expect: set[int]  # the exit statuses the issue allows
    one_line_error: bool = False  # stderr is exactly one line
    stdout: int | None = None  # a file descriptor instead of the pipe
    during: Callable | None = None  # run beside the process (signals, deletions)
    check: Callable[[Result], list[str]] | None = None  # more problems with the result
    junit: str | None = None  # a JUnit file the run writes: it must be well-formed
    may_vanish: Callable[[str], bool] = lambda k: False  # inputs the case deletes itself


@dataclass
class Env:
    """What the cases share: the sample's bytes (served by URL), a descriptor on /dev/full,
    and the servers to stop after the cases."""

    body: bytes
    full: int
    servers: list = field(default_factory=list)


def copy(src: Path, dst: Path | bytes) -> None:
    shutil.copyfile(src, dst)


def mentions(text: str, what: str) -> Callable[[Result], list[str]]:
    def check(r: Result) -> list[str]:
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        return [] if text in out else [f"output does not mention {text!r}"]
    return check


def json_packets(n: int) -> Callable[[Result], list[str]]:
    def check(r: Result) -> list[str]:
        try:
            got = json.loads(r.stdout)["capture"]["packets"]
        except (ValueError, KeyError, TypeError) as e:
            return [f"no JSON document on stdout ({e})"]
        return [] if got == n else [f"{got} packets read, expected {n} (each file once)"]
    return check


# ------------------------------------------------------------------ the cases
def globs_and_dirs(d: Path, env: Env) -> list[Case]:
    (d / "loop/sub").mkdir(parents=True)
    copy(SPLIT, d / "loop/sub/x.pcap")
    os.symlink("..", d / "loop/sub/up")
    os.symlink(".", d / "loop/self")
    (d / "same/sub").mkdir(parents=True)
    copy(SPLIT, d / "same/sub/x.pcap")
    os.symlink(".", d / "same/self")  # the glob matched x.pcap 41 times
    (d / "dangling").mkdir()
    copy(SPLIT, d / "dangling/x.pcap")
    os.symlink("nowhere.pcap", d / "dangling/gone.pcap")
    return [
        Case("glob through symlink loops", ["analyze", "--format", "json", "loop/**/*.pcap"],
             {OK}, check=json_packets(SPLIT_PACKETS)),
        Case("glob meeting one file 41 times", ["analyze", "--format", "json",
                                                "same/**/*.pcap"],
             {OK}, check=json_packets(SPLIT_PACKETS)),
        Case("dangling .pcap symlink in a directory", ["check", "dangling"], {STALLS, BAD},
             check=mentions("gone.pcap", "the dangling link")),
    ]


def emptied_during_check(d: Path, env: Env) -> list[Case]:
    cases = []
    for after in (0.6, 1.0, 1.4):  # seconds after the start: listing, reading, later
        caps = d / f"caps{after}"
        caps.mkdir()
        for i in range(40):
            copy(NODELAY, caps / f"c{i:02d}.pcap")

        def delete(proc, caps=caps, after=after) -> None:
            time.sleep(after)
            for f in sorted(caps.glob("*.pcap"), reverse=True):
                f.unlink(missing_ok=True)
                time.sleep(0.01)

        cases.append(Case(f"directory emptied during check, from {after} s",
                          ["check", "-j", "1", caps.name], {OK, BAD}, during=delete,
                          may_vanish=lambda k, c=caps.name: k.startswith(c + "/")))
    return cases


def urls(d: Path, env: Env) -> list[Case]:
    cases = []
    for mode, what, expect, one in (("stall", "URL stalling after headers + 1000 bytes",
                                     {BAD}, True),
                                    ("silent", "URL whose server never answers", {BAD}, True),
                                    ("short", "URL with Content-Length beyond its body",
                                     {OK}, False)):
        cm = http_server(mode, env.body)
        url = cm.__enter__()
        env.servers.append(cm)
        for cmd in (["analyze"], ["check", "--max-stalls", "100"]):
            # analyze: one error line on stderr; check: the capture's ERROR verdict line in
            # its report (standard output), as for every unreadable capture it checks
            check = (mentions("warning", "a cut-short warning") if not one else
                     mentions("127.0.0.1", "the URL") if cmd[0] == "analyze" else
                     mentions(f"ERROR {url}: cannot read", "the ERROR verdict"))
            cases.append(Case(f"{what}: {cmd[0]}", [*cmd, url], expect,
                              one_line_error=one and cmd[0] == "analyze", check=check))
    return cases


def watch_fifo(d: Path, env: Env) -> list[Case]:
    cases = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        fifo = d / f"nobody-{sig.name}.fifo"
        os.mkfifo(fifo)

        def stop(proc, sig=sig) -> None:
            time.sleep(2)
            os.killpg(proc.pid, sig)

        def final_report(r: Result) -> list[str]:
            return [] if r.stdout.strip() else ["no final report on stdout"]

        for args in ([fifo.name], ["--follow", fifo.name]):
            cases.append(Case(f"watch {' '.join(args[:-1] + ['FIFO'])} with no writer, "
                              f"{sig.name}", ["watch", *args], {OK}, during=stop,
                              check=final_report))
    return cases


def same_input_and_output(d: Path, env: Env) -> list[Case]:
    copy(SPLIT, d / "e.pcap")
    copy(SPLIT, d / "f.pcap")
    (d / "dir").mkdir()
    copy(SPLIT, d / "dir/member.pcap")
    return [
        Case("analyze --html e.pcap e.pcap", ["analyze", "--html", "e.pcap", "e.pcap"],
             {USAGE}, one_line_error=True),
        Case("check --junit f.pcap f.pcap", ["check", "--junit", "f.pcap", "f.pcap"],
             {USAGE}, one_line_error=True),
        Case("check --junit into a member of the checked directory",
             ["check", "--junit", "dir/member.pcap", "dir"], {USAGE}, one_line_error=True),
    ]


def annotate_special(d: Path, env: Env) -> list[Case]:
    copy(SPLIT, d / "a.pcap")
    os.mknod(d / "null", 0o666 | 0o020000, os.makedev(1, 3))  # a char device, as /dev/null
    os.mkfifo(d / "out.fifo")
    os.symlink("/proc/self/fd/1", d / "stdout-link")
    got: list[bytes] = []
    readers: list = []

    def read_fifo(proc) -> None:
        readers.append(fifo_reader(d / "out.fifo", got))

    def pcapng_in_fifo(r: Result) -> list[str]:
        readers[0].join(5)
        ok = got and got[0][:4] == b"\x0a\x0d\x0d\x0a" and len(got[0]) > 1000
        return [] if ok else [f"the FIFO's reader got {len(got[0]) if got else 0} bytes, "
                              "not a pcapng"]

    return [
        Case("annotate -o a char device (mknod 1,3)", ["annotate", "-o", "null", "a.pcap"],
             {OK, USAGE}),
        Case("annotate -o a FIFO with a reader", ["annotate", "-o", "out.fifo", "a.pcap"],
             {OK}, during=read_fifo, check=pcapng_in_fifo),
        Case("annotate -o a symlink to /proc/self/fd/1",
             ["annotate", "-o", "stdout-link", "a.pcap"], {OK, USAGE}),
    ]


def dev_full(d: Path, env: Env) -> list[Case]:
    copy(SPLIT, d / "s.pcap")
    return [Case(f"{' '.join(a)} > /dev/full", [*a, "s.pcap"], WRITE_FAILED,
                 one_line_error=True, stdout=env.full, check=mentions("cannot write", "it"))
            for a in (["analyze"], ["analyze", "--format", "json"], ["check"], ["watch"])]


def epb_first(d: Path, env: Env) -> list[Case]:
    (d / "orphans.pcapng").write_bytes(epb_before_idb())
    return [Case("EPB before IDB", ["analyze", "orphans.pcapng"], {OK},
                 check=mentions("before any interface description", "the warning")),
            Case("EPB before IDB, --strict", ["analyze", "--strict", "orphans.pcapng"], {BAD},
                 one_line_error=True)]


HOSTILE = {"U+FFFE": "\ufffe", "U+FFFF": "\uffff", "control": "\x01", "escape": "\x1b",
           "newline": "\n", "carriage return": "\r", "bidi override": "\u202e",
           "undecodable byte": "\udcff"}
OUTPUTS = {"text": (["analyze"], OK), "json": (["analyze", "--format", "json"], OK),
           "wireshark": (["analyze", "--format", "wireshark"], OK),
           "html": (["analyze", "--html", "r.html"], OK), "check": (["check"], STALLS),
           "junit": (["check", "--junit", "j.xml"], STALLS),
           "github": (["check", "--github"], STALLS)}


def hostile_names(d: Path, env: Env) -> list[Case]:
    cases = []
    for what, ch in HOSTILE.items():
        name = os.fsencode(f"h{ch}{MARK}.pcap")
        copy(SPLIT, os.path.join(os.fsencode(d), name))
        for out, (args, status) in OUTPUTS.items():
            def raw_gone(r: Result, ch=ch, out=out) -> list[str]:
                texts = [r.stdout, r.stderr]
                if out == "html" and (d / "r.html").exists():
                    texts.append((d / "r.html").read_bytes())
                problems = []
                for t in texts:
                    s = t.decode("utf-8", "surrogateescape")
                    if out != "json" and ch + MARK in s:  # JSON: its own escapes, checked
                        problems.append(f"the raw {what} in the output")
                    if out in ("html", "junit") and XML_FORBIDDEN.search(s):
                        problems.append("a character XML 1.0 forbids in the output")
                if out == "json":
                    try:
                        json.loads(r.stdout.decode("utf-8"))
                    except ValueError as e:
                        problems.append(f"stdout is no JSON: {e}")
                return sorted(set(problems))

            cases.append(Case(f"name with {what} x {out}", [*args, name], {status},
                              check=raw_gone, junit="j.xml" if out == "junit" else None))
    return cases


# ------------------------------------------------------------------ running and judging
def judge(case: Case, r: Result, before: dict, after: dict, d: Path) -> list[str]:
    problems = []
    if r.status is None:
        return [f"hung: killed after {r.seconds:.0f} s"]
    err = r.stderr.decode("utf-8", "replace")
    if "Traceback" in err:
        problems.append("a traceback: " + err.strip().splitlines()[-1][:160])
    if r.status not in DOCUMENTED:
        problems.append(f"exit {r.status} is no documented status")
    if r.status not in case.expect:
        wanted = (" or ".join(map(str, sorted(case.expect))) if case.expect else
                  "a status of its own (this tree has none)")
        problems.append(f"exit {r.status}, expected {wanted}"
                        + (f" ({err.strip().splitlines()[-1][:120]})" if err.strip() else ""))
    if case.one_line_error and r.status not in (OK, STALLS):
        lines = [line for line in err.splitlines() if line.strip()]
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, not one error line")
    problems += damaged_inputs(before, after, case.may_vanish)
    if case.junit:
        p = d / case.junit
        try:
            ET.parse(p)
        except (ET.ParseError, OSError) as e:
            problems.append(f"--junit file not well-formed XML: {e}")
    if case.check and r.status is not None:
        problems += case.check(r)
    return problems


def run_group(make: Callable, pick: Callable[[str], bool], limit: float, env: Env,
              results: list, verbose: bool = False) -> None:
    """Build the cases of `make` in a fresh directory, run the picked ones, judge each."""
    with tempfile.TemporaryDirectory(prefix="nagleprobe-hostile-") as tmp:
        d = Path(tmp)
        try:
            for case in make(d, env):
                if not pick(case.name):
                    continue
                for out in ("r.html", "j.xml"):
                    (d / out).unlink(missing_ok=True)
                before = snapshot(d)
                r = nagleprobe(case.args, d, limit, case.stdout, case.during)
                problems = judge(case, r, before, snapshot(d), d)
                results.append((case.name, problems))
                status = "hung" if r.status is None else f"exit {r.status}"
                print(f"{'FAIL' if problems else 'ok  '} {shown(case.name)} ({status}, "
                      f"{r.seconds:.1f} s)" + "".join(f"\n       {p}" for p in problems),
                      flush=True)
                if verbose:
                    tail = r.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
                    print("".join(f"       | {line[:150]}\n" for line in tail), end="")
        finally:
            while env.servers:
                env.servers.pop().__exit__(None, None, None)


def shown(name: str) -> str:
    return name.encode("unicode_escape").decode()


GROUPS = [globs_and_dirs, emptied_during_check, urls, watch_fifo, same_input_and_output,
          annotate_special, dev_full, epb_first, hostile_names]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=float, default=60.0,
                    help="seconds a case may run before it counts as hung (default 60)")
    ap.add_argument("-k", action="append", default=[],
                    help="run only the cases whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("-v", action="store_true", help="show the end of each run's stderr")
    a = ap.parse_args()
    words = [w.lower() for w in a.k]

    def pick(name: str) -> bool:
        return not words or any(w in name.lower() for w in words)

    results: list = []
    with open("/dev/full", "wb") as full:
        env = Env(SPLIT.read_bytes(), full.fileno())
        for g in GROUPS:
            if a.list:
                with tempfile.TemporaryDirectory() as tmp:
                    print("\n".join(shown(c.name) for c in g(Path(tmp), env) if pick(c.name)))
                while env.servers:
                    env.servers.pop().__exit__(None, None, None)
            else:
                run_group(g, pick, a.limit, env, results, a.v)
    if a.list:
        return 0
    failed = [(n, p) for n, p in results if p]
    print(f"\n{len(results)} cases tried, {len(failed)} failed")
    for n, p in failed:
        print(f"  {shown(n)}: {'; '.join(p)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
