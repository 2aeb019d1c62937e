"""ParetoView (multi-objective plans) in a real JupyterLab + Chromium at 1440x900.

What the page holds, not what Python holds: the scatter draws its four traces with the
front's points, the axis and colour-bar titles carry units and sit inside the plot, no text
is cut and nothing scrolls sideways; a mouse click on a front point in the page reaches the
kernel, rings that point and redraws the linked PipelineView for its configuration; and the
keyboard alone does the same for a dominated point (Tab from the "front plan" menu to the
"dominated plan" menu; Space, an arrow key and Enter pick). Screenshots: ``test-artifacts/pareto_view.png``,
``pareto_view_after_click.png`` and ``pareto_view_after_keyboard.png``.
"""

from __future__ import annotations

import pytest
from lab import (
    ARTIFACTS,
    NB,
    OUTPUT_ERRORS,
    check_plots_drawn,
    execute,
    run_cells,
)
from pagelog import screenshot

pytestmark = pytest.mark.browser

CELLS = [
    """import explorer as ex
from widgets import ParetoView, PipelineView, link

plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
                        objectives=("step_time", "memory", "communication"))
pareto = ParetoView(plan)
pipe = PipelineView("gpt2", plan.config, global_batch=64, seq=512)
sel = link(pareto, pipe)
pareto""",
    "pipe",
]

# The Pareto plot is the first plot of the page; the pipeline's the second.
PLOT = f"(k) => {NB}.node.querySelectorAll('.jp-OutputArea-output .js-plotly-plot')[k]"

FACTS = f"""() => {{
  const gd = ({PLOT})(0);
  const box = gd.getBoundingClientRect();
  const inside = (sel) => Array.from(gd.querySelectorAll(sel)).map(el => {{
    const r = el.getBoundingClientRect();
    return {{sel, text: el.textContent.trim().slice(0, 60),
             ok: r.left >= box.left - 1 && r.right <= box.right + 1 &&
                 r.top >= box.top - 1 && r.bottom <= box.bottom + 1}};
  }});
  const len = (v) => v ? (v.length !== undefined ? v.length : 0) : 0;
  return {{
    traces: gd.data.map(t => ({{name: t.name, n: len(t.x)}})),
    xtitle: (gd.querySelector('.xtitle') || {{}}).textContent || '',
    ytitle: (gd.querySelector('.ytitle') || {{}}).textContent || '',
    cbtitle: (gd.querySelector('.cbtitle') || {{}}).textContent || '',
    boxes: [...inside('.xtitle'), ...inside('.ytitle'), ...inside('.gtitle'),
            ...inside('.colorbar'), ...inside('.legend')],
    pipe_title: ((({PLOT})(1) || document).querySelector('.gtitle') || {{}}).textContent || '',
  }};
}}"""

# The <select> of the menu labelled ``label``.
SELECT = f"""(label) => {{
  const box = Array.from({NB}.node.querySelectorAll('.widget-dropdown'))
    .find(d => (d.querySelector('label') || {{}}).textContent === label);
  return box && box.querySelector('select');
}}"""

# The text the "front plan" menu shows.
MENU = f"""() => {{
  const sel = ({SELECT})('front plan');
  // ipywidgets writes the labels' spaces as no-break spaces
  return sel && sel.selectedIndex >= 0
    ? sel.options[sel.selectedIndex].text.replace(/\\s+/g, ' ') : '';
}}"""

# Trace indices follow widgets.figures.pareto.TRACES.
FRONT, STAR, SELECTED = 2, 4, 5

# Page coordinates of front point j, from plotly's own axis mapping.
POINT_XY = f"""(j) => {{
  const gd = ({PLOT})(0);
  const fl = gd._fullLayout, xa = fl.xaxis, ya = fl.yaxis, r = gd.getBoundingClientRect();
  const t = gd._fullData[{FRONT}];
  return [r.left + xa._offset + xa.l2p(t.x[j]), r.top + ya._offset + ya.l2p(t.y[j])];
}}"""

# A front point away from the plan's star and from every other front point (>= 12 px),
# preferring a pipelined configuration (its hover names "pp2", "pp4", ...: the linked
# PipelineView then draws stages the plan's config does not have), then the farthest.
LONELY = f"""() => {{
  const gd = ({PLOT})(0);
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, t = gd._fullData[{FRONT}];
  const star = gd._fullData[{STAR}];
  const px = (x, y) => [xa.l2p(x), ya.l2p(y)];
  const pts = Array.from(t.x).map((x, j) => px(x, t.y[j]));
  const s = star.x && star.x.length ? px(star.x[0], star.y[0]) : [-1e9, -1e9];
  const dist = (a, b) => Math.hypot(a[0] - b[0], a[1] - b[1]);
  let best = -1, score = -1;
  for (let j = 0; j < pts.length; j++) {{
    if (dist(pts[j], s) < 12 || !pts.every((q, k) => k === j || dist(pts[j], q) >= 12)) continue;
    const piped = /pp([2-9]|\\d\\d)/.test(String(t.hovertext[j])) ? 1e6 : 0;
    if (piped + dist(pts[j], s) > score) {{ best = j; score = piped + dist(pts[j], s); }}
  }}
  return best;
}}"""


def test_pareto_view_draws_and_a_click_drives_the_pipeline(lab, lab_page, page_log):
    try:
        page = run_cells(lab, lab_page, page_log, "pareto_check.ipynb", CELLS)
        check_plots_drawn(page, lab_page, 2)

        facts = page.evaluate(FACTS)
        names = [t["name"] for t in facts["traces"]]
        assert len(names) == 6 and names[1].startswith("dominated") and "front" in names[FRONT]
        n = [t["n"] for t in facts["traces"]]
        # three objectives: no staircase; nothing picked yet: no dominators, no ring
        assert n == [0, n[1], n[2], 0, 1, 0] and n[1] > 0 and n[2] > 0
        assert facts["xtitle"] == "step time (s)"
        assert facts["ytitle"] == "peak memory per device (GiB)"
        assert "(GB)" in facts["cbtitle"]
        cut = [b for b in facts["boxes"] if not b["ok"]]
        assert not cut, f"parts of the Pareto plot outside it: {cut}"

        # the view's top (its controls) at the top of the notebook panel
        view = page.locator(".jp-OutputArea-output").first
        view.evaluate("el => el.scrollIntoView({block: 'start'})")
        screenshot(page, ARTIFACTS / "pareto_view.png")

        assert page.evaluate(MENU).startswith("choose one")
        j = page.evaluate(LONELY)
        assert j >= 0, "no front point stands apart from the others to click"
        before = facts["pipe_title"]
        x, y = page.evaluate(POINT_XY, j)
        page.mouse.move(x, y)
        # plotly's click reports the points under its hover: wait until it shows the hover
        page.wait_for_function(
            f"() => ({PLOT})(0).querySelectorAll('.hoverlayer .hovertext').length > 0"
        )  # fmt: skip
        page.mouse.click(x, y)
        page.wait_for_function(
            f"() => {{ const t = ({PLOT})(0).data[{SELECTED}]; return t.x && t.x.length === 1; }}",
            timeout=30_000,
        )  # fmt: skip
        page.wait_for_function(
            f"(b) => (({PLOT})(1).querySelector('.gtitle') || {{}}).textContent !== b",
            arg=before,
            timeout=30_000,
        )  # fmt: skip
        after = page.evaluate(FACTS)
        page.wait_for_function(f"() => ({MENU})().includes(' x pp')", timeout=10_000)
        assert after["pipe_title"] != before
        info = page.locator(".jp-OutputArea-output .widget-html").filter(has_text="selected (ring")
        assert info.count() == 1, "the view's text does not name the selected point"
        screenshot(page, ARTIFACTS / "pareto_view_after_click.png")
        assert not page.evaluate(OUTPUT_ERRORS)

        # the keyboard alone: Tab from the front menu reaches the dominated menu; Space opens
        # it, an arrow key and Enter pick its first plan, which the ring, the linked pipeline
        # and the kernel follow. (A bare arrow key on a closed menu is JupyterLab's: in
        # command mode it moves to the next cell, for every dropdown in a notebook.)
        page.evaluate(f"() => ({SELECT})('front plan').focus()")
        page.keyboard.press("Tab")
        focused = page.evaluate(f"() => document.activeElement === ({SELECT})('dominated plan')")
        assert focused, "Tab from the front-plan menu does not reach the dominated-plan menu"
        before = after["pipe_title"]
        for key in ("Space", "ArrowDown", "Enter"):
            page.keyboard.press(key)
        want = page.evaluate(f"() => ({SELECT})('dominated plan').selectedIndex")
        assert want == 1, "an arrow key did not move the dominated-plan menu"
        page.wait_for_function(
            f"(b) => (({PLOT})(1).querySelector('.gtitle') || {{}}).textContent !== b",
            arg=before, timeout=30_000,
        )  # fmt: skip
        held = execute(page, "print(pareto.picked, pareto.controls['dominated'].value, "
                             "pareto.front.points[pareto.picked].on_front, "
                             "pipe.config == sel.training.config.replace("
                             "num_microbatches=None, recompute_num_layers=None))")  # fmt: skip
        assert held["status"] == "ok", held
        picked, menu_value, on_front, same = held["text"].split()
        assert picked == menu_value and on_front == "False" and same == "True", held
        page.wait_for_function(
            f"(j) => {{ const t = ({PLOT})(0).data[{SELECTED}]; "
            "return t.customdata && t.customdata.length === 1 && t.customdata[0] === j; }",
            arg=int(picked), timeout=30_000,
        )  # fmt: skip
        screenshot(page, ARTIFACTS / "pareto_view_after_keyboard.png")
        assert not page.evaluate(OUTPUT_ERRORS)
    finally:
        lab_page.close_current()
