"""Every notebook runs top to bottom in a fresh kernel (nbclient) and shows what it teaches.

A notebook that runs but silently shows nothing fails: each one names the text its outputs
must contain and how many widgets (views) it must display.
"""

import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# notebook -> (text its outputs must contain, minimum number of widgets displayed); an HBox of
# two views counts as one widget
EXPECTED = {
    "01_tour.ipynb": (
        ["174.6 B", "graph gpt3-175b {", "chosen: dp", "memory per device", "tok/s/dev",
         "%layers.0.mlp.fc1: chose"], 7,
    ),
    "02_parallelism_concepts.ipynb": (
        ["verify OK", "-> reduce-scatter(tp) ->", "all-gather(tp)", "bubble 8.6%",
         "max |full - sum of 4 microbatches|", "max |unsharded - ZeRO-1|", "ZeRO-3",
         "selective"], 4,
    ),
    "03_strategy_search.ipynb": (
        ["exhaustive", "optimal", "ops that differ from ilp", "vs ", "propagated",
         "verify OK"], 2,
    ),
    "04_cost_model_tuning.ipynb": (
        ["ops changed strategy", "beta_communication=100", "NVLink x", "mindspore:",
         "raising beta 1 -> 100: ops on tp",
         "| bytes", "| seconds"], 2,
    ),
    "05_dynamic_vs_static.ipynb": (
        ["max |eager - static|", "speedup (total time)", "fused kernels", "'cond'", "'loop'",
         "graph break:", "recompile —", "0 recompiles for 3 batch sizes"], 1,
    ),
    "06_scaling_to_thousands.ipynb": (
        ["weak scaling", "strong scaling", "pangu-alpha-200b", "smallest device count",
         "megatron-1008b", "largest deviation"], 2,
    ),
    "08_calibrate_to_your_cluster.ipynb": (
        ["60.1 s/step", "role   run", "fit    megatron-529.6b", "check  megatron-529.6b",
         "check rows: median |error|", "saved and loaded back equal: True"], 1,
    ),
    "09_bring_your_own_model.ipynb": (
        ["transformers: 671,026,404,352   traced: 671,026,404,352",
         "every op on the data path mapped", "experts   e=gpu,g=node", "all-to-all(gpu)",
         "verify OK", "(4 layers): equal True", "chosen: dp",
         "ModelConfig 671,026,404,352 vs traced 671,026,404,352: equal True",
         "H800 GPU hours predicted, 2.664M published",
         "max |torch - sharded on 8 devices| = "], 2,
    ),
    "10_beyond_one_cluster.ipynb": (
        ["x h100-sxm alone (", "speedup", "fitting plans on the front", "event: NodeLoss",
         "migration: ", "from the checkpoint", "rebalance: step", "break-even",
         "axes across the WAN: dp", "pp  crosses -", "hierarchical",
         "H= 500", "caveat: Convergence is not modelled", "arXiv:2311.08105"], 3,
    ),
}  # fmt: skip


def test_there_are_notebooks():
    missing = sorted(set(EXPECTED) - {p.name for p in NOTEBOOKS})
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


# What a view shows, read in the notebook's own kernel after its last cell: each entry prints
# lines "name: text" that ``_check_claims`` compares with what the notebook printed.
CLAIMS = {
    "01_tour.ipynb": (
        "print('pipeline:', pipeline.figure.layout.title.text)\n"
        "print('memory:', memory.figure.layout.title.text)"
    ),
    "02_parallelism_concepts.ipynb": (
        "print('pipeline:', pipe.figure.layout.title.text)\n"
        "print('memory:', memory.figure.layout.title.text)"
    ),
}  # fmt: skip

_NUM = r"([0-9][0-9,]*\.?[0-9]*)"


def _seconds(number: str, unit: str) -> float:
    return float(number.replace(",", "")) * {"s": 1.0, "ms": 1e-3, "min": 60.0}[unit]


def _check_claims(name: str, printed: str, shown: dict[str, str]) -> None:
    """The numbers a notebook prints equal the ones its views show (to the digits shown)."""
    if name == "01_tour.ipynb":
        # train.report(): "step 21.722 s, ... bubble 5.7%"; the PipelineView of the same
        # config: "... step 21.7 s<br>bubble 5.7% simulated / 3.8% formula"
        step = re.search(r"step " + _NUM + r" (s|ms)\b", printed)
        view = re.search(r"step " + _NUM + r" (s|ms|min)\b", shown["pipeline"])
        assert step and view, (printed[:300], shown["pipeline"])
        a, b = _seconds(*step.groups()), _seconds(*view.groups())
        # the view shows three significant digits: equal to half a unit of the last one
        assert abs(a - b) <= 0.005 * max(a, b), (step[0], view[0])
        bubble = re.search(r"bubble " + _NUM + "%", printed)
        assert bubble and f"bubble {bubble[1]}% simulated" in shown["pipeline"], (
            bubble and bubble[0], shown["pipeline"])  # fmt: skip
    if name == "02_parallelism_concepts.ipynb":
        # "1F1B, p=4, m=8: bubble 27.3%" (the formula) is what the 4-stage PipelineView of
        # gpt2 with 8 microbatches says under "formula"
        formula = re.search(r"m=8: bubble " + _NUM + "%", printed)
        assert formula and f"{formula[1]}% formula" in shown["pipeline"], shown["pipeline"]
    # The memory table's total (last "total ... GiB" printed) is the view's worst device.
    totals = re.findall(r"total\s+" + _NUM + r" GiB", printed)
    worst = re.search(r"worst device " + _NUM + " GiB", shown["memory"])
    assert totals and worst, (totals, shown["memory"])
    # the view rounds to 0.1 GiB: equal to half a unit of its last digit
    assert abs(float(totals[-1]) - float(worst[1])) <= 0.05 + 1e-9, (totals[-1], shown["memory"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name} is committed with outputs; clear them"
    )
    t0 = time.perf_counter()
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={
        "metadata": {"path": str(path.parent)}})  # fmt: skip
    shown: dict[str, str] = {}
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, i)
        elapsed = time.perf_counter() - t0
        if path.name in CLAIMS:
            probe = nbformat.v4.new_code_cell(CLAIMS[path.name])
            nb.cells.append(probe)  # nbclient writes results back by index
            client.execute_cell(probe, len(nb.cells) - 1)
            nb.cells.pop()
            for line in "".join(o.get("text", "") for o in probe.outputs).splitlines():
                key, _, value = line.partition(": ")
                shown[key] = value
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    text += "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "Traceback" not in text
    assert not [o for o in outputs if o.output_type == "error"]
    # A notebook without an entry must at least print something.
    strings, min_widgets = EXPECTED.get(path.name, ([], 0))
    assert text.strip() or any(WIDGET_MIME in o.get("data", {}) for o in outputs)
    missing = [s for s in strings if s not in text]
    assert not missing, f"{path.name}: outputs lack {missing}"
    widgets = sum(WIDGET_MIME in o.get("data", {}) for o in outputs)
    assert widgets >= min_widgets, (
        f"{path.name} displayed {widgets} widgets, expected {min_widgets}"
    )
    # Run time is measured by bench/widgets.py (printed, never asserted: machines are noisy).
    print(f"{path.name}: {elapsed:.1f} s")
    if path.name in CLAIMS:
        _check_claims(path.name, text, shown)
