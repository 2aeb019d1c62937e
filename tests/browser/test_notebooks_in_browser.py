"""Every notebook, run once (JupyterLab's Run All) in a real JupyterLab + Chromium at 1440x900
with the file browser open, and what that one run shows.

What each notebook must show (``notebook_claims.py``), read from the page's notebook model:
- no cell has an error output and no output holds a traceback;
- the outputs contain the texts the notebook teaches and at least its number of widgets;
- for 01 and 02, a probe run in the same kernel after the last cell reads the titles of the
  views, whose numbers must equal the ones the notebook printed.

What the browser holds, not what Python holds (a figure can be whole in Python and empty in
Chromium):
- every plotly figure inside the displayed views is drawn, each visible one with at least one
  trace with data and at the width of its element (plots inside tabs are shown one tab at a
  time and checked too);
- no ``.widget-readout`` / ``.widget-label`` / button is cut (scrollWidth > clientWidth);
- no output scrolls sideways;
- one screenshot per view goes to ``test-artifacts/<notebook>-<k>.png`` (and
  ``<notebook>-last.png`` when the test fails), the seconds to open and to Run All each one to
  ``test-artifacts/browser_notebooks.json``.

The tour (01) is then used as a user would: a cost tuner slider moved in the page re-plans in
the kernel and redraws its figure, and the dashboard shows a bad value next to its control and
marks its results stale. These tests act on the page of 01's run (run again only when they are
selected without it); the screenshots ``tour_after_run``, ``cost_tuner*`` and ``dashboard*``
(the README's pictures) come from them, the timings to ``test-artifacts/browser_timings.json``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lab import (
    ARTIFACTS,
    CLIPPED,
    EXPECTED_PLOTS,
    NB,
    OUTPUT_ERRORS,
    OUTPUTS,
    PROMPTS,
    SIDEWAYS,
    VIEWPORT,
    execute,
    misfit_plots,
    run_all,
    wait_for_plots,
)
from notebook_claims import CLAIMS, check_claims, check_outputs, shown_by_probe
from pagelog import screenshot

pytestmark = pytest.mark.browser

NOTEBOOKS = sorted(p.name for p in (Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
TOUR = "01_tour.ipynb"
RUN_ALL_TIMEOUT_S = 300.0
TIMINGS: dict[str, dict[str, float]] = {}  # notebook -> seconds to open it, to Run All

# Each root widget view in an output (a view of ours is an ipywidgets box holding a plot).
VIEWS = f"""() => Array.from({NB}.node.querySelectorAll('.jp-OutputArea-output'))
  .map((o, i) => o.querySelector('.js-plotly-plot, .widget-slider, .widget-tab') ? i : -1)
  .filter(i => i >= 0)"""

TABS = f"""() => Array.from({NB}.node.querySelectorAll('.jp-OutputArea-output .lm-TabBar-tab'))
  .map((t, i) => ({{i, label: t.textContent.trim(),
                   current: t.classList.contains('lm-mod-current')}}))"""

TAB = ".jp-OutputArea-output .lm-TabBar-tab"
TAB_IN_VIEW = ".lm-TabBar-tab"


@dataclass
class Run:
    """One notebook opened in the session's JupyterLab page and run once."""

    name: str
    page: object = None
    timings: dict = field(default_factory=dict)
    failure: BaseException | None = None  # the run itself (open, Run All) failed


class Runs:
    """Each notebook runs once. Its page stays as the run left it until another notebook is
    opened, so the tests that act on a notebook after its own test (the tour's, ordered right
    after it by ``conftest.py``) use its run; one that finds its notebook closed (a test
    selected alone) runs it."""

    def __init__(self, lab_page) -> None:
        self.lab_page = lab_page
        self.runs: dict[str, Run] = {}

    def get(self, name: str, page_log) -> Run:
        page_log.lines = self.lab_page.log.lines  # the failure report shows the page's log
        run = self.runs.get(name)
        if run is None or (run.failure is None and self.lab_page.current != name):
            run = self.runs[name] = self._run(name)
        if run.failure is not None:
            raise run.failure
        return run

    def _run(self, name: str) -> Run:
        run = Run(name)
        t0 = time.monotonic()
        try:
            run.page = self.lab_page.open(name)
            run.timings["open_s"] = round(time.monotonic() - t0, 1)
            run.timings["run_all_s"] = round(run_all(run.page, RUN_ALL_TIMEOUT_S), 1)
        except Exception as e:  # noqa: BLE001  (kept: a later test on this run fails with it)
            run.failure = e
        return run


@pytest.fixture(scope="module")
def runs(lab_page):
    yield Runs(lab_page)
    lab_page.close_current()


def _watched(page_log, runs: Runs, name: str) -> Run:
    """The run of ``name``; the page's console is in the test's failure report."""
    try:
        return runs.get(name, page_log)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{name} did not run in the browser: {type(e).__name__}: {e}", pytrace=False)


def _anywidget_note(lab_page) -> str:
    """Why a plot may be stale, for a failure message: anywidget models that never started."""
    n = lab_page.anywidget_failures()
    return (f"\n({n} anywidget models of this notebook failed to start: their module did not "
            "load within anywidget's 2 s, and such a model drops every update from the kernel)"
            if n else "")  # fmt: skip


def _show_tab(page, i: int) -> list[dict]:
    """Click tab ``i`` of the page's tab bars; once the kernel has handled the click (a round
    trip through it after the click's message) and the page has drawn every figure the views
    now hold, return the plots."""
    page.locator(TAB).nth(i).click()
    page.wait_for_function(
        f"(i) => document.querySelectorAll('{TAB}')[i].classList.contains('lm-mod-current')",
        arg=i,
    )  # fmt: skip
    barrier = execute(page, "")
    assert barrier["status"] == "ok", barrier
    return wait_for_plots(page, page.evaluate(EXPECTED_PLOTS))


def _empty_plots(plots: list[dict]) -> list[dict]:
    return [p for p in plots if p["visible"] and p["with_data"] == 0]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_in_the_browser(runs, name, page_log):
    ARTIFACTS.mkdir(exist_ok=True)
    stem = name.removesuffix(".ipynb")
    passed = False
    try:
        run = _watched(page_log, runs, name)
        page = run.page
        TIMINGS[name] = dict(run.timings)

        # What it shows: the notebook model's outputs, and its views' titles from its kernel.
        text = check_outputs(name, page.evaluate(OUTPUTS))
        if name in CLAIMS:
            probe = execute(page, CLAIMS[name])
            assert probe["status"] == "ok", f"{name}: the claims probe failed: {probe}"
            check_claims(name, text, shown_by_probe(probe["text"]))

        # What the page draws: every figure of the displayed views.
        expected = page.evaluate(EXPECTED_PLOTS)
        plots = wait_for_plots(page, expected)
        why = _anywidget_note(runs.lab_page)
        assert len(plots) >= expected, (
            f"{name}: the views hold {expected} figures, the page drew {len(plots)}: {plots}{why}"
        )
        empty = _empty_plots(plots)
        assert not empty, f"{name}: plots drawn without data: {empty}{why}"
        narrow = misfit_plots(plots)
        assert not narrow, f"{name}: plots not drawn at their element's width: {narrow}{why}"

        # Plots inside tabs: show each tab, its plots must draw with data; then the tab first
        # shown is shown again (the page stays as Run All left it). A view may build a tab's
        # content in the kernel when it is first shown (StrategyExplorer does).
        tabs = page.evaluate(TABS)
        for tab in tabs:
            in_tab = _show_tab(page, tab["i"])
            why = _anywidget_note(runs.lab_page)
            empty = _empty_plots(in_tab)
            assert not empty, f"{name}, tab {tab['label']!r}: plots without data: {empty}{why}"
            narrow = misfit_plots(in_tab)
            assert not narrow, (
                f"{name}, tab {tab['label']!r}: plots not at full width: {narrow}{why}"
            )
            clipped = page.evaluate(CLIPPED)
            assert not clipped, f"{name}, tab {tab['label']!r}: cut text: {clipped}"
        for tab in tabs:
            if tab["current"]:
                _show_tab(page, tab["i"])
        page.mouse.move(0, VIEWPORT["height"] - 1)  # no hover (plotly's mode bar) in the pictures

        clipped = page.evaluate(CLIPPED)
        assert not clipped, f"{name}: readouts/labels/buttons cut at 1440x900: {clipped}"
        sideways = page.evaluate(SIDEWAYS)
        assert not sideways, f"{name}: outputs scroll sideways at 1440x900: {sideways}"

        # What a laptop shows with the view's top at the top of the notebook panel.
        outputs = page.locator(".jp-OutputArea-output")
        for k, i in enumerate(page.evaluate(VIEWS)):
            outputs.nth(i).evaluate("el => el.scrollIntoView({block: 'start'})")
            screenshot(page, ARTIFACTS / f"{stem}-{k}.png")
        passed = True
    finally:
        if not passed and runs.lab_page.current == name:
            screenshot(runs.lab_page.page, ARTIFACTS / f"{stem}-last.png")
        (ARTIFACTS / "browser_notebooks.json").write_text(json.dumps(TIMINGS, indent=2))


# --- the tour, used ------------------------------------------------------------------------
MIN_FIGURES = 5  # the tuner's cost bars, the graph, the mesh and its tensor and ring figures
TUNER_SLIDER = "Alpha (compute)"  # the human label of CostParams.alpha_compute

FIGURES_RENDERED = f"""(n) => {{
  const plots = Array.from({NB}.node.querySelectorAll('.js-plotly-plot'));
  const drawn = plots.filter(gd => gd.data && gd.data.length && gd.querySelector('.main-svg'));
  const sliders = {NB}.node.querySelectorAll('.widget-slider .noUi-handle').length;
  return drawn.length >= n && sliders > 0;
}}"""

# The cost figure sits in the same HBox as the tuner's sliders (controls left, figure right).
TUNER_FIGURE = """(handle) => {
  const box = handle.closest('.widget-hbox');
  const gd = box && box.querySelector('.js-plotly-plot');
  const title = gd && gd.querySelector('.gtitle');
  return {y: ((gd && gd.data) || []).map(t => Array.from(t.y || [])),
          title: title ? title.textContent : ''};
}"""


def _numbered(prompts: list[str]) -> bool:
    return bool(prompts) and all(p.strip("[]: ").isdigit() for p in prompts)


def _tour_page(runs: Runs, lab: dict, page_log):
    """The page of the tour's run, with every figure drawn."""
    ARTIFACTS.mkdir(exist_ok=True)
    run = _watched(page_log, runs, TOUR)
    page = run.page
    assert _numbered(page.evaluate(PROMPTS))
    errors = page.evaluate(OUTPUT_ERRORS)
    assert not errors, f"{TOUR} raised in the browser's kernel: {errors}"
    t0 = time.monotonic()
    page.wait_for_function(FIGURES_RENDERED, arg=MIN_FIGURES, timeout=60_000)
    run.timings["figures_rendered_s"] = round(time.monotonic() - t0, 1)
    nplots = page.evaluate(f"() => {NB}.node.querySelectorAll('.js-plotly-plot').length")
    assert nplots >= MIN_FIGURES, f"only {nplots} plotly figures in the page"
    run.timings["lab_start_s"] = round(lab["start_s"], 1)
    return run


def _write_timings(run: Run) -> None:
    (ARTIFACTS / "browser_timings.json").write_text(json.dumps(run.timings, indent=2))


def test_tour_a_tuner_slider_replans_and_redraws(runs, lab, page_log):
    """A slider of the tour's CostTuner moved in the page reaches the kernel, re-plans and
    redraws the cost figure, whose title then compares with the pinned baseline."""
    run = _tour_page(runs, lab, page_log)
    page = run.page
    try:
        page.evaluate(f"() => {{ const n = {NB}.content; (n.outerNode || n.node).scrollTop = 0; }}")
        screenshot(page, ARTIFACTS / "tour_after_run.png")

        # Move the tuner's alpha_compute slider one step: focus the handle, ArrowRight. (The
        # tuner's cell; the dashboard's "cost tuner" tab holds another once it was shown.)
        tuner_cell = page.locator(".jp-CodeCell").filter(has_text="CostTuner(small")
        tuner_box = tuner_cell.locator(".jp-OutputArea-output")
        slider = tuner_box.locator(".widget-slider").filter(
            has=page.locator(".widget-label", has_text=TUNER_SLIDER)
        )  # fmt: skip
        assert slider.count() == 1, f"expected one {TUNER_SLIDER!r} slider, found {slider.count()}"
        handle = slider.locator(".noUi-handle")
        # the value with its unit sits beside the slider (the slider's own readout is off)
        readout = slider.locator("xpath=..").locator(".widget-html").first
        handle.scroll_into_view_if_needed()
        before_value = readout.inner_text()
        try:  # plotly draws asynchronously after the widget view exists
            page.wait_for_function(f"(h) => ({TUNER_FIGURE})(h).y.some(y => y.length)",
                                   arg=handle.element_handle())  # fmt: skip
        except Exception:  # noqa: BLE001
            pytest.fail("the CostTuner's cost figure never drew its bars: "
                        f"{handle.evaluate(TUNER_FIGURE)}", pytrace=False)  # fmt: skip
        before = handle.evaluate(TUNER_FIGURE)
        screenshot(page, ARTIFACTS / "cost_tuner_before.png")
        t0 = time.monotonic()
        handle.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "([el, v]) => el.textContent.trim() !== v", arg=[readout.element_handle(),
                                                             before_value],
        )  # fmt: skip
        page.wait_for_function(
            f"""([h, b]) => {{
              const now = ({TUNER_FIGURE})(h);
              return JSON.stringify(now.y) !== JSON.stringify(b.y) || now.title !== b.title;
            }}""",
            arg=[handle.element_handle(), before],
            timeout=30_000,
        )  # fmt: skip
        run.timings["slider_to_redraw_s"] = round(time.monotonic() - t0, 2)
        after = handle.evaluate(TUNER_FIGURE)
        after_value = readout.inner_text()
        assert after_value != before_value, "the slider's readout did not move"
        assert after["y"] != before["y"], "the cost bars did not change after the re-plan"
        assert after["title"] != before["title"], "the cost figure's title did not change"
        assert "baseline" in after["title"], (
            f"title should compare with the baseline: {after['title']!r}"
        )
        screenshot(page, ARTIFACTS / "cost_tuner_after.png")
        assert tuner_box.count(), "the CostTuner's cell shows no output"
        tuner_box.last.evaluate("el => el.scrollIntoView({block: 'start'})")
        screenshot(page, ARTIFACTS / "cost_tuner.png")
    finally:
        _write_timings(run)


def test_tour_dashboard_shows_a_bad_value_next_to_its_control(runs, lab, page_log):
    """A bad value in the tour's dashboard (StrategyExplorer): its error shows next to its
    control, in the viewport, and the results are marked stale until a valid re-plan (a user
    sees what failed and where)."""
    run = _tour_page(runs, lab, page_log)
    page = run.page
    # The dashboard, the tour's last view, for the README.
    dash = page.locator(".jp-CodeCell").filter(has_text="StrategyExplorer(").last
    dash_out = dash.locator(".jp-OutputArea-output").last
    dash_out.evaluate("el => el.scrollIntoView({block: 'start'})")
    assert dash_out.locator(".js-plotly-plot").count() >= 1, "the dashboard drew no figure"
    screenshot(page, ARTIFACTS / "dashboard.png")

    # its own box, not the scaling tab's "global batch (0: auto)"
    batch = dash_out.locator(".widget-text").filter(
        has=page.locator(".widget-label", has_text=re.compile(r"^Global batch$"))
    ).locator("input")  # fmt: skip
    assert batch.count() == 1, "the dashboard's global batch box was not found"
    batch.scroll_into_view_if_needed()
    box = batch.bounding_box()  # the error line goes under the control, which stays put
    batch.fill("-5")
    batch.press("Enter")
    shown = """() => Array.from(document.querySelectorAll('.explorer-field-error'))
      .filter(e => e.offsetParent !== null && e.textContent.includes('-5'))
      .map(e => { const r = e.getBoundingClientRect();
                  return {y: r.y, height: r.height, text: e.textContent.trim()}; })"""
    page.wait_for_function(f"() => ({shown})().length > 0", timeout=30_000)
    err_box = page.evaluate(shown)[0]
    assert box is not None
    assert 0 <= err_box["y"] and err_box["y"] + err_box["height"] <= VIEWPORT["height"], (
        f"the error is outside the viewport: {err_box}"
    )
    assert 0 <= err_box["y"] - (box["y"] + box["height"]) < 120, (
        f"the error is not next to its control: control {box}, error {err_box}"
    )
    stale = page.evaluate(
        "() => Array.from(document.querySelectorAll('.explorer-stale'))"
        ".some(e => e.offsetParent !== null && e.textContent.includes('stale'))"
    )  # fmt: skip
    assert stale, "the results are not marked stale after a bad value"
    screenshot(page, ARTIFACTS / "dashboard_bad_value.png")


def test_tour_dashboard_replans_in_the_background_and_draws_the_new_plan(runs, lab, page_log):
    """A device count picked in the tour's dashboard: the kernel plans it in a thread (the
    change no longer holds the kernel for the plan), the page shows what is being planned,
    then the summary and the graph show the new plan; the pipeline tab, out of sight during
    the re-plan, draws the new plan when it is opened: its title in the page is the kernel's
    for the plan the core computed."""
    run = _tour_page(runs, lab, page_log)
    page = run.page
    dash = page.locator(".jp-CodeCell").filter(has_text="StrategyExplorer(").last
    # the output holding the dashboard (the bad-value test left an error's details, itself
    # an output area, inside it: the cell's last output element is now that one)
    out = dash.locator(".jp-OutputArea-output").filter(has=page.locator(TAB_IN_VIEW)).first
    batch = out.locator(".widget-text").filter(
        has=page.locator(".widget-label", has_text=re.compile(r"^Global batch$"))
    ).locator("input")  # fmt: skip
    if batch.count() == 1 and batch.input_value() != "256":  # the bad-value test left -5
        batch.fill("256")
        batch.press("Enter")
    out.evaluate("el => el.scrollIntoView({block: 'start'})")  # drawn when in view
    # the one menu offering 4096 devices (DEVICE_CHOICES)
    menu = (
        "el => Array.from(el.querySelectorAll('select')).findIndex(s => "
        "Array.from(s.options).some(o => o.textContent.trim() === '4096'))"
    )
    try:
        page.wait_for_function(f"el => ({menu})(el) >= 0", arg=out.element_handle(),
                               timeout=30_000)  # fmt: skip
    except Exception:  # noqa: BLE001  (the assertion below says what the output holds)
        pass
    k = out.evaluate(menu)
    assert k >= 0, "the dashboard's device menu was not found: " + str(
        out.evaluate("el => [el.className, el.querySelectorAll('select').length, "
                     "el.textContent.slice(0, 200)]")
    )  # fmt: skip
    devices = out.locator("select").nth(k)
    devices.scroll_into_view_if_needed()
    t0 = time.monotonic()
    devices.select_option(label="128")
    banner = """() => Array.from(document.querySelectorAll('.explorer-stale'))
      .some(e => e.offsetParent !== null && e.textContent.includes('planning'))"""
    try:  # the banner shows while the thread plans (a fast plan may end before we look)
        page.wait_for_function(banner, timeout=5_000, polling=50)
        screenshot(page, ARTIFACTS / "dashboard_planning.png")
    except Exception:  # noqa: BLE001
        pass
    summary = """() => Array.from(document.querySelectorAll('.jp-OutputArea-output .widget-html'))
      .some(e => e.offsetParent !== null && e.textContent.includes(' on 128 x ')
                 && e.textContent.includes('chosen'))"""
    page.wait_for_function(summary, timeout=120_000)  # the new plan's summary, not the banner
    run.timings["dashboard_replan_to_summary_s"] = round(time.monotonic() - t0, 2)
    probe = execute(page, "print(dash.plan.devices, dash.planning, dash.stale, "
                          "dash.views['graph'].plan is dash.sharding, dash.errors.last)")  # fmt: skip
    assert probe["status"] == "ok", probe
    assert probe["text"].split() == ["128", "False", "False", "True", "None"], probe
    screenshot(page, ARTIFACTS / "dashboard_replanned.png")
    tabs = page.evaluate(TABS)
    pipeline = next(t["i"] for t in tabs if t["label"] == "pipeline")
    plots = _show_tab(page, pipeline)
    assert not _empty_plots(plots), f"a plot of the pipeline tab is empty: {plots}"
    want = execute(page, "print(dash.views['pipeline'].figure.layout.title.text, '|', "
                         "dash.views['pipeline'].sim.config == dash.plan.sim.config)")  # fmt: skip
    title, same = (x.strip() for x in want["text"].rsplit("|", 1))
    assert same == "True", want
    drawn = page.evaluate(
        "() => Array.from(document.querySelectorAll('.jp-OutputArea-output .js-plotly-plot'))"
        ".filter(p => p.offsetParent !== null).map(p => p.layout && p.layout.title && "
        "(p.layout.title.text || p.layout.title))"
    )  # fmt: skip
    assert title in drawn, (title, drawn)
    out.evaluate("el => el.scrollIntoView({block: 'start'})")
    screenshot(page, ARTIFACTS / "dashboard_replanned_pipeline.png")
    _show_tab(page, next(t["i"] for t in tabs if t["label"] == "graph"))
    _write_timings(run)


REPAIR_CELL = """import plotly.graph_objects as go
import ipywidgets as ipw
from widgets import View
from widgets.figure_widget import FigureWidget

class Demo(View):
    def __init__(self):
        super().__init__()
        self.figure = FigureWidget(go.Figure())
        self._layout_children(ipw.HTML("demo"), self.figure)

demo = Demo()
# Data that reached Python but never the page: what a first Run All sometimes leaves behind.
demo.figure._data.append(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]).to_plotly_json())
demo.figure._data_objs = ()
demo"""


def test_a_plot_the_page_drew_empty_is_repaired(lab, lab_page, page_log):
    """The page reports a plot drawn without data and the view re-sends it (widgets/fit.py)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(REPAIR_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}  # fmt: skip
    nbformat.write(nb, lab["root"] / "repair_check.ipynb")
    page_log.lines = lab_page.log.lines
    try:
        page = lab_page.open("repair_check.ipynb")
        repairs = "() => window.__explorerRepairs || 0"
        before = page.evaluate(repairs)  # the page is shared: count this notebook's
        run_all(page, 120)
        assert not page.evaluate(OUTPUT_ERRORS)
        plots = wait_for_plots(page, 1, 30)
        assert len(plots) == 1 and plots[0]["with_data"] == 1, plots
        assert page.evaluate(repairs) - before == 1
    finally:
        lab_page.close_current()
