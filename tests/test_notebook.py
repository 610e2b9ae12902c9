"""The quickstart notebook runs top to bottom."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    outputs = "".join(
        o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
    )
    assert "ParallelRollouts" in outputs and "episode_return_mean" in outputs
    assert any(
        "image/png" in o.get("data", {}) for cell in nb.cells for o in cell.get("outputs", [])
    ), "the learning curve is plotted"
