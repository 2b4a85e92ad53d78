"""Build hook for the optional compiled parts: record walk, decoder, sequence space, the
evidence chain and the JSON row writer (nagleprobe/_walk.c, _decode.c, _flows.c, _detect.c,
_jsonrows.c), each including nagleprobe/_columns.h (generated: nagleprobe/cheader.py).

Everything else is in pyproject.toml. Without a C compiler or Python headers the extensions
are skipped (optional=True) and nagleprobe does the same work in Python and numpy.
"""

from setuptools import Extension, setup

HEADER = "nagleprobe/_columns.h"

setup(ext_modules=[Extension(f"nagleprobe.{name}", [f"nagleprobe/{name}.c"], depends=[HEADER],
                             optional=True)
                   for name in ("_walk", "_decode", "_flows", "_detect", "_jsonrows")])
