"""The walkthrough notebook runs end to end (2 training steps, tiny subsamples); any failing cell fails the test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO, requires_real

NOTEBOOK = REPO / "notebooks" / "walkthrough.ipynb"


def test_notebook_is_committed_without_outputs() -> None:
    import nbformat

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code_cells) >= 6
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code_cells)


@pytest.mark.slow
@requires_real
def test_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("ST_MAGNITUDE_NB_STEPS", "2")
    monkeypatch.setenv("ST_MAGNITUDE_DATA", str(data_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "stream"
    )
    assert "refused:" in outputs and "SymmetryViolationError" not in outputs.split("refused:")[0]
    assert "fallback recorded: 'cosine'" in outputs
    assert "declared similarity: dot" in outputs
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
               for c in nb.cells for o in c.get("outputs", []))
