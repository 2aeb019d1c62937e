"""The offline HTML report (``widgets.report.write_report``) in Debian's Chromium with the
network off: plotly draws every figure from the file alone. Screenshot:
``test-artifacts/report.png``.

The tour (01) in JupyterLab, its slider and its dashboard are checked on the page of its one
run, in ``test_notebooks_in_browser.py``.
"""

from __future__ import annotations

import pytest
from lab import ARTIFACTS, VIEWPORT
from pagelog import screenshot

pytestmark = pytest.mark.browser


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
