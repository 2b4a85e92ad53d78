"""Build hook for the optional compiled pcap record walk (nagleprobe/_walk.c).

Everything else is in pyproject.toml. Without a C compiler or Python headers the extension
is skipped (optional=True) and nagleprobe uses its pure-Python walk.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nagleprobe._walk", ["nagleprobe/_walk.c"], optional=True)])
