"""html_report: one self-contained file (inline PNGs, no scripts, nothing fetched) with the
verdict, the fix, per-flow tables, every stall's frames, the pictures and how the capture was
read; and the same file rendered by a real headless Chromium."""

import base64
import io
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
from PIL import Image  # noqa: E402  (a matplotlib dependency)

import nagleprobe  # noqa: E402
from nagleprobe.html_report import render_html, write_html  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking"]


class Page(HTMLParser):
    """What a browser would load from the page, its links within the page (#id) and ids,
    and the text of its table cells."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags, self.sources, self.cells, self._cell = [], [], [], None
        self.fragments, self.ids = [], set()
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("src", "href"):
            if key in a and a[key].startswith("#"):
                self.fragments.append(a[key][1:])  # a place in the page: nothing loaded
            elif key in a:
                self.sources.append(a[key])
        if tag == "td":
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag == "td":
            self.cells.append(self._cell)
            self._cell = None


@pytest.fixture(scope="module")
def proxy_html(proxy_any):
    return render_html(proxy_any)


def test_the_file_is_self_contained(proxy_html):
    page = Page(proxy_html)
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert not re.search(r"https?://|url\(|@import", proxy_html)
    assert page.sources and all(s.startswith("data:image/png;base64,") for s in page.sources)
    assert page.fragments and set(page.fragments) <= page.ids  # every link leads somewhere
    for src in page.sources:
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert img.format == "PNG" and img.width > 400


def test_it_has_the_verdict_the_fix_and_the_pictures(proxy_any, proxy_html):
    assert proxy_any.verdict() in proxy_html
    assert proxy_any.flows.loc[1, "fix_text"] in proxy_html
    alts = re.findall(r'<img alt="([^"]+)"', proxy_html)
    assert alts == ["flows on a timeline", "distribution of stall lengths",
                    "request latency CDF with and without the stalls",
                    "time-sequence graph of flow 1", "first 6 stalls of flow 1"]


def test_every_stall_is_listed_with_its_frame_numbers(proxy_any, proxy_html):
    evidence = proxy_html.split("<h3>Evidence", 1)[1].split("</table>", 1)[0]
    cells = Page(evidence).cells
    ncols = 13
    rows = [cells[i:i + ncols] for i in range(0, len(cells), ncols)]
    assert len(rows) == len(proxy_any.stalls) == 19
    for row, s in zip(rows, proxy_any.stalls.to_dict("records")):
        assert [int(row[1]), int(row[4]), int(row[6])] == [s["small_frame"], s["ack_frame"],
                                                             s["released_frame"]]
        assert float(row[9]) == pytest.approx(s["delay_ms"], abs=0.05)


def test_it_says_how_the_capture_was_read(proxy_html):
    section = proxy_html.split('id="capture"', 1)[1]
    for text in ("pcap", "LINUX_SLL", "173 (173 TCP)", "skipped frames", "none",
                 "capture point to client and back"):
        assert text in section


def test_a_clean_capture_says_no_stalls_and_has_no_evidence():
    r = nagleprobe.analyze(str(SAMPLES / "neg_think_time_lo.pcap"))
    text = render_html(r)
    assert 'class="verdict good"' in text and "No Nagle/delayed-ACK stalls found" in text
    assert "<h3>Evidence" not in text
    assert re.findall(r'<img alt="([^"]+)"', text) == ["flows on a timeline"]


def test_without_pictures_it_needs_no_matplotlib(proxy_any):
    text = proxy_any.to_html(plots=False)
    assert "<img" not in text and proxy_any.verdict() in text


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        reason = "Chromium is not installed (apt-get install chromium); .ci/run installs it"
        print(f"SKIPPED: {reason}")
        pytest.skip(reason)
    return exe


def test_chromium_renders_the_report_with_every_picture(chromium, proxy_any, tmp_path):
    """Headless Chromium loads the file with the network unreachable; a probe added to a copy
    reports each image's decoded size, and the screenshot shows the page."""
    page = tmp_path / "report.html"
    write_html(proxy_any, page)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>window.addEventListener('load', () => { document.title = "
        "'imgs:' + [...document.images].map(i => i.naturalWidth + 'x' + i.naturalHeight)"
        ".join(','); });</script></body>"))
    offline = ["--host-resolver-rules=MAP * ~NOTFOUND"]
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, *offline, "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=180)
    title = re.search(r"<title>imgs:([^<]*)</title>", dom.stdout)
    assert title, dom.stderr[-2000:]
    sizes = title.group(1).split(",")
    assert len(sizes) == 5 and all(int(s.split("x")[0]) > 400 for s in sizes)

    shot = tmp_path / "report.png"
    subprocess.run([chromium, *CHROMIUM_FLAGS, *offline, "--hide-scrollbars",
                    "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=180)
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2400)
    colours = img.getcolors(maxcolors=1 << 20)
    assert len(colours) > 200  # text, tables and plots, not a blank page
    verdict_pink = sum(n for n, c in colours if c == (0xfd, 0xe2, 0xe1))
    assert verdict_pink > 5000  # the verdict box and the highlighted row are drawn


def test_a_report_without_flows_says_so(proxy_any):
    text = render_html(proxy_any.select(port=1))
    assert "No TCP flows in this report." in text and "<img" not in text


def test_footer_says_when_by_which_command_and_version_it_was_made(proxy_any, tmp_path):
    import sys
    from datetime import datetime, timezone

    made = datetime(2026, 11, 23, 18, 5, 9, tzinfo=timezone.utc)
    text = render_html(proxy_any, plots=False, command="nagleprobe analyze x.pcap --html r.html",
                       made=made)
    footer = text.split("<footer>", 1)[1].split("</footer>", 1)[0]
    assert footer.startswith("Made 2026-11-23 18:05:09 UTC by <code>nagleprobe analyze x.pcap "
                             f"--html r.html</code> with nagleprobe {nagleprobe.__version__}.")
    out = tmp_path / "r.html"
    sample = str(SAMPLES / "echo_split_lo.pcap")
    before = datetime.now(timezone.utc).replace(microsecond=0)
    subprocess.run([sys.executable, "-m", "nagleprobe", "analyze", "-q", sample, "--html",
                    str(out)], check=True, capture_output=True)
    footer = out.read_text().split("<footer>", 1)[1]
    stamp = re.match(r"Made (\S+ \S+) UTC by <code>nagleprobe analyze -q (\S+) --html (\S+)"
                     r"</code> with nagleprobe ", footer)
    assert stamp and (stamp.group(2), stamp.group(3)) == (sample, str(out))
    when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    assert before <= when <= datetime.now(timezone.utc)


# ------------------------------------------------------------------ many flows
FIELD = Path("/work/shared/field/pos__nfstream_coap_mqtt.pcap")  # 4 flows, 409 stalls


@pytest.fixture(scope="module")
def field():
    if not FIELD.exists():
        pytest.skip(f"{FIELD} is not on this machine (the labelled field captures)")
    return nagleprobe.analyze(FIELD)


@pytest.fixture(scope="module")
def field_html(field):
    return render_html(field)


def test_a_table_of_contents_links_every_part_and_every_flow_section(field, field_html):
    toc = field_html.split('<nav class="toc">', 1)[1].split("</nav>", 1)[0]
    links = re.findall(r'href="#([^"]+)"', toc)
    worst = field.flows.sort_values(["stall_ms", "id"], ascending=[False, True])["id"]
    assert links == ["fixes", "pictures", "flows", *[f"flow-{i}" for i in worst], "capture"]
    assert set(links) <= Page(field_html).ids


def test_each_flow_is_a_collapsible_section_the_worst_one_open(field, field_html):
    heads = re.findall(r'<details class="flow"( open)?><summary><h2>Flow (\d+):', field_html)
    worst = field.flows.sort_values(["stall_ms", "id"], ascending=[False, True])["id"]
    assert [int(i) for _, i in heads] == worst.tolist()
    assert [bool(o) for o, _ in heads] == [True, False, False, False]


def test_one_fix_for_the_flows_of_one_client_naming_them_all(field, field_html):
    fixes = field_html.split('<section id="fixes">', 1)[1].split("</section>", 1)[0]
    boxes = fixes.split('<div class="fix">')[1:]
    assert len(boxes) == 1  # one client host, four connections: said once
    assert "on the client 192.168.56.1: 4 flows, 409 stalls" in boxes[0]
    assert re.findall(r'href="#flow-(\d+)"', boxes[0]) == ["1", "0", "2", "3"]
    (group,) = field.fix_groups()  # the fix said once, for all four flows
    assert group["text"] in boxes[0] and "The client 192.168.56.1 should" in boxes[0]


def test_long_evidence_shows_its_first_rows_and_the_rest_one_click_away(field, field_html):
    from nagleprobe.html_report import EVIDENCE_COLUMNS, HELD_COLUMNS, HTML_EVIDENCE_ROWS

    section = field_html.split('id="flow-0"', 1)[1].split("</details>\n", 1)[0]
    evidence = section.split("<h3>Evidence", 1)[1]
    shown, rest = evidence.split('<details class="more">', 1)
    n = int((field.stalls["flow"] == 0).sum())
    assert f"<summary>Show the other {n - HTML_EVIDENCE_ROWS} stalls</summary>" in rest
    # its stalls' held messages were read (MQTT): their three columns follow the 13
    assert field.stalls[field.stalls["flow"] == 0]["held_message"].notna().any()
    w = len(EVIDENCE_COLUMNS) + len(HELD_COLUMNS)
    frames = [int(c) for c in Page(shown).cells[1::w]] + [int(c) for c in Page(rest).cells[1::w]]
    assert len(Page(shown).cells) == w * HTML_EVIDENCE_ROWS
    assert frames == field.stalls[field.stalls["flow"] == 0]["small_frame"].tolist()


def test_the_pictures_are_palette_pngs_and_the_report_a_third_of_its_old_size(field_html):
    """The 4-flow report was 1,521,731 bytes with full-colour pictures (issue 32)."""
    page = Page(field_html)
    assert len(page.sources) == 12  # (the latency CDF among them)
    for src in page.sources:
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert img.mode == "P" and img.width > 400
    assert len(field_html.encode()) < 600_000


def test_following_a_link_to_a_closed_flow_section_opens_it(chromium, field, tmp_path):
    page = tmp_path / "report.html"
    write_html(field, page, plots=False)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>window.addEventListener('load', () => setTimeout(() => { "
        "document.title = 'open:' + [...document.querySelectorAll('details.flow')]"
        ".map(d => d.open).join(','); }, 300));</script></body>"))
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, "--virtual-time-budget=2000",
                          "--dump-dom", probe.as_uri() + "#flow-2"],
                         capture_output=True, text=True, timeout=180)
    title = re.search(r"<title>open:([^<]*)</title>", dom.stdout)
    assert title, dom.stderr[-2000:]
    assert title.group(1) == "true,false,true,false"  # flows 1 (worst, open), 0, 2, 3
