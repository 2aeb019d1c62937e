"""The Pareto helpers name a bad argument of the types their signatures give (they raised
TypeError, ValueError and AttributeError)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.training.errors import ParetoError
from explorer.training.planning.pareto import (
    dominates,
    job_price_per_hour,
    pareto_front,
    pareto_split,
)


@pytest.mark.parametrize("call, why", [
    (lambda: job_price_per_hour("x", 3), "price_per_chip_hour='x'"),
    (lambda: job_price_per_hour(1.0, "8"), "devices='8'"),
    (lambda: dominates([1], [1, 2]), "a has 1 objective values and b 2"),
    (lambda: dominates(3, 4), "a=3"),
    (lambda: dominates([1, float("nan")], [1, 2]), "finite objective values"),
    (lambda: pareto_front([1, 2]), "results holds 1"),
    (lambda: pareto_front(None), "results=None"),
    (lambda: pareto_split([[1, 2], [2]]), "array of numbers"),
    (lambda: pareto_split("x"), "array of numbers"),
])  # fmt: skip
def test_bad_arguments_are_named(call, why):
    with pytest.raises(ParetoError, match=why):
        call()


def test_numpy_numbers_are_numbers():
    assert dominates(np.array([1.0, 2.0]), (1, 3)) is True
    assert job_price_per_hour(np.float32(2), np.int64(4)) == 8.0
