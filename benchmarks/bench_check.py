"""`nagleprobe check` against `nagleprobe analyze` on one capture, two builds alternated in one
run (not a test; run it by hand, it takes minutes):

    git worktree add /tmp/np-old <commit> && (cd /tmp/np-old && python3 setup.py build_ext --inplace)
    python3 benchmarks/bench_check.py /tmp/np-old . [--connections 100000] [--rounds 3]
    python3 benchmarks/bench_check.py /tmp/np-old . --capture benchmarks/out/bench_10000000_every20ms.pcap

The gate must cost at most 1.2x the analysis (issue 34). The default capture is N short
connections with one stall each (bench_scaling's "one-stall" workload, built once into
benchmarks/out/: copies of the one stalled request of samples/excerpt_echo_split_lo.pcap,
ports and times shifted), the shape where per-flow work shows most: every flow fails the default budget.
Each round runs, per build and in alternating order, `analyze --format json`, `check
--junit F --github` and `check --format json` (outputs to /dev/null, the JUnit file into
benchmarks/out/), timed whole as bench_ab times them (wall, CPU, peak RSS, steal). Prints one
JSON object per run, the table per build and command, and per build check/analyze of the
median CPU time, wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_results  # noqa: E402
from bench_ab import compiled, print_table  # noqa: E402
from bench_analyze import ROOT  # noqa: E402
from bench_scaling import capture, run  # noqa: E402

PACKETS_PER_CONNECTION = 6  # of bench_scaling's "one-stall" workload
EVERY_MS = 1.0  # a new connection every ms of capture time (each lasts ~44 ms)


def connections_capture(n: int) -> Path:
    """The capture of `n` connections with one stall each (bench_scaling's, cached)."""
    return capture(n * PACKETS_PER_CONNECTION, EVERY_MS, "one-stall")


def commands(tree: Path, pcap: Path, junit: Path) -> dict[str, list[str]]:
    """The runs compared, through the console entry point as the installed command runs it
    (bench_ab.command's way, with other arguments)."""
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); import nagleprobe.cli as c; "
            "sys.argv[0] = 'nagleprobe'; getattr(c, 'run', c.main)()")
    base = [sys.executable, "-c", code]
    gate = ["check", "--no-progress", "--no-config"]
    return {"analyze --format json": [*base, "analyze", "--format", "json", str(pcap)],
            "check --junit --github": [*base, *gate, "--junit", str(junit), "--github",
                                       str(pcap)],
            "check --format json": [*base, *gate, "--format", "json", str(pcap)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="source tree of the reference build")
    ap.add_argument("new", type=Path, help="source tree of the build to compare")
    ap.add_argument("--connections", type=int, default=100_000)
    ap.add_argument("--capture", type=Path, help="this capture instead of the connections one")
    ap.add_argument("--rounds", type=int, default=3)
    bench_results.add_argument(ap)
    args = ap.parse_args()
    pcap = args.capture or connections_capture(args.connections)
    junit = ROOT / "benchmarks" / "out" / "bench_check_junit.xml"
    trees = {name: compiled(getattr(args, name).resolve()) for name in ("old", "new")}
    cmds = {name: commands(tree, pcap, junit) for name, tree in trees.items()}
    runs: dict[str, list[dict]] = {f"{b} {c}": [] for b in trees for c in cmds[b]}
    for r in range(args.rounds):
        for b in (("old", "new") if r % 2 == 0 else ("new", "old")):
            for what, cmd in cmds[b].items():
                res = run(cmd)
                res.update(build=b, command=what, round=r, capture=pcap.name)
                print(json.dumps(res), flush=True)
                runs[f"{b} {what}"].append(res)
    with bench_results.recorded("bench_check.py", args.results, trees=list(trees.values())):
        print(f"\n{pcap.name}, {args.rounds} rounds, builds alternated")
        print_table("build, command", runs)
        print("\n| build | command | check/analyze CPU s | wall s | peak RSS |")
        print("| --- | --- | ---: | ---: | ---: |")
        for b in trees:
            base = runs[f"{b} analyze --format json"]
            for what in list(cmds[b])[1:]:
                ratios = [statistics.median(x[k] for x in runs[f"{b} {what}"])
                          / statistics.median(x[k] for x in base)
                          for k in ("cpu_s", "seconds", "peak_rss_mb")]
                print(f"| {b} | {what} | " + " | ".join(f"{x:.2f}x" for x in ratios) + " |")


if __name__ == "__main__":
    main()
