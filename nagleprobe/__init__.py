"""nagleprobe: find Nagle / delayed-ACK stalls in packet captures and name who must fix them.

    >>> import nagleprobe
    >>> report = nagleprobe.analyze("capture.pcap")
    >>> print(report)            # the text report the CLI prints
    >>> report.stalls            # pandas DataFrame, one row per stall
"""

from .errors import CaptureError, ExitStatus
from .pipeline import analyze
from .report import Report

__all__ = ["analyze", "Report", "CaptureError", "ExitStatus"]
__version__ = "0.1.0"
