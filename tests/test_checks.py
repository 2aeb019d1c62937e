"""explorer.checks: the shared "int, not bool, >= 1" argument checks."""

from __future__ import annotations

import ast
import pathlib
import re

import numpy as np
import pytest

from explorer import checks
from explorer.errors import ExplorerError
from explorer.hardware import HardwareError


class _AreaError(ExplorerError):
    """Stands for an area's own error class."""


INT_CHECKS = [
    (checks.positive_int, 1, "a positive int"),
    (checks.nonnegative_int, 0, "a non-negative int"),
]
NUMBER_CHECKS = [
    (checks.positive_number, "a positive finite number"),
    (checks.nonnegative_number, "a non-negative finite number"),
    (checks.fraction, "a number in [0, 1]"),
]


@pytest.mark.parametrize(("check", "low", "_"), INT_CHECKS)
def test_int_checks_accept_ints_from_their_minimum(check, low, _):
    for v in (low, low + 1, 10**12):
        out = check(v, "n", error=_AreaError)
        assert out == v and type(out) is int


@pytest.mark.parametrize(("check", "low", "requirement"), INT_CHECKS)
@pytest.mark.parametrize("bad", [True, False, 2.0, "3", None, np.float64(2.0)])
def test_int_checks_refuse_bools_floats_and_non_numbers(check, low, requirement, bad):
    with pytest.raises(_AreaError, match=re.escape(f"n must be {requirement}, got {bad!r}")):
        check(bad, "n", error=_AreaError)


@pytest.mark.parametrize(("check", "low", "requirement"), INT_CHECKS)
def test_int_checks_refuse_values_below_the_minimum(check, low, requirement):
    for bad in (low - 1, -5):
        with pytest.raises(_AreaError, match=f"must be {requirement}, got {bad}"):
            check(bad, "n", error=_AreaError)


@pytest.mark.parametrize(("check", "low", "_"), INT_CHECKS)
def test_numpy_integers_only_when_asked(check, low, _):
    v = np.int64(low + 2)
    with pytest.raises(_AreaError, match=r"np\.int64"):
        check(v, "n", error=_AreaError)
    out = check(v, "n", error=_AreaError, numpy=True)
    assert out == low + 2 and type(out) is int
    with pytest.raises(_AreaError):
        check(np.bool_(True), "n", error=_AreaError, numpy=True)


def test_int_at_least_names_its_bound():
    assert checks.int_at_least(2, 2, "count", error=_AreaError) == 2
    with pytest.raises(_AreaError, match=r"count must be an int >= 2, got 1"):
        checks.int_at_least(1, 2, "count", error=_AreaError)


@pytest.mark.parametrize(("check", "requirement"), NUMBER_CHECKS)
@pytest.mark.parametrize("bad", [True, "1", None, float("nan"), float("inf"), -1, -0.5])
def test_number_checks_refuse_bools_non_finite_and_negative(check, requirement, bad):
    with pytest.raises(_AreaError, match=re.escape(f"x must be {requirement}")):
        check(bad, "x", error=_AreaError)


@pytest.mark.parametrize(("check", "_"), NUMBER_CHECKS)
def test_number_checks_return_plain_floats(check, _):
    for v in (1, 0.25, np.float64(0.5)):
        out = check(v, "x", error=_AreaError)
        assert out == float(v) and type(out) is float
    with pytest.raises(_AreaError):
        check(np.float32(0.5), "x", error=_AreaError)
    assert check(np.float32(0.5), "x", error=_AreaError, numpy=True) == 0.5


def test_zero_and_one_at_the_bounds():
    with pytest.raises(_AreaError, match="positive finite number, got 0"):
        checks.positive_number(0, "x", error=_AreaError)
    assert checks.nonnegative_number(0, "x", error=_AreaError) == 0.0
    assert checks.fraction(0, "x", error=_AreaError) == 0.0
    assert checks.fraction(1, "x", error=_AreaError) == 1.0
    with pytest.raises(_AreaError, match=r"in \[0, 1\], got 1.01"):
        checks.fraction(1.01, "x", error=_AreaError)
    with pytest.raises(_AreaError, match=r"finite number >= 1, got 0.5"):
        checks.number_at_least(0.5, 1, "x", error=_AreaError)


def test_message_names_value_reason_and_fix():
    with pytest.raises(HardwareError) as info:
        checks.positive_int(0, "Cluster 'x': chips_per_node", error=HardwareError, fix="give 8")
    assert str(info.value) == "Cluster 'x': chips_per_node must be a positive int, got 0; give 8"
    assert type(info.value) is HardwareError


def test_predicates():
    assert checks.is_int(3) and not checks.is_int(True) and not checks.is_int(3.0)
    assert checks.is_int(3, minimum=1, maximum=3) and not checks.is_int(4, maximum=3)
    assert checks.is_int(np.int32(3), numpy=True) and not checks.is_int(np.int32(3))
    assert checks.is_number(2) and checks.is_number(2.5) and not checks.is_number(False)
    assert not checks.is_number(float("inf")) and checks.is_number(float("inf"), finite=False)
    assert not checks.is_number(float("nan"), finite=False)
    assert not checks.is_number(0, above=0) and checks.is_number(1e-9, above=0)


def test_checks_sit_on_the_bottom_floor():
    """explorer/checks.py imports only the standard library and explorer/errors.py."""
    path = pathlib.Path(checks.__file__)
    local = [
        node.module
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert local == ["errors"]
