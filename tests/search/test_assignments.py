"""``Planner.assignments``: the count exhaustive search checks against its limit (the cost
tuner marks the exhaustive method with it before anyone picks it)."""

import math

import pytest

import explorer as ex
from explorer.search import EXHAUSTIVE_LIMIT, Planner, SearchError


def test_assignments_is_the_count_exhaustive_search_refuses():
    # without layer reuse: with it, the search walks a smaller problem of one layer's copies
    g = ex.models.build(ex.models.load("gpt2"), batch=8, seq=128)
    planner = Planner(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"), reuse_layers=False)
    n = planner.assignments()
    assert n > EXHAUSTIVE_LIMIT
    with pytest.raises(SearchError) as e:
        planner.search("exhaustive")
    assert (f"{n:,}" if math.log10(n) < 15 else f"about 10^{math.log10(n):.0f}") in str(e.value)


def test_a_small_problem_is_within_the_limit():
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    planner = Planner(g, ex.Mesh({"tp": 2}))
    assert 1 <= planner.assignments() <= EXHAUSTIVE_LIMIT
    assert planner.search("exhaustive").status == "optimal"
