"""Coverage-guided fuzz target (atheris / libFuzzer) for the capture readers and the decoder.

Every input is written to a temporary file and read the way `nagleprobe analyze` reads it.
The only acceptable outcomes are a result or a `CaptureError`; any other exception (and any
crash, hang or memory blow-up, which libFuzzer watches for) is a finding.

    python fuzz/fuzz_capture.py [libFuzzer options] CORPUS_DIR [SEED_DIR ...]

`NAGLEPROBE_FUZZ_TARGET=pipeline` fuzzes the whole analysis (flows, detection, JSON report)
instead of read+decode only; it is about 100 times slower per input.  See fuzz/README.md.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter

import atheris

with atheris.instrument_imports(include=["nagleprobe"]):
    import nagleprobe
    from nagleprobe.decode import decode
    from nagleprobe.errors import CaptureError
    from nagleprobe.read import CaptureReader

PIPELINE = os.environ.get("NAGLEPROBE_FUZZ_TARGET") == "pipeline"
_fd, PATH = tempfile.mkstemp(prefix="nagleprobe-fuzz-", suffix=".cap",
                             dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
os.close(_fd)


def test_one_input(data: bytes) -> None:
    """Read (and decode, or fully analyse) one fuzzer-made capture."""
    with open(PATH, "wb") as f:
        f.write(data)
    try:
        if PIPELINE:
            nagleprobe.analyze(PATH, chunk_bytes=4096).to_json()
            return
        reader = CaptureReader(PATH, chunk_bytes=4096)  # small chunks: exercise the carry-over
        skipped: Counter = Counter()
        for batch in reader:
            decode(batch, skipped)
    except CaptureError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        os.unlink(PATH)


if __name__ == "__main__":
    main()
