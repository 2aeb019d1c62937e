"""What each notebook must show once run top to bottom: the texts its outputs contain, how many
widgets it displays, and (for the views whose titles repeat a printed number) a probe run in
the notebook's own kernel after its last cell with the check comparing the two.

``test_notebooks_in_browser.py`` checks these on the one run of each notebook (in JupyterLab,
outputs read from the page's notebook model); ``tests/test_notebooks.py`` checks that every
notebook named here exists.
"""

from __future__ import annotations

import re

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# notebook -> (text its outputs must contain, minimum number of widgets displayed); an HBox of
# two views counts as one widget. A notebook without an entry must at least print something.
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
         "verify OK", "terms of b - a, largest first", "ConstraintError - the conflict"], 3,
    ),
    "04_cost_model_tuning.ipynb": (
        ["ops changed strategy", "beta_communication=100", "NVLink x", "mindspore:",
         "raising beta 1 -> 100: ops on tp",
         "| bytes", "| seconds", "constraints: (Forbid(", "robustness: ", "as the scan said"], 2,
    ),
    "05_dynamic_vs_static.ipynb": (
        ["max |eager - static|", "speedup (total time)", "fused kernels", "'cond'", "'loop'",
         "graph break:", "recompile —", "0 recompiles for 3 batch sizes",
         "within rtol=atol=1e-05: True", "transformers' `generate`: **True**"], 1,
    ),
    "06_scaling_to_thousands.ipynb": (
        ["weak scaling", "strong scaling", "pangu-alpha-200b", "smallest device count",
         "megatron-1008b", "largest deviation", "tensor-parallel groups inside one node: True"], 2,
    ),
    "08_calibrate_to_your_cluster.ipynb": (
        ["60.1 s/step", "role   run", "fit    megatron-529.6b", "check  megatron-529.6b",
         "check rows: median |error|", "saved and loaded back equal: True",
         "the same predictions `calibrate` reports", "llama3-405b dp64 tp8 pp16"], 1,
    ),
    "09_bring_your_own_model.ipynb": (
        ["transformers: 671,026,404,352   traced: 671,026,404,352",
         "every op on the data path mapped", "experts   e=gpu,g=node", "all-to-all(gpu)",
         "  MLA       b=node+gpu", "dispatch  g=node,e=gpu", "combine   e=gpu,g=node",
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

# What a view shows, read in the notebook's own kernel after its last cell: each entry prints
# lines "name: text" that ``check_claims`` compares with what the notebook printed.
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


def shown_by_probe(probe_text: str) -> dict[str, str]:
    """The probe's "name: text" lines as a dict."""
    shown = {}
    for line in probe_text.splitlines():
        key, _, value = line.partition(": ")
        shown[key] = value
    return shown


def check_claims(name: str, printed: str, shown: dict[str, str]) -> None:
    """The numbers a notebook prints equal the ones its views show (to the digits shown).

    >>> check_claims("02_parallelism_concepts.ipynb",
    ...              "1F1B, p=4, m=8: bubble 27.3%\\ntotal   12.5 GiB",
    ...              {"pipeline": "27.3% formula", "memory": "worst device 12.5 GiB"})
    >>> check_claims("02_parallelism_concepts.ipynb",
    ...              "1F1B, p=4, m=8: bubble 27.3%\\ntotal   12.5 GiB",
    ...              {"pipeline": "27.3% formula", "memory": "worst device 12.7 GiB"},
    ... )  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    AssertionError: ('12.5', 'worst device 12.7 GiB')...
    """
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


def check_outputs(name: str, outputs: list[dict]) -> str:
    """The outputs of a run (nbformat dicts) hold no error or traceback, every expected text
    and at least the expected number of widgets; returns their text (stream, text/plain and
    text/markdown).

    >>> check_outputs("x.ipynb", [{"output_type": "stream", "name": "stdout", "text": "hi"}])
    'hi'
    >>> check_outputs("x.ipynb", [])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    AssertionError: x.ipynb shows nothing: no text and no widget...
    """
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs
              if o.get("output_type") == "error"]  # fmt: skip
    assert not errors, f"{name} raised: {errors}"
    text = "".join(_text(o.get("text", "")) for o in outputs)
    text += "".join(_text(o.get("data", {}).get("text/plain", "")) for o in outputs)
    # prose the notebook renders from its values (IPython.display.Markdown)
    text += "".join(_text(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "Traceback" not in text, (
        f"{name} printed a traceback: {text[text.find('Traceback') :][:800]}"
    )
    widgets = sum(WIDGET_MIME in o.get("data", {}) for o in outputs)
    assert text.strip() or widgets, f"{name} shows nothing: no text and no widget"
    strings, min_widgets = EXPECTED.get(name, ([], 0))
    missing = [s for s in strings if s not in text]
    assert not missing, f"{name}: outputs lack {missing}"
    assert widgets >= min_widgets, f"{name} displayed {widgets} widgets, expected {min_widgets}"
    return text


def _text(value: str | list[str]) -> str:
    """nbformat text: a string, or the list of lines a saved notebook holds."""
    return value if isinstance(value, str) else "".join(value)
