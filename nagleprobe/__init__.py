"""nagleprobe: find Nagle / delayed-ACK stalls in packet captures and name who must fix them.

    >>> import nagleprobe
    >>> report = nagleprobe.analyze("capture.pcap")
    >>> print(report)            # the text report the CLI prints
    >>> report.stalls            # pandas DataFrame, one row per stall
    >>> fleet = nagleprobe.analyze_many(["a.pcap", "s3://bucket/b.pcap.gz"], client=None)
"""

from typing import Any

from .errors import CaptureError, ExitStatus

__all__ = ["analyze", "analyze_many", "Report", "CaptureError", "ExitStatus"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`analyze` and `Report` load numpy/pandas on first use, so that the pytest plugin
    (imported by every pytest run where nagleprobe is installed) costs nothing until used."""
    if name == "analyze":
        from .pipeline import analyze

        return analyze
    if name == "analyze_many":
        from .fleet import analyze_many

        return analyze_many
    if name == "Report":
        from .report import Report

        return Report
    raise AttributeError(f"module 'nagleprobe' has no attribute {name!r}")
