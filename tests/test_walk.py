"""read.walk_records: the compiled pcap record walk agrees with the pure-Python one."""

import random
from pathlib import Path

import numpy as np
import pytest

from nagleprobe import read

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
compiled = pytest.mark.skipif(not hasattr(read, "_walk"),
                              reason="nagleprobe._walk not built (no C compiler at install)")


def both(buf: bytearray, big: bool) -> tuple:
    a, pa = read._walk_python(buf, big)
    b, pb = read._walk_compiled(buf, big)
    return a.tolist(), pa, b.tolist(), pb


@compiled
@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.pcap")) + [SAMPLES / "formats" / "base_lo_be.pcap"],
                         ids=lambda p: p.name)
def test_compiled_walk_finds_the_same_records_in_real_captures(path):
    raw = path.read_bytes()
    big = raw[:4] == b"\xa1\xb2\xc3\xd4"
    body = bytearray(raw[24:])
    a, pa, b, pb = both(body, big)
    assert (a, pa) == (b, pb)
    # every record: the walk ends exactly at the end of the file
    assert pa - 8 == len(body)
    # and on every prefix (records cut by a chunk boundary)
    for cut in random.Random(1).sample(range(len(body)), 50):
        assert both(body[:cut], big)[:2] == both(body[:cut], big)[2:]


@compiled
def test_compiled_walk_on_garbage_lengths_and_tiny_buffers():
    rng = random.Random(7)
    for _ in range(300):
        buf = bytearray(rng.randbytes(rng.randrange(0, 200)))
        for big in (False, True):
            a, pa, b, pb = both(buf, big)
            assert (a, pa) == (b, pb)


def test_pure_python_walk_steps_over_caplen_plus_header():
    rec = lambda n: (0).to_bytes(8, "little") + n.to_bytes(4, "little") * 2 + bytes(n)  # noqa: E731
    buf = bytearray(rec(10) + rec(0) + rec(3))
    starts, end = read._walk_python(buf, False)
    assert starts.tolist() == [8, 34, 50] and end - 8 == len(buf)
    assert np.array_equal(read.walk_records(buf, False)[0], starts)
