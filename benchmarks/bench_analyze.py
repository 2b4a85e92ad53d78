"""End-to-end benchmark: `nagleprobe analyze` on a large capture built from real samples.

Builds a time-ordered pcap of N packets (default 5 million) by replicating the flows of
real sample captures with shifted ports and times, then runs the whole `nagleprobe analyze`
process on it (text report, then JSON; best of --repeat runs each) and prints packets per
second, MB/s and peak RSS. Not a test: run it by hand

    python3 benchmarks/bench_analyze.py [--packets 5000000] [--repeat 3] [--rebuild]

The built capture is cached in benchmarks/out/ (ignored by git) and reused when present.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from capgen import pcap_header  # noqa: E402 (the one pcap file header)

DEFAULT_SOURCES = ["samples/echo_split_lo.pcap", "samples/confirm_netns_client.pcap",
                   "samples/neg_bulk_cwnd_netns.pcap", "samples/server_split_lo.pcap",
                   "samples/neg_nodelay_split_netns.pcap"]


def load_template(paths: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Records of the source pcaps (Ethernet, microsecond, little-endian), each source's
    packets shifted to start at time 0. Returns (bytes of data, data offsets, lengths, ts_ns)."""
    datas, lens, tss, port_offs = [], [], [], []
    for p in paths:
        raw = Path(p).read_bytes()
        magic, = struct.unpack_from("<I", raw, 0)
        if magic != 0xA1B2C3D4 or struct.unpack_from("<I", raw, 20)[0] != 1:
            raise SystemExit(f"{p}: benchmark sources must be little-endian microsecond Ethernet pcaps")
        off, first = 24, None
        while off + 16 <= len(raw):
            sec, usec, incl, _orig = struct.unpack_from("<IIII", raw, off)
            pkt = raw[off + 16: off + 16 + incl]
            off += 16 + incl
            ts = sec * 1_000_000_000 + usec * 1000
            first = ts if first is None else first
            eth = struct.unpack_from("!H", pkt, 12)[0]
            if eth == 0x0800 and pkt[23] == 6:
                poff = 14 + (pkt[14] & 0x0F) * 4
            elif eth == 0x86DD and pkt[20] == 6:
                poff = 14 + 40
            else:
                continue
            datas.append(pkt)
            lens.append(len(pkt))
            tss.append(ts - first)
            port_offs.append(poff)
    blob = np.frombuffer(b"".join(datas), dtype=np.uint8)
    lens_a = np.array(lens, dtype=np.int64)
    starts = np.r_[0, np.cumsum(lens_a)[:-1]]
    return blob, starts, lens_a, np.array(tss, dtype=np.int64), np.array(port_offs, dtype=np.int64)


def build(out: Path, n_packets: int, sources: list[str], every_ms: float = 2.0) -> None:
    blob, starts, lens, ts, poff = load_template(sources)
    k = len(lens)
    reps = -(-n_packets // k)
    step_ns = int(every_ms * 1e6)  # a new copy of the template every 2 ms: many concurrent flows
    rep = np.repeat(np.arange(reps, dtype=np.int64), k)[:n_packets]
    rec = np.tile(np.arange(k, dtype=np.int64), reps)[:n_packets]
    t = ts[rec] + rep * step_ns + 1_700_000_000 * 10**9
    order = np.argsort(t, kind="stable")
    rep, rec, t = rep[order], rec[order], t[order]
    part = Path(f"{out}.part")  # renamed when complete: an interrupted build is not reused
    with open(part, "wb") as fh:
        fh.write(pcap_header())
        for a in range(0, n_packets, 500_000):
            r, c, tt = rec[a:a + 500_000], rep[a:a + 500_000], t[a:a + 500_000]
            size = 16 + lens[r]
            ostart = np.r_[0, np.cumsum(size)[:-1]]
            buf = np.zeros(int(size.sum()), dtype=np.uint8)
            hdr = np.zeros((len(r), 4), dtype="<u4")
            hdr[:, 0] = tt // 1_000_000_000
            hdr[:, 1] = (tt % 1_000_000_000) // 1000
            hdr[:, 2] = lens[r]
            hdr[:, 3] = lens[r]
            hb = hdr.view(np.uint8).reshape(-1, 16)
            buf[(ostart[:, None] + np.arange(16)).ravel()] = hb.ravel()
            # packet bytes: one gather over all bytes of this chunk
            nbytes = lens[r]
            within = np.arange(int(nbytes.sum())) - np.repeat(np.r_[0, np.cumsum(nbytes)[:-1]], nbytes)
            src = np.repeat(starts[r], nbytes) + within
            dst = np.repeat(ostart + 16, nbytes) + within
            buf[dst] = blob[src]
            # shift both ports by the copy number so every copy is a distinct set of flows
            for which in (0, 2):
                pos = ostart + 16 + poff[r] + which
                port = (buf[pos].astype(np.int64) << 8) | buf[pos + 1]
                port = (port + c * 7) % 64511 + 1024
                buf[pos] = port >> 8
                buf[pos + 1] = port & 0xFF
            # past 64511 copies the ports repeat: move the copy to other IPv4 addresses too
            v4 = poff[r] != 14 + 40
            for addr_last in (14 + 15, 14 + 19):
                pos = ostart[v4] + 16 + addr_last
                buf[pos] = (buf[pos].astype(np.int64) + c[v4] // 64511) % 256
            fh.write(buf.tobytes())
    os.replace(part, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=5_000_000)
    ap.add_argument("--sources", nargs="*", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--every-ms", type=float, default=2.0,
                    help="a new copy of the sources every this many ms of capture time")
    ap.add_argument("--repeat", type=int, default=3, help="runs per format; the best is reported")
    args = ap.parse_args()
    sources = args.sources or [str(ROOT / s) for s in DEFAULT_SOURCES if (ROOT / s).exists()]
    if not sources:
        sources = sorted(glob.glob(str(ROOT / "samples" / "*.pcap")))[:3]
    every = "" if args.every_ms == 2.0 else f"_every{args.every_ms:g}ms"
    out = Path(args.out or ROOT / "benchmarks" / "out" / f"bench_{args.packets}{every}.pcap")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.rebuild or not out.exists():
        t0 = time.perf_counter()
        build(out, args.packets, sources, args.every_ms)
        print(f"built {out} ({out.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    size = out.stat().st_size
    doc, runs = None, {}
    for fmt in ("text", "json"):
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", "--format", fmt,
                                   str(out)], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"nagleprobe failed: {proc.stderr.strip()}")
            runs.setdefault(fmt, []).append(wall)
            if fmt == "json":
                doc = json.loads(proc.stdout)
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # largest child
    pk = doc["capture"]["packets"]
    best = {fmt: min(w) for fmt, w in runs.items()}
    print(json.dumps({
        "packets": pk, "bytes": size, "flows": len(doc["flows"]), "stalls": len(doc["stalls"]),
        "seconds_text": round(best["text"], 2), "seconds_json": round(best["json"], 2),
        "packets_per_s_text": round(pk / best["text"]), "packets_per_s_json": round(pk / best["json"]),
        "mb_per_s_text": round(size / 1e6 / best["text"], 1),
        "all_runs_s": {fmt: [round(w, 2) for w in ws] for fmt, ws in runs.items()},
        "peak_rss_mb": round(rss_mb), "cpus": os.cpu_count(), "load_avg_1min_after": os.getloadavg()[0],
        "sources": [os.path.relpath(s, ROOT) for s in sources]}, indent=2))


if __name__ == "__main__":
    main()
