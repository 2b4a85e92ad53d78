"""advice: the fixes grouped per program that must change, so that one client or server
with many stalled connections is told once."""

import pandas as pd

from nagleprobe.advice import fix_groups


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
        (7, 5, 250.0, "server", "10.0.0.9:8000", "set-tcp-nodelay"),
        (2, 2, 200.0, "client", "10.0.0.1:40002", "coalesce-writes"),
        (8, 1, 40.0, "server", "10.0.0.9:8001", "set-tcp-nodelay"),
        (9, 1, 40.0, "client", "[fd00::1]:5000", "coalesce-writes"),
        (3, 0, 0.0, None, None, None)))
    assert [(x["side"], x["host"], x["endpoint"], x["action"]) for x in g] == [
        ("client", "10.0.0.1", "10.0.0.1", "coalesce-writes"),  # 500 ms lost: first
        ("server", "10.0.0.9", "10.0.0.9:8000", "set-tcp-nodelay"),
        ("server", "10.0.0.9", "10.0.0.9:8001", "set-tcp-nodelay"),
        ("client", "[fd00::1]", "[fd00::1]:5000", "coalesce-writes")]  # one connection
    assert [x["flows"] for x in g] == [[4, 2], [7], [8], [9]]
    assert [x["stalls"] for x in g] == [5, 5, 1, 1]
    assert [x["lost_ms"] for x in g] == [500.0, 250.0, 40.0, 40.0]
    assert g[0]["text"] == "fix of flow 4"  # the first flow given (the worst)


def test_different_actions_of_one_client_stay_apart():
    g = fix_groups(flows((1, 2, 90.0, "client", "10.0.0.1:40001", "coalesce-writes"),
                         (2, 2, 80.0, "client", "10.0.0.1:40002", "set-tcp-nodelay")))
    assert [x["action"] for x in g] == ["coalesce-writes", "set-tcp-nodelay"]


def test_no_stalls_no_fixes():
    assert fix_groups(flows((3, 0, 0.0, None, None, None))) == []


def test_a_report_s_fixes_are_those_of_its_flows_worst_first(proxy_any):
    (g,) = proxy_any.fix_groups()
    f = proxy_any.flows.loc[1]
    assert (g["side"], g["endpoint"], g["action"], g["flows"]) == (
        f["fix_side"], f["fix_endpoint"], f["fix_action"], [1])
    assert g["stalls"] == len(proxy_any.stalls) and g["text"] == f["fix_text"]
    assert proxy_any.fix_groups(ids=[0]) == []
