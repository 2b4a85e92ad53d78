"""docs/hooks.py and mkdocs.yml: the site's generated pages say what their sources say, every
page is in the navigation, and the README's links work both in the repository and on the site."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
hooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hooks)

GENERATED = {"index.md", "schema.md", "performance.md", "incident-review.ipynb"}


def nav_pages() -> set[str]:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    return set(re.findall(r":\s+(\S+\.(?:md|ipynb))\s*$", nav, re.M))


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists():
    written = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert nav_pages() == written | GENERATED
    assert not written & GENERATED  # a generated page is never also written by hand


def test_the_readme_links_resolve_in_the_repository_and_on_the_site():
    readme = (ROOT / "README.md").read_text()
    links = [t for t in re.findall(r"\]\(([^)#\s]+)[^)]*\)", readme) if "://" not in t]
    assert links
    for target in links:
        assert (ROOT / target).exists(), target  # as a code host shows the README
    home = hooks.home_page(readme)
    site = [t for t in re.findall(r"\]\(([^)#\s]+)[^)]*\)", home) if "://" not in t]
    assert len(site) == len(links)
    assert set(site) <= nav_pages(), set(site) - nav_pages()


def test_the_readme_keeps_its_two_set_up_commands():
    readme = (ROOT / "README.md").read_text()
    quick_start = "python3 -m pip install . && nagleprobe analyze samples/echo_split_lo.pcap"
    assert f"    {quick_start}\n" in readme
    assert "    python3 -m pip install -e '.[test]' && python3 -m pytest -q\n" in readme
    assert len(readme.splitlines()) <= 220


def schema_leaves(node, out=None) -> set[str]:
    out = set() if out is None else out
    if isinstance(node, dict):
        out.update(node.get("properties", {}))
        for v in node.values():
            schema_leaves(v, out)
    elif isinstance(node, list):
        for v in node:
            schema_leaves(v, out)
    return out


@pytest.mark.parametrize("path", hooks.SCHEMAS, ids=lambda p: p.name)
def test_the_schema_page_has_a_row_for_every_field_of_every_schema(path):
    page = hooks.schema_page(hooks.SCHEMAS)
    schema = json.loads(path.read_text())
    section = page.split(f"## {path.name}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.*?) \| (yes|) \|", section, re.M)
    leaves = {p.rsplit(".", 1)[-1].removesuffix("[]") for p, _, _ in rows}
    assert schema_leaves(schema) <= leaves
    assert schema["title"] in section
    for name in schema.get("required", []):  # the top level's required fields say so
        assert (name, "yes") in {(p, r) for p, _, r in rows}, name


def test_the_schema_page_reads_types_enums_and_nesting():
    page = hooks.schema_page(hooks.SCHEMAS)
    assert '| `flows[].endpoints.client.nagle` | `"on"`, `"off"` or `"unknown"` |' in page
    assert "| `summary.stalls` | integer ≥ 0 | yes |" in page
    assert re.search(r"^\| `flows\[\]\.relay` \| null or object \|", page, re.M)
    assert re.search(r"^\| `flows\[\]\.relay\.upstream_flow` \|", page, re.M)


def test_the_performance_page_is_the_results_file_newest_first():
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    page = hooks.performance_page(results)
    heads = re.findall(r"^## .*$", results, re.M)
    assert len(heads) >= 10  # the README's history moved in as the first entries
    assert re.findall(r"^## .*$", page, re.M) == heads[::-1]
    assert page.startswith("# Performance\n")
    for entry in results.split("\n## ")[1:]:
        assert entry.strip() in page


def test_the_cli_page_is_generated_from_every_command_option_and_epilog():
    import click

    from nagleprobe.cli import main

    page = hooks.expand_cli_blocks((ROOT / "docs" / "cli.md").read_text())
    assert "::: mkdocs-click" not in page and "Sentinel" not in page
    for name, command in [("", main), *main.commands.items()]:
        title = f"nagleprobe {name}".strip()
        section = page.split(f"# {title} {{", 1)[1].split("\n## nagleprobe ", 1)[0]
        assert command.epilog and command.epilog in section, title
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:  # hidden: old spellings
                assert f"`{param.opts[0]}`" in section, (title, param.opts)
    # click's keep-as-written paragraphs (examples) stay lines of text, not one paragraph
    assert "```text\nExamples:\n  nagleprobe analyze capture.pcap" in page
