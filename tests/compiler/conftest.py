import numpy as np
import pytest

import explorer as ex


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def t(a, dtype=None):
    return ex.tensor(np.asarray(a), dtype)


@pytest.fixture(autouse=True, scope="session")
def _compile_cache_dir(tmp_path_factory):
    """ex.compile's disk cache in a directory of this test session, not the user's."""
    import os

    old = os.environ.get("EXPLORER_COMPILE_CACHE")
    os.environ["EXPLORER_COMPILE_CACHE"] = str(tmp_path_factory.mktemp("compile_cache"))
    yield
    if old is None:
        os.environ.pop("EXPLORER_COMPILE_CACHE", None)
    else:
        os.environ["EXPLORER_COMPILE_CACHE"] = old


@pytest.fixture(scope="session")
def load_bench_jit():
    """``load_bench_jit(name)``: bench/jit.py imported as module ``name`` (the bench is a
    script, not a package)."""
    return _load_bench_jit


def _load_bench_jit(name: str):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "bench" / "jit.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
