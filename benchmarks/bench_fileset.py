"""File-set benchmark: `nagleprobe analyze` on a capture as one file vs the same capture cut
into a set of files by `editcap -c` (the connections cross the file boundaries).

Builds (or reuses) the replicated capture of bench_analyze.py, splits it into --files pieces
in benchmarks/out/, then runs `nagleprobe analyze --format json` on the whole file and on the
set's directory alternately (paired runs, --repeat pairs) and prints the median wall time,
packets per second and peak RSS of each, and that both found the same stalls. Not a test:

    python3 benchmarks/bench_fileset.py [--packets 2000000] [--files 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import DEFAULT_SOURCES, ROOT, build  # noqa: E402


def run(args: list[str]) -> tuple[float, int, dict]:
    """Wall seconds, peak RSS (MB, by GNU time: a forked child's own ru_maxrss starts at
    its parent's) and the JSON document of one analyze process."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "nagleprobe",
                        "analyze", "--format", "json", "-q", *args], capture_output=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"analyze {args} failed: {p.stderr.decode()[-300:]}")
    return wall, int(p.stderr.split()[-1]) // 1024, json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if shutil.which("editcap") is None or not os.path.exists("/usr/bin/time"):
        sys.exit("needs editcap (wireshark-common) and GNU time")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    whole = out / f"bench_{args.packets}.pcap"
    if not whole.exists():
        build(whole, args.packets, [str(ROOT / s) for s in DEFAULT_SOURCES])
    pieces = out / f"set_{args.packets}_{args.files}"
    if not pieces.exists():
        pieces.mkdir()
        subprocess.run(["editcap", "-F", "pcap", "-c", str(-(-args.packets // args.files)),
                        str(whole), str(pieces / "piece.pcap")], check=True)
    n_files = len(list(pieces.iterdir()))
    times: dict[str, list[float]] = {"one file": [], "set": []}
    rss: dict[str, list[int]] = {"one file": [], "set": []}
    docs = {}
    for _ in range(args.repeat):  # paired: one of each, alternately
        for label, target in (("one file", str(whole)), ("set", str(pieces))):
            wall, mb, doc = run([target])
            times[label].append(wall)
            rss[label].append(mb)
            docs[label] = doc
    a, b = docs["one file"], docs["set"]
    same = (len(a["stalls"]) == len(b["stalls"])
            and [s["times"] for s in a["stalls"]] == [s["times"] for s in b["stalls"]])
    print(f"{args.packets} packets, {whole.stat().st_size / 1e6:.0f} MB; set of {n_files} files; "
          f"{args.repeat} paired runs (medians)")
    for label in times:
        med = statistics.median(times[label])
        print(f"  {label:<8}: {med:6.2f} s  {args.packets / med / 1e6:5.2f} M packets/s  "
              f"peak RSS {statistics.median(rss[label])} MB  "
              f"(runs: {', '.join(f'{t:.2f}' for t in times[label])})")
    ratio = [s / o for s, o in zip(times["set"], times["one file"])]
    print(f"  set / one file, per pair: median {statistics.median(ratio):.3f} "
          f"(min {min(ratio):.3f}, max {max(ratio):.3f}); same stalls: {same} "
          f"({len(b['stalls'])})")


if __name__ == "__main__":
    main()
