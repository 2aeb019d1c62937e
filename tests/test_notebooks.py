"""Every notebook runs top to bottom in a fresh kernel (nbclient)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert any(p.name == "01_tour.ipynb" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name} is committed with outputs; clear them"
    )
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={
        "metadata": {"path": str(path.parent)}}).execute()  # fmt: skip
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Traceback" not in text
    if path.name == "01_tour.ipynb":
        assert "174.6 B" in text and "graph gpt3-175b {" in text
