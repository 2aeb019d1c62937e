"""What the page said, attached to a browser test that fails; screenshots that only document.

- ``page_log`` (fixture): ``page_log.watch(page)`` collects the page's console messages, page
  errors and a renderer crash; when the test fails, they are added to its failure report as a
  "page console log" section (``pytest_runtest_makereport`` below), so a crash during an
  assertion says what the page printed before it.
- ``screenshot(page, path)``: a screenshot that only documents (the README's pictures, the
  last state in a ``finally:``). When Playwright cannot take it (the renderer crashed, the page
  closed) it warns with ``ScreenshotWarning`` and returns False; it never fails a test whose
  assertions passed.

Used as a plugin by ``conftest.py`` (and by ``test_pagelog.py``'s inner pytest runs).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

MAX_LINES = 200  # the last lines of a long log are the ones that tell


class ScreenshotWarning(UserWarning):
    """A documentation screenshot could not be taken; the test's verdict does not change."""


class PageLog:
    """Console messages, page errors and crashes of the pages it watches, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.crashed = False

    def watch(self, page):
        """Collect what ``page`` says from now on; returns the page."""
        page.on("console", lambda m: self.lines.append(f"console.{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.lines.append(f"pageerror: {e}"))
        page.on("crash", self._crash)
        return page

    def _crash(self, _page) -> None:
        self.crashed = True
        self.lines.append("crash: the page's renderer crashed")

    def text(self, limit: int = MAX_LINES) -> str:
        if not self.lines:
            return "(the page logged nothing)"
        cut = len(self.lines) - limit
        head = [f"... {cut} earlier lines left out"] if cut > 0 else []
        return "\n".join(head + self.lines[-limit:])

    def errors(self) -> list[str]:
        return [x for x in self.lines if x.startswith(("console.error", "pageerror", "crash"))]


def screenshot(page, path: Path | str, **kwargs) -> bool:
    """Take a screenshot that only documents; a Playwright error is a warning, not a failure."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        page.screenshot(path=str(path), **kwargs)
    except PlaywrightError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        warnings.warn(f"screenshot {Path(path).name} not taken: {first}", ScreenshotWarning,
                      stacklevel=2)  # fmt: skip
        return False
    return True


@pytest.fixture
def page_log(request) -> PageLog:
    log = PageLog()
    request.node.stash[_KEY] = log
    return log


_KEY = pytest.StashKey[PageLog]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    log = item.stash.get(_KEY, None)
    if log is None or not report.failed:
        return
    text = log.text()
    if hasattr(report.longrepr, "addsection"):  # shown with the traceback and in JUnit XML
        report.longrepr.addsection("page console log", text)
    elif isinstance(report.longrepr, str):  # pytest.fail(..., pytrace=False)
        report.longrepr += f"\n\npage console log:\n{text}"
    else:
        report.sections.append(("page console log", text))
