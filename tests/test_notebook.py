"""examples/incident-review.ipynb: stored without outputs, executed end to end by a real
Jupyter kernel (nbclient + ipykernel) running this checkout's nagleprobe; any cell error fails."""

import csv
import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "incident-review.ipynb"
KERNEL = "nagleprobe-test"


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A kernelspec for this interpreter, and PYTHONPATH so the kernel imports this checkout."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "nagleprobe tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")


def test_notebook_runs_end_to_end_and_exports_the_evidence(tmp_path, kernel_env):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    out = tmp_path / "out"
    # papermill-style: a cell after the parameters points at this checkout and a temp folder
    nb.cells.insert(params + 1, nbformat.v4.new_code_cell(
        f"CAPTURE = {str(ROOT / 'samples' / 'proxy_any.pcap')!r}\nOUT = Path({str(out)!r})\n"
        "import nagleprobe as _np; assert _np.__file__.startswith("
        f"{str(ROOT / 'nagleprobe')!r}), _np.__file__"))
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    kinds = [k for o in outputs for k in o.get("data", {})]
    assert kinds.count("image/png") >= 5  # overview, flow, zoom, grid, distribution
    html = next(o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {}))
    assert "Nagle/delayed-ACK stalls found: 19 stalls in 1 of 2 TCP flows" in html

    with open(out / "evidence.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 19 and {r["endpoint"] for r in rows} == {"127.0.0.1:40014"}
    assert json.loads((out / "report.json").read_text())["summary"]["stalls"] == 19
    assert (out / "incident.html").read_text().startswith("<!DOCTYPE html>")
