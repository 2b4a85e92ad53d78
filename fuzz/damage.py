"""Structure-aware damage fuzzing (issue 18): mutations at pcap record boundaries of the real
sample captures, and the promise that the loss stays local.

Each round picks a sample pcap and a record boundary and does one of: insert 1-3 random
bytes, delete 1-3 bytes, zero 16-48 bytes, duplicate a record (a second boundary is damaged
too every fourth round). The damaged capture must give a result (never an error or another
exception), at most the records hit are lost (packets within 3 per damaged place of the
intact count, never more than one extra per duplicate), and every stall of the intact
capture whose packets are more than 3 records away from any damaged place and whose flow
kept its handshake is found again (by sender endpoint, sizes and times).

    python3 fuzz/damage.py --seconds 60 [--seed N]

Prints one line (rounds, mutations by kind, findings); exits 1 on a finding and writes the
damaged capture to --artifacts.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/oracle.py: the reference analysis

import nagleprobe  # noqa: E402
from nagleprobe.read import walk_python  # noqa: E402
from oracle import analyze_whole  # noqa: E402

SAMPLES = sorted([*(ROOT / "samples").glob("*.pcap"), *(ROOT / "samples/formats").glob("*.pcap")])


def boundaries(data: bytes) -> list[int]:
    big = data[:4] in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
    starts, _ = walk_python(bytearray(data[24:]), big)  # (each header's offset + 8)
    return (starts + 16).tolist()


def keys(doc: dict, protected: set[int], near: list[int]) -> set:
    """Stalls away from the damaged records (frame numbers of the intact capture)."""
    out = set()
    for s in doc["stalls"]:
        frames = s["frames"].values()
        if s["flow"] in protected or any(abs(f - n) <= 3 for f in frames for n in near):
            continue
        out.add(key(s))
    return out


def key(s: dict) -> tuple:
    return (s["endpoint"], s["held_bytes"], s["small_bytes"], round(s["times"]["small"], 6),
            round(s["times"]["released"], 6))


def mutate(rng: random.Random, data: bytes, offs: list[int]) -> tuple[bytes, list[int], str]:
    """One or two damaged places; returns the bytes, the record indexes hit, the kinds."""
    places = sorted(rng.sample(range(1, len(offs)), min(len(offs) - 1, 1 + (rng.random() < .25))),
                    reverse=True)
    kinds = []
    for i in places:  # from the end, so earlier offsets stay valid
        at = offs[i]
        kind = rng.choice(["insert", "delete", "zero", "duplicate"])
        kinds.append(kind)
        if kind == "insert":
            data = data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 3))) + data[at:]
        elif kind == "delete":
            d = rng.randint(1, 3)
            at = at - d if rng.random() < .5 else at  # end of the previous record, or header
            data = data[:at] + data[at + d:]
        elif kind == "zero":
            z = rng.randint(16, 48)
            data = data[:at] + bytes(min(z, len(data) - at)) + data[at + z:]
        else:
            end = offs[i + 1] if i + 1 < len(offs) else len(data)
            data = data[:end] + data[at:end] + data[end:]
    return data, places, kinds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--artifacts", default=tempfile.gettempdir())
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="nagleprobe-damage-"))
    intact = {}
    for p in SAMPLES:
        data = p.read_bytes()
        r = analyze_whole(str(p))
        doc = r.to_dict()
        seg = r.segments
        syn_flows = set(seg.loc[seg["flags"].str.contains("SYN"), "flow"])
        no_handshake = {f["id"] for f in doc["flows"] if f["roles"] != "handshake"}
        syn_frames = {int(f): int(fl) for f, fl in zip(seg.loc[seg["flags"].str.contains("SYN"),
                                                            "frame"],
                                                    seg.loc[seg["flags"].str.contains("SYN"),
                                                            "flow"])}
        intact[p] = (data, boundaries(data), doc, syn_frames, no_handshake | (set() if syn_flows
                                                                              else set()))
    end = time.monotonic() + a.seconds
    rounds, kinds_seen, findings = 0, Counter(), 0
    while time.monotonic() < end:
        p = rng.choice(SAMPLES)
        data, offs, doc, syn_frames, protected = intact[p]
        damaged, places, kinds = mutate(rng, data, offs)
        kinds_seen.update(kinds)
        rounds += 1
        near = [i + 1 for i in places]  # frame numbers of the records hit
        hit_flows = {fl for fr, fl in syn_frames.items() if any(abs(fr - n) <= 3 for n in near)}
        path = work / "damaged.pcap"
        path.write_bytes(damaged)
        problem = None
        try:
            got = nagleprobe.analyze(str(path)).to_dict()
            n0, n1 = doc["capture"]["packets"], got["capture"]["packets"]
            dup = kinds.count("duplicate")
            if not (n0 - 3 * len(places) <= n1 <= n0 + dup):
                problem = f"{n1} packets read, {n0} in the intact capture"
            else:
                lost = keys(doc, protected | hit_flows, near) - {key(s) for s in got["stalls"]}
                if lost:
                    problem = f"{len(lost)} stalls away from the damage lost: {sorted(lost)[:2]}"
        except Exception as e:  # noqa: BLE001 - any exception is a finding here
            problem = f"{type(e).__name__}: {e}"
        if problem:
            findings += 1
            out = Path(a.artifacts) / f"damage-{a.seed}-{rounds}.pcap"
            out.write_bytes(damaged)
            print(f"FINDING {p.name} records {near} {kinds}: {problem} -> {out}", flush=True)
    print(f"damage fuzz: seed {a.seed}, {rounds} rounds in {a.seconds:g} s "
          f"({dict(kinds_seen)}), {findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
