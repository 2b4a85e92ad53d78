"""The JSON document holds the report's tables: each flow object is its row of `flows` (with
its why-not counts, relay, fix and endpoints nested), each stall object its row of `stalls`
(frames and times nested), as docs/json.md describes them. Checked against
the tables value by value on every sample, without the writer's code."""

import gc
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nagleprobe
from nagleprobe import jsonrows, wireshark
from nagleprobe.advice import FIX_FIELDS
from nagleprobe.detect import REASONS
from nagleprobe.held import STALL_KEYS
from nagleprobe.relay import RELAY_COLUMNS
from nagleprobe.tables import STALL_POINTS, TABLE_ONLY

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = (sorted(SAMPLES.glob("*.pcap")) + sorted(
    p for p in (SAMPLES / "formats").iterdir() if p.name.endswith((".pcap", ".pcapng", ".gz")))
    + sorted(p for p in (SAMPLES / "sets").iterdir() if p.is_dir()))


def plain(v):
    """A table cell as the document writes it: missing values are null."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def row(df: pd.DataFrame, i: int, cols) -> dict:
    return {c: plain(df[c].iloc[i]) for c in cols}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_the_document_holds_the_tables(path):
    r = nagleprobe.analyze(sorted(str(p) for p in path.iterdir() if ".pcap" in p.name)
                           if path.is_dir() else str(path))
    doc = json.loads(r.to_json())
    assert doc == r.to_dict()
    fl, st, ep = r.flows, r.stalls, r.endpoints
    assert len(doc["flows"]) == len(fl) and len(doc["stalls"]) == len(st)

    nested = {f"fix_{k}" for k in FIX_FIELDS} | {f"why_not_{k}" for k in REASONS} \
        | set(RELAY_COLUMNS) | set(TABLE_ONLY)
    flat = [c for c in fl.columns if c not in nested]
    filters = wireshark.filter_docs(r)
    for i, f in enumerate(doc["flows"]):
        want = row(fl, i, flat)
        t = want["tunnel"]
        want["tunnel"] = r.capture["tunnels"][t - 1] if t else None
        assert list(f)[:len(flat)] == flat
        assert {c: f[c] for c in flat} == want
        assert f["why_not"] == {k: int(fl[f"why_not_{k}"].iloc[i]) for k in REASONS
                                if fl[f"why_not_{k}"].iloc[i]}
        relay = {c.removeprefix("relay_"): plain(fl[c].iloc[i]) for c in RELAY_COLUMNS}
        assert f["relay"] == (relay if relay["upstream_flow"] is not None else None)
        fix = {k: plain(fl[f"fix_{k}"].iloc[i]) for k in FIX_FIELDS}
        assert f["fix"] == (fix if fix["side"] is not None else None)
        for j, side in enumerate(("client", "server")):
            e = ep.iloc[2 * int(fl["id"].iloc[i]) + j]
            assert e["side"] == side
            assert f["endpoints"][side] == {c: plain(e[c]) for c in ep.columns
                                            if c not in ("flow", "side")}
        assert f["wireshark"] == filters[i]
        mine = st[st["flow"] == fl["id"].iloc[i]]
        frames = np.unique(mine[[f"{k}_frame" for k in STALL_POINTS]].to_numpy())
        if "stall_frames_filters" not in f["wireshark"]:
            assert f["wireshark"]["stall_frames_filter"] == wireshark.frames_filter(frames)

    points = {f"{k}_{w}" for k in STALL_POINTS for w in ("frame", "s", "file")}
    # the held message's columns are the stall's "message" (where read: see test_held)
    flat = [c for c in st.columns
            if c not in points | set(TABLE_ONLY) | {"confidence"} | set(STALL_KEYS)]
    for i, s in enumerate(doc["stalls"]):
        said = pd.notna(st["held_message"].iloc[i])
        assert list(s) == flat + ["frames", "times"] + (["files"] if "small_file" in st else []) \
            + ["confidence"] + (["message"] if said else [])
        assert s.get("message") == (row(st, i, list(STALL_KEYS)) if said else None)
        assert {c: s[c] for c in flat} == row(st, i, flat)
        assert s["frames"] == {k: int(st[f"{k}_frame"].iloc[i]) for k in STALL_POINTS}
        assert s["times"] == {k: float(st[f"{k}_s"].iloc[i]) for k in STALL_POINTS}
        assert s["confidence"] == float(st["confidence"].iloc[i])
        if "small_file" in st:
            assert s["files"] == {k: st[f"{k}_file"].iloc[i] for k in STALL_POINTS}


def test_flow_and_stall_objects_of_a_few_rows_are_the_documents():
    r = nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"))
    doc = r.to_dict()
    ids = r.flows["id"].tolist()[::-1]
    assert r.flow_docs(ids) == [doc["flows"][i] for i in ids]
    flow = int(r.stalls["flow"].iloc[-1])
    assert r.stall_docs(flow) == [s for s in doc["stalls"] if s["flow"] == flow]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_the_dict_is_the_documents_text_read_back_to_the_type_and_key_order(path, compiled,
                                                                           monkeypatch):
    r = nagleprobe.analyze(sorted(str(p) for p in path.iterdir() if ".pcap" in p.name)
                           if path.is_dir() else str(path))
    if not compiled:
        monkeypatch.setattr(jsonrows, "_compiled", None)
    doc = r.to_dict()
    assert doc == json.loads(r.to_json())
    # 1 == 1.0 and {"a": 1, "b": 2} == {"b": 2, "a": 1}: the text tells them apart
    assert json.dumps(doc, separators=(",", ":"), allow_nan=False) == r.to_json()


def test_making_the_dict_leaves_the_garbage_collector_as_it_found_it():
    r = nagleprobe.analyze(str(SAMPLES / "proxy_any.pcap"))
    r.to_dict()
    assert gc.isenabled()
    gc.disable()
    try:
        r.to_dict()
        assert not gc.isenabled()
    finally:
        gc.enable()
