"""Build decoder-shaped TCP columns by hand (synthetic), for flow and detection unit tests."""

from __future__ import annotations

import ipaddress

import numpy as np

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


class Conversation:
    """Script a TCP conversation between a client and a server, tracking seq/ack for you."""

    def __init__(self, client: str, server: str, isn_c: int = 1000, isn_s: int = 5000,
                 mss: int = 1460) -> None:
        self.ep = {"c": client, "s": server}
        self.nxt = {"c": isn_c, "s": isn_s}
        self.rows: list[dict] = []
        self.mss = mss

    def handshake(self, t_ms: float, rtt_ms: float = 0.05) -> float:
        c, s = self.nxt["c"], self.nxt["s"]
        self.rows.append(dict(t_ms=t_ms, src=self.ep["c"], dst=self.ep["s"], seq=c, flags=S,
                              mss=self.mss, wscale=7))
        self.rows.append(dict(t_ms=t_ms + rtt_ms / 2, src=self.ep["s"], dst=self.ep["c"], seq=s,
                              ack=c + 1, flags=S | A, mss=self.mss, wscale=7))
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
