"""Which flows and stalls a report covers: the one selection behind `analyze --port/--host/
--flow/--top/--min-confidence`, `check`'s `--port/--host/--min-confidence` and
`Report.select(...)`, so the options mean the same everywhere.

A flow is selected when one of its endpoints has one of the ports and one of its endpoints is
at one of the hosts (an address or a network); an empty list selects all. Stalls with a
confidence below `min_confidence` are ignored: they leave the stall table and the flows'
counts. `top` keeps the N flows (with stalls) that lost the most time, worst first.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from .advice import FIX_FIELDS
from .errors import BudgetError
from .humanize import SIDES

if TYPE_CHECKING:
    import pandas as pd  # loaded by the functions that take tables (the CLI parses --host early)


def worst_order(stall_ms: np.ndarray, ids: np.ndarray, among: np.ndarray | None = None
                ) -> np.ndarray:
    """The rows of a flows table (its columns; `among`: only the rows of this mask), those
    that lost the most time to stalls first (ties by id): the order of every "worst first"
    list (--top, the text, HTML and pcapng comments, the pictures)."""
    rows = np.arange(len(ids)) if among is None else np.flatnonzero(among)
    return rows[np.lexsort((ids[rows], -stall_ms[rows]))]


def worst_first(flows: pd.DataFrame) -> pd.DataFrame:
    """The flows table in `worst_order`."""
    return flows.iloc[worst_order(flows["stall_ms"].to_numpy(), flows["id"].to_numpy())]


def as_tuple(value: Any) -> tuple[Any, ...]:
    """One value or a list of them (None: none) as a tuple."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, int, float)):
        return (value,)
    return tuple(value)


def parse_host(text: str) -> str:
    """A host selector (IPv4/IPv6 address or network, brackets allowed), normalised."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    try:
        net = ipaddress.ip_network(t, strict=False)
    except ValueError:
        raise BudgetError(f"not an IP address or network: {text!r}") from None
    return str(net.network_address) if net.num_addresses == 1 else str(net)


def networks(hosts: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Host selectors (addresses or networks, brackets allowed; see `parse_host`)."""
    return [ipaddress.ip_network(parse_host(h), strict=False) for h in hosts]


def split_endpoints(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Address (IPv6 without brackets) and port of "ip:port" / "[ipv6]:port" strings."""
    import pandas as pd

    parts = col.astype(object).str.rsplit(":", n=1)
    addr = parts.str[0].str.strip("[]").to_numpy(dtype=object)
    port = pd.to_numeric(parts.str[1]).to_numpy(dtype=np.int64) if len(col) else np.zeros(0, int)
    return addr, port


def endpoint_hits(col: pd.Series, ports: tuple[int, ...], nets: list
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per endpoint of a column ("ip:port"): is its port one of `ports`, its address in one
    of `nets` (each all True when the list is empty)."""
    addr, port = split_endpoints(col)
    port_hit = np.isin(port, np.asarray(ports, dtype=np.int64)) if ports else \
        np.ones(len(col), dtype=bool)
    if not nets:
        return port_hit, np.ones(len(col), dtype=bool)
    uniq, inv = np.unique(addr.astype(str), return_inverse=True) if len(addr) else \
        (np.zeros(0, dtype=str), np.zeros(0, dtype=np.int64))
    inside = np.array([any(ipaddress.ip_address(a) in n for n in nets) for a in uniq.tolist()],
                      dtype=bool)
    return port_hit, inside[inv.reshape(-1)] if len(addr) else np.zeros(0, dtype=bool)


def flow_mask(flows: pd.DataFrame, ports: Iterable[int] = (), hosts: Iterable[str] = ()
              ) -> np.ndarray:
    """The flows (rows of a flows table, or its columns) with an endpoint on one of `ports`
    and an endpoint at one of `hosts`; empty lists select all."""
    ports, nets = tuple(int(p) for p in ports), networks(hosts)
    n = len(flows[SIDES[0]])
    if not ports and not nets:
        return np.ones(n, dtype=bool)
    import pandas as pd
    port_any = np.zeros(n, dtype=bool)
    host_any = np.zeros(n, dtype=bool)
    for side in SIDES:
        p, h = endpoint_hits(pd.Series(flows[side], dtype=object), ports, nets)
        port_any |= p
        host_any |= h
    return port_any & host_any


def confident(stalls: pd.DataFrame, min_confidence: float | None) -> np.ndarray:
    """The stalls counted at this confidence floor (stalls below it are ignored)."""
    if not min_confidence:
        return np.ones(len(stalls["confidence"]), dtype=bool)
    return np.asarray(stalls["confidence"]) >= min_confidence


def selected_stalls(client: np.ndarray, server: np.ndarray, confidence: np.ndarray,
                    ports: Iterable[int] = (), hosts: Iterable[str] = (),
                    min_confidence: float | None = None) -> np.ndarray:
    """Which stalls (their flow's `client` and `server` endpoints, their `confidence`) the
    selection keeps, without a report's tables (`watch`'s stall events)."""
    import pandas as pd

    keep = flow_mask(pd.DataFrame({"client": client, "server": server}), ports, hosts)
    return keep & confident(pd.DataFrame({"confidence": confidence}), min_confidence)


def recount(flows: pd.DataFrame, stalls: pd.DataFrame) -> pd.DataFrame:
    """The flows table with its stall counts, time lost and shares recomputed from `stalls`
    (after stalls were ignored); a flow left without stalls loses its fix."""

    fl = flows.copy()
    by = stalls.groupby("flow")["delay_ms"]
    n = by.size().reindex(fl["id"].to_numpy(), fill_value=0).to_numpy()
    ms = by.sum().reindex(fl["id"].to_numpy(), fill_value=0.0).to_numpy()
    dur = fl["duration_s"].to_numpy(dtype=float)
    fl["stalls"] = n.astype(fl["stalls"].dtype)
    fl["stall_ms"] = np.round(ms, 3)
    fl["lost_share"] = np.round(np.divide(ms / 1e3, dur, out=np.zeros(len(fl)), where=dur > 0), 4)
    fl["duration_without_stalls_s"] = np.round(np.maximum(dur - ms / 1e3, 0.0), 6)
    for k in FIX_FIELDS:
        fl[f"fix_{k}"] = fl[f"fix_{k}"].where(n > 0, None)
    return fl


def describe(sel: dict[str, Any]) -> str:
    """The criteria of a selection object in a few words ("port 8000, top 5")."""
    parts = []
    if sel.get("ports"):
        parts.append("port " + "/".join(map(str, sel["ports"])))
    if sel.get("hosts"):
        parts.append("host " + "/".join(sel["hosts"]))
    if sel.get("flows"):
        parts.append("flow " + "/".join(map(str, sel["flows"])))
    if sel.get("endpoint") is not None:
        parts.append(f"endpoint {sel['endpoint']}")
    if sel.get("side") is not None:
        parts.append(f"on the {sel['side']} side")
    if sel.get("stalled") is not None:
        parts.append("with stalls" if sel["stalled"] else "without stalls")
    if sel.get("min_confidence"):
        parts.append(f"confidence >= {sel['min_confidence']:g}")
    if sel.get("top") is not None:
        parts.append(f"top {sel['top']} by time lost")
    return ", ".join(parts) or "all"


def selection_line(sel: dict[str, Any]) -> str:
    """The text report's line on a selection: "selected: 2 of 40 flows (port 8000)"."""
    from .humanize import human_count

    total = sel["flows_total"]
    line = (f"selected: {human_count(sel['flows_selected'])} of {human_count(total)} "
            f"flow{'' if total == 1 else 's'} ({sel['text']})")
    if sel["stalls_ignored"]:
        n = sel["stalls_ignored"]
        line += (f"; {human_count(n)} stall{'' if n == 1 else 's'} below confidence "
                 f"{sel['min_confidence']:g} ignored")
    return line
