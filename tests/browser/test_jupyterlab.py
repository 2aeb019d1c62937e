"""The tour in a real browser: JupyterLab + Debian's Chromium driven by Playwright.

It proves what nbclient cannot: the plotly FigureWidgets and ipywidgets render in the page,
and a slider moved in the page reaches the kernel, re-plans and redraws a figure.

JupyterLab runs on 127.0.0.1 with a random token, isolated config dirs and a temporary root
holding a copy of the notebooks; every process started here is stopped at the end (the
server's process group and the kernels it started, SIGKILL after 10 s). Screenshots go to
``test-artifacts/``. Chromium is ``/usr/bin/chromium`` (``make test`` installs it with
apt-get); when it cannot start the test fails with the reason, it never skips.
"""

from __future__ import annotations

import json
import time

import pytest
from lab import (
    ARTIFACTS,
    NB,
    OUTPUT_ERRORS,
    PROMPTS,
    VIEWPORT,
    open_notebook,
    run_all,
)
from pagelog import screenshot

NOTEBOOK = "01_tour.ipynb"
RUN_ALL_TIMEOUT_S = 150.0
MIN_FIGURES = 5  # the tuner's cost bars, the graph, the mesh and its tensor and ring figures
TUNER_SLIDER = "Alpha (compute)"  # the human label of CostParams.alpha_compute

pytestmark = pytest.mark.browser


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


def test_tour_renders_and_a_tuner_slider_replans(lab, browser, page_log):
    ARTIFACTS.mkdir(exist_ok=True)
    timings = {"lab_start_s": round(lab["start_s"], 1)}
    page = page_log.watch(browser.new_page(viewport=VIEWPORT))
    page.set_default_timeout(30_000)
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    try:
        t0 = time.monotonic()
        open_notebook(page, lab, NOTEBOOK)
        timings["page_to_idle_kernel_s"] = round(time.monotonic() - t0, 1)
        timings["run_all_s"] = round(run_all(page, RUN_ALL_TIMEOUT_S), 1)
        assert _numbered(page.evaluate(PROMPTS))
        errors = page.evaluate(OUTPUT_ERRORS)
        assert not errors, f"{NOTEBOOK} raised in the browser's kernel: {errors}"

        t0 = time.monotonic()
        page.wait_for_function(FIGURES_RENDERED, arg=MIN_FIGURES, timeout=60_000)
        timings["figures_rendered_s"] = round(time.monotonic() - t0, 1)
        nplots = page.evaluate(f"() => {NB}.node.querySelectorAll('.js-plotly-plot').length")
        assert nplots >= MIN_FIGURES, f"only {nplots} plotly figures in the page"
        screenshot(page, ARTIFACTS / "tour_after_run.png")

        # Move the tuner's alpha_compute slider one step: focus the handle, ArrowRight.
        slider = page.locator(".jp-Notebook .widget-slider").filter(
            has=page.locator(".widget-label", has_text=TUNER_SLIDER)
        )  # fmt: skip
        assert slider.count() == 1, f"expected one {TUNER_SLIDER!r} slider, found {slider.count()}"
        handle = slider.locator(".noUi-handle")
        # the value with its unit sits beside the slider (the slider's own readout is off)
        readout = slider.locator("xpath=..").locator(".widget-html").first
        handle.scroll_into_view_if_needed()
        tuner_cell = page.locator(".jp-CodeCell").filter(has_text="CostTuner(small")
        tuner_box = tuner_cell.locator(".jp-OutputArea-output")
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
        timings["slider_to_redraw_s"] = round(time.monotonic() - t0, 2)
        after = handle.evaluate(TUNER_FIGURE)
        after_value = readout.inner_text()
        assert after_value != before_value, "the slider's readout did not move"
        assert after["y"] != before["y"], "the cost bars did not change after the re-plan"
        assert after["title"] != before["title"], "the cost figure's title did not change"
        assert "baseline" in after["title"], (
            f"title should compare with the baseline: {after['title']!r}"
        )
        screenshot(page, ARTIFACTS / "cost_tuner_after.png")
        if tuner_box.count():
            tuner_box.last.evaluate("el => el.scrollIntoView({block: 'start'})")
            time.sleep(0.5)
            screenshot(page, ARTIFACTS / "cost_tuner.png")
        # The dashboard (StrategyExplorer, the tour's last view) for the README.
        dash = page.locator(".jp-CodeCell").filter(has_text="StrategyExplorer(").last
        dash_out = dash.locator(".jp-OutputArea-output").last
        dash_out.evaluate("el => el.scrollIntoView({block: 'start'})")
        assert dash_out.locator(".js-plotly-plot").count() >= 1, "the dashboard drew no figure"
        time.sleep(0.5)
        screenshot(page, ARTIFACTS / "dashboard.png")

        # A bad value: its error shows next to its control, in the viewport, and the results
        # are marked stale until a valid re-plan (a user sees what failed and where).
        batch = dash_out.locator(".widget-text").filter(
            has=page.locator(".widget-label", has_text="Global batch")
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
    finally:
        screenshot(page, ARTIFACTS / "tour_last.png")
        (ARTIFACTS / "browser_timings.json").write_text(json.dumps(timings, indent=2))
        page.close()
    print("browser timings:", timings, "console errors:", console_errors[:5])


def test_html_report_draws_every_figure_offline(browser, tmp_path, page_log):
    """The report opens from a file with the network off and plotly draws all five figures."""
    from widgets.report import write_report

    ARTIFACTS.mkdir(exist_ok=True)
    path = tmp_path / "report.html"
    write_report(path, "gpt2", 4, global_batch=8, seq=256)
    context = browser.new_context(offline=True, viewport=VIEWPORT)
    page = page_log.watch(context.new_page())
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.as_uri())
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".filter(gd => gd.data && gd.data.length && gd.querySelector('.main-svg')).length === 5",
            timeout=30_000,
        )  # fmt: skip
        titles = page.evaluate(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))"
            ".map(t => t.textContent)"
        )  # fmt: skip
        assert any("gpt2" in t for t in titles), titles
        screenshot(page, ARTIFACTS / "report.png", full_page=False)
    finally:
        context.close()
    assert not errors, f"JavaScript errors in the report: {errors}"
