"""The browser tier: real JupyterLab + Chromium (marked ``browser`` by ``tests/conftest.py``;
deselect with ``-m "not browser"``).

One JupyterLab server and one Chromium for the whole session (see ``lab.py``); each test opens
its own browser context. A start failure fails the test with its reason, it never skips.
``page_log`` and ``screenshot`` come from ``pagelog.py``: a failing test carries its page's
console log, and a screenshot that only documents never fails a test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lab import LabError, chromium, jupyterlab
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
