"""Time and peak memory of `nagleprobe annotate` (not a test; run it by hand):

    python3 benchmarks/bench_annotate.py [--size 1000000] [--repeat 3]

On the benchmark capture of bench_scaling (built once into benchmarks/out/) and its pcapng
copy: `nagleprobe analyze` (text report) for comparison, then `annotate` of the pcap
(converted to pcapng) and of the pcapng (copied). Prints one JSON object per run and the
median of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scaling import capture, run, variant  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--every-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    pcap = capture(args.size, args.every_ms)
    pcapng = variant(pcap, "pcapng")
    with tempfile.TemporaryDirectory(dir=pcap.parent) as tmp:
        out = str(Path(tmp) / "annotated.pcapng")
        np = [sys.executable, "-m", "nagleprobe"]
        cases = [("analyze pcap", pcap, [*np, "analyze", "-q", str(pcap)]),
                 ("annotate pcap", pcap, [*np, "annotate", str(pcap), "-o", out])]
        if pcapng is not None:
            cases.append(("annotate pcapng", pcapng, [*np, "annotate", str(pcapng), "-o", out]))
        for name, src, cmd in cases:
            runs = []
            for _ in range(args.repeat):
                r = run(cmd)
                r["case"], r["mb_in"] = name, src.stat().st_size / 1e6
                if name.startswith("annotate"):
                    r["mb_out"] = Path(out).stat().st_size / 1e6
                print(json.dumps(r), flush=True)
                runs.append(r)
            print(f"# {name}: median {statistics.median(r['seconds'] for r in runs):.2f} s "
                  f"(runs {', '.join('%.2f' % r['seconds'] for r in runs)}), CPU "
                  f"{statistics.median(r['cpu_s'] for r in runs):.2f} s, peak RSS "
                  f"{max(r['peak_rss_mb'] for r in runs):.0f} MB", flush=True)


if __name__ == "__main__":
    main()
