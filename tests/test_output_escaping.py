"""File names cannot crash or hijack any output (issue 18, points 3 and 4): a non-UTF-8 name,
a name with newlines that spell GitHub workflow commands, and one with control characters
are copies of a real sample; every output (text, JUnit, GitHub, HTML, JSON, one-line errors)
shows them escaped, stays well-formed, and the exit statuses are the ones of the plain
name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.dom import minidom

import pytest

from nagleprobe.errors import CaptureError, ExitStatus, printable, utf8_safe

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "echo_split_lo.pcap"
NAMES = {
    "non-utf8": (b"bad\xff\xfe.pcap", "bad\\xff\\xfe.pcap"),
    "workflow-commands": (b"x\n::error file=a::pwned\n::add-mask::secret.pcap",
                          "x\\x0a::error file=a::pwned\\x0a::add-mask::secret.pcap"),
    "control": (b"ctl\x01\x1b[31m\x7f.pcap", "ctl\\x01\\x1b[31m\\x7f.pcap"),
}


def nagleprobe(*args, cwd):
    r = subprocess.run([sys.executable, "-m", "nagleprobe", *args], capture_output=True,
                       cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(params=sorted(NAMES))
def named(request, tmp_path):
    raw, shown = NAMES[request.param]
    dst = os.path.join(os.fsencode(tmp_path), raw)
    shutil.copyfile(SAMPLE, dst)
    return raw, shown, tmp_path


def no_command_lines(out: bytes, allowed: int = 0) -> None:
    """No line of `out` is a workflow command, beyond `allowed` of our own."""
    lines = [l for l in out.split(b"\n") if l.startswith(b"::")]
    assert len(lines) == allowed, lines


def test_check_text_and_junit(named):
    raw, shown, tmp = named
    junit = os.path.join(os.fsencode(tmp), b"nagle.xml")
    code, out, err = nagleprobe("check", "--junit", junit, raw, cwd=tmp)
    assert code == ExitStatus.STALLS_FOUND, err
    assert err == b""
    assert out.decode("utf-8").startswith(f"FAIL {shown}: 19 stalls")
    no_command_lines(out)
    doc = minidom.parse(junit.decode())  # well-formed
    suite = doc.getElementsByTagName("testsuite")[0]
    assert suite.getAttribute("name") == shown


def test_check_github(named):
    raw, shown, tmp = named
    code, out, err = nagleprobe("check", "--github", raw, cwd=tmp)
    assert code == ExitStatus.STALLS_FOUND
    text = out.decode("utf-8")
    commands = [l for l in text.split("\n") if l.startswith("::")]
    assert len(commands) == 1 and commands[0].startswith("::error file=")
    no_command_lines(out, allowed=1)
    assert "\n::add-mask" not in text


def test_check_json(named):
    raw, shown, tmp = named
    code, out, _ = nagleprobe("check", "--format", "json", raw, cwd=tmp)
    assert code == ExitStatus.STALLS_FOUND
    doc = json.loads(out.decode("utf-8"))
    path = doc["captures"][0]["capture"]["path"]
    assert path == utf8_safe(os.fsdecode(raw))
    path.encode("utf-8")  # no lone surrogates


def test_analyze_text_json_html(named):
    raw, shown, tmp = named
    code, out, err = nagleprobe("analyze", raw, cwd=tmp)
    assert code == ExitStatus.OK, err
    assert out.decode("utf-8").startswith(f"{shown}: pcap, EN10MB, 107 packets")
    no_command_lines(out)
    code, out, _ = nagleprobe("analyze", "--format", "json", raw, cwd=tmp)
    assert code == ExitStatus.OK
    assert json.loads(out.decode("utf-8"))["summary"]["stalls"] == 19
    pytest.importorskip("matplotlib")
    html = os.path.join(os.fsencode(tmp), b"r.html")
    code, out, err = nagleprobe("analyze", "--html", html, raw, cwd=tmp)
    assert code == ExitStatus.OK, err
    page = Path(html.decode()).read_text(encoding="utf-8")
    assert f"<title>nagleprobe: {shown}</title>" in page
    assert "\x1b" not in page and "\x01" not in page


def test_errors_about_such_names_are_one_line(named):
    raw, shown, tmp = named
    missing = raw + b".missing"
    code, out, err = nagleprobe("analyze", missing, cwd=tmp)
    assert code == ExitStatus.BAD_CAPTURE and out == b""
    assert err.decode("utf-8") == f"nagleprobe: error: {shown}.missing: no such file\n"
    code, out, err = nagleprobe("check", "--junit", "j.xml", "--github", missing, cwd=tmp)
    assert code == ExitStatus.BAD_CAPTURE
    no_command_lines(out, allowed=1)
    minidom.parse(str(tmp / "j.xml"))


def test_printable():
    assert printable("samples/echo_split_lo.pcap") == "samples/echo_split_lo.pcap"
    assert printable("é ü 日本.pcap") == "é ü 日本.pcap"
    assert printable("a\r\nb\tc\x00") == "a\\x0d\\x0ab\\x09c\\x00"
    assert printable("x\u2028y\u202ez\x85") == "x\\u2028y\\u202ez\\x85"
    assert printable(os.fsdecode(b"\xff")) == "\\xff"
    assert str(CaptureError("a\nb", "bad\nproblem", "here")) == "a\\x0ab: bad\\x0aproblem (here)"
