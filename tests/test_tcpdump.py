"""record: tcpdump around a real command over loopback, and the errors when capture is not
possible. The capture tests run for real where capture is permitted (root and tcpdump, as in
.ci/run) and skip with the reason elsewhere."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import nagleprobe
from capture_env import require_capture
from nagleprobe.errors import ExitStatus
from nagleprobe.tcpdump import CaptureStats, RecordResult, bpf_filter, record
from splitwrite import free_port

SPLITWRITE = str(Path(__file__).resolve().parent / "splitwrite.py")
STALLED_MS = 25.0  # a request this much slower than the fastest one waited for a delayed ACK


def nagleprobe_cli(*args: str, env: dict | None = None, prefix: tuple = ()
                   ) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "nagleprobe", *args],
                          capture_output=True, text=True, cwd="/", env=env, timeout=120)


def record_splitwrite(tmp_path: Path, *app_args: str) -> tuple[subprocess.CompletedProcess,
                                                               dict, dict]:
    """`nagleprobe record --check --format json` around the split-write app on a free port;
    returns the process, the app's own timing log and the gate's JSON document."""
    port = free_port()
    out = tmp_path / "traffic.pcap"
    proc = nagleprobe_cli("record", "--port", str(port), "-o", str(out), "--check",
                          "--format", "json", "--", sys.executable, SPLITWRITE,
                          "--port", str(port), *app_args)
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout + proc.stderr  # the app's log, then the gate's JSON
    return proc, json.loads(lines[0]), json.loads(lines[1])


def test_bpf_filter_selects_tcp_and_the_ports():
    assert bpf_filter() == "tcp"
    assert bpf_filter([8000, 8443]) == "tcp and (port 8000 or port 8443)"


def test_the_summary_says_what_was_recorded_where_and_how_the_command_ended():
    said = RecordResult(3, "run.pcap", CaptureStats(captured=42, dropped=2), "eth0").summary()
    assert said == ("recorded 42 packets on eth0 to run.pcap (2 dropped by the kernel); "
                    "command exited with 3")
    unsaid = RecordResult(0, "run.pcap", CaptureStats()).summary()  # tcpdump said nothing
    assert unsaid == "recorded ? packets on lo to run.pcap; command exited with 0"


def test_split_writes_are_recorded_and_fail_the_gate(tmp_path):
    require_capture()
    proc, app, doc = record_splitwrite(tmp_path)
    assert proc.returncode == ExitStatus.STALLS_FOUND, proc.stderr
    lat = app["latency_ms"]
    slow = sum(1 for x in lat if x >= min(lat) + STALLED_MS)  # ground truth: the app's clock
    assert slow >= len(lat) // 2, lat  # Linux: every request but the quick-ack first ones
    cap = doc["captures"][0]
    # live loopback timing: allow one request of scheduling noise either way
    assert abs(cap["summary"]["stalls"] - slow) <= 1, (cap["summary"], lat)
    assert cap["check"]["status"] == "fail"
    fix = cap["flows"][0]["fix"]
    assert (fix["side"], fix["action"]) == ("client", "coalesce-writes")
    assert cap["flows"][0]["server"] == f"127.0.0.1:{app['port']}"
    assert "recorded" in proc.stderr and "command exited with 0" in proc.stderr


def test_the_same_app_with_tcp_nodelay_passes_the_gate(tmp_path):
    require_capture()
    proc, app, doc = record_splitwrite(tmp_path, "--nodelay")
    assert proc.returncode == ExitStatus.OK, proc.stdout + proc.stderr
    assert max(app["latency_ms"]) < STALLED_MS
    cap = doc["captures"][0]
    assert cap["summary"]["stalls"] == 0 and cap["check"]["status"] == "pass"
    assert cap["flows"][0]["endpoints"]["client"]["nagle"] == "off"  # seen on the wire
    assert cap["flows"][0]["roles"] == "handshake"  # tcpdump was listening before connect


def test_record_returns_the_command_status_and_a_complete_capture(tmp_path):
    require_capture()
    port = free_port()
    out = tmp_path / "t.pcap"
    code = ("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(1); "
            "c = socket.create_connection(('127.0.0.1', %d)); a, _ = s.accept(); "
            "c.sendall(b'x' * 100); a.recv(100); c.close(); a.close(); sys.exit(7)"
            % (port, port))
    result = record([sys.executable, "-c", code], out, ports=[port])
    assert result.returncode == 7
    assert result.stats.captured is not None and result.stats.captured >= 6  # 3-way, data, FIN
    doc = nagleprobe.analyze(str(out)).to_dict()
    assert [f["server"] for f in doc["flows"]] == [f"127.0.0.1:{port}"]
    assert doc["capture"]["packets"] == result.stats.captured


def test_a_missing_command_is_127_and_says_so(tmp_path):
    require_capture()
    proc = nagleprobe_cli("record", "-o", str(tmp_path / "x.pcap"), "--",
                          "/nonexistent/command")
    assert proc.returncode == ExitStatus.COMMAND_NOT_FOUND == 127
    assert proc.stderr.strip() == "nagleprobe: error: /nonexistent/command: command not found"


def test_no_tcpdump_is_a_one_line_error_and_the_command_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    env = {**os.environ, "NAGLEPROBE_TCPDUMP": str(tmp_path / "no-tcpdump")}
    proc = nagleprobe_cli("record", "-o", str(tmp_path / "x.pcap"), "--", "touch",
                          str(marker), env=env)
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE == 5
    assert proc.stderr.strip().splitlines() == [
        f"nagleprobe: error: tcpdump not found at {tmp_path / 'no-tcpdump'}"]
    assert not marker.exists()


@pytest.mark.parametrize("args, problem", [
    (["-i", "nosuchif0"], "no interface nosuchif0 to capture on"),
    (["--filter", "tcp and ("], "bad capture filter 'tcp and ('"),
])
def test_capture_setup_errors_are_one_line(tmp_path, args, problem):
    require_capture()
    proc = nagleprobe_cli("record", *args, "-o", str(tmp_path / "x.pcap"), "--", "true")
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], proc.stderr


def test_capture_without_the_capture_privilege_is_refused_clearly(tmp_path):
    """Root with every capability dropped (as in a container without CAP_NET_RAW)."""
    require_capture()
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    proc = nagleprobe_cli("record", "-o", str(tmp_path / "x.pcap"), "--", "true",
                          prefix=("setpriv", "--bounding-set=-all", "--inh-caps=-all"))
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "capture not permitted on interface lo" in lines[0]


def test_a_user_who_is_not_root_is_told_so(tmp_path):
    require_capture()
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to switch to an unprivileged user")
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    usable = subprocess.run([*nobody, sys.executable, "-c", "import nagleprobe.cli"],
                            capture_output=True, cwd="/")
    if usable.returncode != 0:
        pytest.skip("this Python and its packages cannot be read by an unprivileged user")
    d = Path(tempfile.mkdtemp())
    d.chmod(0o777)
    try:
        proc = nagleprobe_cli("record", "-o", str(d / "x.pcap"), "--", "true", prefix=nobody)
    finally:
        shutil.rmtree(d)
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE, proc.stderr
    assert "running as uid 65534, not root" in proc.stderr


# ---------------------------------------------------------------- hostile options (issue 18)
def test_the_filter_is_only_ever_a_filter(tmp_path):
    """`--filter=-r/path` used to make tcpdump read that file: it now comes after `--`."""
    from nagleprobe.tcpdump import Capture
    secret = tmp_path / "other.pcap"
    shutil.copyfile(Path(__file__).resolve().parent.parent / "samples" / "echo_split_lo.pcap",
                    secret)
    cmd = Capture(tmp_path / "x.pcap", bpf=f"-r{secret}", tcpdump=sys.executable).command()
    assert cmd[-2:] == ["--", f"-r{secret}"]
    assert cmd[cmd.index("-w") + 1] == "-"  # tcpdump never opens the output path itself
    require_capture()
    out = tmp_path / "x.pcap"
    proc = nagleprobe_cli("record", f"--filter=-r{secret}", "-o", str(out), "--", "true")
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad capture filter" in lines[0], proc.stderr
    assert not out.exists()  # nothing left behind


def test_an_output_path_that_is_a_symlink_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "traffic.pcap"
    link.symlink_to(victim)
    marker = tmp_path / "ran"
    proc = nagleprobe_cli("record", "-o", str(link), "--", "touch", str(marker))
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE
    assert proc.stderr == (f"nagleprobe: error: refusing to write {link}: it is a symbolic "
                           "link (tcpdump runs as root; remove it or choose another output)\n")
    assert victim.read_text() == "precious\n" and not marker.exists()
    dangling = tmp_path / "dangling.pcap"
    dangling.symlink_to(tmp_path / "would-be-created")
    proc = nagleprobe_cli("record", "-o", str(dangling), "--", "true")
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE and "symbolic link" in proc.stderr
    assert not (tmp_path / "would-be-created").exists()
    fifo = tmp_path / "fifo.pcap"
    os.mkfifo(fifo)
    proc = nagleprobe_cli("record", "-o", str(fifo), "--", "true")
    assert proc.returncode == ExitStatus.CANNOT_CAPTURE and "not a regular file" in proc.stderr


def test_a_link_swapped_in_after_the_check_is_not_followed(tmp_path):
    """The output is opened with O_NOFOLLOW: a symlink planted between the check and the
    open fails the open instead of being followed."""
    from nagleprobe.tcpdump import Capture, RecordError
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "traffic.pcap"
    cap = Capture(out, tcpdump=sys.executable)
    real_lstat = os.lstat

    def lstat_missing_then_plant(p, *a, **kw):
        if str(p) == str(out):
            out.symlink_to(victim)  # planted between the check and the open
            raise FileNotFoundError(p)
        return real_lstat(p, *a, **kw)

    os.lstat = lstat_missing_then_plant
    try:
        with pytest.raises(RecordError, match="cannot write"):
            cap._open_output()
    finally:
        os.lstat = real_lstat
    assert victim.read_text() == "precious\n"


def test_the_capture_is_written_through_the_opened_file(tmp_path):
    require_capture()
    out = tmp_path / "traffic.pcap"
    out.write_bytes(b"old content that must go" * 100)
    result = record([sys.executable, "-c", "pass"], out, ports=[free_port()])
    assert result.returncode == 0
    data = out.read_bytes()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") and len(data) == 24


def test_an_unexpected_error_while_recording_is_one_line_and_status_4(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import nagleprobe.tcpdump
    from nagleprobe.cli import main

    def broken(*args, **kwargs):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(nagleprobe.tcpdump, "record", broken)
    r = CliRunner().invoke(main, ["record", "-o", str(tmp_path / "x.pcap"), "--", "true"])
    assert r.exit_code == 4
    assert r.output.splitlines() == [
        f"nagleprobe: internal error while recording {tmp_path / 'x.pcap'}: ZeroDivisionError: "
        "simulated bug (rerun with --debug for a traceback)"]
