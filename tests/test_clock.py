"""The capture's clock (nagleprobe/read/clock.py; issue 30, items 3 and 4): a record whose
time cannot be true costs that record only, a step of the clock is a warning and a new time
base, pcapng's if_tsoffset is applied, and a capture whose time stamps are too coarse to
show a stall says so in every output and does not pass `check`.

Every capture here is a real sample's packets (echo_split_lo.pcap: 107 records, 19 stalls;
echo_nodelay_lo.pcap: none) with their times rewritten, as each test says; the packet bytes
are the real ones."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

import nagleprobe
from capgen import Iface, Section, pcap_bytes, pcapng_blocks, pcapng_bytes
from nagleprobe.cli import main
from nagleprobe.errors import ExitStatus
from nagleprobe.read import CaptureReader
from nagleprobe.read.clock import UNRESOLVED_NS
from replicate import sample_packets, shift_ports

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
T0 = 1_780_000_000 * 10**9  # 2026-05-28
DAY = 86400 * 10**9
SPLIT = sample_packets("echo_split_lo.pcap")  # (ns since the first record, frame bytes)
# echo_nodelay_lo's 88 records span 0.9 ms: stretched 1000 times (1 us -> 1 ms, 0.9 s), a
# capture without stalls whose times can be rounded to coarse steps and still differ
NODELAY = [(t * 1000, f) for t, f in sample_packets("echo_nodelay_lo.pcap")]
STALLS = 19  # echo_split_lo's (its sidecar's ground truth)


def write(tmp_path, name: str, packets: list[tuple[int, bytes]]) -> str:
    """`packets` (absolute ns, frame) as a pcap ("x.pcap") or a one-interface pcapng."""
    p = tmp_path / name
    if name.endswith(".pcapng"):
        p.write_bytes(pcapng_bytes([Section([Iface(1)], records=[
            ("epb", 0, t, f) for t, f in packets])]))
    else:
        p.write_bytes(pcap_bytes(packets))
    return str(p)


def record_offset(path: str, i: int) -> int:
    """The file offset of record `i` (0-based) of a capture written by `write`."""
    data = open(path, "rb").read()
    if path.endswith(".pcapng"):
        return pcapng_blocks(data)[2 + i][0]  # after the section header and interface blocks
    o = 24
    for _ in range(i):
        o += 16 + struct.unpack_from("<I", data, o + 8)[0]
    return o


def implausible(ts: str, frame: int, at: int) -> str:
    return (f"implausible time stamp {ts} (frame {frame} at byte {at}); skipped, as is any "
            "later record whose time is far from both its neighbours' (counted as "
            "implausible-time)")


# ------------------------------------------------------------------ implausible times
def test_pcapng_records_stamped_2_64_minus_1_cost_only_themselves(tmp_path):
    """Seven copies of real packets, spread over the file, with the time stamp 2^64-1: they
    are skipped; every stall is found and the capture's time origin is its first packet's
    (it was -1000 ns, and all stalls were lost)."""
    records, copies = [], []
    for i, (t, f) in enumerate(SPLIT):
        records.append(("epb", 0, T0 + t, f))
        if i % 15 == 7:
            body = struct.pack("<IIIII", 0, 0xFFFFFFFF, 0xFFFFFFFF, len(f), len(f))
            records.append(("raw", 6, body + f + bytes(-len(f) % 4)))
            copies.append(len(records) - 1)
    assert len(copies) == 7
    p = tmp_path / "max.pcapng"
    p.write_bytes(pcapng_bytes([Section([Iface(1)], records=records, minimal=True)]))
    r = nagleprobe.analyze(str(p))
    c = r.capture
    assert len(r.stalls) == STALLS
    assert c["packets"] == len(SPLIT) + 7 and c["tcp_packets"] == len(SPLIT)
    assert c["skipped"] == {"implausible-time": 7}
    assert c["time_origin_ns"] == T0
    at = record_offset(str(p), copies[0])
    assert c["warnings"] == [implausible("1969-12-31T23:59:59Z", copies[0] + 1, at)]


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_a_first_record_at_time_0_is_skipped_and_the_rest_analysed(kind, tmp_path):
    """The first record's time rewritten to 0 (1970), the others in 2026: that record alone
    is skipped (it was kept, and the other 106 packets dropped as late)."""
    pk = [(T0 + t, f) for t, f in SPLIT]
    pk[0] = (0, pk[0][1])
    path = write(tmp_path, f"zero.{kind}", pk)
    r = nagleprobe.analyze(path)
    assert len(r.stalls) == STALLS
    assert r.capture["skipped"] == {"implausible-time": 1}
    assert r.capture["warnings"] == [implausible("1970-01-01T00:00:00Z", 1,
                                                 record_offset(path, 0))]
    assert r.capture["time_origin_ns"] == T0 + SPLIT[1][0]


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
@pytest.mark.parametrize("when, text", [(0, "1970-01-01T00:00:00Z"),
                                        (T0 + 400 * DAY, "2027-07-02T20:26:40Z")])
def test_one_record_far_from_its_neighbours_costs_that_record_only(kind, when, text, tmp_path):
    """A copy of record 50 inserted after it with the time 0, or 400 days ahead: skipped
    under the same reason in both formats (in a pcap it is not a corrupt stretch: the records
    chain on right after it, so frame numbers stay Wireshark's)."""
    pk = [(T0 + t, f) for t, f in SPLIT]
    pk.insert(50, (when, pk[49][1]))
    path = write(tmp_path, f"far.{kind}", pk)
    r = nagleprobe.analyze(path)
    assert len(r.stalls) == STALLS
    assert r.capture["packets"] == len(pk)
    assert r.capture["skipped"] == {"implausible-time": 1}
    assert r.capture["warnings"] == [implausible(text, 51, record_offset(path, 50))]
    # the frames after it keep their numbers: the sample's frame n is n + 1 here
    alone = nagleprobe.analyze(write(tmp_path, f"intact.{kind}", [(T0 + t, f) for t, f in SPLIT]))
    assert (r.stalls["released_frame"] == alone.stalls["released_frame"].where(
        alone.stalls["released_frame"] <= 50, alone.stalls["released_frame"] + 1)).all()


def test_strict_makes_an_implausible_time_an_error(tmp_path):
    pk = [(T0 + t, f) for t, f in SPLIT]
    pk[0] = (0, pk[0][1])
    path = write(tmp_path, "zero.pcapng", pk)
    with pytest.raises(nagleprobe.CaptureError, match=r"implausible time stamp .* \(frame 1 "):
        list(CaptureReader(path, strict=True))


# ------------------------------------------------------------------ steps of the clock
@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_a_clock_stepped_back_two_days_is_a_warning_and_a_new_time_base(kind, tmp_path):
    """The sample, then the sample again (ports moved) with times 2 days before it: every
    record is read (a pcap stopped at the step: 107 of 214) and both copies' stalls found;
    the second copy's times continue the first's."""
    pk = [(T0 + t, f) for t, f in SPLIT]
    pk += [(T0 - 2 * DAY + t, shift_ports(f, 7)) for t, f in SPLIT]
    path = write(tmp_path, f"step.{kind}", pk)
    r = nagleprobe.analyze(path)
    c = r.capture
    assert c["packets"] == 2 * len(SPLIT) and c["skipped"] == {}
    assert len(r.stalls) == 2 * STALLS
    assert c["warnings"] == [
        f"clock stepped back 2 d (frame {len(SPLIT) + 1} at byte "
        f"{record_offset(path, len(SPLIT))}): the records from there on are analysed on their "
        "own time base, joined to the one before (the interval across the step counts as 0)"]
    ts = [t for b in CaptureReader(path) for t in b.ts_ns.tolist()]
    last = T0 + SPLIT[-1][0]
    assert ts[len(SPLIT)] == last  # the first record after the step takes the latest before it
    assert ts[len(SPLIT):] == [last + t for t, _ in SPLIT]
    assert (r.flows["start_s"].diff().dropna() >= 0).all()


def test_a_step_inside_a_connection_loses_at_most_the_stall_across_it(tmp_path):
    """The sample with the clock stepped back 2 days at record k: the connection goes on,
    and only a stall whose hold spans the step (its interval counts as 0) can be lost."""
    found = []
    for k in (8, 15, 50, 57):
        pk = [(T0 + t - (2 * DAY if i >= k else 0), f) for i, (t, f) in enumerate(SPLIT)]
        r = nagleprobe.analyze(write(tmp_path, f"in{k}.pcap", pk))
        assert len(r.flows) == 1 and r.capture["skipped"] == {}
        assert r.capture["warnings"][0].startswith(f"clock stepped back 2 d (frame {k + 1} ")
        found.append(len(r.stalls))
    assert all(n in (STALLS, STALLS - 1) for n in found) and STALLS in found


def test_a_gap_forward_that_the_records_keep_is_a_pause_with_no_warning(tmp_path):
    pk = [(T0 + t, f) for t, f in SPLIT]
    pk += [(T0 + 3 * DAY + t, shift_ports(f, 7)) for t, f in SPLIT]
    r = nagleprobe.analyze(write(tmp_path, "gap.pcapng", pk))
    assert len(r.stalls) == 2 * STALLS and r.capture["warnings"] == []


# ------------------------------------------------------------------ if_tsoffset
def test_pcapng_if_tsoffset_is_added_to_every_time_of_its_interface(tmp_path):
    p = tmp_path / "off.pcapng"
    p.write_bytes(pcapng_bytes([Section([Iface(1, tsoffset=3600)], records=[
        ("epb", 0, T0 + t, f) for t, f in SPLIT])]))
    first = pcapng_blocks(p.read_bytes())[2][1]
    hi, lo = struct.unpack_from("<II", first, 12)
    assert (hi << 32 | lo) * 1000 == T0 - 3600 * 10**9  # the file's own units lack the hour
    r = nagleprobe.analyze(str(p))
    assert r.capture["time_origin_ns"] == T0 and len(r.stalls) == STALLS


# ------------------------------------------------------------------ time resolution
def test_the_samples_resolution_is_what_their_files_declare():
    r = nagleprobe.analyze(str(SAMPLES / "echo_split_lo.pcap"))
    assert r.capture["time_step_ns"] == 1000 and r.capture["warnings"] == []


def coarse_pcapng(tmp_path, tsresol: int, packets=SPLIT) -> str:
    """The packets with `tsresol` (capgen rounds each time down to it)."""
    p = tmp_path / f"coarse_{tsresol:02x}.pcapng"
    p.write_bytes(pcapng_bytes([Section([Iface(1, tsresol=tsresol)], records=[
        ("epb", 0, T0 + t, f) for t, f in packets])]))
    return str(p)


def unresolved_everywhere(path: str, step: str, said: str) -> None:
    """Text, JSON, check's verdict, exit status, JUnit and --github all say it."""
    warning = (f"time stamps too coarse to show a stall: interface 0 has steps of {step} "
               f"({said}), and the delayed-ACK timers' stalls (40 ms on Linux, 200 ms on "
               "Windows) cannot be resolved; finding no stall means nothing")
    run = CliRunner()
    text = run.invoke(main, ["analyze", path], terminal_width=400).output
    assert f"warning: {warning}" in " ".join(text.split())
    assert f"but none could be: the capture's time stamps move in steps of {step}." in " ".join(
        text.split())
    doc = json.loads(run.invoke(main, ["analyze", "--format", "json", path]).output)
    assert doc["capture"]["warnings"][0]["text"] == warning
    assert doc["capture"]["time_step_ns"] >= UNRESOLVED_NS
    reason = f"time stamps in steps of {step}: a 40 ms delayed-ACK stall cannot be resolved"
    r = run.invoke(main, ["check", path])
    assert r.exit_code == ExitStatus.UNRESOLVED == 8
    assert r.output.startswith(f"UNRESOLVED {path}: no stalls in 1 flow [{reason}]\n"
                               f"  warning: {warning}\n")
    r = run.invoke(main, ["check", "--format", "json", path])
    assert json.loads(r.output)["captures"][0]["check"]["status"] == "unresolved"
    junit = path + ".xml"
    assert run.invoke(main, ["check", "--junit", junit, path]).exit_code == 8
    fail = ET.parse(junit).getroot().find("./testsuite/testcase[@name='capture']/failure")
    assert fail is not None and fail.get("type") == "UnresolvedTimes"
    assert fail.get("message") == reason
    gh = run.invoke(main, ["check", "--github", path]).output
    assert (f"::error file={path},title=nagleprobe%3A time stamps too coarse::{reason}: no "
            "stall found proves nothing") in gh


@pytest.mark.parametrize("tsresol, step", [(0x00, "1 s"), (0x80, "1 s"), (0x81, "500 ms")])
def test_a_declared_resolution_too_coarse_for_a_stall_fails_check_in_every_output(
        tsresol, step, tmp_path):
    """if_tsresol 1 s (0x00, 0x80) or 0.5 s (0x81): echo_split_lo's 19 stalls of ~40 ms
    vanish at whole seconds (check passed such a capture, with no word of it); the stretched
    echo_nodelay_lo, which has no stall to find, is UNRESOLVED, not PASS."""
    if step == "1 s":
        split = nagleprobe.analyze(coarse_pcapng(tmp_path, tsresol))
        assert len(split.stalls) == 0 and split.capture["time_step_ns"] == 10**9
        assert split.capture["warnings"][0].startswith("time stamps too coarse")
    path = coarse_pcapng(tmp_path, tsresol, NODELAY)
    unresolved_everywhere(path, step, f"declared {step}")


def test_times_that_only_move_in_10_ms_steps_are_too_coarse_whatever_is_declared(tmp_path):
    """A microsecond pcap whose times are all multiples of 10 ms (rounded down): the
    stretched echo_nodelay_lo."""
    pk = [(T0 + t // 10**7 * 10**7, f) for t, f in NODELAY]
    path = write(tmp_path, "tens.pcap", pk)
    unresolved_everywhere(path, "10 ms", "declared 1 µs, observed 10 ms")


def test_times_in_1_ms_steps_resolve_a_stall_and_check_passes(tmp_path):
    pk = [(T0 + t // 10**6 * 10**6, f) for t, f in NODELAY]
    path = write(tmp_path, "ms.pcap", pk)
    r = nagleprobe.analyze(path)
    assert r.capture["time_step_ns"] == 10**6 and r.capture["warnings"] == []
    assert CliRunner().invoke(main, ["check", path]).exit_code == ExitStatus.OK
    split = write(tmp_path, "split_ms.pcap", [(T0 + t // 10**6 * 10**6, f) for t, f in SPLIT])
    assert len(nagleprobe.analyze(split).stalls) == STALLS


def test_over_budget_a_coarse_capture_stays_fail(tmp_path):
    """Stalls seen at 10 ms steps are evidence all the same: FAIL, not UNRESOLVED."""
    pk = [(T0 + t // 10**7 * 10**7, f) for t, f in SPLIT]
    path = write(tmp_path, "split_tens.pcap", pk)
    r = nagleprobe.analyze(path)
    assert r.capture["time_step_ns"] == 10**7 and len(r.stalls) > 0
    assert CliRunner().invoke(main, ["check", path]).exit_code == ExitStatus.STALLS_FOUND


def test_one_coarse_interface_among_fine_ones_is_named(tmp_path):
    """pcapng with two interfaces: the sample on interface 0 (microseconds), echo_nodelay on
    interface 1 with whole seconds."""
    recs = [("epb", 0, T0 + t, f) for t, f in SPLIT]
    recs += [("epb", 1, T0 + t, shift_ports(f, 7)) for t, f in NODELAY]
    recs.sort(key=lambda r: r[2])
    p = tmp_path / "two.pcapng"
    p.write_bytes(pcapng_bytes([Section([Iface(1), Iface(1, tsresol=0x80)], records=recs)]))
    r = nagleprobe.analyze(str(p))
    assert r.capture["time_step_ns"] == 10**9
    assert r.capture["warnings"][0].startswith(
        "time stamps too coarse to show a stall: interface 1 has steps of 1 s (declared 1 s)")
    assert len(r.stalls) == STALLS  # interface 0's are resolved and found


def test_annotate_keeps_the_file_s_own_times_across_a_step(tmp_path):
    """The joined clock is the analysis's: `annotate` writes each record with the time its
    file gives it, so the copy has the same step (and says so when read)."""
    pk = [(T0 + t, f) for t, f in SPLIT]
    pk += [(T0 - 2 * DAY + t, shift_ports(f, 7)) for t, f in SPLIT]
    path = write(tmp_path, "step.pcap", pk)
    out = str(tmp_path / "step.pcapng")
    assert CliRunner().invoke(main, ["annotate", path, "-o", out]).exit_code == 0
    units = [struct.unpack_from("<II", b, 12) for _, b in pcapng_blocks(open(out, "rb").read())
             if struct.unpack_from("<I", b)[0] == 6]
    assert [(hi << 32 | lo) * 1000 for hi, lo in units] == [t for t, _ in pk]  # as written
    assert nagleprobe.analyze(out).capture["warnings"][0].startswith("clock stepped back 2 d")


COAP = Path("/work/shared/field/pos__nfstream_coap_mqtt.pcap")


@pytest.mark.skipif(not COAP.exists(), reason="the field captures are not on this machine")
def test_a_real_capture_spanning_years_keeps_its_first_records():
    """nfstream's coap/mqtt capture (real, unaltered) is made of captures of 2012, 2013 and
    2016 one after the other: 5 records, 14, then the rest. Nothing in it is implausible:
    the first five are a year from the next, not decades."""
    r = nagleprobe.analyze(str(COAP))
    assert "implausible-time" not in r.capture["skipped"]
    assert r.capture["warnings"] == [] and r.capture["packets"] == 8516


def test_unresolved_ranks_between_empty_and_unreadable_among_several_captures(tmp_path):
    """Several captures exit with the most severe verdict: 4 > 3 > 8 > 6 > 1 > 0."""
    coarse = coarse_pcapng(tmp_path, 0x80, NODELAY)
    split = str(SAMPLES / "echo_split_lo.pcap")
    broken = str(Path(__file__).resolve().parent / "broken" / "empty.pcap")
    gate = CliRunner()
    assert gate.invoke(main, ["check", coarse, split]).exit_code == ExitStatus.UNRESOLVED
    assert gate.invoke(main, ["check", coarse, broken]).exit_code == ExitStatus.BAD_CAPTURE
    out = gate.invoke(main, ["check", coarse, split]).output.splitlines()[-1]
    assert out.startswith("nagleprobe check: 2 captures: 0 within budget, 1 over budget, "
                          "1 unresolved (")


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
@pytest.mark.parametrize("last", [1, 3])
def test_the_last_records_far_back_are_implausible_and_near_back_a_step(kind, last, tmp_path):
    """The last 1 or 3 records of the sample moved back: 2 days, they are implausible (with
    nothing after them to keep the new time, as a step would need); 5 minutes, a step."""
    n = len(SPLIT)
    far = [(T0 + t - (2 * DAY if i >= n - last else 0), f) for i, (t, f) in enumerate(SPLIT)]
    path = write(tmp_path, f"far.{kind}", far)
    r = nagleprobe.analyze(path)
    assert r.capture["packets"] == n and r.capture["skipped"] == {"implausible-time": last}
    assert r.capture["warnings"][0].startswith("implausible time stamp 2026-05-26T20:26:4")
    assert f"(frame {n - last + 1} at byte {record_offset(path, n - last)})" in (
        r.capture["warnings"][0])
    assert len(r.stalls) == STALLS
    near = [(T0 + t - (300 * 10**9 if i >= n - last else 0), f)
            for i, (t, f) in enumerate(SPLIT)]
    r = nagleprobe.analyze(write(tmp_path, f"near.{kind}", near))
    assert r.capture["skipped"] == {} and len(r.stalls) == STALLS
    assert r.capture["warnings"][0].startswith(f"clock stepped back 300 s (frame {n - last + 1} ")


def test_steps_back_that_would_leave_the_clock_s_range_are_implausible_not_a_crash(tmp_path):
    """Runs of 20 records alternating between 2026 and 2^62 ns later (a fuzzer's shape: each
    return to 2026 is a step back of 146 years, and joining them overflowed 64 bits): no
    error, every record read or counted implausible, and no time wraps around."""
    far = T0 + (1 << 62)
    runs = [T0, far, T0, far, T0, far]
    pk = [(base + t, f) for k, base in enumerate(runs) for t, f in SPLIT[20 * k:20 * k + 20]]
    path = write(tmp_path, "wrap.pcapng", pk)
    ts = [t for b in CaptureReader(path) for t in b.ts_ns.tolist()]
    r = nagleprobe.analyze(path)
    assert r.capture["packets"] == len(pk)
    assert len(ts) + r.capture["skipped"].get("implausible-time", 0) == len(pk)
    assert r.capture["skipped"].get("implausible-time", 0) > 0
    assert min(ts) >= T0  # nothing wrapped to a negative or early time
