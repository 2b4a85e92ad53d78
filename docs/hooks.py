"""mkdocs hooks: the site's generated pages, made from the files they document at every build.

* `index.md` from README.md (its links into the repository pointed at the site's pages),
* `schema.md` from the JSON Schemas shipped in nagleprobe/schema/ (and the schemas themselves),
* `performance.md` from benchmarks/RESULTS.md, which the benchmark scripts append to,
* `incident-review.ipynb`: examples/incident-review.ipynb executed by a Jupyter kernel
  (mkdocs-jupyter renders it, outputs included),
* in cli.md, the `::: mkdocs-click` block: mkdocs-click's reference of the click commands,
  with their epilogs (exit statuses) and click's `\b` (keep as written) paragraphs as text blocks.

Nothing is written into the repository; the executed notebook lives in a temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = sorted((ROOT / "nagleprobe" / "schema").glob("*.json"))
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
NOTEBOOK = ROOT / "examples" / "incident-review.ipynb"

# README link target -> site page; every other README link is to docs/ or outside
README_LINKS = {"docs/": "", "examples/incident-review.ipynb": "incident-review.ipynb",
                "benchmarks/RESULTS.md": "performance.md", "nagleprobe/schema/": "schema.md"}


def home_page(readme: str) -> str:
    """The README as the site's home page: links into docs/ and to generated pages rewritten."""
    def link(m: re.Match) -> str:
        target = m.group(1)
        for prefix, page in README_LINKS.items():
            if target == prefix or (prefix.endswith("/") and target.startswith(prefix)):
                return "](" + (page or target[len(prefix):]) + ")"
        return m.group(0)
    return re.sub(r"\]\(([^)#\s]+)\)", link, readme)


# -- the JSON Schema page ------------------------------------------------------------------

def _type(node: dict) -> str:
    """A schema node's type in words: `integer >= 0`, `"on", "off" or "unknown"`, ..."""
    if "const" in node:
        return f'`{json.dumps(node["const"])}`'
    if "enum" in node:
        values = [f"`{json.dumps(v)}`" for v in node["enum"]]
        return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]
    if "oneOf" in node:
        return " or ".join(_type(alt) for alt in node["oneOf"])
    kinds = node.get("type", "any")
    words = " or ".join(kinds) if isinstance(kinds, list) else kinds
    if "minimum" in node:
        words += f" ≥ {node['minimum']:g}"
    if "maximum" in node:
        words += f" ≤ {node['maximum']:g}"
    return words


def _rows(node: dict, path: str, required: bool, defs: dict, out: list[tuple],
          row: bool = True) -> None:
    """One row per field under `node` (depth first), its path written `a.b[].c`, maps `.<key>`."""
    node = defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    if path and row:
        out.append((path, _type(node), required, node.get("description", "")))
    for alt in node.get("oneOf", []):  # e.g. null or an object: the object's fields
        _rows(alt, path, False, defs, out, row=False)
    need = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        _rows(child, f"{path}.{name}" if path else name, name in need, defs, out)
    if isinstance(node.get("additionalProperties"), dict):
        _rows(node["additionalProperties"], f"{path}.<key>", False, defs, out)
    if isinstance(node.get("items"), dict):
        _rows(node["items"], f"{path}[]", False, defs, out)


def _table(schema: dict, node: dict) -> str:
    rows: list[tuple] = []
    _rows(node, "", True, schema.get("$defs", {}), rows)
    lines = ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for path, kind, required, meaning in rows:
        cells = (f"`{path}`", kind, "yes" if required else "", meaning.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def schema_page(paths: list[Path]) -> str:
    """Every shipped schema as tables of its fields, from the schema files themselves."""
    parts = ["# JSON schemas", "",
             "The JSON Schemas (draft 2020-12) shipped in the package under `nagleprobe/schema/`, "
             "rendered from the files at build time. Fields are only ever added, never renamed or "
             "removed: ignore the ones you do not know. [JSON output](json.md) explains the "
             "report document."]
    for path in paths:
        schema = json.loads(path.read_text())
        parts += ["", f"## {path.name}", "", f"**{schema['title']}** "
                  f"([download](schema/{path.name}))", ""]
        if "description" in schema:
            parts += [schema["description"], ""]
        if "properties" in schema:
            parts.append(_table(schema, schema))
        for alt in schema.get("oneOf", []):  # one table per kind of document
            parts += ["", f"### {alt['title']}", "", _table(schema, alt)]
    return "\n".join(parts) + "\n"


# -- the Performance page ------------------------------------------------------------------

def performance_page(results: str) -> str:
    """benchmarks/RESULTS.md with its entries newest first (the file keeps them oldest first)."""
    head, _, body = results.partition("\n## ")
    entries = ("## " + body).split("\n## ") if body else []
    entries = [e if e.startswith("## ") else "## " + e for e in entries]
    intro = head.replace("# Benchmark results", "# Performance", 1).rstrip()
    note = ("This page is made from `benchmarks/RESULTS.md` when the site is built, the latest "
            "run first.")
    return "\n\n".join([intro, note, *(e.strip() for e in reversed(entries))]) + "\n"


# -- the command-line reference ------------------------------------------------------------

def _markdown_help(text: str) -> str:
    """Click help as Markdown: a paragraph that click keeps as written (first line `\b`)
    becomes a text block; the rest stays prose."""
    paragraphs = text.split("\n\n")
    return "\n\n".join("```text\n" + p.split("\n", 1)[1] + "\n```" if p.startswith("\b\n")
                       else p for p in paragraphs)


def _documented(command):
    """A copy of a click command (and its subcommands) whose help is Markdown, its epilog
    appended: mkdocs-click shows the help but not the epilog. The commands stay untouched."""
    import copy
    import inspect

    import click

    doc = copy.copy(command)
    parts = [inspect.cleandoc(command.help or ""), command.epilog or ""]
    doc.help = _markdown_help("\n\n".join(filter(None, parts)))
    doc.epilog = None
    if isinstance(command, click.Group):
        doc.commands = {name: _documented(sub) for name, sub in command.commands.items()}
    return doc


def cli_reference(options: dict[str, str]) -> str:
    """mkdocs-click's Markdown for `:module:`/`:command:` (with `:prog_name:`, `:depth:`,
    `:style:`), subcommands listed."""
    import importlib

    from mkdocs_click._docs import make_command_docs

    command = getattr(importlib.import_module(options["module"]), options["command"])
    lines = make_command_docs(options.get("prog_name", command.name), _documented(command),
                              depth=int(options.get("depth", 0)),
                              style=options.get("style", "plain"), list_subcommands=True,
                              has_attr_list=True)
    # click >= 8.3 marks "no default" with a sentinel, which mkdocs-click 0.9 prints
    return "\n".join(line.replace("`Sentinel.UNSET`", "None") for line in lines)


def expand_cli_blocks(markdown: str) -> str:
    """Every `::: mkdocs-click` block (its indented `:key: value` lines) replaced by the
    reference it asks for."""
    def expand(m: re.Match) -> str:
        return cli_reference(dict(re.findall(r"^\s+:(\w+):\s*(.+?)\s*$", m.group(1), re.M)))
    return re.sub(r"^::: mkdocs-click\n((?:[ \t]+:\w+:.*\n)+)", expand, markdown, flags=re.M)


# -- the executed notebook -----------------------------------------------------------------

def executed_notebook(notebook: Path, workdir: Path) -> Path:
    """Run `notebook` in a Jupyter kernel as if it sat in examples/ of this checkout (its
    `../samples` paths resolve, its output folder lands in `workdir`); returns the result."""
    import nbclient
    import nbformat

    (workdir / "samples").symlink_to(ROOT / "samples")
    cwd = workdir / "examples"
    cwd.mkdir()
    nb = nbformat.read(notebook, as_version=4)
    env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}).execute(env=env)
    out = cwd / notebook.name
    nbformat.write(nb, out)
    return out


# -- mkdocs events ---------------------------------------------------------------------------

_TEMP: tempfile.TemporaryDirectory | None = None


def _generated(config, files, src_uri: str, **source) -> None:
    files.append(File.generated(config, src_uri, **source))


try:
    from mkdocs.plugins import event_priority
    from mkdocs.structure.files import File
except ImportError:  # the tests import the page makers without mkdocs
    def event_priority(_priority):  # type: ignore[no-redef]
        return lambda f: f


@event_priority(100)  # before mkdocs-jupyter's on_files, which claims the notebook
def on_files(files, config):
    global _TEMP
    _generated(config, files, "index.md", content=home_page((ROOT / "README.md").read_text()))
    _generated(config, files, "schema.md", content=schema_page(SCHEMAS))
    for path in SCHEMAS:
        _generated(config, files, f"schema/{path.name}", abs_src_path=str(path))
    _generated(config, files, "performance.md", content=performance_page(RESULTS.read_text()))
    _TEMP = tempfile.TemporaryDirectory(prefix="nagleprobe-docs-")
    nb = executed_notebook(NOTEBOOK, Path(_TEMP.name))
    # a File with a source folder: mkdocs-jupyter's wrapper finds the path only through it
    files.append(File(nb.name, str(nb.parent), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    return expand_cli_blocks(markdown)


def on_post_build(config):
    global _TEMP
    if _TEMP is not None:
        _TEMP.cleanup()
        _TEMP = None
