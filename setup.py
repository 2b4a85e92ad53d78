"""Build hook for the optional compiled parts: record walk, decoder, sequence space, the
evidence chain and the JSON row writer (nagleprobe/_walk.c, _decode.c, _flows.c, _detect.c,
_jsonrows.c).

Everything else is in pyproject.toml. Without a C compiler or Python headers the extensions
are skipped (optional=True) and nagleprobe does the same work in Python and numpy.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nagleprobe._walk", ["nagleprobe/_walk.c"], optional=True),
                   Extension("nagleprobe._decode", ["nagleprobe/_decode.c"], optional=True),
                   Extension("nagleprobe._flows", ["nagleprobe/_flows.c"], optional=True),
                   Extension("nagleprobe._detect", ["nagleprobe/_detect.c"], optional=True),
                   Extension("nagleprobe._jsonrows", ["nagleprobe/_jsonrows.c"], optional=True)])
