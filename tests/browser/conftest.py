"""The browser tier: real JupyterLab + Chromium (marked ``browser`` by ``tests/conftest.py``;
deselect with ``-m "not browser"``).

One JupyterLab server, one Chromium and one JupyterLab page (``lab_page``, where notebooks are
opened one at a time) for the whole session (see ``lab.py``). A start failure fails the test
with its reason, it never skips. ``page_log`` and ``screenshot`` come from ``pagelog.py``: a
failing test carries its page's console log, and a screenshot that only documents never fails
a test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lab import LabError, LabPage, chromium, jupyterlab
from pagelog import page_log, pytest_runtest_makereport  # noqa: F401  (fixture and hook)


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Iterator[dict]:
    try:
        with jupyterlab(tmp_path_factory.mktemp("lab")) as info:
            yield info
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def browser() -> Iterator:
    try:
        with chromium() as b:
            yield b
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def lab_page(lab, browser) -> Iterator[LabPage]:
    p = LabPage(browser, lab)
    yield p
    p.close()


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
