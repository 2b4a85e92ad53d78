"""Build decoder-shaped TCP columns by hand (synthetic), for flow and detection unit tests."""

from __future__ import annotations

import ipaddress

import numpy as np
from hypothesis import strategies as st

from nagleprobe.decode import TCP_COLUMNS

F, S, R, P, A = 0x01, 0x02, 0x04, 0x08, 0x10


def addr(text: str) -> tuple[int, int, int]:
    ip = ipaddress.ip_address(text)
    if ip.version == 4:
        return 4, 0, 0xFFFF00000000 | int(ip)
    return 6, int(ip) >> 64, int(ip) & ((1 << 64) - 1)


def packets(rows: list[dict]) -> dict[str, np.ndarray]:
    """rows: dicts with t_ms, src, dst ("ip:port"), seq, ack, flags, len and optional
    mss/wscale/win/tsval/ipid."""
    cols = {k: [] for k in TCP_COLUMNS}
    for i, r in enumerate(rows, 1):
        sip, sport = r["src"].rsplit(":", 1)
        dip, dport = r["dst"].rsplit(":", 1)
        v, shi, slo = addr(sip.strip("[]"))
        _, dhi, dlo = addr(dip.strip("[]"))
        vals = {"frame": r.get("frame", i), "ts_ns": int(round(r["t_ms"] * 1e6)), "ipver": v,
                "src_hi": shi, "src_lo": slo, "dst_hi": dhi, "dst_lo": dlo,
                "sport": int(sport), "dport": int(dport), "seq": r["seq"] % (1 << 32),
                "ack": r.get("ack", 0) % (1 << 32), "flags": r["flags"], "window": r.get("win", 512),
                "payload": r.get("len", 0), "mss": r.get("mss", -1), "wscale": r.get("wscale", -1),
                "sack_ok": 0, "tsval": r.get("tsval", 0), "has_ts": int("tsval" in r),
                "ipid": r.get("ipid", 0), "tunnel": r.get("tunnel", 0)}
        for k in TCP_COLUMNS:
            cols[k].append(vals[k])
    return {k: np.array(v, dtype=TCP_COLUMNS[k]) for k, v in cols.items()}


SYN_WINDOW = 64240


class Conversation:
    """Script a TCP conversation between a client and a server, tracking seq/ack for you."""

    def __init__(self, client: str, server: str, isn_c: int = 1000, isn_s: int = 5000,
                 mss: int = 1460) -> None:
        self.ep = {"c": client, "s": server}
        self.nxt = {"c": isn_c, "s": isn_s}
        self.rows: list[dict] = []
        self.mss = mss

    def handshake(self, t_ms: float, rtt_ms: float = 0.05) -> float:
        """SYN, SYN/ACK (Linux's window, never scaled: 64240 B) and ACK; later packets
        offer 512 << 7 = 64 KiB by default."""
        c, s = self.nxt["c"], self.nxt["s"]
        self.rows.append(dict(t_ms=t_ms, src=self.ep["c"], dst=self.ep["s"], seq=c, flags=S,
                              mss=self.mss, wscale=7, win=SYN_WINDOW))
        self.rows.append(dict(t_ms=t_ms + rtt_ms / 2, src=self.ep["s"], dst=self.ep["c"], seq=s,
                              ack=c + 1, flags=S | A, mss=self.mss, wscale=7, win=SYN_WINDOW))
        self.nxt = {"c": c + 1, "s": s + 1}
        self.rows.append(dict(t_ms=t_ms + rtt_ms, src=self.ep["c"], dst=self.ep["s"],
                              seq=c + 1, ack=s + 1, flags=A))
        return t_ms + rtt_ms

    def send(self, who: str, t_ms: float, n: int, seq: int | None = None, win: int = 512) -> None:
        other = "s" if who == "c" else "c"
        self.rows.append(dict(t_ms=t_ms, src=self.ep[who], dst=self.ep[other],
                              seq=self.nxt[who] if seq is None else seq, ack=self.nxt[other],
                              flags=A | (P if n else 0), len=n, win=win))
        if seq is None:
            self.nxt[who] += n

    def ack(self, who: str, t_ms: float, win: int = 512) -> None:
        self.send(who, t_ms, 0, win=win)

    def columns(self) -> dict[str, np.ndarray]:
        return packets(self.rows)


# Random conversations for the property tests: events (kind, who, gap, then, size), played
# by `play`: small writes answered by ACKs after delays around the delayed-ACK timers and
# the round trip (often the stall's shape), other writes and ACKs, retransmissions and zero
# windows; `extra` kinds: "burst" (twelve writes of one side), "twice" (the last packet seen
# again, as `-i any` does).
GAP = st.sampled_from([0.01, 0.05, 1.0, 2.5, 5.0, 24.0, 39.0, 40.0, 41.0, 90.0, 200.0, 700.0])
KINDS = ("send", "ack", "resend", "zero window", "nagle", "nagle", "nagle, zero window")


def event_strategy(extra: tuple[str, ...] = ()) -> st.SearchStrategy:
    """One random event of the kinds above (and `extra`)."""
    return st.tuples(st.sampled_from([*KINDS, *extra]), st.sampled_from(["c", "s"]), GAP, GAP,
                     st.sampled_from([1, 10, 100, 1447, 1448, 2896, 3000]))


def play(conv: Conversation, t: float, evs: list[tuple]) -> None:
    """Add the events to the conversation, from time `t` (ms)."""
    for what, who, gap, then, size in evs:
        t += gap
        if what.startswith("nagle"):  # a small write, the peer's (late?) ACK, the next
            conv.send(who, t, size)
            t += then
            conv.ack("s" if who == "c" else "c", t, win=0 if "zero" in what else 512)
            t += gap / 100
            conv.send(who, t, size)
        elif what == "send":
            conv.send(who, t, size)
        elif what == "burst":
            for _ in range(12):
                conv.send(who, t, size)
                t += 0.01
        elif what == "ack":
            conv.ack(who, t)
        elif what == "resend":
            conv.send(who, t, size, seq=conv.nxt[who] - size)
        elif what == "twice" and conv.rows:
            t += 0.003
            conv.rows.append(dict(conv.rows[-1], t_ms=t))
        else:
            conv.ack(who, t, win=0)
