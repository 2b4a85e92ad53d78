"""The result tables as pandas DataFrames, for notebooks: flows, stalls and endpoints made
from their numpy columns (`tables`), the capture's warnings, and one row per TCP segment of
the reassembled flows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import Columns
from .decode import SYN, TCP_FLAG_NAMES
from .flows import Flows
from .humanize import SIDES
from .tables import NULLABLE, TABLE_ONLY
from .weirds import Weird

# the dtype pandas gives text (str from pandas 3, object before): every text column has it,
# also when a table is empty or a column holds only missing values
TEXT_DTYPE = pd.Series(["x"]).dtype


def table(columns: Columns) -> pd.DataFrame:
    """A DataFrame of `tables.report_columns` columns (numbers used as they are, not
    copied): times as UTC datetimes, -1 in a NULLABLE column as NA, text in TEXT_DTYPE."""
    out = {}
    for name, col in columns.items():
        if name in TABLE_ONLY:
            col = _utc(col)
        elif name in NULLABLE:
            known = col >= 0
            col = pd.array(col, dtype="Int64")
            col[~known] = pd.NA
        elif col.dtype == object:  # text (None: missing), made TEXT_DTYPE at once (never
            col = pd.array(col, dtype=TEXT_DTYPE)  # inferred first)
        out[name] = col
    return settle_dtypes(pd.DataFrame(out, copy=False))


def columns_of(df: pd.DataFrame) -> Columns:
    """The numpy columns of a table (`table`'s inverse): datetimes as epoch nanoseconds, NA
    in a NULLABLE column as -1, text as objects (missing: None)."""
    out = {}
    for name in df.columns:
        col = df[name]
        if name in TABLE_ONLY:
            out[name] = col.to_numpy(dtype="M8[ns]").view(np.int64)
        elif name in NULLABLE:
            out[name] = col.to_numpy(dtype=np.int64, na_value=-1)
        elif isinstance(col.dtype, np.dtype):
            out[name] = col.to_numpy()
        else:  # text
            out[name] = col.to_numpy(dtype=object, na_value=None)
    return out


def _utc(ns: np.ndarray) -> pd.DatetimeIndex:
    """Epoch nanoseconds as UTC pandas datetimes (the same numbers seen as datetimes, not
    converted one by one)."""
    return pd.DatetimeIndex(np.asarray(ns, dtype=np.int64).view("M8[ns]")).tz_localize("UTC")


def settle_dtypes(df: pd.DataFrame) -> pd.DataFrame:
    """Give every text column the same dtype whatever its content (an empty column or one
    of only None would otherwise stay `object` under pandas 3)."""
    for name, dtype in df.dtypes.items():
        if dtype == object:
            df[name] = df[name].astype(TEXT_DTYPE)
    return df


def warning_table(warnings: list[Weird]) -> pd.DataFrame:
    """One row per capture warning: its code (`weirds.WEIRDS`), count and text."""
    return settle_dtypes(pd.DataFrame({
        "code": np.array([w.code for w in warnings], dtype=object),
        "count": np.array([w.count for w in warnings], dtype=np.int64),
        "text": np.array([str(w) for w in warnings], dtype=object)}))


def segment_table(f: Flows, origin_ns: int, ids: np.ndarray | None = None) -> pd.DataFrame:
    """One row per TCP segment of the given flows (all if None), in flow then time order.

    seq is relative to the sender's ISN and ack to the peer's (0 at the SYN, as Wireshark
    shows them); `window_bytes` applies the window scale both SYNs agreed on (never to SYNs).
    """
    s = f.seg
    if ids is None:
        rows = np.arange(len(s["flow"]))
    else:
        bounds = [f.rows(int(i)) for i in ids]
        rows = (np.concatenate([np.arange(b.start, b.stop) for b in bounds]) if bounds
                else np.zeros(0, dtype=np.int64))
    fid, d = s["flow"][rows], s["dir"][rows].astype(np.int64)
    flags = s["flags"][rows].astype(np.int64)
    ts = s["ts_ns"][rows].astype(np.int64)
    ack = pd.array(s["ack"][rows], dtype="Int64")
    ack[s["ack"][rows] < 0] = pd.NA
    window = s["window"][rows].astype(np.int64)
    wscale = f.flow["wscale"].reshape(-1, 2)[fid, d] if len(rows) else np.zeros(0, np.int64)
    syn = (flags & SYN) != 0
    window_bytes = pd.array(np.where(syn, window, window << np.maximum(wscale, 0)), dtype="Int64")
    window_bytes[(wscale < 0) & ~syn] = pd.NA
    return settle_dtypes(pd.DataFrame({
        "flow": fid.astype(np.int64),
        "sender": np.array(SIDES, dtype=object)[d],
        "frame": s["frame"][rows].astype(np.int64),
        "time": _utc(ts),
        "time_s": (ts - origin_ns) / 1e9,
        "seq": s["seq"][rows].astype(np.int64),
        "ack": ack,
        "payload": s["payload"][rows].astype(np.int64),
        "flags": _flag_names(flags),
        "window": window,
        "window_bytes": window_bytes,
        "retransmission": s["retrans"][rows].astype(bool),
        "keepalive": s["keepalive"][rows].astype(bool),
    }))


def _flag_names(flags: np.ndarray) -> np.ndarray:
    """TCP flags as Wireshark names them, e.g. "PSH,ACK", one lookup per distinct value."""
    uniq, inv = np.unique(flags, return_inverse=True)
    names = np.array([",".join(n for b, n in enumerate(TCP_FLAG_NAMES) if v >> b & 1)
                      for v in uniq.tolist()], dtype=object)
    return names[inv.reshape(-1)]
