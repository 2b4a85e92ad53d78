"""Pictures of a Report: the time-sequence graph of a flow with its stalls drawn in, the
distribution of stall lengths and of the peers' ACK delays, an overview of the flows, and
the requests' latency CDF with and without the stalls.

Every function takes an optional matplotlib `ax` (a new pyplot figure if None) and returns
what it drew on. matplotlib (the `plot` extra) is imported by this module only, which
nothing on the CLI's text or JSON path imports.

    >>> from nagleprobe import plot
    >>> plot.time_sequence(report)             # the worst flow, all of it
    >>> plot.time_sequence(report, 3, stall=0) # flow 3, zoomed to its first stall
    >>> plot.latency_cdf(report)               # what the stalls cost the requests
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

try:
    from matplotlib.ticker import FuncFormatter, MaxNLocator
except ImportError as e:  # ModuleNotFoundError for a missing matplotlib, or None in modules
    if not (e.name or "").startswith("matplotlib"):
        raise
    raise ImportError("nagleprobe.plot draws with matplotlib, which is not installed: "
                      "pip install 'nagleprobe[plot]' (or pip install matplotlib)",
                      name=e.name) from None

from .detect import KNOWN_TIMERS_MS, TIMER_BANDS
from .selection import worst_first

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .tables import Result

SIDE_COLOR = {"client": "tab:blue", "server": "tab:orange"}
STALL_COLOR = "tab:red"
ACK_COLOR = "darkred"
# gids let tests (and users) find what was drawn: spans, markers, bars
GID_SPAN, GID_S1, GID_ACK, GID_S2 = "stall-span", "stall-s1", "stall-ack", "stall-s2"
GID_LIFETIME, GID_FLOW_STALLS = "flow-lifetime", "flow-stalls"
GID_STALL_HIST, GID_ACK_HIST, GID_TIMER = "stall-length-hist", "ack-delay-hist", "timer-mark"
GID_CDF, GID_CDF_WITHOUT = "latency-cdf", "latency-cdf-without-stalls"


def _new_ax(figsize: tuple[float, float]) -> Axes:
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize, layout="constrained")[1]


def _seconds_axis(ax: Axes) -> None:
    """Time ticks as the seconds they are (those of the evidence tables): no "+1.2e8"
    offset or "1e8" multiplier, which a capture whose first packet came long before the
    flows otherwise gets."""
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)


def _pick_flow(report: Result, flow: int | None) -> int:
    """The given flow id, or the flow that lost the most time (the first flow if none did)."""
    if flow is not None:
        if flow not in report.flows.index:
            raise KeyError(f"no flow {flow} in this report")
        return int(flow)
    if not len(report.flows):
        raise ValueError("the report has no flows to plot")
    worst = worst_first(report.flows)
    return int(worst["id"].iloc[0])


def _flow_title(report: Result, fid: int) -> str:
    f = report.flows.loc[fid]
    text = f"Flow {fid}: client {f['client']} \N{RIGHTWARDS ARROW} server {f['server']}"
    if f["stalls"]:
        text += (f"\n{f['stalls']} stall{'s' if f['stalls'] != 1 else ''}, "
                 f"{f['stall_ms']:.1f} ms lost ({100 * f['lost_share']:.0f}% of "
                 f"{f['duration_s']:.3f} s)")
    else:
        text += f"\nno stalls in {f['duration_s']:.3f} s"
    return text


def stall_points(report: Result, flow: int) -> pd.DataFrame:
    """Where each stall of `flow` sits on the time-sequence graph: for S1, the late pure
    ACK and S2, the time (s since the first packet), the frame and the sequence number drawn
    (S1's and S2's end, the ACK's acknowledgement number)."""
    seg = report.segments
    seg = seg[seg["flow"] == flow].drop_duplicates("frame").set_index("frame")
    st = report.stalls[report.stalls["flow"] == flow]
    out = {"flow": np.full(len(st), flow), "number": np.arange(len(st)),
           "of": np.full(len(st), len(st)), "sender": st["sender"].to_numpy(dtype=object),
           "delay_ms": st["delay_ms"].to_numpy()}
    for point in ("small", "ack", "released"):
        frames = st[f"{point}_frame"].to_numpy()
        rows = seg.loc[frames]
        out[f"{point}_frame"] = frames
        out[f"{point}_s"] = rows["time_s"].to_numpy()
        y = (rows["ack"].to_numpy(dtype=np.float64) if point == "ack"
             else (rows["seq"] + rows["payload"]).to_numpy(dtype=np.float64))
        out[f"{point}_y"] = y
    return pd.DataFrame(out)


def time_sequence(report: Result, flow: int | None = None, *, stall: int | None = None,
                  ax: Axes | None = None, legend: bool = True, max_labels: int = 25) -> Axes:
    """The time-sequence (Stevens) graph of one flow: each data segment as a bar from its
    relative sequence number to its end, for both directions, and the peer's ACK line over
    each. Every stall is shaded from S1 to S2 and labelled with its length, with S1, the
    late pure ACK and S2 marked.

    `flow`: a flow id (default: the one that lost the most time). `stall`: zoom to that
    stall of the flow (0-based, in time order); the time axis is then in ms since its S1.
    Stall lengths are written only when at most `max_labels` stalls are in view.
    """
    fid = _pick_flow(report, flow)
    ax = ax if ax is not None else _new_ax((11, 5.5) if stall is None else (9, 4.8))
    seg = report.segments
    seg = seg[seg["flow"] == fid]
    pts = stall_points(report, fid)
    if stall is not None and not 0 <= stall < len(pts):
        raise IndexError(f"flow {fid} has {len(pts)} stalls; there is no stall {stall}")
    origin = pts["small_s"].iloc[stall] if stall is not None else 0.0
    scale = 1e3 if stall is not None else 1.0

    def tx(t: np.ndarray | float) -> np.ndarray | float:
        return (t - origin) * scale

    for side in ("client", "server"):
        mine = seg[seg["sender"] == side]
        data = mine[mine["payload"] > 0]
        color = SIDE_COLOR[side]
        x, lo = tx(data["time_s"].to_numpy()), data["seq"].to_numpy()
        hi = lo + data["payload"].to_numpy()
        if len(data):
            ax.vlines(x, lo, hi, colors=color, lw=1.6, label=f"{side} data (seq to seq+len)")
            ax.plot(x, hi, ls="none", marker="_", ms=5, color=color)
        rtx = data["retransmission"].to_numpy()
        if rtx.any():
            ax.plot(x[rtx], hi[rtx], ls="none", marker="x", ms=6, color="black",
                    label="retransmission")
        peer = seg[(seg["sender"] != side) & seg["ack"].notna()]
        if len(peer) and len(data):
            acks = np.maximum.accumulate(peer["ack"].to_numpy(dtype=np.int64))
            ax.step(tx(peer["time_s"].to_numpy()), acks, where="post", color=color, lw=0.9,
                    ls="--", alpha=0.8,
                    label=f"{'server' if side == 'client' else 'client'}'s ACKs of it")

    shown = pts if stall is None else pts.iloc[[stall]]
    for i, p in enumerate(shown.itertuples()):
        # alternate the shade so that back-to-back stalls stay distinct
        ax.axvspan(tx(p.small_s), tx(p.released_s), color=STALL_COLOR,
                   alpha=0.13 if i % 2 else 0.24, lw=0, gid=GID_SPAN,
                   label="stalled: S1 to S2" if i == 0 else None)
    ax.plot(tx(shown["small_s"].to_numpy()), shown["small_y"], ls="none", marker="o", ms=8,
            mfc="none", mec=STALL_COLOR, mew=1.8, gid=GID_S1,
            label="S1: small segment, left unacknowledged")
    ax.plot(tx(shown["ack_s"].to_numpy()), shown["ack_y"], ls="none", marker="v", ms=8,
            color=ACK_COLOR, gid=GID_ACK, label="late pure ACK (peer's delayed ACK)")
    ax.plot(tx(shown["released_s"].to_numpy()), shown["released_y"], ls="none", marker="s",
            ms=6, color=STALL_COLOR, gid=GID_S2, label="S2: held by Nagle, released")

    if stall is None:
        ax.set_xlabel("time since the first packet (s)")
        _seconds_axis(ax)
        ax.set_title(_flow_title(report, fid), fontsize=10)
        if 0 < len(shown) <= max_labels:
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi + 0.15 * (hi - lo))  # headroom: the lengths go above the data
            for p in shown.itertuples():
                ax.text((p.small_s + p.released_s) / 2, 0.98, f"{p.delay_ms:.1f} ms",
                        transform=ax.get_xaxis_transform(), rotation=90, ha="center",
                        va="top", fontsize=7, color=ACK_COLOR)
    else:
        _zoom(ax, seg, shown.iloc[0], tx)
    ax.set_ylabel("relative sequence number (bytes)")
    ax.grid(alpha=0.25)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    return ax


def _zoom(ax: Axes, seg: pd.DataFrame, p, tx) -> None:
    """Limit the axes to one stall and write what happened at each of its three packets."""
    span = (p.released_s - p.small_s) * 1e3
    pad = max(0.3 * span, 1.0)
    ax.set_xlim(-pad, span + pad)
    t = tx(seg["time_s"].to_numpy())
    # the stalled sender's data in view sets the height (the peer's numbers may be far off)
    near = seg[(t >= -pad) & (t <= span + pad) & (seg["sender"] == p.sender).to_numpy()
               & (seg["payload"] > 0).to_numpy()]
    ys = np.r_[near["seq"].to_numpy(), (near["seq"] + near["payload"]).to_numpy(),
               p.small_y, p.ack_y, p.released_y]
    lo, hi = float(ys.min()), float(ys.max())
    margin = max(0.25 * (hi - lo), 4.0)
    ax.set_ylim(lo - margin, hi + margin)
    f1, fa, f2 = int(p.small_frame), int(p.ack_frame), int(p.released_frame)
    ack_dy = -14 if p.ack_y > (lo + hi) / 2 else 16  # keep clear of the arrow at the bottom
    # the late ACK and S2 come within microseconds and a few bytes of each other: the ACK is
    # labelled on its left, S2 on its right and on the other side vertically
    for x, y, text, dx, dy in ((0.0, p.small_y, f"S1 #{f1}", 8, -4),
                               (tx(p.ack_s), p.ack_y, f"late ACK #{fa}\n+{tx(p.ack_s):.1f} ms",
                                -8, ack_dy),
                               (tx(p.released_s), p.released_y, f"S2 #{f2}", 8,
                                8 if ack_dy < 0 else -8)):
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8,
                    color=ACK_COLOR, ha="left" if dx > 0 else "right", va="center")
    ax.annotate("", xy=(0.0, 0.06), xytext=(span, 0.06), xycoords=ax.get_xaxis_transform(),
                arrowprops={"arrowstyle": "<->", "color": ACK_COLOR, "lw": 1.2})
    ax.text(span / 2, 0.08, f"stalled {p.delay_ms:.1f} ms", transform=ax.get_xaxis_transform(),
            ha="center", va="bottom", fontsize=9, color=ACK_COLOR)
    ax.set_xlabel(f"time since S1, frame #{f1} (ms)")
    ax.set_title(f"flow {p.flow}, stall {p.number + 1} of {p.of}: {p.delay_ms:.1f} ms "
                 f"(#{f1} \N{RIGHTWARDS ARROW} #{fa} \N{RIGHTWARDS ARROW} #{f2})", fontsize=9)


def stall_grid(report: Result, flow: int | None = None, n: int = 6, *,
               axes: Sequence[Axes] | None = None, ncols: int = 3) -> list[Axes]:
    """Small multiples: the first `n` stalls of a flow, each zoomed (see `time_sequence`),
    so a long flow's stalls can be read one by one. Returns the axes drawn on."""
    fid = _pick_flow(report, flow)
    count = min(n, int((report.stalls["flow"] == fid).sum()))
    if axes is None:
        import matplotlib.pyplot as plt

        rows = max(1, math.ceil(count / ncols))
        fig, grid = plt.subplots(rows, ncols, figsize=(4.2 * ncols, 3.4 * rows),
                                 layout="constrained", squeeze=False)
        axes = list(grid.ravel())
        for extra in axes[count:]:
            extra.set_visible(False)
        fig.suptitle(_flow_title(report, fid).replace("\n", ": "), fontsize=10)
    if len(axes) < count:
        raise ValueError(f"{count} stalls to draw but {len(axes)} axes given")
    for k in range(count):
        time_sequence(report, fid, stall=k, ax=axes[k], legend=False)
        axes[k].set_ylabel("rel. seq (bytes)")
    return list(axes[:count])


def delay_distribution(report: Result, ax: Axes | None = None) -> Axes:
    """Histogram of stall lengths (S1 to S2) and, as a marker on a stem per bin drawn over
    the bars, of the peers' ACK delays (capture path removed), log-scaled, with the usual
    delayed-ACK timers marked: a stack's timer shows as a peak at its mark."""
    ax = ax if ax is not None else _new_ax((8, 4))
    st = report.stalls
    delay, ack = st["delay_ms"].to_numpy(), st["peer_ack_delay_ms"].to_numpy()
    both = np.r_[delay, ack]
    lo = min(10.0, float(both.min()) * 0.8) if len(both) else 10.0
    hi = max(1000.0, float(both.max()) * 1.25) if len(both) else 1000.0
    bins = np.geomspace(max(lo, 0.1), hi, 60)
    if len(st):
        ax.hist(np.clip(delay, bins[0], bins[-1]), bins=bins, color=STALL_COLOR, alpha=0.45,
                gid=GID_STALL_HIST, label=f"stall length S1\N{RIGHTWARDS ARROW}S2 ({len(st)})")
        # the peer's ACK delays as a marker on each bin, above the bars: an outline would lie
        # on the bars' own edges whenever the two coincide (the usual case), and vanish there
        counts, _ = np.histogram(np.clip(ack, bins[0], bins[-1]), bins=bins)
        centres = np.sqrt(bins[:-1] * bins[1:])  # the middle of a bin on the log axis
        seen = counts > 0
        ax.vlines(centres[seen], 0, counts[seen], colors="black", lw=1.2, zorder=3,
                  gid=GID_ACK_HIST)
        ax.plot(centres[seen], counts[seen], ls="none", marker="D", ms=6, mfc="white",
                mec="black", mew=1.5, zorder=4, gid=GID_ACK_HIST,
                label="peer's ACK delay (path removed)")
        ax.legend(loc="upper right", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no stalls", transform=ax.transAxes, ha="center", va="center",
                fontsize=12, color="grey")
    ax.set_xscale("log")
    ax.set_xlim(bins[0], bins[-1])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    for t in KNOWN_TIMERS_MS:
        ax.axvline(t, color="grey", ls=":", lw=1.2, gid=GID_TIMER)
    top = ax.secondary_xaxis("top")
    top.set_xticks(KNOWN_TIMERS_MS, [f"{t:g} ms\n{name}" for name, t, _, _ in TIMER_BANDS],
                   fontsize=8, color="dimgrey")
    top.tick_params(which="minor", top=False, labeltop=False)
    ax.set_xlabel("delay (ms, log scale)")
    ax.set_ylabel("number of stalls")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Stall lengths and the peers' delayed-ACK timers", fontsize=10)
    ax.grid(alpha=0.25, which="both", axis="x")
    return ax


def _shown_flows(report: Result, max_flows: int) -> tuple[pd.DataFrame, str]:
    """Flows to list (by start time); past `max_flows`, the ones that lost the most."""
    fl = report.flows
    note = ""
    if len(fl) > max_flows:
        fl = worst_first(fl).head(max_flows)
        note = f" ({max_flows} of {len(report.flows)} flows: those that lost the most)"
    return fl.sort_values(["start_s", "id"]), note


def _flow_label(f: pd.Series) -> str:
    return f"#{f['id']} {f['client']} \N{RIGHTWARDS ARROW} {f['server']}"


def overview(report: Result, ax: Axes | None = None, max_flows: int = 25) -> Axes:
    """The capture's flows on one timeline: each flow's lifetime as a grey bar with its
    stalls in red, and the time it lost beside its name."""
    fl, note = _shown_flows(report, max_flows)
    ax = ax if ax is not None else _new_ax((11, 1.2 + 0.45 * max(len(fl), 1)))
    labels = []
    for y, f in enumerate(fl.to_dict("records")):
        ax.broken_barh([(f["start_s"], max(f["duration_s"], 1e-9))], (y - 0.3, 0.6),
                       color="lightgrey", gid=GID_LIFETIME)
        st = report.stalls[report.stalls["flow"] == f["id"]]
        if len(st):
            ax.broken_barh(list(zip(st["small_s"], st["delay_ms"] / 1e3)), (y - 0.3, 0.6),
                           facecolor=STALL_COLOR, edgecolor="white", lw=0.6,
                           gid=GID_FLOW_STALLS)
        lost = (f"{f['stalls']} stalls, {f['stall_ms']:.1f} ms lost ({100 * f['lost_share']:.0f}%)"
                if f["stalls"] else "no stalls")
        labels.append(f"{_flow_label(f)}\n{lost}")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    if labels:
        ax.set_ylim(len(labels) - 0.5, -0.5)
    else:
        ax.text(0.5, 0.5, "no flows", transform=ax.transAxes, ha="center", va="center",
                fontsize=12, color="grey")
    ax.set_xlabel("time since the first packet (s)")
    _seconds_axis(ax)
    ax.set_title(f"Flows over time; stalls in red{note}", fontsize=10)
    ax.grid(alpha=0.25, axis="x")
    return ax


def time_lost(report: Result, ax: Axes | None = None, max_flows: int = 25) -> Axes:
    """Time each flow lost to stalls, worst first (flows without stalls are left out)."""
    fl = worst_first(report.flows[report.flows["stalls"] > 0])
    note = f" (worst {max_flows} of {len(fl)})" if len(fl) > max_flows else ""
    fl = fl.head(max_flows)
    ax = ax if ax is not None else _new_ax((9, 1.2 + 0.4 * max(len(fl), 1)))
    if len(fl):
        bars = ax.barh(range(len(fl)), fl["stall_ms"], color=STALL_COLOR, alpha=0.8)
        ax.bar_label(bars, [f"{v:.1f} ms" for v in fl["stall_ms"]], padding=3, fontsize=8)
        ax.set_yticks(range(len(fl)), [_flow_label(f) for f in fl.to_dict("records")],
                      fontsize=8)
        ax.set_ylim(len(fl) - 0.5, -0.5)
        ax.margins(x=0.15)
    else:
        ax.text(0.5, 0.5, "no stalls", transform=ax.transAxes, ha="center", va="center",
                fontsize=12, color="grey")
        ax.set_yticks([])
    ax.set_xlabel("time lost to stalls (ms)")
    ax.set_title(f"Time lost per flow{note}", fontsize=10)
    ax.grid(alpha=0.25, axis="x")
    return ax


def latency_cdf(report: Result, flow: int | None = None, ax: Axes | None = None) -> Axes:
    """The requests' latency as a CDF (`report.exchanges`: every flow's, or `flow`'s), as
    seen at the capture point and with each stall's held time taken out, log-scaled, the
    p50 and p99 of each in the legend: the gap between the curves is what the stalls cost."""
    ax = ax if ax is not None else _new_ax((8, 4))
    ex = report.exchanges
    if flow is not None:
        ex = ex[ex["flow"] == flow]
    drawn = False
    for col, gid, color, name in (
            ("latency_ms", GID_CDF, STALL_COLOR, "as captured"),
            ("latency_without_stalls_ms", GID_CDF_WITHOUT, "tab:green", "without the stalls")):
        v = np.sort(ex[col].to_numpy(float))
        v = v[v > 0]  # (a log axis)
        if not len(v):
            continue
        p50, p99 = np.percentile(v, [50, 99])
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color=color, gid=gid,
                label=f"{name}: p50 {p50:.3g} ms, p99 {p99:.3g} ms")
        drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.legend(loc="lower right", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no requests", transform=ax.transAxes, ha="center", va="center",
                fontsize=12, color="grey")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("request latency (ms, log scale)")
    ax.set_ylabel("share of requests")
    whose = f"flow {flow}" if flow is not None else f"{len(ex):,} requests"
    ax.set_title(f"Request latency with and without the stalls ({whose})", fontsize=10)
    ax.grid(alpha=0.25, which="both")
    return ax
