"""The browser tier: real JupyterLab + Chromium (deselect with ``-m "not browser"``).

One JupyterLab server and one Chromium per test module (see ``lab.py``); a start failure
fails the test with its reason, it never skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lab import LabError, chromium, jupyterlab


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in Debian's Chromium")


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[dict]:
    try:
        with jupyterlab(tmp_path_factory.mktemp("lab")) as info:
            yield info
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    try:
        with chromium() as b:
            yield b
    except LabError as e:
        pytest.fail(str(e), pytrace=False)
