"""The notebooks as committed, without a kernel: each uses the public API only and is committed
without outputs, and every notebook ``tests/browser/notebook_claims.py`` names exists.

Each notebook runs once, top to bottom, in JupyterLab under Chromium
(``tests/browser/test_notebooks_in_browser.py``): that run checks the texts its outputs must
contain, the widgets it displays and the numbers its views show.
"""

import re
from pathlib import Path

import nbformat
import pytest

# tests/ is on sys.path (pytest's rootdir-relative "prepend" import mode): the browser tier's
# list of what each notebook must show is read from there.
from browser.notebook_claims import CLAIMS, EXPECTED

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    missing = sorted((set(EXPECTED) | set(CLAIMS)) - {p.name for p in NOTEBOOKS})
    assert not missing, f"notebooks missing: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_public_api_only(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    private = re.findall(r"\.\s*_[a-z]\w*", source)
    assert not private, f"{path.name} reaches private names: {sorted(set(private))}"
    assert "import ipywidgets as widgets" not in source  # `widgets` is our package
    if "import ipywidgets" in source:
        assert "import ipywidgets as ipw" in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    with_outputs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("outputs")]
    assert not with_outputs, (
        f"{path.name} is committed with outputs in cells {with_outputs}; clear them"
    )
