"""How every output writes numbers, durations and the two ends of a connection, defined once
for the text report, `check`, `watch`, HTML and the tables' column names."""

from __future__ import annotations

SIDES = ("client", "server")  # the two ends, in the order of the endpoint tables
LONG_MS = 10_000.0  # durations from this long on are written in seconds in the text outputs


def human_count(n: int | float) -> str:
    """A count for people: thousands separated ("12,345")."""
    return f"{int(n):,}"


def human_ms(ms: float) -> str:
    """A duration given in ms, for people: "832.0 ms" under LONG_MS, else seconds with
    thousands separated ("3,712.8 s"). The JSON keeps its numbers."""
    if abs(ms) < LONG_MS:
        return f"{ms:.1f} ms"
    return f"{ms / 1e3:,.1f} s"


def plural(n: int | float | None) -> str:
    """The "s" of a plural: "stall" + plural(n)."""
    return "" if n == 1 else "s"


def short_number(x: float | None) -> str:
    """A limit or a measure as few digits as it takes (`-` for none)."""
    return f"{x:g}" if x is not None else "-"
