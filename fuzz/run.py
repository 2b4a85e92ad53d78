#!/usr/bin/env python3
"""Run the atheris fuzz target for a while, seeded with the repository's captures.

    python3 fuzz/run.py --seconds 60 --target read       # capture readers + decoder
    python3 fuzz/run.py --seconds 60 --target pipeline   # the whole analysis
    python3 fuzz/run.py --seconds 3600 --corpus ~/np-corpus -- -jobs=1

Seeds: every capture in samples/ and tests/broken/ up to 64 KiB, copied to a seed directory;
new inputs that reach new code go to --corpus (kept between runs if you pass the same one).
Crashes, timeouts (an input over 10 s) and memory blow-ups (over 2 GiB RSS) are written to
--artifacts and make the exit status non-zero; libFuzzer's own log goes to
--artifacts/last-TARGET.log.  Runs single-process unless you pass libFuzzer options after `--`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SEED_DIRS = [ROOT / "samples", ROOT / "samples" / "formats", ROOT / "tests" / "broken"]
MAX_SEED = 64 << 10


def seeds(into: Path) -> int:
    n = 0
    for d in SEED_DIRS:
        for f in sorted(d.glob("*")):
            if f.is_file() and f.suffix in (".pcap", ".pcapng", ".gz") and \
                    f.stat().st_size <= MAX_SEED:
                shutil.copy(f, into / f"{d.name}-{f.name}")
                n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--target", choices=["read", "pipeline"], default="read")
    ap.add_argument("--corpus", type=Path, help="where new inputs are kept (default: temporary)")
    ap.add_argument("--artifacts", type=Path, default=Path("fuzz-artifacts"))
    ap.add_argument("libfuzzer", nargs="*", help="extra libFuzzer options (after --)")
    a = ap.parse_args()
    a.artifacts.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nagleprobe-fuzz-") as tmp:
        seed_dir = Path(tmp) / "seeds"
        seed_dir.mkdir()
        corpus = a.corpus or Path(tmp) / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        print(f"fuzz: target {a.target}, {seeds(seed_dir)} seed captures, {a.seconds} s",
              flush=True)
        cmd = [sys.executable, str(HERE / "fuzz_capture.py"), f"-max_total_time={a.seconds}",
               "-max_len=65536", "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
               f"-artifact_prefix={a.artifacts}/", *a.libfuzzer, str(corpus), str(seed_dir)]
        env = dict(os.environ, NAGLEPROBE_FUZZ_TARGET=a.target)
        log_path = a.artifacts / f"last-{a.target}.log"  # libFuzzer's progress, as it goes
        with open(log_path, "w") as log_file:
            proc = subprocess.run(cmd, env=env, stderr=log_file)
    log = log_path.read_text(errors="replace")
    done = re.findall(r"^Done (\d+) runs in (\d+) second", log, re.M)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    if done:
        print(f"fuzz: {a.target}: {done[-1][0]} inputs in {done[-1][1]} s, "
              f"coverage {cov[-1][0] if cov else '?'} edges, no crash")
    if proc.returncode != 0:
        tail = "\n".join(log.splitlines()[-40:])
        print(f"fuzz: {a.target}: FAILED (exit {proc.returncode}); artifacts in "
              f"{a.artifacts}\n{tail}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
