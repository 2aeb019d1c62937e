"""Test tiers by where a test lives, so nobody has to remember a marker.

- ``browser``: ``tests/browser/`` (JupyterLab + Chromium, and ``make explore``'s launch);
- ``slow``: the files under ``TIERS["slow"]`` below (tens of seconds each: real engines,
  whole-zoo sweeps), each with its measured time.

Each notebook runs once, in the browser tier (``tests/browser/test_notebooks_in_browser.py``
checks its outputs, widgets and claims); ``tests/test_notebooks.py`` holds its static checks.

``make test`` runs every tier; ``make test-fast`` (the inner loop) runs
``-m "not browser and not slow"``. Add a file there rather than marking
tests one by one. Paths are relative to the repository root, with ``/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).parents[1]

# No per-example deadline (hypothesis' default is 200 ms): on a loaded 2-core machine a slow
# example is not a bug, and the deadline made such runs flaky. HYPOTHESIS_PROFILE picks another.
settings.register_profile("explorer", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explorer"))

TIERS: dict[str, tuple[str, ...]] = {
    "browser": ("tests/browser/",),
    # Measured with -n 2 on a loaded 2-core machine (seconds of test time per file): real
    # torch / transformers models traced at full or tiny size, JAX and torchrun in
    # subprocesses, numba compiling kernels, fuzzing sweeps and the tiled-optimum search.
    "slow": (
        "tests/models/test_hf_architectures.py",  # 490 s, 67 tests: every architecture
        "tests/models/test_spmd_architectures_a.py",  # 96 s
        "tests/models/test_spmd_architectures_b.py",  # 166 s
        "tests/models/test_data_path_ops.py",  # 63 s
        "tests/models/test_traced_vs_built.py",  # 49 s
        "tests/models/test_repeat_layers.py",  # 38 s
        "tests/models/test_mask_index_ops.py",  # 28 s
        "tests/models/test_repeat_ops.py",  # 27 s
        "tests/models/test_published_sizes.py",  # 18 s
        "tests/models/test_from_torch.py",  # 18 s
        "tests/models/test_torch_mutation.py",  # 22 s: 10 torch.export traces
        "tests/models/test_phimoe.py",  # 14 s
        "tests/models/test_t5_buckets.py",  # 11 s
        "tests/models/test_moe_mla.py",  # 10 s
        "tests/search/test_rp_start.py",  # 17 s: traced architectures
        "tests/sharding/test_traced_moe_mla.py",  # 19 s
        "tests/export/test_jax.py",  # 142 s: 8 forced host devices in a subprocess
        "tests/export/test_dtensor.py",  # 102 s: torchrun
        "tests/export/test_torch_model_agrees.py",  # ~8 GB of memory
        "tests/compiler/test_codegen.py",  # 82 s: numba
        "tests/compiler/test_codegen_background.py",  # 34 s: numba
        "tests/compiler/test_kernel_accuracy.py",  # 18 s: numba
        "tests/compiler/test_torch_compile_archs.py",  # 31 transformers models traced
        "tests/search/test_repeats.py",  # 85 s
        "tests/fuzz/",  # 115 s
        "tests/traces/test_cpu_runs.py",  # 114 s: DDP and FSDP2 runs on 2 CPU processes, profiled
        # Measured on an idle 2-core machine with -n 2 (make test-fast was 3 min 16 s):
        "explorer/models/hf.py",  # 12 s: its doctest traces a model with torch
        "tests/training/test_published.py",  # 11 s setup + 5 s: every published row planned
        "tests/training/test_hetero.py",  # ~25 s: plans over pools
        "tests/training/test_replan_screen.py",  # ~10 s
        "tests/training/test_published_today.py",  # the 12 stack files loaded and planned
    ),
}


def tier_of(path: Path) -> tuple[str, ...]:
    """The tiers a test file or folder belongs to, from its path."""
    try:
        rel = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # outside the repository (pytester's inner sessions)
        return ()
    if path.is_dir():
        rel += "/"
    return tuple(tier for tier, prefixes in TIERS.items() if rel.startswith(prefixes))


def _deselected(config, tiers: tuple[str, ...]) -> bool:
    """True when ``-m`` names tiers only (``not browser and not slow``) and deselects a file of
    these tiers: then the file need not even be imported (torch, jax, transformers, ...)."""
    expr = config.option.markexpr
    if not expr or not tiers:
        return False
    words = set(expr.replace("(", " ").replace(")", " ").split()) - {"and", "or", "not"}
    if not words or not words <= set(TIERS):
        return False
    try:  # pytest's own -m parser; private, so any surprise keeps the file
        from _pytest.mark.expression import Expression

        return not Expression.compile(expr).evaluate(lambda name, **_kw: name in tiers)
    except Exception:  # noqa: BLE001
        return False


def pytest_ignore_collect(collection_path: Path, config):
    # Conftests hold fixtures, not doctests. ``--doctest-modules`` would import each of them as
    # a module named ``conftest``, which clashes with the one imported for another folder.
    if collection_path.name == "conftest.py":
        return True
    # `make test-fast`: the files of a deselected tier are not collected at all.
    if _deselected(config, tier_of(collection_path)):
        return True
    return None


def start_rank(path: Path) -> int:
    """Where a file's tests start in a run: the browser folder first, then the slow files in
    the order `TIERS` lists them (longest first), then everything else in collection order.
    Under xdist the longest pieces of work start first, so no worker is left with a long file
    at the end while the other idles."""
    try:
        rel = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return len(TIERS["slow"]) + 1
    if rel.startswith(TIERS["browser"]):
        return 0
    for i, prefix in enumerate(TIERS["slow"]):
        if rel.startswith(prefix):
            return 1 + i
    return len(TIERS["slow"]) + 1


def pytest_collection_modifyitems(config, items):
    """Mark each test with its file's tiers; order files by `start_rank` (a stable sort:
    tests keep their order within a file)."""
    cache: dict[Path, tuple[str, ...]] = {}
    rank: dict[Path, int] = {}
    for item in items:
        path = Path(item.path)
        if path not in cache:
            cache[path] = tier_of(path)
            rank[path] = start_rank(path)
        for tier in cache[path]:
            item.add_marker(tier)
    items.sort(key=lambda item: rank[Path(item.path)])


def pytest_xdist_make_scheduler(config, log):
    """``make test`` runs ``-n 2 --dist loadfile``: a file's tests run in order on one worker, as
    without xdist (module fixtures built once; tests that build on the state an earlier test
    left keep it). Here the whole ``tests/browser/`` folder counts as one file, so two
    Chromiums never share the two cores. (xdist's ``loadgroup`` does not group under pytest 9:
    it renames ``item._nodeid``, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # Hand out files in collection order (`start_rank`), not xdist's "most tests first".
    config.option.loadscopereorder = False

    class FileOrBrowserScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/browser/" if path.startswith("tests/browser/") else path

    return FileOrBrowserScheduling(config, log)
