"""Memory of one connection that never closes: `nagleprobe watch` (sliding window) against
`nagleprobe analyze` (the stream analyses a connection holding PIECE_ROWS packets in pieces).

Builds a pcap of one TCP connection of N packets that never closes: the handshake of a
real sample (samples/echo_split_lo.pcap by default), then its request/answer rounds
repeated with the sequence and acknowledgement numbers and times moved on by one round each
copy (about 19 stalls per 100 packets for echo_split_lo; none for echo_nodelay_lo). Runs
each command under /usr/bin/time -v and prints wall time, peak RSS and stalls found (and
for analyze the pieces). Not a test: run it by hand

    python3 benchmarks/bench_live.py [--packets 1000000 5000000] [--skip-analyze]
        [--skip-watch] [--source samples/echo_nodelay_lo.pcap] [--rounds 3]

The captures are cached in benchmarks/out/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
SOURCE = ROOT / "samples" / "echo_split_lo.pcap"


def records(raw: bytes) -> list[tuple[int, bytes]]:
    """(ts_ns, frame bytes) of a little-endian microsecond pcap."""
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, usec, incl, _ = struct.unpack_from("<IIII", raw, off)
        out.append((sec * 1_000_000_000 + usec * 1000, raw[off + 16: off + 16 + incl]))
        off += 16 + incl
    return out


def build(path: Path, packets: int, source: Path = SOURCE) -> None:
    """The never-closing connection of `packets` packets (see the module's docstring)."""
    raw = source.read_bytes()
    recs = records(raw)
    fin = next(i for i, (_, f) in enumerate(recs) if f[47] & 0x05)  # first FIN/RST (IPv4)
    head, body = recs[:3], recs[3:fin]
    client_port = struct.unpack_from("!H", recs[0][1], 34)[0]
    sent = [0, 0]
    for _, f in body:
        ihl = (f[14] & 0x0F) * 4
        pay = struct.unpack_from("!H", f, 16)[0] - ihl - (f[14 + ihl + 12] >> 4) * 4
        sent[struct.unpack_from("!H", f, 34)[0] != client_port] += pay
    span_ns = body[-1][0] - body[0][0] + 1_000_000
    # one round as a byte block of pcap records; per copy, patch seq, ack and time
    block = bytearray()
    fields = []  # (offset of the record header, of seq, of ack, by client, ts_ns)
    for ts, f in body:
        at = len(block)
        block += struct.pack("<IIII", 0, 0, len(f), len(f)) + f
        fields.append((at, at + 16 + 38, at + 16 + 42,
                       struct.unpack_from("!H", f, 34)[0] == client_port, ts - body[0][0]))
    copies = max((packets - 3) // len(body), 1)
    t0 = body[0][0]
    rec_at = np.array([x[0] for x in fields])
    seq_at, ack_at = np.array([x[1] for x in fields]), np.array([x[2] for x in fields])
    mine = np.array([x[3] for x in fields])
    rel_ts = np.array([x[4] for x in fields], dtype=np.int64)
    tmpl = np.frombuffer(bytes(block), dtype=np.uint8)
    seq0 = np.array([struct.unpack_from("!I", block, a)[0] for a in seq_at], dtype=np.int64)
    ack0 = np.array([struct.unpack_from("!I", block, a)[0] for a in ack_at], dtype=np.int64)
    with open(path, "wb") as out:
        out.write(raw[:24])
        for ts, f in head:
            out.write(struct.pack("<IIII", ts // 10**9, ts % 10**9 // 1000, len(f), len(f)) + f)
        step = 2000  # copies written at a time
        for c0 in range(0, copies, step):
            k = np.arange(c0, min(c0 + step, copies), dtype=np.int64)[:, None]
            buf = np.tile(tmpl, (len(k), 1))
            seq = (seq0 + np.where(mine, sent[0], sent[1]) * k) % (1 << 32)
            ack = (ack0 + np.where(mine, sent[1], sent[0]) * k) % (1 << 32)
            ts = t0 + rel_ts + span_ns * k
            for j in range(4):
                buf[:, seq_at + j] = (seq >> (24 - 8 * j)) & 0xFF
                buf[:, ack_at + j] = (ack >> (24 - 8 * j)) & 0xFF
            sec, usec = ts // 10**9, ts % 10**9 // 1000
            for j in range(4):
                buf[:, rec_at + j] = (sec >> (8 * j)) & 0xFF
                buf[:, rec_at + 4 + j] = (usec >> (8 * j)) & 0xFF
            out.write(buf.tobytes())
    print(f"built {path.name}: {3 + copies * len(body):,} packets, one connection", flush=True)


def measure(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (kB) and standard output of a command under /usr/bin/time -v."""
    t = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return wall, rss, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packets", type=int, nargs="+", default=[1_000_000, 5_000_000])
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--skip-analyze", action="store_true")
    ap.add_argument("--skip-watch", action="store_true")
    ap.add_argument("--source", type=Path, default=SOURCE,
                    help="the sample whose handshake and rounds make the connection")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each command (median, range)")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    nagleprobe = [sys.executable, "-m", "nagleprobe"]
    stem = "" if args.source.resolve() == SOURCE else f"{args.source.stem}_"
    for n in args.packets:
        path = OUT / f"never_closing_{stem}{n}.pcap"
        if not path.exists():
            build(path, n, args.source)
        if not args.skip_watch:
            runs = [measure([*nagleprobe, "watch", "--format", "jsonl", "--window",
                             str(args.window), str(path)]) for _ in range(args.rounds)]
            final = json.loads(runs[0][2].splitlines()[-1])
            print(f"watch --window {args.window}  {n:>10,} packets: {_figures(runs)}, "
                  f"{final['stalls']:,} stalls", flush=True)
        if not args.skip_analyze:
            runs = [measure([*nagleprobe, "analyze", "--format", "json", "-q", str(path)])
                    for _ in range(args.rounds)]
            flows = json.loads(runs[0][2])["flows"]
            print(f"analyze               {n:>10,} packets: {_figures(runs)}, "
                  f"{sum(f['stalls'] for f in flows):,} stalls, "
                  f"{sum(f['pieces'] for f in flows):,} pieces", flush=True)


def _figures(runs: list[tuple[float, int, str]]) -> str:
    """Median wall time and peak RSS of the runs, with their ranges."""
    wall = sorted(r[0] for r in runs)
    rss = sorted(r[1] / 1024 for r in runs)
    med = lambda v: v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2  # noqa: E731
    return (f"{med(wall):6.1f} s ({wall[0]:.1f}-{wall[-1]:.1f}), peak RSS {med(rss):7.0f} MB "
            f"({rss[0]:.0f}-{rss[-1]:.0f})")


if __name__ == "__main__":
    main()
