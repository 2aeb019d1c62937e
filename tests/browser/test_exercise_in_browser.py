"""The exercise widget and the rank map in a real JupyterLab + Chromium at 1440x900, driven
with the keyboard and the mouse as a learner would.

What the page holds, not what Python holds: text typed into the answer box and Enter reach the
kernel's checker and the verdict it draws (a cross and the explanation of the typical slip; a
tick for the right answer); a word that is not a number is reported beside the box; Tab moves
from the box to "check", "hint" and "show answer", and Enter on a focused button presses it.
The rank map draws every GPU labelled with its rank and group, its "groups" buttons redraw
it. Nothing is cut, nothing scrolls sideways. Screenshot: ``test-artifacts/exercise.png``.
"""

from __future__ import annotations

import pytest
from lab import ARTIFACTS, CLIPPED, NB, OUTPUT_ERRORS, SIDEWAYS, run_all, wait_for_plots
from pagelog import screenshot

from explorer.teach import kinds

pytestmark = pytest.mark.browser

MIB = 2**20
QUESTION = kinds.collective_bytes("all-reduce", 64 * MIB, 8)
ONCE = next(m for m in QUESTION.mistakes if m.name == "counted the all-reduce once")

CELLS = [
    """import explorer as ex
from widgets import ExerciseWidget, RankMapView

question = ex.teach.kinds.collective_bytes("all-reduce", 64 * 2**20, 8)
ExerciseWidget(question)""",
    'RankMapView(dp=2, tp=4, pp=2, axis="pp", rank=5)',
]

BOX = f"{NB}.node.querySelector('.explorer-exercise-answer input')"
TEXT = f"""(cls) => ({NB}.node.querySelector('.' + cls) || {{}}).textContent || ''"""
FOCUSED = "() => (document.activeElement || {}).textContent || ''"
PLOT = f"{NB}.node.querySelector('.jp-OutputArea-output .js-plotly-plot')"
LABELS = f"""() => Array.from({PLOT}.querySelectorAll('.scatterlayer .textpoint'))
  .map(t => t.textContent)"""
TITLE = f"() => ({PLOT}.querySelector('.gtitle') || {{}}).textContent || ''"


def _type(page, text: str) -> None:
    box = page.locator("css=.jp-OutputArea-output .explorer-exercise-answer input").first
    box.click()
    box.fill("")
    box.type(text)
    box.press("Enter")


def test_a_learner_types_checks_and_tabs_through_the_exercise(lab, lab_page, page_log):
    import nbformat

    ARTIFACTS.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}  # fmt: skip
    nbformat.write(nb, lab["root"] / "exercise_check.ipynb")
    page_log.lines = lab_page.log.lines
    try:
        page = lab_page.open("exercise_check.ipynb")
        run_all(page, 180)
        assert not page.evaluate(OUTPUT_ERRORS)
        page.wait_for_function(f"() => !!{BOX}", timeout=30_000)

        # a word: the reason shows beside the box, no verdict
        _type(page, "lots")
        page.wait_for_function(
            f"() => ({TEXT})('explorer-exercise-error').includes('not a number')", timeout=15_000
        )
        assert page.evaluate(TEXT, "explorer-exercise-verdict") == ""

        # the typical slip: a cross and why
        _type(page, QUESTION.format_value(float(ONCE.value)).split()[0])
        page.wait_for_function(
            f"() => ({TEXT})('explorer-exercise-verdict').includes('counted the all-reduce once')",
            timeout=15_000,
        )  # fmt: skip
        verdict = page.evaluate(TEXT, "explorer-exercise-verdict")
        assert "\u2717" in verdict and ONCE.why in verdict
        assert page.evaluate(TEXT, "explorer-exercise-error") == ""

        # the right answer, then the mouse on "check": a tick
        box = page.locator(".jp-OutputArea-output .explorer-exercise-answer input").first
        box.fill(QUESTION.answer_text.split()[0])
        page.locator(".jp-OutputArea-output button", has_text="check").first.click()
        page.wait_for_function(
            f"() => ({TEXT})('explorer-exercise-verdict').startsWith('\u2713')", timeout=15_000
        )  # fmt: skip

        # keyboard: Tab from the box reaches check, hint, show answer; Enter presses
        box.focus()
        order = []
        for _ in range(3):
            page.keyboard.press("Tab")
            order.append(page.evaluate(FOCUSED).strip())
        assert order == ["check", "hint", "show answer"], order
        page.keyboard.press("Enter")  # on "show answer"
        page.wait_for_function(
            f"() => {NB}.node.querySelector('.explorer-exercise').textContent"
            f".includes({QUESTION.worked!r})", timeout=15_000,
        )  # fmt: skip

        # the rank map: every GPU labelled with its rank and pipeline group
        plots = wait_for_plots(page, 1)
        assert plots and plots[0]["with_data"] > 0, plots
        labels = page.evaluate(LABELS)
        assert len(labels) == 16 and "r5pp 5" in labels and "r13pp 5" in labels, labels
        page.locator(
            ".jp-OutputArea-output .widget-toggle-buttons button", has_text="dp"
        ).first.click()
        page.wait_for_function(f"() => ({TITLE})().includes('dp groups')", timeout=15_000)
        assert not page.evaluate(CLIPPED), page.evaluate(CLIPPED)
        assert not page.evaluate(SIDEWAYS), page.evaluate(SIDEWAYS)
        screenshot(page, ARTIFACTS / "exercise.png")
        assert not page.evaluate(OUTPUT_ERRORS)
    finally:
        lab_page.close_current()
