"""plot: every picture is rendered to PNG under Agg and what it shows is checked against the
report of a real capture: one marker of each kind and one shaded span per stall, at the
stall's times and sequence numbers, axes labelled with units, timer marks where they belong."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import nagleprobe  # noqa: E402
from nagleprobe import plot  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def render(ax) -> bytes:
    """Draw the figure to PNG (as a browser or the HTML report would get it)."""
    buf = io.BytesIO()
    ax.figure.savefig(buf, format="png", dpi=60)
    png = buf.getvalue()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
    return png


def by_gid(ax, gid, kind="lines"):
    return [a for a in getattr(ax, kind) if a.get_gid() == gid]


def spans(ax) -> list[tuple[float, float]]:
    out = []
    for p in by_gid(ax, plot.GID_SPAN, "patches"):
        out.append((p.get_x(), p.get_x() + p.get_width()))
    return sorted(out)


def test_time_sequence_marks_every_stall_at_its_times_and_sequence_numbers(echo_split):
    ax = plot.time_sequence(echo_split, 0)
    render(ax)
    st = echo_split.stalls
    assert len(st) == 19
    (s1,), (ack,), (s2,) = (by_gid(ax, g) for g in (plot.GID_S1, plot.GID_ACK, plot.GID_S2))
    for line, col in ((s1, "small_s"), (ack, "ack_s"), (s2, "released_s")):
        assert len(line.get_xdata()) == len(st)
        assert np.asarray(line.get_xdata()) == pytest.approx(st[col].to_numpy(), abs=1e-6)
    seg = echo_split.segments.set_index("frame")
    s1_end = (seg.loc[st["small_frame"], "seq"] + seg.loc[st["small_frame"], "payload"]).to_numpy()
    assert np.asarray(s1.get_ydata()) == pytest.approx(s1_end)
    assert np.asarray(ack.get_ydata()) == pytest.approx(s1_end)  # the ACK covered S1 exactly
    assert np.asarray(s2.get_ydata()) == pytest.approx(s1_end + st["held_bytes"].to_numpy())
    assert np.array(spans(ax)) == pytest.approx(st[["small_s", "released_s"]].to_numpy(),
                                                abs=1e-6)
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"{d:.1f} ms" for d in st["delay_ms"]]
    assert ax.get_xlabel().endswith("(s)") and ax.get_ylabel().endswith("(bytes)")


def test_time_sequence_draws_both_directions_and_the_peers_ack_lines(proxy_any):
    ax = plot.time_sequence(proxy_any, 1)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for text in ("client data (seq to seq+len)", "server data (seq to seq+len)",
                 "server's ACKs of it", "client's ACKs of it"):
        assert text in legend
    seg = proxy_any.segments
    client_data = seg[(seg["flow"] == 1) & (seg["sender"] == "client") & (seg["payload"] > 0)]
    bars = next(c for c in ax.collections if c.get_label().startswith("client data"))
    assert len(bars.get_segments()) == len(client_data)
    assert "Flow 1" in ax.get_title() and "19 stalls" in ax.get_title()


def test_zoom_shows_one_stall_in_ms_since_s1(win200):
    st = win200.stalls.iloc[3]
    ax = plot.time_sequence(win200, 0, stall=3)
    render(ax)
    (lo, hi), = spans(ax)
    assert lo == 0 and hi == pytest.approx(st["delay_ms"], abs=1e-3)
    x0, x1 = ax.get_xlim()
    assert x0 < 0 and x1 > st["delay_ms"]
    (ack,) = by_gid(ax, plot.GID_ACK)
    assert ack.get_xdata()[0] == pytest.approx((st["ack_s"] - st["small_s"]) * 1e3, abs=1e-3)
    assert ax.get_xlabel() == f"time since S1, frame #{st['small_frame']} (ms)"
    notes = " ".join(t.get_text() for t in ax.texts)
    for frame in (st["small_frame"], st["ack_frame"], st["released_frame"]):
        assert f"#{frame}" in notes
    assert f"stalled {st['delay_ms']:.1f} ms" in notes
    y0, y1 = ax.get_ylim()
    assert y0 < ack.get_ydata()[0] < y1


def test_zoom_refuses_a_stall_the_flow_does_not_have(win200):
    with pytest.raises(IndexError, match="20 stalls"):
        plot.time_sequence(win200, 0, stall=20)


def test_stall_grid_draws_the_first_n_stalls_one_per_panel(echo_split):
    axes = plot.stall_grid(echo_split, 0, n=4)
    assert len(axes) == 4
    for k, ax in enumerate(axes):
        (span,) = spans(ax)
        assert span[1] == pytest.approx(echo_split.stalls["delay_ms"].iloc[k], abs=1e-3)
    render(axes[0])


def test_delay_distribution_counts_every_stall_and_marks_the_timers(win200):
    ax = plot.delay_distribution(win200)
    render(ax)
    bars = by_gid(ax, plot.GID_STALL_HIST, "patches")
    assert sum(b.get_height() for b in bars) == len(win200.stalls) == 20
    tallest = max(bars, key=lambda b: b.get_height())
    left, right = tallest.get_x(), tallest.get_x() + tallest.get_width()
    assert left <= win200.stalls["delay_ms"].median() <= right
    marks = sorted(line.get_xdata()[0] for line in by_gid(ax, plot.GID_TIMER))
    assert marks == [40, 100, 200]
    assert "ms" in ax.get_xlabel() and ax.get_xscale() == "log"


def test_delay_distribution_of_a_clean_capture_says_so():
    clean = nagleprobe.analyze(str(SAMPLES / "neg_quickack_lo.pcap"))
    ax = plot.delay_distribution(clean)
    render(ax)
    assert not by_gid(ax, plot.GID_STALL_HIST, "patches")
    assert "no stalls" in [t.get_text() for t in ax.texts]


def test_overview_puts_each_flow_and_its_stalls_on_the_timeline(proxy_any):
    ax = plot.overview(proxy_any)
    render(ax)
    lifetimes = [c for c in ax.collections if c.get_gid() == plot.GID_LIFETIME]
    assert len(lifetimes) == len(proxy_any.flows) == 2
    (stall_bars,) = [c for c in ax.collections if c.get_gid() == plot.GID_FLOW_STALLS]
    extents = np.array(sorted((p.vertices[:, 0].min(), p.vertices[:, 0].max())
                              for p in stall_bars.get_paths()))
    st = proxy_any.stalls
    assert extents[:, 0] == pytest.approx(st["small_s"].to_numpy(), abs=1e-6)
    assert extents[:, 1] == pytest.approx((st["small_s"] + st["delay_ms"] / 1e3).to_numpy(),
                                          abs=1e-6)
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert "19 stalls, 826.0 ms lost (99%)" in ticks[1] and "no stalls" in ticks[0]
    assert ax.get_xlabel().endswith("(s)")


def test_time_lost_bars_are_the_flows_stall_time(proxy_any):
    ax = plot.time_lost(proxy_any)
    render(ax)
    assert [p.get_width() for p in ax.patches] == [proxy_any.flows.loc[1, "stall_ms"]]
    assert ax.get_xlabel() == "time lost to stalls (ms)"


def test_every_function_draws_on_the_axes_it_is_given(proxy_any):
    fig = Figure()
    axes = fig.subplots(2, 3).ravel()
    assert plot.time_sequence(proxy_any, ax=axes[0]) is axes[0]
    assert plot.delay_distribution(proxy_any, ax=axes[1]) is axes[1]
    assert plot.overview(proxy_any, ax=axes[2]) is axes[2]
    assert plot.time_lost(proxy_any, ax=axes[3]) is axes[3]
    assert plot.stall_grid(proxy_any, n=2, axes=axes[4:]) == list(axes[4:])


def test_default_flow_is_the_one_that_lost_most(proxy_any):
    ax = plot.time_sequence(proxy_any)
    assert ax.get_title().startswith("Flow 1:")


def test_the_cli_text_path_does_not_import_matplotlib():
    code = ("import sys; from click.testing import CliRunner; from nagleprobe.cli import main; "
            f"r = CliRunner().invoke(main, ['analyze', {str(SAMPLES / 'echo_split_lo.pcap')!r}]);"
            " r.output; rep = __import__('nagleprobe').analyze("
            f"{str(SAMPLES / 'echo_split_lo.pcap')!r}); rep.segments; rep._repr_html_(); "
            "print(r.exit_code, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "False"]


def test_an_empty_selection_draws_empty_pictures_that_say_so(proxy_any):
    empty = proxy_any.select(port=1)
    for draw in (plot.overview, plot.time_lost, plot.delay_distribution):
        ax = draw(empty)
        render(ax)
        assert {"no flows", "no stalls"} & {t.get_text() for t in ax.texts}
    with pytest.raises(ValueError, match="no flows"):
        plot.time_sequence(empty)


@pytest.mark.parametrize("fixture, flow", [("echo_split", 0), ("proxy_any", 1), ("win200", 0)])
def test_stall_grid_labels_do_not_overlap(request, fixture, flow):
    """Each panel's notes (S1, late ACK, S2, the stall's length) are drawn apart from each
    other: the late ACK and S2 come within microseconds and a few bytes of each other."""
    report = request.getfixturevalue(fixture)
    axes = plot.stall_grid(report, flow, n=6)
    fig = axes[0].figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts
                 if t.get_text()]
        assert len(boxes) == 4
        for i, (a, box_a) in enumerate(boxes):
            for b, box_b in boxes[i + 1:]:
                assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    plt.close(fig)


@pytest.mark.parametrize("fixture", ["echo_split", "win200"])
def test_peer_ack_delays_are_marked_over_the_stall_bars(request, fixture):
    """The two distributions coincide (a stall lasts the peer's ACK delay): an outline of the
    ACK delays lay on the bars' own edges and could not be seen. Each bin's ACK delays are a
    marker above the bars, at the bar's middle, as high as their count."""
    report = request.getfixturevalue(fixture)
    ax = plot.delay_distribution(report)
    render(ax)
    bars = by_gid(ax, plot.GID_STALL_HIST, "patches")
    (marks,) = [m for m in by_gid(ax, plot.GID_ACK_HIST) if m.get_marker() not in (None, "None")]
    assert marks.get_zorder() > max(b.get_zorder() for b in bars)
    assert sum(marks.get_ydata()) == len(report.stalls)
    for x, y in zip(marks.get_xdata(), marks.get_ydata()):
        bar = next(b for b in bars if b.get_x() <= x < b.get_x() + b.get_width())
        assert x != bar.get_x() and y == np.histogram(
            report.stalls["peer_ack_delay_ms"], [bar.get_x(), bar.get_x() + bar.get_width()])[0][0]
    assert "peer's ACK delay (path removed)" in [t.get_text() for t in ax.get_legend().texts]


FIELD = Path("/work/shared/field/pos__nfstream_coap_mqtt.pcap")  # flows 1.2e8 s after time 0


@pytest.mark.parametrize("draw", ["time_sequence", "overview"])
def test_time_ticks_are_the_seconds_of_the_tables_without_an_offset(draw):
    """A capture whose first packet came years before its flows: matplotlib would write the
    ticks as small numbers plus "+1.219495e8" in a corner."""
    if not FIELD.exists():
        pytest.skip(f"{FIELD} is not on this machine (the labelled field captures)")
    r = nagleprobe.analyze(FIELD)
    ax = getattr(plot, draw)(r)
    render(ax)
    assert ax.xaxis.get_offset_text().get_text() == ""
    ticks = [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels() if t.get_text()]
    lo, hi = ax.get_xlim()
    shown = [(x, text) for x, text in ticks if lo <= x <= hi]
    assert len(shown) >= 3 and r.stalls["small_s"].min() > 1e8
    for x, text in shown:
        assert float(text.replace("\N{MINUS SIGN}", "-")) == pytest.approx(x)


def test_latency_cdf_draws_every_request_with_and_without_the_stalls(echo_split):
    """Two step curves over the requests' latencies (as captured, and less the stalls' held
    time), each reaching 1 at its largest, their p50 and p99 (numpy's) in the legend."""
    ax = plot.latency_cdf(echo_split)
    ex = echo_split.exchanges
    for gid, col in ((plot.GID_CDF, "latency_ms"),
                     (plot.GID_CDF_WITHOUT, "latency_without_stalls_ms")):
        (line,) = by_gid(ax, gid)
        v = np.sort(ex[col].to_numpy())
        np.testing.assert_array_equal(line.get_xdata(), v)
        assert line.get_ydata()[-1] == 1 and len(line.get_ydata()) == len(ex) == 20
        p50, p99 = np.percentile(v, [50, 99])
        assert f"p50 {p50:.3g} ms, p99 {p99:.3g} ms" in line.get_label()
    assert by_gid(ax, plot.GID_CDF)[0].get_xdata()[-1] > 40 > 1 > \
        by_gid(ax, plot.GID_CDF_WITHOUT)[0].get_xdata()[-1]
    render(ax)


def test_latency_cdf_of_a_one_way_flow_says_no_requests():
    ax = plot.latency_cdf(nagleprobe.analyze(str(SAMPLES / "classic_bulk_tap.pcap")))
    assert not by_gid(ax, plot.GID_CDF) and "no requests" in [t.get_text() for t in ax.texts]
