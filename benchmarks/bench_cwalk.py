"""nagleprobe against the yardstick of issue 17, in paired runs (not a test; run it by hand):

    python3 benchmarks/bench_cwalk.py [--size 10000000] [--rounds 7] [--tree .] [--tree OLD ...]

`benchmarks/cwalk.c` (built here with `cc -O2`) walks the capture's records, pulls the TCP
fields into arrays and numbers the connections with a hash table: the least work any TCP
analysis must do. Every round runs it, `nagleprobe analyze` (text report) and `nagleprobe
analyze --format json` of the build in `--tree`, one after the other, in an order that
rotates each round (this machine's speed drifts, so only runs of one session are compared).
Prints one JSON object per run, then per command the median and range of wall time, CPU
time and peak RSS, and the ratios the issue asks about: text / C walk (goal 2) and JSON /
text (goal 1.3), of the medians and within each round; the summary is appended to
benchmarks/RESULTS.md with the date and commit (`--results`). The capture is
bench_scaling's, cached in benchmarks/out/.

`--workload stall-dense` builds the capture of stalled conversations only (issue 35): the
per-stall work then dominates, where the mix measures the per-packet work.

With several `--tree`s, every round runs each build's text and JSON report too (all
commands in a rotating order), and the ratios are given per build: this machine's ratio
itself drifts by 10 % from one quarter of an hour to the next (the C walk and the
three-threaded analysis feel its slow spells differently), so two builds are compared only
within the same rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_results  # noqa: E402
from bench_ab import command, compiled, print_table  # noqa: E402
from bench_scaling import WORKLOADS, capture, run  # noqa: E402

HERE = Path(__file__).resolve().parent


def build_cwalk() -> Path:
    out = HERE / "out" / "cwalk"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-O2", "-o", str(out), str(HERE / "cwalk.c")], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--every-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="mix",
                    help="mix: stalled, clean, bulk and TCP_NODELAY conversations; "
                         "stall-dense: stalled conversations only (a sixth of the packets "
                         "are stall events)")
    ap.add_argument("--tree", type=Path, action="append",
                    help="nagleprobe source tree (default: this one); repeat to compare builds")
    bench_results.add_argument(ap)
    args = ap.parse_args()
    pcap = capture(args.size, args.every_ms, args.workload)
    trees = [compiled(t.resolve()) for t in args.tree or [HERE.parent]]
    tag = (lambda i: "") if len(trees) == 1 else (lambda i: f"@{trees[i].name}#{i}")
    cmds = {"cwalk": [str(build_cwalk()), str(pcap)]}
    for i, tree in enumerate(trees):
        cmds.update({f"text{tag(i)}": command(tree, pcap, "text"),
                     f"json{tag(i)}": command(tree, pcap, "json")})
    names = list(cmds)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    run(cmds["cwalk"])  # warm the page cache
    for r in range(args.rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            res = run(cmds[name])
            res.update(command=name, round=r, packets=args.size)
            print(json.dumps(res), flush=True)
            runs[name].append(res)
    with bench_results.recorded("bench_cwalk.py", args.results, trees):
        print(f"\n{args.size} packets ({args.workload}), {args.rounds} rounds, order rotated "
              "each round")
        print_table("command", runs)
        med = {n: statistics.median(x["seconds"] for x in rs) for n, rs in runs.items()}
        for i in range(len(trees)):
            text, js = f"text{tag(i)}", f"json{tag(i)}"
            print(f"\n{trees[i]}: text / C walk: {med[text] / med['cwalk']:.2f} (goal 2)   "
                  f"JSON / text: {med[js] / med[text]:.2f} (goal 1.3)")
            # the same ratios within each round (its commands ran back to back)
            for (a, b), goal in (((text, "cwalk"), 2.0), ((js, text), 1.3)):
                r = [x["seconds"] / y["seconds"] for x, y in zip(runs[a], runs[b])]
                print(f"per round {a} / {b}: median {statistics.median(r):.2f}, range "
                      f"{min(r):.2f}-{max(r):.2f}, {sum(v < goal for v in r)} of {len(r)} under "
                      f"{goal}")


if __name__ == "__main__":
    main()
