"""The browser tier: real JupyterLab + Chromium (marked ``browser`` by ``tests/conftest.py``;
deselect with ``-m "not browser"``).

One JupyterLab server, one Chromium and one JupyterLab page (``lab_page``, where notebooks are
opened one at a time) for the whole tier, closed when the session leaves this folder (see
``_Shared`` and ``lab.py``). A start failure fails the test
with its reason, it never skips. ``page_log`` and ``screenshot`` come from ``pagelog.py``: a
failing test carries its page's console log, and a screenshot that only documents never fails
a test.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from lab import LabError, LabPage, chromium, jupyterlab
from pagelog import page_log, pytest_runtest_makereport  # noqa: F401  (fixture and hook)


class _Shared:
    """JupyterLab, Chromium and the lab page, opened on first use and closed as soon as the
    session leaves this folder (``pytest_runtest_teardown``), not at the session's end: a live
    Playwright keeps its event loop marked as running in the main thread, and the widget tests
    that run after this tier would find it (a ``Coalescer`` defers to a loop that never runs)."""

    def __init__(self) -> None:
        self.stack: ExitStack | None = None
        self.values: dict[str, object] = {}

    def get(self, key: str, open_it):
        if key not in self.values:
            if self.stack is None:
                self.stack = ExitStack()
            try:
                self.values[key] = open_it(self.stack)
            except LabError as e:
                pytest.fail(str(e), pytrace=False)
        return self.values[key]

    def close(self) -> None:
        stack, self.stack, self.values = self.stack, None, {}
        if stack is not None:
            stack.close()


_SHARED = _Shared()
_HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict:
    return _SHARED.get(
        "lab", lambda st: st.enter_context(jupyterlab(tmp_path_factory.mktemp("lab")))
    )


@pytest.fixture(scope="module")
def browser():
    return _SHARED.get("browser", lambda st: st.enter_context(chromium()))


@pytest.fixture(scope="module")
def lab_page(lab, browser) -> LabPage:
    def open_it(st: ExitStack) -> LabPage:
        p = LabPage(browser, lab)
        st.callback(p.close)
        return p

    return _SHARED.get("lab_page", open_it)


def pytest_runtest_teardown(item, nextitem):
    """Close the shared lab and browser once the next test is outside this folder (or none)."""
    if nextitem is None or _HERE not in Path(nextitem.path).parents:
        _SHARED.close()


def pytest_collection_modifyitems(items):
    """The tests that use the tour's page (``test_tour_*``) run right after the tour's own test,
    while its notebook is still the one open: the tour runs once."""
    tour = [i for i in items if i.name.startswith("test_tour_")]
    anchor = next((k for k, i in enumerate(items)
                   if i.name == "test_notebook_in_the_browser[01_tour.ipynb]"), None)  # fmt: skip
    if not tour or anchor is None:
        return
    rest = [i for i in items if not i.name.startswith("test_tour_")]
    k = rest.index(items[anchor]) + 1
    items[:] = rest[:k] + tour + rest[k:]
