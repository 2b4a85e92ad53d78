"""advice: the fixes grouped per program that must change, so that one client or server
with many stalled connections is told once."""

import pandas as pd

from nagleprobe.advice import FIX_GROUP_COLUMNS, fix_groups


def flows(*rows):
    """A flows table of (id, stalls, stall_ms, fix_side, fix_endpoint, fix_action) rows."""
    return pd.DataFrame(
        [(i, n, ms, side, ep, action, f"fix of flow {i}" if n else None)
         for i, n, ms, side, ep, action in rows],
        columns=["id", "stalls", "stall_ms", "fix_side", "fix_endpoint", "fix_action",
                 "fix_text"])


def test_a_client_s_connections_are_one_fix_a_server_s_by_its_port():
    g = fix_groups(flows(
        (4, 3, 300.0, "client", "10.0.0.1:40001", "coalesce-writes"),
        (2, 2, 200.0, "client", "10.0.0.1:40002", "coalesce-writes"),
        (7, 5, 250.0, "server", "10.0.0.9:8000", "set-tcp-nodelay"),
        (8, 1, 40.0, "server", "10.0.0.9:8001", "set-tcp-nodelay"),
        (9, 1, 40.0, "client", "[fd00::1]:5000", "coalesce-writes"),
        (3, 0, 0.0, None, None, None)))
    assert list(g.columns) == list(FIX_GROUP_COLUMNS)
    assert g[["side", "endpoint", "action"]].values.tolist() == [
        ["client", "10.0.0.1", "coalesce-writes"],  # 500 ms lost: first
        ["server", "10.0.0.9:8000", "set-tcp-nodelay"],
        ["server", "10.0.0.9:8001", "set-tcp-nodelay"],
        ["client", "[fd00::1]:5000", "coalesce-writes"]]  # one connection: with its port
    assert g["flows"].tolist() == [[4, 2], [7], [8], [9]]
    assert g["stalls"].tolist() == [5, 5, 1, 1]
    assert g["stall_ms"].tolist() == [500.0, 250.0, 40.0, 40.0]
    assert g["text"].tolist()[0] == "fix of flow 4"  # the first flow given (the worst)


def test_different_actions_of_one_client_stay_apart():
    g = fix_groups(flows((1, 2, 90.0, "client", "10.0.0.1:40001", "coalesce-writes"),
                         (2, 2, 80.0, "client", "10.0.0.1:40002", "set-tcp-nodelay")))
    assert g["action"].tolist() == ["coalesce-writes", "set-tcp-nodelay"]


def test_no_stalls_no_fixes():
    g = fix_groups(flows((3, 0, 0.0, None, None, None)))
    assert len(g) == 0 and list(g.columns) == list(FIX_GROUP_COLUMNS)
