"""report: the notebook API. Tables with documented columns and dtypes (also when empty), the
segments table built only when asked for and checked packet by packet against an independent
parse of the real capture, selections, and print(report) == the CLI's text."""

import io
import re
import subprocess
import sys
from pathlib import Path

import dpkt
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import nagleprobe
from nagleprobe import dataframes, text_report
from nagleprobe.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
TABLES = ("flows", "stalls", "endpoints", "segments")


def dtype_name(dtype) -> str:
    """The docs' name for a dtype (text is `str`, also under pandas 2's `object`)."""
    return "str" if dtype == dataframes.TEXT_DTYPE else str(dtype)


def documented_schema(names=TABLES) -> dict[str, list[tuple[str, str]]]:
    """docs/notebook.md's tables of columns: `### report.NAME` then `| column | dtype | meaning |`."""
    text = (ROOT / "docs" / "notebook.md").read_text()
    schema = {}
    for name in names:
        section = text.split(f"### `report.{name}`", 1)[1].split("\n#", 1)[0]
        rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", section, flags=re.M)
        schema[name] = rows
    return schema


@pytest.mark.parametrize("table", TABLES)
def test_the_docs_document_every_column_and_dtype_of_every_table(echo_split, table):
    actual = [(c, dtype_name(t)) for c, t in getattr(echo_split, table).dtypes.items()]
    assert documented_schema()[table] == actual


def test_the_docs_document_the_warnings_table_and_it_keeps_its_dtypes_empty(echo_split):
    damaged = nagleprobe.analyze(str(ROOT / "tests" / "broken" / "pcap_garbage_inserted.pcap"))
    table = damaged.warnings
    assert len(table) == 1 and table["code"].tolist() == ["corrupt-record"]
    actual = [(c, dtype_name(t)) for c, t in table.dtypes.items()]
    assert documented_schema(("warnings",))["warnings"] == actual
    assert echo_split.warnings.empty
    assert echo_split.warnings.dtypes.to_dict() == table.dtypes.to_dict()


def test_a_report_offers_all_that_a_renderer_reads(echo_split):
    """Renderers read a report as `tables.Result` (they never import `report`)."""
    from nagleprobe.tables import Result

    wanted = set(Result.__annotations__) | {k for k in vars(Result) if not k.startswith("_")}
    assert wanted >= {"capture", "columns", "verdict", "flows"}
    assert [k for k in sorted(wanted) if not hasattr(echo_split, k)] == []


@pytest.mark.parametrize("table", TABLES)
def test_empty_tables_keep_their_columns_and_dtypes(echo_split, table):
    empty = echo_split.select(port=1)  # no flow uses port 1
    full, none = getattr(echo_split, table), getattr(empty, table)
    assert len(none) == 0 and len(full) > 0
    assert list(none.columns) == list(full.columns)
    assert none.dtypes.to_dict() == full.dtypes.to_dict()


def test_a_capture_without_stalls_has_the_same_stall_columns_and_dtypes(echo_split):
    clean = nagleprobe.analyze(str(SAMPLES / "neg_think_time_lo.pcap"))
    assert len(clean.stalls) == 0
    assert clean.stalls.dtypes.to_dict() == echo_split.stalls.dtypes.to_dict()
    assert clean.flows.dtypes.to_dict() == echo_split.flows.dtypes.to_dict()  # fix_* all missing


def test_timestamps_are_utc_datetimes_beside_relative_seconds(echo_split):
    origin = pd.Timestamp(echo_split.capture["time_origin_ns"], unit="ns", tz="UTC")
    for point in ("small", "ack", "released"):
        t = echo_split.stalls[f"{point}_time"]
        assert str(t.dt.tz) == "UTC"
        rel = (t - origin).dt.total_seconds().to_numpy()
        assert rel == pytest.approx(echo_split.stalls[f"{point}_s"].to_numpy(), abs=1e-6)
    seg = echo_split.segments
    assert (seg["time"] - origin).dt.total_seconds().to_numpy() == pytest.approx(
        seg["time_s"].to_numpy(), abs=1e-9)
    assert echo_split.flows["start_time"].iloc[0] == origin  # the flow's SYN is the first packet


def test_json_document_keeps_seconds_and_gains_no_datetime_fields(echo_split):
    doc = echo_split.to_dict()
    assert "start_time" not in doc["flows"][0]
    assert set(doc["stalls"][0]["times"]) == {"small", "ack", "released"}
    assert not any(k.endswith("_time") for k in doc["stalls"][0])


def test_segments_are_built_only_when_first_asked_for(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("segments built during analyze / text / JSON")

    monkeypatch.setattr(dataframes, "segment_table", refuse)
    r = nagleprobe.analyze(str(SAMPLES / "echo_split_lo.pcap"))
    r.to_text(), r.to_json(), r._repr_html_()
    with pytest.raises(AssertionError, match="segments built"):
        r.segments
    monkeypatch.undo()
    assert len(r.segments) == r.capture["tcp_packets"]
    assert r.segments is r.segments  # built once, then kept


def test_a_stream_read_once_keeps_its_segments_when_asked_to():
    path = SAMPLES / "echo_split_lo.pcap"
    plain = nagleprobe.analyze(io.BytesIO(path.read_bytes()))
    with pytest.raises(ValueError, match="keep_segments=True"):
        plain.segments
    kept = nagleprobe.analyze(io.BytesIO(path.read_bytes()), keep_segments=True)
    assert kept.to_json() == plain.to_json()
    pd.testing.assert_frame_equal(kept.segments, nagleprobe.analyze(str(path)).segments)


def independent_parse(path: Path) -> dict[int, dict]:
    """Every TCP packet of a pcap by frame number, read with dpkt: relative seq/ack from each
    direction's SYN, as Wireshark shows them (the reference for the segments table)."""
    rows, isn = {}, {}
    with open(path, "rb") as fh:
        for frame, (ts, buf) in enumerate(dpkt.pcap.Reader(fh), start=1):
            tcp = dpkt.ethernet.Ethernet(buf).data.data
            ip = dpkt.ethernet.Ethernet(buf).data
            key = (ip.src, tcp.sport)
            if tcp.flags & dpkt.tcp.TH_SYN:
                isn[key] = tcp.seq
            rows[frame] = {"key": key, "peer": (ip.dst, tcp.dport), "seq": tcp.seq,
                           "ack": tcp.ack, "flags": tcp.flags, "win": tcp.win,
                           "payload": len(ip) - ip.hl * 4 - tcp.off * 4}
    for r in rows.values():
        r["seq_rel"] = (r["seq"] - isn[r["key"]]) % (1 << 32)
        r["ack_rel"] = (r["ack"] - isn[r["peer"]]) % (1 << 32) if r["flags"] & 0x10 else None
    return rows


def test_segments_match_an_independent_parse_of_the_real_capture(echo_split):
    truth = independent_parse(SAMPLES / "echo_split_lo.pcap")
    seg = echo_split.segments
    assert sorted(seg["frame"]) == sorted(truth)
    for rec in seg.to_dict("records"):
        t = truth[rec["frame"]]
        assert rec["seq"] == t["seq_rel"]
        assert (None if pd.isna(rec["ack"]) else rec["ack"]) == t["ack_rel"]
        assert rec["payload"] == t["payload"]
        assert rec["window"] == t["win"]
        assert ("SYN" in rec["flags"].split(",")) == bool(t["flags"] & 0x02)
        assert rec["sender"] == ("client" if t["key"][1] == 40000 else "server")


def test_segments_show_each_stall_as_the_detector_described_it(echo_split):
    seg = echo_split.segments.set_index("frame")
    for s in echo_split.stalls.to_dict("records"):
        s1, ack, s2 = (seg.loc[s[f"{k}_frame"]] for k in ("small", "ack", "released"))
        assert s1["payload"] == s["small_bytes"] and s2["payload"] == s["held_bytes"]
        assert ack["payload"] == 0 and ack["flags"] == "ACK" and ack["sender"] != s["sender"]
        assert ack["ack"] == s1["seq"] + s1["payload"] == s2["seq"]  # ACK covered S1, S2 next
        assert s2["time_s"] - s1["time_s"] == pytest.approx(s["delay_ms"] / 1e3, abs=2e-6)


def test_window_bytes_apply_the_scale_both_syns_agreed_on(proxy_any):
    seg = proxy_any.segments
    ep = proxy_any.endpoints.set_index(["flow", "side"])
    data = seg[~seg["flags"].str.contains("SYN")]
    scale = [ep.loc[(f, s), "window_scale"] for f, s in zip(data["flow"], data["sender"])]
    assert (data["window_bytes"].to_numpy(dtype=np.int64)
            == data["window"].to_numpy() * 2 ** np.array(scale, dtype=np.int64)).all()
    syn = seg[seg["flags"].str.contains("SYN")]
    assert (syn["window_bytes"].to_numpy(dtype=np.int64) == syn["window"].to_numpy()).all()


def test_flow_selects_one_flow_with_its_stalls_endpoints_and_segments(proxy_any):
    one = proxy_any.flow(1)
    assert one.flows["id"].tolist() == [1]
    assert set(one.stalls["flow"]) == {1} and len(one.stalls) == 19
    assert one.endpoints["flow"].tolist() == [1, 1]
    assert set(one.segments["flow"]) == {1}
    assert len(one.segments) == proxy_any.flows.loc[1, "packets"]
    with pytest.raises(KeyError, match="no flow 7"):
        proxy_any.flow(7)


def test_worst_lists_stalled_flows_by_time_lost(proxy_any):
    assert proxy_any.worst(5).flows["id"].tolist() == [1]  # flow 0 has no stalls
    assert proxy_any.worst(0).flows.empty


@pytest.mark.parametrize("kwargs, ids", [
    ({"port": 8002}, [1]),
    ({"port": 8001}, [0]),
    ({"endpoint": "127.0.0.1:40004"}, [0]),
    ({"endpoint": "127.0.0.1"}, [0, 1]),
    ({"port": 8001, "side": "client"}, []),
    ({"port": 40014, "side": "client"}, [1]),
    ({"stalled": False}, [0]),
    ({"endpoint": "127.0.0.1", "stalled": True}, [1]),
])
def test_select_by_endpoint_port_side_and_stalls(proxy_any, kwargs, ids):
    assert proxy_any.select(**kwargs).flows["id"].tolist() == ids


def test_selection_by_ipv6_address_with_or_without_brackets():
    r = nagleprobe.analyze(str(SAMPLES / "formats" / "base_lo6.pcap"))
    server = r.flows.loc[0, "server"]
    assert server.startswith("[::1]:")
    assert r.select(endpoint="::1").flows["id"].tolist() == [0]
    assert r.select(endpoint=server, side="server").flows["id"].tolist() == [0]


def test_a_selection_reports_only_its_flows_in_text_and_json(proxy_any):
    doc = proxy_any.flow(1).to_dict()
    assert [f["id"] for f in doc["flows"]] == [1] and doc["summary"]["stalls"] == 19
    assert "Flow 1: client 127.0.0.1:40014" in proxy_any.flow(1).to_text()
    assert "Flow 1:" not in proxy_any.flow(0).to_text()


def test_print_report_gives_exactly_what_the_cli_prints(proxy_any, capsys):
    print(proxy_any)
    printed = capsys.readouterr().out
    cli = CliRunner().invoke(main, ["analyze", str(SAMPLES / "proxy_any.pcap")])
    assert cli.exit_code == 0
    assert printed == cli.output


def test_jupyter_view_has_verdict_highlighted_stalled_flow_and_its_fix(proxy_any):
    html = proxy_any._repr_html_()
    assert proxy_any.verdict() in html
    rows = re.findall(r"<tr[^>]*>.*?</tr>", html.split("<tbody>")[1])
    highlighted = [r for r in rows if "background:" in r.split(">")[0]]
    assert len(highlighted) == 1 and ">127.0.0.1:40014<" in highlighted[0]
    assert len(rows) == 2
    assert proxy_any.flows.loc[1, "fix_text"] in html


def damaged_25_times(tmp_path: Path) -> Path:
    """A real capture with one byte inserted before every 4th record, 25 times: 25 damaged
    stretches, each a warning of the reader (which lists 20 and sums up the rest in one)."""
    data = (SAMPLES / "echo_split_lo.pcap").read_bytes()
    offs, off = [], 24
    while off + 16 <= len(data):
        offs.append(off)
        off += 16 + int.from_bytes(data[off + 8:off + 12], "little")
    out, last = b"", 0
    for at in offs[4:4 * 26:4]:
        out += data[last:at] + b"\r"
        last = at
    p = tmp_path / "damaged.pcap"
    p.write_bytes(out + data[last:])
    return p


def test_text_report_prints_at_most_20_warnings_then_a_count_and_json_keeps_all(tmp_path):
    rep = nagleprobe.analyze(str(damaged_25_times(tmp_path)))
    warnings = rep.capture["warnings"]
    assert len(warnings) == 21 and warnings[-1] == "5 more warnings like these were not listed"
    lines = rep.to_text(width=1000).splitlines()
    shown = [line.removeprefix("warning: ") for line in lines if line.startswith("warning: ")]
    assert shown == warnings[:text_report.TEXT_WARNINGS] == warnings[:20]
    after = lines.index(f"warning: {warnings[19]}") + 1
    assert lines[after] == "... 1 more warning (--format json lists them all)"
    written = rep.to_dict()["capture"]["warnings"]
    assert [w["text"] for w in written] == warnings
    assert written[-1] == {"code": "more-warnings", "count": 5, "text": warnings[-1]}


def test_text_report_prints_every_warning_up_to_20(tmp_path):
    rep = nagleprobe.analyze(str(damaged_25_times(tmp_path)))
    rep.capture["warnings"] = rep.capture["warnings"][:20]
    text = rep.to_text(width=1000)
    assert text.count("\nwarning: ") == 20 and "more warning" not in text


@pytest.mark.parametrize("fmt", ["text", "json", "wireshark"])
def test_the_command_line_reports_never_load_pandas(fmt):
    """The tables are numpy columns until a DataFrame is asked for: the CLI's reports of a
    whole capture are written from the columns, and pandas' import (0.2-0.3 s) is left out
    of the run (a selection, --port/--top/..., still works on the DataFrames)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "nagleprobe", "analyze",
                           "--quiet", "--format", fmt, str(SAMPLES / "proxy_any.pcap")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "nagleprobe.report" in imported
    assert not {m for m in imported if m.split(".")[0] == "pandas"}


def test_a_table_made_of_columns_gives_them_back(proxy_any):
    """`dataframes.table` and `dataframes.columns_of` are each other's inverse (a selection's
    DataFrames are written out through their columns), every dtype of every table."""
    for name in ("flows", "stalls", "endpoints"):
        cols = proxy_any.columns(name)
        back = dataframes.columns_of(dataframes.table(cols))
        assert list(back) == list(cols)
        for k, col in cols.items():
            assert back[k].dtype == col.dtype, k
            np.testing.assert_array_equal(back[k], col, err_msg=k)
