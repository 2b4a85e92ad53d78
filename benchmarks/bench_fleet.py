"""Fleet benchmark: many rotated captures with the local process pool and on a Dask
LocalCluster (worker processes), through `nagleprobe.analyze_many`.

Builds one capture of about --mb MB with the generator of bench_analyze.py (the flows of
real samples replicated with shifted ports and times), then rotates it into --files files:
copy i has every record time moved on by i times the capture's span, as a capture rotated
every span seconds would (same packets, later times; the analysis does not depend on the
absolute time). Optionally gzip-compressed. Then times, each best of --repeat:

* the local pool (`analyze_many(paths)`, one process per core),
* a LocalCluster of --workers processes, 1 thread each (`analyze_many(paths, client)`;
  the cluster's start-up is timed apart),
* one file's task (analysis, verdict, tables) in this process: the work per file without
  any pool; the pools' overhead per file is their time beyond that work divided evenly,
* --files copies of a 107-packet sample on both, for the per-file overhead.

Not a test: run it by hand (the data, about 2 GB by default, goes to benchmarks/out/,
which git ignores):

    python3 benchmarks/bench_fleet.py [--files 200] [--mb 10] [--gzip] [--repeat 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nagleprobe  # noqa: E402
from bench_analyze import DEFAULT_SOURCES, ROOT, build  # noqa: E402
from nagleprobe.check import Budget, check_capture  # noqa: E402
from nagleprobe.fleet import analyze_many  # noqa: E402

BYTES_PER_PACKET = 86  # about, for the generator's default sources (record header included)


def steal_and_busy() -> tuple[int, int, int]:
    """(steal, busy, total) CPU ticks of the whole machine so far (Linux /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return v[7], sum(v) - idle, sum(v)


def our_cpu_s() -> float:
    """CPU seconds of this process and its finished children (pools, cluster workers)."""
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


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


CPU_S: list[float] = []  # our CPU seconds (this process and its children) per run of `timed`


def timed(fn, repeat: int) -> tuple[float, list[float], object]:
    runs, result = [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), our_cpu_s()
        result = fn()
        runs.append(time.perf_counter() - t0)
        CPU_S.append(our_cpu_s() - c0)
    return min(runs), [round(r, 2) for r in runs], result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--mb", type=float, default=10.0, help="size of each capture (uncompressed)")
    ap.add_argument("--gzip", action="store_true", help="gzip-compress the rotated captures")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    out = ROOT / "benchmarks" / "out" / "fleet"
    packets = int(args.mb * 1e6 / BYTES_PER_PACKET)
    template = out / f"template_{packets}.pcap"
    rot_dir = out / f"rot_{args.files}x{packets}{'_gz' if args.gzip else ''}"
    rot_dir.mkdir(parents=True, exist_ok=True)
    if not template.exists():
        build(template, packets, [str(ROOT / s) for s in DEFAULT_SOURCES], every_ms=2.0)
    t0 = time.perf_counter()
    paths = rotate(template, rot_dir, args.files, args.gzip)
    made_s = time.perf_counter() - t0
    total = sum(os.path.getsize(p) for p in paths)
    tiny_dir = out / f"tiny_{args.files}"
    tiny_dir.mkdir(exist_ok=True)
    tiny = []
    for i in range(args.files):
        p = tiny_dir / f"tiny_{i:04d}.pcap"
        if not p.exists():
            shutil.copy(ROOT / "samples" / "echo_split_lo.pcap", p)
        tiny.append(str(p))

    load0, (st0, busy0, all0) = os.getloadavg(), steal_and_busy()
    wall0, ours0 = time.perf_counter(), our_cpu_s()
    res: dict = {"files": args.files, "bytes_total": total, "gzip": args.gzip,
                 "packets_per_file": nagleprobe.analyze(paths[0]).capture["packets"],
                 "cpus": os.cpu_count(), "workers": args.workers, "rotate_s": round(made_s, 1)}
    one_analyze, _, _ = timed(lambda: nagleprobe.analyze(paths[0]), args.repeat)
    res["one_file_analyze_s"] = round(one_analyze, 3)
    # a task's work: the analysis, the verdict and the tables (what a pool worker does)
    one, _, _ = timed(lambda: check_capture(paths[0], Budget(), with_tables=True), args.repeat)
    res["one_file_task_in_process_s"] = round(one, 3)

    def fleet_fields(prefix: str, wall: float, runs: list[float], fleet) -> None:
        pk = int(fleet.verdicts["packets"].sum())
        assert not len(fleet.failed), fleet.failed["error"].tolist()
        res[prefix] = {"seconds": round(wall, 2), "runs": runs, "packets": pk,
                       "our_cpu_s_last_run": round(CPU_S[-1], 1),
                       "packets_per_s": round(pk / wall), "mb_per_s": round(total / 1e6 / wall, 1),
                       "stalls": len(fleet.stalls), "flows": len(fleet.flows)}

    wall, runs, local = timed(lambda: analyze_many(paths, jobs=args.workers), args.repeat)
    fleet_fields("local_pool", wall, runs, local)
    twall, truns, _ = timed(lambda: analyze_many(tiny, jobs=args.workers), args.repeat)
    res["local_pool_tiny"] = {"seconds": round(twall, 2), "runs": truns}

    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as lc, Client(lc) as client:
        res["cluster_start_s"] = round(time.perf_counter() - t0, 2)
        wall, runs, remote = timed(lambda: analyze_many(paths, client=client), args.repeat)
        fleet_fields("local_cluster", wall, runs, remote)
        twall, truns, _ = timed(lambda: analyze_many(tiny, client=client), args.repeat)
        res["local_cluster_tiny"] = {"seconds": round(twall, 2), "runs": truns}
    same = all(getattr(local, n).equals(getattr(remote, n))
               for n in ("flows", "stalls", "endpoints"))
    res["cluster_tables_equal_local"] = same
    ideal = one * args.files / args.workers
    for k in ("local_pool", "local_cluster"):
        # what the pool adds over perfect division of the in-process work, per file
        res[k]["overhead_per_file_ms"] = round(1000 * (res[k]["seconds"] - ideal)
                                               / args.files * args.workers, 1)
        tiny_s = res[f"{k}_tiny"]["seconds"]
        res[f"{k}_tiny"]["per_file_ms"] = round(1000 * tiny_s / args.files, 2)
    st1, busy1, all1 = steal_and_busy()
    elapsed, ours = time.perf_counter() - wall0, our_cpu_s() - ours0
    others = (busy1 - busy0) / os.sysconf("SC_CLK_TCK") - ours
    cpus = os.cpu_count() or 1
    res["machine"] = {"others_cpu_pct_during": round(100 * others / (elapsed * cpus), 1),"load_avg_1min_before": round(load0[0], 2),
                      "load_avg_1min_after": round(os.getloadavg()[0], 2),
                      "cpu_busy_pct_during": round(100 * (busy1 - busy0) / (all1 - all0), 1),
                      "steal_pct_during": round(100 * (st1 - st0) / (all1 - all0), 1)}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
