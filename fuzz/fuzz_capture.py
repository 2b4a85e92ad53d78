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
from atheris import import_hook

# Coverage of nagleprobe's code only.  Comparison ("dataflow") tracing stays off by default:
# atheris 3.0 leaks the result of every traced comparison that is not a plain bool, i.e. each
# numpy mask (measured: a toy comparing two 64K-element arrays reached 428 MB RSS in 3000 runs),
# which makes a run die of its 2 GiB RSS limit within minutes.  NAGLEPROBE_FUZZ_DATAFLOW=1 turns
# it on (better at guessing magic numbers, which the seed captures already hold).
with import_hook.HookManager({"nagleprobe"}, set(), enable_loader_override=True,
                             trace_dataflow=os.environ.get("NAGLEPROBE_FUZZ_DATAFLOW") == "1"):
    import nagleprobe
    from nagleprobe.decode import decode
    from nagleprobe.errors import CaptureError
    from nagleprobe.read import CaptureReader

PIPELINE = os.environ.get("NAGLEPROBE_FUZZ_TARGET") == "pipeline"
# The input file is unlinked at once and reopened through /proc, so that nothing is left
# behind when libFuzzer ends the process (it exits without unwinding Python).
_FD, _NAME = tempfile.mkstemp(prefix="nagleprobe-fuzz-", suffix=".cap",
                              dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
os.unlink(_NAME)
PATH = f"/proc/self/fd/{_FD}"


def test_one_input(data: bytes) -> None:
    """Read (and decode, or fully analyse) one fuzzer-made capture."""
    os.ftruncate(_FD, 0)
    os.pwrite(_FD, data, 0)
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
    atheris.Fuzz()


if __name__ == "__main__":
    main()
