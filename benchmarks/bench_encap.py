"""End-to-end benchmark of tunnelled traffic: `nagleprobe analyze` on a VXLAN capture.

Builds the plain capture of bench_analyze.py (real samples replicated with shifted ports and
times, N packets, default 1 million), then the same packets each wrapped in
Ethernet/IPv4/UDP 4789/VXLAN (VNI 42, VTEPs 192.0.2.1 and 192.0.2.2 by direction), and runs
the whole `nagleprobe analyze --format json` process on both, alternating, `--repeat` times.
Prints packets per second of each (median and best), and checks that both reports find the
same stalls. Not a test: run it by hand

    python3 benchmarks/bench_encap.py [--packets 1000000] [--repeat 5]

Captures are cached in benchmarks/out/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_analyze  # noqa: E402
from capgen import pcap_header  # noqa: E402 (tests/ is on the path through bench_analyze)
from nagleprobe.read import CaptureReader  # noqa: E402

OUTER = 14 + 20 + 8 + 8  # Ethernet, IPv4, UDP, VXLAN


def outer_header(src: bytes, dst: bytes) -> np.ndarray:
    eth = bytes.fromhex("020000000002" "020000000001") + b"\x08\x00"
    ip = bytes([0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]) + src + dst
    udp = struct.pack("!HHHH", 50000, 4789, 0, 0)
    vxlan = bytes([0x08, 0, 0, 0, 0, 0, 42, 0])
    return np.frombuffer(eth + ip + udp + vxlan, np.uint8)


def wrap(plain: Path, out: Path) -> None:
    """Every record of `plain` (Ethernet) inside VXLAN, same times."""
    a, b = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
    fwd, back = outer_header(a, b), outer_header(b, a)
    part = Path(f"{out}.part")
    with open(part, "wb") as fh:
        fh.write(pcap_header())
        for batch in CaptureReader(str(plain)):
            n, lens = len(batch), batch.caplen
            inner_src = batch.data[batch.offset + 14 + 15]  # last byte of the inner source
            inner_dst = batch.data[batch.offset + 14 + 19]
            hdr = np.where((inner_src <= inner_dst)[:, None], fwd, back).astype(np.uint8)
            tot = 36 + lens
            hdr[:, 16], hdr[:, 17] = tot >> 8, tot & 0xFF
            ulen = 16 + lens
            hdr[:, 38], hdr[:, 39] = ulen >> 8, ulen & 0xFF
            rec = np.zeros((n, 4), "<u4")
            rec[:, 0] = batch.ts_ns // 1_000_000_000
            rec[:, 1] = (batch.ts_ns % 1_000_000_000) // 1000
            rec[:, 2] = rec[:, 3] = lens + OUTER
            size = 16 + OUTER + lens
            start = np.r_[0, np.cumsum(size)[:-1]]
            buf = np.zeros(int(size.sum()), np.uint8)
            buf[(start[:, None] + np.arange(16)).ravel()] = rec.view(np.uint8).ravel()
            buf[(start[:, None] + 16 + np.arange(OUTER)).ravel()] = hdr.ravel()
            within = np.arange(int(lens.sum())) - np.repeat(np.r_[0, np.cumsum(lens)[:-1]], lens)
            buf[np.repeat(start + 16 + OUTER, lens) + within] = \
                batch.data[np.repeat(batch.offset, lens) + within]
            fh.write(buf.tobytes())
    os.replace(part, out)


def run(path: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", "--format", "json",
                           str(path)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"nagleprobe failed: {proc.stderr.strip()}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    outdir = ROOT / "benchmarks" / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    plain = outdir / f"bench_{args.packets}.pcap"
    vx = outdir / f"bench_vxlan_{args.packets}.pcap"
    if not plain.exists():
        sources = [str(ROOT / s) for s in bench_analyze.DEFAULT_SOURCES if (ROOT / s).exists()]
        bench_analyze.build(plain, args.packets, sources)
    if not vx.exists():
        wrap(plain, vx)
    walls: dict[str, list[float]] = {"plain": [], "vxlan": []}
    docs = {}
    for _ in range(args.repeat):
        for name, path in (("plain", plain), ("vxlan", vx)):
            w, docs[name] = run(path)
            walls[name].append(w)
    pk = docs["vxlan"]["capture"]["packets"]
    same = ([(s["frames"], s["delay_ms"]) for s in docs["plain"]["stalls"]]
            == [(s["frames"], s["delay_ms"]) for s in docs["vxlan"]["stalls"]])
    print(json.dumps({
        "packets": pk, "tcp_packets_vxlan": docs["vxlan"]["capture"]["tcp_packets"],
        "flows": len(docs["vxlan"]["flows"]), "stalls": len(docs["vxlan"]["stalls"]),
        "same_stalls_as_plain": same,
        "tunnels": len(docs["vxlan"]["capture"]["tunnels"]),
        **{f"packets_per_s_{k}_median": round(pk / statistics.median(w)) for k, w in walls.items()},
        **{f"packets_per_s_{k}_best": round(pk / min(w)) for k, w in walls.items()},
        "all_runs_s": {k: [round(x, 2) for x in w] for k, w in walls.items()},
        "cpus": os.cpu_count(), "load_avg_1min_after": os.getloadavg()[0]}, indent=2))


if __name__ == "__main__":
    main()
