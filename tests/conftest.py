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

from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

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
