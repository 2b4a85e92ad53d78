"""The house's layout: the stages import downwards only (read -> decode -> flows -> detect ->
report -> renderers -> CLI), lazy imports inside functions and imports for annotations
included, so any module can be read and changed knowing only what is below it; and no
module grows past about 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nagleprobe"


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path, modules: set[str], annotations: bool = True) -> set[str]:
    """The package's modules `path` imports anywhere (`annotations`: also those imported
    only for type checkers, under `if TYPE_CHECKING:`); a subpackage's files
    (nagleprobe/read/) count as the one module they make."""
    top = 2 if path.parent != PACKAGE else 1  # the level of `from ..x` / `from .x` at the top
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not annotations and _type_checking_only(child):
                continue
            if isinstance(child, ast.ImportFrom) and child.level == top:
                names = [child.module] if child.module else [a.name for a in child.names]
                found.update(n.split(".")[0] for n in names)
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                    "nagleprobe."):
                found.add(child.module.split(".")[1])
            visit(child)

    visit(ast.parse(path.read_text()))
    return found & modules - {module_of(path)}


def module_of(path: Path) -> str:
    return path.stem if path.parent == PACKAGE else path.parent.name


def sources() -> list[Path]:
    return sorted(PACKAGE.glob("*.py")) + sorted(PACKAGE.glob("*/*.py"))


def import_graph(annotations: bool = True) -> dict[str, set[str]]:
    modules = {module_of(p) for p in sources()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for p in sources():
        graph[module_of(p)] |= imports(p, modules, annotations)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles: each a path that comes back to where it started."""
    found, state = [], {}

    def walk(m: str, path: list[str]) -> None:
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                walk(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            walk(m, [m])
    return found


def test_no_module_imports_anything_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_imports_for_type_checkers_count_as_imports(tmp_path):
    sub = tmp_path / "sub"  # a subpackage's file: its package's modules are `..x`
    sub.mkdir()
    (sub / "a.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from ..b import B\n")
    assert imports(sub / "a.py", {"sub", "b"}) == {"b"}
    assert imports(sub / "a.py", {"sub", "b"}, annotations=False) == set()


def test_the_report_imports_none_of_its_renderers():
    """The renderers read a report as `tables.Result`; `Report` reaches them, never the
    other way round (so `Report.to_text` and the like may import them in their bodies)."""
    graph = import_graph()
    renderers = {"json_report", "text_report", "html_report", "plot", "wireshark"}
    for r in sorted(renderers):
        assert "report" not in graph[r], r
    assert not renderers & (graph["tables"] | graph["dataframes"])
    assert "json_report" not in graph["text_report"]  # the text is written from the columns


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_no_module_takes_another_modules_private_names():
    private = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                private += [f"{path.stem}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []


def test_the_lower_stages_know_nothing_of_the_report_and_above():
    graph = import_graph()
    above = {"report", "html_report", "plot", "check", "cli", "pipeline", "stream", "live",
             "fleet", "annotate"}
    for low in ("read", "decode", "encap", "flows", "detect", "relay", "advice", "humanize",
                "errors"):
        assert not graph[low] & above, (low, graph[low] & above)


MAX_LINES = 520  # "no module over ~500 lines": a module past it is split, not grown


def test_no_module_is_over_about_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_internals_page_names_every_module():
    page = (PACKAGE.parent / "docs" / "internals.md").read_text()
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {m for m in modules if f"`{m}`" not in page and f"`{m}/`" not in page} == set()
