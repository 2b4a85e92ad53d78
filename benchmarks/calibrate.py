#!/usr/bin/env python3
"""What a stall's confidence is worth: the share of reported stalls that are true, per
confidence band, over every labelled capture; the table is appended to benchmarks/RESULTS.md.

    python3 benchmarks/calibrate.py [--field DIR] [--results FILE | --results -]

Labelled captures and what "true" means for each (docs/DETECTION.md, "What confidence
means"):

* samples/*.expected.json: real captures whose stall count and held endpoint come from the
  generating apps' own timing logs (samples/README.md). Stalls of the held endpoint are
  true up to that count; any beyond it, and every stall of another endpoint, are false.
* tests/broken/expected.json, the entries with a stall count: cuts of
  samples/formats/base_lo.pcap, counted from that run's app logs; judged as the samples.
* the field set (default /work/shared/field, read in place, skipped when absent), with
  labels.json: hand labels per flow, a range [low, high] of stalls and the side to fix.
  Stalls of the labelled side are true up to `high` (what the labels accept), and certain
  up to `low` (what the labeller proved); the rest are false.

Where a group (a capture, or a labelled flow) has more stalls than are true, its
lowest-confidence stalls are the ones counted false. samples/formats/ (the same runs in
other formats) and samples/sets/ (a copy of one loopback run) are left out: copies would
count the same stalls twice.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
import bench_results  # noqa: E402
import nagleprobe  # noqa: E402

FIELD = Path("/work/shared/field")
# (name, lowest confidence): what a stall of each band is, docs/DETECTION.md says
BANDS = (("below 0.5", 0.0), ("0.5-0.79", 0.5), ("0.8 and above", 0.8))


def band(confidence: float) -> int:
    """The index in BANDS of a confidence."""
    return max(i for i, (_, low) in enumerate(BANDS) if confidence >= low)


def tally(stalls: list[tuple[float, bool]], certain: int, accepted: int) -> list[list[int]]:
    """Per band [reported, true, certainly true] of one group's stalls, given as
    (confidence, of the labelled sender); at most `accepted` of the right sender's are
    true and `certain` certainly so, the highest confidences first."""
    out = [[0, 0, 0] for _ in BANDS]
    right = sorted((c for c, ok in stalls if ok), reverse=True)
    for rank, c in enumerate(right):
        row = out[band(c)]
        row[0] += 1
        row[1] += rank < accepted
        row[2] += rank < certain
    for c, ok in stalls:
        if not ok:
            out[band(c)][0] += 1
    return out


def stalls_of(path: Path) -> dict:
    return nagleprobe.analyze(str(path)).to_dict()


def samples() -> list[list[list[int]]]:
    """One tally per sample capture and labelled tests/broken file."""
    sidecars = sorted((ROOT / "samples").glob("*.expected.json"))
    truths = [(ROOT / "samples" / t["capture"], t) for t in
              (json.loads(p.read_text()) for p in sidecars)]
    broken = json.loads((ROOT / "tests" / "broken" / "expected.json").read_text())
    formats = json.loads((ROOT / "samples" / "formats" / "expected.json").read_text())
    base = formats["base_lo.pcap"]
    truths += [(ROOT / "tests" / "broken" / name, {"stalls": t["stalls"],
                                                    "held_side": base["stall_sender"]})
               for name, t in broken.items() if t.get("stalls") is not None]
    out = []
    for path, t in truths:
        doc = stalls_of(path)
        got = [(s["confidence"], s["endpoint"] == t["held_endpoint"] if "held_endpoint" in t
                else s["sender"] == t["held_side"]) for s in doc["stalls"]]
        out.append(tally(got, t["stalls"], t["stalls"]))
    return out


def field(folder: Path) -> list[list[list[int]]]:
    """One tally per labelled flow of the field set (and one for stalls on unlabelled flows)."""
    out = []
    for case in json.loads((folder / "labels.json").read_text()):
        doc = stalls_of(folder / case["file"])
        flows = {f["id"]: f for f in doc["flows"]}
        seen = set()
        for lab in case["flows"]:
            pair = set(lab["endpoints"])
            ids = {i for i, f in flows.items() if {f["client"], f["server"]} == pair}
            seen |= ids
            side = lab["fix_side"]
            endpoint = None if side is None else (
                lab["client"] if side == "client" else next(e for e in pair if e != lab["client"]))
            got = [(s["confidence"], s["endpoint"] == endpoint)
                   for s in doc["stalls"] if s["flow"] in ids]
            low, high = lab["stalls"]
            out.append(tally(got, low, high))
        stray = [(s["confidence"], False) for s in doc["stalls"] if s["flow"] not in seen]
        out.append(tally(stray, 0, 0))
    return out


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def table(sources: dict[str, list[list[list[int]]]]) -> str:
    """The Markdown table: per band and source, stalls reported, true, certainly true."""
    lines = ["| confidence | source | groups with stalls | stalls | true | share true "
             "| certainly true |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for b, (name, _) in enumerate(BANDS):
        total = [0, 0, 0, 0]
        for src, groups in sources.items():
            rows = [g[b] for g in groups]
            n = [sum(r[i] for r in rows) for i in range(3)]
            with_stalls = sum(1 for r in rows if r[0])
            total = [total[0] + with_stalls, *(total[i + 1] + n[i] for i in range(3))]
            lines.append(f"| {name} | {src} | {with_stalls} | {n[0]} | {n[1]} | "
                         f"{share(n[1], n[0])} | {share(n[2], n[0])} |")
        lines.append(f"| {name} | **all** | {total[0]} | {total[1]} | {total[2]} | "
                     f"{share(total[2], total[1])} | {share(total[3], total[1])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--field", type=Path, default=FIELD,
                    help="the field set's folder, with labels.json (default %(default)s)")
    bench_results.add_argument(ap)
    args = ap.parse_args()
    sources = {"samples + tests/broken": samples()}
    has_field = (args.field / "labels.json").exists()
    if has_field:
        sources["field (hand labels)"] = field(args.field)
    with bench_results.recorded("calibrate.py", args.results):
        print("Confidence calibration: the share of reported stalls that are true, per "
              "confidence band (benchmarks/calibrate.py; docs/DETECTION.md, \"What "
              "confidence means\").")
        print(table(sources))
        print("Groups: sample captures (each with its stall count from the apps' logs) and "
              "labelled field flows. True: of the held endpoint, up to the sample's count, or "
              "up to the top of the field label's range; certainly true: up to its bottom "
              "(field) or the count (samples). Where a group has more stalls than are true, "
              "its lowest-confidence ones count as false.")
        if not has_field:
            print(f"No field set at {args.field}: samples and tests/broken only.")


if __name__ == "__main__":
    main()
