"""Throughput and memory of `nagleprobe analyze` against tshark and tcptrace, and how they
scale with the capture's size (not a test; run it by hand, it takes minutes):

    python3 benchmarks/bench_scaling.py [--sizes 1000000 10000000 50000000] [--repeat 2]

Captures are built deterministically from the real samples by bench_analyze.build (copies
of five sample conversations every --every-ms of capture time, with shifted ports: stalled,
clean, bulk and TCP_NODELAY flows mixed), cached in benchmarks/out/. For each size it runs
nagleprobe on the pcap (the text report, as `nagleprobe analyze` gives by default, and
`--format json`); on the smallest size also on a pcapng copy, a pcapng copy whose
connections come from two interfaces and a copy cut to a 96-byte snap length (made with
editcap, tcpdump and mergecap, when installed), and, where installed,
`tshark -T fields` and `tcptrace -l` on the same pcap. Each command is timed whole (process
start to exit, output to /dev/null), its CPU time and peak RSS read from the kernel (wait4),
and the CPU time the hypervisor stole meanwhile from /proc/stat. Prints
one JSON object per run, then a Markdown table with the machine and its load average, which
it also appends to benchmarks/RESULTS.md with the date and commit (`--results`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_results  # noqa: E402
from bench_analyze import DEFAULT_SOURCES, ROOT  # noqa: E402

TSHARK_FIELDS = ["frame.number", "frame.time_epoch", "tcp.stream", "tcp.srcport", "tcp.dstport",
                 "tcp.seq_raw", "tcp.ack_raw", "tcp.flags", "tcp.len", "tcp.window_size_value"]


def steal_ticks() -> int | None:
    """CPU time the hypervisor gave to other guests so far (clock ticks, all CPUs; Linux)."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8])
    except (OSError, IndexError, ValueError):
        return None


def run(cmd: list[str]) -> dict:
    """Wall time, CPU time (user + system), peak RSS of one command (stdout discarded), and
    the share of the machine's CPU time stolen by its hypervisor meanwhile: this machine is
    a shared VM whose speed drifts, and steal is the part of that drift one can see."""
    s0 = steal_ticks()
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    s1 = steal_ticks()
    steal = (None if s0 is None or s1 is None else
             100 * (s1 - s0) / (wall * os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1)))
    err = proc.stderr.read().decode(errors="replace").strip()
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # nagleprobe exits 0; tcptrace/tshark 0
        raise SystemExit(f"{cmd[0]} failed ({code}): {err[-500:]}")
    return {"seconds": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "steal_pct": steal}


# stall-dense: only conversations in which every request stalls (19 stalls in 107 packets
# each), so stall events are about a sixth of the packets (issue 35's workload)
STALLED_SOURCES = ["samples/echo_split_lo.pcap", "samples/server_split_lo.pcap"]
# one-stall: the one stalled request of excerpt_echo_split_lo (6 packets, no handshake) as
# many short connections (bench_check.py's capture)
WORKLOADS = {"mix": DEFAULT_SOURCES, "stall-dense": STALLED_SOURCES,
             "one-stall": ["samples/excerpt_echo_split_lo.pcap"]}


def capture(n: int, every_ms: float, workload: str = "mix") -> Path:
    """The benchmark capture of `n` packets (built once, cached): copies of the workload's
    sample conversations every `every_ms` of capture time."""
    name = "" if workload == "mix" else f"_{workload}"
    out = ROOT / "benchmarks" / "out" / f"bench_{n}_every{every_ms:g}ms{name}.pcap"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        # built in a child process: a command's peak RSS (wait4) counts the memory of the
        # process it was forked from, so this one must stay small
        t0 = time.perf_counter()
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from bench_analyze import build; "
                "build(sys.argv[2], int(sys.argv[3]), sys.argv[5:], float(sys.argv[4]))")
        subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent),
                        str(out), str(n), str(every_ms),
                        *[str(ROOT / s) for s in WORKLOADS[workload]]], check=True)
        print(f"# built {out.name} ({out.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return out


def variant(src: Path, kind: str) -> Path | None:
    """A copy of `src`, made once: "pcapng" and "snap96" (a 96-byte snap length) with
    editcap; "pcapng, 2 interfaces" by splitting the connections in two halves with tcpdump
    (by a bit of the sum of the ports) and merging them again, interleaved in time, with
    mergecap, each half on an interface of its own."""
    tools = ["tcpdump", "mergecap"] if kind == "pcapng, 2 interfaces" else ["editcap"]
    if not all(shutil.which(t) for t in tools):
        return None
    suffix = {"pcapng": ".pcapng", "snap96": "_snap96.pcap", "pcapng, 2 interfaces": "_2if.pcapng"}
    out = src.with_name(src.stem + suffix[kind])
    if out.exists():
        return out
    if kind == "pcapng, 2 interfaces":
        halves = [out.with_name(f"{out.stem}_{h}.pcap") for h in (0, 1)]
        for h, half in enumerate(halves):
            stay = ["-Z", "root"] if os.geteuid() == 0 else []  # root: may write here
            subprocess.run(["tcpdump", *stay, "-r", str(src), "-w", str(half),
                            f"((tcp[0:2] + tcp[2:2]) & 2) = {2 * h}"], check=True,
                           stderr=subprocess.DEVNULL)
        subprocess.run(["mergecap", "-I", "none", "-F", "pcapng", "-w", str(out),
                        *map(str, halves)], check=True)
        for half in halves:
            half.unlink()
    else:
        args = ["-F", "pcapng"] if kind == "pcapng" else ["-F", "pcap", "-s", "96"]
        subprocess.run(["editcap", *args, str(src), str(out)], check=True)
    return out


def best(cmd: list[str], repeat: int) -> dict:
    runs = [run(cmd) for _ in range(repeat)]
    b = min(runs, key=lambda r: r["seconds"])
    return {**b, "all_seconds": [round(r["seconds"], 2) for r in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000, 50_000_000])
    ap.add_argument("--every-ms", type=float, default=20.0,
                    help="capture time between copies of the samples (20 ms: ~110 k packets/s)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement; best is kept")
    ap.add_argument("--tools-max", type=int, default=1_000_000,
                    help="run tshark and tcptrace only on captures up to this many packets")
    bench_results.add_argument(ap)
    args = ap.parse_args()
    nagle = [sys.executable, "-m", "nagleprobe", "analyze", "--quiet"]
    rows = []
    for n in sorted(args.sizes):
        pcap = capture(n, args.every_ms)
        files = [("pcap", pcap)]
        if n == min(args.sizes):
            files += [(k, f) for k in ("pcapng", "pcapng, 2 interfaces", "snap96")
                      if (f := variant(pcap, k))]
        for kind, f in files:
            tools = [("nagleprobe", nagle + [str(f)])]
            if kind == "pcap":  # the JSON document too: one object per stall and flow
                tools.append(("nagleprobe --format json", nagle + ["--format", "json", str(f)]))
            if kind == "pcap" and n <= args.tools_max:
                if shutil.which("tcptrace"):
                    tools.append(("tcptrace -l", ["tcptrace", "-l", "-n", str(f)]))
                if shutil.which("tshark"):
                    fields = [a for x in TSHARK_FIELDS for a in ("-e", x)]
                    tools.append(("tshark -T fields", ["tshark", "-n", "-r", str(f), "-T", "fields",
                                                        *fields]))
            for name, cmd in tools:
                r = best(cmd, args.repeat if name.startswith("nagleprobe") else 1)
                row = {"tool": name, "format": kind, "packets": n, "mb": f.stat().st_size / 1e6,
                       **r, "load_avg_1min": os.getloadavg()[0]}
                row["packets_per_s"] = n / r["seconds"]
                row["mb_per_s"] = row["mb"] / r["seconds"]
                rows.append(row)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                  for k, v in row.items()}), flush=True)
    ours = {(r["packets"], r["format"]): r["seconds"] for r in rows if r["tool"] == "nagleprobe"}
    # "time vs nagleprobe": against the default (text report) run on the same file
    with bench_results.recorded("bench_scaling.py", args.results):
        print(f"\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}, {platform.system()} {platform.release()}")
        print("\n| tool | file | packets | MB | seconds | CPU s | packets/s | MB/s | peak RSS MB | "
              "time vs nagleprobe | load avg | steal |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            ratio = r["seconds"] / ours[(r["packets"], r["format"])]
            steal = "?" if r["steal_pct"] is None else f"{r['steal_pct']:.0f} %"
            print(f"| {r['tool']} | {r['format']} | {r['packets']:,} | {r['mb']:.0f} | "
                  f"{r['seconds']:.2f} | {r['cpu_s']:.2f} | {r['packets_per_s'] / 1e6:.2f} M | "
                  f"{r['mb_per_s']:.0f} | {r['peak_rss_mb']:.0f} | {ratio:.1f}x | "
                  f"{r['load_avg_1min']:.1f} | {steal} |")


if __name__ == "__main__":
    main()
