"""Build hook for the optional compiled record walk and decoder (nagleprobe/_walk.c, _decode.c).

Everything else is in pyproject.toml. Without a C compiler or Python headers the extensions
are skipped (optional=True) and nagleprobe uses its pure-Python walk and numpy decoder.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nagleprobe._walk", ["nagleprobe/_walk.c"], optional=True),
                   Extension("nagleprobe._decode", ["nagleprobe/_decode.c"], optional=True)])
