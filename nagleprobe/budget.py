"""The stall budget of the CI gate: what a capture may contain and still pass, read from
`[tool.nagleprobe.check]` in the nearest pyproject.toml (or given on the command line) and
checked for sense before any capture is read."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from .errors import BudgetError
from .humanize import plural, short_number
from .selection import parse_host


@dataclass(frozen=True)
class Budget:
    """How many Nagle/delayed-ACK stalls a capture may contain and still pass.

    Every limit that is set must hold; with none set, no stall is allowed. `max_stalls` and
    `max_stall_ms` count the whole capture (its selected flows), `max_lost_share` (percent of
    a flow's duration lost to stalls) each flow. Stalls below `min_confidence` are ignored.
    `ports`/`hosts` select the flows checked: a flow is checked when one of its endpoints has
    one of the ports and one of the hosts (an address or a network); empty selects all.
    """

    max_stalls: int | None = None
    max_stall_ms: float | None = None
    max_lost_share: float | None = None
    min_confidence: float = 0.0
    ports: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    allow_empty: bool = False  # a capture with no TCP flow to check passes instead of EMPTY
    # a saved report each capture must be no worse than (`compare.Baseline`); with it and no
    # limit set, only that is checked
    baseline: str | None = None

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def has_limits(self) -> bool:
        """Whether any limit was set (else the default: no stall allowed)."""
        return not (self.max_stalls is None and self.max_stall_ms is None
                    and self.max_lost_share is None)

    @property
    def stall_limit(self) -> int | None:
        """The stall count limit in force: 0 when no limit at all was set (and no baseline)."""
        return self.max_stalls if self.has_limits or self.baseline is not None else 0

    def merged(self, **overrides: Any) -> Budget:
        """This budget with the given settings replaced (None means: keep this one's)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        for k in ("ports", "hosts"):
            if k in given:
                given[k] = tuple(given[k])
                if not given[k]:
                    del given[k]
        return replace(self, **given)

    def describe(self) -> str:
        """The budget in a few words, for verdict lines."""
        parts = []
        if self.baseline is not None:
            parts.append(f"no worse than the baseline {self.baseline}")
        if self.stall_limit == 0 and self.max_stall_ms is None and self.max_lost_share is None:
            parts.append("no stall allowed")
        elif self.has_limits:
            if self.stall_limit is not None:
                parts.append(f"at most {self.stall_limit} stall{plural(self.stall_limit)}")
            if self.max_stall_ms is not None:
                parts.append(f"at most {short_number(self.max_stall_ms)} ms lost")
            if self.max_lost_share is not None:
                parts.append(f"at most {short_number(self.max_lost_share)}% of any flow lost")
        if self.min_confidence > 0:
            parts.append(f"stalls with confidence >= {short_number(self.min_confidence)}")
        if self.ports:
            parts.append("port " + "/".join(map(str, self.ports)))
        if self.hosts:
            parts.append("host " + "/".join(self.hosts))
        if self.allow_empty:
            parts.append("empty captures allowed")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ports"], d["hosts"] = list(self.ports), list(self.hosts)
        d["effective_max_stalls"] = self.stall_limit
        return d


CONFIG_KEYS = {"max-stalls": "max_stalls", "max-stall-ms": "max_stall_ms",
               "max-lost-share": "max_lost_share", "min-confidence": "min_confidence",
               "port": "ports", "ports": "ports", "host": "hosts", "hosts": "hosts",
               "allow-empty": "allow_empty"}


def _validate(b: Budget) -> None:
    def bad(key: str, problem: str) -> BudgetError:
        return BudgetError(f"{key.replace('_', '-')} {problem}")

    if b.max_stalls is not None and (not _is_int(b.max_stalls) or b.max_stalls < 0):
        raise bad("max_stalls", f"must be a whole number >= 0, not {b.max_stalls!r}")
    for key, hi in (("max_stall_ms", None), ("max_lost_share", 100.0), ("min_confidence", 1.0)):
        v = getattr(b, key)
        if v is None and key != "min_confidence":
            continue
        if not _is_number(v) or v < 0 or (hi is not None and v > hi):
            rng = f"between 0 and {short_number(hi)}" if hi is not None else ">= 0"
            raise bad(key, f"must be a number {rng}, not {v!r}")
    for p in b.ports:
        if not _is_int(p) or not 0 < p < 65536:
            raise bad("ports", f"must be TCP ports (1-65535), not {p!r}")
    for h in b.hosts:
        if not isinstance(h, str):
            raise bad("hosts", f"must be IP addresses or networks, not {h!r}")
        parse_host(h)
    if not isinstance(b.allow_empty, bool):
        raise bad("allow_empty", f"must be true or false, not {b.allow_empty!r}")


def budget_from_mapping(table: Mapping[str, Any], source: str) -> Budget:
    """A budget from a config table (keys as the command-line options, e.g. max-stalls)."""
    kw: dict[str, Any] = {}
    try:
        for key, value in table.items():
            name = CONFIG_KEYS.get(key.replace("_", "-"))
            if name is None:
                known = ", ".join(sorted(set(CONFIG_KEYS) - {"port", "host"}))
                raise BudgetError(f"unknown setting {key!r} (known: {known})")
            if name in ("ports", "hosts"):
                value = tuple(value) if isinstance(value, list) else (value,)
                if name == "hosts":
                    value = tuple(parse_host(h) if isinstance(h, str) else h for h in value)
            kw[name] = value
        return Budget(**kw)
    except BudgetError as e:
        raise BudgetError(f"{source}: {e}") from None


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml in `start` (default: the working directory) or above."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file():
            return d / "pyproject.toml"
    return None


def load_budget(pyproject: Path | None = None, start: Path | None = None
                ) -> tuple[Budget, Path | None]:
    """The budget of `[tool.nagleprobe.check]` in `pyproject` (default: the nearest one).

    Returns the budget and the file it came from; the default budget and None when the
    nearest pyproject.toml has no such table (or there is none). Raises BudgetError for a file
    that cannot be read or parsed, or a setting that makes no sense.
    """
    path = pyproject or find_pyproject(start)
    if path is None:
        return Budget(), None
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise BudgetError(f"{path}: cannot read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BudgetError(f"{path}: not valid TOML: {e}") from None
    table = doc.get("tool", {}).get("nagleprobe", {}).get("check")
    if table is None:
        return Budget(), None
    if not isinstance(table, dict):
        raise BudgetError(f"{path}: [tool.nagleprobe.check] must be a table")
    return budget_from_mapping(table, f"{path} [tool.nagleprobe.check]"), Path(path)


def command_budget(config: Path | None, use_config: bool = True, **given: Any
                   ) -> tuple[Budget, Path | None]:
    """The budget a command checks with: `load_budget(config)` (with `use_config` false the
    default budget) with the settings `given` on the command line over it (None: not given);
    and the file it came from."""
    budget, source = load_budget(config) if use_config else (Budget(), None)
    return budget.merged(**given), source


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
