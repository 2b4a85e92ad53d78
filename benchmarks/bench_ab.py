"""Two builds of nagleprobe side by side on one capture, alternated in one run (not a test;
run it by hand): this machine's speed drifts by tens of percent within an hour, so builds
are only compared run against run, never across runs.

    git worktree add /tmp/np-old <commit> && (cd /tmp/np-old && python3 setup.py build_ext --inplace)
    python3 benchmarks/bench_ab.py /tmp/np-old . [--size 10000000] [--rounds 5] [--json]

Each build is a source tree with its compiled parts built in place, and its Python modules
byte-compiled first (`compileall`), as pip leaves an installed package: where bytecode is
not written (PYTHONDONTWRITEBYTECODE, set on this machine) every run would otherwise compile
the package's source again (0.07 CPU-s of each run). The capture is
bench_scaling's (copies of five sample conversations every 20 ms of capture time, cached in
benchmarks/out/). Every round runs `nagleprobe analyze` of each build once, in alternating
order, timed whole (wall, CPU, peak RSS, hypervisor steal, as bench_scaling measures them).
Prints one JSON object per run, then per build the median and range of each figure, and
the new build's median wall time relative to the old one's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scaling import WORKLOADS, capture, run  # noqa: E402


def compiled(tree: Path) -> Path:
    """`tree`, its modules byte-compiled (as an installed package's are)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "nagleprobe")],
                   check=True)
    return tree


def command(tree: Path, pcap: Path, fmt: str) -> list[str]:
    """`nagleprobe analyze` of the build in `tree` (imported from there, not installed; see
    `compiled`), through the console entry point as the installed command runs it
    (`cli.run`: it skips the interpreter's teardown where it can; `cli.main` alone pays
    it)."""
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); import nagleprobe.cli as c; "
            "sys.argv[0] = 'nagleprobe'; getattr(c, 'run', c.main)()")
    return [sys.executable, "-c", code, "analyze", "--format", fmt, str(pcap)]


def print_table(what: str, runs: dict[str, list[dict]]) -> None:
    """Per name, the median and range of its runs' wall time, CPU, peak RSS and steal."""
    print(f"| {what} | wall s (median, range) | CPU s | peak RSS MB | steal % |")
    print("| --- | --- | --- | --- | --- |")
    for name, rs in runs.items():
        def cell(key: str, fmt: str = ".2f") -> str:
            v = [x[key] for x in rs if x.get(key) is not None]
            return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})" if v else "-"
        print(f"| {name} | {cell('seconds')} | {cell('cpu_s')} | {cell('peak_rss_mb', '.0f')} "
              f"| {cell('steal_pct', '.0f')} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="source tree of the reference build")
    ap.add_argument("new", type=Path, help="source tree of the build to compare")
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--every-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="the JSON report instead of the text")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="mix",
                    help="the bench_scaling capture's conversations (see bench_cwalk.py)")
    ap.add_argument("--capture", type=Path,
                    help="this capture instead (e.g. bench_synflood's or bench_live's, in "
                         "benchmarks/out/)")
    args = ap.parse_args()
    pcap = args.capture or capture(args.size, args.every_ms, args.workload)
    fmt = "json" if args.json else "text"
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    cmds = {name: command(compiled(getattr(args, name).resolve()), pcap, fmt) for name in runs}
    for r in range(args.rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            tree = getattr(args, name).resolve()
            res = run(cmds[name])
            res.update(build=name, tree=str(tree), round=r, format=fmt, capture=pcap.name)
            print(json.dumps(res), flush=True)
            runs[name].append(res)
    print(f"\n{pcap.name}, {fmt} report, {args.rounds} rounds alternated")
    print_table("build", runs)
    old = statistics.median(x["seconds"] for x in runs["old"])
    new = statistics.median(x["seconds"] for x in runs["new"])
    rss = [statistics.median(x["peak_rss_mb"] for x in runs[b]) for b in ("old", "new")]
    print(f"\nnew / old median wall time: {new / old:.3f}; peak RSS: {rss[1] / rss[0]:.3f}")


if __name__ == "__main__":
    main()
