"""The analysis result: pandas tables for notebooks, a JSON document, and the text report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .detect import Detection
from .flows import Flows
from .read import CaptureInfo

SIDES = ("client", "server")
TEXT_EVIDENCE_ROWS = 12  # stalls listed per flow in the text report (JSON has all)


def timer_name(ms: float | None) -> str:
    """A human label for an observed delayed-ACK timer."""
    if ms is None:
        return ""
    if 30 <= ms <= 60:
        return "Linux-like"
    if 85 <= ms <= 120:
        return "macOS/BSD-like"
    if 170 <= ms <= 230:
        return "Windows-like"
    return ""


@dataclass
class Report:
    """Everything nagleprobe found in one capture.

    `capture`: how the file was read. `flows`, `stalls`, `endpoints`: pandas DataFrames
    (one row per flow, per stall, per flow endpoint). `to_dict()` is the JSON document.
    """

    capture: dict[str, Any]
    flows: pd.DataFrame
    stalls: pd.DataFrame
    endpoints: pd.DataFrame
    _flow_docs: list[dict[str, Any]] = field(repr=False, default_factory=list)
    _stall_docs: list[dict[str, Any]] = field(repr=False, default_factory=list)

    @property
    def stall_count(self) -> int:
        return len(self._stall_docs)

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON document (see README, "JSON output")."""
        return {"capture": self.capture, "summary": self.summary(), "flows": self._flow_docs,
                "stalls": self._stall_docs}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def summary(self) -> dict[str, Any]:
        stalled = [f for f in self._flow_docs if f["stalls"]]
        return {"stalls": self.stall_count, "flows": len(self._flow_docs),
                "flows_with_stalls": len(stalled),
                "stall_ms": round(sum(f["stall_ms"] for f in stalled), 3)}

    def verdict(self) -> str:
        """One sentence: are stalls present, where, and what they cost."""
        s = self.summary()
        if not s["stalls"]:
            return (f"No Nagle/delayed-ACK stalls found in {s['flows']} TCP flow"
                    f"{'' if s['flows'] == 1 else 's'}.")
        return (f"Nagle/delayed-ACK stalls found: {s['stalls']} stall"
                f"{'' if s['stalls'] == 1 else 's'} in {s['flows_with_stalls']} of {s['flows']} "
                f"TCP flow{'' if s['flows'] == 1 else 's'}, costing {s['stall_ms']:.1f} ms.")

    def to_text(self) -> str:
        return render_text(self)

    def __str__(self) -> str:
        return self.to_text()


def build_report(info: CaptureInfo, skipped: dict[str, int], f: Flows, det: Detection,
                 origin_ns: int) -> Report:
    """Assemble the tables and documents from the pipeline's stages."""
    st = det.stalls
    nflows = f.count
    key = st["flow"] * 2 + st["dir"]
    stall_ns = np.bincount(key, weights=st["stall_ns"], minlength=nflows * 2)
    stall_n = np.bincount(key, minlength=nflows * 2)
    answered = np.bincount(key, weights=det.answered.astype(float), minlength=nflows * 2)
    retrans = np.bincount(f.seg["flow"], weights=f.seg["retrans"], minlength=nflows)
    keepalive = np.bincount(f.seg["flow"], weights=f.seg["keepalive"], minlength=nflows)

    flow_docs, endpoint_rows = [], []
    for i in range(nflows):
        fl = {k: v[i] for k, v in f.flow.items()}
        eps = {}
        for k, side in enumerate(SIDES):
            # delayed ACKs of this endpoint are measured on the data it received
            late = det.late_ack_ms[2 * i + (1 - k)]
            delack = round(float(np.median(late)), 1) if late else None
            if stall_n[2 * i + k]:
                nagle = "on"
            elif det.nagle_off_proofs[2 * i + k]:
                nagle = "off"
            else:
                nagle = "unknown"
            eps[side] = {"endpoint": fl[side], "nagle": nagle,
                         "nagle_off_evidence": int(det.nagle_off_proofs[2 * i + k]),
                         "delayed_ack_ms": delack, "delayed_acks": len(late),
                         "quick_acks": int(det.quick_acks[2 * i + (1 - k)]),
                         "mss": int(fl["mss"][k]), "mss_from": fl["mss_how"][k],
                         "window_scale": fl["wscale"][k] if fl["wscale"][k] >= 0 else None}
            endpoint_rows.append({"flow": i, "side": side, **eps[side]})
        duration = (fl["last_ns"] - fl["first_ns"]) / 1e9
        lost_ms = float(stall_ns[2 * i] + stall_ns[2 * i + 1]) / 1e6
        doc = {
            "id": i, "client": fl["client"], "server": fl["server"], "roles": fl["roles"],
            "vantage": fl["vantage"], "vantage_basis": fl["vantage_how"],
            "rtt_ms": _r(fl["rtt_ms"]), "rtt_client_ms": _r(fl["rtt_client_ms"]),
            "rtt_server_ms": _r(fl["rtt_server_ms"]), "packets": fl["packets"],
            "retransmissions": int(retrans[i]), "keepalives_or_probes": int(keepalive[i]),
            "start_s": round((fl["first_ns"] - origin_ns) / 1e9, 6),
            "stalls": int(stall_n[2 * i] + stall_n[2 * i + 1]), "stall_ms": round(lost_ms, 3),
            "duration_s": round(duration, 6),
            "duration_without_stalls_s": round(max(duration - lost_ms / 1e3, 0.0), 6),
            "lost_share": round(lost_ms / 1e3 / duration, 4) if duration > 0 else 0.0,
            "endpoints": eps, "fix": None,
        }
        if doc["stalls"]:
            k = 0 if stall_ns[2 * i] >= stall_ns[2 * i + 1] else 1
            doc["fix"] = _fix(doc, k, int(stall_n[2 * i + k]), float(stall_ns[2 * i + k]) / 1e6,
                              answered[2 * i + k] * 2 >= stall_n[2 * i + k])
        flow_docs.append(doc)

    stall_docs = []
    order = np.lexsort((st["released_frame"], st["flow"]))
    for j in order:
        side = SIDES[int(st["dir"][j])]
        stall_docs.append({
            "flow": int(st["flow"][j]), "sender": side,
            "endpoint": flow_docs[int(st["flow"][j])][side],
            "delay_ms": round(st["stall_ns"][j] / 1e6, 3),
            "held_bytes": int(st["held_bytes"][j]), "small_bytes": int(st["small_bytes"][j]),
            "peer_ack_delay_ms": round(st["ack_delay_ns"][j] / 1e6, 3),
            "reaction_ms": round(st["reaction_ns"][j] / 1e6, 3),
            "frames": {"small": int(st["small_frame"][j]), "ack": int(st["ack_frame"][j]),
                       "released": int(st["released_frame"][j])},
            "times": {name: round((st[f"{name}_ns"][j] - origin_ns) / 1e9, 6)
                      for name in ("small", "ack", "released")},
            "confidence": float(st["confidence"][j]),
        })

    capture = {"path": info.path, "format": info.format, "compressed": info.compressed,
               "link_types": list(info.link_types), "packets": info.packets,
               "tcp_packets": int(len(f.seg["flow"])), "skipped": dict(sorted(skipped.items())),
               "warnings": list(info.warnings), "time_origin_ns": int(origin_ns)}
    flows_df = pd.DataFrame([{k: v for k, v in d.items() if k not in ("endpoints", "fix")}
                             | {"fix_side": d["fix"]["side"] if d["fix"] else None,
                                "fix_action": d["fix"]["action"] if d["fix"] else None}
                             for d in flow_docs], columns=_FLOW_COLUMNS)
    stalls_df = pd.DataFrame([{k: v for k, v in d.items() if k not in ("frames", "times")}
                              | {f"{k}_frame": v for k, v in d["frames"].items()}
                              | {f"{k}_s": v for k, v in d["times"].items()}
                              for d in stall_docs], columns=_STALL_COLUMNS)
    endpoints_df = pd.DataFrame(endpoint_rows, columns=_ENDPOINT_COLUMNS)
    return Report(capture, flows_df, stalls_df, endpoints_df, flow_docs, stall_docs)


_FLOW_COLUMNS = ["id", "client", "server", "roles", "vantage", "vantage_basis", "rtt_ms",
                 "rtt_client_ms", "rtt_server_ms", "packets", "retransmissions",
                 "keepalives_or_probes", "start_s", "stalls", "stall_ms",
                 "duration_s", "duration_without_stalls_s", "lost_share", "fix_side", "fix_action"]
_STALL_COLUMNS = ["flow", "sender", "endpoint", "delay_ms", "held_bytes", "small_bytes",
                  "peer_ack_delay_ms", "reaction_ms", "small_frame", "ack_frame", "released_frame",
                  "small_s", "ack_s", "released_s", "confidence"]
_ENDPOINT_COLUMNS = ["flow", "side", "endpoint", "nagle", "nagle_off_evidence", "delayed_ack_ms",
                     "delayed_acks", "quick_acks", "mss", "mss_from", "window_scale"]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _fix(doc: dict[str, Any], k: int, count: int, lost_ms: float, one_message: bool) -> dict:
    """Who must change what, in one readable sentence."""
    side, peer = SIDES[k], SIDES[1 - k]
    endpoint = doc[side]
    timer = doc["endpoints"][peer]["delayed_ack_ms"]
    timer_txt = f"~{timer:.0f} ms" if timer is not None else "its timer"
    label = timer_name(timer)
    if label:
        timer_txt += f", {label}"
    cost = (f"{count} write{'s' if count != 1 else ''} waited for the {peer}'s delayed ACK "
            f"({timer_txt}), costing {lost_ms:.1f} ms")
    quickack = (f"enabling quick ACKs on the {peer} (TCP_QUICKACK on Linux, "
                f"TcpAckFrequency=1 on Windows) only mitigates it")
    if one_message:
        action = "coalesce-writes"
        alternative = "set-tcp-nodelay"
        text = (f"The {side} {endpoint} should send each message in one write (build it in one "
                f"buffer, use writev, or MSG_MORE/TCP_CORK then uncork): {cost}. If it must send "
                f"independent small messages, set TCP_NODELAY on its socket instead; "
                f"{quickack}.")
    else:
        action = "set-tcp-nodelay"
        alternative = "coalesce-writes"
        text = (f"The {side} {endpoint} should set TCP_NODELAY on its socket, since it sends "
                f"small messages that must go at once: {cost}. Batching its small writes into "
                f"full segments also avoids the wait; {quickack}.")
    return {"side": side, "endpoint": endpoint, "action": action, "alternative": alternative,
            "text": text}


def render_text(r: Report) -> str:
    """The terminal report: verdict and fixes first, then evidence, then the clean flows."""
    c = r.capture
    lines = []
    skipped = ", ".join(f"{v} {k}" for k, v in c["skipped"].items()) or "none"
    lines.append(f"{c['path']}: {c['format']}{' (gzip)' if c['compressed'] else ''}, "
                 f"{'/'.join(c['link_types']) or 'no packets'}, {c['packets']} packets, "
                 f"{c['tcp_packets']} TCP; skipped: {skipped}")
    for w in c["warnings"]:
        lines.append(f"warning: {w}")
    lines.append("")
    lines.append(r.verdict())
    stalled = [f for f in r._flow_docs if f["stalls"]]
    for f in stalled:
        lines.append("")
        lines.append(f"Flow {f['id']}: client {f['client']} -> server {f['server']} "
                     f"({f['packets']} packets, roles from {f['roles']})")
        lines.append(f"  {f['stalls']} stalls, {f['stall_ms']:.1f} ms lost = "
                     f"{100 * f['lost_share']:.1f}% of {f['duration_s']:.3f} s; "
                     f"without them ~{f['duration_without_stalls_s']:.3f} s")
        lines.append(f"  capture point: {f['vantage']} ({f['vantage_basis']})")
        for side in SIDES:
            e = f["endpoints"][side]
            da = (f"{e['delayed_ack_ms']:.1f} ms {timer_name(e['delayed_ack_ms'])}".rstrip()
                  if e["delayed_ack_ms"] is not None else "not seen")
            lines.append(f"  {side} {e['endpoint']}: Nagle {e['nagle']}, delayed ACK {da}, "
                         f"quick ACKs {e['quick_acks']}")
        lines.append(f"  FIX: {f['fix']['text']}")
        ev = [s for s in r._stall_docs if s["flow"] == f["id"]]
        lines.append("  Evidence (Wireshark frame numbers; times in s since the first packet):")
        lines.append("    sender  small seg (S1)      late pure ACK       released (S2)      "
                     "held  stall ms  peer ACK ms  conf")
        for s in ev[:TEXT_EVIDENCE_ROWS]:
            fr, t = s["frames"], s["times"]
            lines.append(f"    {s['sender']:<6}  #{fr['small']:<7} {t['small']:>10.6f}  "
                         f"#{fr['ack']:<7} {t['ack']:>10.6f}  #{fr['released']:<7} "
                         f"{t['released']:>10.6f} {s['held_bytes']:>5}B {s['delay_ms']:>8.1f}  "
                         f"{s['peer_ack_delay_ms']:>10.1f}  {s['confidence']:.2f}")
        if len(ev) > TEXT_EVIDENCE_ROWS:
            lines.append(f"    ... {len(ev) - TEXT_EVIDENCE_ROWS} more stalls (--format json "
                         f"lists them all)")
    clean = [f for f in r._flow_docs if not f["stalls"]]
    if clean:
        lines.append("")
        lines.append(f"Flows without stalls ({len(clean)}):")
        for f in clean[:50]:
            ce, se = f["endpoints"]["client"], f["endpoints"]["server"]
            lines.append(f"  {f['id']:>4}  {f['client']} -> {f['server']}  {f['packets']} packets, "
                         f"{f['duration_s']:.3f} s, vantage {f['vantage']}, Nagle client "
                         f"{ce['nagle']} / server {se['nagle']}")
        if len(clean) > 50:
            lines.append(f"  ... {len(clean) - 50} more")
    return "\n".join(lines) + "\n"
