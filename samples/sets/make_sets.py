#!/usr/bin/env python3
"""Make the REAL file-set sample: one run of stalled traffic on loopback captured twice at
once, whole (`echo_split_rotated_lo_whole.pcap`) and rotated every second by `tcpdump -G 1`
(`echo_split_rotated_lo/cap-<epoch s>.pcap`), so a test can check that the set gives what
the whole capture gives. Run as root from the repo root:

    sudo python3 samples/sets/make_sets.py

The apps and the ground truth are those of samples/make_samples.py (echo_split_lo, 60
requests: ~2.7 s, so the set has 3-4 files and the connection crosses every boundary). The
namespace is its own (`npsets`), so other sample runs are not disturbed. tcpdump 4.99.3
takes `-C` in whole megabytes only, too big for a loopback run of a few kB: count-based
splitting is covered by `editcap -c` in tests/test_fileset.py.
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import make_samples as ms  # noqa: E402

NS = "npsets"
NAME = "echo_split_rotated_lo"
N_REQUESTS = 60
SPORT = 40090


def tcpdump(*args):
    p = ms.start(ms.nsx(NS, "tcpdump", "-Z", "root", "--immediate-mode", "-i", "lo", "-s", "0",
                        "-U", "-nn", *args))
    for _ in range(5):
        line = p.stderr.readline()
        if "listening on" in line:
            return p
    raise RuntimeError("tcpdump did not start")


def main():
    rotated = HERE / NAME
    rotated.mkdir(exist_ok=True)
    for old in rotated.glob("*.pcap"):
        old.unlink()
    ms.run("ip", "netns", "del", NS, check=False)
    ms.new_ns(NS)
    try:
        whole = tcpdump("-w", str(HERE / f"{NAME}_whole.pcap"))
        parts = tcpdump("-G", "1", "-w", str(rotated / "cap-%s.pcap"))
        time.sleep(0.3)
        srv = ms.start(ms.nsx(NS, ms.PY, ms.APPS, "echo-server", "--log",
                              str(ms.LOGDIR / f"{NAME}.srv.json"), "--port", "8000"))
        time.sleep(0.2)
        cli = ms.start(ms.nsx(NS, ms.PY, ms.APPS, "echo-client", "--log",
                              str(ms.LOGDIR / f"{NAME}.cli.json"), "--dst", ms.LO_IP,
                              "--port", "8000", "--sport", str(SPORT), "--n", str(N_REQUESTS),
                              "--mode", "split"))
        ms.wait_all([cli, srv])
        time.sleep(0.5)
        stats = {}
        for label, p in (("whole", whole), ("rotated", parts)):
            _, err = ms.stop(p, signal.SIGINT)
            stats[label] = " ".join(x.strip() for x in err.splitlines() if "packets" in x)
    finally:
        ms.run("ip", "netns", "del", NS, check=False)
    files = sorted(p.name for p in rotated.glob("*.pcap"))
    for p in [HERE / f"{NAME}_whole.pcap", *(rotated / f for f in files)]:
        os.chmod(p, 0o644)
    lat = ms.load(f"{NAME}.cli.json")["latency_ms"]
    n, delack, _ = ms.classify(lat)
    doc = {"capture": f"{NAME}/", "whole_capture": f"{NAME}_whole.pcap", "files": files,
           "stalls": n, "held_side": "client", "held_endpoint": f"{ms.LO_IP}:{SPORT}",
           "peer_delayed_ack_ms": delack, "vantage": "loopback",
           "nagle": {"client": "on", "server": "on"},
           "notes": "echo_split_lo with 60 requests, captured at once whole and rotated by "
                    "tcpdump -G 1 (one file per second): the one connection crosses every "
                    "file boundary. Stall count from the client's per-request latency log.",
           "real_capture": True, "tcpdump_stats": stats, "latency_ms": lat,
           "app_log": "client per-request latency (time.monotonic_ns)"}
    (HERE / f"{NAME}.expected.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{NAME}: {len(files)} files, stalls={n} delack={delack}")


if __name__ == "__main__":
    main()
