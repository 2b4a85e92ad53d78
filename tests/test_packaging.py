"""Packaging: runtime dependencies are what the package's code imports, the test-only parsers
sit in the test extra, and the package says it is typed (PEP 561)."""

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


IMPORTED_AS = {"pillow": "PIL"}  # distributions whose import name is another


def name(requirement: str) -> str:
    """The name a requirement is imported by."""
    dist = requirement.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower()
    return IMPORTED_AS.get(dist, dist)


def imported_modules() -> set[str]:
    """Top-level names of every module the package's code imports (anywhere in a file)."""
    found = set()
    for path in (ROOT / "nagleprobe").rglob("*.py"):  # subpackages (cli/, read/) too
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"nagleprobe"}


def test_every_runtime_dependency_is_imported_by_the_package():
    runtime = {name(r) for r in PROJECT["dependencies"]}
    assert runtime <= imported_modules(), runtime - imported_modules()


def test_test_only_parsers_are_in_the_test_extra_not_at_runtime():
    runtime = {name(r) for r in PROJECT["dependencies"]}
    test = {name(r) for r in PROJECT["optional-dependencies"]["test"]}
    assert {"dpkt", "scapy"} <= test and not {"dpkt", "scapy"} & runtime
    assert not {"dpkt", "scapy"} & imported_modules()


def test_every_module_the_package_imports_is_a_dependency_or_an_extra():
    deps = {name(r) for r in PROJECT["dependencies"]}
    for extra in PROJECT["optional-dependencies"].values():
        deps |= {name(r) for r in extra}
    assert imported_modules() - deps <= {"pytest"}  # the plugin runs inside pytest only


def test_the_package_is_marked_typed_and_ships_the_marker():
    assert (ROOT / "nagleprobe" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in data["package-data"]["nagleprobe"]


def test_the_headers_the_c_modules_include_ship_and_rebuild_them():
    """An sdist built from pyproject's package data compiles: every local header a C module
    includes is package data, and setup.py names it so a changed header rebuilds them."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    setup = (ROOT / "setup.py").read_text()
    included = {h for c in (ROOT / "nagleprobe").glob("*.c")
                for h in re.findall(r'^#include "([^"]+)"', c.read_text(), re.MULTILINE)}
    assert included == {"_columns.h"}
    for header in included:
        assert (ROOT / "nagleprobe" / header).is_file()
        assert header in data["package-data"]["nagleprobe"]
        assert f'"nagleprobe/{header}"' in setup


def test_fleets_and_urls_are_extras_and_the_base_install_does_not_load_them():
    extras = PROJECT["optional-dependencies"]
    assert {"distributed", "dask"} <= {name(r) for r in extras["dask"]}
    assert {"fsspec", "aiohttp"} <= {name(r) for r in extras["remote"]}
    assert not {"dask", "distributed", "fsspec", "aiohttp"} & {
        name(r) for r in PROJECT["dependencies"]}
    # .ci/run installs the test extra: it must hold what the fleet and URL tests need
    assert {"distributed", "fsspec", "aiohttp"} <= {name(r) for r in extras["test"]}
    import subprocess

    code = ("import sys, nagleprobe.cli, nagleprobe.check, nagleprobe.fleet, nagleprobe.read;"
            "print(sorted({'distributed', 'dask', 'fsspec', 'aiohttp'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_analyze_parses_its_options_and_reads_before_pandas_is_imported():
    """pandas takes about 0.4 s to import: `analyze` loads it in a thread while it reads and
    decodes the first chunks, so nothing on the way there may import it (a --host callback
    importing the gate's module once cost every run that overlap)."""
    import subprocess

    code = ("import sys; from nagleprobe.cli import main; "
            "ctx = main.make_context('nagleprobe', ['analyze', '--port', '80', 'x.pcap']); "
            "ctx.command.commands['analyze'].make_context('analyze', ['--port', '80', 'x.pcap']); "
            "import nagleprobe.pipeline, nagleprobe.read, nagleprobe.decode, nagleprobe.encap, "
            "nagleprobe.fileset; print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
