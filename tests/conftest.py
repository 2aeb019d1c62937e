"""Test tiers by where a test lives, so nobody has to remember a marker.

- ``browser``: ``tests/browser/`` (JupyterLab + Chromium, and ``make explore``'s launch);
- ``notebook``: ``tests/test_notebooks.py`` (each notebook run top to bottom by nbclient);
- ``slow``: the files under ``TIERS["slow"]`` below (each takes tens of seconds: real engines, whole-zoo
  sweeps), named here with the reason.

``make test`` runs every tier; ``make test-fast`` (the inner loop) runs
``-m "not browser and not notebook and not slow"``. Add a file there rather than marking
tests one by one. Paths are relative to the repository root, with ``/``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).parents[1]

# No per-example deadline (hypothesis' default is 200 ms): on a loaded 2-core machine a slow
# example is not a bug, and the deadline made such runs flaky. HYPOTHESIS_PROFILE picks another.
settings.register_profile("explorer", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explorer"))

TIERS: dict[str, tuple[str, ...]] = {
    "browser": ("tests/browser/",),
    "notebook": ("tests/test_notebooks.py",),
    "slow": (),
}


def tier_of(path: Path) -> tuple[str, ...]:
    """The tiers a test file belongs to, from its path."""
    try:
        rel = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # outside the repository (pytester's inner sessions)
        return ()
    return tuple(tier for tier, prefixes in TIERS.items() if rel.startswith(prefixes))


def pytest_ignore_collect(collection_path: Path, config):
    """Conftests hold fixtures, not doctests. ``--doctest-modules`` would import each of them as
    a module named ``conftest``, which clashes with the one imported for another folder."""
    if collection_path.name == "conftest.py":
        return True
    return None


def pytest_collection_modifyitems(config, items):
    cache: dict[Path, tuple[str, ...]] = {}
    for item in items:
        path = Path(item.path)
        if path not in cache:
            cache[path] = tier_of(path)
        for tier in cache[path]:
            item.add_marker(tier)
            if tier == "browser":  # one worker runs a browser module: one lab, one Chromium
                item.add_marker(pytest.mark.xdist_group("browser"))
