"""held: the held message of each flow's first stalls in every output (JSON, text, HTML, the
stalls table), read back from the capture within a bound; inputs that cannot be read again
say so, samples of unknown protocols are left as they were.

The names themselves are checked against the applications' logged writes in
test_messages.py; here each output is held to `report.messages`, the independent reading
of every stall through `report.segments`."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from test_messages import FIELD, cut_copy

import nagleprobe
from nagleprobe import held, payloads
from nagleprobe.cli import main
from nagleprobe.json_report import json_schema
from nagleprobe.messages import NOT_CAPTURED

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MESSAGES = SAMPLES / "messages"
NAMED = {"dns_lo": "dns", "http1_lo": "http/1.1", "tls_lo": "tls", "postgres_lo": "postgresql",
         "http2_lo": "http/2"}


def run_json(*args: str, input: bytes | None = None) -> dict:
    r = CliRunner().invoke(main, ["analyze", "--no-progress", "--format", "json", *args],
                           input=input)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, json_schema())
    return doc


def run_text(*args: str) -> str:
    r = CliRunner().invoke(main, ["analyze", "--no-progress", *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def first_stalls(report: nagleprobe.Report) -> list[int]:
    """Positions in the stalls table of the first SAMPLE_STALLS stalls of each flow."""
    flows = report.stalls["flow"].tolist()
    return [i for i, f in enumerate(flows) if flows[:i].count(f) < held.SAMPLE_STALLS]


@pytest.mark.parametrize("name", sorted(NAMED))
def test_json_carries_the_held_message_of_each_flow_and_of_its_first_stalls(name):
    path = str(MESSAGES / f"{name}.pcap")
    report = nagleprobe.analyze(path)
    full = report.messages  # every stall, read through the reassembled segments
    doc = run_json(path)
    read = first_stalls(report)
    for i, stall in enumerate(doc["stalls"]):
        if i in read and full.iloc[i]["protocol"] is not None:
            assert stall["message"] == {k: full.iloc[i][k] for k in held.STALL_KEYS}
        else:
            assert "message" not in stall
    stalled = [f for f in doc["flows"] if f["stalls"]]
    assert stalled
    for f in stalled:
        mine = full[(report.stalls["flow"] == f["id"]).to_numpy()].dropna(subset=["protocol"])
        assert f["message"] == {k: mine.iloc[0][k] for k in held.FLOW_KEYS}
        assert f["message"]["protocol"] == NAMED[name]
    assert all("message" not in f for f in doc["flows"] if not f["stalls"])


def test_the_stalls_table_names_the_first_stalls_of_each_flow():
    report = nagleprobe.analyze(str(MESSAGES / "dns_lo.pcap"))
    table, full = report.stalls, report.messages
    read = first_stalls(report)
    assert len(table) > len(read)  # some stalls are beyond the sample
    for i in range(len(table)):
        got = table.iloc[i][list(held.STALL_KEYS)]
        if i in read:
            assert got.tolist() == [full.iloc[i][k] for k in held.STALL_KEYS]
        else:
            assert got.isna().all()


def test_text_report_has_a_held_line_and_the_fix_in_the_protocols_terms():
    text = run_text(str(MESSAGES / "dns_lo.pcap"))
    assert "  held: the 36-byte DNS query behind its 2-byte length prefix (dns)\n" in text
    fix = " ".join(re.search(r"\n  In DNS terms.*?\n\n", text, re.DOTALL).group(0).split())
    assert "the 2-byte DNS length prefix and the 36-byte query were written in two" in fix
    assert "says coalesce too" in fix
    assert max(map(len, text.splitlines())) <= 80


def test_text_report_names_http2_frames_in_the_fix():
    text = run_text(str(MESSAGES / "http2_lo.pcap"))
    assert re.search(r"\n  held: 2 DATA frames of stream \d+ \(39 B, 9 B\)", text)
    fix = " ".join(re.search(r"\n  In HTTP/2 terms.*?\n\n", text, re.DOTALL).group(0).split())
    assert re.search(r"the 15-byte HEADERS frame and the 39-byte DATA frame of stream \d+ "
                     r"were flushed separately: flush once per request", fix)
    assert "says coalesce too" in fix
    assert max(map(len, text.splitlines())) <= 80


def test_text_report_says_when_the_message_calls_for_the_other_fix():
    """A held message the advice disagrees with is said to: the FIX line names both."""
    m = {"protocol": "mqtt", "fix": "independent MQTT packets waited", "advice": "nodelay"}
    assert "says set TCP_NODELAY instead" in held.fix_line(m, "client", "coalesce-writes")
    assert "says set TCP_NODELAY too" in held.fix_line(m, "client", "set-tcp-nodelay")
    m["advice"] = "coalesce"
    assert "says coalesce instead" in held.fix_line(m, "client", "set-tcp-nodelay")


def test_text_held_line_fits_the_width_leaving_out_what_it_was_behind():
    m = {"protocol": "tls", "held_message": "2 TLS application-data records (214 B, 46 B)",
         "before_message": "the 255-byte TLS application-data record"}
    assert held.held_line(m, 200).endswith("behind the 255-byte TLS application-data "
                                           "record (tls)")
    assert held.held_line(m, 78) == ("held: 2 TLS application-data records (214 B, 46 B) "
                                     "(tls)")


def test_html_report_shows_the_held_message_and_its_column():
    page = nagleprobe.analyze(str(MESSAGES / "http1_lo.pcap")).to_html(plots=False)
    assert "held: the 24-byte body of the 200 response behind the response headers" in page
    assert "<th>held message</th>" in page
    fixes = page.split('<section id="fixes">', 1)[1].split("</section>", 1)[0]
    assert "In HTTP/1 terms (the server's writes): the response headers (192 B)" in fixes
    assert page.count("the 24-byte body of the 200 response") > held.SAMPLE_STALLS


def test_snaplen_cut_capture_says_payload_not_captured(tmp_path):
    cut = tmp_path / "cut.pcap"
    cut_copy(MESSAGES / "http1_lo.pcap", cut, 0)
    doc = run_json(str(cut))
    f = next(f for f in doc["flows"] if f["stalls"])
    assert f["message"] == {**dict.fromkeys(held.FLOW_KEYS), "held_message": NOT_CAPTURED}
    assert "  held: payload not captured\n" in run_text(str(cut))


def test_standard_input_says_payload_not_read():
    data = (MESSAGES / "dns_lo.pcap").read_bytes()
    doc = run_json("-", input=data)
    f = next(f for f in doc["flows"] if f["stalls"])
    assert f["message"]["held_message"] == held.NOT_SEEKABLE == \
        "payload not read (input not seekable)"
    assert f["message"]["protocol"] is None
    assert all("message" not in s for s in doc["stalls"])


def test_gzip_and_pcapng_without_an_index_are_read_from_the_start(tmp_path):
    gz = tmp_path / "dns.pcap.gz"
    gz.write_bytes(gzip.compress((MESSAGES / "dns_lo.pcap").read_bytes()))
    report = nagleprobe.analyze(str(gz))
    assert report.frame_index is None
    assert report.held().flows[0]["held_message"] == "the 36-byte DNS query"


def test_a_pass_from_the_start_gives_up_beyond_its_limit(tmp_path, monkeypatch):
    gz = tmp_path / "dns.pcap.gz"
    gz.write_bytes(gzip.compress((MESSAGES / "dns_lo.pcap").read_bytes()))
    monkeypatch.setattr(held, "FORWARD_BYTES", 100)
    report = nagleprobe.analyze(str(gz))
    assert report.held().of(0, 1)["held_message"] == held.TOO_LARGE
    assert "held: payload not read (no record index, and beyond" in report.to_text()


def test_a_plain_pcap_is_read_by_seeking_not_walked(monkeypatch):
    report = nagleprobe.analyze(str(MESSAGES / "postgres_lo.pcap"))
    assert report.frame_index is not None

    def no_walk(*a, **k):
        raise AssertionError("the file was walked from its start")

    monkeypatch.setattr(payloads, "CaptureReader", no_walk)
    assert {m["protocol"] for m in report.held().flows.values()} == {"postgresql"}


def test_flows_beyond_the_bound_say_not_read(monkeypatch):
    monkeypatch.setattr(held, "MAX_FLOWS", 0)
    doc = run_json(str(MESSAGES / "dns_lo.pcap"))
    f = next(f for f in doc["flows"] if f["stalls"])
    assert f["message"]["held_message"] == held.NOT_READ
    assert all("message" not in s for s in doc["stalls"])


@pytest.mark.parametrize("name", ["echo_split_lo.pcap", "long_echo_split_rtt200_client.pcap"])
def test_outputs_of_unknown_protocols_say_nothing_of_messages(name, tmp_path):
    path = str(SAMPLES / name)
    doc = run_json(path)
    assert any(f["stalls"] for f in doc["flows"])
    assert '"message"' not in json.dumps(doc)
    text = run_text(path)
    assert "\n  held:" not in text and " terms" not in text
    report = nagleprobe.analyze(path)
    assert report.stalls["held_message"].isna().all()
    assert "held message" not in report.to_html(plots=False)


def field_doc(name: str) -> dict:
    path = FIELD / name
    if not path.exists():
        pytest.skip(f"field capture {path} absent")
    return run_json(str(path))


def test_field_smtp_bdat_in_json():
    doc = field_doc("pos__zeek_smtp_rfc3030-bdat-multipart-chunked.pcap")
    said = [f["message"] for f in doc["flows"] if f.get("message")]
    assert said and said[0]["protocol"] == "smtp" and said[0]["split"] == "command/data"


def test_field_mqtt_in_json_calls_for_nodelay():
    doc = field_doc("pos__nfstream_coap_mqtt.pcap")
    said = [f["message"] for f in doc["flows"] if f.get("message")]
    assert said and said[0]["protocol"] == "mqtt" and said[0]["advice"] == "nodelay"


def test_a_seekable_stream_is_read_again_from_where_it_stood_and_left_there():
    import io

    data = (MESSAGES / "dns_lo.pcap").read_bytes()
    stream = io.BytesIO(b"junk" + data)
    stream.seek(4)
    report = nagleprobe.analyze(stream)
    end = stream.tell()
    assert report.held().flows[0]["held_message"] == "the 36-byte DNS query"
    assert stream.tell() == end
    closed = io.BytesIO(data)
    report = nagleprobe.analyze(closed)
    closed.close()
    assert report.held().of(0, 1)["held_message"] == held.NOT_REREAD
