"""docs/DETECTION.md states the rule's thresholds: each is the code's, and the compiled
chain holds no copy of any (it finds the coupled candidates; detect.py applies every
threshold)."""

import re
from pathlib import Path

import pytest

from nagleprobe import advice, copies, detect, flows, relay, report, roundtrips, syns, vantage

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "DETECTION.md").read_text()
HOMES = (detect, flows, copies, roundtrips, relay, advice, report, syns, vantage)


def stated() -> dict[str, str]:
    table = PAGE.split("## Thresholds", 1)[1]
    return dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", table, flags=re.M))


def constant(name: str):
    homes = [m for m in HOMES if hasattr(m, name)]
    assert homes, f"{name} is stated in docs/DETECTION.md but defined nowhere"
    return getattr(homes[0], name)


@pytest.mark.parametrize("name", sorted(stated()))
def test_every_threshold_on_the_page_is_the_codes(name):
    value = constant(name)
    if isinstance(value, tuple) and isinstance(value[0], tuple):  # bands: (name, nominal, lo, hi)
        value = tuple(f"{lo:g}-{hi:g}" for *_, lo, hi in value)
        assert ", ".join(value) == stated()[name], name
        return
    want = [float(x) for x in stated()[name].split(",")]
    got = [float(x) for x in (value if isinstance(value, tuple) else (value,))]
    assert got == want, name


def test_every_constant_the_page_names_in_the_text_is_in_its_table():
    named = {n for n in re.findall(r"`([A-Z][A-Z_]+[A-Z])`", PAGE)
             if not n.startswith(("TCP_", "MSG_"))}  # socket options, not thresholds
    assert named <= set(stated()), named - set(stated())


def test_the_compiled_chain_copies_no_threshold():
    source = (ROOT / "nagleprobe" / "_detect.c").read_text()
    defines = re.findall(r"#define\s+(\w+)", source)
    assert set(defines) == {"PY_SSIZE_T_CLEAN", "NIN", "NOUT"}
    # the constants it shares with Python come from the generated header: none a threshold
    header = re.findall(r"#define\s+(\w+)", (ROOT / "nagleprobe" / "_columns.h").read_text())
    assert header and not set(header) & set(stated())
    assert not re.search(r"\d+e\d|\d{4,}", source.split("PyMODINIT_FUNC")[0])


def test_every_why_not_reason_is_explained_on_the_page():
    for reason in detect.REASONS:
        assert f"| `{reason}` |" in PAGE, reason


def test_the_readme_links_the_page():
    assert "docs/DETECTION.md" in (ROOT / "README.md").read_text()


def page_section(page: str, title: str) -> str:
    text = (ROOT / "docs" / page).read_text() + "\n## "
    start = text.index(f"\n## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_cli_page_exit_table_lists_exactly_the_exit_statuses():
    from nagleprobe.errors import ExitStatus

    rows = re.findall(r"^\| (\d+) \|", page_section("cli.md", "Exit status"), re.M)
    assert sorted(map(int, rows)) == sorted(s.value for s in ExitStatus)


def test_every_status_a_help_text_names_is_one_of_the_enum():
    from click.testing import CliRunner

    from nagleprobe.cli import main
    from nagleprobe.errors import ExitStatus

    for command in ([], *([c] for c in sorted(main.commands))):
        out = CliRunner().invoke(main, [*command, "--help"], terminal_width=200).output
        said = out[out.index("Exit status"):] if "Exit status" in out else ""
        numbers = {int(n) for n in re.findall(r"(?<![\w.+-])(\d{1,3})(?= [a-z(])", said)}
        assert numbers <= {s.value for s in ExitStatus}, (command, numbers)
        assert said or command in (["annotate"],), command


def nagleprobe_command(env: dict) -> str:
    """What the installed `nagleprobe` command prints (its entry point, `cli.run`) under env."""
    import os
    import subprocess
    import sys

    code = "import sys; sys.argv[0] = 'nagleprobe'; from nagleprobe.cli import run; run()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=60,
                          check=True)
    return proc.stdout


def test_the_documented_shell_completion_prints_a_script_that_completes_commands():
    documented = 'eval "$(_NAGLEPROBE_COMPLETE=bash_source nagleprobe)"'
    assert documented in (ROOT / "README.md").read_text()
    assert documented in page_section("cli.md", "Shell completion")
    script = nagleprobe_command({"_NAGLEPROBE_COMPLETE": "bash_source"})
    assert "_nagleprobe_completion() {" in script
    assert "complete -o nosort -F _nagleprobe_completion nagleprobe" in script
    # what the script asks for when the user types `nagleprobe an<TAB>`, then `--fo<TAB>`
    asked = {"_NAGLEPROBE_COMPLETE": "bash_complete", "COMP_WORDS": "nagleprobe an",
             "COMP_CWORD": "1"}
    assert nagleprobe_command(asked).split() == ["plain,analyze", "plain,annotate"]
    asked.update(COMP_WORDS="nagleprobe analyze --fo", COMP_CWORD="2")
    assert nagleprobe_command(asked).split() == ["plain,--format"]
