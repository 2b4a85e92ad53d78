"""Fleet benchmark: many rotated captures through `nagleprobe.analyze_many`, on the local
process pool and on a Dask LocalCluster, held against the single-file analyses (issue 34:
a fleet within 1.3 times the sum of the single analyses divided by the cores, under 10 ms
per file beyond them).

Builds one capture of about --mb MB with the generator of bench_analyze.py (the flows of
real samples replicated with shifted ports and times) and rotates it into --files files:
copy i has every record time moved on by i times the capture's span, as a capture rotated
every span seconds would (same packets, later times). `--gzip` compresses the copies;
`--url` has the workers read them from an http.server on loopback (started here, outside
what is measured).

Two source trees, each with its compiled parts built in place, run in paired rounds
(`--old TREE`, `--new TREE`, default this checkout; each round runs both, alternating which
goes first), each in a process of its own with the tree on PYTHONPATH, which measures in
wall and CPU time (its own and its descendants': pool processes, cluster workers):

* the single analyses (`nagleprobe.analyze` in process, warm) of every --sample-th file,
  scaled to all files: the sum S,
* one file's task in process (`check_capture` with tables: analysis, verdict, tables),
* `analyze_many(paths)` on the local pool, then on a LocalCluster of --workers processes of
  one thread (started first and given a few tiny captures, so that its workers have
  imported nagleprobe: timed apart),
* the same two on --files copies of a 107-packet sample (the fixed cost per file).

Then prints per tree the medians over the rounds: ratio = fleet / (S / cores) and the
overhead per file = (fleet - S / cores) * cores / files for wall time; for CPU time (which
the other jobs on a shared machine disturb less) ratio = fleet / S and overhead per file =
(fleet - S) / files. Not a test: run it by hand (the data, about 0.6 GB per 60 files of
10 MB, goes to benchmarks/out/, which git ignores; the table is appended to
benchmarks/RESULTS.md, see `--results`):

    python3 benchmarks/bench_fleet.py --files 60 --mb 10 [--gzip | --url] [--rounds 2] \\
        [--old /tmp/np-old]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_results
from bench_analyze import DEFAULT_SOURCES, ROOT, build

BYTES_PER_PACKET = 86  # about, for the generator's default sources (record header included)
FIGURES = ("local_pool", "local_cluster", "local_pool_tiny", "local_cluster_tiny")


def rotate(template: Path, out_dir: Path, files: int, compress: bool) -> list[str]:
    """`files` copies of the pcap `template`, copy i shifted by i spans in time."""
    raw = np.frombuffer(template.read_bytes(), dtype=np.uint8)
    offs = []  # record header offsets: one pass over the record lengths
    pos = 24
    while pos + 16 <= len(raw):
        offs.append(pos)
        pos += 16 + struct.unpack_from("<I", raw, pos + 8)[0]
    offs = np.array(offs, dtype=np.int64)
    secs = raw[(offs[:, None] + np.arange(4)).ravel()].view("<u4").astype(np.int64)
    span = int(secs.max() - secs.min()) + 1
    paths = []
    for i in range(files):
        name = out_dir / f"rot_{i:04d}.pcap{'.gz' if compress else ''}"
        paths.append(str(name))
        if name.exists():
            continue
        buf = raw.copy()
        new = (secs + i * span).astype("<u4").view(np.uint8)
        buf[(offs[:, None] + np.arange(4)).ravel()] = new
        part = name.with_name(name.name + ".part")
        if compress:
            with gzip.open(part, "wb", compresslevel=6) as f:
                f.write(buf.tobytes())
        else:
            part.write_bytes(buf.tobytes())
        os.replace(part, name)
    return paths


def captures(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(the rotated captures, the tiny ones), made once in benchmarks/out/fleet/."""
    out = ROOT / "benchmarks" / "out" / "fleet"
    packets = int(args.mb * 1e6 / BYTES_PER_PACKET)
    template = out / f"template_{packets}.pcap"
    rot_dir = out / f"rot_{args.files}x{packets}{'_gz' if args.gzip else ''}"
    rot_dir.mkdir(parents=True, exist_ok=True)
    if not template.exists():
        build(template, packets, [str(ROOT / s) for s in DEFAULT_SOURCES], every_ms=2.0)
    paths = rotate(template, rot_dir, args.files, args.gzip)
    tiny_dir = out / f"tiny_{args.files}"
    tiny_dir.mkdir(exist_ok=True)
    tiny = []
    for i in range(args.files):
        p = tiny_dir / f"tiny_{i:04d}.pcap"
        if not p.exists():
            shutil.copy(ROOT / "samples" / "echo_split_lo.pcap", p)
        tiny.append(str(p))
    return paths, tiny


# ------------------------------------------------------------------ in the measuring process
def tree_cpu_s() -> float:
    """CPU seconds of this process and all its descendants, live or finished (Linux /proc:
    a live one's own and its finished children's ticks)."""
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
    parent, ticks = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parent[int(d)] = int(fields[1])
        ticks[int(d)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    me, hz = os.getpid(), os.sysconf("SC_CLK_TCK")
    for pid, p in parent.items():
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += ticks[pid] / hz
    return total


def timed(fn) -> tuple[float, float, object]:
    """(wall s, CPU s of this process tree, result) of one call."""
    t0, c0 = time.perf_counter(), tree_cpu_s()
    result = fn()
    return time.perf_counter() - t0, tree_cpu_s() - c0, result


def measure(paths: list[str], tiny: list[str], workers: int, sample: int) -> dict:
    """One tree's figures (see the module's docstring), as a JSON-able dict."""
    import nagleprobe
    from nagleprobe.check import Budget, check_capture
    from nagleprobe.fleet import analyze_many

    res: dict = {"files": len(paths), "workers": workers, "cpus": os.cpu_count()}
    nagleprobe.analyze(paths[0])  # warm: imports, first-call costs
    picked = paths[::sample]
    single = [timed(lambda p=p: nagleprobe.analyze(p))[:2] for p in picked]
    scale = len(paths) / len(picked)
    res["single_sum"] = {"wall": scale * sum(w for w, _ in single),
                         "cpu": scale * sum(c for _, c in single)}
    task = [timed(lambda p=p: check_capture(p, Budget(), with_tables=True))[:2]
            for p in picked[:3]]
    res["task_in_process"] = {"wall": min(w for w, _ in task), "cpu": min(c for _, c in task)}
    tiny_one = [timed(lambda: nagleprobe.analyze(tiny[0]))[:2] for _ in range(5)]
    res["tiny_single_sum"] = {"wall": len(tiny) * min(w for w, _ in tiny_one),
                              "cpu": len(tiny) * min(c for _, c in tiny_one)}

    def fleet(name: str, fn) -> None:
        wall, cpu, f = timed(fn)
        assert not len(f.failed), f.failed["error"].tolist()
        res[name] = {"wall": wall, "cpu": cpu, "stalls": len(f.stalls)}

    fleet("local_pool", lambda: analyze_many(paths, jobs=workers))
    fleet("local_pool_tiny", lambda: analyze_many(tiny, jobs=workers))
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as lc, Client(lc) as client:
        analyze_many(tiny[:4 * workers], client=client)  # the workers' imports: their start
        res["cluster_start_s"] = time.perf_counter() - t0
        fleet("local_cluster", lambda: analyze_many(paths, client=client))
        fleet("local_cluster_tiny", lambda: analyze_many(tiny, client=client))
    return res


def ratios(r: dict) -> dict:
    """The issue's figures of one measurement: per fleet, the ratio and the overhead per
    file (ms), in wall and in CPU time."""
    cores = min(r["workers"], r["cpus"] or 1)
    out = {}
    for name in FIGURES:
        s = r["tiny_single_sum" if name.endswith("tiny") else "single_sum"]
        f = r[name]
        out[name] = {"wall_ratio": f["wall"] / (s["wall"] / cores),
                     "wall_ms_per_file": 1000 * (f["wall"] - s["wall"] / cores) * cores
                     / r["files"],
                     "cpu_ratio": f["cpu"] / s["cpu"],
                     "cpu_ms_per_file": 1000 * (f["cpu"] - s["cpu"]) / r["files"]}
    return out


# ------------------------------------------------------------------------ the paired rounds
@contextlib.contextmanager
def served(directory: str):
    """An http.server on loopback serving `directory`; yields its base URL."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", directory],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def run_tree(tree: Path, spec: dict) -> dict:
    """The figures of the build in `tree`, measured in a process of its own."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "nagleprobe")],
                   check=True)  # as pip leaves it (this machine may write no bytecode)
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, __file__, "--measure", json.dumps(spec)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--mb", type=float, default=10.0, help="size of each capture (uncompressed)")
    ap.add_argument("--gzip", action="store_true", help="gzip-compress the rotated captures")
    ap.add_argument("--url", action="store_true", help="read them from http://127.0.0.1")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sample", type=int, default=6,
                    help="time the single analysis of every SAMPLE-th file")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", type=Path, help="a second source tree, run in paired rounds")
    ap.add_argument("--new", type=Path, default=ROOT)
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # a measuring process's spec (JSON)
    bench_results.add_argument(ap)
    args = ap.parse_args()
    if args.measure:
        spec = json.loads(args.measure)
        print(json.dumps(measure(spec["paths"], spec["tiny"], spec["workers"], spec["sample"])))
        return

    paths, tiny = captures(args)
    trees = {"new": args.new.resolve()} | ({"old": args.old.resolve()} if args.old else {})
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    with served(str(Path(paths[0]).parent)) if args.url else contextlib.nullcontext() as base:
        if base:
            paths = [f"{base}/{Path(p).name}" for p in paths]
        spec = {"paths": paths, "tiny": tiny, "workers": args.workers, "sample": args.sample}
        for i in range(args.rounds):
            order = list(trees) if i % 2 else list(trees)[::-1]  # old first in round 0
            for name in order:
                r = run_tree(trees[name], spec)
                runs[name].append(r)
                print(json.dumps({"round": i, "tree": name, **r}), file=sys.stderr)
    with bench_results.recorded("bench_fleet.py", args.results, list(trees.values())):
        kind = "url" if args.url else "gzip" if args.gzip else "pcap"
        print(f"{args.files} files of {args.mb:g} MB ({kind}), {args.workers} workers, "
              f"{os.cpu_count()} CPUs, medians of {args.rounds} rounds "
              f"(wall: busy shared machine, CPU: this process tree)")
        print("| tree | fleet | wall s | ratio | ms/file | CPU s | CPU ratio | CPU ms/file |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in trees:
            rs = runs[name]
            med = {k: statistics.median(r[k]["wall"] for r in rs) for k in ("single_sum", *FIGURES)}
            cpu = {k: statistics.median(r[k]["cpu"] for r in rs) for k in ("single_sum", *FIGURES)}
            rat = [ratios(r) for r in rs]
            print(f"| {name} | single analyses (sum) | {med['single_sum']:.2f} | | | "
                  f"{cpu['single_sum']:.2f} | | |")
            task = statistics.median(r["task_in_process"]["cpu"] for r in rs)
            print(f"| {name} | one file's task in process | | | | {task:.3f} | "
                  f"{task / (cpu['single_sum'] / args.files):.2f} | |")
            for k in FIGURES:
                m = {f: statistics.median(x[k][f] for x in rat) for f in rat[0][k]}
                print(f"| {name} | {k} | {med[k]:.2f} | {m['wall_ratio']:.2f} | "
                      f"{m['wall_ms_per_file']:.1f} | {cpu[k]:.2f} | {m['cpu_ratio']:.2f} | "
                      f"{m['cpu_ms_per_file']:.1f} |")
            print(f"| {name} | cluster start | "
                  f"{statistics.median(r['cluster_start_s'] for r in rs):.2f} | | | | | |")

if __name__ == "__main__":
    main()
