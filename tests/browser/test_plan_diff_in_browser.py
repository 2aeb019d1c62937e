"""PlanDiffView (two sharding plans side by side) in a real JupyterLab + Chromium at
1440x900.

What the page holds: the three plots draw (the terms' bars, the graph with the changed ops
ringed, the chosen op's two layouts on the mesh), fit their cells, no text is cut and
nothing scrolls sideways; choosing another op in the page's menu reaches the kernel and
redraws the two layouts for it. Screenshots: ``test-artifacts/plan_diff_view.png`` and
``plan_diff_view_after_menu.png``.
"""

from __future__ import annotations

import pytest
from lab import (
    ARTIFACTS,
    CLIPPED,
    NB,
    OUTPUT_ERRORS,
    check_plots_drawn,
    run_cells,
)
from pagelog import screenshot

pytestmark = pytest.mark.browser

CELLS = [
    """import explorer as ex
from widgets import PlanDiffView

g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=256)
mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
a = ex.search(g, mesh, "dynamic_programming")
b = ex.search(g, mesh, "dynamic_programming", params=ex.CostParams(beta_communication=8.0))
view = PlanDiffView(a, b)
view""",
]

PLOT = f"(k) => {NB}.node.querySelectorAll('.jp-OutputArea-output .js-plotly-plot')[k]"

FACTS = f"""() => {{
  const len = (v) => v ? (v.length !== undefined ? v.length : 0) : 0;
  const plots = [0, 1, 2].map(k => ({PLOT})(k));
  return {{
    names: plots.map(gd => gd ? gd.data.map(t => t.name) : []),
    bars: plots[0] ? len(plots[0].data[0].x) : 0,
    ringed: plots[1] ? len(plots[1].data[2].x) : 0,
    titles: plots[2] ? Array.from(plots[2].querySelectorAll('.annotation-text'))
                         .map(a => a.textContent) : [],
  }};
}}"""

# The op menu's select element and the value of its i-th option.
MENU = f"""() => Array.from({NB}.node.querySelectorAll('.widget-dropdown'))
  .find(d => (d.querySelector('label') || {{}}).textContent === 'op').querySelector('select')"""


def test_plan_diff_view_draws_and_the_menu_redraws_the_layouts(lab, lab_page, page_log):
    try:
        page = run_cells(lab, lab_page, page_log, "plan_diff_check.ipynb", CELLS)
        check_plots_drawn(page, lab_page, 3)
        facts = page.evaluate(FACTS)
        assert facts["names"][0] == ["terms"] and facts["bars"] > 0
        assert facts["names"][1][2] == "changed" and facts["ringed"] > 0
        assert facts["names"][2] == ["a", "b"]
        assert facts["titles"][0].startswith("a: ") and facts["titles"][1].startswith("b: ")
        view = page.locator(".jp-OutputArea-output").first
        view.evaluate("el => el.scrollIntoView({block: 'start'})")
        screenshot(page, ARTIFACTS / "plan_diff_view.png")

        before = facts["titles"]
        n = page.evaluate(f"() => ({MENU})().options.length")
        assert n > 2
        page.evaluate(f"""() => {{ const s = ({MENU})(); s.selectedIndex = 2;
                          s.dispatchEvent(new Event('change', {{bubbles: true}})); }}""")
        page.wait_for_function(
            f"(b) => JSON.stringify(({FACTS})().titles) !== JSON.stringify(b)",
            arg=before, timeout=30_000,
        )  # fmt: skip
        assert not page.evaluate(CLIPPED), page.evaluate(CLIPPED)
        page.evaluate(f"() => ({PLOT})(2).scrollIntoView({{block: 'center'}})")
        screenshot(page, ARTIFACTS / "plan_diff_view_after_menu.png")
        assert not page.evaluate(OUTPUT_ERRORS)
    finally:
        lab_page.close_current()
