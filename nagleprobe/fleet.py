"""Fleets: many captures at once, one analysis per capture, on a Dask cluster or locally.

Rotated captures from hundreds of hosts are analysed where they can be read: with a
`distributed.Client` each capture is a task on the cluster's workers, which read the file
(a path they can reach, or a URL) themselves and send back only the verdict and the numpy
columns of the report's small tables, never its packets; without one, `check`'s local
process pool does the same. The verdicts are `check`'s (`nagleprobe.check.run_check` is
the one place that runs captures in parallel); each table is made once, of every
capture's columns joined, with a `capture` column in front.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .check import STATUS_NAMES, Budget, CaptureVerdict, CheckRun, expand_targets, run_check
from .errors import ExitStatus
from .read import URL_TIMEOUT_S

if TYPE_CHECKING:
    import pandas as pd

DASK_TIMEOUT_S = 5.0  # connecting to the scheduler gives up after this long
TABLES = ("flows", "stalls", "endpoints")


class SchedulerError(Exception):
    """The Dask scheduler cannot be used: dask is not installed, or it cannot be reached."""


def connect(address: str, timeout: float = DASK_TIMEOUT_S) -> Any:
    """A `distributed.Client` for the scheduler at `address` (e.g. tcp://10.0.0.5:8786);
    SchedulerError, within about `timeout` seconds, when there is none."""
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerError("--dask needs dask.distributed: pip install "
                             "'nagleprobe[dask]'") from None
    try:
        # asked first on a connection of our own: a Client that fails to start leaves a
        # slow close and a traceback at exit behind it
        with ThreadPoolExecutor(1) as one:  # its own event loop, also under a notebook's
            kind = one.submit(asyncio.run, _identity(address, timeout)).result()
        if kind != "Scheduler":
            raise SchedulerError(f"{address} is not a Dask scheduler (it says it is a "
                                 f"{kind!r})")
        return Client(address, timeout=timeout, set_as_default=False)
    except SchedulerError:
        raise
    except Exception as e:  # refused, timed out, a malformed address, not Dask at all
        text = " ".join(str(e).split()) or type(e).__name__
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {text}") from None


async def _identity(address: str, timeout: float) -> str:
    """The kind of Dask server at `address` ("Scheduler"), asked within `timeout` s."""
    from distributed.comm import connect as open_comm

    try:
        comm = await asyncio.wait_for(open_comm(address, timeout=timeout), timeout)
    except asyncio.TimeoutError:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: no answer "
                             f"within {timeout:g} s") from None
    except (MemoryError, EOFError) as e:  # the handshake read garbage: not Dask
        raise SchedulerError(f"{address} did not answer as a Dask scheduler: "
                             f"{type(e).__name__}") from None
    try:
        await comm.write({"op": "identity", "reply": True})
        reply = await asyncio.wait_for(comm.read(), timeout)
    except Exception as e:  # a server that is not Dask: garbage, silence or a hang-up
        text = " ".join(str(e).split()) or f"no answer within {timeout:g} s"
        raise SchedulerError(f"{address} did not answer as a Dask scheduler: {text}") from None
    finally:
        comm.abort()
    return str(reply.get("type")) if isinstance(reply, dict) else type(reply).__name__


@dataclass
class Fleet:
    """The result of `analyze_many`: a verdict per capture (in the order given) and the
    flows, stalls and endpoints of every capture that could be read, each table with a
    `capture` column (the path or URL) in front of the report's own columns. `run` is the
    `check` run behind it (`run.verdicts`: the verdicts as `CaptureVerdict` objects).
    `notes`: what finding the captures left out and why (a file reached under a second
    name)."""

    run: CheckRun
    verdicts: pd.DataFrame  # one row per capture, see VERDICT_COLUMNS
    flows: pd.DataFrame
    stalls: pd.DataFrame
    endpoints: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> ExitStatus:
        """The most severe verdict, as `nagleprobe check` exits."""
        return self.run.status

    @property
    def failed(self) -> pd.DataFrame:
        """The rows of `verdicts` whose capture could not be analysed (unreadable, or an
        internal error)."""
        return self.verdicts[self.verdicts["error"].notna()]

    def __repr__(self) -> str:
        return (f"<nagleprobe.Fleet: {len(self.verdicts)} captures, {len(self.failed)} "
                f"failed, {len(self.flows)} flows, {len(self.stalls)} stalls>")


# the verdicts table: the capture, `check`'s status name ("pass", "fail", "empty",
# "unresolved", "unreadable", "internal-error") and exit status, the counts of the selected flows, and
# why (reasons, the error, the capture's warnings; several joined with "; ")
VERDICT_COLUMNS = ("capture", "status", "exit_status", "stalls", "stall_ms", "flows",
                   "flows_selected", "ignored_stalls", "packets", "seconds", "reasons", "error",
                   "warnings")


def verdict_table(verdicts: list[CaptureVerdict]) -> pd.DataFrame:
    """The verdicts as a table, one row per capture in the order given (VERDICT_COLUMNS)."""
    import pandas as pd

    return pd.DataFrame([(v.path, STATUS_NAMES[v.status], int(v.status), v.stalls,
                          v.stall_ms, v.flows_total, v.flows_selected, v.ignored_stalls,
                          v.packets, v.seconds, "; ".join(v.reasons), v.error,
                          "; ".join(v.warnings)) for v in verdicts],
                        columns=list(VERDICT_COLUMNS))


def analyze_many(paths: Iterable[str | os.PathLike[str]] | str, client: Any = None, *,
                 budget: Budget | None = None, jobs: int | None = None,
                 strict: bool = False,
                 progress: Callable[[CaptureVerdict], None] | None = None,
                 url_timeout: float = URL_TIMEOUT_S) -> Fleet:
    """Analyse every capture of `paths` (files, directories, glob patterns, URLs), one
    analysis per capture: on the workers of `client` (a `distributed.Client`, or a
    scheduler address to connect to) when given, else in local processes (`jobs`, default
    one per core). Paths must be readable from the workers as given. A capture that fails
    gets its error verdict; the others go on. `budget` (default: no stall allowed) decides
    each verdict, as `nagleprobe check` does; `progress` is called with each verdict;
    `url_timeout` is the longest wait for an http(s) server, in seconds."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    targets = expand_targets([os.fspath(p) for p in paths])
    own = isinstance(client, str)
    if own:
        client = connect(client)
    try:
        run = run_check(targets, budget or Budget(), jobs=jobs, strict=strict, client=client,
                        progress=progress, with_tables=True, url_timeout=url_timeout)
    finally:
        if own:
            client.close()
    return Fleet(run, verdict_table(run.verdicts),
                 *(_combined(run.verdicts, name) for name in TABLES), notes=targets.notes)


def _combined(verdicts: list[CaptureVerdict], name: str) -> pd.DataFrame:
    """One table of every capture's `name` table, with the capture's path in front: made
    once from the captures' columns joined."""
    import numpy as np
    import pandas as pd

    from .dataframes import table

    parts = [(v.path, v.tables[name]) for v in verdicts if v.tables is not None]
    if not parts:
        return pd.DataFrame({"capture": pd.Series([], dtype=object)})
    names = list(parts[0][1])  # every capture's table has the same columns (one capture each)
    rows = [len(cols[names[0]]) for _, cols in parts]
    joined = {"capture": np.repeat(np.array([path for path, _ in parts], dtype=object), rows)}
    joined.update((n, np.concatenate([cols[n] for _, cols in parts])) for n in names)
    return table(joined)
