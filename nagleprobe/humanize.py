"""How every output writes numbers, durations and the two ends of a connection, defined once
for the text report, `check`, `watch`, HTML and the tables' column names."""

from __future__ import annotations

SIDES = ("client", "server")  # the two ends, in the order of the endpoint tables
SECONDS_FROM_MS = 1_000.0  # durations from this long on are written in seconds for people
LONG_MS = 10_000.0  # ... and from this long on in the JSON document's sentences (`json_ms`)


def human_count(n: int | float) -> str:
    """A count for people: thousands separated ("12,345")."""
    return f"{int(n):,}"


def human_ms(ms: float) -> str:
    """A duration given in ms, for people: "832.0 ms" under a second, else seconds ("3.99 s",
    from 10 s on "3,712.8 s"). The JSON keeps its numbers."""
    s = ms / 1e3
    if abs(ms) < SECONDS_FROM_MS:
        return f"{ms:.1f} ms"
    return f"{s:.2f} s" if abs(s) < 10 else f"{s:,.1f} s"


def json_ms(ms: float) -> str:
    """A duration in a sentence of the JSON document (a fix's text): ms under LONG_MS, else
    seconds ("3,712.8 s"), as the document's schema has always had them."""
    if abs(ms) < LONG_MS:
        return f"{ms:.1f} ms"
    return f"{ms / 1e3:,.1f} s"


def plural(n: int | float | None) -> str:
    """The "s" of a plural: "stall" + plural(n)."""
    return "" if n == 1 else "s"


def counted(n: int | float, noun: str, nouns: str | None = None) -> str:
    """A count and its noun, singular for one: "1 stall", "12,345 packets" (`nouns`: the
    plural when it is not noun + "s")."""
    return f"{human_count(n)} {noun if n == 1 else nouns or noun + 's'}"


def flow_list(ids: list[int], most: int = 12) -> str:
    """Flows named by id: "flow 3", "flows 1, 0, 2" (the first `most`, then how many more)."""
    shown = ", ".join(map(str, ids[:most]))
    more = f" and {human_count(len(ids) - most)} more" if len(ids) > most else ""
    return f"flow{plural(len(ids))} {shown}{more}"


def short_number(x: float | None) -> str:
    """A limit or a measure as few digits as it takes (`-` for none)."""
    return f"{x:g}" if x is not None else "-"
