"""The browser tier's safety nets, without a browser: a fake page whose screenshot raises
Playwright's error, and a failing assertion whose report must carry the page's console log.
The cases run in an inner pytest session with ``pagelog`` as its plugin (the same fixture and
hook the browser tests get from ``conftest.py``)."""

from __future__ import annotations

FAKE_PAGE = '''
from playwright.sync_api import Error as PlaywrightError

from pagelog import ScreenshotWarning, screenshot


class Message:
    def __init__(self, type_, text):
        self.type, self.text = type_, text


class FakePage:
    """Enough of a Playwright page: handlers by event, and a screenshot that crashes."""

    def __init__(self):
        self.handlers = {}

    def on(self, event, handler):
        self.handlers.setdefault(event, []).append(handler)

    def emit(self, event, arg):
        for h in self.handlers.get(event, []):
            h(arg)

    def screenshot(self, path, **kwargs):
        raise PlaywrightError("Target crashed")


def _talking_page(page_log):
    page = page_log.watch(FakePage())
    page.emit("console", Message("log", "kernel idle"))
    page.emit("console", Message("error", "Uncaught TypeError: gd.data is undefined"))
    page.emit("pageerror", Exception("ResizeObserver loop limit exceeded"))
    page.emit("crash", page)
    return page
'''


CASES = """
from fake_page import FakePage, _talking_page
from pagelog import screenshot


def test_passes_with_a_crashed_screenshot(page_log, tmp_path):
    page = _talking_page(page_log)
    try:
        assert 1 + 1 == 2
    finally:
        assert screenshot(page, tmp_path / "last.png") is False


def test_fails_on_an_assertion(page_log):
    page = _talking_page(page_log)
    assert page.handlers == {}, "the plot never drew"


def test_fails_without_traceback(page_log):
    _talking_page(page_log)
    pytest.fail("JupyterLab did not answer", pytrace=False)


def test_passes_with_a_screenshot(tmp_path):
    class Fine(FakePage):
        def screenshot(self, path, **kwargs):
            open(path, "wb").write(b"png")

    assert screenshot(Fine(), tmp_path / "a.png") is True
    assert (tmp_path / "a.png").read_bytes() == b"png"
"""

LOG = [
    "console.log: kernel idle",
    "console.error: Uncaught TypeError: gd.data is undefined",
    "pageerror: ResizeObserver loop limit exceeded",
    "crash: the page's renderer crashed",
]


def test_screenshots_warn_and_failures_carry_the_page_log(pytester):
    """One inner session runs every case (each inner session costs seconds of start-up)."""
    pytester.makepyfile(fake_page=FAKE_PAGE, test_cases=CASES)
    result = pytester.runpytest("-p", "pagelog", "-W", "default::UserWarning")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    # A crashed screenshot that only documents: the test passes, with a warning.
    result.stdout.fnmatch_lines(
        ["*ScreenshotWarning: screenshot last.png not taken: Target crashed*"]
    )
    # Each failure carries the page's console log, in order, after its own message.
    failures = out.split("=== FAILURES ===")[1].split("warnings summary")[0]
    by_test = {name: failures.split(f"_ {name} _")[1].split("\n___")[0]
               for name in ("test_fails_on_an_assertion", "test_fails_without_traceback")}  # fmt: skip
    assert "the plot never drew" in by_test["test_fails_on_an_assertion"]
    assert "JupyterLab did not answer" in by_test["test_fails_without_traceback"]
    for name, text in by_test.items():
        assert "page console log" in text, (name, text)
        log = text.split("page console log")[1]
        positions = [log.find(line) for line in LOG]
        assert all(p >= 0 for p in positions) and positions == sorted(positions), (name, log)
    # A passing test shows no log.
    assert out.count("page console log") == 2
