"""PipelineView (interleaved 1F1B, chunks drawn as separate traces) in a real JupyterLab +
Chromium at 1440x900.

What the page holds: every box numbered (``F3``, ``B0``), one legend entry per kind (the
chunk traces share their kind's entry), no console warning about colours; the hover of a
chunk-1 box names its stage, chunk and microbatch and gives its real length; a mouse click on
that box reaches the kernel, outlines its microbatch (the boxes the figure holds: those
around the window) and moves the stage and microbatch menus to it; the keyboard alone (Tab to the microbatch menu; Space, an arrow key, Enter) picks the
next microbatch, and the page outlines it. Screenshots: ``test-artifacts/pipeline_view.png``
and ``pipeline_view_after_keyboard.png``.
"""

from __future__ import annotations

import re

import pytest
from lab import ARTIFACTS, NB, OUTPUT_ERRORS, check_plots_drawn, execute, run_cells
from pagelog import screenshot

from widgets.figures.pipeline import (
    OVERVIEW_BINS,
    OVERVIEW_KEYS,
    TRACE_OVERVIEW,
    TRACE_SELECTED_MB,
    trace_index,
)

pytestmark = pytest.mark.browser

CELLS = [
    """import explorer as ex
from widgets import PipelineView

par = ex.ParallelConfig(dp=1, pp=4, microbatch_size=1, schedule="interleaved_1f1b",
                        virtual_stages=3)
pipe = PipelineView("gpt2", par, global_batch=8, seq=512)
pipe""",
]

GD = f"{NB}.node.querySelector('.jp-OutputArea-output .js-plotly-plot')"
CHUNK1 = trace_index("compute-forward", 1)  # the forward boxes of chunk 1

FACTS = f"""() => {{
  const gd = {GD};
  return {{
    labels: Array.from(gd.querySelectorAll('.barlayer .bartext')).map(t => t.textContent),
    legend: Array.from(gd.querySelectorAll('.legendtext')).map(t => t.textContent),
    forwards: gd.data.filter(t => t.legendgroup === 'compute-forward')
                     .reduce((n, t) => n + (t.x ? t.x.length : 0), 0),
  }};
}}"""

# Page coordinates of the middle of box j of trace k (the bar sits from y - 0.2 to y + 0.35).
BOX_XY = f"""([k, j]) => {{
  const gd = {GD}, t = gd._fullData[k], xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa.l2p(t.base[j] + t.x[j] / 2),
          r.top + ya._offset + ya.l2p(t.y[j] + 0.075)];
}}"""

# The <select> of the menu whose first entry is ``first`` (the stage menu: "no stage").
SELECT = f"""(first) => Array.from({NB}.node.querySelectorAll('.widget-dropdown select'))
  .find(s => s.options.length && s.options[0].text.replace(/\\s+/g, ' ') === first)"""
CHOSEN = f"""(first) => {{ const s = ({SELECT})(first);
  return s.options[s.selectedIndex].text.replace(/\\s+/g, ' '); }}"""
OUTLINE = f"() => Array.from({GD}.data[{TRACE_SELECTED_MB}].base || [])"


def test_pipeline_view_numbers_chunks_and_takes_a_click_and_the_keyboard(lab, lab_page, page_log):
    try:
        page = run_cells(lab, lab_page, page_log, "pipeline_check.ipynb", CELLS)
        check_plots_drawn(page, lab_page, 1)
        facts = page.evaluate(FACTS)
        # the forward boxes the view holds (those around its window) are all in the page
        held = execute(page, "from widgets.figures.pipeline import kind_traces\n"
                             "print(sum(len(pipe.figure.data[i].x) "
                             "for i in kind_traces('compute-forward')))")  # fmt: skip
        assert 0 < facts["forwards"] == int(held["text"]) < 4 * 3 * 8, held
        assert facts["labels"] and all(re.fullmatch(r"[FB]\d", x) for x in facts["labels"])
        assert facts["legend"][:2] == ["Forward", "Backward"]
        assert len(facts["legend"]) == len(set(facts["legend"]))  # one entry per kind
        screenshot(page, ARTIFACTS / "pipeline_view.png")

        # hover, then click, the second box of chunk 1
        box = page.evaluate(f"() => {{ const t = {GD}.data[{CHUNK1}]; return [t.customdata[1], "
                            "t.text[1], t.base[1], t.x[1]]; }")  # fmt: skip
        stage, mb, start, length = int(box[0]), int(box[1]), box[2], box[3]
        assert stage // 4 == 1  # chunk 1: stages 4..7
        x, y = page.evaluate(BOX_XY, [CHUNK1, 1])
        page.mouse.move(x, y)
        page.wait_for_function(f"() => {GD}.querySelectorAll('.hoverlayer .hovertext').length")
        hover = page.evaluate(f"() => {GD}.querySelector('.hoverlayer .hovertext').textContent")
        assert f"stage {stage} (chunk 1), microbatch {mb}" in hover, hover
        assert f"({length:.3g} ms)" in hover and f"{start + length:.4g} ms" in hover, hover
        page.mouse.click(x, y)
        page.wait_for_function(f"() => ({OUTLINE})().length > 0", timeout=30_000)
        page.wait_for_function(f"(s) => ({CHOSEN})('no stage').startsWith(s)",
                               arg=f"stage {stage} (device {stage % 4}, chunk 1)")  # fmt: skip
        assert page.evaluate(CHOSEN, "every microbatch") == f"microbatch {mb}"
        held = execute(page, "print(pipe.stage, pipe.microbatch, "
                             f"len(pipe.figure.data[{TRACE_SELECTED_MB}].x))")  # fmt: skip
        assert held["text"].split() == [str(stage), str(mb), str(len(page.evaluate(OUTLINE)))]

        # the keyboard alone: Tab from the stage menu to the microbatch menu, then pick the
        # next microbatch (Space opens the menu: a bare arrow key is JupyterLab's)
        outline = page.evaluate(OUTLINE)
        page.evaluate(f"() => ({SELECT})('no stage').focus()")
        page.keyboard.press("Tab")
        assert page.evaluate(f"() => document.activeElement === ({SELECT})('every microbatch')")
        for key in ("Space", "ArrowDown", "Enter"):
            page.keyboard.press(key)
        page.wait_for_function(f"(b) => JSON.stringify(({OUTLINE})()) !== JSON.stringify(b)",
                               arg=outline, timeout=30_000)  # fmt: skip
        held = execute(page, "print(pipe.microbatch, pipe.selection.microbatch)")
        assert held["text"].split() == [str(mb + 1)] * 2, held
        screenshot(page, ARTIFACTS / "pipeline_view_after_keyboard.png")
        assert not page.evaluate(OUTPUT_ERRORS)
        warned = [x for x in page_log.lines if "Invalid color" in x]
        assert not warned, warned[:3]  # per-box colour arrays made plotly.js warn per box
    finally:
        lab_page.close_current()


BIG = [
    """import explorer as ex
from widgets import PipelineView

par = ex.ParallelConfig(dp=1, pp=8, microbatch_size=1, schedule="interleaved_1f1b",
                        virtual_stages=4)
big = PipelineView("gpt3-6.7b", par, global_batch=48, seq=2048)
big""",
]
CELLS_DRAWN = f"() => {GD}.querySelectorAll('.heatmaplayer .hm image').length"
BWD1_CELLS = TRACE_OVERVIEW + OVERVIEW_KEYS.index(("compute-backward", 1))
# A busy cell of that trace past the middle of the step whose boxes are not microbatch 7.
CELL = f"""() => {{ const t = {GD}.data[{BWD1_CELLS}], z = Array.from(t.z);
  const i = z.findIndex((v, k) => k > z.length / 2 && isFinite(v) && t.text[k] > 7);
  return [t.x[i], t.y[i], t.text[i], t.hovertext[i]]; }}"""
BAR_FORWARDS = f"""() => {GD}.data.filter(t => t.type === 'bar' && t.legendgroup ===
  'compute-forward').reduce((n, t) => n + (t.x ? t.x.length : 0), 0)"""
# Page coordinates of the overview cell of row ``d`` at ``frac`` of the plot's width.
CELL_XY = f"""([d, frac]) => {{
  const gd = {GD}, xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa._length * frac, r.top + ya._offset + ya.l2p(d + 0.075)];
}}"""


def test_pipeline_view_zoomed_out_draws_the_overview_and_keeps_the_selection(
    lab, lab_page, page_log
):
    """pp 8 x 48 microbatches x 4 chunks (1,536 forward boxes): the zoom control's 0-100%
    draws the overview (heatmap images, no box), a cell's hover counts its boxes and names
    their microbatches, a microbatch picked there is outlined on its real boxes in the page,
    and zooming back in draws boxes again (the images gone). Screenshot:
    ``test-artifacts/pipeline_view_overview.png``."""
    try:
        page = run_cells(lab, lab_page, page_log, "pipeline_overview.ipynb", BIG)
        check_plots_drawn(page, lab_page, 1)
        assert page.evaluate(CELLS_DRAWN) == 0  # opens on numbered boxes
        execute(page, "big.controls['zoom'].value = (0, 100)")
        page.wait_for_function(f"() => ({CELLS_DRAWN})() > 0", timeout=30_000)
        facts = page.evaluate(FACTS)
        assert facts["labels"] == [] and facts["legend"][:2] == ["Forward", "Backward"]
        assert page.evaluate(BAR_FORWARDS) == 1  # no box: the legend entry's zero-length one
        for frac in (0.3, 0.5, 0.7):  # a cell in the steady state of row 0
            page.mouse.move(*page.evaluate(CELL_XY, [0, frac]))
            page.wait_for_timeout(300)
            hover = page.evaluate(f"() => Array.from({GD}.querySelectorAll("
                                  "'.hoverlayer .hovertext')).map(t => t.textContent)")  # fmt: skip
            if hover:
                break
        assert hover and re.search(r"\d+ boxes", hover[0]), hover
        assert "zoom in for each box" in hover[0], hover
        page.mouse.move(5, 5)
        execute(page, "big.pick['microbatch'].value = 7")
        held = execute(page, f"print(len(big.figure.data[{TRACE_SELECTED_MB}].x))")
        page.wait_for_function(f"(n) => ({OUTLINE})().length === n",
                               arg=int(held["text"]), timeout=30_000)  # fmt: skip
        assert int(held["text"]) == 2 * 8 * 4  # forward and backward on 8 devices x 4 chunks
        screenshot(page, ARTIFACTS / "pipeline_view_overview.png")
        # a mouse click on a backward cell of chunk 1 selects its box there
        outline = page.evaluate(OUTLINE)
        x, d, lo, hi = page.evaluate(CELL)
        xy = page.evaluate(f"""([x, d]) => {{ const gd = {GD}, r = gd.getBoundingClientRect();
          const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
          return [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(d + 0.075)];
          }}""", [x, d])  # fmt: skip
        page.mouse.click(*xy)
        page.wait_for_function(f"(b) => JSON.stringify(({OUTLINE})()) !== JSON.stringify(b)",
                               arg=outline, timeout=30_000)  # fmt: skip
        # the box selected is on the clicked row within a pixel (two cells) of the click:
        # the mouse lands on whole pixels, and a cell is under a pixel wide
        near = execute(page, f"""c, cell = big._cols, big.window or (0, float(big._cols['span']))
cell = (cell[1] - cell[0]) / {OVERVIEW_BINS}
m = (c['stage'] == big.stage) & (c['mb'] == big.microbatch) & (c['device'] == {int(d)})
m &= (c['end'] > {x} - 2 * cell) & (c['start'] < {x} + 2 * cell)
print(int(m.sum()), big.stage % 8)""")  # fmt: skip
        assert near["text"].split() == ["1", str(int(d))], (near, x, d, lo, hi)
        execute(page, "big.controls['zoom'].value = (0, 5)")
        page.wait_for_function(f"() => ({CELLS_DRAWN})() === 0", timeout=30_000)
        assert page.evaluate(BAR_FORWARDS) > 8 * 4  # the boxes around the window
        assert not page.evaluate(OUTPUT_ERRORS)
    finally:
        lab_page.close_current()
