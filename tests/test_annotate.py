"""annotate: the pcapng copy with comments on the stall frames (checked record by record with
nagleprobe's reader and, where installed, with tshark)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nagleprobe
from nagleprobe.annotate import annotate
from nagleprobe.read import CaptureReader

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
FORMATS = SAMPLES / "formats"
# every format and link type: pcap (us, ns, big-endian), pcapng (several interfaces,
# if_tsresol, SPB), gzip, SLL, SLL2, VLAN, QinQ, raw IP, NULL/LOOP, IPv6, port reuse
CAPTURES = sorted(p.relative_to(SAMPLES).as_posix() for p in
                  [*SAMPLES.glob("*.pcap"), *FORMATS.glob("*.pcap"), *FORMATS.glob("*.pcapng"),
                   *FORMATS.glob("*.gz")])
# what Wireshark is asked about (each tshark run takes a second): every format and link
# type of the issue (pcap, pcapng, gzip, SLL2, VLAN, IPv6) and then some
WIRESHARK_CHECKED = ["echo_split_lo.pcap", "proxy_any.pcap", "proxy_any_sll2.pcap",
                     "formats/base_lo.pcap.gz", "formats/base_lo.pcapng.gz",
                     "formats/base_lo_nsec.pcap", "formats/base_lo6.pcap", "formats/vlan.pcap",
                     "formats/multi_if_tsresol.pcapng", "formats/spb.pcapng",
                     "formats/port_reuse.pcap", "formats/snap68.pcap", "bridge_any.pcap",
                     "chain3_lo.pcap"]
TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")


def records(path):
    """Every packet record as (frame, time ns, captured length, wire length, link type,
    bytes)."""
    out = []
    for b in CaptureReader(str(path)):
        for i in range(len(b)):
            o, c = int(b.offset[i]), int(b.caplen[i])
            out.append((int(b.frame[i]), int(b.ts_ns[i]), c, int(b.wirelen[i]),
                        int(b.linktype[i]), bytes(b.data[o:o + c])))
    return out


def stall_frames(report):
    return sorted({int(f) for k in ("small", "ack", "released")
                   for f in report.stalls[f"{k}_frame"]})


def tshark(path, *args):
    done = subprocess.run([TSHARK, "-r", str(path), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout


@pytest.mark.parametrize("name", CAPTURES)
def test_records_are_unchanged_and_stall_frames_commented(name, tmp_path):
    src = SAMPLES / name
    out = tmp_path / "annotated.pcapng"
    result = annotate(str(src), str(out))
    assert records(out) == records(src)  # frames, times, lengths, link types, every byte
    assert result.packets == len(records(src))
    assert result.commented == len(stall_frames(result.report))
    again = nagleprobe.analyze(str(out))
    assert again.to_dict()["stalls"] == result.report.to_dict()["stalls"]


@needs_tshark
@pytest.mark.parametrize("name", WIRESHARK_CHECKED)
def test_wireshark_sees_the_same_frames_and_the_comments(name, tmp_path):
    src = SAMPLES / name
    out = tmp_path / "annotated.pcapng"
    report = annotate(str(src), str(out)).report
    fields = ["-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch", "-e",
              "frame.len", "-e", "frame.cap_len", "-e", "frame.protocols"]
    assert tshark(out, *fields) == tshark(src, *fields)
    picked = tshark(out, "-Y", 'frame.comment contains "nagleprobe"', "-T", "fields", "-e",
                    "frame.number").split()
    assert [int(f) for f in picked] == stall_frames(report)
    if len(report.stalls):
        s = report.stalls.iloc[0]
        got = tshark(out, "-Y", f"frame.number == {s['small_frame']}", "-T", "fields", "-e",
                     "frame.comment")
        assert f"nagleprobe: stall 1 of {(report.stalls['flow'] == s['flow']).sum()} " \
               f"(flow {s['flow']}): S1 small segment" in got
        assert f"fix {report.flows.loc[s['flow'], 'fix_side']}" in got


@needs_tshark
def test_existing_comments_are_kept_and_the_verdict_is_in_the_section_header(tmp_path):
    src = tmp_path / "commented.pcapng"
    subprocess.run(["editcap", "-a", "10:an engineer's note", "-a", "3:another note",
                    str(FORMATS / "base_lo.pcapng"), str(src)], check=True, capture_output=True)
    out = tmp_path / "annotated.pcapng"
    annotate(str(src), str(out))
    assert records(out) == records(src)
    c10 = tshark(out, "-Y", "frame.number == 10", "-T", "fields", "-e", "frame.comment")
    assert "an engineer's note" in c10 and "nagleprobe: stall 1 of 7" in c10
    c3 = tshark(out, "-Y", "frame.number == 3", "-T", "fields", "-e", "frame.comment")
    assert c3.strip() == "another note"
    info = subprocess.run(["capinfos", str(out)], capture_output=True, text=True).stdout
    assert "nagleprobe" in info and "7 stalls in 1 of 1 TCP flow" in info


def test_spb_stall_frame_stays_uncommented_and_counted(tmp_path):
    # spb.pcapng stores only FIN packets as SPBs: no stall frame is one
    result = annotate(str(FORMATS / "spb.pcapng"), str(tmp_path / "o.pcapng"))
    assert result.uncommentable == 0 and result.commented == 21


def test_cli_annotate(tmp_path):
    out = tmp_path / "o.pcapng"
    done = subprocess.run([sys.executable, "-m", "nagleprobe", "annotate",
                           str(SAMPLES / "echo_split_lo.pcap"), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "57 frames commented" in done.stdout and out.exists()
    bad = subprocess.run([sys.executable, "-m", "nagleprobe", "annotate", "-", "-o", str(out)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "standard input" not in bad.stdout
    missing = subprocess.run([sys.executable, "-m", "nagleprobe", "annotate",
                              str(tmp_path / "nope.pcap"), "-o", str(out)],
                             capture_output=True, text=True)
    assert missing.returncode == 3 and "no such file" in missing.stderr


def test_small_chunks_give_the_same_file(tmp_path, monkeypatch):
    """Records split across the reader's chunks (4 KiB), conversion groups of 7 records and
    copies of 100 bytes give the same file."""
    import nagleprobe.annotate as mod

    names = ["proxy_any.pcap", "formats/multi_if.pcapng", "formats/base_lo.pcapng.gz"]
    whole = {}
    for name in names:
        annotate(str(SAMPLES / name), str(tmp_path / "w.pcapng"))
        whole[name] = (tmp_path / "w.pcapng").read_bytes()
    monkeypatch.setattr(mod, "GROUP", 7)
    monkeypatch.setattr(mod, "COPY_PIECE", 100)
    init = CaptureReader.__init__
    monkeypatch.setattr(CaptureReader, "__init__",
                        lambda self, path, chunk_bytes=0, strict=False, **kw: init(
                            self, path, 4096, strict, **kw))
    for name in names:
        annotate(str(SAMPLES / name), str(tmp_path / "s.pcapng"))
        assert (tmp_path / "s.pcapng").read_bytes() == whole[name], name
