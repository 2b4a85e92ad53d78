"""File names cannot crash or hijack any output (issue 18, points 3 and 4; issue 31): a
non-UTF-8 name, a name with newlines that spell GitHub workflow commands, one with control
characters, one with Unicode noncharacters (U+FFFE and U+FFFF are valid UTF-8 but illegal in
XML 1.0) and one with a bidirectional override are copies of a real sample; every output
(text, JUnit, GitHub, HTML, JSON, Wireshark filters, one-line errors) shows them escaped,
stays well-formed (the JUnit file valid against the Jenkins schema), and the exit statuses
are the ones of the plain name."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from xml.dom import minidom
from xml.etree import ElementTree as ET

import pytest
import xmlschema

from nagleprobe.check import Budget, CheckRun, check_capture
from nagleprobe.check_output import render_junit
from nagleprobe.errors import CaptureError, ExitStatus, printable, printable_lines, utf8_safe

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "echo_split_lo.pcap"
NAMES = {
    "non-utf8": (b"bad\xff\xfe.pcap", "bad\\xff\\xfe.pcap"),
    "workflow-commands": (b"x\n::error file=a::pwned\n::add-mask::secret.pcap",
                          "x\\x0a::error file=a::pwned\\x0a::add-mask::secret.pcap"),
    "control": (b"ctl\x01\x1b[31m\x7f.pcap", "ctl\\x01\\x1b[31m\\x7f.pcap"),
    # U+FFFE, U+FFFF, U+FDD0, U+10FFFF: valid UTF-8, no characters to XML 1.0 or HTML
    "noncharacters": ("nc\ufffe\uffff\ufdd0\U0010ffff.pcap".encode(),
                      "nc\\ufffe\\uffff\\ufdd0\\U0010ffff.pcap"),
    "bidi": ("bidi\u202egpj.pcap".encode(), "bidi\\u202egpj.pcap"),
}
# what XML 1.0 forbids (C0 but TAB/LF/CR, surrogates, U+FFFE, U+FFFF), and what it and HTML
# discourage and `printable` escapes too (C1 controls, the other noncharacters)
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
DISCOURAGED = re.compile("[\x7f-\x9f\ufdd0-\ufdef\U0001fffe\U0010ffff\u202e]")
JUNIT_XSD = ROOT / "tests" / "schemas" / "junit-10.xsd"


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


@pytest.fixture(scope="module")
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(JUNIT_XSD))


def test_check_text_and_junit(named, junit_schema):
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
    root = ET.parse(junit.decode()).getroot()  # expat, as most CI servers
    assert root.find("testsuite").get("name") == shown
    junit_schema.validate(junit.decode())
    text = Path(junit.decode()).read_text(encoding="utf-8")
    assert not XML_FORBIDDEN.search(text) and not DISCOURAGED.search(text)


def test_check_junit_of_an_unreadable_capture_so_named(named, junit_schema):
    raw, shown, tmp = named
    cut = os.path.join(os.fsencode(tmp), raw + b".cut")
    Path(os.fsdecode(cut)).write_bytes(SAMPLE.read_bytes()[:20])  # within the file header
    code, _, _ = nagleprobe("check", "--junit", "j.xml", raw + b".cut", cwd=tmp)
    assert code == ExitStatus.BAD_CAPTURE
    junit_schema.validate(str(tmp / "j.xml"))
    error = ET.parse(tmp / "j.xml").getroot().find("testsuite/testcase/error")
    assert error.get("message").startswith(f"{shown}.cut: ")
    assert error.text == error.get("message")


def test_check_text_of_an_empty_capture_so_named(named, junit_schema):
    raw, shown, tmp = named
    empty = raw + b".empty"
    shutil.copyfile(ROOT / "tests" / "broken" / "pcap_header_only.pcap",
                    os.path.join(os.fsencode(tmp), empty))
    code, out, _ = nagleprobe("check", "--junit", "j.xml", empty, cwd=tmp)
    assert code == ExitStatus.EMPTY
    assert out.decode("utf-8").startswith(f"EMPTY {shown}.empty: nothing checked: ")
    no_command_lines(out)
    junit_schema.validate(str(tmp / "j.xml"))


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
    header = out.decode("utf-8").replace("\n  ", " ")  # its wrapped continuation lines
    assert header.startswith(f"{shown}: pcap, EN10MB, 107 packets")
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
    assert not XML_FORBIDDEN.search(page) and not DISCOURAGED.search(page)


def test_analyze_wireshark_filters(named):
    raw, shown, tmp = named
    code, out, _ = nagleprobe("analyze", "--format", "wireshark", raw, cwd=tmp)
    assert code == ExitStatus.OK
    first, *rest = out.decode("utf-8").split("\n")
    assert first.startswith(f"{shown}: Nagle/delayed-ACK stalls found: 19 stalls")
    assert any(line.startswith("  stalls: frame.number in {") for line in rest)
    no_command_lines(out)


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
    assert printable("\ufffe\uffff\ufdd0\ufdef\U0001fffe\U0010ffff\ud800") == \
        "\\ufffe\\uffff\\ufdd0\\ufdef\\U0001fffe\\U0010ffff\\ud800"
    assert printable("\ufffd\ufdcf\ufdf0\U0001fffd\ue000\U0001f600") == \
        "\ufffd\ufdcf\ufdf0\U0001fffd\ue000\U0001f600"  # characters (replacement, emoji...)
    assert printable_lines("a\nb\ufffe\r\n\x00") == "a\nb\\ufffe\\x0d\n\\x00"
    assert str(CaptureError("a\nb", "bad\nproblem", "here")) == "a\\x0ab: bad\\x0aproblem (here)"


def test_junit_escapes_whatever_reaches_it_not_only_file_names(junit_schema):
    """Each character XML 1.0 forbids, in a capture's warning (the text capture content and
    other files' names reach the JUnit file through), comes out escaped and valid."""
    v = check_capture(str(SAMPLE), Budget())
    hostile = "".join(map(chr, [*range(0x20), 0x7F, 0x85, 0xFFFE, 0xFFFF, 0xFDD0, 0xDC80]))
    v.warnings = [f"damaged {hostile} here"]
    xml = render_junit(CheckRun(Budget(), [v]))
    assert not XML_FORBIDDEN.search(xml) and not DISCOURAGED.search(xml)
    junit_schema.validate(xml)
    err = ET.fromstring(xml).find("testsuite/testcase[@name='capture']/system-err")
    assert err.text == f"warning: damaged {printable_lines(hostile)} here"
    assert "\\x00\\x01" in err.text and "\\x1f\\x7f\\x85\\ufffe\\uffff\\ufdd0\\x80 here" in err.text
