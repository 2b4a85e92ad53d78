"""Peak memory of `nagleprobe analyze` on a SYN flood: N half-open connections (issue 18).

A port scan or SYN flood leaves every connection half open, so nothing is freed until the
idle timeout or the end of the capture, and the result has one flow per SYN. The capture
is built from a real SYN (the first client SYN of samples/confirm_netns_client.pcap, with
its options) copied N times with a new source address and port per copy and one copy every
--every-us of capture time: synthetic in its count, real in its bytes. It is cached in
benchmarks/out/. Each format (text, then JSON) runs --repeat times under `/usr/bin/time -v`
(output to /dev/null); prints the peak RSS and wall time of every run and their medians.
Not a test: run it by hand (about a minute per run for 1 M SYNs)

    python3 benchmarks/bench_synflood.py [--syns 1000000] [--repeat 3] [--every-us 20]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from capgen import pcap_header  # noqa: E402 (the one pcap file header)

SOURCE = ROOT / "samples" / "confirm_netns_client.pcap"


def first_syn(path: Path) -> bytes:
    """The bytes of the first SYN without ACK (Ethernet, IPv4) in a little-endian pcap."""
    raw = path.read_bytes()
    if struct.unpack_from("<I", raw, 0)[0] != 0xA1B2C3D4 or struct.unpack_from("<I", raw, 20)[0] != 1:
        raise SystemExit(f"{path}: expected a little-endian microsecond Ethernet pcap")
    off = 24
    while off + 16 <= len(raw):
        incl = struct.unpack_from("<I", raw, off + 8)[0]
        pkt = raw[off + 16: off + 16 + incl]
        off += 16 + incl
        if struct.unpack_from("!H", pkt, 12)[0] == 0x0800 and pkt[23] == 6:
            tcp = 14 + (pkt[14] & 0x0F) * 4
            if pkt[tcp + 13] & 0x12 == 0x02:
                return pkt
    raise SystemExit(f"{path}: no SYN found")


def build(out: Path, n: int, every_us: int) -> None:
    """N copies of the SYN: source port 1024 + i % 64000, source address 10.1.x.y from
    i // 64000, time i * every_us; everything else (destination, ISN, options) as captured."""
    syn = np.frombuffer(first_syn(SOURCE), dtype=np.uint8)
    size = 16 + len(syn)
    tcp = 14 + (syn[14] & 0x0F) * 4
    part = Path(f"{out}.part")  # renamed when complete: an interrupted build is not reused
    with open(part, "wb") as fh:
        fh.write(pcap_header())
        for a in range(0, n, 250_000):
            i = np.arange(a, min(n, a + 250_000), dtype=np.int64)
            recs = np.empty((len(i), size), dtype=np.uint8)
            recs[:, 16:] = syn
            t_us = 1_700_000_000 * 1_000_000 + i * every_us
            hdr = np.empty((len(i), 4), dtype="<u4")
            hdr[:, 0] = t_us // 1_000_000
            hdr[:, 1] = t_us % 1_000_000
            hdr[:, 2] = hdr[:, 3] = len(syn)
            recs[:, :16] = hdr.view(np.uint8).reshape(-1, 16)
            port, host = 1024 + i % 64000, i // 64000
            recs[:, 16 + tcp] = port >> 8
            recs[:, 16 + tcp + 1] = port & 0xFF
            recs[:, 16 + 26: 16 + 30] = [10, 1, 0, 0]  # source address
            recs[:, 16 + 28] = host >> 8
            recs[:, 16 + 29] = host & 0xFF
            fh.write(recs.tobytes())
    os.replace(part, out)


def run(cmd: list[str]) -> tuple[float, float]:
    """Peak RSS (MB, 10^6 bytes) and wall seconds of one command, from /usr/bin/time -v."""
    with open(os.devnull, "wb") as null:
        proc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=null, stderr=subprocess.PIPE)
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} exited {proc.returncode}: {err[-2000:]}")
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", err).group(1)
    secs = sum(float(x) * 60 ** k for k, x in enumerate(reversed(wall.split(":"))))
    return kb * 1024 / 1e6, secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syns", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--every-us", type=int, default=20)
    ap.add_argument("--formats", nargs="+", default=["text", "json"])
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    out = ROOT / "benchmarks" / "out" / f"synflood_{args.syns}_{args.every_us}us.pcap"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.rebuild or not out.exists():
        build(out, args.syns, args.every_us)
    print(f"# {out.name}: {args.syns} SYNs, {out.stat().st_size / 1e6:.0f} MB", flush=True)
    for fmt in args.formats:
        runs = [run([sys.executable, "-m", "nagleprobe", "analyze", "--quiet", "--format", fmt,
                     str(out)]) for _ in range(args.repeat)]
        for rss, wall in runs:
            print(json.dumps({"format": fmt, "peak_rss_mb": round(rss), "wall_s": round(wall, 1)}),
                  flush=True)
        print(f"{fmt}: median peak RSS {statistics.median(r for r, _ in runs):.0f} MB, "
              f"median wall {statistics.median(w for _, w in runs):.1f} s", flush=True)


if __name__ == "__main__":
    main()
